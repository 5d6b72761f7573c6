"""Values HTCondor's own configuration already holds, read instead of repeated in our files.

poold and faultd leave out of their TOML what HTCondor knows (LOG, SPOOL, LOCAL_CONFIG_DIR,
COLLECTOR_HOST): at start-up (and by check-config) they read them from the machine's HTCondor
configuration through the gateway, exactly as `condor_config_val` prints them. A key set in the
TOML still wins: it is an override.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import trio

from common.condor import Gateway, GatewayError
from common.config import ConfigError


def read_condor_config(condor_config: Path | None, keys: Iterable[str]) -> dict[str, str | None]:
    """HTCondor's values for `keys` (None: not defined), with CONDOR_CONFIG = `condor_config`
    (None: HTCondor's own search). A gateway failure is a ConfigError naming what was read."""
    keys = list(keys)

    async def read() -> dict[str, str | None]:
        async with Gateway(condor_config=condor_config, timeout=30) as gw:
            return await gw.local_config(keys)

    try:
        return trio.run(read)
    except GatewayError as e:
        where = condor_config or "HTCondor's default configuration"
        raise ConfigError(f"cannot read {', '.join(keys)} from {where}: {e}") from None


def first_dir(value: str | None) -> Path | None:
    """The first directory of a list such as LOCAL_CONFIG_DIR ('a, b' or 'a b')."""
    parts = (value or "").replace(",", " ").split()
    return Path(parts[0]) if parts else None


def collector_address(value: str | None) -> str | None:
    """'host:port' from a COLLECTOR_HOST value: its first collector, the port 9618 added when
    missing, a sinful string's address taken out ('<10.0.0.5:9618?addrs=...>')."""
    first = (value or "").replace(",", " ").split()
    if not first:
        return None
    text = first[0].strip("<>").split("?", 1)[0]
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit():
        return f"{host}:{port}"
    return f"{text}:9618"


def require(value: object, source: str, key: str, condor_key: str) -> None:
    """ConfigError when neither the TOML nor HTCondor gives a value."""
    if value is None:
        raise ConfigError(
            f"{source}: {key} is not set, and HTCondor's configuration does not define {condor_key} "
            "either: set it in the file, or [condor] condor_config to HTCondor's config file"
        )
