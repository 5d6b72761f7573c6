"""faultD against real HTCondor: kill -9 the central manager with jobs running and queued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from common.condor import Gateway
from common.sandbox import Sandbox
from faultD.testbed import FaultPool

pytestmark = pytest.mark.htcondor

JOBS = 16
SUBMIT_HOST = 1  # a submit/execute node: its schedd (the job queue) outlives the central manager


@pytest.fixture
def fault_pool(sandbox: Sandbox, tmp_path: Path) -> Iterator[FaultPool]:
    fp = FaultPool(sandbox, tmp_path, "fdp", hosts=4, slots=2)
    try:
        yield fp
    finally:
        fp.stop_all()
        sandbox.down("fdp")


def names(fp: FaultPool, host: int, *args: str, attr: str = "Name") -> list[str]:
    res = fp.pool.exec("condor_status", *args, "-af", attr, host=host, check=False)
    return [line for line in res.stdout.splitlines() if line.strip()] if res.returncode == 0 else []


async def test_replacement_takes_over_and_the_original_takes_back(
    fault_pool: FaultPool, sandbox: Sandbox
) -> None:
    fp = fault_pool
    fp.start_all()
    out = sandbox.shared_dir()
    schedd = fp.schedd(SUBMIT_HOST)
    async with Gateway(condor_config=fp.pool.client_config, collector=fp.collector(0), timeout=30) as gw:
        result = await gw.submit(
            {
                "executable": "/bin/sh",
                "arguments": "\"-c 'sleep 12; echo $(Process) > done.$(Process)'\"",
                "initialdir": str(out),
                "output": "out.$(Process)",
                "error": "err.$(Process)",
                "should_transfer_files": "NO",
                # The central manager's own startd dies with it; keep jobs off it so that "running
                # jobs are not disturbed" is what this test checks.
                "requirements": f'Machine != "{fp.host(0)["name"]}"',
            },
            count=JOBS,
            schedd=schedd,
        )
        cluster = result.cluster
        await gw.reschedule(schedd=schedd)

        async def running() -> int:
            jobs = await gw.query_jobs(f"ClusterId == {cluster} && JobStatus == 2", ["ProcId"], schedd=schedd)
            return len(jobs)

        deadline = trio.current_time() + 60
        while await running() < 6:  # 3 execute hosts x 2 slots
            assert trio.current_time() < deadline, "jobs did not start before the kill"
            await trio.sleep(0.5)
        before = {
            j["ProcId"]
            for j in await gw.query_jobs(
                f"ClusterId == {cluster} && JobStatus == 2", ["ProcId"], schedd=schedd
            )
        }

        fp.kill_host(0)  # every HTCondor daemon of the central manager, and its faultd
        replacement = fp.wait(
            "a replacement manager", lambda: [j for j in fp.managers() if j != 0], poll=0.2
        )[0]
        fp.wait("every live host follows the replacement", lambda: fp.follow_count(replacement) == 3)

        # The replacement runs the pool: one collector, one negotiator, every live startd reports.
        collectors = fp.wait("the new collector", lambda: names(fp, SUBMIT_HOST, "-collector"))
        assert len(collectors) == 1
        negotiators = fp.wait("the new negotiator", lambda: names(fp, SUBMIT_HOST, "-negotiator"))
        assert len(negotiators) == 1
        fp.wait("all 6 execute slots", lambda: len(names(fp, SUBMIT_HOST)) == 6)
        assert names(fp, SUBMIT_HOST, "-negotiator") == negotiators  # still exactly one

        # Every job completes: the queued ones are matched by the new negotiator, nothing is lost,
        # and the ones running at the kill were not restarted.
        deadline = trio.current_time() + 180
        while True:
            done = await gw.job_history(
                f"ClusterId == {cluster}", ["ProcId", "ExitCode", "JobStatus", "NumJobStarts"], schedd=schedd
            )
            if len(done) == JOBS:
                break
            assert trio.current_time() < deadline, f"only {len(done)} of {JOBS} jobs completed"
            await trio.sleep(1)
        assert sorted(j["ProcId"] for j in done) == list(range(JOBS))
        assert all(j["ExitCode"] == 0 and j["JobStatus"] == 4 for j in done)
        assert all(j["NumJobStarts"] == 1 for j in done if j["ProcId"] in before)
        assert sorted(p.name for p in out.glob("done.*")) == sorted(f"done.{i}" for i in range(JOBS))

    # The original comes back and takes its role back; the replacement stops its daemons.
    fp.restart_host(0)
    fp.wait(
        "the original manages again", lambda: fp.managers() == [0] and fp.follow_count(0) == 4, timeout=90
    )
    fp.wait(
        "the replacement stopped its collector and negotiator",
        lambda: not {"condor_collecto", "condor_negotiat"} & set(fp.condor_processes(replacement)),
    )
    fp.wait(
        "one negotiator, the original's",
        lambda: names(fp, SUBMIT_HOST, "-negotiator", attr="Machine") == [fp.host(0)["name"]],
    )
    status = fp.status(replacement)
    assert status["role"] == "listener" and status["epoch"] >= 3
