"""`poold simulate traces`: the job-exchange paper's experiment (Grimme et al., CCGrid 2008) on real
SWF traces, with EASY backfilling at every site and three exchange policies side by side:

* `none`: every site runs its own jobs only (the paper's Table 2 reference).
* `poold`: the real poolD code: one `OverlayNode` per site on `SimNetwork` (transit-stub latencies),
  `Discovery` announcing free nodes along routing-table rows, a `WillingList` and a
  `FlockingManager` per site. A site whose queue is longer than its free nodes sets FLOCK_TO to the
  nearest willing sites; its waiting jobs then run at a FLOCK_TO site (in order) that can start
  them now without delaying that site's own head reservation, as a flocked job would be matched
  there. Announcing every `announce_interval` and the Flocking Manager's rounds every
  `flocking_interval` are evaluated at the simulation's event times (nothing changes in between).
* `pull`: the paper's policy (§3.4.2): at a site's scheduling event, if its head job cannot start,
  it asks every other site (in a seeded order) for its waiting jobs that fit the site, and takes
  each one it could backfill now under EASY.

Metrics are the paper's §4: AWRT per submitting site (weights p_j * m_j), utilization U_k over
[C_min,k, C_max,k], change of squashed area dSA_k, the migration matrix M_n (row: submitting site,
column: executing site, fraction of the row's jobs), and the overall utilization U_o.
Every site's trace starts at time 0 (the paper aligned its traces the same way).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.overlay.messages import Peer
from common.overlay.node import Event, OverlayParams, Received
from common.wire import Message
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import CoreSettings, PoolCore
from poolD.messages import Announcement
from poolD.policy import Policy
from sim.network import SimNetwork
from sim.poold import SimulatedPoolDs
from sim.schedulers import EasySite, ParallelJobs
from sim.swf import SwfTrace, read_swf
from sim.topology import Placement, transit_stub

POLICIES = ("none", "poold", "pull")

# Overlay maintenance is slowed down: 11 months of virtual time with the daemon's 10 s keepalives
# would cost millions of timer events for no effect (no node fails here).
SIM_OVERLAY = OverlayParams(
    keepalive_interval=3600.0,
    leaf_timeout=4 * 3600.0,
    table_probe_interval=4 * 3600.0,
    row_maintenance_interval=4 * 3600.0,
    leaf_exchange_interval=4 * 3600.0,
    revive_interval=4 * 3600.0,
)
WARMUP = 600.0  # virtual seconds for the overlay to form before the traces start


@dataclass(frozen=True)
class TracesConfig:
    """The parameters of `poold simulate traces`: the traces, months kept, seed, poolD's settings."""

    traces: list[tuple[Path, int | None]]  # (file, slots or None: from the header)
    months: float | None = 11
    seed: int = 1
    announce_interval: int = 60
    valid_for: float = 180.0
    flocking_interval: int = 60
    ttl: int = 1
    max_pools: int = 5


def _jobs(traces: list[SwfTrace]) -> tuple[ParallelJobs, list[int]]:
    jobs = ParallelJobs()
    for k, tr in enumerate(traces):
        for submit, nodes, run, est in zip(tr.submit, tr.nodes, tr.runtime, tr.estimate, strict=True):
            jobs.add(submit, nodes, run, est, k)
    arrivals = sorted(range(len(jobs)), key=lambda j: (jobs.submit[j], jobs.origin[j], j))
    return jobs, arrivals


class _Pull:
    """The job-exchange paper's pull policy."""

    def __init__(self, sites: list[EasySite], seed: int) -> None:
        self.sites = sites
        self.known = {}
        for s in sites:
            others = [o for o in sites if o is not s]
            random.Random(f"pull-{seed}-{s.index}").shuffle(others)
            self.known[s.index] = others

    def step(self, t: int, active: set[int]) -> None:
        nodes = self.sites[0].jobs.nodes
        for k in sorted(active):
            site = self.sites[k]
            if not site.head_blocked or site.free == 0:
                continue
            for remote in self.known[k]:
                taken = False
                for job in list(remote.queue):
                    if site.free == 0:
                        break
                    if nodes[job] <= site.nodes and site.can_backfill(job, t):
                        remote.take(job)
                        site.start(job, t)
                        taken = True
                if taken:
                    remote.schedule(t)
                if site.free == 0:
                    break


