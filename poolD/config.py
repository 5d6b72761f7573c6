"""poold's configuration file (TOML); common/deploy_files/config/poold.toml documents every key.

`[pool] collector` defaults to HTCondor's COLLECTOR_HOST (the central manager's own configuration,
read through the gateway: `with_condor_values`); set in the file, it overrides."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator

from common.cli import DaemonSection
from common.condor_defaults import collector_address, require
from common.config import ConfigError, StrictModel
from common.hostport import parse_address
from common.overlay.ring import RingConfig
from poolD.messages import HOST_PORT, POOL_NAME, TRUST_DOMAIN


def check_collector(value: str) -> None:
    """ValueError unless `value` is a collector our messages can carry: host:port with a name or
    an IPv4 address (messages.HOST_PORT; an IPv6 address, `[2001:db8::1]:9618`, is not)."""
    parse_address(value)
    if not re.fullmatch(HOST_PORT, value):
        raise ValueError(
            "poold's messages carry a host name or an IPv4 address with a port "
            "(letters, digits, '.', '-', '_'), not an IPv6 address: name the collector so"
        )


class PoolSection(StrictModel):
    """The `[pool]` section of poold's config: the pool this poold serves."""

    name: str = Field(pattern=POOL_NAME, description="this pool's name, unique in the federation")
    collector: str | None = Field(
        None,
        description="host:port of this pool's collector, as other pools reach it (default: "
        "HTCondor's COLLECTOR_HOST)",
    )
    condor_config: Path | None = Field(None, description="CONDOR_CONFIG for the gateway's HTCondor client")
    token_dir: Path | None = Field(
        None, description="poold's IDTOKENS (identity poold@<trust domain>); the gateway uses only these"
    )

    @field_validator("collector")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            check_collector(value)
        return value


class DiscoverySection(StrictModel):
    """The `[discovery]` section of poold's config: sending our offers, taking in those of others."""

    interval: float = Field(60.0, gt=0, description="seconds between load readings and offers")
    ttl: int = Field(1, ge=1, le=32, description="rows an offer travels (system-wide)")
    valid_for: float = Field(
        120.0, gt=0, le=86_400, description="how long our offers stand (an offer carries at most a day)"
    )
    max_valid_for: float = Field(3600.0, gt=0, description="longer offers from others are refused")
    proximity_resolution: float = Field(0.005, gt=0, description="RTTs closer than this count as equal")


class FlockingSection(StrictModel):
    """The `[flocking]` section of poold's config: the Flocking Manager's rounds and limits."""

    interval: float = Field(60.0, gt=0)
    max_pools: int = Field(5, ge=1, le=100, description="at most this many pools in FLOCK_TO")
    max_rtt: float | None = Field(
        None, gt=0, description="FLOCK_TO names no pool measured farther (round trip, seconds)"
    )
    withdraw_after: float = Field(300.0, ge=0, description="quiet seconds before FLOCK_TO is withdrawn")
    authorize_timeout: float = Field(5.0, gt=0, description="wait for a pool to authorize our schedds")
    reauthorize_after: float = Field(600.0, gt=0, description="ask a pool again after this long")
    deliver_timeout: float = Field(900.0, gt=0, description="flocked jobs idle this long: blacklist the pool")
    blacklist_for: float = Field(3600.0, gt=0, le=365 * 86_400, description="at most a year")
    authorize_incoming: bool = Field(True, description="set FLOCK_FROM for pools the policy lets in")
    flock_from_hosts_per_pool: int = Field(
        64, ge=1, le=1000, description="an intent naming more schedd hosts than this is refused"
    )
    flock_from_max_hosts: int = Field(
        512, ge=1, le=512, description="FLOCK_FROM holds at most this many hosts of other pools"
    )


class TrustSection(StrictModel):
    """The `[trust]` section of poold's config: tokens between flocking pools (issue 15; the
    README's "Security model" and docs/security-htcondor.md say what HTCondor needs for it)."""

    trust_domain: str | None = Field(
        None, pattern=TRUST_DOMAIN, description="this pool's TRUST_DOMAIN; unset: no tokens are negotiated"
    )
    token_lifetime: int = Field(
        1200, ge=60, le=86_400, description="seconds, of tokens asked for and approved"
    )
    request_dir: Path = Field(
        Path("/var/lib/poold/token-requests"), description="where HTCondor's tool writes a token it receives"
    )
    schedd_token_dir: Path | None = Field(
        None, description="token directory our schedds read (their SEC_TOKEN_SYSTEM_DIRECTORY)"
    )
    negotiator_token_dir: Path | None = Field(
        None, description="token directory our negotiator reads (its SEC_TOKEN_SYSTEM_DIRECTORY)"
    )
    peer_ca_file: Path | None = Field(
        None, description="CA certificates of the peer pools' collectors (token requests go over SSL)"
    )
    ssl_skip_host_check: bool = Field(
        False, description="peer collectors are named by addresses their certificates do not carry"
    )
    tools: list[str] = Field(
        [], description="command prefix for HTCondor's token tools (none: they are on PATH)"
    )


class PooldDaemonSection(DaemonSection):
    """The `[daemon]` section of poold's config (common.cli.DaemonSection) and its policy file."""

    control_socket: Path = Path("/run/poold/poold.sock")
    policy_file: Path | None = Field(None, description="none: every pool may share with us")
    state_file: Path | None = Field(
        None,
        description="poold's state file, resumed from at start and replicated by faultD (its "
        "[condor] poold_state names the same file); none: poold keeps no state (the shipped "
        "poold.toml sets /var/lib/poold/state.json)",
    )
    faultd_socket: Path | None = Field(
        None,
        description="faultD's control socket on this machine: poold stands by unless faultD says "
        "this machine holds the pool's manager role (issue 16); none: poold always acts",
    )
    faultd_poll_interval: float = Field(0.5, gt=0, le=10, description="seconds between faultD readings")
    faultd_silence: float = Field(
        3.0, gt=0, le=60, description="faultD silent this long: poold stands by (faultD's takeover time)"
    )


class PooldConfig(StrictModel):
    """A whole poold config file (TOML); common/deploy_files/config/poold.toml documents every key."""

    pool: PoolSection
    ring: RingConfig
    discovery: DiscoverySection = DiscoverySection()
    flocking: FlockingSection = FlockingSection()
    trust: TrustSection = TrustSection()
    daemon: PooldDaemonSection = PooldDaemonSection()


def with_condor_values(config: PooldConfig, values: dict[str, str | None], source: str) -> PooldConfig:
    """The config with `[pool] collector` from HTCondor's COLLECTOR_HOST when the file leaves it
    out; a ConfigError when neither gives one. Pure: the caller reads `values`."""
    if config.pool.collector is not None:
        return config
    if config.daemon.faultd_socket is not None:
        raise ConfigError(
            f"{source}: pool.collector is not set: with daemon.faultd_socket, name this machine's own "
            "collector (host:port); HTCondor's COLLECTOR_HOST names the pool's current manager"
        )
    collector = collector_address(values.get("COLLECTOR_HOST"))
    require(collector, source, "pool.collector", "COLLECTOR_HOST")
    assert collector is not None
    try:
        check_collector(collector)
    except ValueError as e:
        raise ConfigError(
            f"{source}: pool.collector is not set and HTCondor's COLLECTOR_HOST gives {collector!r}: {e}"
        ) from None
    return config.model_copy(update={"pool": config.pool.model_copy(update={"collector": collector})})
