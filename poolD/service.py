"""poold, the daemon: one per central manager. The trio driver of `poolD.core.PoolCore`.

It owns the I/O the core asks for and feeds the answers back, each with `trio.current_time()`:
- the overlay (UDP ring of central managers): messages from other pools go to the core, the
  core's `Send` and `Measure` actions go out through it at once;
- the gateway (HTCondor): `ReadLoad`, `SetFlockTo`, `SetFlockFrom`, `ShutOutSchedds` and
  `ReadFlockTo` (after an activation) are carried out one at a time by one task, in the order
  the core asked for them, and their outcome is fed back;
- token directories and HTCondor's token tools (cross-pool trust, `[trust]`): `RequestToken`,
  `ApproveToken`, `InstallToken` and `RemoveToken` each run as a task of their own (an install
  waits for the tool to receive the token), bounded by the core (poolD.flock_trust);
- the core's single timer;
- the control socket for `poold status`; systemd readiness, STATUS= and the event loop's
  watchdog (common.systemd); SIGHUP reloads the policy and what else can change without a
  restart (`RELOADABLE`), and logs what cannot;
- the daemon's ClassAd (MyType "PoolD") in the pool's collector, and the optional Prometheus
  endpoint, both showing `figures()`;
- the state file (`[daemon] state_file`, poolD.state): read at start and resumed from (a file it
  cannot use is set aside and poold starts fresh), written atomically within a second of a change;
- with `[daemon] faultd_socket`, the active/standby gate (poolD.manager_role): poold on every
  candidate manager polls faultD there, and only while faultD says this machine holds the pool's
  manager role does it run a core (resumed from the state file faultD restored); on losing the
  role it drops the core and every HTCondor action not yet carried out, withdrawing nothing.
On SIGTERM the runtime FLOCK_TO is removed and the ad withdrawn, so the schedds fall back to
their own config; the state file then says so.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import structlog
import trio

from common.advertise import Advertiser, Figures
from common.condor import Gateway, GatewayError
from common.config import ConfigError
from common.daemon_tasks import start_daemon_tasks
from common.events import Note, log_note, note
from common.logging import set_level
from common.overlay.certs import CertificateError
from common.overlay.driver import UdpOverlay
from common.overlay.ids import digit, id_hex
from common.overlay.messages import Peer
from common.overlay.node import Event, Received
from common.reload import plan_reload
from common.service import query_control
from common.systemd import StatusReporter
from common.timer import Wakeup
from poolD.condor_flock import apply_flock_from, apply_flock_to, read_flock_to, shut_out_schedds
from poolD.condor_trust import approve_token, install_token, remove_token, request_token
from poolD.config import PooldConfig
from poolD.core import (
    CoreOutput,
    CoreSettings,
    FlockFromApplied,
    FlockToApplied,
    Measure,
    PoolCore,
    ReadLoad,
    Send,
    SetFlockFrom,
    SetFlockTo,
    ShutOutDone,
    ShutOutSchedds,
)
from poolD.flock_to_readback import ReadFlockTo
from poolD.flock_trust import ApproveToken, InstallToken, RemoveToken, RequestToken
from poolD.manager_role import Activate, Deactivate, GateAction, ManagerGate, Raise, reading_from_status
from poolD.policy import Policy
from poolD.state import (
    PooldState,
    StateFileError,
    encode_state,
    load_state,
    save_state,
    set_aside,
    summary,
)

log = structlog.get_logger("poold")

GatewayAction = ReadLoad | SetFlockTo | SetFlockFrom | ShutOutSchedds | ReadFlockTo
# What a SIGHUP takes on from a changed poold.toml; any other change waits for a restart (the
# revocation list, [ring] revoked_file, is read again on every SIGHUP).
RELOADABLE = ("daemon.policy_file", "daemon.log_level", "daemon.gateway_timeout", "daemon.advertise_interval")
STATE_SAVE_INTERVAL = 1.0  # seconds: a change reaches the state file within this


class PoolDaemon:
    """Runs one pool's `PoolCore` for real: overlay, gateway, timer, control socket, signals."""

    def __init__(
        self,
        config: PooldConfig,
        *,
        policy: Policy | None = None,
        reread: Callable[[], PooldConfig] | None = None,
    ) -> None:
        if config.pool.collector is None:
            raise ValueError("[pool] collector unresolved: read it from HTCondor first (poolD.cli)")
        self.config = config
        self.reread = reread  # the config file read again (SIGHUP); None: the policy only
        self.policy = policy or self._read_policy()
        self.gateway = Gateway(
            condor_config=config.pool.condor_config,
            token_dir=config.pool.token_dir,
            collector=config.pool.collector,
            timeout=config.daemon.gateway_timeout,
            tools=config.trust.tools,
        )
        publisher = Gateway(  # as poold too: the collector takes its ad from poold's identity
            condor_config=config.pool.condor_config,
            token_dir=config.pool.token_dir,
            collector=config.pool.collector,
            timeout=10,
        )
        self.advertiser = Advertiser(
            publisher,
            "PoolD",
            f"poold@{config.pool.name}",
            self.figures,
            lambda: self.config.pool.collector,
            config.daemon.advertise_interval,
        )
        self.status_line = StatusReporter(self.describe)
        self.metrics_port: int | None = None
        self.overlay = UdpOverlay(config.ring, on_event=self._on_event)
        self.core: PoolCore | None = None
        self._trust_nursery: trio.Nursery | None = None  # where token actions run (serve)
        self.decisions: deque[str] = deque(maxlen=50)
        self.counters: Counter[str] = Counter()
        self._wakeup = Wakeup()
        self._events_in, self._events_out = trio.open_memory_channel[Event](1000)
        # The core keeps at most one reading, one FLOCK_TO change and a bounded number of
        # FLOCK_FROM changes outstanding, and one shut-out per revoked grant, so this queue is
        # bounded by what the core asks for.
        self._condor_in, self._condor_out = trio.open_memory_channel[GatewayAction](float("inf"))
        self._wall_offset = 0.0  # wall clock - trio's clock (the state file holds wall-clock times)
        self._saved: PooldState | None = None  # the document last written (saved_at zeroed)
        self._saved_file: dict[str, Any] | None = None  # what status() says of that write
        self.gate: ManagerGate | None = None  # with faultD: whether this machine manages the pool
        if config.daemon.faultd_socket is not None:
            self.gate = ManagerGate(config.pool.collector, silence_limit=config.daemon.faultd_silence)

    # ------------------------------------------------------------------ lifecycle

    def _read_policy(self) -> Policy:
        path = self.config.daemon.policy_file
        return Policy.load(path) if path else Policy.allow_all()

    async def reload(self) -> None:
        """SIGHUP: the config file is read again and what `RELOADABLE` names takes effect (the
        log names the changes that wait for a restart); then the revocation list and the policy
        file are read again. A broken config file, list or policy is reported and the old one
        kept."""
        if self.reread is not None:
            await self._reload_config()
        try:
            self.overlay.reload_revoked()
        except CertificateError as e:
            log.error("revocation list not reloaded", error=str(e))
            self._note(
                note(
                    "revoked_reload_failed",
                    f"revocation list reload failed, old list kept: {e}",
                    error=str(e),
                )
            )
        else:
            revoked = len(self.overlay.identity.trust.revoked)
            self._note(
                note("revoked_reloaded", f"revocation list reloaded ({revoked} serials)", revoked=revoked)
            )
        try:
            policy = self._read_policy()
        except ConfigError as e:
            log.error("policy not reloaded", error=str(e))
            self._note(f"policy reload failed, old policy kept: {e}")
            return
        policy.blacklist = self.policy.blacklist
        self.policy = policy
        if self.core is not None:
            await self._apply(self.core.replace_policy(policy, trio.current_time()))
        else:
            self._note(f"policy reloaded from {policy.source}")

    async def _reload_config(self) -> None:
        assert self.reread is not None
        try:
            new = await trio.to_thread.run_sync(self.reread)
        except ConfigError as e:
            log.error("config not reloaded, old one kept", error=str(e))
            self._note(note("reload_failed", f"config reload failed, old config kept: {e}", error=str(e)))
            return
        plan = plan_reload(self.config, new, RELOADABLE)
        updates = {
            key.removeprefix("daemon."): getattr(new.daemon, key.removeprefix("daemon."))
            for key in plan.apply
        }
        self.config = self.config.model_copy(update={"daemon": self.config.daemon.model_copy(update=updates)})
        d = self.config.daemon
        set_level(d.log_level)
        self.gateway.timeout = d.gateway_timeout
        self.advertiser.interval = d.advertise_interval
        text = f"config reloaded: {', '.join(plan.apply) or 'nothing changed'}" + (
            f"; restart poold for {', '.join(plan.restart)}" if plan.restart else ""
        )
        self._note(
            note("config_reloaded", text, applied=",".join(plan.apply), restart=",".join(plan.restart))
        )

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled (SIGTERM, SIGINT); then withdraw our FLOCK_TO and our ad."""
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.overlay.run)
                assert self.overlay.core is not None
                cfg = self.config
                nursery.start_soon(self._event_loop)
                nursery.start_soon(self._condor_loop)
                nursery.start_soon(self._wakeup.run, self._on_timer)
                self._trust_nursery = nursery
                self._wall_offset = time.time() - trio.current_time()
                if cfg.daemon.faultd_socket is None:
                    await self._run_core(self._make_core())
                else:
                    nursery.start_soon(self._gate_loop, cfg.daemon.faultd_socket)
                if cfg.daemon.state_file is not None:
                    nursery.start_soon(self._state_loop, cfg.daemon.state_file)
                self.metrics_port = await start_daemon_tasks(
                    nursery,
                    "poold",
                    control_socket=cfg.daemon.control_socket,
                    on_control=self._control,
                    metrics_listen=cfg.daemon.metrics_listen,
                    figures=self.figures,
                    status_line=self.status_line,
                    advertiser=self.advertiser,
                    on_reload=self.reload,
                )
                log.info("poold running", pool=cfg.pool.name, overlay=self.overlay.address)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(15):
                if self.core is not None and self._acting():
                    core = self.core
                    out = core.stop()
                    self._notes(out)
                    for action in out.actions:
                        assert isinstance(action, SetFlockTo)
                        applied = await apply_flock_to(self.gateway, action)
                        self._notes(core.on_flock_to_applied(applied, trio.current_time()))
                    if self.config.daemon.state_file is not None:
                        await self._save_state(self.config.daemon.state_file)
                await self.advertiser.withdraw()
                await self.gateway.aclose()
                await self.advertiser.gateway.aclose()

    def _make_core(self) -> PoolCore:
        """A core for this pool, on the overlay node poold runs (joined at start)."""
        assert self.overlay.core is not None
        cfg = self.config
        assert cfg.pool.collector is not None
        settings = CoreSettings(
            pool=cfg.pool.name,
            collector=cfg.pool.collector,
            discovery=cfg.discovery,
            flocking=cfg.flocking,
            trust_domain=cfg.trust.trust_domain,
            token_lifetime=cfg.trust.token_lifetime,
        )
        return PoolCore(settings, self.overlay.core, self.policy, random.Random())

    def _acting(self) -> bool:
        """Whether poold here acts for the pool: always without faultD, else while the gate says so."""
        return self.gate is None or self.gate.active

    # ------------------------------------------------------------------ the active/standby gate

    async def _gate_loop(self, socket: Path) -> None:
        """Ask faultD on this machine for its role, every `faultd_poll_interval`, and follow the gate."""
        while True:
            await self.read_role(socket)
            await trio.sleep(self.config.daemon.faultd_poll_interval)

    async def read_role(self, socket: Path) -> None:
        """One reading of faultD's role (or its silence) through the gate, and what it decides."""
        assert self.gate is not None
        try:
            reply = await trio.to_thread.run_sync(query_control, socket, {"cmd": "status"}, 1.0)
            actions = self.gate.on_reading(reading_from_status(reply), trio.current_time())
        except (OSError, ValueError) as e:
            actions = self.gate.on_silence(f"{socket}: {e}", trio.current_time())
        for action in actions:
            await self._on_gate(action)

    async def _on_gate(self, action: GateAction) -> None:
        if isinstance(action, Activate):
            core = self._make_core()
            core.epoch = action.epoch
            text = f"this machine holds the pool's manager role (epoch {action.epoch}): poold active"
            self._note(note("poold_active", text, epoch=action.epoch))
            await self._run_core(core)
            await self._apply(core.read_back_flock_to(trio.current_time()))
            await self._apply(core.reassert_flock_from(trio.current_time()))
            if not core.announcing_move:
                # The state resumed (if any) named our own collector, yet the role came here from
                # elsewhere, or may have: the pools that flock to us learn where we are now.
                await self._apply(core.announce_move(trio.current_time()))
        elif isinstance(action, Raise):
            if self.core is not None:
                self.core.epoch = action.epoch
        else:
            self._stand_by(action)

    def _stand_by(self, action: Deactivate) -> None:
        """Losing the role: the core goes, and with it every HTCondor action not yet carried out;
        nothing is withdrawn (the poold now active owns FLOCK_TO and FLOCK_FROM), and the state
        file is no longer written (faultD replicates the active poold's)."""
        self.core = None
        self._saved = None
        self._saved_file = None
        dropped = 0
        while True:
            try:
                self._condor_out.receive_nowait()
            except trio.WouldBlock:
                break
            dropped += 1
        self.counters["condor_actions_dropped"] += dropped
        text = f"poold standing by: {action.reason}"
        self._note(note("poold_standby", text, reason=action.reason, dropped=dropped))

    # ------------------------------------------------------------------ the state file

    async def _run_core(self, core: PoolCore) -> None:
        """Resume `core` from the state file, then make it poold's core and start it (nothing
        reaches it before it resumed)."""
        resumed = await self._resume(core)
        self.core = core
        if resumed is not None:
            await self._apply(resumed)
        await self._apply(core.start(trio.current_time()))

    async def _resume(self, core: PoolCore) -> CoreOutput | None:
        """Resume from the state file, if there is one; the restore's output, to apply once the
        core runs. A file poold cannot use (damaged, hostile, of another version or another
        pool) is logged naming the file and field, set aside, and poold starts fresh."""
        path = self.config.daemon.state_file
        if path is None:
            return None
        try:
            state = await trio.to_thread.run_sync(load_state, path)
            if state is None:
                return None
            try:
                out = core.restore_state(state, trio.current_time(), self._wall_offset)
            except ValueError as e:
                raise StateFileError(f"{path}: {e}") from None
        except StateFileError as e:
            self.counters["state_file_rejected"] += 1
            aside = set_aside(path)
            where = f"set aside as {aside}" if aside is not None else "could not be set aside"
            log.error("state file not resumed from: starting fresh", error=str(e), aside=str(aside))
            self._note(note("state_rejected", f"{e}; {where}; starting fresh", error=str(e)))
            return None
        log.info("state resumed", file=str(path), **summary(state))
        return out

    async def _state_loop(self, path: Path) -> None:
        """Write the state file when the core's state changed, at most once a STATE_SAVE_INTERVAL."""
        while True:
            await trio.sleep(STATE_SAVE_INTERVAL)
            await self._save_state(path)

    async def _save_state(self, path: Path) -> None:
        """Write the core's state if it changed since the last write; a failure is logged and
        counted, and tried again at the next interval."""
        if self.core is None or not self._acting():
            return
        try:
            state = self.core.export_state(trio.current_time(), self._wall_offset)
        except Exception as e:  # a document that fails its own bounds: a bug, not a reason to stop
            self.counters["state_save_errors"] += 1
            log.exception("state not exported", error=str(e))
            return
        unstamped = state.model_copy(update={"saved_at": 0.0})
        if unstamped == self._saved:
            return
        try:
            await trio.to_thread.run_sync(save_state, path, state)
        except StateFileError as e:
            self.counters["state_save_errors"] += 1
            log.error("state file not written", error=str(e))
            return
        self._saved = unstamped
        self._saved_file = {
            "sha256": hashlib.sha256(encode_state(state)).hexdigest(),
            "saved_at": state.saved_at,
            "flock_to": list(state.flock_to),
        }
        self.counters["state_saves"] += 1

    # ------------------------------------------------------------------ feeding the core

    def _on_event(self, event: Event) -> None:
        if isinstance(event, Received):
            try:
                self._events_in.send_nowait(event)
            except trio.WouldBlock:
                self.counters["events_overflow"] += 1

    async def _event_loop(self) -> None:
        async for event in self._events_out:
            assert isinstance(event, Received)
            core = self.core
            if core is None:
                self.counters["messages_while_standby"] += 1
                continue
            await self._feed("events", lambda e=event, c=core: c.on_message(e.payload, trio.current_time()))

    async def _on_timer(self, now: float) -> None:
        core = self.core
        if core is not None:
            await self._feed("timer", lambda: core.on_timer(now))

    async def _condor_loop(self) -> None:
        """Carry out the core's HTCondor actions one at a time and feed back their outcome. An
        action that fails in an unexpected way is fed back as failed (so the core decides again)
        and counted; the loop goes on."""
        async for action in self._condor_out:
            core = self.core
            if core is None or not self._acting():
                self.counters["condor_actions_dropped"] += 1
                continue
            try:
                outcome = await self._carry_out(core, action)
            except Exception as e:  # a bug or an HTCondor surprise must not stop poold's decisions
                self.counters["condor_action_errors"] += 1
                log.exception("HTCondor action failed", action=type(action).__name__, error=str(e))
                outcome = self._failed(core, action, f"{type(e).__name__}: {e}")
            await self._feed(type(action).__name__, outcome, core)

    async def _carry_out(self, core: PoolCore, action: GatewayAction) -> Callable[[], CoreOutput]:
        """Do one action through the gateway; return the step that feeds its outcome to the core."""
        if isinstance(action, ReadLoad):
            try:
                load = await self.gateway.pool_load()
            except GatewayError as e:
                self.counters["load_errors"] += 1
                log.warning("cannot read pool load", error=str(e))
                return self._failed(core, action, str(e))
            return lambda: core.on_load(load, trio.current_time())
        if isinstance(action, SetFlockTo):
            applied = await apply_flock_to(self.gateway, action)
            return lambda: core.on_flock_to_applied(applied, trio.current_time())
        if isinstance(action, ShutOutSchedds):
            done = await shut_out_schedds(self.gateway, action)
            return lambda: core.on_shut_out(done, trio.current_time())
        if isinstance(action, ReadFlockTo):
            seen = await read_flock_to(self.gateway)
            return lambda: core.on_flock_to_read(seen, trio.current_time())
        granted = await apply_flock_from(self.gateway, action)
        return lambda: core.on_flock_from_applied(granted, trio.current_time())

    async def _carry_out_trust(
        self, action: RequestToken | ApproveToken | InstallToken | RemoveToken
    ) -> None:
        """One token action (poolD.condor_trust), its outcome fed back to the core; a failure of
        any kind is fed back as a failure with its reason."""
        core, trust = self.core, self.config.trust
        if core is None or not self._acting():
            self.counters["token_actions_dropped"] += 1
            return
        now = trio.current_time
        try:
            if isinstance(action, RequestToken):
                rid, error = await request_token(self.gateway, trust, action)
                await self._feed(
                    "token_request", lambda: core.on_token_requested(action, rid, error, now()), core
                )
            elif isinstance(action, ApproveToken):
                assert trust.trust_domain is not None
                why = await approve_token(self.gateway, trust.trust_domain, action)
                await self._feed("token_approval", lambda: core.on_token_approved(action, why, now()), core)
            elif isinstance(action, InstallToken):
                why = await install_token(trust, action)
                await self._feed("token_install", lambda: core.on_token_installed(action, why, now()), core)
            else:
                remove_token(trust, action)
        except Exception as e:  # a bug or an HTCondor surprise must not stop poold's decisions
            self.counters["token_action_errors"] += 1
            log.exception("token action failed", action=type(action).__name__, error=str(e))
            error = f"{type(e).__name__}: {e}"
            if isinstance(action, RequestToken):
                await self._feed(
                    "token_request", lambda: core.on_token_requested(action, None, error, now()), core
                )
            elif isinstance(action, ApproveToken):
                await self._feed("token_approval", lambda: core.on_token_approved(action, error, now()), core)
            elif isinstance(action, InstallToken):
                await self._feed("token_install", lambda: core.on_token_installed(action, error, now()), core)

    @staticmethod
    def _failed(core: PoolCore, action: GatewayAction, error: str) -> Callable[[], CoreOutput]:
        """The step that tells the core an action did not happen."""
        if isinstance(action, ReadLoad):
            return lambda: core.on_load(None, trio.current_time(), error)
        if isinstance(action, SetFlockTo):
            return lambda: core.on_flock_to_applied(FlockToApplied(action, False, {}), trio.current_time())
        if isinstance(action, ShutOutSchedds):
            return lambda: core.on_shut_out(ShutOutDone(action, error=error), trio.current_time())
        if isinstance(action, ReadFlockTo):
            return lambda: core.on_flock_to_read(None, trio.current_time())
        return lambda: core.on_flock_from_applied(FlockFromApplied(action, error), trio.current_time())

    async def _feed(self, what: str, step: Callable[[], CoreOutput], core: PoolCore | None = None) -> None:
        """Run one step of the core and carry out its output; a failure is logged and counted,
        and the daemon goes on (one bad step must not take the central manager's daemon down).
        With `core`: only while it is still the core (an outcome arriving after poold stood by
        goes nowhere)."""
        if core is not None and core is not self.core:
            self.counters["outcomes_after_standby"] += 1
            return
        try:
            await self._apply(step())
        except Exception as e:
            self.counters[f"{what}_errors"] += 1
            log.exception("step failed", step=what, error=str(e))

    async def _apply(self, out: CoreOutput) -> None:
        self._notes(out)
        if not self._acting():
            self.counters["actions_while_standby"] += len(out.actions)
            return
        if out.wakeup is not None:
            self._wakeup.set(out.wakeup)
        for action in out.actions:
            if isinstance(action, Send):
                await self.overlay.send_direct(action.addr, action.message)
            elif isinstance(action, Measure):
                await self.overlay.measure(action.peer)
            elif isinstance(action, RequestToken | ApproveToken | InstallToken | RemoveToken):
                assert self._trust_nursery is not None
                self._trust_nursery.start_soon(self._carry_out_trust, action)
            else:
                self._condor_in.send_nowait(action)

    def _notes(self, out: CoreOutput) -> None:
        for item in out.notes:
            self._note(item)

    def _note(self, item: Note | str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.decisions.append(f"{stamp} {item}")
        log_note(log, item)

    # ------------------------------------------------------------------ what it shows

    def describe(self) -> str:
        """One line for systemd's STATUS=: what poold is doing, or what it waits for."""
        node, core, cfg = self.overlay.core, self.core, self.config
        if self.gate is not None and not self.gate.active and node is not None and node.joined:
            why = self.gate.problem or "this machine does not hold the pool's manager role"
            return f"standby: {why}"
        if node is None or core is None or not node.joined:
            via = f" via {', '.join(cfg.ring.seeds())}" if cfg.ring.bootstrap else ""
            return f"joining the ring of central managers{via}"
        if core.load_error:
            return f"waiting for the pool's collector {cfg.pool.collector}: {core.load_error}"
        if core.load is None:
            return f"reading the pool's load from {cfg.pool.collector}"
        load = core.load
        flock = ", ".join(core.flocking.active) or "not set"
        return (
            f"{load.free_slots}/{load.total_slots} slots free, {load.idle_jobs} idle jobs; "
            f"FLOCK_TO {flock}; {len(core.willing.entries)} willing pools"
        )

    def figures(self) -> Figures:
        """What the ClassAd and the Prometheus endpoint show (CamelCase ClassAd names; a name
        ending in Total is a counter)."""
        node, core, cfg = self.overlay.core, self.core, self.config
        load = core.load if core else None
        counters = dict(self.counters) | (dict(core.counters) if core else {})
        willing = sorted(core.willing.entries) if core else []
        return {
            "Pool": cfg.pool.name,
            "PoolCollector": cast(str, cfg.pool.collector),
            "OverlayAddress": self.overlay.address if node else None,
            "NodeId": id_hex(node.me.id) if node else None,
            "Joined": bool(node and node.joined),
            "LeafSetSize": len(node.leaf.members()) if node else 0,
            "RoutingTableRows": node.table.used_rows() if node else 0,
            "TotalSlots": load.total_slots if load else None,
            "FreeSlots": load.free_slots if load else None,
            "IdleJobs": load.idle_jobs if load else None,
            "RunningJobs": load.running_jobs if load else None,
            "LoadError": core.load_error if core else None,
            "WillingPools": ",".join(willing),
            "WillingPoolCount": len(willing),
            "FlockTo": ",".join(core.flocking.active) if core else "",
            "FlockToPoolCount": len(core.flocking.active) if core else 0,
            "FlockFrom": ",".join(sorted(core.flock_from)) if core else "",
            "Blacklisted": ",".join(sorted(core.policy.blacklist)) if core else "",
            "OffersAcceptedTotal": core.discovery.accepted if core else 0,
            "OffersDroppedTotal": sum(core.discovery.dropped.values()) if core else 0,
            "OffersSentTotal": counters.get("offers_sent", 0),
            "LoadErrorsTotal": counters.get("load_errors", 0),
            "OverlayDropsTotal": sum(self.overlay.drops.values()),
        }

    # ------------------------------------------------------------------ status

    async def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("cmd", "status") != "status":
            return {"error": f"unknown command {request.get('cmd')!r}"}
        return self.status()

    def rtt(self, node_id: int) -> float | None:
        """Seconds of round-trip time to a node, or None if not measured (or the overlay not started)."""
        return self.overlay.core.rtt.get(node_id) if self.overlay.core else None

    def status(self) -> dict[str, Any]:
        """What `poold status` shows: the overlay, the load, and the core's decisions."""
        node = self.overlay.core
        core = self.core
        now = trio.current_time()

        def peer(p: Peer) -> dict[str, Any]:
            rtt = self.rtt(p.id)
            return {
                "id": id_hex(p.id),
                "addr": p.addr,
                "rtt_ms": None if rtt is None else round(rtt * 1000, 2),
            }

        table = []
        if node is not None:
            b = node.params.b
            for r in range(node.table.used_rows()):
                table.append([peer(p) | {"col": digit(p.id, r, b)} for p in node.table.row(r)])
        decisions = core.status(now) if core is not None else {}
        return {
            "pool": self.config.pool.name,
            "collector": self.config.pool.collector,
            "node": peer(node.me) if node else None,
            "joined": bool(node and node.joined),
            "seeds_unheard": node.unheard_seeds() if node else [],
            "leaf_set": [peer(p) for p in node.leaf.members()] if node else [],
            "routing_table": table,
            "load": core.load.model_dump() if core and core.load else None,
            "load_error": core.load_error if core else None,
            "willing_list": decisions.get("willing_list", []),
            "flock_to": decisions.get("flock_to", {}),
            "flock_active": decisions.get("flock_active", []),
            "flock_from": decisions.get("flock_from", []),
            "flock_from_grants": decisions.get("flock_from_grants", {}),
            "authorized": decisions.get("authorized", {}),
            "blacklist": decisions.get("blacklist", {}),
            "tokens": decisions.get("tokens", {}),
            "decisions": list(self.decisions) + (core.discovery.decisions[-10:] if core else []),
            "offers": decisions.get("offers", {"accepted": 0, "dropped": {}}),
            "overlay_drops": self.overlay.drops,
            "counters": dict(self.counters) | (dict(core.counters) if core else {}),
            "manager_role": self._gate_status(now),
            # The state file this poold last wrote: its SHA-256 is what faultd's status shows of
            # the replicas it holds ("replica" "sha256" "poold"), so one can see when a failover
            # would resume from it.
            "state_file": self._saved_file if self._acting() else None,
        }

    def _gate_status(self, now: float) -> dict[str, Any] | None:
        """The gate's status, with mode "resuming" between the gate's Activate and the core's
        resume from the state file: until then status() shows no decisions, and an "active" with
        FLOCK_TO [] would claim the resumed state has none."""
        if self.gate is None:
            return None
        status = self.gate.status(now)
        if self.gate.active and self.core is None:
            status["mode"] = "resuming"
        return status
