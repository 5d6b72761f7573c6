"""faultd, the daemon: one per machine of a pool.

Tasks, all in one trio nursery:
- the overlay (UDP ring of the pool's machines, separate from poolD's ring of central managers);
- the bulk channel (sealed TCP on the same port number) for replicated state and handovers;
- the role machine's driver: overlay events and timer firings in, sends and HTCondor changes out;
- the Condor Module worker: applies role changes to the local HTCondor one at a time, in order,
  retrying when HTCondor is not reachable yet (a master that is still starting);
- while managing, the Replication Module: re-reads the local central-manager state every
  `state_interval` and hands it to the role machine, which pushes it when it changed;
- the control socket for `faultd status`; systemd readiness, STATUS= and the event loop's
  watchdog (common.systemd); SIGHUP reloads what can change without a restart (`RELOADABLE`) and
  logs what cannot;
- the daemon's ClassAd (MyType "FaultD") in the collector of the pool's current manager, and the
  optional Prometheus endpoint, both showing `figures()`.
"""

from __future__ import annotations

import os
import random
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import structlog
import trio

from common.advertise import Advertiser, Figures
from common.condor import Gateway, GatewayError
from common.config import ConfigError
from common.daemon_tasks import start_daemon_tasks
from common.events import Note, log_note, note
from common.logging import set_level
from common.overlay.bulk import BulkChannel
from common.overlay.certs import CertificateError
from common.overlay.driver import UdpOverlay
from common.overlay.ids import node_id_from_name
from common.overlay.messages import Peer
from common.overlay.node import BroadcastReceived, Delivered, Event, Joined, LeafSetChanged, Received
from common.reload import plan_reload
from common.systemd import StatusReporter
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
# What a SIGHUP takes on from a changed faultd.toml; any other change waits for a restart (the
# revocation list, [ring] revoked_file, is read again on every SIGHUP).
RELOADABLE = (
    "daemon.log_level",
    "daemon.gateway_timeout",
    "daemon.advertise_interval",
    "fault.state_interval",
    "condor.manager_config_files",
    "condor.poold_state",
    "condor.listener_daemons",
    "condor.manager_daemons",
)
MAX_BULK_SENDS = 32


