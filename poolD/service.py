"""poold, the daemon: one per central manager.

Tasks, all in one trio nursery:
- the overlay (UDP ring of central managers);
- the Information Gatherer: every `discovery.interval`, read the pool's load through the gateway
  and, with free slots, offer them along the routing-table rows;
- the event loop: offers from other pools (checked, recorded, forwarded), authorization requests
  from pools about to flock to us, and their answers to ours;
- the Flocking Manager: every `flocking.interval`, decide FLOCK_TO, make sure the chosen pools
  authorized our schedds, apply it to every schedd (validate, apply, read back, restore on
  failure), and blacklist a pool whose offer did not deliver;
- the control socket for `poold status`; systemd readiness, watchdog; SIGHUP reloads the policy.
On SIGTERM the runtime FLOCK_TO it set is removed, so the schedds fall back to their own config.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

import structlog
import trio

from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError, PoolLoad
from common.config import ConfigError
from common.overlay.driver import UdpOverlay, parse_address
from common.overlay.ids import digit, id_hex
from common.overlay.messages import Peer
from common.overlay.node import Event, Received
from common.service import sd_notify, serve_control, signal_loop, watchdog_loop
from poolD.config import PooldConfig
from poolD.discovery import Discovery, DiscoverySettings, peer_host
from poolD.flocking import FlockingManager, format_flock_to, parse_flock_to
from poolD.messages import Announcement, FlockIntent, FlockReply
from poolD.policy import Direction, Policy, Subject
from poolD.willing import WillingEntry, WillingList

log = structlog.get_logger("poold")


def sinful_host(address: str | None) -> str | None:
    """The host of a sinful string such as '<10.0.0.5:9618?addrs=...>'."""
    if not address:
        return None
    inner = address.strip("<>").split("?", 1)[0]
    return inner.rpartition(":")[0] or None


class PoolDaemon:
    def __init__(self, config: PooldConfig, *, policy: Policy | None = None) -> None:
        self.config = config
        self.policy = policy or self._read_policy()
        self.gateway = Gateway(
            condor_config=config.pool.condor_config,
            collector=config.pool.collector,
            timeout=config.daemon.gateway_timeout,
        )
        self.overlay = UdpOverlay(config.ring, on_event=self._on_event)
        self.willing = WillingList(random.Random(), resolution=config.discovery.proximity_resolution)
        fl = config.flocking
        self.flocking = FlockingManager(max_pools=fl.max_pools, withdraw_after=fl.withdraw_after)
        self.discovery: Discovery | None = None
        self.load: PoolLoad | None = None
        self.load_error: str | None = None
        self.flock_to: dict[str, list[str]] = {}  # schedd name -> FLOCK_TO as read back
        self.flocking_since: float | None = None
        self.flock_from: set[str] = set()  # schedd hosts of other pools we authorized
        self.authorized: dict[str, tuple[bool, str, float]] = {}  # pool -> (accepted, reason, when)
        self.decisions: deque[str] = deque(maxlen=50)
        self.counters: Counter[str] = Counter()
        self._waiters: dict[str, trio.Event] = {}
        self._events_in, self._events_out = trio.open_memory_channel[Event](1000)

    # ------------------------------------------------------------------ lifecycle

    def _read_policy(self) -> Policy:
        path = self.config.daemon.policy_file
        return Policy.load(path) if path else Policy.allow_all()

    async def reload(self) -> None:
        """SIGHUP: a new policy file takes effect; a broken one is reported and the old one kept."""
        try:
            policy = self._read_policy()
        except ConfigError as e:
            log.error("policy not reloaded", error=str(e))
            self._decide(f"policy reload failed, old policy kept: {e}")
            return
        policy.blacklist = self.policy.blacklist
        self.policy = policy
        if self.discovery is not None:
            self.discovery.policy = policy
        self._decide(f"policy reloaded from {policy.source}")

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.overlay.run)
                assert self.overlay.core is not None
                self.discovery = Discovery(
                    DiscoverySettings(
                        pool=self.config.pool.name,
                        collector=self.config.pool.collector,
                        ttl=self.config.discovery.ttl,
                        valid_for=self.config.discovery.valid_for,
                        max_valid_for=self.config.discovery.max_valid_for,
                    ),
                    self.overlay.core,
                    self.policy,
                    self.willing,
                )
                nursery.start_soon(self._event_loop)
                nursery.start_soon(self._discovery_loop)
                nursery.start_soon(self._flocking_loop)
                await nursery.start(serve_control, self.config.daemon.control_socket, self._control)
                nursery.start_soon(watchdog_loop, lambda: self.load_error is None)
                nursery.start_soon(signal_loop, self.reload, nursery.cancel_scope)
                sd_notify("READY=1")
                log.info("poold running", pool=self.config.pool.name, overlay=self.overlay.address)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(15):
                await self._apply_flock_to([], "poold stopping")
                await self.gateway.aclose()

    # ------------------------------------------------------------------ events from the overlay

    def _on_event(self, event: Event) -> None:
        if isinstance(event, Received):
            try:
                self._events_in.send_nowait(event)
            except trio.WouldBlock:
                self.counters["events_overflow"] += 1

    async def _event_loop(self) -> None:
        async with trio.open_nursery() as nursery:
            async for event in self._events_out:
                assert isinstance(event, Received)
                payload = event.payload
                if isinstance(payload, Announcement):
                    with self._survive("events"):
                        await self._on_announcement(payload)
                elif isinstance(payload, FlockIntent):
                    nursery.start_soon(self._on_flock_intent, payload)
                elif isinstance(payload, FlockReply):
                    self._on_flock_reply(payload)

    async def _on_announcement(self, ann: Announcement) -> None:
        assert self.discovery is not None and self.overlay.core is not None
        forwards = self.discovery.on_announcement(ann, trio.current_time())
        if ann.pool in self.willing.entries and ann.origin.id not in self.overlay.core.rtt:
            await self.overlay.measure(ann.origin)
        for addr, msg in forwards:
            await self.overlay.send_direct(addr, msg)

    async def _on_flock_intent(self, intent: FlockIntent) -> None:
        with self._survive("authorize"):
            await self._authorize_incoming(intent)

    async def _authorize_incoming(self, intent: FlockIntent) -> None:
        """A pool is about to flock to us: let its schedds in (FLOCK_FROM), if the policy agrees."""
        now = trio.current_time()
        decision = self.policy.decide(Subject(intent.pool, peer_host(intent.origin)), Direction.ACCEPT, now)
        if not decision.allowed:
            accepted, reason = False, decision.rule
        elif not self.config.flocking.authorize_incoming:
            accepted, reason = True, "authorization is configured statically"
        else:
            hosts = self.flock_from | {h for h in intent.schedd_hosts if h}
            try:
                if hosts != self.flock_from:
                    await self._set_flock_from(sorted(hosts))
                    self.flock_from = hosts
                accepted, reason = True, decision.rule
            except GatewayError as e:
                accepted, reason = False, f"could not authorize: {e}"
        self._decide(f"flock intent from {intent.pool}: {'accepted' if accepted else 'refused'} ({reason})")
        reply = FlockReply(pool=self.config.pool.name, accepted=accepted, reason=reason[:200])
        await self.overlay.send_direct(intent.origin.addr, reply)

    async def _set_flock_from(self, hosts: list[str]) -> None:
        """FLOCK_FROM on the collector and every startd: the host-based ALLOW lists use it."""
        value = ", ".join(hosts)
        targets: dict[str, DaemonRef] = {}
        for kind in (DaemonKind.COLLECTOR, DaemonKind.STARTD):
            for ref in await self.gateway.list_daemons(kind):
                targets.setdefault(ref.address or ref.describe(), ref)
        for ref in targets.values():
            await self.gateway.set_config(ref, {"FLOCK_FROM": value})

    def _on_flock_reply(self, reply: FlockReply) -> None:
        self.authorized[reply.pool] = (reply.accepted, reply.reason, trio.current_time())
        waiter = self._waiters.pop(reply.pool, None)
        if waiter is not None:
            waiter.set()

    # ------------------------------------------------------------------ the two periodic loops

    async def _read_load(self) -> PoolLoad | None:
        try:
            self.load = await self.gateway.pool_load()
            self.load_error = None
        except GatewayError as e:
            self.load_error = str(e)
            self.counters["load_errors"] += 1
            log.warning("cannot read pool load", error=str(e))
            return None
        return self.load

    async def _discovery_loop(self) -> None:
        while True:
            with self._survive("discovery"):
                await self._discovery_round()
            await trio.sleep(self.config.discovery.interval)

    async def _discovery_round(self) -> None:
        assert self.discovery is not None
        load = await self._read_load()
        if load is not None:
            for addr, msg in self.discovery.announce(load, trio.current_time()):
                await self.overlay.send_direct(addr, msg)
                self.counters["offers_sent"] += 1

    @contextlib.contextmanager
    def _survive(self, loop: str) -> Iterator[None]:
        """A failed round of a periodic loop is logged and counted; the daemon goes on."""
        try:
            yield
        except Exception as e:  # one bad round must not take the central manager's daemon down
            self.counters[f"{loop}_errors"] += 1
            log.exception("round failed", loop=loop, error=str(e))

    def rtt(self, node_id: int) -> float | None:
        return self.overlay.core.rtt.get(node_id) if self.overlay.core else None

    async def _flocking_loop(self) -> None:
        while True:
            await trio.sleep(self.config.flocking.interval)
            with self._survive("flocking"):
                await self._flocking_round()

    async def _flocking_round(self) -> None:
        load = await self._read_load()
        if load is None:
            return
        now = trio.current_time()
        entries = self.willing.ordered(now, self.rtt)
        decision = self.flocking.decide(load, entries, now)
        if decision.flock_to is None:
            self._check_delivery(load, now)
            return
        target = decision.flock_to
        if target:
            target = await self._authorized_collectors([e for e in entries if e.collector in target])
        if self.flocking.changes(target):
            self._decide(decision.reason)
            await self._apply_flock_to(target, decision.reason)

    async def _authorized_collectors(self, entries: list[WillingEntry]) -> list[str]:
        """Ask pools not yet asked to authorize our schedds; keep those that agreed, in order."""
        # Answers expire: the other pool may have restarted (runtime FLOCK_FROM is lost with its
        # daemons) or changed its policy since.
        stale = trio.current_time() - self.config.flocking.reauthorize_after
        pending = [e for e in entries if self.authorized.get(e.pool, (False, "", -math.inf))[2] < stale]
        if pending:
            schedds = await self.gateway.list_schedds()
            hosts = sorted({h for s in schedds for h in (sinful_host(s.address), s.machine) if h})
            me = self.overlay.core.me if self.overlay.core else None
            assert me is not None
            waiting = {e.pool: trio.Event() for e in pending}
            self._waiters.update(waiting)
            for e in pending:
                intent = FlockIntent(pool=self.config.pool.name, origin=me, schedd_hosts=hosts)
                await self.overlay.send_direct(e.origin.addr, intent)
            with trio.move_on_after(self.config.flocking.authorize_timeout):
                for event in waiting.values():
                    await event.wait()
            for pool in waiting:
                self._waiters.pop(pool, None)
        return [e.collector for e in entries if self.authorized.get(e.pool, (False, "", 0.0))[0]]

    def _check_delivery(self, load: PoolLoad, now: float) -> None:
        """Offers that do not deliver: our jobs wait, FLOCK_TO has been set for a while, and none
        of them has flocked. The first pool in FLOCK_TO is the one the schedds tried first."""
        if not self.flocking.active or self.flocking_since is None:
            return
        flocked = sum(s.flocked for s in load.schedds)
        if (
            load.idle_jobs > 0
            and flocked == 0
            and now - self.flocking_since >= self.config.flocking.deliver_timeout
        ):
            culprit = next(
                (p for p, e in self.willing.entries.items() if e.collector == self.flocking.active[0]), None
            )
            if culprit is not None:
                until = now + self.config.flocking.blacklist_for
                self.policy.add_to_blacklist(culprit, until, "offered slots, flocked jobs stayed idle")
                self.willing.remove(culprit)
                self.flocking_since = now
                self._decide(f"blacklisted {culprit}: offered slots, our jobs stayed idle")

    async def _apply_flock_to(self, target: list[str], reason: str) -> None:
        """FLOCK_TO on every schedd of the pool: validate, apply, read back, restore on failure.
        An empty target removes our runtime value, so each schedd's own configuration returns."""
        for collector in target:
            parse_address(collector)  # offers were validated; this guards the invariant
        try:
            schedds = await self.gateway.list_schedds()
        except GatewayError as e:
            log.warning("cannot list schedds", error=str(e))
            return
        value = format_flock_to(target) if target else None
        all_ok = True
        for schedd in schedds:
            name = schedd.name or schedd.describe()
            previous: str | None = None
            try:
                previous = await self.gateway.get_config(schedd, "FLOCK_TO")
                await self.gateway.set_config(schedd, {"FLOCK_TO": value})
                seen = parse_flock_to(await self.gateway.get_config(schedd, "FLOCK_TO"))
                if target and seen != target:
                    raise GatewayError("set_config", f"read back {seen}, expected {target}")
                self.flock_to[name] = seen
            except GatewayError as e:
                all_ok = False
                log.error("FLOCK_TO not applied; restoring", schedd=name, error=str(e))
                try:
                    await self.gateway.set_config(schedd, {"FLOCK_TO": previous if previous else None})
                except GatewayError as again:
                    log.error("FLOCK_TO restore failed", schedd=name, error=str(again))
        if all_ok:
            self.flocking.active = list(target)
            self.flocking_since = trio.current_time() if target else None
            log.info("FLOCK_TO applied", flock_to=value or "(withdrawn)", schedds=len(schedds), reason=reason)

    def _decide(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.decisions.append(f"{stamp} {text}")
        log.info("decision", decision=text)

    # ------------------------------------------------------------------ status

    async def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("cmd", "status") != "status":
            return {"error": f"unknown command {request.get('cmd')!r}"}
        return self.status()

    def status(self) -> dict[str, Any]:
        core = self.overlay.core
        now = trio.current_time()

        def rtt_ms(node_id: int) -> float | None:
            rtt = self.rtt(node_id)
            return None if rtt is None else round(rtt * 1000, 2)

        def peer(p: Peer) -> dict[str, Any]:
            return {"id": id_hex(p.id), "addr": p.addr, "rtt_ms": rtt_ms(p.id)}

        table = []
        if core is not None:
            b = core.params.b
            for r in range(core.table.used_rows()):
                table.append([peer(p) | {"col": digit(p.id, r, b)} for p in core.table.row(r)])
        discovery = self.discovery
        return {
            "pool": self.config.pool.name,
            "collector": self.config.pool.collector,
            "node": peer(core.me) if core else None,
            "joined": bool(core and core.joined),
            "leaf_set": [peer(p) for p in core.leaf.members()] if core else [],
            "routing_table": table,
            "load": self.load.model_dump() if self.load else None,
            "load_error": self.load_error,
            "willing_list": [
                {
                    "pool": e.pool,
                    "collector": e.collector,
                    "row": e.row,
                    "free_slots": e.free_slots,
                    "queue_length": e.queue_length,
                    "utilization": e.utilization,
                    "rtt_ms": rtt_ms(e.origin.id),
                    "expires_in": round(e.expires_at - now, 1),
                }
                for e in self.willing.ordered(now, self.rtt)
            ],
            "flock_to": self.flock_to,
            "flock_active": self.flocking.active,
            "flock_from": sorted(self.flock_from),
            "authorized": {
                p: {"accepted": a, "reason": r, "age": round(now - t, 1)}
                for p, (a, r, t) in self.authorized.items()
            },
            "blacklist": {
                p: {"until_in": round(u - now, 1), "reason": r} for p, (u, r) in self.policy.blacklist.items()
            },
            "decisions": list(self.decisions) + (discovery.decisions[-10:] if discovery else []),
            "offers": {
                "accepted": discovery.accepted if discovery else 0,
                "dropped": dict(discovery.dropped) if discovery else {},
            },
            "overlay_drops": self.overlay.drops,
            "counters": dict(self.counters),
        }
