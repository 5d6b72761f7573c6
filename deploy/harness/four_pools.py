"""`bench/four-pools`: the flock paper's four-pool prototype (JPDC'06 §5.1, Tables 2-3) on real
HTCondor in the sandbox, next to the simulated `poold simulate four-pools`.

Pools A-D of 3 slots each get the paper's traces of 2, 2, 3 and 5 sequences (the same sequences
as the simulation: `make_sequences` for the seed, of which the first `--jobs-per-sequence` jobs of
each sequence are used); a job is `/bin/sleep <length x scale>` submitted at `<arrival x scale>`
seconds, so one simulated minute becomes `--scale` seconds. Configuration I: the pools alone;
II: the same kind of pools with poold on every central manager (`deploy.harness.federation.Federation`);
III: one pool of 12 slots that gets all 12 sequences. Wait = JobCurrentStartDate - QDate from
`condor_history` on the submitting schedd (flocked jobs included), divided by the scale.

What differs from the paper and from the simulation, and why:
- The three configurations run at the same time on separate pools (I: fpa-fpd, II: fpfa-fpfd,
  III: fp12), not one after another: with the prototype's load (without flocking D's queue
  drains for ~1.5 times the trace's length) three runs in a row leave room for only ~8 jobs per
  sequence in 20 minutes; at once, the defaults take ~15 minutes (measured: 14 min 58 s). The
  pools share the machine's 2 cores; sleeping jobs need none, the daemons little. `--serial`
  runs them one after another.
- Shorter traces (`--jobs-per-sequence`, default 15 instead of 100): queues never grow as long as
  in the paper, so I's waits at C and D are far shorter than the paper's; `ideal_fifo` in the
  output is the zero-overhead FIFO schedule of exactly these jobs for I and III, the reference
  to read the real waits against; `poold simulate four-pools --jobs-per-sequence 15` is the
  simulation of the same cut traces, II included.
- HTCondor's own delays are real and scaled with everything else: a 5-second negotiation cycle
  (the sandbox's NEGOTIATOR_INTERVAL) is 5/scale simulated minutes, and a job's run takes about
  a second longer than its sleep (shadow and starter); `overhead` in the output measures both.
  Each submit is followed by a reschedule, as condor_submit does.
- poold runs with Federation's fast intervals (announce and decide every 2 s, offers valid 15 s,
  FLOCK_TO withdrawn after 10 s of no waiting jobs), not the paper's 1 minute = `scale` s.
- No wide-area latency: the sandbox hosts share one bridge and the kernel has no netem, so the
  PlanetLab latencies the simulation places the pools at are absent and the willing list's
  proximity order is among near-equal round-trip times.
- Local jobs get no preference over flocked-in ones: all jobs belong to one user, and a flocked
  schedd keeps reusing its claim on a remote slot for further jobs (CLAIM_WORKLIFE), so a remote
  pool's own jobs can wait behind D's; the simulation's pools always run local jobs first.
- Slots, not machines: each pool is one sandbox host with 3 static slots (12 for III).

Run as root from the repository root: `.venv/bin/python bench/four-pools --seed 1 --json OUT`.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import trio

from common.condor import DaemonKind, DaemonRef, Gateway
from common.logging import configure_logging
from deploy.harness.federation import Federation
from deploy.harness.sandbox import GracefulStopFailed, Sandbox, SandboxPool
from sim.flock_paper import (
    JOBS_PER_SEQUENCE,
    SITE_MACHINES,
    SITE_SEQUENCES,
    SITES,
    make_sequences,
    render_four_pools,
)

DEFAULT_SCALE = 3.0
DEFAULT_JOBS = 15
CONFIGS = ("I", "II", "III")
POOL_NAMES = {
    "I": {s: f"fp{s.lower()}" for s in SITES},
    "II": {s: f"fpf{s.lower()}" for s in SITES},
    "III": {"all": "fp12"},
}
HISTORY_ATTRS = [
    "FpConfig", "FpSite", "FpSeq", "FpIdx", "QDate", "JobCurrentStartDate", "CompletionDate",
    "LastRemoteHost", "ExitCode", "NumJobStarts",
]  # fmt: skip


# ----------------------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class PlannedJob:
    """One job of the trace: simulated minutes from the sequences, seconds as submitted."""

    site: str
    sequence: int
    index: int
    arrival: int  # simulated minutes
    length: int  # simulated minutes
    submit_at: float  # seconds after the common start
    sleep: float  # seconds


def plan_jobs(seed: int, jobs_per_sequence: int, scale: float) -> list[PlannedJob]:
    """The simulation's 12 sequences for `seed`, cut to their first `jobs_per_sequence` jobs, with
    sequences 0-1 at A, 2-3 at B, 4-6 at C, 7-11 at D; sorted by submit time (ties: sequence)."""
    if not 1 <= jobs_per_sequence <= JOBS_PER_SEQUENCE:
        raise ValueError(f"--jobs-per-sequence must be 1..{JOBS_PER_SEQUENCE}, got {jobs_per_sequence}")
    if not scale > 0:
        raise ValueError(f"--scale must be > 0 seconds per simulated minute, got {scale}")
    if seed < 0:
        raise ValueError(f"--seed must be >= 0, got {seed}")
    arrival, length = make_sequences(np.random.default_rng(seed), sum(SITE_SEQUENCES))
    site_of = [site for site, n in zip(SITES, SITE_SEQUENCES, strict=True) for _ in range(n)]
    jobs = [
        PlannedJob(
            site=site_of[q],
            sequence=q,
            index=i,
            arrival=int(arrival[q, i]),
            length=int(length[q, i]),
            submit_at=float(arrival[q, i]) * scale,
            sleep=float(length[q, i]) * scale,
        )
        for q in range(len(site_of))
        for i in range(jobs_per_sequence)
    ]
    return sorted(jobs, key=lambda j: (j.arrival, j.sequence, j.index))


def submit_points(config: str, jobs: Sequence[PlannedJob]) -> dict[str, list[PlannedJob]]:
    """Who submits what: in I and II each site's schedd its own trace, in III one schedd all."""
    if config == "III":
        return {"all": list(jobs)}
    if config not in ("I", "II"):
        raise ValueError(f"unknown configuration {config!r}; expected one of {', '.join(CONFIGS)}")
    return {site: [j for j in jobs if j.site == site] for site in SITES}


