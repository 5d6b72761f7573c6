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
often derived from it (deploy/condor/60-faultd-pool.conf says what to allow instead).

The Replication Module reads the state a replacement needs (the negotiator's Accountant log in
SPOOL, the central manager's own config files, poolD's state file) and restores it before the
negotiator starts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import structlog
import trio

from common.condor import DaemonKind, DaemonRef, Gateway
from faultD.config import CondorSection
from faultD.messages import MAX_STATE_FILES, PoolState, StateFile

log = structlog.get_logger("faultd.condor")

ACCOUNTANT = "Accountantnew.log"
MANAGER_CONFIG_PREFIX = "98-faultd-manager-"


class CondorRoleError(Exception):
    """Something on this machine stops faultD from applying a role (named file, daemon)."""


def write_atomically(path: Path, data: bytes, *, like: Path | None = None) -> None:
    """Write, fsync, rename: a reader (HTCondor) sees the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.faultd-tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if like is not None and like.exists():
        st = like.stat()
        os.chown(tmp, st.st_uid, st.st_gid)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class CondorRole:
    def __init__(self, section: CondorSection, gateway: Gateway) -> None:
        self.section = section
        self.gateway = gateway
        self.collector: str | None = None
        self.managing = False
        self.reconfigs = 0

    @property
    def role_file(self) -> Path:
        return self.section.config_dir / self.section.role_file

    def master(self) -> DaemonRef:
        path = self.section.log_dir / ".master_address"
        try:
            address = path.read_text().splitlines()[0].strip()
        except (OSError, IndexError) as e:
            raise CondorRoleError(f"{path}: cannot read the condor_master's address ({e})") from None
        return DaemonRef(kind=DaemonKind.MASTER, address=address)

    def render(self) -> str:
        daemons = list(self.section.listener_daemons)
        if self.managing:
            daemons += [d for d in self.section.manager_daemons if d not in daemons]
        lines = [
            "# Written by faultd: this machine's role in the pool. Do not edit; faultd rewrites it.",
            f"# role: {'manager' if self.managing else 'listener'}",
            f"DAEMON_LIST = {', '.join(daemons)}",
        ]
        if self.collector:
            lines.append(f"COLLECTOR_HOST = {self.collector}")
        return "\n".join(lines) + "\n"

    async def apply(self) -> None:
        text = self.render()
        path = self.role_file
        try:
            current = path.read_text() if path.exists() else None
            if current != text:
                write_atomically(path, text.encode())
        except OSError as e:
            raise CondorRoleError(f"{path}: cannot write the role file ({e.strerror or e})") from None
        await self.gateway.reconfig(self.master())
        self.reconfigs += 1
        log.info("role applied", managing=self.managing, collector=self.collector)

    async def point_to(self, collector: str) -> None:
        self.collector = collector
        await self.apply()

    async def start_manager(self, state: PoolState | None, own_collector: str) -> None:
        if state is not None:
            self.restore(state)
        self.managing = True
        self.collector = own_collector
        await self.apply()

    async def stop_manager(self, *, timeout: float = 20.0) -> None:
        """Stop the collector and negotiator, and wait until they are gone.

        Waiting matters: a negotiator that is still shutting down when the next role change
        points this machine at the new manager would follow the reconfig and advertise itself to
        the new collector, leaving a stale second negotiator ad there (seen in the sandbox).
        Daemons remove their address files when they exit.
        """
        self.managing = False
        for old in self.section.config_dir.glob(MANAGER_CONFIG_PREFIX + "*"):
            old.unlink(missing_ok=True)
        await self.apply()
        files = [self.section.log_dir / f".{d.lower()}_address" for d in self.section.manager_daemons]
        with trio.move_on_after(timeout):
            while any(f.exists() for f in files):
                await trio.sleep(0.1)
            return
        log.warning("manager daemons still running after stop", waited=timeout)

    # ------------------------------------------------------------------ replication

    def read_state(self) -> list[StateFile]:
        """What this machine, as manager, replicates; unreadable files are logged and skipped."""
        files: list[tuple[str, Path]] = [("accountant", self.section.spool_dir / ACCOUNTANT)]
        files += [(f"config/{p.name}", p) for p in self.section.manager_config_files]
        if self.section.poold_state is not None:
            files.append(("poold", self.section.poold_state))
        out = []
        for name, path in files[:MAX_STATE_FILES]:
            try:
                out.append(StateFile(name=name, data=path.read_bytes()))
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("state file not readable", path=str(path), error=str(e))
        return out

    def restore(self, state: PoolState) -> None:
        """Put replicated files where a manager on this machine needs them, before it starts."""
        if not state.intact():
            log.error("replicated state fails its checksum: not restored", version=state.version)
            return
        for f in state.files:
            if f.name == "accountant":
                target = self.section.spool_dir / ACCOUNTANT
                write_atomically(target, f.data, like=self.section.spool_dir)
            elif f.name.startswith("config/"):
                base = re.sub(r"[^A-Za-z0-9._-]", "_", f.name.removeprefix("config/"))
                write_atomically(self.section.config_dir / f"{MANAGER_CONFIG_PREFIX}{base}", f.data)
            elif f.name == "poold" and self.section.poold_state is not None:
                write_atomically(self.section.poold_state, f.data)
        log.info("replicated state restored", version=state.version, files=[f.name for f in state.files])
