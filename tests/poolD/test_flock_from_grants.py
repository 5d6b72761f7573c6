"""What poolD lets other pools' schedds in with (FLOCK_FROM): only hosts the grammar and the
policy grant, bounded, and taken back when a grant expires or the policy turns (issue 14, row 1).
The pure core, fed by hand; tests/hostile/test_poold_flock_intents.py attacks a real poold."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.condor.knobs import KnobRefused, check_config, poold_flock_from
from common.overlay.messages import Peer
from poolD.core import FlockFromApplied, FlockToApplied, PoolCore, SetFlockFrom, SetFlockTo
from poolD.messages import FlockIntent, FlockReply
from poolD.policy import Policy, PolicyFile, Rule
from tests.poolD.test_core import core, intent, load, of, round_at, sends, willing

pytestmark = pytest.mark.hostile


def applied(c: PoolCore, out_actions: list, now: float) -> list:
    """The driver applies every SetFlockFrom; the replies that follow."""
    replies = []
    for action in out_actions:
        if isinstance(action, SetFlockFrom):
            out = c.on_flock_from_applied(FlockFromApplied(action, None), now)
            replies += sends(out, FlockReply)
            replies += applied(c, out.actions, now)
    return replies


def test_the_row_1_intent_is_refused_whole_and_counted() -> None:
    """Issue 14 row 1: FLOCK_FROM became `*, */*, x\\nALLOW_ADMINISTRATOR = *`."""
    c = core()
    for hosts in (["*", "*/*", "x\nALLOW_ADMINISTRATOR = *"], ["s1.other.org", "a=b"], ["$(FULL_HOSTNAME)"]):
        out = c.on_message(intent("physics", hosts), 1.0)
        assert of(out, SetFlockFrom) == []
        (reply,) = sends(out, FlockReply)
        assert not reply.message.accepted and "schedd host refused" in reply.message.reason
    assert c.counters["flock_intents_refused_hosts"] == 3
    assert c.flock_from == set() and c.grants == {}
    assert c.status(1.0)["flock_from"] == []


def test_a_glob_passes_only_when_the_rule_grants_exactly_it() -> None:
    rule = Rule(action="allow", pools=["physics"], schedd_hosts=["*.physics.org", "10.1.0.0/16"])
    c = core(Policy(PolicyFile(default="deny", rule=[rule])))
    out = c.on_message(intent("physics", ["*.physics.org", "s1.physics.org", "10.1.2.3"]), 1.0)
    (action,) = of(out, SetFlockFrom)
    assert action.hosts == ("*.physics.org", "10.1.2.3", "s1.physics.org")
    assert action.globs == {"*.physics.org"}
    check_config(
        poold_flock_from(action.globs), {"FLOCK_FROM": ", ".join(action.hosts)}
    )  # what the writer does
    applied(c, [action], 1.5)
    # Another glob, or a host outside the grants: the glob refuses the intent, the host is dropped.
    out = c.on_message(intent("physics", ["*.org"]), 2.0)
    assert not sends(out, FlockReply)[0].message.accepted
    out = c.on_message(intent("physics", ["s2.physics.org", "evil.org", "10.2.0.1"]), 3.0)
    (action,) = of(out, SetFlockFrom)
    assert action.hosts == ("s2.physics.org",)  # replaces the pool's earlier grant: FLOCK_FROM shrinks
    assert c.counters["flock_from_hosts_not_granted"] == 2
    # Without schedd_hosts in the rule, single hosts only.
    c = core()
    assert not sends(c.on_message(intent("other", ["*.other.org"]), 1.0), FlockReply)[0].message.accepted
    with pytest.raises(KnobRefused):
        check_config(poold_flock_from(), {"FLOCK_FROM": "*.other.org"})


def test_one_pool_flooding_intents_has_one_flock_from_change_under_way_and_keeps_no_one_out() -> None:
    """poolD review, finding 5: a pool alternating its schedd hosts made every intent a FLOCK_FROM
    write, MAX_PENDING_INTENTS of them queued, and every other pool's intent was refused 'busy'.
    Now a pool has one change under way; what it asks meanwhile joins the next (its latest
    hosts, answered at its latest address), and the others' intents are written and accepted."""
    c = core()
    writes: list[SetFlockFrom] = []
    for i in range(200):
        writes += of(c.on_message(intent("liar", [f"s{i % 2}.liar.org"]), 1.0 + i * 0.002), SetFlockFrom)
    assert len(writes) == 1 and c.counters["flock_intents_coalesced"] == 199
    out = c.on_message(intent("honest", ["s1.honest.org"], oid=9), 2.0)
    (honest,) = of(out, SetFlockFrom)
    assert "s1.honest.org" in honest.hosts and c.counters["intents_refused_busy"] == 0
    # The liar's first change is done: it asked for s1 last, so one more change, then its answer.
    out = c.on_flock_from_applied(FlockFromApplied(writes[0], None), 3.0)
    assert sends(out, FlockReply) == []
    (again,) = of(out, SetFlockFrom)
    assert "s1.liar.org" in again.hosts and "s0.liar.org" not in again.hosts
    (reply,) = sends(c.on_flock_from_applied(FlockFromApplied(honest, None), 3.5), FlockReply)
    assert reply.message.accepted and reply.addr == "10.0.0.9:7640"
    (reply,) = sends(c.on_flock_from_applied(FlockFromApplied(again, None), 4.0), FlockReply)
    assert reply.message.accepted
    assert c.flock_from == {"s1.liar.org", "s1.honest.org"}
    # A renewal naming the hosts FLOCK_FROM already holds is answered at once, no write.
    out = c.on_message(intent("honest", ["s1.honest.org"], oid=9), 5.0)
    assert of(out, SetFlockFrom) == [] and sends(out, FlockReply)[0].message.accepted


