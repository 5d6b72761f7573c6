"""`host:port` addresses, as the overlay, the bulk channel and the config files write them.

A module of its own so that pure code (discovery, configuration models) can parse addresses
without importing a driver."""

from __future__ import annotations

import re

_CONFIG_ADDRESS = re.compile(r"[A-Za-z0-9._-]{1,253}:[0-9]{1,5}")


def parse_config_address(addr: str) -> tuple[str, int]:
    """parse_address for an address an admin writes: the host an IPv4 address or a DNS name
    without a trailing dot, as peers' messages carry it (a space, brackets, an IPv6 address or
    other digits passed, and failed only when the daemon started or sent to it; a trailing
    dot's datagrams were dropped by their receiver, whose certificate names it without)."""
    if not _CONFIG_ADDRESS.fullmatch(addr):
        raise ValueError(f"{addr!r} is not host:port (an IPv4 address or a DNS name, and a port)")
    host, port = parse_address(addr)
    if host.endswith("."):
        raise ValueError(f"{addr!r}: write the host without its trailing dot")
    return host, port


def parse_address(addr: str) -> tuple[str, int]:
    """'host:port' (IPv4 or a name) as a socket address; ValueError names the bad text."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{addr!r} is not host:port")
    return host, int(port)
