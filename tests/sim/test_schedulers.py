"""The pool models of `poold simulate`: EASY backfilling on hand-made traces with known schedules,
and the FIFO pool's local-first / flock-when-full behaviour."""

from __future__ import annotations

import random

from sim.schedulers import NOT_STARTED, EasySite, FifoJobs, FifoPool, ParallelJobs

# ----------------------------------------------------------------------------- EASY


def run_easy(nodes: int, trace: list[tuple[int, int, int, int]]) -> ParallelJobs:
    """Run (submit, nodes, runtime, estimate) jobs on one EASY site; returns the job table."""
    jobs = ParallelJobs()
    site = EasySite(0, nodes, jobs)
    for submit, n, runtime, estimate in trace:
        jobs.add(submit, n, runtime, estimate, 0)
    arrivals = sorted(range(len(jobs)), key=lambda j: (jobs.submit[j], j))
    i = 0
    while i < len(arrivals) or site.next_end() is not None:
        candidates = [t for t in (site.next_end(),) if t is not None]
        if i < len(arrivals):
            candidates.append(jobs.submit[arrivals[i]])
        t = min(candidates)
        site.release(t)
        site.schedule(t)
        while i < len(arrivals) and jobs.submit[arrivals[i]] == t:
            site.submit(arrivals[i], t)
            i += 1
    return jobs


def test_easy_backfills_a_job_that_ends_before_the_reservation() -> None:
    # A holds 3 of 4 nodes until 10; B needs all 4 and reserves t=10; C (1 node, est 5) fits before.
    jobs = run_easy(4, [(0, 3, 10, 10), (1, 4, 10, 10), (2, 1, 5, 5)])
    assert jobs.start == [0, 10, 2]


def test_easy_refuses_a_backfill_that_would_delay_the_reservation() -> None:
    # C would run until 22 on the node B needs at 10: it waits until B is done.
    jobs = run_easy(4, [(0, 3, 10, 10), (1, 4, 10, 10), (2, 1, 20, 20)])
    assert jobs.start == [0, 10, 20]


def test_easy_backfills_on_nodes_the_reservation_does_not_need() -> None:
    # B needs 2 of the 4 nodes free at 10: the 2 extra nodes take a long job C now; D finds none left
    # (C took the only free node) and waits for the reservation's leftovers.
    jobs = run_easy(4, [(0, 3, 10, 10), (1, 2, 10, 10), (2, 1, 100, 100), (3, 1, 5, 5)])
    assert jobs.start[:3] == [0, 10, 2]
    assert jobs.start[3] == 10  # at 10: 3 nodes free, B takes 2, D the last


def test_easy_extra_nodes_are_used_up() -> None:
    # 2 extra nodes at the reservation; two long 1-node jobs take them, a third long one must wait.
    trace = [(0, 2, 10, 10), (1, 4, 10, 10), (2, 1, 100, 100), (2, 1, 100, 100)]
    jobs = run_easy(4, trace)
    # B (4 nodes) at 10 cannot start while C and D hold 2 nodes past 10: they were not backfillable.
    # Free at t=2: 2 nodes; reservation: A ends at 10 -> avail 4, need 4, extra 0 -> C, D wait.
    assert jobs.start == [0, 10, 20, 20]
    jobs = run_easy(5, [(0, 3, 10, 10), (1, 3, 10, 10), (2, 1, 100, 100), (2, 1, 100, 100)])
    # 5 nodes: at 10 all 5 free, B needs 3: extra 2, so C and D both start at 2.
    assert jobs.start == [0, 10, 2, 2]


def test_easy_cuts_jobs_at_their_estimate() -> None:
    jobs = run_easy(4, [(0, 4, 50, 10), (1, 4, 5, 5)])
    assert jobs.runtime[0] == 10
    assert jobs.start == [0, 10]


def test_easy_reservation_uses_estimates_but_jobs_end_early() -> None:
    # A is estimated at 100 but ends at 5: B starts at 5, and C (est 50 > shadow 100? no: 2+50 < 100)
    # was backfilled at 2 on the free node.
    jobs = run_easy(4, [(0, 3, 5, 100), (1, 4, 10, 10), (2, 1, 50, 50)])
    assert jobs.start == [0, 52, 2]  # C holds a node until 52, B needs all 4


def test_easy_head_starts_in_order_and_queue_is_fifo_without_backfill() -> None:
    jobs = run_easy(2, [(0, 2, 10, 10), (1, 2, 10, 10), (2, 2, 10, 10)])
    assert jobs.start == [0, 10, 20]


def test_easy_can_backfill_and_foreign_start() -> None:
    jobs = ParallelJobs()
    site = EasySite(0, 4, jobs)
    a = jobs.add(0, 3, 10, 10, 0)
    b = jobs.add(0, 4, 10, 10, 0)
    site.submit(a, 0)
    site.submit(b, 0)
    assert site.head_blocked
    short = jobs.add(0, 1, 5, 5, 1)
    long = jobs.add(0, 1, 50, 50, 1)
    assert site.can_backfill(short, 0) and not site.can_backfill(long, 0)
    site.start(short, 0)
    assert jobs.ran_on[short] == 0 and site.free == 0
    assert jobs.start[long] == NOT_STARTED


