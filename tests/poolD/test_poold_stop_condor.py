"""poold on real HTCondor pools: a poold that stops (SIGTERM) takes back the FLOCK_TO it set.

Pool stopa has more jobs than slots, and they wait until the test ends, so its poold keeps
FLOCK_TO pointed at stopb for as long as it runs. Only its stop can take FLOCK_TO back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy.harness.federation import Federation
from deploy.harness.sandbox import Sandbox, SandboxPool

pytestmark = pytest.mark.htcondor

POOLS = ["stopa", "stopb"]


@pytest.fixture
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    fed = Federation(sandbox, sandbox.shared_dir(), POOLS, slots=1)
    try:
        yield fed
    finally:
        try:
            fed.stop_all()
        finally:
            for name in POOLS:
                sandbox.down(name)


def schedd_flock_to(pool: SandboxPool) -> str:
    """FLOCK_TO as condor_config_val prints it for the pool's schedd, 'Not defined: FLOCK_TO'
    included (a failing query raises)."""
    return pool.exec("condor_config_val", "-schedd", "FLOCK_TO").stdout.strip()


async def submit_waiting_jobs(pool: SandboxPool, release: Path, count: int) -> int:
    """Jobs that run until `release` exists: the pool stays overloaded until the test says."""
    async with pool.gateway() as gw:
        result = await gw.submit(
            {
                "executable": "/bin/sh",
                "arguments": f"\"-c 'while [ ! -e {release} ]; do sleep 1; done'\"",
                "should_transfer_files": "NO",
                "initialdir": "/tmp",
            },
            count=count,
        )
        return result.cluster


def test_stopped_poold_withdraws_its_flock_to(federation: Federation) -> None:
    stopa, stopb = federation.pools["stopa"], federation.pools["stopb"]
    configured = schedd_flock_to(stopa)  # before any poold ran: the schedd's own configuration
    release = federation.workdir / "release"
    try:
        federation.start_all()
        # 3 jobs for the 1 slot of each pool: one waits whether or not stopa flocks, so stopa's
        # poold never finds a reason to withdraw FLOCK_TO while it runs.
        trio.run(submit_waiting_jobs, stopa, release, 3)
        federation.wait("FLOCK_TO on stopa's schedd", lambda: federation.flock_to("stopa"))
        assert schedd_flock_to(stopa) == stopb.collector

        poold = federation.procs["stopa"]
        federation.stop("stopa")  # SIGTERM; GracefulStopFailed if it hangs (killed after 30 s)
        assert poold.returncode == 0  # a graceful stop, not a kill
        assert not federation.socket("stopa").exists()  # its status socket went with it
        # Its jobs still wait, so nothing but the stop can have taken FLOCK_TO back, and the stop
        # had done it by the time poold exited.
        assert schedd_flock_to(stopa) == configured
    finally:
        release.touch()
