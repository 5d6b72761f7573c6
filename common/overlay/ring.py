"""The `[ring]` section of poolD's and faultD's config: how a daemon joins its ring.

Apart from the driver, so that configuration models load without the trio driver."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from common.config import ConfigError, StrictModel
from common.hostport import parse_address
from common.overlay.auth import KeyFileError, load_ring_key
from common.overlay.ids import node_id_from_name, parse_id
from common.overlay.node import OverlayParams


class RingConfig(StrictModel):
    """How a daemon joins its ring: the `[ring]` section of poolD's and faultD's config."""

    node_name: str = Field(
        description="stable name of this node; its id is SHA-1(name) unless node_id is given"
    )
    node_id: str | None = Field(None, description="explicit 128-bit id in hex")
    bind: str = "0.0.0.0"
    port: int = Field(7640, ge=0, lt=65536)
    advertise: str | None = Field(None, description="host:port others reach us at; default bind:port")
    bootstrap: str | None = Field(None, description="host:port of any ring member; none founds a ring")
    key_file: Path = Field(description="the ring's shared key (hex), readable only by the daemon's user")
    replay_window: float = Field(30.0, gt=0, description="seconds a message's timestamp may be off")
    overlay: OverlayParams = OverlayParams()

    @field_validator("node_id")
    @classmethod
    def _hex_id(cls, value: str | None) -> str | None:
        if value is not None:
            parse_id(value)
        return value

    @field_validator("advertise", "bootstrap")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_address(value)
        return value

    def identity(self) -> int:
        """This node's 128-bit id: `node_id` if given, else derived from `node_name`."""
        return parse_id(self.node_id) if self.node_id else node_id_from_name(self.node_name)

    def check_key(self, config_path: Path) -> None:
        """A daemon's config is only good with a usable key: report it as a config error."""
        try:
            load_ring_key(self.key_file)
        except KeyFileError as e:
            raise ConfigError(f"{config_path}: ring.key_file: {e}") from None
