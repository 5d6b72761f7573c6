"""Fixtures shared by every component's tests, above all real HTCondor pools from deploy/sandbox."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator

import pytest

from deploy.harness.sandbox import Sandbox, sandbox_cli


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    if os.geteuid() != 0:
        pytest.fail(
            "real-HTCondor tests need root (deploy/sandbox makes namespaces and mounts); "
            "run 'make test' as root, or 'make test-unit' for the rest"
        )
    box = Sandbox()
    yield box
    for name in list(box.started):
        box.down(name)
    for path in box.dirs:
        shutil.rmtree(path, ignore_errors=True)
    # Nothing of the pools this session started is left: no process, namespace or interface,
    # whatever other sessions (a developer's demo, a parallel test run) still have up.
    status = json.loads(sandbox_cli("status", "--json").stdout)
    left = status["leftovers"]
    ours = {name: left["by_pool"][name] for name in box.used if name in left["by_pool"]}
    assert not ours, f"left behind by this session's pools: {ours}"
    # With no pool up at all, nothing of the sandbox is left either: shared mounts, the bridge,
    # processes no pool can be named for.
    if not status["pools"]:
        assert {k: left[k] for k in ("processes", "mounts", "netns", "interfaces")} == {
            "processes": [],
            "mounts": [],
            "netns": [],
            "interfaces": [],
        }, left
