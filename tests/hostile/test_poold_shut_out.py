"""Issue 15's shut-out against a real poold on a real sandbox pool (recommended security): an
insider that holds the ring key and a valid certificate for pool "physics" asks to flock in
naming OUR OWN schedd's hosts beside one of its own. Our policy then revokes "physics" (a
reloaded policy file): poold shuts the pool out, and our own schedd keeps its ad in our
collector and its claim on our startd (its job runs on, never restarted). The gateway call the
shut-out uses, given our own schedd's hosts and a glob covering them, as poold's identity, vacates
and invalidates nothing either: the worker checks our own schedds again."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from common.overlay.messages import Direct
from deploy.harness.federation import Federation
from deploy.harness.sandbox import Sandbox
from poolD.messages import FlockIntent
from tests.hostile.nemesis import Nemesis, sandbox_insider

pytestmark = [pytest.mark.htcondor, pytest.mark.hostile]

POOL = "hs"
ALLOW = 'default = "allow"\n'
DENY_PHYSICS = """
default = "allow"
[[rule]]
action = "deny"
pools = ["physics"]
comment = "physics is no longer trusted"
"""


@pytest.fixture(scope="module")
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    fed = Federation(sandbox, sandbox.shared_dir(), [POOL], slots=2)
    fed.policies[POOL] = ALLOW
    try:
        fed.start_all()
        yield fed
    finally:
        fed.stop_all()


@pytest.fixture(scope="module")
def insider(federation: Federation) -> Iterator[Nemesis]:
    """Speaks from this machine's end of the sandbox bridge, certified for pool "physics"."""
    with sandbox_insider(federation.keys, "physics-shut-out") as nemesis:
        yield nemesis


def our_schedd(fed: Federation) -> dict[str, Any]:
    """Our schedd's ad in our collector (Name, Machine, MyAddress)."""

    async def read() -> dict[str, Any]:
        async with fed.pools[POOL].gateway("poold") as gw:
            (schedd,) = await gw.list_schedds()
            return schedd.model_dump()

    return trio.run(read)


def our_job(fed: Federation, cluster: int) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async with fed.pools[POOL].gateway() as gw:
            attrs = ["JobStatus", "JobCurrentStartDate", "NumShadowStarts", "RemoteHost"]
            jobs = await gw.query_jobs(f"ClusterId == {cluster}", attrs)
            return dict(jobs[0]) if jobs else {}

    return trio.run(read)


def submit_sleeper(fed: Federation) -> int:
    async def go() -> int:
        async with fed.pools[POOL].gateway() as gw:
            job = {
                "executable": "/bin/sleep",
                "arguments": "900",
                "should_transfer_files": "NO",
                "initialdir": "/tmp",
            }
            return (await gw.submit(job)).cluster

    return trio.run(go)


def test_an_insider_naming_our_schedd_cannot_make_poold_shut_out_our_own_schedd(
    federation: Federation, insider: Nemesis
) -> None:
    fed = federation
    cluster = submit_sleeper(fed)
    running = fed.wait(
        "our own job runs on our startd",
        lambda: (j := our_job(fed, cluster)).get("JobStatus") == 2 and j.get("JobCurrentStartDate") and j,
        timeout=120,
    )
    schedd = our_schedd(fed)
    machine, address = schedd["machine"], schedd["address"]
    ip = address.strip("<>").split("?")[0].rpartition(":")[0]

    # The worker alone, as poold's identity: our own schedd's hosts and a glob covering them.
    async def shut_out_ourselves() -> Any:
        async with fed.pools[POOL].gateway("poold") as gw:
            return await gw.shut_out_schedds([machine, ip, "*"])

    done = trio.run(shut_out_ourselves)
    assert sorted(done.refused) == sorted({machine.lower(), ip}) and done.targets == ["*"], done
    assert done.invalidated == 0 and done.vacated == [] and done.errors == [], done

    # The insider asks to flock in naming our schedd's hosts and one of its own; granted.
    to = f"{fed.address(POOL)}:7640"
    hosts = [machine, ip, "s1.physics.example"]
    intent = insider.endorse(FlockIntent(pool="physics", origin=insider.me, schedd_hosts=hosts))
    insider.send(to, insider.datagram(Direct(sender=insider.me, payload=intent), to))
    fed.wait("physics granted", lambda: "physics" in fed.status(POOL)["flock_from_grants"], timeout=30)

    # Our policy revokes physics: poold shuts it out, and our own schedd is left alone.
    (fed.workdir / f"{POOL}-policy.toml").write_text(DENY_PHYSICS)
    fed.policies[POOL] = DENY_PHYSICS
    fed.procs[POOL].send_signal(signal.SIGHUP)

    def shut_out() -> list[str]:
        return [d for d in fed.status(POOL)["decisions"] if "physics shut out" in d]

    (decision,) = fed.wait("poold reports physics shut out", shut_out, timeout=60)
    assert "0 ad(s) invalidated, 0 claim(s) vacated" in decision, decision
    status = fed.status(POOL)
    assert status["flock_from_grants"] == {} and status["counters"]["pools_shut_out"] == 1
    job = our_job(fed, cluster)
    same_run = ("JobStatus", "JobCurrentStartDate", "NumShadowStarts", "RemoteHost")
    assert {k: job.get(k) for k in same_run} == {k: running.get(k) for k in same_run}  # never vacated
    assert our_schedd(fed)["address"] == address  # our schedd's ad is still in our collector
