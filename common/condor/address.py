"""HTCondor's sinful strings (`<10.0.0.5:9618?addrs=...&alias=...>`): the host part of a
daemon's address, as poolD and llic need it."""

from __future__ import annotations


def sinful_host(address: str | None) -> str | None:
    """The host of a sinful string such as '<10.0.0.5:9618?addrs=...>' (None if there is none)."""
    if not address:
        return None
    inner = address.strip("<>").split("?", 1)[0]
    return inner.rpartition(":")[0] or None
