"""Where master_submitter sends its masters (llic/submitter.py's module doc): the schedd, where
execute machines reach its host, the master's CONDOR_CONFIG and the masters' token.

Kept apart from llic/submitter.py and light to import: master_submitter finds these through the
gateway's worker while a thread imports the rest of the submitter and reads the submit file.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import outcome
import trio

from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError
from common.condor.address import parse_sinful
from llic.master_token import AUTHORIZATIONS

if TYPE_CHECKING:
    from llic.config import LlicConfig


class SubmitError(Exception):
    """master_submitter cannot go on; one line."""


def agent_ip(address: str | None) -> str | None:
    """The IPv4 address in a daemon's sinful string, if agents can reach this master there (the
    master listens on IPv4; loopback and 0.0.0.0 are no address for another machine)."""
    parsed = parse_sinful(address)
    ip = parsed.ip if parsed is not None else None
    return str(ip) if ip is not None and ip.version == 4 and usable_ip(str(ip)) else None


def usable_ip(ip: str | None) -> bool:
    """An address another machine can reach us at (not loopback, not 0.0.0.0)."""
    return bool(ip) and not ip.startswith("127.") and ip != "0.0.0.0"


class PendingToken:
    """The submitting user's token for the masters (None: none), possibly still being fetched:
    a master needs it only once it may run, so master_submitter submits the master (held) and its
    agents meanwhile, and waits for the token just before it writes it and releases them."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._token: str | None = None

    def set(self, token: str | None) -> None:
        """The fetch is over (None: no token)."""
        self._token = token
        self._done.set()

    async def wait(self) -> str | None:
        """The token, once fetched."""
        await self._done.wait()
        return self._token


@dataclass(frozen=True)
class Target:
    """Where the masters go, found before the submit file is read (master_submitter does both at
    once): the schedd, with its address (no later call looks it up in the collector again),
    where execute machines reach its host (None: the master submits its agents), the master's
    CONDOR_CONFIG and the submitting user's token for the masters."""

    schedd: DaemonRef
    agent_host: str | None
    condor_config: str | None
    token: PendingToken


async def find_target(
    gw: Gateway,
    config: LlicConfig,
    *,
    schedd_name: str | None = None,
    condor_config: str | None = None,
    token_gw: Gateway | None = None,
    background: trio.Nursery | None = None,
) -> Target:
    """The schedd (named, else the first the collector lists), its CONFIG_ROOT unless
    `condor_config` is given, and the masters' token (module doc). With `token_gw` (a gateway of
    its own: its worker runs `condor_token_fetch` while `gw`'s asks the collector and the schedd)
    the token of a named schedd is fetched at once, not after the rest. With `background` (a
    nursery that outlives the submission) the token may still be on its way when this returns
    (`PendingToken`); without, it is there."""
    token = PendingToken()
    async with trio.open_nursery() as nursery:
        fetcher = background or nursery
        if token_gw is not None and schedd_name is not None:
            named = DaemonRef(kind=DaemonKind.SCHEDD, name=schedd_name)
            fetcher.start_soon(_fetch_token, token, token_gw, named, config)
        found = await outcome.acapture(_find_schedd, gw, schedd_name, condor_config)
        if isinstance(found, outcome.Error):
            nursery.cancel_scope.cancel()
        elif token_gw is None or schedd_name is None:
            fetcher.start_soon(_fetch_token, token, token_gw or gw, found.value[0], config)
    schedd, host, condor_config = found.unwrap()  # raised here, not in an exception group
    return Target(schedd, host, condor_config, token)


async def _find_schedd(
    gw: Gateway, schedd_name: str | None, condor_config: str | None
) -> tuple[DaemonRef, str | None, str | None]:
    """The schedd with its address, where agents reach its host, and the master's CONDOR_CONFIG."""
    schedds = await gw.list_schedds()
    if schedd_name is not None:
        schedds = [s for s in schedds if s.name == schedd_name]
        if not schedds:
            raise SubmitError(f"no schedd named {schedd_name!r} in the pool")
    if not schedds:
        raise SubmitError("the pool's collector lists no schedd")
    found = schedds[0]
    schedd = DaemonRef(kind=DaemonKind.SCHEDD, name=found.name, address=found.address, machine=found.machine)
    if condor_config is None:
        root = await gw.get_config(schedd, "CONFIG_ROOT")
        condor_config = f"{root.rstrip('/')}/condor_config" if root else None
    return schedd, agent_ip(found.address), condor_config


async def _fetch_token(into: PendingToken, gw: Gateway, schedd: DaemonRef, config: LlicConfig) -> None:
    into.set(await _master_token(gw, schedd, config))


async def _master_token(gw: Gateway, schedd: DaemonRef, config: LlicConfig) -> str | None:
    """The submitting user's token for the masters (llic/master_token.py): fetched once from
    their schedd, bounded to READ and WRITE and MASTER_TOKEN_LIFETIME. None when the lifetime is
    0, or with a warning when the pool gives none (e.g. a pool without IDTOKENS: its masters
    authenticate the pool's own way, as before)."""
    if not config.master_token_lifetime:
        return None
    try:
        return await gw.fetch_token(AUTHORIZATIONS, lifetime=config.master_token_lifetime, daemon=schedd)
    except GatewayError as e:
        print(
            f"master_submitter: warning: no token for the master from schedd {schedd.name} ({e});"
            " it authenticates the pool's own way (FS), which fails where the schedd does not offer"
            " FS channel binding (docs/security-htcondor.md)",
            file=sys.stderr,
        )
        return None
