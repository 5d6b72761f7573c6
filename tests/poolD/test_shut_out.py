"""Issue 15: a policy revocation shuts the revoked pool out. The core asks for ShutOutSchedds
once FLOCK_FROM no longer holds the pool's hosts (never on a grant that merely lapsed, never for
our own schedds' hosts); the worker's pure plan (common.condor.shut_out) picks exactly the
revoked pool's ads and claims and never our own schedds'."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from common.condor.shut_out import claim_hosts, name_host, plan_shut_out, schedd_hosts
from poolD.core import FlockFromApplied, PoolCore, SetFlockFrom, ShutOutDone, ShutOutSchedds
from poolD.policy import Policy, PolicyFile, Rule
from tests.poolD.test_core import core, intent, load, of

DENY_A = Policy(PolicyFile(default="allow", rule=[Rule(action="deny", pools=["a"])]), "deny-a.toml")


def granted(c: PoolCore, pool: str, hosts: list[str], now: float, oid: int = 7) -> None:
    """`pool` is let in (its FLOCK_FROM change applied, if FLOCK_FROM had to change)."""
    for action in of(c.on_message(intent(pool, hosts, oid=oid), now), SetFlockFrom):
        c.on_flock_from_applied(FlockFromApplied(action, None), now)
    assert pool in c.grants


def test_a_policy_revocation_shuts_the_pool_out_after_flock_from_lost_its_hosts() -> None:
    c = core()
    c.on_load(load(free=1, idle=0), 0.0)
    granted(c, "a", ["s1.a.org", "10.9.0.1"], 0.0)
    granted(c, "b", ["s1.b.org"], 1.0, oid=8)
    out = c.replace_policy(DENY_A, 10.0)
    (change,) = of(out, SetFlockFrom)
    assert change.hosts == ("s1.b.org",)
    assert of(out, ShutOutSchedds) == []  # FLOCK_FROM still lets a's schedds in: not yet
    out = c.on_flock_from_applied(FlockFromApplied(change, None), 11.0)
    (shut,) = of(out, ShutOutSchedds)
    assert shut.pool == "a" and shut.hosts == ("10.9.0.1", "s1.a.org")
    assert "policy no longer grants it" in shut.reason
    out = c.on_shut_out(ShutOutDone(shut, ads_invalidated=2, claims_vacated=("slot1_1@x",)), 12.0)
    (done,) = out.notes
    assert done.event == "shut_out" and str(done).startswith("a shut out")
    assert c.counters["pools_shut_out"] == 1 and c.counters["claims_vacated"] == 1
    # Once only: the next timer has nothing more to shut out.
    assert of(c.on_timer(13.0), ShutOutSchedds) == []


def test_a_failed_flock_from_change_delays_the_shut_out_until_it_is_applied() -> None:
    c = core()
    c.on_load(load(free=1, idle=0), 0.0)
    granted(c, "a", ["s1.a.org"], 0.0)
    (change,) = of(c.replace_policy(DENY_A, 10.0), SetFlockFrom)
    out = c.on_flock_from_applied(FlockFromApplied(change, "collector down"), 10.5)
    assert of(out, ShutOutSchedds) == []
    (again,) = of(c.on_timer(20.0), SetFlockFrom)
    assert again.hosts == ()
    (shut,) = of(c.on_flock_from_applied(FlockFromApplied(again, None), 20.5), ShutOutSchedds)
    assert shut.hosts == ("s1.a.org",)
    # A failed shut-out is counted and logged, not retried (FLOCK_FROM keeps the pool out).
    out = c.on_shut_out(ShutOutDone(shut, error="startd refused"), 21.0)
    assert c.counters["shut_out_errors"] == 1 and out.notes[0].event == "shut_out_failed"


def test_an_intent_from_a_pool_the_policy_now_refuses_shuts_it_out() -> None:
    c = core()
    c.on_load(load(free=1, idle=0), 0.0)
    granted(c, "a", ["s1.a.org"], 0.0)
    c.replace_policy(DENY_A)  # no `now`: the grant is reviewed at the pool's next intent
    out = c.on_message(intent("a", ["s1.a.org"]), 5.0)
    (change,) = of(out, SetFlockFrom)
    (shut,) = of(c.on_flock_from_applied(FlockFromApplied(change, None), 5.5), ShutOutSchedds)
    assert shut.pool == "a" and shut.hosts == ("s1.a.org",)


def test_an_expired_grant_is_not_shut_out() -> None:
    c = core(reauthorize_after=100.0)
    granted(c, "a", ["s1.a.org"], 0.0)
    out = c.on_timer(250.0)  # not renewed: it lapses
    (change,) = of(out, SetFlockFrom)
    assert of(out, ShutOutSchedds) == []
    assert of(c.on_flock_from_applied(FlockFromApplied(change, None), 251.0), ShutOutSchedds) == []
    assert c.counters["pools_shut_out"] == 0


def test_our_own_schedds_and_hosts_other_pools_hold_are_never_shut_out() -> None:
    c = core()
    c.on_load(load(free=1, idle=0), 0.0)  # our schedd: cm.home.org, 10.0.0.1
    granted(c, "a", ["s1.a.org", "cm.home.org", "10.0.0.1", "shared.org"], 1.0)
    granted(c, "b", ["shared.org"], 2.0, oid=8)
    (change,) = of(c.replace_policy(DENY_A, 10.0), SetFlockFrom)
    (shut,) = of(c.on_flock_from_applied(FlockFromApplied(change, None), 10.5), ShutOutSchedds)
    assert shut.hosts == ("s1.a.org",)
    # A pool that named only our own hosts is revoked, and nothing is shut out.
    c = core()
    c.on_load(load(free=1, idle=0), 0.0)
    granted(c, "a", ["cm.home.org", "10.0.0.1"], 1.0)
    (change,) = of(c.replace_policy(DENY_A, 10.0), SetFlockFrom)
    assert of(c.on_flock_from_applied(FlockFromApplied(change, None), 10.5), ShutOutSchedds) == []
    assert c.grants == {}


def test_a_shut_out_waits_for_a_reading_that_names_our_own_schedds() -> None:
    """Found by the hostile fuzz: revoked before poold's first reading, a pool that named our
    own schedd's host must not get it shut out once FLOCK_FROM is applied."""
    c = core()
    granted(c, "a", ["s1.a.org", "cm.home.org"], 0.0)
    (change,) = of(c.replace_policy(DENY_A, 10.0), SetFlockFrom)
    assert of(c.on_flock_from_applied(FlockFromApplied(change, None), 10.5), ShutOutSchedds) == []
    (shut,) = of(c.on_load(load(free=1, idle=0), 11.0), ShutOutSchedds)
    assert shut.hosts == ("s1.a.org",)


