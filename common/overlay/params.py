"""The overlay's protocol parameters (the `[overlay]` section of a daemon's config).

A module of their own, apart from the core (common.overlay.node, which re-exports them): a
pydantic model with validators stays interpreted when the core is compiled for the simulator
(docs/bench/build_compiled_sim.sh)."""

from __future__ import annotations

from pydantic import Field, field_validator

from common.config import StrictModel
from common.overlay.messages import MAX_LEAF_SET


class OverlayParams(StrictModel):
    """Protocol parameters; the `[overlay]` section of a daemon's config."""

    b: int = Field(4, description="bits per digit: rows of 2^b columns")
    leaf_set_size: int = Field(16, ge=2, le=MAX_LEAF_SET, description="l: l/2 neighbours on each side")
    keepalive_interval: float = Field(10.0, gt=0, description="heartbeats to our smaller neighbour")
    leaf_timeout: float = Field(15.0, gt=0, description="silence after which our larger neighbour is probed")
    probe_timeout: float = Field(3.0, gt=0)
    table_probe_interval: float = Field(
        300.0, gt=0, description="silence after which a table entry we send to is probed"
    )
    row_maintenance_interval: float = Field(60.0, gt=0)
    leaf_exchange_interval: float = Field(60.0, gt=0)
    max_backoff: int = Field(8, ge=1, description="adaptive intervals grow up to this many times")
    hop_timeout: float = Field(1.0, gt=0, description="wait for a routed message's per-hop ack")
    max_reroutes: int = Field(4, ge=0, description="hops tried around silent nodes before giving up")
    join_retry: float = Field(5.0, gt=0)
    dead_memory: float = Field(120.0, gt=0)
    revive_interval: float = Field(30.0, gt=0, description="how often a departed node is probed again")
    departed_memory: int = Field(64, ge=0, description="how many departed nodes are remembered for that")
    recent_peers: int = Field(
        512, ge=0, description="RTTs and last-heard times kept for nodes outside leaf set and table"
    )

    @field_validator("b")
    @classmethod
    def _digit_bits(cls, value: int) -> int:
        if value not in (1, 2, 4, 8):
            raise ValueError("b must be 1, 2, 4 or 8 (a digit width dividing 128)")
        return value

    @field_validator("leaf_set_size")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("the leaf set size must be even (l/2 on each side)")
        return value
