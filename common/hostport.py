"""`host:port` addresses, as the overlay, the bulk channel and the config files write them.

A module of its own so that pure code (discovery, configuration models) can parse addresses
without importing a driver."""

from __future__ import annotations


def parse_address(addr: str) -> tuple[str, int]:
    """'host:port' (IPv4 or a name) as a socket address; ValueError names the bad text."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{addr!r} is not host:port")
    return host, int(port)
