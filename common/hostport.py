"""`host:port` addresses, as the overlay, the bulk channel and the config files write them.

A module of its own so that pure code (discovery, configuration models) can parse addresses
without importing a driver."""

from __future__ import annotations

_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def parse_config_address(addr: str) -> tuple[str, int]:
    """parse_address for an address an admin writes: the host an IPv4 address or a DNS name
    (a space, brackets or an IPv6 address passed, and failed only when the daemon sent to it)."""
    host, port = parse_address(addr)
    if not set(host) <= _HOST_CHARS:
        raise ValueError(f"{addr!r} is not host:port (an IPv4 address or a DNS name, and a port)")
    return host, port


def parse_address(addr: str) -> tuple[str, int]:
    """'host:port' (IPv4 or a name) as a socket address; ValueError names the bad text."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{addr!r} is not host:port")
    return host, int(port)
