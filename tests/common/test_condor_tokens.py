"""The gateway's pure token helpers: the environment that pins a client to one identity's tokens,
and the decoding of condor_token_list's lines (real-HTCondor use: test_security_condor.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from common.condor import TokenInfo
from common.condor.gateway import token_environment
from common.condor.worker import authz_args, op_request_token, target_args


def test_token_environment_pins_idtokens_from_one_directory_with_and_without_tool_prefix() -> None:
    env = token_environment("/etc/condor-selforg/tokens.d/poold")
    assert env == {
        "_CONDOR_SEC_TOKEN_DIRECTORY": "/etc/condor-selforg/tokens.d/poold",
        "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS": "IDTOKENS",
        "_CONDOR_TOOL.SEC_TOKEN_DIRECTORY": "/etc/condor-selforg/tokens.d/poold",
        "_CONDOR_TOOL.SEC_CLIENT_AUTHENTICATION_METHODS": "IDTOKENS",
    }
    assert token_environment(None) == {} and token_environment("") == {}


def test_token_info_from_a_condor_token_list_entry() -> None:
    entry = {
        "header": {"alg": "HS256", "kid": "POOL"},
        "payload": {
            "iat": 1790000000,
            "exp": 1790003600,
            "iss": "poola.sandbox",
            "jti": "c0ffee",
            "scope": "condor:/READ condor:/CONFIG condor:/ADMINISTRATOR",
            "sub": "poold@poola.sandbox",
        },
        "file": "/etc/condor-selforg/tokens.d/poold/token",
    }
    info = TokenInfo.from_listing(entry)
    assert info == TokenInfo(
        identity="poold@poola.sandbox",
        issuer="poola.sandbox",
        token_id="c0ffee",
        authz=["READ", "CONFIG", "ADMINISTRATOR"],
        expires=1790003600,
        key="POOL",
        file="/etc/condor-selforg/tokens.d/poold/token",
    )
    unbounded = TokenInfo.from_listing({"payload": {"sub": "condor@b", "iss": "b"}})
    assert (unbounded.authz, unbounded.expires, unbounded.key) == ([], None, None)


def test_tool_options() -> None:
    assert authz_args("poold@a", ["READ", "CONFIG"], 600) == [
        "-identity", "poold@a", "-authz", "READ", "-authz", "CONFIG", "-lifetime", "600",
    ]  # fmt: skip
    assert authz_args(None, [], None) == []
    assert target_args("cm.b:9618", None, "SCHEDD") == ["-pool", "cm.b:9618", "-type", "SCHEDD"]
    assert target_args(None, None, None) == []


def test_a_token_request_tool_is_stopped_after_give_up_after(tmp_path: Path) -> None:
    """poolD review, finding 1: condor_token_request was left waiting for an approval that a
    refusing peer never gives (up to an hour), one per request. With `give_up_after` it is
    stopped (here a stand-in that queues a request and then waits 40 s)."""
    tool = tmp_path / "condor_token_request"
    tool.write_text('#!/bin/sh\necho "To approve, run: approve request 4242"\nexec sleep 40\n')
    tool.chmod(0o755)
    result = op_request_token(
        ["env", f"PATH={tmp_path}:{os.environ['PATH']}"],  # the stand-in comes first on PATH
        "negotiator-home@physics.sandbox",
        ["READ", "NEGOTIATOR"],
        1200,
        str(tmp_path / "token"),
        "cm.physics.org:9618",
        None,
        None,
        5.0,
        give_up_after=1.0,
    )
    pid = result["pid"]
    try:
        assert result["request_id"] == "4242"
        deadline = time.monotonic() + 10
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < deadline, "the tool still runs after give_up_after"
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
