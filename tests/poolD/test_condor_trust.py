"""poolD/condor_trust.py's file side, on real files: a received token goes into the daemons'
token directory owned like it and 0600, only if it is a token; removal takes it out."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import trio

from poolD.condor_trust import install_token, remove_token
from poolD.config import TrustSection
from poolD.flock_trust import InstallToken, RemoveToken

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzY2hlZGQtaG9tZUBwaHlzaWNzIn0.c2ln"


def trust(tmp_path: Path) -> TrustSection:
    for d in ("requests", "schedd", "negotiator"):
        (tmp_path / d).mkdir(mode=0o700)
    return TrustSection(
        trust_domain="home.sandbox",
        request_dir=tmp_path / "requests",
        schedd_token_dir=tmp_path / "schedd",
        negotiator_token_dir=tmp_path / "negotiator",
    )


def test_a_received_token_is_installed_0600_and_removed(tmp_path: Path) -> None:
    t = trust(tmp_path)
    (t.request_dir / "flock-schedd-physics").write_text(TOKEN + "\n")
    action = InstallToken("physics", "schedd", "0000001")
    assert trio.run(install_token, t, action) is None
    installed = tmp_path / "schedd" / "flock-schedd-physics"
    assert installed.read_text() == TOKEN + "\n"
    assert stat.S_IMODE(installed.stat().st_mode) == 0o600
    assert installed.stat().st_uid == os.stat(tmp_path / "schedd").st_uid
    assert not (t.request_dir / "flock-schedd-physics").exists()
    assert list((tmp_path / "negotiator").iterdir()) == []
    remove_token(t, RemoveToken("physics", "schedd", "flocking ended"))
    assert not installed.exists()


def test_nothing_or_not_a_token_is_not_installed(tmp_path: Path) -> None:
    t = trust(tmp_path)
    action = InstallToken("physics", "negotiator", "0000002")
    why = trio.run(lambda: install_token(t, action, wait=0.2))
    assert why is not None and "no token received within 0.2 s" in why
    (t.request_dir / "flock-negotiator-physics").write_text("Failed to request a new token\n")
    why = trio.run(lambda: install_token(t, action, wait=0.2))
    assert why is not None and "holds no token" in why
    assert list((tmp_path / "negotiator").iterdir()) == []
    no_dir = TrustSection(trust_domain="home.sandbox", request_dir=t.request_dir)
    why = trio.run(lambda: install_token(no_dir, action, wait=0.2))
    assert why is not None and "negotiator_token_dir" in why
