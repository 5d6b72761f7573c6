"""A sandbox pool with faultd on every host: for the real-HTCondor tests and bench/failover.

Each faultd runs on its host's network (inside the host's namespace, as a program of this
machine, as root) and writes its role file into that host's HTCondor config directory inside the
sandbox root. Host 0 is the original central manager.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from common.condor import DaemonKind, DaemonRef
from common.service import query_control
from deploy.harness.ring_keys import RingKeys
from deploy.harness.sandbox import (
    Sandbox,
    SandboxPool,
    netns_pids,
    poll_until,
    sandbox_cli,
    start_in_netns,
    stop_processes,
)

PORT = 7641
T = TypeVar("T")


class FaultPool:
    def __init__(self, sandbox: Sandbox, workdir: Path, name: str, *, hosts: int = 4, slots: int = 2) -> None:
        self.sandbox = sandbox
        self.workdir = workdir
        self.name = name
        self.nhosts = hosts
        self.slots = slots
        self.keys = RingKeys(workdir / f"faultd-keys-{name}", ring=f"faultd:{name}")
        self.key = self.keys.key_file
        self.pool: SandboxPool = sandbox.up(name, slots=slots, hosts=hosts)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        # poold's state file on host j, which faultd replicates ([condor] poold_state); None: no poold
        self.poold_state: Callable[[int], Path] | None = None

    # ------------------------------------------------------------------ layout

    def host(self, j: int) -> dict[str, Any]:
        return self.pool.hosts[j]

    def address(self, j: int) -> str:
        return str(self.host(j)["address"])

    def collector(self, j: int) -> str:
        return f"{self.address(j)}:9618"

    def local_dir(self, j: int) -> Path:
        return self.pool.local_dir(j)

    def socket(self, j: int) -> Path:
        return self.workdir / f"faultd-{j}.sock"

    def log_file(self, j: int) -> Path:
        return self.workdir / f"faultd-{j}.log"

    def schedd(self, j: int) -> DaemonRef:
        address = (self.local_dir(j) / "spool" / ".schedd_address").read_text().splitlines()[0]
        return DaemonRef(kind=DaemonKind.SCHEDD, address=address)

    def config_file(self, j: int) -> Path:
        local = self.local_dir(j)
        # Every machine names the same seeds, as docs/admin.md advises: the central manager and
        # the next two machines (the seeds among them find themselves in the list).
        seeds = ", ".join(f'"{self.address(k)}:{PORT}"' for k in range(min(3, self.nhosts)))
        token_dir = self.pool.token_dir("faultd")
        node = str(self.host(j)["name"])
        self.keys.node(node, hosts=[self.address(j)], pool=self.name)
        path = self.workdir / f"faultd-{j}.toml"
        path.write_text(f"""
[fault]
original_manager = {"true" if j == 0 else "false"}
manager_name = "{self.host(0)["name"]}"
collector = "{self.collector(j)}"
state_interval = 1.0

[condor]
condor_config = "{self.pool.client_config}"
{f'token_dir = "{token_dir}"' if token_dir else ""}
config_dir = "{local / "config.d"}"
log_dir = "{local / "log"}"
spool_dir = "{local / "spool"}"
{f'poold_state = "{self.poold_state(j)}"' if self.poold_state else ""}

[ring]
node_name = "{self.host(j)["name"]}"
bind = "{self.address(j)}"
port = {PORT}
bootstrap = [{seeds}]
{self.keys.toml(node)}
[ring.overlay]
keepalive_interval = 2.0
leaf_timeout = 3.0
probe_timeout = 1.0
hop_timeout = 0.5
table_probe_interval = 20.0
row_maintenance_interval = 30.0
leaf_exchange_interval = 20.0
join_retry = 1.0
revive_interval = 3.0

[daemon]
control_socket = "{self.socket(j)}"
log_level = "info"
""")
        return path

    # ------------------------------------------------------------------ processes

    def start(self, j: int) -> None:
        netns = str(self.host(j)["netns"])
        self.procs[j] = start_in_netns(netns, "faultD", self.config_file(j), self.log_file(j))

    def start_all(self, hosts: int | None = None) -> None:
        """faultd on the first `hosts` hosts (default: all), host 0 first."""
        hosts = self.nhosts if hosts is None else hosts
        self.start(0)
        # Host 0 first (a seed: it founds the ring if the other seeds, not up yet, do not answer
        # it, else the seeds make one ring): its control socket answers once its overlay listens.
        self.wait("host 0's faultd listens", lambda: self.status(0)["overlay"])
        for j in range(1, hosts):
            self.start(j)
        self.wait("host 0 manages and every host follows it", lambda: self.follow_count(0) == hosts)

    def stop_all(self) -> None:
        """SIGTERM every faultd still running; one whose stop hangs or fails is reported
        (GracefulStopFailed, with the faultds' log files named) once all were stopped."""
        procs = {f"faultd of host {j} (log {self.log_file(j)})": p for j, p in self.procs.items()}
        self.procs.clear()
        stop_processes(procs, timeout=30)

    def kill_host(self, j: int) -> float:
        """kill -9 of everything on a host (its HTCondor daemons, its faultd); returns the time."""
        pids = netns_pids(str(self.host(j)["netns"]))
        t = time.time()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc = self.procs.pop(j, None)
        if proc is not None:
            proc.wait()
        return t

    def restart_host(self, j: int) -> None:
        """The machine comes back: HTCondor (its condor_master, from its config), then faultd."""
        sandbox_cli("exec", self.name, "--host", str(j), "--", "/usr/sbin/condor_master")
        self.start(j)

    # ------------------------------------------------------------------ observation

    def status(self, j: int) -> dict[str, Any]:
        return query_control(self.socket(j), {"cmd": "status"}, timeout=3)

    def statuses(self) -> dict[int, dict[str, Any]]:
        out = {}
        for j in self.procs:
            try:
                out[j] = self.status(j)
            except OSError:
                pass
        return out

    def managers(self) -> list[int]:
        return [j for j, s in self.statuses().items() if s.get("role") == "manager"]

    def follow_count(self, j: int) -> int:
        """How many faultds name host j's collector as the pool's (j's own included, if it manages)."""
        want = self.collector(j)
        return sum(
            1
            for s in self.statuses().values()
            if s.get("manager_collector") == want and s.get("condor", {}).get("collector") == want
        )

    def condor_processes(self, j: int) -> list[str]:
        names = []
        for pid in netns_pids(str(self.host(j)["netns"])):
            try:
                names.append(Path(f"/proc/{pid}/comm").read_text().strip())
            except OSError:
                pass
        return names

    def wait(self, what: str, predicate: Callable[[], T], timeout: float = 90.0, poll: float = 0.5) -> T:
        logs = [self.log_file(j) for j in range(self.nhosts)]
        logs += [self.local_dir(j) / "log" / "MasterLog" for j in range(self.nhosts)]
        return poll_until(what, predicate, timeout=timeout, poll=poll, logs=logs)


@contextlib.contextmanager
def fault_pool(sandbox: Sandbox, workdir: Path, name: str, *, hosts: int, slots: int) -> Iterator[FaultPool]:
    """A FaultPool for one test: its faultds stopped and its sandbox pool taken down after."""
    fp = FaultPool(sandbox, workdir, name, hosts=hosts, slots=slots)
    try:
        yield fp
    finally:
        try:
            fp.stop_all()
        finally:
            sandbox.down(name)