def test_easy_matches_a_naive_rescan_on_random_traces() -> None:
    """The incremental arrival check gives the same schedule as rescanning the whole queue."""
    rng = random.Random(7)
    for _ in range(30):
        trace = []
        for _ in range(60):
            est = rng.randint(1, 40)
            trace.append((rng.randint(0, 200), rng.randint(1, 8), rng.randint(0, est + 10), est))
        got = run_easy(8, trace).start
        want = naive_easy(8, trace)
        assert got == want


def naive_easy(m: int, trace: list[tuple[int, int, int, int]]) -> list[int]:
    """A slow, obvious EASY: at every event time, repeatedly start the head or the first backfill."""
    n = len(trace)
    start = [NOT_STARTED] * n
    order = sorted(range(n), key=lambda j: (trace[j][0], j))
    queue: list[int] = []
    running: list[tuple[int, int, int]] = []  # (actual end, est end, job)
    i = 0
    while i < len(order) or running:
        t = min([end for end, _, _ in running] + ([trace[order[i]][0]] if i < len(order) else []))
        running = [r for r in running if r[0] > t]
        while i < len(order) and trace[order[i]][0] == t:
            queue.append(order[i])
            i += 1
        progress = True
        while progress and queue:
            progress = False
            free = m - sum(trace[j][1] for _, _, j in running)
            head = queue[0]
            if trace[head][1] <= free:
                queue.pop(0)
                start[head] = t
                running.append((t + min(trace[head][2], trace[head][3]), t + trace[head][3], head))
                progress = True
                continue
            # Shadow: first estimated end at which the head fits; extra: nodes free then beyond its need.
            free_at = {e: free + sum(trace[j][1] for _, ee, j in running if ee <= e) for _, e, _ in running}
            shadow = min(e for e, f in free_at.items() if f >= trace[head][1])
            extra = free_at[shadow] - trace[head][1]
            for j in queue[1:]:
                nj = trace[j][1]
                if nj <= free and (t + trace[j][3] <= shadow or nj <= extra):
                    queue.remove(j)
                    start[j] = t
                    running.append((t + min(trace[j][2], trace[j][3]), t + trace[j][3], j))
                    progress = True
                    break
    return start


# ----------------------------------------------------------------------------- FIFO


def test_fifo_runs_locally_first_in_order() -> None:
    jobs = FifoJobs()
    pool = FifoPool(0, 2, jobs)
    other = FifoPool(1, 5, jobs)
    for j in jobs.extend([0, 0, 0], [5, 5, 5], origin=0):
        pool.submit(j)
    assert pool.run_local(0) == 2
    assert jobs.ran_on[:2] == [0, 0] and jobs.start[:2] == [0, 0]
    assert pool.flock([other], 0) == 1  # full now: the third job goes to the flock list
    assert jobs.ran_on[2] == 1 and other.busy == 1


def test_fifo_does_not_flock_while_a_slot_is_free() -> None:
    jobs = FifoJobs()
    pool = FifoPool(0, 2, jobs)
    other = FifoPool(1, 5, jobs)
    pool.submit(jobs.add(0, 5, 0))
    assert pool.flock([other], 0) == 0
    assert pool.queue_length == 1 and other.busy == 0
    assert pool.run_local(0) == 1


def test_fifo_bounced_job_returns_to_the_queue_and_tries_the_next_pool() -> None:
    jobs = FifoJobs()
    pool = FifoPool(0, 1, jobs)
    full = FifoPool(1, 1, jobs)
    roomy = FifoPool(2, 1, jobs)
    full.submit(jobs.add(0, 10, 1))
    full.run_local(0)
    for j in jobs.extend([0, 0, 0], [5, 5, 5], origin=0):
        pool.submit(j)
    pool.run_local(0)
    assert pool.flock([full], 0) == 0  # refused: the job is still at the head of our queue
    assert list(pool.queue) == [2, 3]
    assert pool.flock([full, roomy], 0) == 1
    assert jobs.ran_on[2] == 2 and list(pool.queue) == [3]
    # Slots free up when jobs end; the queue then drains locally.
    assert pool.next_end() == 5
    assert pool.release(5) == 1 and pool.run_local(5) == 1
    assert jobs.start[3] == 5 and jobs.ran_on[3] == 0


def test_fifo_load_reports_what_poold_reads() -> None:
    jobs = FifoJobs()
    pool = FifoPool(0, 3, jobs, name="A")
    for j in jobs.extend([0] * 5, [4] * 5, origin=0):
        pool.submit(j)
    pool.run_local(0)
    load = pool.load()
    assert (load.total_slots, load.free_slots, load.idle_jobs, load.running_jobs) == (3, 0, 2, 3)
