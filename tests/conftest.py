"""Fixtures shared by every component's tests, above all real HTCondor pools from deploy/sandbox."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator

import pytest

from common.sandbox import Sandbox, sandbox_cli


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
    # Another session (a developer's demo, a parallel test run) may still have pools up: leave them.
    if not json.loads(sandbox_cli("status", "--json").stdout)["pools"]:
        left = json.loads(sandbox_cli("status", "--json").stdout)["leftovers"]
        assert left == {"processes": [], "mounts": [], "netns": [], "interfaces": []}, left
