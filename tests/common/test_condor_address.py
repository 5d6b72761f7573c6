"""common.condor.address: the host and port of HTCondor's sinful strings."""

from __future__ import annotations

import ipaddress

from common.condor.address import SinfulAddress, parse_sinful, sinful_host


def test_sinful_strings_as_daemons_write_them() -> None:
    full = "<10.213.2.10:38399?addrs=10.213.2.10-38399&alias=cm&noUDP&sock=schedd_1_2>"
    assert parse_sinful(full) == SinfulAddress("10.213.2.10", 38399)
    assert parse_sinful(full).ip == ipaddress.ip_address("10.213.2.10")  # type: ignore[union-attr]
    assert parse_sinful("<cm.example:9618>") == SinfulAddress("cm.example", 9618)
    assert parse_sinful("<cm.example:9618>").ip is None  # type: ignore[union-attr]
    assert parse_sinful("<[fd00::5]:9618?addrs=[fd00::5]-9618>") == SinfulAddress("fd00::5", 9618)
    assert parse_sinful(" 10.0.0.5:9618 ") == SinfulAddress("10.0.0.5", 9618)  # no brackets


def test_what_has_no_host_and_port() -> None:
    for text in (None, "", "<>", "cm.example", "<:9618>"):
        assert parse_sinful(text) is None, text
        assert sinful_host(text) is None
    assert parse_sinful("<cm:port>") == SinfulAddress("cm", None)
    assert sinful_host("<10.0.0.5:9618?addrs=10.0.0.5-9618>") == "10.0.0.5"
