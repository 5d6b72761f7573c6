"""What poolD changes in HTCondor, through the gateway: FLOCK_TO on the pool's schedds and
FLOCK_FROM on its collector and startds. The core decides; these carry it out and report back.
Both values pass poolD's allow-lists in common.condor.knobs first (FLOCK_TO: collectors as host or
host:port; FLOCK_FROM: hosts, and only the globs a policy rule granted); a value that does not
is never sent, and the change counts as failed.

FLOCK_TO is applied schedd by schedd: read the old value, set the new one, read it back; a
schedd that refuses, or reads back something else, gets its old value restored, and the whole
change counts as not applied (the core then decides again next round).

Shutting a revoked pool out (ShutOutSchedds, after FLOCK_FROM lost its hosts) is one gateway
call: the worker takes its schedds' ads out of our collector and vacates the claims they hold on
our startds, never touching our own schedds (checked there against the collector's home schedds,
as the core already left them out)."""

from __future__ import annotations

import structlog

from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError
from common.condor.knobs import POOLD_FLOCK_TO, KnobRefused, check_config, poold_flock_from
from poolD.core import (
    FlockFromApplied,
    FlockToApplied,
    SetFlockFrom,
    SetFlockTo,
    ShutOutDone,
    ShutOutSchedds,
)
from poolD.flocking import format_flock_to, parse_flock_to

log = structlog.get_logger("poold")


async def apply_flock_to(gateway: Gateway, action: SetFlockTo) -> FlockToApplied:
    """FLOCK_TO on every schedd of the pool: validate, apply, read back, restore on failure.
    An empty list removes our runtime value, so each schedd's own configuration returns."""
    target = list(action.collectors)
    value = format_flock_to(target) if target else None
    try:
        checked = check_config(POOLD_FLOCK_TO, {"FLOCK_TO": value})
    except KnobRefused as e:  # offers were checked; this guards the invariant
        log.error("FLOCK_TO refused", error=str(e))
        return FlockToApplied(action, applied=False, seen={})
    try:
        schedds = await gateway.list_schedds()
    except GatewayError as e:
        log.warning("cannot list schedds", error=str(e))
        return FlockToApplied(action, applied=False, seen={})
    seen: dict[str, list[str]] = {}
    all_ok = True
    for schedd in schedds:
        name = schedd.name or schedd.describe()
        previous: str | None = None
        try:
            previous = await gateway.get_config(schedd, "FLOCK_TO")
            await gateway.set_config(schedd, checked)
            seen[name] = parse_flock_to(await gateway.get_config(schedd, "FLOCK_TO"))
            if target and seen[name] != target:
                raise GatewayError("set_config", f"read back {seen[name]}, expected {target}")
        except GatewayError as e:
            all_ok = False
            log.error("FLOCK_TO not applied; restoring", schedd=name, error=str(e))
            try:
                restore = check_config(POOLD_FLOCK_TO, {"FLOCK_TO": previous if previous else None})
                await gateway.set_config(schedd, restore)
                seen[name] = parse_flock_to(previous)
            except (GatewayError, KnobRefused) as again:
                log.error("FLOCK_TO restore failed", schedd=name, error=str(again))
    if all_ok:
        log.info(
            "FLOCK_TO applied", flock_to=value or "(withdrawn)", schedds=len(schedds), reason=action.reason
        )
    return FlockToApplied(action, applied=all_ok, seen=seen)


async def read_flock_to(gateway: Gateway) -> dict[str, list[str]] | None:
    """FLOCK_TO as each schedd of the pool has it now, by schedd; None when no schedd reports to
    the collector (yet) or one cannot be asked."""
    seen: dict[str, list[str]] = {}
    try:
        for schedd in await gateway.list_schedds():
            value = await gateway.get_config(schedd, "FLOCK_TO")
            seen[schedd.name or schedd.describe()] = parse_flock_to(value)
    except GatewayError as e:
        log.warning("FLOCK_TO not read back", error=str(e))
        return None
    return seen or None


async def apply_flock_from(gateway: Gateway, action: SetFlockFrom) -> FlockFromApplied:
    """FLOCK_FROM on the collector and every startd: the host-based ALLOW lists use it. No hosts:
    our runtime value is removed, so each daemon's own configuration returns."""
    value = ", ".join(action.hosts) or None
    try:
        checked = check_config(poold_flock_from(action.globs), {"FLOCK_FROM": value})
    except KnobRefused as e:
        log.error("FLOCK_FROM refused", error=str(e))
        return FlockFromApplied(action, error=str(e))
    try:
        targets: dict[str, DaemonRef] = {}
        for kind in (DaemonKind.COLLECTOR, DaemonKind.STARTD):
            for ref in await gateway.list_daemons(kind):
                targets.setdefault(ref.address or ref.describe(), ref)
        for ref in targets.values():
            await gateway.set_config(ref, checked)
    except GatewayError as e:
        return FlockFromApplied(action, error=str(e))
    return FlockFromApplied(action, error=None)


async def shut_out_schedds(gateway: Gateway, action: ShutOutSchedds) -> ShutOutDone:
    """Take the revoked pool's schedd and submitter ads out of our collector and vacate the
    claims its schedds hold on our startds (Gateway.shut_out_schedds)."""
    try:
        done = await gateway.shut_out_schedds(action.hosts)
    except GatewayError as e:
        log.warning("shut-out failed", pool=action.pool, error=str(e))
        return ShutOutDone(action, error=str(e))
    if done.refused:
        log.error("shut-out named our own schedds' hosts; left alone", pool=action.pool, hosts=done.refused)
    log.info(
        "pool shut out",
        pool=action.pool,
        hosts=",".join(done.targets),
        ads=done.invalidated,
        vacated=",".join(done.vacated),
    )
    error = "; ".join(done.errors)[:500] or None
    return ShutOutDone(action, done.invalidated, tuple(done.vacated), error)