def fifo_starts(arrival: Sequence[int], length: Sequence[int], slots: int) -> list[int]:
    """Start times of one FIFO pool with no overhead (jobs in the given order): each job starts at
    max(its arrival, the earliest time a slot frees). What `poold simulate` does without poolD."""
    free = [0] * slots
    starts = []
    for a, n in zip(arrival, length, strict=True):
        begin = max(a, heapq.heappop(free))
        starts.append(begin)
        heapq.heappush(free, begin + n)
    return starts


def wait_stats(waits: Sequence[float]) -> dict[str, float]:
    """The tables' cells (render_four_pools's keys), two decimals: real waits are fractions."""
    if not waits:
        raise ValueError("no waits to summarize")
    return {
        "jobs": len(waits),
        "mean": round(statistics.fmean(waits), 2),
        "min": round(min(waits), 2),
        "max": round(max(waits), 2),
        "stdev": round(statistics.stdev(waits), 2) if len(waits) > 1 else 0.0,
    }


def ideal_fifo(jobs: Sequence[PlannedJob]) -> dict[str, dict[str, dict[str, float]]]:
    """I and III as zero-overhead FIFO pools on exactly these jobs (minutes)."""
    out: dict[str, dict[str, dict[str, float]]] = {"I": {}, "III": {}}
    every: list[float] = []
    for site in SITES:
        mine = [j for j in jobs if j.site == site]
        starts = fifo_starts([j.arrival for j in mine], [j.length for j in mine], SITE_MACHINES)
        waits = [float(s - j.arrival) for s, j in zip(starts, mine, strict=True)]
        out["I"][site] = wait_stats(waits)
        every += waits
    out["I"]["overall"] = wait_stats(every)
    starts = fifo_starts([j.arrival for j in jobs], [j.length for j in jobs], SITE_MACHINES * len(SITES))
    out["III"]["overall"] = wait_stats([float(s - j.arrival) for s, j in zip(starts, jobs, strict=True)])
    return out


@dataclass(frozen=True)
class JobResult:
    """One finished job as condor_history tells it, its wait in seconds and simulated minutes."""

    config: str
    site: str
    sequence: int
    index: int
    wait_s: int
    wait_min: float
    run_s: int
    ran_at: str  # the pool name of the slot it ran on
    exit_code: int | None
    starts: int


