"""A federation of sandbox pools with poold on each central manager: for tests and `make demo`.

Each poold runs on its pool's central-manager host (inside that host's network namespace, as a
program of this machine), joins the ring through the first pool, and talks to its pool through
the gateway with the pool's client config. Intervals are seconds, not minutes, so that a demo
shows a whole cycle quickly.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from common.service import query_control
from deploy.harness.ring_keys import RingKeys
from deploy.harness.sandbox import (
    Sandbox,
    SandboxPool,
    poll_until,
    start_in_netns,
    stop_process,
    stop_processes,
)

T = TypeVar("T")

FAST_SETTINGS = """
[ring.overlay]
keepalive_interval = 1.0
leaf_timeout = 4.0
probe_timeout = 1.0
table_probe_interval = 5.0
row_maintenance_interval = 5.0
leaf_exchange_interval = 5.0
join_retry = 1.0

[discovery]
interval = 2.0
valid_for = 15.0

[flocking]
interval = 2.0
withdraw_after = 10.0
max_pools = 3
"""


class Federation:
    def __init__(
        self,
        sandbox: Sandbox,
        workdir: Path,
        names: list[str],
        *,
        slots: int = 3,
        security: str | None = None,
    ) -> None:
        """poold on pools `names` (`security`: their mode, default the sandbox's; FLOCKING_SECURITY
        where jobs must flock between them)."""
        self.workdir = workdir
        self.names = names
        self.keys = RingKeys(workdir / "poold-keys", ring="poold")
        self.key = self.keys.key_file
        self.pools: dict[str, SandboxPool] = {
            name: sandbox.up(name, slots=slots, security=security) for name in names
        }
        self.policies: dict[str, str] = {}
        self.flocking: dict[str, str] = {}  # pool -> extra [flocking] lines for its poold
        self.sections: dict[str, str] = {}  # pool -> extra sections (e.g. [trust]) for its poold
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def address(self, name: str) -> str:
        return str(self.pools[name].hosts[0]["address"])

    def socket(self, name: str) -> Path:
        return self.workdir / f"{name}.sock"

    def log_file(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def config_file(self, name: str) -> Path:
        pool = self.pools[name]
        first = self.names[0]
        bootstrap = "" if name == first else f'bootstrap = "{self.address(first)}:7640"'
        policy = ""
        if name in self.policies:
            policy_path = self.workdir / f"{name}-policy.toml"
            policy_path.write_text(self.policies[name])
            policy = f'policy_file = "{policy_path}"'
        token_dir = pool.token_dir("poold")
        hosts = sorted({self.address(name), pool.collector.rpartition(":")[0]})
        self.keys.node(name, hosts=hosts, pool=name)
        path = self.workdir / f"{name}.toml"
        path.write_text(f"""
[pool]
name = "{name}"
collector = "{pool.collector}"
condor_config = "{pool.client_config}"
{f'token_dir = "{token_dir}"' if token_dir else ""}

[ring]
node_name = "{name}"
bind = "{self.address(name)}"
port = 7640
{bootstrap}
{self.keys.toml(name)}
{FAST_SETTINGS}{self.flocking.get(name, "")}
{self.sections.get(name, "")}
[daemon]
control_socket = "{self.socket(name)}"
{policy}
""")
        return path

    def start(self, name: str) -> None:
        netns = self.pools[name].hosts[0]["netns"]
        self.procs[name] = start_in_netns(netns, "poolD", self.config_file(name), self.log_file(name))

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)
        self.wait("every poold joined", lambda: all(self.status(n)["joined"] for n in self.names))

    def stop(self, name: str) -> None:
        """SIGTERM one poold and wait for it: it withdraws the FLOCK_TO it set on the way out. A stop
        that hangs (killed after 30 s) or exits with an error raises GracefulStopFailed."""
        stop_process(self.procs.pop(name), timeout=30, name=self._describe(name))

    def stop_all(self) -> None:
        """Stop every poold still running; failures are reported once all were stopped."""
        procs = {self._describe(name): proc for name, proc in self.procs.items()}
        self.procs.clear()
        stop_processes(procs, timeout=30)

    def _describe(self, name: str) -> str:
        return f"poold of {name} (log {self.log_file(name)})"

    def status(self, name: str) -> dict[str, Any]:
        return query_control(self.socket(name), {"cmd": "status"})

    def wait(self, what: str, predicate: Callable[[], T], timeout: float = 90.0) -> T:
        """Poll until predicate() is truthy; on timeout, fail with the poolds' recent logs."""
        logs = [self.log_file(n) for n in self.names]
        return poll_until(what, predicate, timeout=timeout, logs=logs)

    def flock_to(self, name: str) -> str:
        """FLOCK_TO as the pool's schedd sees it, read with condor_config_val ('' if none). A
        query that fails raises SandboxError: it must not read as 'no FLOCK_TO'."""
        value = self.pools[name].exec("condor_config_val", "-schedd", "FLOCK_TO").stdout.strip()
        return "" if value.startswith("Not defined") else value