class _Poold:
    """poolD, the daemon's `PoolCore` per site under `SimulatedPoolDs`, on the overlay simulator:
    offers and RTT probes travel through `SimNetwork`; authorization is answered within the
    round; each step hands every site's core its reading and fires its timer."""

    def __init__(self, sites: list[EasySite], config: TracesConfig) -> None:
        self.sites = sites
        seed = config.seed
        n = len(sites)
        placement = Placement(transit_stub(seed), n, seed)
        self.net = SimNetwork(placement.latency, seed=seed, params=SIM_OVERLAY, on_event=self._on_event)
        rng = random.Random(f"poold-ids-{seed}")
        for k in range(n):
            self.net.add_node(k, rng.getrandbits(128), bootstrap=None if k == 0 else 0, at=k * 1.0)
        collectors = [f"{s.name}.sim:9618" for s in sites]
        self.site_of = {c: k for k, c in enumerate(collectors)}
        discovery = DiscoverySection(
            interval=config.announce_interval, ttl=config.ttl, valid_for=config.valid_for
        )
        # Not modelled: the blacklist of sites whose offers do not deliver.
        flocking = FlockingSection(
            interval=config.flocking_interval,
            max_pools=config.max_pools,
            deliver_timeout=1e12,  # never
        )
        cores = []
        for k, s in enumerate(sites):
            settings = CoreSettings(
                pool=_pool_name(s.name), collector=collectors[k], discovery=discovery, flocking=flocking
            )
            node = self.net.nodes[k].core
            cores.append(PoolCore(settings, node, Policy.allow_all(), random.Random(f"willing-{seed}-{k}")))
        addrs = [SimNetwork.addr(k) for k in range(n)]
        self.poolds = SimulatedPoolDs(cores, addrs, collectors, self._send, self._measure)
        self.poolds.start(0.0)
        self.net.run_until(WARMUP)
        self.flocked = 0

    def _send(self, src: int, addr: str, msg: Message, now: float) -> None:
        self.net.send_direct(src, addr, msg)

    def _measure(self, src: int, peer: Peer, now: float) -> None:
        self.net.measure(src, peer)

    def _on_event(self, src: int, event: Event, now: float) -> None:
        if isinstance(event, Received) and isinstance(event.payload, Announcement):
            self.poolds.deliver(src, event.payload, now)

    def step(self, t: int, active: set[int]) -> None:
        del active  # readings and rounds are every site's, every step; the core keeps the pace
        now = WARMUP + t
        self.net.run_until(now)
        for k, site in enumerate(self.sites):
            self.poolds.read(k, site.load(), now)
            self.poolds.fire(k, now)
        self._flock(t)

    def _flock(self, t: int) -> None:
        """The schedds of sites with FLOCK_TO offer their waiting jobs to those sites, in order."""
        nodes = self.sites[0].jobs.nodes
        for k, site in enumerate(self.sites):
            active = self.poolds.targets[k]
            if not active or not site.queue:
                continue
            moved = False
            for q in active:
                target = self.sites[q]
                if target.free == 0:
                    continue
                for job in list(site.queue):
                    if nodes[job] <= target.free and target.can_backfill(job, t):
                        site.take(job)
                        target.start(job, t)
                        moved = True
                        self.flocked += 1
                        if target.free == 0:
                            break
            if moved:
                site.schedule(t)


def _pool_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name)[:128] or "site"


def simulate(traces: list[SwfTrace], policy: str, config: TracesConfig) -> ParallelJobs:
    """Run all sites under one policy; returns the job table with start times and executing sites."""
    jobs, arrivals = _jobs(traces)
    sites = [EasySite(k, tr.slots, jobs, _pool_name(tr.name)) for k, tr in enumerate(traces)]
    exchange: _Pull | _Poold | None = None
    if policy == "pull":
        exchange = _Pull(sites, config.seed)
    elif policy == "poold":
        exchange = _Poold(sites, config)
    elif policy != "none":
        raise ValueError(f"unknown policy {policy!r}")
    submit, origin = jobs.submit, jobs.origin
    i, n = 0, len(arrivals)
    while True:
        ends = [e for e in (s.next_end() for s in sites) if e is not None]
        if i < n:
            ends.append(submit[arrivals[i]])
        if not ends:
            break
        t = min(ends)
        active: set[int] = set()
        for s in sites:
            if s.release(t):
                active.add(s.index)
                s.schedule(t)
        while i < n and submit[arrivals[i]] == t:
            j = arrivals[i]
            sites[origin[j]].submit(j, t)
            active.add(origin[j])
            i += 1
        if exchange is not None:
            exchange.step(t, active)
    return jobs


