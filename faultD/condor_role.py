"""faultD's Condor Module: what a role means for the HTCondor daemons on this machine.

The role lives in one file faultD owns in HTCondor's config directory (`99-faultd-role.conf`):
`COLLECTOR_HOST` (the pool's current manager) and `DAEMON_LIST` (with COLLECTOR and NEGOTIATOR
while this machine manages the pool). After writing it, faultD sends a reconfig to the local
condor_master, addressed from its address file, since the collector may be dead. The master
re-reads its configuration, starts or stops the collector and negotiator, and forwards the reconfig
to its other daemons, which rebuild their collector list and re-advertise.

Why a file and not runtime configuration (`condor_config_val -rset`): runtime values are per
daemon and are not inherited by daemons the master starts later. A negotiator started on a
replacement read the old COLLECTOR_HOST from the config files and aborted every cycle (seen in
the sandbox). A file covers every daemon at once, survives daemon restarts, and shows an
administrator in one place what faultD changed. CONDOR_HOST is left alone: security settings are
often derived from it (common/deploy_files/condor/60-faultd-pool.conf says what to allow instead).

The Replication Module reads the state a replacement needs (the negotiator's Accountant log in
SPOOL, the central manager's own config files, poolD's state file) and restores it before the
negotiator starts.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

import structlog
import trio

from common.condor import DaemonKind, DaemonRef, Gateway
from common.condor.config_files import write_atomically, write_config_file
from common.condor.knobs import (
    CENTRAL_MANAGER,
    FAULTD_ROLE,
    CheckedConfig,
    KnobRefused,
    check_config,
    check_sinful,
    parse_config_text,
)
from faultD.config import MANAGER_CONFIG_PREFIX, CondorSection
from faultD.messages import MAX_STATE_FILES, STATE_BYTES_LIMIT, PoolState, StateFile

log = structlog.get_logger("faultd.condor")

ACCOUNTANT = "Accountantnew.log"
MANAGER_MARK = "# role: manager"  # the role file's line that says the master runs the manager daemons


class CondorRoleError(Exception):
    """Something on this machine stops faultD from applying a role (named file, daemon)."""


class RoleRefused(CondorRoleError):
    """A role whose values fail faultD's allow-list (e.g. a collector that is not host:port):
    never written, and trying again would not help."""


async def daemon_answers(address_file: Path, timeout: float = 0.5) -> bool:
    """A daemon's address file exists and the address in it accepts a TCP connection."""
    try:
        sinful = address_file.read_text().splitlines()[0]
    except (OSError, IndexError):
        return False
    match = re.match(r"<([^:>?]+):(\d+)", sinful.strip())
    if match is None:
        return False
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_tcp_stream(match[1], int(match[2]))
        except OSError:
            return False
        await stream.aclose()
        return True
    return False  # a local listener accepts at once, even when its daemon is busy


