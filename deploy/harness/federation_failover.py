"""The federation-failover scenario (issue 16) on an HAFederation: what the real test asserts and
bench/federation-failover measures, written once.

Pool A ("submitter") flocks jobs to pool B ("provider"); B's manager is killed while A's jobs run
there and A still needs B; A's jobs submitted right after the kill must start in B under B's
replacement; B's original returns and takes its role back, and A's next jobs run in B again.
Each phase returns what it saw (times from the kill, the jobs' records), and the callers decide
what to assert or aggregate. Jobs never run on a manager candidate that is killed (host 0 of
either pool): a job on a machine that dies must run again, which is HTCondor's business, not a
failover's.

What `flocked_start_s` times (`kill_b_manager`): from the kill to the first start in B of a job
that needs B's new manager. At the kill, A's execute slots are full and one of A's jobs waits
for them (A stays needy, so its FLOCK_TO stays), two of A's jobs run in B (they keep running:
the kill takes no execute machine) and B has free slots no schedd holds a claim on. Right
after the kill A submits jobs that may run only in B: they can start only once B's replacement
collector and negotiator run and A's schedd (re-pointed, with a token the new collector accepts)
reaches them; the jobs running in B outlast that, so no claim A's schedd already holds on B's
slots can start them (claim reuse would time the schedd, not the failover). An earlier version
killed B's manager with every slot of B running A's 20 s jobs and timed the first idle job to
start in B: that measured the jobs' remaining run time as much as the failover
(docs/results.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from common.condor import DaemonRef, Gateway
from deploy.harness.federation_ha import HAFederation
from deploy.harness.sandbox import poll_until_async

HISTORY_ATTRS = ["ProcId", "ExitCode", "JobStatus", "NumJobStarts", "LastRemoteHost"]


def host_of(slot: Any) -> str:
    """The machine of a slot name (`slot1@fb1.sandbox` -> `fb1.sandbox`)."""
    return str(slot or "").rpartition("@")[2]


@dataclass
class Burst:
    """One cluster of jobs submitted at A's submit host: each job appends its id to its own file."""

    cluster: int
    count: int
    outdir: Path

    def files(self) -> dict[int, list[str]]:
        """The lines each job wrote (one per run), by ProcId."""
        out: dict[int, list[str]] = {}
        for p in self.outdir.glob(f"done.{self.cluster}.*"):
            out[int(p.name.rsplit(".", 1)[1])] = p.read_text().split()
        return out


@dataclass
class Outcome:
    """What became of a burst: per job its history record and the runs its file shows."""

    total: int
    records: list[dict[str, Any]]
    runs: dict[int, list[str]]
    lost: list[int] = field(default_factory=list)
    twice: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


