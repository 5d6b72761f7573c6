"""The master's token (llic/master_token.py) and how master_submitter fetches it (the worker's
condor_token_fetch operation), without HTCondor: the real fetch runs in test_master_condor.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from common.condor.worker import ToolFailed, op_fetch_token
from llic.config import LlicConfig
from llic.master_token import AUTHORIZATIONS, TOKEN_FILE, held_token_dir, remove_token, token_dir, write_token

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1QHNhbmRib3gifQ.c2ln"


def test_the_token_is_written_as_htcondor_reads_one_and_only_its_owner_can(tmp_path: Path) -> None:
    assert held_token_dir(tmp_path) is None
    directory = write_token(tmp_path, TOKEN)
    assert directory == token_dir(tmp_path) == held_token_dir(tmp_path)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    path = directory / TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == TOKEN + "\n"
    write_token(tmp_path, TOKEN.replace("c2ln", "bmV3"))  # a new run's token replaces the old one
    assert path.read_text().strip().endswith("bmV3") and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_finished_master_leaves_no_token(tmp_path: Path) -> None:
    write_token(tmp_path, TOKEN)
    remove_token(tmp_path)
    assert not token_dir(tmp_path).exists() and held_token_dir(tmp_path) is None
    remove_token(tmp_path)  # nothing left: fine


@pytest.mark.parametrize("text", ["", "a.b", "a.b.c.d", "a.b c.d", "a.b.c\nx.y.z"])
def test_what_is_not_a_token_is_refused_before_anything_is_written(tmp_path: Path, text: str) -> None:
    with pytest.raises(ValueError, match="not a token"):
        write_token(tmp_path, text)
    assert not token_dir(tmp_path).exists()


def test_the_master_asks_for_its_owner_bounded_to_read_and_write_for_a_day_by_default() -> None:
    assert AUTHORIZATIONS == ("READ", "WRITE")
    assert LlicConfig().master_token_lifetime == 86400
    assert LlicConfig(master_token_lifetime=0).master_token_lifetime == 0  # no token


def _fake_tool(tmp_path: Path, output: str) -> list[str]:
    """A stand-in for condor_token_fetch: records its arguments, prints `output`."""
    script = tmp_path / "tool"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "args"}\nprintf %s "{output}"\n')
    script.chmod(0o755)
    return [str(script)]


def test_fetch_token_names_the_schedd_the_bounds_and_the_lifetime(tmp_path: Path) -> None:
    tools = _fake_tool(tmp_path, TOKEN + "\n")
    token = op_fetch_token(tools, ["READ", "WRITE"], 600, None, "u@submit", "SCHEDD")
    assert token == TOKEN
    args = (tmp_path / "args").read_text().split()
    assert args == [
        "condor_token_fetch", "-authz", "READ", "-authz", "WRITE", "-lifetime", "600",
        "-name", "u@submit", "-type", "SCHEDD",
    ]  # fmt: skip


@pytest.mark.parametrize("output", ["", "Failed to request a session token", "a.b c.d"])
def test_fetch_token_output_that_is_no_token_is_a_tool_failure(tmp_path: Path, output: str) -> None:
    with pytest.raises(ToolFailed, match="printed no token"):
        op_fetch_token(_fake_tool(tmp_path, output), ["READ"], None, None, None, None)
