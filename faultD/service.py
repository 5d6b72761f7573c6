"""faultd, the daemon: one per machine of a pool.

Tasks, all in one trio nursery:
- the overlay (UDP ring of the pool's machines, separate from poolD's ring of central managers);
- the bulk channel (sealed TCP on the same port number) for replicated state and handovers;
- the role machine's driver: overlay events and timer firings in, sends and HTCondor changes out;
- the Condor Module worker: applies role changes to the local HTCondor one at a time, in order,
  retrying when HTCondor is not reachable yet (a master that is still starting);
- while managing, the Replication Module: re-reads the local central-manager state every
  `state_interval` and hands it to the role machine, which pushes it when it changed;
- the control socket for `faultd status`; systemd readiness and watchdog.
"""

from __future__ import annotations

import os
import random
from collections import Counter, deque
from typing import Any

import structlog
import trio

from common.condor import Gateway, GatewayError
from common.overlay.bulk import BulkChannel
from common.overlay.driver import UdpOverlay
from common.overlay.ids import node_id_from_name
from common.overlay.messages import Peer
from common.overlay.node import BroadcastReceived, Delivered, Event, Joined, LeafSetChanged, Received
from common.service import sd_notify, serve_control, signal_loop, watchdog_loop
from common.timer import Wakeup
from common.wire import Message, MessageCodec
from faultD.condor_role import CondorRole, CondorRoleError, RoleRefused
from faultD.config import FaultdConfig
from faultD.messages import Handover, ReplicaPush
from faultD.role import (
    CondorAction,
    PointTo,
    Role,
    RoleMachine,
    RoleOutput,
    RoleParams,
    StartManager,
    StopManager,
)

log = structlog.get_logger("faultd")

BULK_TYPES: tuple[type[Message], ...] = (ReplicaPush, Handover)