def metrics(traces: list[SwfTrace], jobs: ParallelJobs) -> dict[str, Any]:
    """The paper's §4 objectives from a finished schedule."""
    origin = np.array(jobs.origin)
    ran = np.array(jobs.ran_on)
    start = np.array(jobs.start, dtype=np.int64)
    p = np.array(jobs.runtime, dtype=np.int64)
    m = np.array(jobs.nodes, dtype=np.int64)
    submit = np.array(jobs.submit, dtype=np.int64)
    if (ran < 0).any():
        raise RuntimeError(f"{int((ran < 0).sum())} jobs never started")
    area = (p * m).astype(np.float64)
    end = start + p
    n = len(traces)
    per_site = []
    cmin, cmax = [], []
    migration = []
    for k, tr in enumerate(traces):
        mine, here = origin == k, ran == k
        sa_own = float(area[mine].sum())
        sa_here = float(area[here].sum())
        awrt = float((area[mine] * (end[mine] - submit[mine])).sum() / sa_own) if sa_own else 0.0
        c0 = int(start[here].min()) if here.any() else 0
        c1 = int(end[here].max()) if here.any() else 0
        cmin.append(c0)
        cmax.append(c1)
        util = sa_here / (tr.slots * (c1 - c0)) if c1 > c0 else 0.0
        per_site.append(
            {
                "awrt_s": round(awrt, 2),
                "utilization": round(util, 4),
                "dsa": round(sa_here / sa_own, 4) if sa_own else 0.0,
                "cmax_s": c1,
            }
        )
        counts = np.bincount(ran[mine], minlength=n)
        migration.append([round(float(c) / max(int(mine.sum()), 1), 4) for c in counts])
    span = max(cmax) - min(cmin)
    total_slots = sum(tr.slots for tr in traces)
    overall = float(area.sum()) / (total_slots * span) if span > 0 else 0.0
    return {"sites": per_site, "migration": migration, "overall_utilization": round(overall, 4)}


def run(config: TracesConfig) -> dict[str, Any]:
    """Run every exchange policy on the traces; the result `poold simulate traces` prints as JSON."""
    traces = [read_swf(path, slots=slots, months=config.months) for path, slots in config.traces]
    results = {policy: metrics(traces, simulate(traces, policy, config)) for policy in POLICIES}
    sites = []
    for k, tr in enumerate(traces):
        sites.append(
            {
                "name": tr.name,
                "slots": tr.slots,
                "jobs": tr.jobs,
                "dropped": sum(c for reason, c in tr.dropped.items() if reason != "after_cutoff"),
                "dropped_by_reason": dict(sorted(tr.dropped.items())),
                "policies": {policy: results[policy]["sites"][k] for policy in POLICIES},
            }
        )
    return {
        "sites": sites,
        "migration": {policy: results[policy]["migration"] for policy in POLICIES},
        "overall_utilization": {policy: results[policy]["overall_utilization"] for policy in POLICIES},
        "months": config.months,
        "seed": config.seed,
    }


def parse_trace_arg(text: str) -> tuple[Path, int | None]:
    """FILE:SLOTS (or FILE alone: the size comes from the header's MaxProcs)."""
    path, sep, slots = text.rpartition(":")
    if sep and slots.isdigit() and int(slots) > 0:
        return Path(path), int(slots)
    return Path(text), None


def cli_main(trace_args: list[str], months: float, seed: int) -> int:
    """`poold simulate traces`: JSON on stdout; poolD's debug logging is kept off it."""
    import json
    import logging
    import sys

    import structlog

    from common.config import ConfigError
    from sim.swf import SwfError

    config = TracesConfig(traces=[parse_trace_arg(t) for t in trace_args], months=months or None, seed=seed)
    # Discovery logs every decision at debug level: millions of lines here. Warnings only, on
    # stderr, for this run; the previous configuration is restored (tests share the process).
    saved = structlog.get_config()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    try:
        result = run(config)
    except SwfError as e:
        raise ConfigError(str(e)) from None
    finally:
        structlog.configure(**saved)
    print(json.dumps(result, indent=2))
    return 0
