"""Pool scheduler models for `poold simulate`: what a pool does with jobs, so that the real poolD
logic (Discovery, WillingList, FlockingManager) can be run at scale on the overlay simulator.

Two models, both pure, deterministic and event-driven (the caller owns the clock and calls them
at event times; they never look at a clock or draw random numbers):

* `FifoPool` (flock-of-condors seed §5.2): `slots` identical slots and one FIFO queue. Jobs run
  locally first; only when every local slot is busy does the pool send queued jobs to remote pools,
  through the flock list the Flocking Manager chose, in that list's order. A remote pool runs a
  flocked job if it has a free slot; otherwise the job stays in (returns to) the queue, at its place.
* `EasySite` (job-exchange seed §3.3): `nodes` identical nodes; job j needs `nodes[j]` of them at
  once. EASY backfilling: the queue head starts if it fits; otherwise it gets a reservation at the
  earliest time enough nodes are free by the running jobs' runtime *estimates* (the "shadow" time),
  and later jobs may start now if they fit in the free nodes and either end, by their estimate,
  before the shadow time, or use only the nodes the reservation leaves over ("extra" nodes). Jobs are
  cut at their estimate (the table stores runtime = min(actual, estimate)).

API (stable; other experiments import it):

    jobs = FifoJobs();  j = jobs.add(submit, length, origin)       # columnar job table, ids 0..n-1
    pool = FifoPool(index, slots, jobs)
    pool.release(now) -> int          # slots freed by jobs ending at or before `now`
    pool.submit(j)                    # append to the FIFO queue
    pool.run_local(now) -> int        # start queued jobs on free local slots, in order
    pool.accept(j, now) -> bool       # a remote pool offers j to us: run it iff a slot is free
    pool.flock(targets, now) -> int   # only if full: hand queue-head jobs to targets, in order
    pool.next_end() -> int | None     # earliest end of a running job: the caller's next event
    pool.free_slots, pool.busy, pool.queue_length, pool.load() -> PoolLoad

    jobs = ParallelJobs();  j = jobs.add(submit, nodes, runtime, estimate, origin)
    site = EasySite(index, nodes, jobs)
    site.release(now) -> int          # jobs ending at or before `now` free their nodes
    site.submit(j, now) -> int        # queue j and start whatever EASY allows now (count started)
    site.schedule(now) -> int         # a full EASY pass (call after release)
    site.can_backfill(j, now) -> bool # could a job (ours or foreign) start now without delaying
                                      # our head's reservation?
    site.start(j, now)                # start j now (it must not be queued here); used for foreign jobs
    site.take(j)                      # remove a waiting job (it migrates elsewhere)
    site.head_blocked -> bool         # queue non-empty and the head cannot start now
    site.next_end(), site.free, site.queue (read only), site.load() -> PoolLoad

After a run, `jobs.start[j]` is the start time and `jobs.ran_on[j]` the index of the pool/site
that ran job j (-1: never started); ends are start + length (FIFO) or start + runtime (EASY).

Speed (the 1000-pool experiment runs 12 million jobs): times are integers (time units or
seconds); jobs are not objects but indices into a few parallel Python lists (`FifoJobs`,
`ParallelJobs`), so a job costs a few list slots, not a dataclass; running jobs live in a heap of
plain `(end, job)` or end-time ints per pool; FIFO queues are deques. The EASY site keeps its
reservation between passes: until a running job ends (or a job starts), the jobs already skipped
stay unable to start, so a new arrival is checked on its own in O(1) instead of rescanning the queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable

from common.condor.types import PoolLoad, ScheddLoad

NOT_STARTED = -1


def _load(total: int, free: int, idle: int, running: int, name: str) -> PoolLoad:
    """A PoolLoad as the gateway would report it, for Discovery and the FlockingManager."""
    schedd = ScheddLoad(name=name, address=None, idle=idle, running=running, held=0)
    return PoolLoad(total_slots=total, free_slots=free, claimed_slots=total - free, schedds=[schedd])


# ----------------------------------------------------------------------------- FIFO pools


class FifoJobs:
    """Columnar table of serial jobs: job j is index j in every list."""

    __slots__ = ("length", "origin", "ran_on", "start", "submit")

    def __init__(self) -> None:
        self.submit: list[int] = []
        self.length: list[int] = []
        self.origin: list[int] = []
        self.start: list[int] = []
        self.ran_on: list[int] = []

    def add(self, submit: int, length: int, origin: int) -> int:
        """Add one job, not started yet; returns its id."""
        self.submit.append(submit)
        self.length.append(length)
        self.origin.append(origin)
        self.start.append(NOT_STARTED)
        self.ran_on.append(NOT_STARTED)
        return len(self.submit) - 1

    def extend(self, submits: Iterable[int], lengths: Iterable[int], origin: int) -> range:
        """Add many jobs of one origin at once (faster than `add` in a loop); returns their ids."""
        first = len(self.submit)
        self.submit.extend(submits)
        self.length.extend(lengths)
        n = len(self.submit) - first
        if len(self.length) != len(self.submit):
            raise ValueError("submits and lengths differ in length")
        self.origin.extend([origin] * n)
        self.start.extend([NOT_STARTED] * n)
        self.ran_on.extend([NOT_STARTED] * n)
        return range(first, first + n)

    def __len__(self) -> int:
        return len(self.submit)


class FifoPool:
    """A Condor pool with `slots` identical slots and one FIFO queue (seed §5.2)."""

    __slots__ = ("_ends", "index", "jobs", "name", "queue", "slots")

    def __init__(self, index: int, slots: int, jobs: FifoJobs, name: str | None = None) -> None:
        if slots < 0:
            raise ValueError(f"slots must be >= 0, got {slots}")
        self.index = index
        self.slots = slots
        self.jobs = jobs
        self.name = name or f"pool{index}"
        self.queue: deque[int] = deque()
        self._ends: list[int] = []  # heap of end times of the jobs running here (local or flocked in)

    @property
    def busy(self) -> int:
        """Slots running a job, ours or flocked in."""
        return len(self._ends)

    @property
    def free_slots(self) -> int:
        """Slots running no job."""
        return self.slots - len(self._ends)

    @property
    def queue_length(self) -> int:
        """Jobs waiting in our queue."""
        return len(self.queue)

    def next_end(self) -> int | None:
        """The earliest end of a running job (the caller's next event here), or None."""
        return self._ends[0] if self._ends else None

    def release(self, now: int) -> int:
        """Free the slots of jobs ending at or before `now`; returns how many."""
        ends, freed = self._ends, 0
        while ends and ends[0] <= now:
            heapq.heappop(ends)
            freed += 1
        return freed

    def submit(self, job: int) -> None:
        """Queue a job at the tail; run_local or flock starts it."""
        self.queue.append(job)

    def _run(self, job: int, now: int) -> None:
        jobs = self.jobs
        jobs.start[job] = now
        jobs.ran_on[job] = self.index
        heapq.heappush(self._ends, now + jobs.length[job])

    def run_local(self, now: int) -> int:
        """Start queued jobs on free local slots, in queue order; returns how many."""
        queue, started = self.queue, 0
        free = self.slots - len(self._ends)
        while queue and started < free:
            self._run(queue.popleft(), now)
            started += 1
        return started

    def accept(self, job: int, now: int) -> bool:
        """Run a flocked job if a slot is free (a remote schedd's claim succeeds), else refuse."""
        if len(self._ends) >= self.slots:
            return False
        self._run(job, now)
        return True

    def flock(self, targets: Iterable[FifoPool], now: int) -> int:
        """Send queue-head jobs to `targets` (the flock list, in order) while all our slots are busy.
        A target that refuses is full; the job stays at the head of our queue for the next one."""
        queue = self.queue
        if not queue or len(self._ends) < self.slots:
            return 0
        sent = 0
        for target in targets:
            while queue and target.accept(queue[0], now):
                queue.popleft()
                sent += 1
            if not queue:
                break
        return sent

    def load(self) -> PoolLoad:
        """The pool as the gateway would report it, for poolD's core."""
        return _load(self.slots, self.free_slots, len(self.queue), len(self._ends), self.name)


# ----------------------------------------------------------------------------- EASY sites


class ParallelJobs:
    """Columnar table of rigid parallel jobs; `runtime` is already cut at `estimate`."""

    __slots__ = ("estimate", "nodes", "origin", "ran_on", "runtime", "start", "submit")

    def __init__(self) -> None:
        self.submit: list[int] = []
        self.nodes: list[int] = []
        self.runtime: list[int] = []
        self.estimate: list[int] = []
        self.origin: list[int] = []
        self.start: list[int] = []
        self.ran_on: list[int] = []

    def add(self, submit: int, nodes: int, runtime: int, estimate: int, origin: int) -> int:
        """Add one job, its runtime cut at its estimate; returns its id."""
        if nodes < 1 or estimate < 0 or runtime < 0:
            raise ValueError(f"bad job: nodes {nodes}, runtime {runtime}, estimate {estimate}")
        self.submit.append(submit)
        self.nodes.append(nodes)
        self.runtime.append(min(runtime, estimate))  # jobs are cut at their estimate
        self.estimate.append(estimate)
        self.origin.append(origin)
        self.start.append(NOT_STARTED)
        self.ran_on.append(NOT_STARTED)
        return len(self.submit) - 1

    def __len__(self) -> int:
        return len(self.submit)


class EasySite:
    """An MPP site with `nodes` nodes scheduling one queue by EASY backfilling (job-exchange §3.3)."""

    def __init__(self, index: int, nodes: int, jobs: ParallelJobs, name: str | None = None) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.index = index
        self.nodes = nodes
        self.jobs = jobs
        self.name = name or f"site{index}"
        self.free = nodes
        self.queue: list[int] = []
        self._ends: list[tuple[int, int]] = []  # heap of (actual end, job)
        self._running: dict[int, int] = {}  # job -> estimated end (start + estimate)
        # The head's reservation, valid while `_clean`: (shadow time, extra nodes). None: no head
        # waiting (empty queue). `_clean` is false after a job ended: the next pass rescans.
        self._shadow = 0
        self._extra = 0
        self._clean = True

    # -------------------------------------------------------------- state

    @property
    def running(self) -> int:
        """Jobs running here, ours or foreign."""
        return len(self._running)

    @property
    def head_blocked(self) -> bool:
        """After a pass, a non-empty queue means its head could not start."""
        return bool(self.queue)

    def next_end(self) -> int | None:
        """The earliest actual end of a running job, or None."""
        return self._ends[0][0] if self._ends else None

    def load(self) -> PoolLoad:
        """The site as the gateway would report it (nodes as slots), for poolD's core."""
        return _load(self.nodes, self.free, len(self.queue), len(self._running), self.name)

    # -------------------------------------------------------------- events

    def release(self, now: int) -> int:
        """Free the nodes of jobs ending at or before `now`; returns how many ended."""
        ends, done = self._ends, 0
        nodes = self.jobs.nodes
        while ends and ends[0][0] <= now:
            _, job = heapq.heappop(ends)
            del self._running[job]
            self.free += nodes[job]
            done += 1
        if done:
            self._clean = False
        return done

    def start(self, job: int, now: int) -> None:
        """Start a job now (the caller checked it fits); keeps the reservation consistent."""
        self._start(job, now, charge=bool(self.queue))

    def _start(self, job: int, now: int, *, charge: bool) -> None:
        jobs = self.jobs
        n, est = jobs.nodes[job], jobs.estimate[job]
        if n > self.free:
            raise ValueError(f"job {job} needs {n} nodes, {self.free} free at {self.name}")
        self.free -= n
        if charge and now + est > self._shadow:
            self._extra -= n  # runs past the reservation: uses nodes the head does not need
        jobs.start[job] = now
        jobs.ran_on[job] = self.index
        self._running[job] = now + est
        heapq.heappush(self._ends, (now + jobs.runtime[job], job))

    def can_backfill(self, job: int, now: int) -> bool:
        """Whether `job` may start now under EASY without delaying the head's reservation.
        Only valid right after a pass (`schedule`/`submit`) at `now`."""
        jobs = self.jobs
        n = jobs.nodes[job]
        if n > self.free:
            return False
        if not self.queue:
            return True
        return now + jobs.estimate[job] <= self._shadow or n <= self._extra

    def take(self, job: int) -> None:
        """Remove a waiting job (it migrates); the reservation is recomputed at the next pass."""
        was_head = self.queue[0] == job
        self.queue.remove(job)
        if was_head:
            self._clean = False

    def submit(self, job: int, now: int) -> int:
        """Queue a job at the end and start whatever EASY allows now."""
        if not self._clean:
            self.queue.append(job)
            return self.schedule(now)
        if not self.queue:
            self.queue.append(job)
            return self._pass(now)
        # The last pass left every other queued job unable to start, and without an end in between
        # that still holds, so only the newcomer needs checking against the reservation.
        if self.can_backfill(job, now):
            self.start(job, now)
            return 1
        self.queue.append(job)
        return 0

    def schedule(self, now: int) -> int:
        """A full EASY pass, needed after jobs ended or the head left; cheap when nothing changed."""
        if self._clean:
            return 0
        return self._pass(now)

    def _pass(self, now: int) -> int:
        jobs = self.jobs
        nodes, estimate = jobs.nodes, jobs.estimate
        queue = self.queue
        started = 0
        k = 0
        while k < len(queue) and nodes[queue[k]] <= self.free:
            self._start(queue[k], now, charge=False)
            k += 1
        self._clean = True
        if k:
            started = k
            queue = queue[k:]
        self.queue = queue
        if not queue:
            return started
        # Reservation for the head: walk running jobs by estimated end until enough nodes are free.
        need = nodes[queue[0]]
        avail = self.free
        shadow = now
        for est_end, n in sorted((e, nodes[j]) for j, e in self._running.items()):
            if avail >= need and est_end > shadow:
                break  # every job ending at the shadow time counts towards the extra nodes
            avail += n
            shadow = est_end
        extra = avail - need
        self._shadow, self._extra = shadow, extra
        if self.free == 0 or len(queue) == 1:
            return started
        kept = [queue[0]]
        free = self.free
        for i in range(1, len(queue)):
            job = queue[i]
            n = nodes[job]
            if n <= free and (now + estimate[job] <= shadow or n <= self._extra):
                self._start(job, now, charge=True)
                started += 1
                free = self.free
                if free == 0:
                    kept.extend(queue[i + 1 :])
                    break
            else:
                kept.append(job)
        self.queue = kept
        return started