def test_grants_are_bounded_per_pool_and_in_all() -> None:
    c = core(flock_from_hosts_per_pool=3, flock_from_max_hosts=5)
    out = c.on_message(intent("big", [f"s{i}.big.org" for i in range(4)]), 1.0)
    assert "at most 3 per pool" in sends(out, FlockReply)[0].message.reason
    applied(c, c.on_message(intent("a", ["s1.a.org", "s2.a.org", "s3.a.org"]), 1.0).actions, 1.0)
    out = c.on_message(intent("b", ["s1.b.org", "s2.b.org", "s3.b.org"], oid=8), 2.0)
    assert "FLOCK_FROM full" in sends(out, FlockReply)[0].message.reason
    assert c.counters["flock_intents_refused_full"] == 1
    # "a" shrinking its own grant makes room.
    applied(c, c.on_message(intent("a", ["s1.a.org"]), 3.0).actions, 3.0)
    replies = applied(c, c.on_message(intent("b", ["s1.b.org", "s2.b.org"], oid=8), 4.0).actions, 4.0)
    assert replies[0].message.accepted and len(c.flock_from) == 3


def test_a_grant_that_is_not_renewed_expires_and_flock_from_shrinks() -> None:
    c = core(reauthorize_after=100.0)
    applied(c, c.on_message(intent("a", ["s1.a.org"]), 0.0).actions, 0.0)
    applied(c, c.on_message(intent("b", ["s1.b.org"], oid=8), 50.0).actions, 50.0)
    assert c.flock_from == {"s1.a.org", "s1.b.org"}
    short = core(reauthorize_after=10.0)
    short.start(0.0)
    assert short.on_message(intent("a", ["s1.a.org"]), 1.0).wakeup == 21.0  # woken when it expires
    applied(c, c.on_message(intent("a", ["s1.a.org"]), 150.0).actions, 150.0)  # a renews
    out = c.on_timer(250.0)  # b's grant (until 250) ran out
    (action,) = of(out, SetFlockFrom)
    assert action.hosts == ("s1.a.org",) and action.reply_to is None
    assert any("revoked for b" in str(n) for n in out.notes)
    (revoked,) = [n for n in out.notes if n.event == "flock_from_revoked"]
    assert revoked.fields == {"pools": "b", "reason": "grant expired (not renewed)"}
    applied(c, out.actions, 250.0)
    assert c.flock_from == {"s1.a.org"} and c.counters["flock_from_revoked"] == 1
    out = c.on_timer(350.0)
    (action,) = of(out, SetFlockFrom)
    assert action.hosts == ()  # the last grant went: our runtime FLOCK_FROM is removed
    applied(c, out.actions, 350.0)
    assert c.flock_from == set() and c.status(351.0)["flock_from_grants"] == {}


def test_a_revocation_that_fails_is_tried_again() -> None:
    c = core(reauthorize_after=100.0)
    applied(c, c.on_message(intent("a", ["s1.a.org"]), 0.0).actions, 0.0)
    (action,) = of(c.on_timer(200.0), SetFlockFrom)
    c.on_flock_from_applied(FlockFromApplied(action, "collector down"), 200.5)
    assert c.flock_from == {"s1.a.org"}
    (again,) = of(c.on_timer(260.0), SetFlockFrom)
    assert again.hosts == ()


