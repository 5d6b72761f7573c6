"""The packaged systemd units of poold and faultd: they verify, and they keep the limits and the
hardening issue 14 (row 10) asked for, within each daemon's exposure score."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.harness.unit_jail import read_service
from poolD.config import TrustSection

FILES = Path(__file__).resolve().parents[2] / "common" / "deploy_files"

# Each daemon's `systemd-analyze security` exposure, ten times: at most 1.3 for poold (it was 1.7
# before) and 2.1 for faultd (2.4 before: it reconfigs HTCondor as root).
EXPOSURE_THRESHOLD = {"poold": 13, "faultd": 21}

HARDENING = (
    "MemoryMax=512M",
    "TasksMax=64",
    "LimitNOFILE=1024",
    "MemoryDenyWriteExecute=yes",
    "SystemCallFilter=~@privileged @resources",
    "ProcSubset=pid",
    "PrivateMounts=yes",
)


def unit_for_this_venv(daemon: str, tmp_path: Path) -> tuple[Path, str]:
    """The packaged unit with its install prefix pointed at the venv running these tests (verify
    insists that ExecStart exists; that venv has bin/poold and bin/faultd)."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing (Debian: apt-get install systemd)")
    unit = tmp_path / f"{daemon}.service"
    venv = Path(sys.executable).parent.parent
    unit.write_text(
        (FILES / f"systemd/{daemon}.service").read_text().replace("/opt/condor-selforg", str(venv))
    )
    return unit, unit.read_text()


@pytest.mark.parametrize("daemon", sorted(EXPOSURE_THRESHOLD))
def test_systemd_unit_verifies(daemon: str, tmp_path: Path) -> None:
    unit, text = unit_for_this_venv(daemon, tmp_path)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Type=notify" in text and "WatchdogSec=" in text and "ExecReload=/bin/kill -HUP $MAINPID" in text


@pytest.mark.parametrize("daemon", sorted(EXPOSURE_THRESHOLD))
def test_systemd_unit_is_hardened_and_bounded(daemon: str, tmp_path: Path) -> None:
    """Resource limits and the hardening `systemd-analyze security` lists that the daemon can live
    with (the real-HTCondor tests run it under them: deploy/harness/unit_jail.py)."""
    unit, text = unit_for_this_venv(daemon, tmp_path)
    for setting in HARDENING:
        assert f"\n{setting}\n" in text, setting
    argv = ["systemd-analyze", "security", "--offline=true", f"--threshold={EXPOSURE_THRESHOLD[daemon]}"]
    result = subprocess.run([*argv, str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


def test_poold_unit_lets_it_write_the_trust_directories() -> None:
    """Under ProtectSystem=strict poold writes nothing but what its unit opens: [trust]'s
    request_dir (its default, under StateDirectory) and the token directories poold.toml
    documents for the schedd and negotiator (ReadWritePaths), or it could not install the tokens
    it negotiates."""
    settings = read_service(FILES / "systemd/poold.service")
    assert ("ProtectSystem", "strict") in settings
    state = [Path("/var/lib") / value for key, value in settings if key == "StateDirectory"]
    writable = [
        Path(path.lstrip("-")) for key, value in settings if key == "ReadWritePaths" for path in value.split()
    ]
    request_dir = TrustSection().request_dir
    assert any(request_dir.is_relative_to(d) for d in state), (request_dir, state)
    example = (FILES / "config/poold.toml").read_text()
    token_dirs = {
        Path(m[2]) for m in re.finditer(r"^# (schedd|negotiator)_token_dir = \"([^\"]+)\"", example, re.M)
    }
    assert len(token_dirs) == 1 and token_dirs <= set(writable), (token_dirs, writable)
    assert ("StateDirectoryMode", "0700") in settings  # requests and received tokens: poold's alone


def test_poold_can_reach_faultds_control_socket() -> None:
    """poold reads faultd's control socket ([daemon] faultd_socket): faultd's socket (0660) and
    runtime directory (0750) must belong to poold's group, or poold, refused, takes faultd for
    silent and stands by on every machine (as root:root they did)."""
    poold = dict(read_service(FILES / "systemd/poold.service"))
    faultd = dict(read_service(FILES / "systemd/faultd.service"))
    assert faultd.get("Group") == poold["Group"] == "condor"
    assert faultd["RuntimeDirectoryMode"] == "0750"