class FaultDaemon:
    """Runs this machine's RoleMachine for real: overlay, bulk channel, HTCondor, timer, control socket."""

    def __init__(self, config: FaultdConfig, *, reread: Callable[[], FaultdConfig] | None = None) -> None:
        c = config.condor
        if None in (c.config_dir, c.log_dir, c.spool_dir, config.fault.collector):
            raise ValueError("HTCondor paths or collector unresolved: read them first (faultD.cli)")
        self.config = config
        self.reread = reread  # the config file read again (SIGHUP)
        self.gateway = Gateway(
            condor_config=config.condor.condor_config,
            token_dir=config.condor.token_dir,
            collector=config.fault.collector,
            timeout=config.daemon.gateway_timeout,
        )
        self.condor = CondorRole(config.condor, self.gateway)
        self.overlay = UdpOverlay(config.ring, on_event=self._on_event, same_pool=True)
        self.bulk = BulkChannel(
            self.overlay.key,
            self.overlay.identity,
            MessageCodec(list(BULK_TYPES), name="faultd-bulk", max_size=64 << 20),
            self._on_bulk,
            replay_window=config.ring.replay_window,
        )
        self.advertiser = Advertiser(
            Gateway(condor_config=config.condor.condor_config, token_dir=config.condor.token_dir, timeout=10),
            "FaultD",
            f"faultd@{config.ring.node_name}",
            self.figures,
            self._current_collector,
            config.daemon.advertise_interval,
        )
        self.status_line = StatusReporter(self.describe)
        self.metrics_port: int | None = None
        self._takeover_at: float | None = None  # when the role machine decided to manage
        self.role: RoleMachine | None = None
        self._nursery: trio.Nursery | None = None  # bulk sends run here, beside the daemon's tasks
        self._bulk_sends = 0
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
                self.metrics_port = await start_daemon_tasks(
                    nursery,
                    "faultd",
                    control_socket=cfg.daemon.control_socket,
                    on_control=self._control,
                    metrics_listen=cfg.daemon.metrics_listen,
                    figures=self.figures,
                    status_line=self.status_line,
                    advertiser=self.advertiser,
                    on_reload=self.reload,
                )
                log.info("faultd running", overlay=self.overlay.address, original=cfg.fault.original_manager)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await self.advertiser.withdraw()
                await self.advertiser.gateway.aclose()
                await self.gateway.aclose()

    def _bulk_port(self) -> int:
        return int(self.overlay.address.rpartition(":")[2])

    async def reload(self) -> None:
        """SIGHUP: the config file is read again (and HTCondor's values it leaves out) and what
        `RELOADABLE` names takes effect, the log naming the changes that wait for a restart; the
        revocation list is read again first. A broken file is reported and the old one kept."""
        self._reload_revoked()
        await self._reload_config()

    async def _reload_config(self) -> None:
        if self.reread is None:
            self._note(note("config_reloaded", "config not reloaded: started without a config file"))
            return
        try:
            new = await trio.to_thread.run_sync(self.reread)
        except ConfigError as e:
            log.error("config not reloaded, old one kept", error=str(e))
            self._note(note("reload_failed", f"config reload failed, old config kept: {e}", error=str(e)))
            return
        plan = plan_reload(self.config, new, RELOADABLE)
        sections: dict[str, dict[str, Any]] = {}
        for key in plan.apply:
            section, _, name = key.partition(".")
            sections.setdefault(section, {})[name] = getattr(getattr(new, section), name)
        self.config = self.config.model_copy(
            update={s: getattr(self.config, s).model_copy(update=u) for s, u in sections.items()}
        )
        set_level(self.config.daemon.log_level)
        self.gateway.timeout = self.config.daemon.gateway_timeout
        self.advertiser.interval = self.config.daemon.advertise_interval
        self.condor.section = self.config.condor
        text = f"config reloaded: {', '.join(plan.apply) or 'nothing changed'}" + (
            f"; restart faultd for {', '.join(plan.restart)}" if plan.restart else ""
        )
        self._note(
            note("config_reloaded", text, applied=",".join(plan.apply), restart=",".join(plan.restart))
        )

    def _reload_revoked(self) -> None:
        try:
            self.overlay.reload_revoked()
        except CertificateError as e:
            log.error("revocation list not reloaded, the old one stays", error=str(e))
            self._note(note("revoked_reload_failed", f"revocation list not reloaded: {e}", error=str(e)))
            return
        revoked = len(self.overlay.identity.trust.revoked)
        self._note(note("revoked_reloaded", f"revocation list reloaded ({revoked} serials)", revoked=revoked))

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
        try:
            self._events_in.send_nowait((msg, peer))
        except trio.WouldBlock:
            self.counters["events_overflow"] += 1

    async def _event_loop(self) -> None:
        async for item in self._events_out:
            now = trio.current_time()
            try:
                await self._handle(item, now)
            except Exception as e:  # one message that trips the role machine must not stop faultd
                self.counters["handler_errors"] += 1
                log.exception("role machine step failed", error=str(e))

    async def _handle(self, item: Event | tuple[Message, str], now: float) -> None:
        if isinstance(item, tuple):
            if self.role is not None:
                await self._apply(self.role.on_message(item[0], now))
            return
        core = self.overlay.core
        if self.role is None:
            if core is None or not core.joined:
                return  # the role machine starts once the ring has taken us in
            self.role = self._make_role(core.me)
            await self._apply(self.role.start(now))
            await self._apply(self.role.on_leaf_set(tuple(core.leaf.members()), now))
        if isinstance(item, LeafSetChanged):
            await self._apply(self.role.on_leaf_set(item.members, now))
        elif isinstance(item, Delivered | Received | BroadcastReceived):
            await self._apply(self.role.on_message(item.payload, now))

    async def _on_timer(self, now: float) -> None:
        if self.role is None:
            return
        try:
            await self._apply(self.role.on_timer(now))
        except Exception as e:  # as in _event_loop: a step that fails must not end faultd's nursery
            self.counters["timer_errors"] += 1
            log.exception("role machine timer step failed", error=str(e))

    def _note(self, item: Note) -> None:
        log_note(log, item)
        self.history.append(str(item))

    async def _apply(self, out: RoleOutput) -> None:
        for item in out.notes:
            self._note(item)
        if out.wakeup is not None:
            self._wakeup.set(out.wakeup)
        for action in out.condor:
            if isinstance(action, StartManager):
                self._takeover_at = trio.current_time()
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
        """One task per bulk send, at most MAX_BULK_SENDS at once (a manager pushes to K holders
        every alive until they ack: an unreachable holder must not pile up tasks)."""
        assert self._nursery is not None
        if self._bulk_sends >= MAX_BULK_SENDS:
            self.counters["bulk_sends_skipped"] += 1
            return
        self._bulk_sends += 1
        self._nursery.start_soon(self._bulk_send, addr, msg)

    async def _bulk_send(self, addr: str, msg: Message) -> None:
        try:
            await self.bulk.send(addr, msg)
        except ValueError as e:  # too large to encode (a replica taken over from a liar's push)
            self.counters["bulk_sends_refused"] += 1
            log.error("bulk message not sent", peer=addr, type=msg.TYPE, error=str(e))
        finally:
            self._bulk_sends -= 1

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
                    assert self.config.fault.collector is not None
                    await self.condor.start_manager(action.state, self.config.fault.collector)
                    if self._takeover_at is not None:
                        took = trio.current_time() - self._takeover_at
                        self._note(
                            note(
                                "manager_started",
                                f"collector and negotiator running here (epoch {action.epoch}), {took:.1f} s "
                                "after the decision",
                                epoch=action.epoch,
                                collector=self.config.fault.collector,
                                took_s=round(took, 3),
                            )
                        )
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
            except (GatewayError, CondorRoleError, OSError) as e:  # OSError: a file of the restore
                self.condor_error = str(e)
                log.warning(
                    "role change not applied yet", action=type(action).__name__, attempt=attempt, error=str(e)
                )
                await trio.sleep(min(5.0, 0.2 * attempt))
        self._note(
            note(
                "role_not_applied",
                f"gave up applying {type(action).__name__}: {self.condor_error}",
                action=type(action).__name__,
                error=self.condor_error,
            )
        )

    async def _replication_loop(self) -> None:
        while True:
            await trio.sleep(self.config.fault.state_interval)
            await self.replicate_local_state()

    async def replicate_local_state(self) -> None:
        """Read this machine's central-manager state for the role machine, while it manages and
        the takeover's restore is done (`condor.managing`): read between the role change and the
        restore, this machine's own old files (no poold state, an old Accountant) would become
        the newest version and be pushed to the replica holders over the replica just taken."""
        if self.role is not None and self.role.role is Role.MANAGER and self.condor.managing:
            files = await trio.to_thread.run_sync(self.condor.read_state)
            await self._apply(self.role.on_local_state(files, trio.current_time()))

    # ------------------------------------------------------------------ control socket

    async def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("cmd") != "status":
            return {"error": f"unknown command {request.get('cmd')!r}"}
        return self.status()

    def _current_collector(self) -> str | None:
        """The collector of the pool's current manager, as far as this machine knows."""
        if self.condor.collector:
            return self.condor.collector
        return self.role.manager_collector if self.role is not None else None

    def describe(self) -> str:
        """One line for systemd's STATUS=: this machine's role, or what faultd waits for."""
        role = self.role
        if role is None:
            via = f" via {', '.join(self.config.ring.seeds())}" if self.config.ring.bootstrap else ""
            return f"joining the pool's ring{via}"
        if self.condor_error:
            return f"{role.role.value} (epoch {role.best[0]}); waiting for HTCondor: {self.condor_error}"
        if role.role is Role.MANAGER:
            holders = len(role.replica_holders())
            return f"manager of the pool (epoch {role.epoch}), collector {role.collector}, {holders} replicas"
        if role.manager is None:
            return "listener; no manager heard yet"
        manager = f"manager {role.manager.addr} (epoch {role.best[0]})"
        return f"listener; {manager}, collector {role.manager_collector}"

    def figures(self) -> Figures:
        """What the ClassAd and the Prometheus endpoint show (CamelCase ClassAd names; a name
        ending in Total is a counter)."""
        now = trio.current_time()
        role = self.role
        node = self.overlay.core
        replica = role.replica if role is not None else None
        drops = self.overlay.drops if node else {}
        return {
            "Role": role.role.value if role is not None else "joining",
            "OriginalManager": self.config.fault.original_manager,
            "Epoch": role.best[0] if role is not None else 0,
            "Seq": (role.seq if role.role is Role.MANAGER else role.last_seq) if role is not None else None,
            "Manager": role.manager.addr if role is not None and role.manager is not None else None,
            "ManagerCollector": role.manager_collector if role is not None else None,
            "CollectorHere": self.config.fault.collector,
            "OverlayAddress": self.overlay.address if node else None,
            "LeafSetSize": len(node.leaf.members()) if node else 0,
            "LastAliveAgeSeconds": round(now - role.last_alive, 3) if role and role.last_alive else None,
            "ReplicaVersion": replica.version if replica is not None else None,
            "ReplicaAgeSeconds": round(now - role.replica_at, 3)
            if role is not None and role.replica_at
            else None,
            "ReplicaHolders": len(role.replica_holders())
            if role is not None and role.role is Role.MANAGER
            else 0,
            "CondorError": self.condor_error,
            "ReconfigsTotal": self.condor.reconfigs,
            "TakeoversTotal": role.takeovers if role is not None else 0,
            "FencedAlivesTotal": role.fenced if role is not None else 0,
            "DropsTotal": sum(drops.values()) + sum(self.bulk.drops.values()),
        }

    def status(self) -> dict[str, Any]:
        """What `faultd status` shows: the role, the overlay, HTCondor, drops and recent decisions."""
        now = trio.current_time()
        role = self.role.status(now) if self.role is not None else {"role": "joining"}
        return role | {
            "overlay": self.overlay.address if self.overlay.core else None,
            "leaf_set": [p.addr for p in self.overlay.core.leaf.members()] if self.overlay.core else [],
            "seeds_unheard": self.overlay.core.unheard_seeds() if self.overlay.core else [],
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
