"""The gateway's pure token helpers: the environment that pins a client to one identity's tokens,
and the decoding of condor_token_list's lines (real-HTCondor use: test_security_condor.py)."""

from __future__ import annotations

from common.condor import TokenInfo
from common.condor.gateway import token_environment
from common.condor.worker import authz_args, target_args


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