def test_a_pool_let_in_again_before_its_shut_out_is_not_shut_out() -> None:
    c = core()
    c.on_load(load(free=1, idle=0), 0.0)
    granted(c, "a", ["s1.a.org"], 0.0)
    (change,) = of(c.replace_policy(DENY_A, 10.0), SetFlockFrom)
    c.replace_policy(Policy.allow_all(), 10.2)
    (back,) = of(c.on_message(intent("a", ["s1.a.org"]), 10.3), SetFlockFrom)
    assert of(c.on_flock_from_applied(FlockFromApplied(change, None), 10.5), ShutOutSchedds) == []
    assert of(c.on_flock_from_applied(FlockFromApplied(back, None), 10.6), ShutOutSchedds) == []


# ----------------------------------------------------------------------------- the worker's plan

OWN = {
    "Name": "cm.ttb.sandbox",
    "MyAddress": "<10.1.0.10:9618?addrs=10.1.0.10-9618>",
    "Machine": "cm.ttb.sandbox",
}
THEIRS = {
    "Name": "cm.tta.sandbox",
    "MyAddress": "<10.2.0.10:9618?addrs=10.2.0.10-9618>",
    "Machine": "cm.tta.sandbox",
    "CollectorHost": "10.2.0.10:9618",
}
SUBMITTERS = [
    {"Name": "user@tta", "ScheddName": "cm.tta.sandbox", "Machine": "cm.tta.sandbox"},
    {"Name": "user@ttb", "ScheddName": "cm.ttb.sandbox", "Machine": "cm.ttb.sandbox"},
]
SLOTS = [
    {"Name": "slot1_1@x.ttb", "MyAddress": "<10.1.0.11:9618>", "ClientMachine": "cm.tta.sandbox"},
    {"Name": "slot1_2@x.ttb", "MyAddress": "<10.1.0.11:9618>", "RemoteScheddName": "cm.ttb.sandbox"},
    {"Name": "slot1_3@x.ttb", "MyAddress": "<10.1.0.11:9618>", "RemoteScheddName": "schedd@10.2.0.10"},
    {"Name": "slot1@x.ttb", "MyAddress": "<10.1.0.11:9618>"},  # unclaimed
]


