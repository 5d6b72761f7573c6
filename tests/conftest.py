"""Fixtures shared by every component's tests, above all real HTCondor pools from deploy/sandbox."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from common.condor import DaemonKind, DaemonRef, Gateway

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / "deploy" / "sandbox"


def sandbox_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(SANDBOX), *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(f"deploy/sandbox {' '.join(args)} failed ({res.returncode}):\n{res.stderr}")
    return res


@dataclass
class SandboxPool:
    """A running sandbox pool as tests see it."""

    name: str
    collector: str
    client_config: str
    hosts: list[dict[str, Any]]

    def exec(self, *argv: str, host: int = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run an HTCondor tool (or anything) on one of the pool's hosts, with its config."""
        return sandbox_cli("exec", self.name, "--host", str(host), "--", *argv, check=check)

    def gateway(self, **kwargs: Any) -> Gateway:
        return Gateway(condor_config=self.client_config, collector=self.collector, **kwargs)

    def master(self, host: int = 0) -> DaemonRef:
        """The master of a host, addressed directly (from its address file, no collector)."""
        root = Path(self._root) / self.hosts[host]["local_dir"].lstrip("/")
        address = (root / "log" / ".master_address").read_text().splitlines()[0]
        return DaemonRef(kind=DaemonKind.MASTER, address=address, machine=self.hosts[host]["name"])

    _root: str = field(default="", repr=False)


class Sandbox:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.dirs: list[str] = []

    def up(self, name: str, *, slots: int = 2, hosts: int = 1) -> SandboxPool:
        res = sandbox_cli("up", name, "--slots", str(slots), "--hosts", str(hosts), "--json")
        data = json.loads(res.stdout)
        if name not in self.started:
            self.started.append(name)
        return SandboxPool(
            name=name,
            collector=data["collector"],
            client_config=data["client_config"],
            hosts=data["hosts"],
            _root=data["root"],
        )

    def down(self, name: str) -> None:
        sandbox_cli("down", name)
        if name in self.started:
            self.started.remove(name)

    def shared_dir(self) -> Path:
        """A directory that jobs (run as the sandbox user, inside the root) can write to."""
        path = tempfile.mkdtemp(prefix="sandbox-jobs-", dir="/tmp")
        os.chmod(path, 0o1777)
        self.dirs.append(path)
        return Path(path)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    if os.geteuid() != 0:
        pytest.fail(
            "real-HTCondor tests need root (deploy/sandbox makes namespaces and mounts); "
            "run 'make test' as root, or 'make test-unit' for the rest"
        )
    before = json.loads(sandbox_cli("status", "--json").stdout)
    others = [p["name"] for p in before["pools"]]
    box = Sandbox()
    yield box
    for name in list(box.started):
        box.down(name)
    for path in box.dirs:
        shutil.rmtree(path, ignore_errors=True)
    if not others:  # nothing of anybody else's was running: the machine must be left clean
        sandbox_cli("down", "--all")
        left = json.loads(sandbox_cli("status", "--json").stdout)["leftovers"]
        assert left == {"processes": [], "mounts": [], "netns": [], "interfaces": []}, left
