"""SIGHUP reload of the policy: a good file takes effect, a broken one is reported and ignored."""

from __future__ import annotations

from pathlib import Path

from common.config import parse_config
from deploy.harness.ring_keys import RingKeys
from poolD.config import PooldConfig
from poolD.policy import Direction, Subject
from poolD.service import PoolDaemon


def daemon(tmp_path: Path, policy: Path) -> PoolDaemon:
    keys = RingKeys(tmp_path)
    keys.node("home", hosts=["0.0.0.0/0"], pool="home")
    text = f"""
[pool]
name = "home"
collector = "127.0.0.1:9618"
[ring]
node_name = "home"
{keys.toml("home")}[daemon]
policy_file = "{policy}"
control_socket = "{tmp_path / "ctl.sock"}"
"""
    return PoolDaemon(parse_config(text, PooldConfig, source="test.toml"))


async def test_reload_applies_a_good_policy_and_keeps_the_blacklist(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "allow"\n')
    d = daemon(tmp_path, policy)
    d.policy.add_to_blacklist("cheat", until=1e12, reason="did not deliver")
    policy.write_text('default = "allow"\n[[rule]]\naction = "deny"\npools = ["x*"]\n')
    await d.reload()
    assert not d.policy.decide(Subject("xenon", "h"), Direction.ACCEPT, 0.0).allowed
    assert "cheat" in d.policy.blacklist
    assert "policy reloaded" in d.decisions[-1]


async def test_reload_keeps_the_old_policy_when_the_file_is_broken(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "deny"\n')
    d = daemon(tmp_path, policy)
    old = d.policy
    policy.write_text("default = \n")
    await d.reload()
    assert d.policy is old
    assert "policy reload failed, old policy kept" in d.decisions[-1] and str(policy) in d.decisions[-1]


async def test_reload_takes_what_it_can_from_the_config_and_names_what_needs_a_restart(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "allow"\n')
    d = daemon(tmp_path, policy)
    changed = d.config.model_copy(
        update={
            "daemon": d.config.daemon.model_copy(update={"gateway_timeout": 7.0, "advertise_interval": 5.0}),
            "ring": d.config.ring.model_copy(update={"port": 7999}),
        }
    )
    d.reread = lambda: changed
    await d.reload()
    assert d.gateway.timeout == 7.0 and d.advertiser.interval == 5.0
    assert d.config.ring.port == 7640  # needs a restart: the old value stays
    reloaded = next(x for x in d.decisions if "config reloaded" in x)
    assert reloaded.endswith(
        "config reloaded: daemon.gateway_timeout, daemon.advertise_interval; restart poold for ring.port"
    )
    assert "policy reloaded" in d.decisions[-1]