def test_a_reloaded_policy_or_the_blacklist_revokes_grants() -> None:
    c = core()
    applied(c, c.on_message(intent("a", ["s1.a.org"]), 0.0).actions, 0.0)
    applied(c, c.on_message(intent("b", ["s1.b.org"], oid=8), 0.0).actions, 0.0)
    stricter = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["b"])]), "new.toml")
    out = c.replace_policy(stricter, 10.0)
    (action,) = of(out, SetFlockFrom)
    assert action.hosts == ("s1.a.org",)
    applied(c, out.actions, 10.0)
    # A rule that now grants only a narrower set takes back what it no longer covers.
    narrow = Rule(action="allow", pools=["a"], schedd_hosts=["*.elsewhere.org"])
    out = c.replace_policy(Policy(PolicyFile(default="deny", rule=[narrow])), 20.0)
    assert of(out, SetFlockFrom)[0].hosts == ()
    applied(c, out.actions, 20.0)
    # The blacklist (offers that did not deliver) takes a pool's grant at the next timer.
    c = core()
    applied(c, c.on_message(intent("liar", ["s1.liar.org"]), 0.0).actions, 0.0)
    c.policy.add_to_blacklist("liar", 1000.0, "offered slots, flocked jobs stayed idle")
    (action,) = of(c.on_timer(1.0), SetFlockFrom)
    assert action.hosts == ()
    # And an intent from a pool the policy refuses takes back what it had.
    c = core(Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["x"])])))
    applied(c, c.on_message(intent("y", ["s1.y.org"]), 0.0).actions, 0.0)
    c.replace_policy(Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["y"])])))
    out = c.on_message(intent("y", ["s1.y.org"]), 1.0)
    assert of(out, SetFlockFrom)[0].hosts == () and not sends(out, FlockReply)[0].message.accepted


def test_a_pool_that_keeps_flocking_renews_its_authorization() -> None:
    """The sending side: FLOCK_TO unchanged round after round, the pools in it are asked again
    every reauthorize_after, so that their grants of our schedds do not lapse."""
    c = core(max_pools=1, reauthorize_after=300.0)
    c.start(0.0)
    willing(c, 1.0, "near")
    round_at(c, 60.0, load(free=0, idle=5))
    (action,) = of(c.on_message(FlockReply(pool="near", accepted=True, reason="ok"), 60.0), SetFlockTo)
    c.on_flock_to_applied(FlockToApplied(action, applied=True, seen={}), 60.0)
    willing(c, 200.0, "near")  # its offer is renewed
    assert sends(round_at(c, 300.0, load(free=1, idle=1)), FlockIntent) == []  # asked 240 s ago
    out = round_at(c, 420.0, load(free=1, idle=1))  # "keep": FLOCK_TO stays, authorization is stale
    (renewal,) = sends(out, FlockIntent)
    assert renewal.addr == "10.0.0.2:7640" and renewal.message.schedd_hosts == ["10.0.0.1", "cm.home.org"]
    assert sends(round_at(c, 421.0, load(free=1, idle=1)), FlockIntent) == []  # answer on its way


@settings(max_examples=200, deadline=None)
@given(hosts=st.lists(st.text(max_size=30), max_size=8))
def test_whatever_an_intent_names_flock_from_holds_only_what_the_writer_accepts(hosts: list[str]) -> None:
    c = core()
    msg = FlockIntent(pool="any", origin=Peer(id=7, addr="10.0.0.7:7640"), schedd_hosts=hosts)
    for action in of(c.on_message(msg, 1.0), SetFlockFrom):
        check_config(poold_flock_from(action.globs), {"FLOCK_FROM": ", ".join(action.hosts) or None})
        assert not action.globs


def test_a_policy_file_cannot_grant_everyone(tmp_path: Path) -> None:
    from common.config import ConfigError

    for grant in ("*", "*/*", "0.0.0.0/0", "*.org", "x\nALLOW_WRITE = *"):
        path = tmp_path / "policy.toml"
        path.write_text(f'[[rule]]\naction = "allow"\nschedd_hosts = [{grant!r}]\n'.replace("'", '"'))
        with pytest.raises(ConfigError, match="schedd_hosts"):
            Policy.load(path)
