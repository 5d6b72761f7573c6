"""HTCondor's daemon addresses, read in one place.

A daemon says where it listens in a "sinful string": `<10.0.0.5:9618?addrs=10.0.0.5-9618&alias=cm>`
(an address file, an ad's `MyAddress`, `_condor_SCHEDD_ADDRESS_FILE`). The host comes before the
last `:` of the part ahead of `?`; an IPv6 host is in brackets (`<[fd00::5]:9618>`). Pure
string work, no bindings: any module may use it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class SinfulAddress:
    """The host and port of a sinful string; `host` is a name or an IP address (IPv6 without
    its brackets)."""

    host: str
    port: int | None

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The host as an IP address; None when it is a name."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


def parse_sinful(text: str | None) -> SinfulAddress | None:
    """'<10.0.0.5:9618?addrs=...>' (or '10.0.0.5:9618') as host and port; None when there is no
    `host:port` in it. A port that is not a number is None."""
    if not text:
        return None
    inner = text.strip().removeprefix("<").removesuffix(">").split("?", 1)[0]
    host, sep, port = inner.rpartition(":")
    if not sep or not host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return SinfulAddress(host, int(port) if port.isdigit() else None)


def sinful_host(text: str | None) -> str | None:
    """The host of a sinful string ('10.0.0.5' from '<10.0.0.5:9618?addrs=...>'), or None."""
    address = parse_sinful(text)
    return address.host if address is not None else None
