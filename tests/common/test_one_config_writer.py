"""One way to HTCondor's configuration: the product code reaches it only through the two sinks
of common.condor.knobs (Gateway.set_config and config_files.write_config_file), so every value
passes the gate. A new caller that writes around them makes this test fail."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ["common", "poolD", "faultD", "llic"]


def calls(name: str, first_arg: str | None = None) -> dict[str, int]:
    """Product modules that call `name` (a function or a method; with `first_arg`, only calls
    whose first argument is that string), with how often."""
    found: dict[str, int] = {}
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                    first = node.args[0] if node.args else None
                    if first_arg is not None and not (
                        isinstance(first, ast.Constant) and first.value == first_arg
                    ):
                        continue
                    if called == name:
                        rel = str(path.relative_to(REPO))
                        found[rel] = found.get(rel, 0) + 1
    return found


def test_only_the_worker_touches_runtime_config_and_only_the_gateway_asks_it_to() -> None:
    assert set(calls("RemoteParam")) == {"common/condor/worker.py"}
    assert calls("call", "set_config") == {"common/condor/gateway.py": 1}  # in Gateway.set_config


def test_config_files_are_written_by_the_file_sink_only() -> None:
    assert set(calls("write_config_file")) == {"faultD/condor_role.py"}
    # write_atomically writes what is not HTCondor configuration (the Accountant log, poold's
    # state) and the sink's own files; nobody else writes files next to HTCondor's config.
    assert set(calls("write_atomically")) == {
        "common/condor/config_files.py",
        "faultD/condor_role.py",
        "poolD/state.py",
    }
    role = (REPO / "faultD/condor_role.py").read_text()
    assert "config_dir /" not in role.replace("self.section.config_dir / self.section.role_file", "")