def job_result(record: Mapping[str, Any], scale: float) -> JobResult:
    """A history record of one of our jobs -> its wait (JobCurrentStartDate - QDate)."""
    missing = [a for a in ("FpConfig", "FpSite", "FpSeq", "FpIdx", "QDate", "JobCurrentStartDate")
               if a not in record]  # fmt: skip
    if missing:
        raise ValueError(f"history record {dict(record)!r} lacks {', '.join(missing)}")
    wait = int(record["JobCurrentStartDate"]) - int(record["QDate"])
    if wait < 0:
        raise ValueError(f"history record {dict(record)!r} started before it was queued")
    host = str(record.get("LastRemoteHost", "")).split("@")[-1]
    done = record.get("CompletionDate")
    return JobResult(
        config=str(record["FpConfig"]),
        site=str(record["FpSite"]),
        sequence=int(record["FpSeq"]),
        index=int(record["FpIdx"]),
        wait_s=wait,
        wait_min=round(wait / scale, 3),
        run_s=int(done) - int(record["JobCurrentStartDate"]) if done else -1,
        ran_at=host.split(".")[1] if host.count(".") >= 2 else "?",
        exit_code=record.get("ExitCode"),
        starts=int(record.get("NumJobStarts", 0)),
    )


def tables(results: Sequence[JobResult], unit: str) -> dict[str, dict[str, dict[str, float]]]:
    """Per configuration, per site and overall (III: overall only), in `unit` 'min' or 's'."""
    if unit not in ("min", "s"):
        raise ValueError(f"unit must be 'min' or 's', got {unit!r}")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for config in CONFIGS:
        mine = [r for r in results if r.config == config]
        if not mine:
            raise ValueError(f"no finished jobs of configuration {config}")
        value = [float(r.wait_min if unit == "min" else r.wait_s) for r in mine]
        table = {"overall": wait_stats(value)}
        if config != "III":
            for site in SITES:
                table[site] = wait_stats([v for v, r in zip(value, mine, strict=True) if r.site == site])
        out[config] = table
    return out


def ran_at_matrix(results: Sequence[JobResult]) -> dict[str, dict[str, int]]:
    """Configuration II: for each submitting site, how many of its jobs ran at each site."""
    site_of_pool = {pool: site for site, pool in POOL_NAMES["II"].items()}
    out: dict[str, dict[str, int]] = {s: dict.fromkeys(SITES, 0) for s in SITES}
    for r in results:
        if r.config == "II":
            where = site_of_pool.get(r.ran_at, r.ran_at)
            out[r.site][where] = out[r.site].get(where, 0) + 1
    return out


def render(result: Mapping[str, Any]) -> str:
    """Tables 2 and 3 in minutes and in seconds, shaped by `render_four_pools`, with the
    zero-overhead FIFO reference and where II's jobs ran."""
    head = {"seed": result["seed"], "sequences": dict(zip(SITES, SITE_SEQUENCES, strict=True))}
    minutes = render_four_pools(head | {c: result[c] for c in CONFIGS})
    seconds = render_four_pools(head | result["seconds"]).replace("(minutes)", "(seconds, as measured)")
    ideal = result["ideal_fifo"]
    ran = result["II_ran_at"]
    return "\n".join(
        [
            f"Real HTCondor, {result['jobs_per_sequence']} jobs per sequence, "
            f"1 simulated minute = {result['scale']:g} s",
            minutes,
            "",
            "Zero-overhead FIFO on the same jobs (minutes, mean/max): I "
            + ", ".join(
                f"{s} {ideal['I'][s]['mean']:.2f}/{ideal['I'][s]['max']:g}" for s in (*SITES, "overall")
            )
            + f"; III {ideal['III']['overall']['mean']:.2f}/{ideal['III']['overall']['max']:g}",
            "Configuration II, where each site's jobs ran (at A/B/C/D): "
            + ", ".join(f"{s} {'/'.join(str(ran[s].get(t, 0)) for t in SITES)}" for s in SITES),
            "",
            seconds,
        ]
    )


# ----------------------------------------------------------------------------- the real run


@dataclass
class Point:
    """One submitting schedd: its pool, and the jobs it submits."""

    config: str
    site: str
    pool: SandboxPool
    jobs: list[PlannedJob]
    submitted: int = 0
    done: int = 0
    max_late: float = 0.0


async def own_schedd(gw: Gateway) -> DaemonRef:
    """The pool's own schedd by address: flocking schedds of other pools advertise to the same
    collector, and a lookup without a name could pick one of them."""
    schedds = await gw.list_daemons(DaemonKind.SCHEDD)
    if len(schedds) != 1:
        raise RuntimeError(f"expected one schedd of the pool's own, found {schedds}")
    return schedds[0]


