"""Policy Manager: first match wins, directions, blacklist, file errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import ConfigError
from poolD.policy import Direction, Policy, Subject

POLICY = """
default = "deny"

[[rule]]
action = "deny"
pools = ["rogue*"]
comment = "never again"

[[rule]]
action = "allow"
hosts = ["*.physics.example.edu"]

[[rule]]
action = "allow"
networks = ["10.213.0.0/16"]
direction = "accept"

[[rule]]
action = "allow"
pools = ["partner-*"]
direction = "announce"
"""


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return Policy.load(path)


def decide(policy: Policy, pool: str | None, host: str, direction: Direction = Direction.ACCEPT):
    return policy.decide(Subject(pool, host), direction, now=0.0)


def test_first_matching_rule_wins_and_is_named(policy: Policy) -> None:
    d = decide(policy, "rogue-7", "cm.physics.example.edu")
    assert not d.allowed and "rule 1 (deny pools=rogue*; never again)" in d.rule
    d = decide(policy, "lab", "CM.Physics.Example.edu")
    assert d.allowed and "rule 2" in d.rule


def test_cidr_and_direction(policy: Policy) -> None:
    assert decide(policy, "x", "10.213.4.10", Direction.ACCEPT).allowed
    d = decide(policy, "x", "10.213.4.10", Direction.ANNOUNCE)
    assert not d.allowed and d.rule.endswith("default deny")
    assert decide(policy, "partner-9", "192.0.2.1", Direction.ANNOUNCE).allowed
    assert not decide(policy, "partner-9", "192.0.2.1", Direction.ACCEPT).allowed
    assert not decide(policy, "x", "cm.example.org", Direction.ACCEPT).allowed  # a name never matches a CIDR


def test_unknown_pool_name_does_not_match_pool_rules(policy: Policy) -> None:
    assert not decide(policy, None, "192.0.2.1", Direction.ANNOUNCE).allowed


def test_blacklist_comes_first_and_expires(policy: Policy) -> None:
    # Decided (and remembered) by the rules first: the blacklist must still win over that.
    assert policy.decide(Subject("lab", "cm.physics.example.edu"), Direction.ACCEPT, now=10.0).allowed
    policy.add_to_blacklist("lab", until=100.0, reason="offered slots, ran nothing")
    d = policy.decide(Subject("lab", "cm.physics.example.edu"), Direction.ACCEPT, now=50.0)
    assert not d.allowed and "blacklist (offered slots, ran nothing)" in d.rule
    assert policy.decide(Subject("lab", "cm.physics.example.edu"), Direction.ACCEPT, now=100.0).allowed
    assert "lab" not in policy.blacklist


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('default = "maybe"', "key 'default'"),
        ('[[rule]]\naction = "allow"\nnetworks = ["10.0.0.0/33"]', "key 'rule.0.networks'"),
        ('[[rule]]\naction = "allow"\npool = ["x"]', "unknown key 'rule.0.pool'"),
        ('[[rule]]\npools = ["x"]', "missing required key 'rule.0.action'"),
    ],
)
def test_bad_policy_file_is_one_line_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Policy.load(path)
    assert str(info.value).startswith(f"{path}: ") and fragment in str(info.value)
    assert "\n" not in str(info.value)