class CondorRole:
    """Applies this machine's role to its HTCondor through the role file; see the module docstring."""

    def __init__(self, section: CondorSection, gateway: Gateway) -> None:
        self.section = section
        self.gateway = gateway
        self.collector: str | None = None
        self.managing = False
        self.reconfigs = 0
        self.refused = 0  # replicated files not restored: not faultD's, or outside the allow-list
        self.refusals: deque[str] = deque(maxlen=10)

    @property
    def role_file(self) -> Path:
        """The role file's path, in HTCondor's config directory."""
        return self.section.config_dir / self.section.role_file

    def master(self) -> DaemonRef:
        """The local condor_master, by the address in its address file (no collector needed)."""
        path = self.section.log_dir / ".master_address"
        try:
            address = path.read_text().splitlines()[0].strip()
        except (OSError, IndexError) as e:
            raise CondorRoleError(f"{path}: cannot read the condor_master's address ({e})") from None
        try:
            check_sinful(address)
        except ValueError as e:
            raise CondorRoleError(f"{path}: not a condor_master's address: {e}") from None
        return DaemonRef(kind=DaemonKind.MASTER, address=address)

    def address_file(self, daemon: str) -> Path:
        """Where a local daemon (e.g. 'COLLECTOR') writes its address, in HTCondor's LOG directory."""
        return self.section.log_dir / f".{daemon.lower()}_address"

    def owned_files(self) -> set[str]:
        """The file names faultD may write in HTCondor's config directory: its role file and one
        per configured manager config file (by base name, with MANAGER_CONFIG_PREFIX)."""
        return {self.section.role_file} | {
            MANAGER_CONFIG_PREFIX + p.name for p in self.section.manager_config_files
        }

    def role_config(self, manager_daemons: list[str] | None = None) -> CheckedConfig:
        """The role file's knobs, through faultD's allow-list (DAEMON_LIST, COLLECTOR_HOST)."""
        daemons = list(self.section.listener_daemons)
        if self.managing:
            wanted = self.section.manager_daemons if manager_daemons is None else manager_daemons
            daemons += [d for d in wanted if d not in daemons]
        values: dict[str, str | None] = {"DAEMON_LIST": ", ".join(daemons)}
        if self.collector:
            values["COLLECTOR_HOST"] = self.collector
        return check_config(FAULTD_ROLE, values)

    def _role_comments(self) -> list[str]:
        return [
            "# Written by faultd: this machine's role in the pool. Do not edit; faultd rewrites it.",
            MANAGER_MARK if self.managing else "# role: listener",
        ]

    def render(self, manager_daemons: list[str] | None = None) -> str:
        """The role file; a manager's DAEMON_LIST adds `manager_daemons` (default: all of them)."""
        return self.role_config(manager_daemons).render(self._role_comments())

    async def apply(self, manager_daemons: list[str] | None = None) -> None:
        """Write the role file and reconfig the master. When the file on disk said this machine
        manages and the new role does not, wait until the manager daemons are gone.

        The file, not `self.managing`, is what the master runs by: a faultd restarted after a
        crash starts as a listener in memory while its master, started from the old file, runs
        the manager daemons. Its first role (pointing at a replacement) stops them; the next
        (taking the role back) must find them gone, not half way down: condor_master does not
        wait for a daemon it removed from DAEMON_LIST to exit before it starts a new one of that
        name when a reconfig adds it back (masterDaemon.cpp: RemoveDaemon keeps the old one only
        to reap it; main_config starts the new one at once), so old and new run side by side,
        and the old negotiator's exit probably withdrew the new one's ad (same name).
        """
        path = self.role_file
        try:
            config = self.role_config(manager_daemons)
            current = path.read_text() if path.exists() else None
            write_config_file(
                self.section.config_dir,
                self.section.role_file,
                config,
                owned=self.owned_files(),
                comments=self._role_comments(),
            )
        except KnobRefused as e:
            raise RoleRefused(f"{path}: role file not written: {e}") from None
        except OSError as e:
            raise CondorRoleError(f"{path}: cannot write the role file ({e.strerror or e})") from None
        await self.gateway.reconfig(self.master())
        self.reconfigs += 1
        log.info("role applied", managing=self.managing, collector=self.collector)
        if not self.managing and current is not None and MANAGER_MARK in current.splitlines():
            # A negotiator still shutting down when the next role change points this machine at
            # the new manager would follow that reconfig and leave a stale second negotiator ad
            # in the new collector (seen in the sandbox).
            await self._wait_until(self.section.manager_daemons, answering=False)

    async def _wait_until(self, daemons: list[str], *, answering: bool, timeout: float = 20.0) -> None:
        """Until every daemon of `daemons` on this machine answers (or none does) on the address
        its address file names. Daemons remove their address files when they exit; a file left
        by a daemon that was killed names a port nobody listens on, and counts as not answering.
        """
        files = [self.address_file(d) for d in daemons]
        with trio.move_on_after(timeout):
            while [f for f in files if await daemon_answers(f) != answering]:
                await trio.sleep(0.1)
            return
        state = "answering" if answering else "gone"
        log.warning(f"manager daemons not {state} after {timeout:g} s", daemons=daemons)

    async def point_to(self, collector: str) -> None:
        """Make this machine's daemons report to `collector` (the pool's current manager)."""
        previous, self.collector = self.collector, collector
        try:
            await self.apply()
        except RoleRefused:
            self.collector = previous
            raise

    async def start_manager(self, state: PoolState | None, own_collector: str) -> None:
        """Restore the replicated state, then start the manager daemons, the collector first.

        A negotiator whose first ad reaches no collector is not listed again for
        NEGOTIATOR_UPDATE_INTERVAL (5 min), and condor_userprio finds it through that ad.
        condor_master waits for the collector's address file before it starts the others at
        start-up, but not when a reconfig adds both at once; faultD waits until the collector
        answers. (CI once found no negotiator ad for 90 s after the original took its role back;
        it had then stopped and restarted its manager daemons 20 ms apart without waiting.
        Neither race was reproduced on an idle machine.)
        """
        if state is not None and not self.managing:
            # Not again on a retry (faultD.service retries a takeover whose reconfig failed):
            # poold, active once `managing` is set, may have written its state file since.
            self.restore(state)
        self.managing = True
        self.collector = own_collector
        daemons = self.section.manager_daemons
        if (
            "COLLECTOR" in daemons
            and len(daemons) > 1
            and not await daemon_answers(self.address_file("COLLECTOR"))
        ):
            await self.apply(["COLLECTOR"])
            await self._wait_until(["COLLECTOR"], answering=True)
        await self.apply()

    async def stop_manager(self) -> None:
        """Stop the manager daemons (apply waits until they are gone)."""
        self.managing = False
        for old in self.section.config_dir.glob(MANAGER_CONFIG_PREFIX + "*"):
            old.unlink(missing_ok=True)
        await self.apply()

    # ------------------------------------------------------------------ replication

    def read_state(self) -> list[StateFile]:
        """What this machine, as manager, replicates; unreadable files, and files beyond
        STATE_BYTES_LIMIT in all, are logged and skipped."""
        files: list[tuple[str, Path]] = [("accountant", self.section.spool_dir / ACCOUNTANT)]
        files += [(f"config/{p.name}", p) for p in self.section.manager_config_files]
        if self.section.poold_state is not None:
            files.append(("poold", self.section.poold_state))
        out: list[StateFile] = []
        size = 0
        for name, path in files[:MAX_STATE_FILES]:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("state file not readable", path=str(path), error=str(e))
                continue
            if size + len(data) > STATE_BYTES_LIMIT:  # holders would refuse the whole state
                log.error("state file not replicated: the state would exceed its limit",
                          path=str(path), bytes=len(data), limit=STATE_BYTES_LIMIT)  # fmt: skip
                continue
            size += len(data)
            out.append(StateFile(name=name, data=data))
        return out

    def restore(self, state: PoolState) -> None:
        """Put replicated files where a manager on this machine needs them, before it starts.

        Only files faultD owns are written: the Accountant log, poold's state file (if
        configured), and the configured manager config files by base name, whose contents must
        pass the central-manager allow-list (`knobs.CENTRAL_MANAGER`). A file that does not is
        refused, logged and counted in `refused`; the takeover goes on without it."""
        if not state.intact():
            log.error("replicated state fails its checksum: not restored", version=state.version)
            return
        restored = []
        for f in state.files:
            if f.name == "accountant":
                target = self.section.spool_dir / ACCOUNTANT
                write_atomically(target, f.data, like=self.section.spool_dir)
            elif f.name.startswith("config/"):
                if not self._install_manager_config(f):
                    continue
            elif f.name == "poold" and self.section.poold_state is not None:
                write_atomically(self.section.poold_state, f.data)
            else:
                self.refused += 1
                log.error("replicated file faultd does not own: not restored", file=f.name[:80])
                continue
            restored.append(f.name)
        log.info("replicated state restored", version=state.version, files=restored)

    def _install_manager_config(self, f: StateFile) -> bool:
        """One replicated manager config file, installed as MANAGER_CONFIG_PREFIX + its name if
        it is one of ours and passes the allow-list; else refused, logged, counted (False)."""
        base = f.name.removeprefix("config/")
        try:
            if base not in {p.name for p in self.section.manager_config_files}:
                why = "not one of this machine's manager_config_files"
                raise KnobRefused(CENTRAL_MANAGER.name, f.name[:80], why)
            config = parse_config_text(CENTRAL_MANAGER, f.data, source=f.name)
            name = MANAGER_CONFIG_PREFIX + base
            write_config_file(self.section.config_dir, name, config, owned=self.owned_files())
        except KnobRefused as e:
            self.refused += 1
            self.refusals.append(str(e)[:300])
            log.error("replicated config file refused: not installed", file=f.name[:80], error=str(e))
            return False
        return True