async def run_point(point: Point, tag: str, t0: float, scale: float) -> list[JobResult]:
    """Submit the point's jobs at their times, then wait until condor_history has them all."""
    async with point.pool.gateway() as gw:
        schedd = await own_schedd(gw)
        for job in point.jobs:
            await trio.sleep_until(t0 + job.submit_at)
            point.max_late = max(point.max_late, trio.current_time() - (t0 + job.submit_at))
            await gw.submit(
                {
                    "executable": "/bin/sleep",
                    "arguments": f"{job.sleep:g}",
                    "should_transfer_files": "NO",
                    "initialdir": "/tmp",
                    "+FpRun": f'"{tag}"',
                    "+FpConfig": f'"{point.config}"',
                    "+FpSite": f'"{job.site}"',
                    "+FpSeq": str(job.sequence),
                    "+FpIdx": str(job.index),
                },
                schedd=schedd,
            )
            await gw.reschedule(schedd=schedd)  # as condor_submit does
            point.submitted += 1
        while True:
            records = await gw.job_history(
                f'FpRun == "{tag}" && FpConfig == "{point.config}"', HISTORY_ATTRS, schedd=schedd
            )
            point.done = len(records)
            if point.done >= len(point.jobs):
                return [job_result(r, scale) for r in records]
            await trio.sleep(2)


async def run_configs(
    points: dict[str, list[Point]], tag: str, scale: float, serial: bool, timeout: float
) -> tuple[list[JobResult], dict[str, float]]:
    results: list[JobResult] = []
    spans: dict[str, float] = {}

    async def one_config(config: str) -> None:
        t0 = trio.current_time() + 2.0
        async with trio.open_nursery() as nursery:
            for p in points[config]:

                async def go(p: Point = p) -> None:
                    results.extend(await run_point(p, tag, t0, scale))

                nursery.start_soon(go)
        spans[config] = round(trio.current_time() - t0, 1)
        print(
            f"  {config}: every job done {spans[config]:.0f} s after the first could be submitted", flush=True
        )

    def count(ps: list[Point]) -> str:
        # A point reads the history only once it has submitted everything: no polling that
        # would delay its submits (one gateway per point, calls one at a time).
        total, submitted = sum(len(p.jobs) for p in ps), sum(p.submitted for p in ps)
        if submitted < total:
            return f"{submitted}/{total} submitted"
        return f"all submitted, {sum(p.done for p in ps)}/{total} finished"

    async def progress() -> None:
        while True:
            await trio.sleep(60)
            print("  progress  " + "  ".join(f"{c}: {count(ps)}" for c, ps in points.items()), flush=True)

    with trio.fail_after(timeout):
        async with trio.open_nursery() as outer:
            outer.start_soon(progress)
            if serial:
                for config in points:
                    await one_config(config)
            else:
                async with trio.open_nursery() as nursery:
                    for config in points:
                        nursery.start_soon(one_config, config)
            outer.cancel_scope.cancel()
    return results, spans


async def check_slots(pools: Sequence[tuple[SandboxPool, int]]) -> None:
    """Submit only once every pool's collector lists all its slots, every one unclaimed."""
    for pool, slots in pools:
        async with pool.gateway() as gw:
            with trio.fail_after(60):
                while True:
                    load = await gw.pool_load()
                    if load.total_slots == slots and load.free_slots == slots:
                        break
                    await trio.sleep(1)


