"""The federation-failover scenario (issue 16) on an HAFederation: what the real test asserts and
bench/federation-failover measures, written once.

Pool A ("submitter") flocks a burst of jobs to pool B ("provider"); B's manager is killed while A's
jobs run and wait there; then A's manager is killed while A still flocks; then both originals
return. Each phase returns what it saw (times from the kill, the jobs' records), and the callers
decide what to assert or aggregate. Jobs never run on a manager candidate that is killed (host 0
of either pool): a job on a machine that dies must run again, which is HTCondor's business, not
a failover's.
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

    async def submit(self, count: int, sleep: int) -> Burst:
        run = "$(Cluster).$(Process)"
        req = " && ".join(f'Machine != "{m}"' for m in self.excluded)
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

    async def running_in_b(self, burst: Burst) -> set[int]:
        jobs = await self.gw.query_jobs(
            f"ClusterId == {burst.cluster} && JobStatus == 2", ["ProcId", "RemoteHost"], schedd=self.schedd
        )
        return {int(j["ProcId"]) for j in jobs if host_of(j.get("RemoteHost")) in self.b_hosts}

    async def idle(self, burst: Burst) -> set[int]:
        jobs = await self.gw.query_jobs(
            f"ClusterId == {burst.cluster} && JobStatus == 1", ["ProcId"], schedd=self.schedd
        )
        return {int(j["ProcId"]) for j in jobs}

    async def flocking_with_idle(self, burst: Burst) -> tuple[set[int], set[int]]:
        """Until jobs of the burst run in B while others still wait: (running in B, idle)."""

        async def both() -> tuple[set[int], set[int]] | None:
            in_b, idle = await self.running_in_b(burst), await self.idle(burst)
            return (in_b, idle) if in_b and idle else None

        return await poll_until_async(
            f"jobs of cluster {burst.cluster} running in {self.b} while others wait", both, timeout=240
        )

    async def kill_b_manager(self, burst: Burst) -> dict[str, Any]:
        """kill -9 of B's manager (host 0) with A's jobs running and waiting there; times from the
        kill until A's FLOCK_TO names B's replacement and until one of A's idle jobs starts in B."""
        fed = self.fed
        in_b, idle = await self.flocking_with_idle(burst)
        old = fed.collector_of(self.b, 0)
        assert fed.flock_to(self.a) == old, f"A's FLOCK_TO is {fed.flock_to(self.a)!r}, not {old}"
        t_kill = fed.kill_manager(self.b, 0)
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
                started = (await self.running_in_b(burst)) & idle
                if started:
                    flocked_s = fed.since(t_kill)
            await trio.sleep(0.2)
        manager = fed.manager(self.b)
        return {
            "t_kill": t_kill,
            "repointed_s": repointed_s,
            "flocked_start_s": flocked_s,
            "flock_to_after": replacement,
            "b_manager_after": manager,
            "running_in_b_at_kill": sorted(in_b),
            "idle_at_kill": sorted(idle),
            "first_started_in_b": sorted(started),
        }

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
