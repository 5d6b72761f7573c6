"""What a sysadmin installs for faultD: the example config, the systemd unit, the CLI's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.overlay.auth import generate_key_file
from faultD.cli import main, render_status
from tests.poolD.test_deploy_files import install_keys

FILES = Path(__file__).resolve().parents[2] / "common" / "deploy_files"


def example_config(tmp_path: Path) -> Path:
    """The packaged example, with keys and an HTCondor configuration of its own: the paths and
    the collector's port it leaves out come from that configuration."""
    etc = tmp_path / "etc"
    etc.mkdir()
    key = etc / "ring.key"
    generate_key_file(key)
    install_keys(etc, main, name="ex1.pool-a", pool="pool-a", host="10.0.0.21")
    (tmp_path / "config.d").mkdir()
    condor = tmp_path / "condor_config"
    condor.write_text(
        f"LOCAL_CONFIG_DIR = {tmp_path}/config.d\nLOG = {tmp_path}/log\nSPOOL = {tmp_path}/spool\n"
        "COLLECTOR_HOST = 10.0.0.20:9618\n"
    )
    text = (FILES / "config/faultd.toml").read_text()
    text = text.replace("/etc/faultd/", f"{etc}/").replace(
        '# condor_config = "/etc/condor/condor_config"', f'condor_config = "{condor}"'
    )
    config = tmp_path / "faultd.toml"
    config.write_text(text)
    return config


def test_example_config_passes_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = example_config(tmp_path)
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{config}: ok (node ex1.pool-a on port 7641, listener, collector 10.0.0.21:9618")
    assert out.rstrip().endswith(f"LOG {tmp_path}/log, SPOOL {tmp_path}/spool)")


def test_check_config_names_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = example_config(tmp_path)
    config.write_text(config.read_text().replace('# collector = "10.0.0.21:9618"', 'collector = "nowhere"'))
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
            "refused": {"replica": 3}, "seeds_unheard": ["10.0.0.3:7641"],
        }
    )  # fmt: skip
    assert "role            listener" in text and "epoch / seq     2 / 41" in text
    assert "seeds unheard   10.0.0.3:7641" in text.splitlines()
    assert "version 7 (epoch 2)" in text and "accountant" in text and "bad_mac" in text
    assert "refused         {'replica': 3}" in text