def test_the_plan_takes_exactly_the_revoked_pools_ads_and_claims() -> None:
    plan = plan_shut_out(["cm.tta.sandbox", "10.2.0.10"], [OWN], [THEIRS], SUBMITTERS, SLOTS)
    assert plan.targets == ["cm.tta.sandbox", "10.2.0.10"] and plan.refused == []
    assert plan.schedd_ads == [{"Name": "cm.tta.sandbox", "MyAddress": THEIRS["MyAddress"]}]
    assert plan.submitter_ads == [{"Name": "user@tta", "ScheddName": "cm.tta.sandbox"}]
    assert [s["Name"] for s in plan.slots] == ["slot1_1@x.ttb", "slot1_3@x.ttb"]
    # A glob a policy granted covers the hosts under it.
    plan = plan_shut_out(["*.tta.sandbox"], [OWN], [THEIRS], SUBMITTERS, SLOTS)
    assert [s["Name"] for s in plan.slots] == ["slot1_1@x.ttb"]


def test_the_plan_never_touches_our_own_schedds() -> None:
    hosts = ["CM.ttb.sandbox", "10.1.0.10", "*.sandbox", "10.0.0.0/8"]
    plan = plan_shut_out(hosts, [OWN], [THEIRS], SUBMITTERS, SLOTS)
    assert plan.refused == ["cm.ttb.sandbox", "10.1.0.10"]
    assert all("ttb" not in a["Name"] for a in plan.submitter_ads)
    assert "slot1_2@x.ttb" not in [s["Name"] for s in plan.slots]
    # A foreign ad that also names one of our hosts (a schedd claiming our name) is left alone.
    impostor = THEIRS | {"Machine": "cm.ttb.sandbox"}
    assert plan_shut_out(["10.2.0.10"], [OWN], [impostor], [], []).schedd_ads == []
    # Nothing named: nothing done.
    assert plan_shut_out([], [OWN], [THEIRS], SUBMITTERS, SLOTS).slots == []


def test_host_extraction() -> None:
    assert name_host("schedd@cm.tta.sandbox") == "cm.tta.sandbox" and name_host("") is None
    assert schedd_hosts(THEIRS) == {"cm.tta.sandbox", "10.2.0.10"}
    assert claim_hosts(SLOTS[2]) == {"10.2.0.10"} and claim_hosts(SLOTS[3]) == set()


@settings(max_examples=200, deadline=None)
@given(
    hosts=st.lists(st.sampled_from(["cm.ttb.sandbox", "10.1.0.10", "*", "*.sandbox", "10.0.0.0/8", "x"])),
    client=st.sampled_from(["cm.ttb.sandbox", "10.1.0.10", "CM.TTB.SANDBOX"]),
)
def test_whatever_the_host_list_a_claim_of_our_own_schedd_is_never_vacated(
    hosts: list[str], client: str
) -> None:
    slot = {"Name": "slot1_1@x", "MyAddress": "<10.1.0.11:9618>", "ClientMachine": client}
    assert plan_shut_out(hosts, [OWN], [OWN | {"CollectorHost": "elsewhere"}], [], [slot]).slots == []
