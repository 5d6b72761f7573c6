"""condor-selforg install: FHS paths, owners and modes; idempotent; an administrator's edits kept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePosixPath

import pytest

from common.config import ConfigError
from common.install import FILES, MANIFEST, Installer, main, plan

CDIR = PurePosixPath("/etc/condor/config.d")


def make_root(tmp_path: Path) -> Path:
    """A root whose root and condor accounts are this test's own user (no privileges needed)."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    uid, gid = os.getuid(), os.getgid()
    (root / "etc/passwd").write_text(
        f"root:x:{uid}:{gid}::/root:/bin/sh\ncondor:x:{uid}:{gid}::/:/bin/false\n"
    )
    (root / "etc/group").write_text(f"root:x:{gid}:\ncondor:x:{gid}:\n")
    return root


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mode, None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def run(root: Path, *components: str, dry_run: bool = False, files: Path = FILES) -> list[str]:
    installer = Installer(root, "/venv/bin", dry_run=dry_run, files=files)
    items = [i for c in components for i in plan(c, condor_config_dir=CDIR)]
    return [str(step) for step in installer.install(items)]


def test_install_puts_files_where_the_readme_says_with_owner_and_mode(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    steps = run(root, "poold", "faultd", "llic")
    assert all(s.startswith("create") for s in steps), steps
    mode = {p: (root / p.lstrip("/")).stat().st_mode & 0o7777 for p in [
        "/etc/poold", "/etc/poold/poold.toml", "/etc/poold/policy.toml", "/etc/faultd",
        "/etc/faultd/faultd.toml", "/etc/systemd/system/poold.service", "/etc/llic/llic_config",
        "/etc/condor/config.d/60-poold-pool.conf", "/etc/condor/config.d/60-faultd-pool.conf",
    ]}  # fmt: skip
    assert mode == {
        "/etc/poold": 0o750, "/etc/poold/poold.toml": 0o640, "/etc/poold/policy.toml": 0o640,
        "/etc/faultd": 0o750, "/etc/faultd/faultd.toml": 0o640, "/etc/systemd/system/poold.service": 0o644,
        "/etc/llic/llic_config": 0o644, "/etc/condor/config.d/60-poold-pool.conf": 0o644,
        "/etc/condor/config.d/60-faultd-pool.conf": 0o644,
    }  # fmt: skip
    unit = (root / "etc/systemd/system/faultd.service").read_text()
    assert "ExecStart=/venv/bin/faultd run" in unit and "/opt/condor-selforg" not in unit
    assert (root / "etc/poold/poold.toml").read_bytes() == (FILES / "config/poold.toml").read_bytes()
    assert (root / str(MANIFEST).lstrip("/")).exists()


def test_dry_run_changes_nothing_and_says_what_it_would_do(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    steps = run(root, "poold", dry_run=True)
    assert snapshot(root) == before
    assert steps[0] == "create     /etc/poold  directory 0750 condor:condor"
    assert "create     /etc/poold/poold.toml  0640 condor:condor" in steps


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    run(root, "poold", "faultd")
    before = snapshot(root)
    steps = run(root, "poold", "faultd")
    assert snapshot(root) == before
    assert [s.split()[0] for s in steps] == ["unchanged"] * 7


def test_a_changed_config_is_kept_and_the_new_version_goes_beside_it(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    run(root, "poold")
    config = root / "etc/poold/poold.toml"
    config.write_text(config.read_text().replace('name = "physics"', 'name = "chemistry"'))
    steps = run(root, "poold")
    assert (
        "keep       /etc/poold/poold.toml  (changed here); the new version goes in /etc/poold/poold.toml.new"
        in steps
    )
    assert 'name = "chemistry"' in config.read_text()
    assert (root / "etc/poold/poold.toml.new").read_bytes() == (FILES / "config/poold.toml").read_bytes()
    again = run(root, "poold")
    assert any("the new version is in /etc/poold/poold.toml.new" in s for s in again)


def test_a_file_that_was_there_before_is_not_overwritten(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "etc/faultd").mkdir()
    (root / "etc/faultd/faultd.toml").write_text("# the admin's own\n")
    steps = run(root, "faultd")
    assert any(s.startswith("keep       /etc/faultd/faultd.toml") for s in steps)
    assert (root / "etc/faultd/faultd.toml").read_text() == "# the admin's own\n"


def test_an_unchanged_file_is_upgraded(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    files = tmp_path / "files"
    shutil.copytree(FILES, files)
    run(root, "faultd", files=files)
    snippet = files / "condor/60-faultd-pool.conf"
    snippet.write_text(snippet.read_text() + "# a line of the next release\n")
    steps = run(root, "faultd", files=files)
    assert (
        "update     /etc/condor/config.d/60-faultd-pool.conf  (as installed before: not changed here)"
        in steps
    )
    assert (root / "etc/condor/config.d/60-faultd-pool.conf").read_text().endswith("the next release\n")
    assert not (root / "etc/condor/config.d/60-faultd-pool.conf.new").exists()


def test_owner_and_mode_are_set_right_again(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    run(root, "poold")
    (root / "etc/poold/poold.toml").chmod(0o644)
    steps = run(root, "poold")
    assert "fix        /etc/poold/poold.toml  owner and mode to 0640 condor:condor" in steps
    assert (root / "etc/poold/poold.toml").stat().st_mode & 0o777 == 0o640


def test_condor_only_installs_the_snippet_alone() -> None:
    items = plan("poold", condor_config_dir=PurePosixPath("/srv/condor/config.d"), condor_only=True)
    assert [str(i.target) for i in items] == ["/srv/condor/config.d/60-poold-pool.conf"]
    with pytest.raises(ConfigError, match="llic has no HTCondor configuration snippet"):
        plan("llic", condor_config_dir=CDIR, condor_only=True)


def test_a_missing_user_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "bare"
    (root / "etc").mkdir(parents=True)
    assert main(["install", "poold", "--root", str(root), "--condor-config-dir", "/etc/condor/config.d"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"condor-selforg: error: user 'condor' is not in {root}/etc/passwd: install HTCondor first "
        "(its package makes the condor user)"
    )


def test_cli_prints_every_step_and_the_next_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path)
    args = ["install", "llic", "--root", str(root), "--condor-config-dir", str(CDIR)]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"would install under {root}:\n  create     /etc/llic  directory 0755 root:root\n")
    assert not (root / "etc/llic").exists()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "  create     /etc/llic/llic_config  0644 root:root\n" in out and "next:\n  llic: edit" in out


def test_show_prints_a_packaged_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "poold.service"]) == 0
    assert capsys.readouterr().out == (FILES / "systemd/poold.service").read_text()
    assert main(["show"]) == 0
    assert "condor/60-faultd-pool.conf" in capsys.readouterr().out.split()


def test_one_snippet_per_role_and_what_both_set_adds_up() -> None:
    """poold's pool and faultd's pool each have one snippet; a knob both set must build on the
    value so far ($(KNOB) or $(KNOB:default)), so that installing both loses neither's lines."""

    def knobs(name: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for line in (FILES / "condor" / name).read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#") and not line.startswith(" "):
                key, _, value = line.partition("=")
                out.setdefault(key.strip(), []).append(value.strip())
        return out

    assert sorted(p.name for p in (FILES / "condor").iterdir()) == [
        "60-faultd-pool.conf",
        "60-poold-pool.conf",
    ]
    poold, faultd = knobs("60-poold-pool.conf"), knobs("60-faultd-pool.conf")
    both = set(poold) & set(faultd)
    assert both == {"ALLOW_DAEMON_COLLECTOR"}  # each identity's own ad (UPDATE_AD_GENERIC)
    for key in both:
        assert all(v.startswith(f"$({key}") for v in poold[key] + faultd[key]), (key, poold[key], faultd[key])


def test_only_flock_to_and_flock_from_are_settable_at_run_time_and_only_by_poold() -> None:
    """Issue 14's bound on HTCondor's side, in the one snippet that enables runtime config: plain
    assignments (not `$(KNOB) ...`), so an earlier file cannot widen them; faultd's snippet
    enables nothing at run time. Who may set them is an identity (issue 15), not a host."""
    lines = {}
    for name in ("60-poold-pool.conf", "60-faultd-pool.conf"):
        for line in (FILES / "condor" / name).read_text().splitlines():
            key, eq, value = line.partition("=")
            if eq and not line.lstrip().startswith("#"):
                lines.setdefault(key.strip(), []).append((name, value.strip()))
    assert lines["ENABLE_RUNTIME_CONFIG"] == [("60-poold-pool.conf", "True")]
    assert lines["SETTABLE_ATTRS_CONFIG"] == [("60-poold-pool.conf", "FLOCK_TO, FLOCK_FROM")]
    assert lines["ALLOW_CONFIG"] == [("60-poold-pool.conf", "$(POOLD_IDENTITY)")]
    assert lines["POOLD_IDENTITY"] == [("60-poold-pool.conf", "poold@$(TRUST_DOMAIN)")]
    assert not [k for k in lines if k.startswith(("SETTABLE_ATTRS", "ENABLE_")) and k not in (
        "SETTABLE_ATTRS_CONFIG", "ENABLE_RUNTIME_CONFIG")]  # fmt: skip
