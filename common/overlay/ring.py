"""The `[ring]` section of poolD's and faultD's config: how a daemon joins its ring, and the key
material it proves who it is with (common.overlay.certs).

Apart from the driver, so that configuration models load without the trio driver."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from common.config import ConfigError, StrictModel
from common.hostport import parse_address, parse_config_address
from common.overlay.auth import KeyFileError, load_ring_key
from common.overlay.certs import CertificateError
from common.overlay.identity import IdentityFiles, NodeIdentity, load_identity
from common.overlay.ids import id_hex, node_id_from_name, parse_id
from common.overlay.node import OverlayParams

MAX_SEEDS = 32
"""Seeds a node may name: a handful of long-lived members (central managers) is what seeds are;
each costs a joiner one join retry while it is down."""


class RingConfig(StrictModel):
    """How a daemon joins its ring: the `[ring]` section of poolD's and faultD's config."""

    node_name: str = Field(
        description="stable name of this node; its id is SHA-1(name) unless node_id is given"
    )
    node_id: str | None = Field(None, description="explicit 128-bit id in hex")
    bind: str = "0.0.0.0"
    port: int = Field(7640, ge=0, lt=65536)
    advertise: str | None = Field(None, description="host:port others reach us at; default bind:port")
    bootstrap: list[str] | None = Field(
        None,
        description=(
            "host:port of any ring member, or a list of them (seeds, tried in turn); none, or only "
            "our own advertised address, founds a ring"
        ),
    )
    key_file: Path = Field(description="the ring's shared key (hex), readable only by the daemon's user")
    node_key_file: Path | None = Field(
        None, description="this node's private key; default node.key beside key_file"
    )
    node_cert_file: Path | None = Field(
        None, description="this node's certificate; default node.cert beside key_file"
    )
    ca_file: Path | None = Field(None, description="the ring CA's public key; default ca.pub beside key_file")
    revoked_file: Path | None = Field(None, description="serials of revoked certificates, one per line")
    replay_window: float = Field(30.0, gt=0, description="seconds a message's timestamp may be off")
    overlay: OverlayParams = OverlayParams()

    @field_validator("node_id")
    @classmethod
    def _hex_id(cls, value: str | None) -> str | None:
        if value is not None:
            parse_id(value)
        return value

    @field_validator("advertise")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_config_address(value)
        return value

    @field_validator("bootstrap", mode="before")
    @classmethod
    def _one_seed(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value  # `bootstrap = "host:port"`

    @field_validator("bootstrap")
    @classmethod
    def _seeds(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not 0 < len(value) <= MAX_SEEDS:
                raise ValueError(f"give 1 to {MAX_SEEDS} seeds, not {len(value)}")
            for i, seed in enumerate(value):
                try:
                    parse_config_address(seed)
                except ValueError as e:
                    raise ValueError(f"seed {i + 1}: {e}" if len(value) > 1 else str(e)) from None
        return value

    def seeds(self) -> list[str]:
        """The addresses `bootstrap` names, in order (none: this node founds a ring)."""
        return list(self.bootstrap or ())

    def identity(self) -> int:
        """This node's 128-bit id: `node_id` if given, else derived from `node_name`."""
        return parse_id(self.node_id) if self.node_id else node_id_from_name(self.node_name)

    def identity_files(self) -> IdentityFiles:
        """Where this node's key, certificate, CA key and revocation list are."""
        here = self.key_file.parent
        return IdentityFiles(
            node_key=self.node_key_file or here / "node.key",
            node_cert=self.node_cert_file or here / "node.cert",
            ca=self.ca_file or here / "ca.pub",
            revoked=self.revoked_file,
        )

    def load_identity(self, *, same_pool: bool = False) -> NodeIdentity:
        """This node's identity, checked against this section (ConfigError naming file and key)."""
        try:
            identity = load_identity(self.identity_files(), same_pool=same_pool)
        except (KeyFileError, CertificateError) as e:
            raise ConfigError(f"ring: {e} (see 'keys' in the README's install steps)") from None
        cert = identity.cert
        if cert.node_name != self.node_name:
            raise ConfigError(
                f"ring.node_name: {self.node_name!r}, but the certificate is for {cert.node_name!r}"
            )
        if cert.node_id != self.identity():
            theirs, ours = id_hex(cert.node_id), id_hex(self.identity())
            raise ConfigError(f"ring: the certificate's node id {theirs} is not this node's {ours}")
        host = parse_address(self.advertise)[0] if self.advertise else self.bind
        if host != "0.0.0.0" and not cert.allows_host(host):
            listed = ", ".join(cert.hosts)
            raise ConfigError(
                f"ring: this node speaks from {host}, which its certificate does not list ({listed})"
            )
        return identity

    def check_key(self, config_path: Path, *, same_pool: bool = False) -> NodeIdentity:
        """A daemon's config is only good with a usable ring key and identity: report either as
        a config error naming the config file and the key file."""
        try:
            load_ring_key(self.key_file)
        except KeyFileError as e:
            raise ConfigError(f"{config_path}: ring.key_file: {e}") from None
        try:
            return self.load_identity(same_pool=same_pool)
        except ConfigError as e:
            raise ConfigError(f"{config_path}: {e}") from None
