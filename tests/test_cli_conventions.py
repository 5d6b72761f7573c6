"""Every command of the suite behaves as HTCondor's tools do: --version, -json on status
commands, help that says what each subcommand does and its defaults, and a closed pipe or Ctrl-C
ends it quietly."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

from common.cli import version
from faultD.cli import CLI as FAULTD
from poolD.cli import build_parser as poold_parser

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {
    ep.name: ep.value for ep in distribution("condor-selforg").entry_points if ep.group == "console_scripts"
}


def run_script(name: str, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    module, _, func = SCRIPTS[name].partition(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, **kwargs
    )


def test_every_command_is_listed() -> None:
    assert set(SCRIPTS) == {
        "poold", "faultd", "master_submitter", "master_q", "master_rm", "master_release", "master_hold",
        "llic-master", "condor-selforg",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_command_has_version(name: str) -> None:
    for flag in ("--version", "-version"):
        res = run_script(name, flag)
        assert res.returncode == 0 and res.stdout == f"{name} (condor-selforg) {version()}\n", res.stderr


@pytest.mark.parametrize("prog", ["poold", "faultd"])
@pytest.mark.parametrize("flag", ["-json", "--json"])
def test_status_takes_json_both_ways(prog: str, flag: str, tmp_path: Path) -> None:
    res = run_script(prog, "status", flag, "--socket", str(tmp_path / "none.sock"))
    assert res.returncode == 1 and res.stderr.startswith(f"{prog}: cannot reach the daemon at {tmp_path}")


def subcommands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{path}{name}"] = sub
                out |= subcommands(sub, f"{path}{name} ")
    return out


@pytest.mark.parametrize("parser", [poold_parser(), FAULTD.parser()[0]], ids=["poold", "faultd"])
def test_every_subcommand_says_what_it_does_and_its_defaults(parser: argparse.ArgumentParser) -> None:
    subs = subcommands(parser)
    assert {"run", "status", "check-config"} <= set(subs)
    for name, sub in subs.items():
        assert sub.description, f"{parser.prog} {name} has no description"
        text = sub.format_help()
        for action in sub._actions:
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                assert action.help, f"{parser.prog} {name} {action.option_strings[0]} has no help"
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)


def closed_pipe_run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run a command whose stdout is a pipe nobody reads any more (`cmd | true` after true quit)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, cwd=REPO, timeout=300)
    finally:
        os.close(write)


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    config = tmp_path / "llic_config"
    config.write_text(f"MASTER_OUTPUTS_DIR_PREFIX_PATH = {tmp_path}/\n")
    code = "import sys; from llic.master_q import main; sys.exit(main(sys.argv[1:]))"
    res = closed_pipe_run([sys.executable, "-c", code, "ALL", str(config), "-json"])
    assert (res.returncode, res.stderr) == (141, b"")
    code = "import sys; from poolD.cli import main; sys.exit(main(sys.argv[1:]))"
    res = closed_pipe_run(
        [sys.executable, "-c", code, "simulate", "overlay", "--nodes", "20", "--lookups", "50"]
    )
    assert (res.returncode, res.stderr) == (141, b"")
    code = "import sys; from common.install import main; sys.exit(main(sys.argv[1:]))"
    res = closed_pipe_run([sys.executable, "-c", code, "show", "poold.toml"])
    assert (res.returncode, res.stderr) == (141, b"")


def test_ctrl_c_ends_quietly() -> None:
    code = (
        "import sys\n"
        "from common.cli import run_main\n"
        "def interrupted():\n"
        "    raise KeyboardInterrupt\n"
        "sys.exit(run_main('master_q', interrupted))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert (res.returncode, res.stderr) == (130, "")
