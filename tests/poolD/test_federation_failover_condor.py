"""Federation HA against real HTCondor (issue 16): two pools of 3 hosts, faultd on every host, a
gated poold on every manager candidate, HTCondor's recommended security with the grants between
the pools negotiated by poold (deploy/harness/federation_ha.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from common.condor import Gateway
from deploy.harness.federation_failover import Scenario, host_of
from deploy.harness.federation_ha import HAFederation
from deploy.harness.sandbox import Sandbox, poll_until_async

pytestmark = pytest.mark.htcondor

A, B = "hfa", "hfb"


@pytest.fixture
def federation(sandbox: Sandbox, tmp_path: Path) -> Iterator[HAFederation]:
    fed = HAFederation(sandbox, tmp_path, [A, B], hosts=3, slots=2)
    try:
        yield fed
    finally:
        try:
            fed.stop_all()
        finally:
            for name in (A, B):
                sandbox.down(name)


def assert_all_ran_once(outcome, what: str) -> None:  # type: ignore[no-untyped-def]
    assert not outcome.lost, f"{what}: jobs lost {outcome.lost}"
    assert not outcome.twice, f"{what}: jobs run twice {outcome.twice}"
    assert not outcome.failed, f"{what}: jobs failed {outcome.failed}"
    assert sorted(int(r["ProcId"]) for r in outcome.records) == list(range(outcome.total))


async def test_flocking_survives_both_managers_failing_over(
    federation: HAFederation, sandbox: Sandbox
) -> None:
    """A flocks to B; kill -9 of B's manager (HTCondor daemons, faultd, poold) while A's jobs run
    there and A needs B: A's FLOCK_TO names B's replacement, A's jobs submitted after the kill
    start in B (on slots no claim of A's held: B's new negotiator matched them), every job
    finishes once. Then kill -9 of A's manager while A flocks: A's replacement's poold resumes
    from the replicated state with A's FLOCK_TO kept, and withdraws it once A's queue drained.
    A's manager is killed once every other candidate's faultd holds a poold state naming A's
    FLOCK_TO (the replicas lag poold by about 2 s; a kill before that was the fresh-clone
    failure), and a poold counts as active only once its core resumed (its status says
    "resuming" while it reads the state file faultd restored). The originals come back and take
    their roles (and their poolds' activity) back, and A's next jobs run in B again
    (bench/federation-failover once found they did not: A set FLOCK_TO with no token at B's
    collector). docs/results.md."""
    fed = federation
    fed.start_all()
    fa = fed.fault[A]
    gw_kwargs = {"condor_config": fed.pools[A].client_config, "timeout": 30, "tools": fed.pools[A].tools(1)}
    async with Gateway(collector=fa.collector(fed.submit_host), **gw_kwargs) as gw:
        sc = Scenario(fed, gw, A, B, sandbox.shared_dir())

        # -- B's manager dies while A flocks to it
        seen = await sc.kill_b_manager()
        replacement = seen["b_manager_after"]
        assert replacement in (1, 2)
        assert seen["flock_to_after"] == fed.collector_of(B, replacement)
        assert fed.active(B) == [replacement]
        outcomes = [await sc.finished(burst) for burst in seen["bursts"]]
        for outcome in outcomes:
            assert_all_ran_once(outcome, "B's failover")
        # The grants moved with B's role: A's schedd holds a token B's new collector accepts (its
        # schedd ad is there), and B's new negotiator started jobs of A that could run in B only.
        after = outcomes[-1]
        assert all(host_of(r["LastRemoteHost"]) in sc.b_hosts for r in after.records)
        print(
            f"B's failover: repointed {seen['repointed_s']} s, flocked start {seen['flocked_start_s']} s "
            f"after the kill ({seen['b_free_slots_at_kill']} free slots in B at the kill)"
        )

        # -- A's manager dies while A flocks (to B's replacement)
        bursts2 = await sc.flocking(sleep=30)
        # Jobs of A may start in B on claims left from the first burst before A's poold sets
        # FLOCK_TO again (the fresh-clone failure: the kill came before that change reached the
        # replicas, and A's replacement resumed from the state without it). An operator sees
        # both in the status: FLOCK_TO on the schedd, and the replicas holding poold's state.
        flock_to = fed.collector_of(B, replacement)

        async def flock_to_set() -> bool:
            return await trio.to_thread.run_sync(fed.flock_to, A) == flock_to

        await poll_until_async("A's FLOCK_TO names B's replacement", flock_to_set, timeout=120)
        t_set = time.time()
        await trio.to_thread.run_sync(fed.wait_replicated, A, 0, [flock_to])
        replicated_s = round(time.time() - t_set, 2)
        t_kill = fed.kill_manager(A, 0)
        a_new = await trio.to_thread.run_sync(
            lambda: fed.wait("A's replacement's poold active", lambda: fed.active(A), timeout=120)
        )
        assert len(a_new) == 1 and a_new[0] != 0
        status = fed.candidate_status(A, a_new[0])
        kept = status["flock_active"]
        assert kept == [flock_to], f"A's replacement's FLOCK_TO is {kept}, not {flock_to}"
        assert fed.flock_to(A) == flock_to
        print(
            f"A's failover: state with FLOCK_TO on every replica {replicated_s} s after the schedd had "
            f"it; replacement poold on host {a_new[0]} active {fed.since(t_kill)} s after the kill, "
            f"FLOCK_TO kept: {kept}"
        )
        for burst in bursts2:
            assert_all_ran_once(await sc.finished(burst), "A's failover")

        async def withdrawn() -> bool:
            return await trio.to_thread.run_sync(fed.flock_to, A) == ""

        await poll_until_async(
            "A's replacement withdraws FLOCK_TO once A's queue drained", withdrawn, timeout=120
        )
        print(f"A's failover: FLOCK_TO withdrawn by host {a_new[0]} {fed.since(t_kill)} s after the kill")
        assert fed.active(A) == a_new

        # -- the originals return and take their roles (and their poolds' activity) back
        for name in (B, A):
            fed.restart_host(name, 0)
        for name in (B, A):
            fp = fed.fault[name]
            await trio.to_thread.run_sync(
                lambda fp=fp, name=name: fp.wait(
                    f"{name}'s original manages again",
                    lambda: fp.managers() == [0] and fp.follow_count(0) == fed.nhosts,
                    timeout=120,
                )
            )
            await trio.to_thread.run_sync(
                lambda name=name: fed.wait(
                    f"{name}'s original poold active, and only it",
                    lambda: fed.active(name) == [0],
                    timeout=60,
                )
            )
        assert fed.flock_to(A) == ""

        # -- and A flocks to B again, both originals managing
        outcomes = await sc.runs_in_b()
        for outcome in outcomes:
            assert_all_ran_once(outcome, "after the handbacks")
        assert all(host_of(r["LastRemoteHost"]) in sc.b_hosts for r in outcomes[-1].records)
        assert fed.flock_to(A) in ("", fed.collector_of(B, 0))
