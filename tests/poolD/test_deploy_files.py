"""The files a sysadmin installs: the example config and policy, and the systemd unit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.overlay.auth import generate_key_file
from poolD.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_example_config_and_policy_pass_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "ring.key"
    generate_key_file(key)
    text = (REPO / "config/poold.toml").read_text()
    text = text.replace("/etc/poold/ring.key", str(key)).replace(
        "/etc/poold/policy.toml", str(REPO / "config/policy.toml")
    )
    config = tmp_path / "poold.toml"
    config.write_text(text)
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{config}: ok (pool physics") and "policy.toml" in out


def test_check_config_names_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "ring.key"
    key.write_text("ab" * 32)
    key.chmod(0o644)
    config = tmp_path / "poold.toml"
    config.write_text(
        f'[pool]\nname = "p"\ncollector = "cm:9618"\n[ring]\nnode_name = "p"\nkey_file = "{key}"\n'
    )
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"poold: error: {config}: ring.key_file: ") and "chmod 600" in err
    config.write_text('[pool]\nname = "p"\ncollector = "cm"\n')
    assert main(["check-config", str(config)]) == 2
    assert "key 'pool.collector'" in capsys.readouterr().err


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd-analyze verify, with the install prefix pointed at this checkout's venv (verify
    insists that ExecStart exists)."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian: apt-get install systemd)")
    unit = tmp_path / "poold.service"
    venv = Path(sys.executable).parent.parent  # the venv running these tests, which has bin/poold
    unit.write_text((REPO / "deploy/poold.service").read_text().replace("/opt/condor-selforg", str(venv)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = unit.read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text and "ExecReload=/bin/kill -HUP $MAINPID" in text


def test_systemd_unit_is_hardened_and_bounded(tmp_path: Path) -> None:
    """Issue 14, row 10: resource limits and the hardening `systemd-analyze security` lists that
    poold can live with (the real-HTCondor tests run it under them: deploy/harness/unit_jail.py).
    Exposure 1.3 at most (it was 1.7 before)."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian: apt-get install systemd)")
    unit = tmp_path / "poold.service"
    venv = Path(sys.executable).parent.parent
    unit.write_text((REPO / "deploy/poold.service").read_text().replace("/opt/condor-selforg", str(venv)))
    text = unit.read_text()
    for setting in (
        "MemoryMax=512M",
        "TasksMax=64",
        "LimitNOFILE=1024",
        "MemoryDenyWriteExecute=yes",
        "SystemCallFilter=~@privileged @resources",
        "ProcSubset=pid",
        "PrivateMounts=yes",
    ):
        assert f"\n{setting}\n" in text, setting
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--threshold=13", str(unit)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
