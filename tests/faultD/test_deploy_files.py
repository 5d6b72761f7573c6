"""What a sysadmin installs for faultD: the example config, the systemd unit, the CLI's errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.overlay.auth import generate_key_file
from faultD.cli import main, render_status

REPO = Path(__file__).resolve().parents[2]


def example_config(tmp_path: Path) -> Path:
    key = tmp_path / "ring.key"
    generate_key_file(key)
    (tmp_path / "config.d").mkdir()
    text = (REPO / "config/faultd.toml").read_text()
    text = text.replace("/etc/faultd/ring.key", str(key)).replace(
        "/etc/condor/config.d", str(tmp_path / "config.d")
    )
    config = tmp_path / "faultd.toml"
    config.write_text(text)
    return config


def test_example_config_passes_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = example_config(tmp_path)
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{config}: ok (node ex1.pool-a on port 7641, listener, collector 10.0.0.21:9618")


def test_check_config_names_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = example_config(tmp_path)
    config.write_text(config.read_text().replace('collector = "10.0.0.21:9618"', 'collector = "nowhere"'))
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"faultd: error: {config}") and "fault.collector" in err
    config.write_text(config.read_text().replace("missed_alives = 3", "missed_alives = 0"))
    assert main(["check-config", str(config)]) == 2
    assert "fault.missed_alives" in capsys.readouterr().err


def test_check_config_refuses_a_missing_config_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = example_config(tmp_path)
    (tmp_path / "config.d").rmdir()
    assert main(["check-config", str(config)]) == 2
    assert "condor.config_dir" in capsys.readouterr().err


def test_status_without_a_daemon_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--socket", str(tmp_path / "none.sock")]) == 1
    assert "cannot reach the daemon at" in capsys.readouterr().err


def test_render_status_shows_role_manager_epoch_and_replica() -> None:
    text = render_status(
        {
            "role": "listener", "node_id": "ab" * 16, "original_manager": False, "overlay": "10.0.0.2:7641",
            "manager": "cd" * 16, "manager_address": "10.0.0.1:7641", "manager_collector": "10.0.0.1:9618",
            "epoch": 2, "seq": 41, "last_alive_s_ago": 0.4,
            "replica": {
                "manager": "cd" * 16, "version": 7, "epoch": 2, "files": ["accountant"], "age_s": 1.5,
            },
            "replica_holders": [], "condor": {"role_file": "/etc/condor/config.d/99-faultd-role.conf"},
            "leaf_set": ["10.0.0.1:7641"], "drops": {"bad_mac": 2}, "history": ["new manager 10.0.0.1:7641"],
        }
    )  # fmt: skip
    assert "role            listener" in text and "epoch / seq     2 / 41" in text
    assert "version 7 (epoch 2)" in text and "accountant" in text and "bad_mac" in text


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian: apt-get install systemd)")
    unit = tmp_path / "faultd.service"
    venv = Path(sys.executable).parent.parent  # the venv running these tests, which has bin/faultd
    unit.write_text((REPO / "deploy/faultd.service").read_text().replace("/opt/condor-selforg", str(venv)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = unit.read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text


def test_systemd_unit_is_hardened_and_bounded(tmp_path: Path) -> None:
    """Issue 14, row 10: resource limits and the hardening `systemd-analyze security` lists that
    faultd can live with (the real-HTCondor tests run it under them: deploy/harness/unit_jail.py).
    Exposure 2.1 at most (it was 2.4 before)."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian: apt-get install systemd)")
    unit = tmp_path / "faultd.service"
    venv = Path(sys.executable).parent.parent
    unit.write_text((REPO / "deploy/faultd.service").read_text().replace("/opt/condor-selforg", str(venv)))
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
        ["systemd-analyze", "security", "--offline=true", "--threshold=21", str(unit)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
