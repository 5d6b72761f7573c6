"""faultD against real HTCondor: kill -9 the central manager with jobs running and queued."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.condor import CondorError, Gateway
from deploy.harness.fault_pool import FaultPool
from deploy.harness.fault_pool import fault_pool as harness_pool
from deploy.harness.sandbox import Sandbox, poll_until_async

pytestmark = pytest.mark.htcondor

JOBS = 16
SUBMIT_HOST = 1  # a submit/execute node: its schedd (the job queue) outlives the central manager


@pytest.fixture
def fault_pool(sandbox: Sandbox, tmp_path: Path) -> Iterator[FaultPool]:
    with harness_pool(sandbox, tmp_path, "fdp", hosts=4, slots=2) as fp:
        yield fp


def names(fp: FaultPool, host: int, *args: str, attr: str = "Name") -> list[str]:
    res = fp.pool.exec("condor_status", *args, "-af", attr, host=host, check=False)
    return [line for line in res.stdout.splitlines() if line.strip()] if res.returncode == 0 else []


@dataclass(frozen=True)
class Sample:
    start: float  # time.monotonic() when the query started
    end: float  # ... and when it returned
    negotiators: tuple[str, ...] | None  # the Machine of each negotiator ad; None: the query failed


class NegotiatorSampler:
    """`condor_status -negotiator` at one host, again and again from a thread for the whole test:
    what the pool's negotiator looked like at every moment, not only when the test looked."""

    def __init__(self, fp: FaultPool, host: int) -> None:
        self.fp, self.host = fp, host
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="negotiator-sampler", daemon=True)

    def __enter__(self) -> NegotiatorSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            res = self.fp.pool.exec(
                "condor_status", "-negotiator", "-af", "Machine", host=self.host, check=False
            )
            lines = tuple(sorted(line for line in res.stdout.splitlines() if line.strip()))
            self.samples.append(Sample(start, time.monotonic(), lines if res.returncode == 0 else None))
            self._stop.wait(0.2)

    def within(self, start: float, end: float) -> list[Sample]:
        """The samples taken wholly between two moments (time.monotonic())."""
        return [s for s in list(self.samples) if s.start >= start and s.end <= end]

    def wait_for_samples(self, since: float, count: int = 3) -> None:
        """Until `count` samples were taken wholly after `since`: a window is never left before
        it was looked at (on a fast machine the work in it may take less than one sample)."""
        self.fp.wait(
            f"{count} negotiator samples",
            lambda: len([s for s in list(self.samples) if s.start >= since]) >= count,
        )


def assert_one_negotiator(samples: list[Sample], machine: str, window: str) -> None:
    """Every sample of a stable window lists exactly one negotiator, `machine`'s; and the window
    has samples at all, so that the check is not vacuous."""
    assert len(samples) >= 3, f"{window}: only {len(samples)} samples"
    wrong = [s for s in samples if s.negotiators != (machine,)]
    assert not wrong, f"{window}: expected only {machine}'s negotiator, got {wrong}"