def experiment(args: argparse.Namespace, jobs: list[PlannedJob], out: dict[str, Any]) -> None:
    """Bring up the pools, run the configurations, fill `out`; pools are taken down by the caller."""
    box: Sandbox = args.box
    wall0 = time.monotonic()
    print("starting pools fpa-fpd (I), fpfa-fpfd with poold (II), fp12 (III) ...", flush=True)
    pools_i = {s: box.up(POOL_NAMES["I"][s], slots=SITE_MACHINES) for s in SITES}
    fed = Federation(box, args.workdir, [POOL_NAMES["II"][s] for s in SITES], slots=SITE_MACHINES)
    args.federation = fed
    pool_iii = box.up(POOL_NAMES["III"]["all"], slots=SITE_MACHINES * len(SITES))
    fed.start_all()  # returns once every poold has joined the ring
    pools_ii = {s: fed.pools[POOL_NAMES["II"][s]] for s in SITES}
    trio.run(
        check_slots,
        [(p, SITE_MACHINES) for p in (*pools_i.values(), *pools_ii.values())]
        + [(pool_iii, SITE_MACHINES * len(SITES))],
    )
    by_config = {"I": pools_i, "II": pools_ii, "III": {"all": pool_iii}}
    points = {
        c: [Point(c, key, by_config[c][key], mine) for key, mine in submit_points(c, jobs).items()]
        for c in CONFIGS
    }
    setup = time.monotonic() - wall0
    span = max(j.submit_at for j in jobs)
    print(
        f"pools up and every poold joined after {setup:.0f} s; submitting {len(jobs)} jobs per "
        f"configuration over {span:.0f} s ({'one after another' if args.serial else 'concurrently'})",
        flush=True,
    )
    tag = f"fp-{os.getpid()}-{int(time.time())}"
    results, spans = trio.run(run_configs, points, tag, args.scale, args.serial, args.timeout)
    results.sort(key=lambda r: (CONFIGS.index(r.config), r.sequence, r.index))
    out.update(tables(results, "min"))
    out["seconds"] = tables(results, "s")
    out["ideal_fifo"] = ideal_fifo(jobs)
    out["II_ran_at"] = ran_at_matrix(results)
    sleep = {(j.sequence, j.index): j.sleep for j in jobs}
    runs = [r.run_s - sleep[r.sequence, r.index] for r in results if r.run_s >= 0]
    out["overhead"] = {
        "run_minus_sleep_s_mean": round(statistics.fmean(runs), 2),
        "run_minus_sleep_s_max": round(max(runs), 2),
        "submit_late_s_max": round(max(p.max_late for ps in points.values() for p in ps), 2),
        "restarted_jobs": sum(1 for r in results if r.starts > 1),
        "failed_jobs": sum(1 for r in results if r.exit_code != 0),
    }
    out["config_seconds"] = spans
    out["wall_seconds"] = {"setup": round(setup, 1), "total": round(time.monotonic() - wall0, 1)}
    out["load_average_at_end"] = round(os.getloadavg()[0], 2)
    out["jobs"] = [asdict(r) for r in results]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/four-pools",
        description="The flock paper's four-pool experiment (Tables 2-3) on real sandbox HTCondor.",
    )
    p.add_argument("--seed", type=int, default=1, help="the sequences' seed, as poold simulate four-pools")
    p.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                   help=f"seconds per simulated minute (default {DEFAULT_SCALE:g})")  # fmt: skip
    p.add_argument("--jobs-per-sequence", type=int, default=DEFAULT_JOBS,
                   help=f"first N jobs of each sequence (default {DEFAULT_JOBS}; paper: 100)")  # fmt: skip
    p.add_argument("--serial", action="store_true", help="run I, II, III one after another, not at once")
    p.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds of jobs")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the results here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        jobs = plan_jobs(args.seed, args.jobs_per_sequence, args.scale)
    except ValueError as exc:
        print(f"four-pools: {exc}", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print(f"four-pools: --timeout must be > 0, got {args.timeout}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("four-pools: run as root (the sandbox makes network namespaces)", file=sys.stderr)
        return 2
    configure_logging("four-pools", level="warning")
    # The session's mode (SANDBOX_SECURITY; recommended by default) for I, II and III alike, to be
    # compared; in recommended pools II's poolds negotiate the cross-pool tokens themselves.
    args.box = Sandbox()
    args.workdir = args.box.shared_dir()
    args.federation = None
    result: dict[str, Any] = {
        "experiment": "JPDC'06 §5.1 four-pool prototype on real sandbox HTCondor 23.9",
        "command": shlex.join(["bench/four-pools", *(sys.argv[1:] if argv is None else argv)]),
        "seed": args.seed,
        "scale": args.scale,
        "jobs_per_sequence": args.jobs_per_sequence,
        "sequences": dict(zip(SITES, SITE_SEQUENCES, strict=True)),
        "serial": args.serial,
        # The machine is shared: a busy one adds to HTCondor's delays, so say how busy it was.
        "load_average_at_start": round(os.getloadavg()[0], 2),
    }
    try:
        experiment(args, jobs, result)
    finally:
        if args.federation is not None:
            try:
                args.federation.stop_all()
            except GracefulStopFailed as exc:  # reported with the results, not instead of them
                result["stop_failed"] = str(exc)
                print(f"four-pools: {exc}", file=sys.stderr)
        for name in list(args.box.started):
            try:
                args.box.down(name)
            except Exception as exc:  # keep taking the others down
                print(f"four-pools: could not take {name} down: {exc}", file=sys.stderr)
        shutil.rmtree(args.workdir, ignore_errors=True)
        print("pools stopped", flush=True)
    if args.json:  # first: a closed stdout must not lose a 15-minute run
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print()
    print(render(result))
    print(f"\noverhead: {json.dumps(result['overhead'])}")
    return 1 if result["overhead"]["failed_jobs"] or "stop_failed" in result else 0
