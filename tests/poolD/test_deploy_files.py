"""The files a sysadmin installs: the example config and policy, and the systemd unit."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pwd
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from common import install
from common.overlay.auth import generate_key_file
from poolD import cli as poold_cli
from poolD.cli import main

FILES = Path(__file__).resolve().parents[2] / "common" / "deploy_files"


def install_keys(
    etc: Path, main: Callable[[list[str]], int], *, name: str, pool: str, host: str, ca: Path | None = None
) -> None:
    """What the README's install steps do for a node's keys, with the daemon's own `keys` command:
    a CA (kept elsewhere), the node's key pair in `etc`, its certificate, and an empty revocation
    list."""
    ca = ca or etc.parent / "offline-ca"
    sign = ["keys", "sign", "--ca-key", str(ca / "ca.key"), "--public-key", str(etc / "node.pub")]
    sign += ["--name", name, "--pool", pool, "--host", host, "--out", str(etc / "node.cert")]
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert main(["keys", "init-ca", str(ca)]) == 0
        assert main(["keys", "new-node", str(etc)]) == 0
        assert main(sign) == 0
    assert f"{etc / 'node.cert'}: {name} (pool {pool}" in said.getvalue()
    shutil.copy(ca / "ca.pub", etc / "ca.pub")
    (etc / "revoked.txt").write_text("# no certificate revoked yet\n")


def test_example_config_and_policy_pass_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    key = etc / "ring.key"
    generate_key_file(key)
    install_keys(etc, main, name="physics", pool="physics", host="cm.physics.example.edu")
    text = (FILES / "config/poold.toml").read_text()
    text = text.replace("/etc/poold/policy.toml", str(FILES / "config/policy.toml")).replace(
        "/etc/poold/", f"{etc}/"
    )
    config = tmp_path / "poold.toml"
    config.write_text(text)
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{config}: ok (pool physics") and "policy.toml" in out


def test_an_install_without_the_new_key_material_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing install (ring key only) upgraded to signed messages: check-config and run both
    stop with one line naming the missing file, and each key file once it is there."""
    etc = tmp_path / "etc"
    etc.mkdir()
    generate_key_file(etc / "ring.key")
    config = tmp_path / "poold.toml"
    config.write_text(
        f'[pool]\nname = "physics"\ncollector = "cm:9618"\n[ring]\nnode_name = "physics"\n'
        f'key_file = "{etc / "ring.key"}"\n'
    )
    for command in (["check-config", str(config)], ["run", "--config", str(config)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"poold: error: {config}: ring: {etc / 'node.key'}: cannot open"), err
    install_keys(etc, main, name="physics", pool="physics", host="cm")
    (etc / "ca.pub").unlink()
    assert main(["check-config", str(config)]) == 2
    assert f"{etc / 'ca.pub'}: cannot open CA public key" in capsys.readouterr().err
    install_keys(tmp_path / "other", main, name="chemistry", pool="chemistry", host="cm", ca=tmp_path / "ca2")
    shutil.copy(tmp_path / "offline-ca" / "ca.pub", etc / "ca.pub")
    assert main(["check-config", str(config)]) == 0  # the CA that signed physics's certificate
    shutil.copy(tmp_path / "other" / "node.cert", etc / "node.cert")
    assert main(["check-config", str(config)]) == 2
    assert "certificate is for another key" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_a_key_the_daemons_user_cannot_read_is_named_by_check_config_and_new_node_gives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the docs say, an admin makes the keys as root, and poold runs as condor (poold.service):
    node.key was root's (0600), check-config (run as root, which reads anything) said ok, and
    poold stopped at its start. Now `keys new-node` run as root gives node.key to the user the
    daemon runs as, and check-config names a key that user could not read. (The user here is
    `nobody`, as this machine has no condor.)"""
    monkeypatch.setattr(poold_cli, "CLI", dataclasses.replace(poold_cli.CLI, service_user="nobody"))
    monkeypatch.setattr(install, "UNITS_DIR", tmp_path / "units")  # none installed: the shipped user
    nobody = pwd.getpwnam("nobody").pw_uid
    etc = tmp_path / "etc"
    etc.mkdir()
    generate_key_file(etc / "ring.key")
    install_keys(etc, main, name="physics", pool="physics", host="cm")
    assert (etc / "node.key").stat().st_uid == nobody and (etc / "node.key").stat().st_mode & 0o777 == 0o600
    config = tmp_path / "poold.toml"
    config.write_text(
        f'[pool]\nname = "physics"\ncollector = "cm:9618"\n[ring]\nnode_name = "physics"\n'
        f'key_file = "{etc / "ring.key"}"\n'
    )
    assert main(["check-config", str(config)]) == 2  # the ring key is still root's
    err = capsys.readouterr().err
    assert f"{etc / 'ring.key'}: owned by root, but poold runs as nobody" in err, err
    assert f"chown nobody: {etc / 'ring.key'}" in err
    os.chown(etc / "ring.key", nobody, -1)
    assert main(["check-config", str(config)]) == 0
    os.chown(etc / "node.key", 0, -1)
    assert main(["check-config", str(config)]) == 2
    assert f"{etc / 'node.key'}: owned by root" in capsys.readouterr().err
    units = tmp_path / "units"
    (units / "poold.service.d").mkdir(parents=True)
    (units / "poold.service").write_text("[Service]\nUser=nobody\n")
    (units / "poold.service.d" / "10-root.conf").write_text("[Service]\nUser=root\n")
    assert main(["check-config", str(config)]) == 0  # the admin runs it as root: root's key is right
    (units / "poold.service").unlink()  # not installed again: the shipped unit's user
    assert main(["keys", "new-node", "--owner", "no-such-user-here", str(tmp_path / "x")]) == 2
    assert "no user 'no-such-user-here'" in capsys.readouterr().err
    assert not (tmp_path / "x" / "node.key").exists()  # refused before anything was written
    monkeypatch.setattr(
        poold_cli, "CLI", dataclasses.replace(poold_cli.CLI, service_user="no-such-user-here")
    )
    assert main(["keys", "new-node", str(tmp_path / "y")]) == 0  # HTCondor not installed yet
    assert "chown no-such-user-here: node.key once HTCondor is installed" in capsys.readouterr().out
    assert (tmp_path / "y" / "node.key").stat().st_uid == 0


def test_the_user_an_installed_unit_runs_its_daemon_as(tmp_path: Path) -> None:
    units = tmp_path / "units"
    assert install.unit_user("poold", units) is None  # not installed
    units.mkdir()
    (units / "poold.service").write_text("[Unit]\nUser=nobody\n[Service]\nExecStart=/x\n")
    assert install.unit_user("poold", units) == "root"  # no User= in [Service]
    (units / "poold.service").write_text((FILES / "systemd/poold.service").read_text())
    assert install.unit_user("poold", units) == "condor"  # as shipped
    (units / "poold.service.d").mkdir()
    (units / "poold.service.d" / "20-b.conf").write_text("[Service]\nUser=b\n")
    (units / "poold.service.d" / "10-a.conf").write_text("[Service]\nUser=a\n")
    assert install.unit_user("poold", units) == "b"  # drop-ins in name order, the last one wins
    assert install.unit_user("faultd", units) is None
    (units / "faultd.service").write_text((FILES / "systemd/faultd.service").read_text())
    assert install.unit_user("faultd", units) == "root"  # faultd runs as root (Group=condor)


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


def test_a_collector_the_messages_cannot_carry_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """poolD review, finding 10: an IPv6 collector passed the config check, then every offer
    failed the messages' host:port grammar inside the core (no offer sent, no file or key named).
    The config refuses it, naming the key, from the file and from HTCondor's COLLECTOR_HOST."""
    from common.config import ConfigError
    from poolD.config import PoolSection, with_condor_values
    from tests.poolD.test_reload import daemon

    config = tmp_path / "poold.toml"
    config.write_text('[pool]\nname = "p"\ncollector = "[2001:db8::1]:9618"\n')
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: " in err and "pool.collector" in err and "IPv4" in err
    with pytest.raises(ValueError, match="IPv4"):
        PoolSection(name="p", collector="[2001:db8::1]:9618")
    assert PoolSection(name="p", collector="10.0.0.5:9618").collector == "10.0.0.5:9618"
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "allow"\n')
    loaded = daemon(tmp_path, policy).config
    unset = loaded.model_copy(update={"pool": loaded.pool.model_copy(update={"collector": None})})
    with pytest.raises(
        ConfigError, match=r"poold\.toml: pool\.collector is not set and HTCondor's COLLECTOR_HOST"
    ):
        with_condor_values(unset, {"COLLECTOR_HOST": "[2001:db8::1]:9618"}, "poold.toml")
    assert (
        with_condor_values(unset, {"COLLECTOR_HOST": "cm.p.org"}, "poold.toml").pool.collector
        == "cm.p.org:9618"
    )


def keyed_config(tmp_path: Path, extra: str) -> Path:
    """A minimal poold.toml with its keys in place, and `extra` lines at its end."""
    etc = tmp_path / "etc"
    etc.mkdir()
    generate_key_file(etc / "ring.key")
    install_keys(etc, main, name="p", pool="p", host="cm")
    config = tmp_path / "poold.toml"
    ring = f'[ring]\nnode_name = "p"\nkey_file = "{etc / "ring.key"}"\n'
    config.write_text(f'[pool]\nname = "p"\ncollector = "cm:9618"\n{ring}{extra}\n')
    return config


@pytest.mark.parametrize(
    ("section", "line", "says"),
    [
        ("daemon", "advertise_interval = inf", "daemon.advertise_interval"),  # ended poold after its start
        ("daemon", "advertise_interval = 1e308", "daemon.advertise_interval"),
        ("discovery", "valid_for = 100000", "discovery.valid_for"),  # no offer was ever made
        ("flocking", "blacklist_for = inf", "flocking.blacklist_for"),  # the state stopped being saved
        ("flocking", "withdraw_after = nan", "flocking.withdraw_after"),
    ],
)
def test_check_config_refuses_numbers_that_broke_poold_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, line: str, says: str
) -> None:
    config = keyed_config(tmp_path, f"[{section}]\n{line}")
    assert main(["check-config", str(config)]) == 2
    assert says in capsys.readouterr().err


def test_check_config_refuses_a_state_file_that_is_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At the start such a directory was set aside (renamed, with all it held)."""
    config = keyed_config(tmp_path, f'[daemon]\nstate_file = "{tmp_path}"')
    for command in (["check-config", str(config)], ["run", "--config", str(config)]):
        assert main(command) == 2
        assert f"daemon.state_file: {tmp_path} is a directory" in capsys.readouterr().err
