"""Live poold and faultd processes on loopback, for the hostile-peer suite: real daemons, real
sockets, their status asked on their control socket and their memory read from /proc."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.service import query_control
from deploy.harness.ring_keys import RingKeys

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port free for both UDP and TCP on loopback (the daemons use one number for both)."""
    import socket

    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind((LOOPBACK, 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind((LOOPBACK, port))
                except OSError:
                    continue
            return port


class LiveDaemon:
    """One poold or faultd started as `python -m poolD|faultD run --config FILE`."""

    def __init__(self, workdir: Path, kind: str, name: str, config: str) -> None:
        self.workdir = workdir
        self.kind = kind
        self.name = name
        self.config = workdir / f"{name}.toml"
        self.config.write_text(config)
        self.log = workdir / f"{name}.log"
        self.socket = workdir / f"{name}.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            module = "poolD" if self.kind == "poold" else "faultD"
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, "run", "--config", str(self.config)],
                stdout=log, stderr=log, cwd=REPO,
            )  # fmt: skip
        self.wait("its control socket answers", lambda: self.status())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, Any] | None:
        """The daemon's status, or None if it does not answer."""
        try:
            return query_control(self.socket, {"cmd": "status"}, timeout=5)
        except (OSError, ValueError):
            return None

    def rss_mb(self) -> float:
        """Resident memory of the daemon's process (not its gateway child), from /proc."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def drops(self) -> dict[str, int]:
        """Every drop counter the daemon shows, by reason (overlay, bulk, offers, role)."""
        s = self.status()
        assert s is not None, f"{self.name} does not answer; log: {self.tail()}"
        out: dict[str, int] = {}
        for key in ("overlay_drops", "drops"):
            for reason, n in (s.get(key) or {}).items():
                out[reason] = out.get(reason, 0) + n
        return out

    def wait(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.proc.returncode}) waiting for {what}: {self.tail()}"
                )
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: timed out waiting for {what}; log: {self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text()[-n:]
        except OSError:
            return "(no log)"

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def poold_config(keys: RingKeys, name: str, port: int, workdir: Path, *, bootstrap: str | None = None) -> str:
    keys.node(name, hosts=[LOOPBACK], pool=name)
    boot = f'bootstrap = "{bootstrap}"' if bootstrap else ""
    return f"""
[pool]
name = "{name}"
collector = "{LOOPBACK}:9"
[ring]
node_name = "{name}"
bind = "{LOOPBACK}"
port = {port}
{boot}
{keys.toml(name)}
[ring.overlay]
keepalive_interval = 1.0
leaf_timeout = 600.0
probe_timeout = 1.0
hop_timeout = 600.0
[discovery]
interval = 3600.0
[flocking]
interval = 3600.0
[daemon]
control_socket = "{workdir / f"{name}.sock"}"
log_level = "info"
gateway_timeout = 5.0
"""


def faultd_config(
    keys: RingKeys, name: str, pool: str, port: int, workdir: Path, *, manager: str, missed_alives: int = 3
) -> str:
    keys.node(name, hosts=[LOOPBACK], pool=pool)
    condor = workdir / f"{name}-condor"
    for d in ("config.d", "log", "spool"):
        (condor / d).mkdir(parents=True, exist_ok=True)
    return f"""
[fault]
original_manager = false
manager_name = "{manager}"
collector = "{LOOPBACK}:9618"
alive_interval = 1.0
missed_alives = {missed_alives}
[condor]
config_dir = "{condor / "config.d"}"
log_dir = "{condor / "log"}"
spool_dir = "{condor / "spool"}"
[ring]
node_name = "{name}"
bind = "{LOOPBACK}"
port = {port}
{keys.toml(name)}
[daemon]
control_socket = "{workdir / f"{name}.sock"}"
log_level = "info"
gateway_timeout = 5.0
"""