class Scenario:
    def __init__(self, fed: HAFederation, gw: Gateway, a: str, b: str, outdir: Path) -> None:
        self.fed, self.gw, self.a, self.b, self.outdir = fed, gw, a, b, outdir
        self.schedd: DaemonRef = fed.fault[a].schedd(fed.submit_host)
        self.b_hosts = {str(h["name"]) for h in fed.pools[b].hosts}
        self.excluded = [str(fed.fault[a].host(0)["name"]), str(fed.fault[b].host(0)["name"])]
        # execute machines that are never killed (not host 0), and their slots
        self.a_workers = [str(fed.fault[a].host(j)["name"]) for j in range(1, fed.nhosts)]
        self.b_workers = [str(fed.fault[b].host(j)["name"]) for j in range(1, fed.nhosts)]
        self.a_slots = len(self.a_workers) * fed.fault[a].slots
        self.b_slots = len(self.b_workers) * fed.fault[b].slots

    async def submit(self, count: int, sleep: int, only: list[str] | None = None) -> Burst:
        """`count` jobs of `sleep` s at A's submit host; `only`: they may run on these machines alone."""
        run = "$(Cluster).$(Process)"
        req = " && ".join(f'Machine != "{m}"' for m in self.excluded)
        if only:
            req += " && (" + " || ".join(f'Machine == "{m}"' for m in only) + ")"
        result = await self.gw.submit(
            {
                "executable": "/bin/sh",
                "arguments": f"\"-c 'sleep {sleep}; echo {run} >> done.{run}'\"",
                "initialdir": str(self.outdir),
                "output": "out.$(Cluster).$(Process)",
                "error": "err.$(Cluster).$(Process)",
                "should_transfer_files": "NO",
                "requirements": req,
            },
            count=count,
            schedd=self.schedd,
        )
        await self.gw.reschedule(schedd=self.schedd)
        return Burst(result.cluster, count, self.outdir)

    async def idle(self, burst: Burst) -> set[int]:
        jobs = await self.gw.query_jobs(
            f"ClusterId == {burst.cluster} && JobStatus == 1", ["ProcId"], schedd=self.schedd
        )
        return {int(j["ProcId"]) for j in jobs}

    async def running(self, burst: Burst, hosts: set[str]) -> set[int]:
        """The jobs of the burst running on these machines."""
        jobs = await self.gw.query_jobs(
            f"ClusterId == {burst.cluster} && JobStatus == 2", ["ProcId", "RemoteHost"], schedd=self.schedd
        )
        return {int(j["ProcId"]) for j in jobs if host_of(j.get("RemoteHost")) in hosts}

    async def flocking(self, sleep: int = 80, in_b: int = 2) -> list[Burst]:
        """A flocks to B, and `in_b` of its jobs run there, leaving B free slots: A's slots full
        (`hold`, A's machines only, `sleep` s) and one short job more waiting for them
        (`waiting`), and `in_b` jobs that may run only in B (`sleep` s). Until those run in B
        while A's job waits: A's poold keeps FLOCK_TO while A has an idle job (it withdraws it
        once A has none and a free slot, and A's manager host has slots no job here may use).
        The bursts: hold, waiting, in B."""
        assert in_b < self.b_slots, "B must keep free slots"
        hold = await self.submit(self.a_slots, sleep=sleep, only=self.a_workers)
        waiting = await self.submit(1, sleep=5, only=self.a_workers)
        first = await self.submit(in_b, sleep=sleep, only=self.b_workers)

        async def ready() -> bool:
            running_in_b = await self.running(first, self.b_hosts)
            idle = await self.idle(hold) | await self.idle(waiting)
            return len(running_in_b) == in_b and bool(idle)

        await poll_until_async(
            f"{in_b} jobs of cluster {first.cluster} running in {self.b} while a job of A waits",
            ready,
            timeout=240,
        )
        return [hold, waiting, first]

    async def kill_b_manager(self, after: int = 4, after_sleep: int = 5) -> dict[str, Any]:
        """A flocks to B (`flocking`); kill -9 of B's manager (host 0), then at once `after` jobs
        that may run only in B (`after_sleep` s). Times from the kill until A's FLOCK_TO names
        B's replacement and until the first of those jobs starts in B (the module docstring
        says why that times the failover). `bursts`: every burst submitted, to check with
        `finished`."""
        fed = self.fed
        bursts = await self.flocking()
        first = bursts[-1]
        old = fed.collector_of(self.b, 0)
        assert fed.flock_to(self.a) == old, f"A's FLOCK_TO is {fed.flock_to(self.a)!r}, not {old}"
        in_b = await self.running(first, self.b_hosts)
        t_kill = fed.kill_manager(self.b, 0)
        burst = await self.submit(after, sleep=after_sleep, only=self.b_workers)
        submitted_s = fed.since(t_kill)
        repointed_s = flocked_s = None
        replacement = None
        started: set[int] = set()
        while repointed_s is None or flocked_s is None:
            if time.time() - t_kill > 240:
                raise TimeoutError(
                    f"after B's failover: repointed {repointed_s}, flocked start {flocked_s} "
                    f"(FLOCK_TO {fed.flock_to(self.a)!r})"
                )
            if repointed_s is None:
                value = await trio.to_thread.run_sync(fed.flock_to, self.a)
                if value and value != old:
                    repointed_s = fed.since(t_kill)
                    replacement = value
            if flocked_s is None:
                started = await self.running(burst, self.b_hosts)
                if started:
                    flocked_s = fed.since(t_kill)
            await trio.sleep(0.2)
        manager = fed.manager(self.b)
        return {
            "t_kill": t_kill,
            "repointed_s": repointed_s,
            "flocked_start_s": flocked_s,
            "submitted_after_kill_s": submitted_s,
            "flock_to_after": replacement,
            "b_manager_after": manager,
            "running_in_b_at_kill": sorted(in_b),
            "b_free_slots_at_kill": self.b_slots - len(in_b),
            "first_started_in_b": sorted(started),
            "bursts": [*bursts, burst],
        }

    async def runs_in_b(self, jobs: int = 2, sleep: int = 5) -> list[Outcome]:
        """A needs B again (its slots full and a job waiting) and `jobs` jobs that may run only
        in B: until every job finished; the outcomes (A's, then the jobs for B)."""
        hold = await self.submit(self.a_slots, sleep=20, only=self.a_workers)
        waiting = await self.submit(1, sleep=5, only=self.a_workers)
        for_b = await self.submit(jobs, sleep=sleep, only=self.b_workers)
        return [await self.finished(b) for b in (hold, waiting, for_b)]

    async def finished(self, burst: Burst, timeout: float = 600) -> Outcome:
        """Until every job of the burst is in the schedd's history; what became of each."""

        async def done() -> list[dict[str, Any]] | None:
            queued = await self.gw.query_jobs(f"ClusterId == {burst.cluster}", ["ProcId"], schedd=self.schedd)
            if queued:
                return None
            return await self.gw.job_history(
                f"ClusterId == {burst.cluster}", HISTORY_ATTRS, schedd=self.schedd
            )

        records = await poll_until_async(
            f"all {burst.count} jobs of cluster {burst.cluster} left the queue", done, timeout=timeout, poll=1
        )
        runs = burst.files()
        out = Outcome(burst.count, records, runs)
        ok = {int(r["ProcId"]) for r in records if r.get("ExitCode") == 0 and r.get("JobStatus") == 4}
        out.lost = sorted(p for p in range(burst.count) if p not in ok or p not in runs)
        out.twice = sorted(
            {p for p, lines in runs.items() if len(lines) != 1}
            | {int(r["ProcId"]) for r in records if int(r.get("NumJobStarts", 0)) > 1}
        )
        out.failed = sorted(int(r["ProcId"]) for r in records if r.get("ExitCode") != 0)
        return out