async def test_replacement_takes_over_and_the_original_takes_back(
    fault_pool: FaultPool, sandbox: Sandbox
) -> None:
    """Kill -9 the central manager with jobs running and queued: a replacement takes over, every
    job completes, and the original takes its role back when it returns.

    "One negotiator" is checked as HTCondor's own HA test (src/condor_tests/job_had_basic) checks
    it: sampled over the whole run from the submit host (as its users would see the pool), not
    awaited. In each of three stable windows, every sample lists exactly one negotiator, always
    the same one (and each window holds at least 3 samples, so that the check is not vacuous):
      1. the original's, from the first time it is seen until the kill;
      2. the replacement's, from the takeover's convergence (every live host follows the
         replacement, its collector lists its negotiator and all six execute slots) until the
         original is restarted;
      3. the original's, from the handback's convergence (the original manages, every host
         follows it, the replacement's collector and negotiator have exited, the original's
         negotiator is listed) until a job submitted then has run: the original's negotiator
         has cycled and matched meanwhile, and any other negotiator would have advertised.
    In the transitions a sample may fail (the collector the submit host asks is dead or not up
    yet) or list none; at the handback the submit host follows the original's first alive while
    the original still runs the collector and negotiator its restarted master started from its
    old role file, so it lists that negotiator, then none while faultd replaces them, then the
    new one (seen in the sandbox). A sample may never list two, at any moment of the run: a
    collector gets ads only from daemons whose COLLECTOR_HOST names it, and no faultD role change
    repoints a running negotiator. A reconfig that drops the negotiator from DAEMON_LIST sends it
    SIGTERM and no SIGHUP (the MasterLog: "Sent SIGTERM to NEGOTIATOR", then SIGHUP to the
    others only), and faultD waits until it has exited before the next role change
    (faultD/condor_role.py apply; docs/faultd.md, Return of the original). A replacement that
    kept its manager daemons while pointing at the original showed both negotiators in one
    sample (checked by breaking CondorRole.stop_manager on purpose).
    """
    fp = fault_pool
    fp.start_all()
    original, submit = fp.host(0)["name"], SUBMIT_HOST
    with NegotiatorSampler(fp, submit) as sampler:
        fp.wait(
            "the original's negotiator",
            lambda: names(fp, submit, "-negotiator", attr="Machine") == [original],
        )
        stable_original_from = time.monotonic()
        out = sandbox.shared_dir()
        schedd = fp.schedd(submit)
        async with Gateway(condor_config=fp.pool.client_config, collector=fp.collector(0), timeout=30) as gw:
            result = await gw.submit(
                {
                    "executable": "/bin/sh",
                    "arguments": "\"-c 'sleep 12; echo $(Process) > done.$(Process)'\"",
                    "initialdir": str(out),
                    "output": "out.$(Process)",
                    "error": "err.$(Process)",
                    "should_transfer_files": "NO",
                    # The central manager's own startd dies with it; keep jobs off it so that
                    # "running jobs are not disturbed" is what this test checks.
                    "requirements": f'Machine != "{original}"',
                },
                count=JOBS,
                schedd=schedd,
            )
            cluster = result.cluster
            await gw.reschedule(schedd=schedd)

            async def all_slots_running() -> set[int]:
                """The jobs running, once they fill the 3 execute hosts x 2 slots. (A query the
                busy schedd fails, "Failed to fetch ads", is asked again: the cluster was just
                submitted and is being matched, and the pool is still whole.)"""
                try:
                    jobs = await gw.query_jobs(
                        f"ClusterId == {cluster} && JobStatus == 2", ["ProcId"], schedd=schedd
                    )
                except CondorError:
                    return set()
                return {j["ProcId"] for j in jobs} if len(jobs) >= 6 else set()

            before = await poll_until_async("6 jobs running before the kill", all_slots_running)

            sampler.wait_for_samples(since=stable_original_from)
            stable_original_until = time.monotonic()
            fp.kill_host(0)  # every HTCondor daemon of the central manager, and its faultd
            replacement = fp.wait(
                "a replacement manager", lambda: [j for j in fp.managers() if j != 0], poll=0.2
            )[0]
            fp.wait("every live host follows the replacement", lambda: fp.follow_count(replacement) == 3)

            # The replacement runs the pool: one collector, its negotiator, every live startd.
            collectors = fp.wait("the new collector", lambda: names(fp, submit, "-collector"))
            assert len(collectors) == 1
            fp.wait(
                "the replacement's negotiator",
                lambda: names(fp, submit, "-negotiator", attr="Machine") == [fp.host(replacement)["name"]],
            )
            fp.wait("all 6 execute slots", lambda: len(names(fp, submit)) == 6)
            stable_replacement_from = time.monotonic()

            # Every job completes: the queued ones are matched by the new negotiator, nothing is
            # lost, and the ones running at the kill were not restarted.
            async def completed() -> list[dict]:
                done = await gw.job_history(
                    f"ClusterId == {cluster}",
                    ["ProcId", "ExitCode", "JobStatus", "NumJobStarts"],
                    schedd=schedd,
                )
                return done if len(done) == JOBS else []

            done = await poll_until_async(f"all {JOBS} jobs completed", completed, timeout=180, poll=1)
            assert sorted(j["ProcId"] for j in done) == list(range(JOBS))
            assert all(j["ExitCode"] == 0 and j["JobStatus"] == 4 for j in done)
            assert all(j["NumJobStarts"] == 1 for j in done if j["ProcId"] in before)
            assert sorted(p.name for p in out.glob("done.*")) == sorted(f"done.{i}" for i in range(JOBS))

        # The original comes back and takes its role back; the replacement stops its daemons.
        sampler.wait_for_samples(since=stable_replacement_from)
        stable_replacement_until = time.monotonic()
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
            lambda: names(fp, submit, "-negotiator", attr="Machine") == [original],
        )
        stable_original_again_from = time.monotonic()
        # Window 3 lasts until a job submitted now has run: the original's negotiator has
        # started, cycled and matched meanwhile, and any other negotiator would have advertised.
        async with Gateway(condor_config=fp.pool.client_config, collector=fp.collector(0), timeout=30) as gw:
            after = await gw.submit(
                {"executable": "/bin/true", "should_transfer_files": "NO", "initialdir": "/tmp"},
                schedd=schedd,
            )
            await gw.reschedule(schedd=schedd)

            async def ran() -> list[int]:
                jobs = await gw.job_history(f"ClusterId == {after.cluster}", ["ExitCode"], schedd=schedd)
                return [j["ExitCode"] for j in jobs]

            assert await poll_until_async("a job matched by the original", ran, timeout=180, poll=1) == [0]
        sampler.wait_for_samples(since=stable_original_again_from)

    status = fp.status(replacement)
    assert status["role"] == "listener" and status["epoch"] >= 3
    assert_one_negotiator(
        sampler.within(stable_original_from, stable_original_until), original, "before the kill"
    )
    assert_one_negotiator(
        sampler.within(stable_replacement_from, stable_replacement_until),
        fp.host(replacement)["name"],
        "after the takeover",
    )
    assert_one_negotiator(
        sampler.within(stable_original_again_from, time.monotonic()), original, "after the handback"
    )
    two = [s for s in sampler.samples if s.negotiators is not None and len(s.negotiators) > 1]
    assert not two, f"two negotiators listed at once: {two}"