class FaultDaemon:
    """Runs this machine's RoleMachine for real: overlay, bulk channel, HTCondor, timer, control socket."""

    def __init__(self, config: FaultdConfig) -> None:
        self.config = config
        self.gateway = Gateway(
            condor_config=config.condor.condor_config,
            token_dir=config.condor.token_dir,
            collector=config.fault.collector,
            timeout=config.daemon.gateway_timeout,
        )
        self.condor = CondorRole(config.condor, self.gateway)
        self.overlay = UdpOverlay(config.ring, on_event=self._on_event)
        self.bulk = BulkChannel(
            self.overlay.key,
            MessageCodec(list(BULK_TYPES), name="faultd-bulk", max_size=64 << 20),
            self._on_bulk,
            replay_window=config.ring.replay_window,
        )
        self.role: RoleMachine | None = None
        self._nursery: trio.Nursery | None = None  # bulk sends run here, beside the daemon's tasks
        self.counters: Counter[str] = Counter()
        self.history: deque[str] = deque(maxlen=50)
        self.condor_error: str | None = None
        self._wakeup = Wakeup()
        self._events_in, self._events_out = trio.open_memory_channel[Event | tuple[Message, str]](1000)
        self._actions_in, self._actions_out = trio.open_memory_channel[CondorAction](100)

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every task until cancelled; `task_status.started()` once ring, bulk and control listen."""
        cfg = self.config
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.overlay.run)
                assert self.overlay.core is not None
                await nursery.start(self.bulk.serve, cfg.ring.bind, self._bulk_port())
                nursery.start_soon(self._event_loop)
                nursery.start_soon(self._wakeup.run, self._on_timer)
                nursery.start_soon(self._condor_loop)
                nursery.start_soon(self._replication_loop)
                await nursery.start(serve_control, cfg.daemon.control_socket, self._control)
                nursery.start_soon(watchdog_loop, lambda: self.role is None or self.condor_error is None)
                nursery.start_soon(signal_loop, self._reload, nursery.cancel_scope)
                sd_notify("READY=1")
                log.info("faultd running", overlay=self.overlay.address, original=cfg.fault.original_manager)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self.gateway.aclose()

    def _bulk_port(self) -> int:
        return int(self.overlay.address.rpartition(":")[2])

    async def _reload(self) -> None:
        log.info("SIGHUP: faultd has nothing to reload; restart it to change its configuration")

    # ------------------------------------------------------------------ the role machine

    def _make_role(self, me: Peer) -> RoleMachine:
        f = self.config.fault
        params = RoleParams(
            alive_interval=f.alive_interval,
            missed_alives=f.missed_alives,
            replicas=f.replicas,
            replication_interval=f.replication_interval,
        )
        hint = node_id_from_name(f.manager_name) if f.manager_name else None
        return RoleMachine(
            me,
            f.collector,
            params,
            random.Random(os.urandom(16)),
            original=f.original_manager,
            manager_hint=hint,
        )

    def _on_event(self, event: Event) -> None:
        if isinstance(event, Joined | LeafSetChanged | Delivered | Received | BroadcastReceived):
            try:
                self._events_in.send_nowait(event)
            except trio.WouldBlock:
                self.counters["events_overflow"] += 1

    async def _on_bulk(self, msg: Message, peer: str) -> None:
        await self._events_in.send((msg, peer))

    async def _event_loop(self) -> None:
        async for item in self._events_out:
            now = trio.current_time()
            if isinstance(item, tuple):
                if self.role is not None:
                    await self._apply(self.role.on_message(item[0], now))
                continue
            core = self.overlay.core
            if self.role is None:
                if core is None or not core.joined:
                    continue  # the role machine starts once the ring has taken us in
                self.role = self._make_role(core.me)
                await self._apply(self.role.start(now))
                await self._apply(self.role.on_leaf_set(tuple(core.leaf.members()), now))
            if isinstance(item, LeafSetChanged):
                await self._apply(self.role.on_leaf_set(item.members, now))
            elif isinstance(item, Delivered | Received | BroadcastReceived):
                await self._apply(self.role.on_message(item.payload, now))

    async def _on_timer(self, now: float) -> None:
        if self.role is not None:
            await self._apply(self.role.on_timer(now))

    async def _apply(self, out: RoleOutput) -> None:
        for note in out.notes:
            log.info(note)
            self.history.append(note)
        if out.wakeup is not None:
            self._wakeup.set(out.wakeup)
        for action in out.condor:
            await self._actions_in.send(action)
        for msg in out.broadcasts:
            await self.overlay.broadcast(msg)
        for key, msg in out.routes:
            await self.overlay.route(key, msg)
        for addr, msg in out.directs:
            if isinstance(msg, BULK_TYPES):
                self._spawn_bulk(addr, msg)
            else:
                await self.overlay.send_direct(addr, msg)

    def _spawn_bulk(self, addr: str, msg: Message) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self.bulk.send, addr, msg)

    # ------------------------------------------------------------------ HTCondor

    async def _condor_loop(self) -> None:
        async for action in self._actions_out:
            await self._perform(action)

    async def _perform(self, action: CondorAction) -> None:
        """Apply one role change; HTCondor that is not reachable yet is retried, not skipped."""
        for attempt in range(1, 31):
            try:
                if isinstance(action, PointTo):
                    await self.condor.point_to(action.collector)
                elif isinstance(action, StartManager):
                    await self.condor.start_manager(action.state, self.config.fault.collector)
                elif isinstance(action, StopManager):
                    await self.condor.stop_manager()
                self.condor_error = None
                self.counters[f"condor_{type(action).__name__}"] += 1
                return
            except RoleRefused as e:
                self.counters["condor_refused"] += 1
                self.history.append(f"refused {type(action).__name__}: {e}"[:300])
                log.error("role change refused", action=type(action).__name__, error=str(e))
                return
            except (GatewayError, CondorRoleError) as e:
                self.condor_error = str(e)
                log.warning(
                    "role change not applied yet", action=type(action).__name__, attempt=attempt, error=str(e)
                )
                await trio.sleep(min(5.0, 0.2 * attempt))
        self.history.append(f"gave up applying {type(action).__name__}: {self.condor_error}")

    async def _replication_loop(self) -> None:
        while True:
            await trio.sleep(self.config.fault.state_interval)
            if self.role is not None and self.role.role is Role.MANAGER:
                files = await trio.to_thread.run_sync(self.condor.read_state)
                await self._apply(self.role.on_local_state(files, trio.current_time()))

    # ------------------------------------------------------------------ control socket

    async def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("cmd") != "status":
            return {"error": f"unknown command {request.get('cmd')!r}"}
        return self.status()

    def status(self) -> dict[str, Any]:
        """What `faultd status` shows: the role, the overlay, HTCondor, drops and recent decisions."""
        now = trio.current_time()
        role = self.role.status(now) if self.role is not None else {"role": "joining"}
        return role | {
            "overlay": self.overlay.address if self.overlay.core else None,
            "leaf_set": [p.addr for p in self.overlay.core.leaf.members()] if self.overlay.core else [],
            "condor": {
                "role_file": str(self.condor.role_file),
                "collector": self.condor.collector,
                "managing": self.condor.managing,
                "reconfigs": self.condor.reconfigs,
                "error": self.condor_error,
                "refused_files": self.condor.refused,
                "refusals": list(self.condor.refusals),
            },
            "drops": self.overlay.drops | {f"bulk_{k}": v for k, v in self.bulk.drops.items()},
            "counters": dict(self.counters),
            "history": list(self.history)[-10:],
        }
