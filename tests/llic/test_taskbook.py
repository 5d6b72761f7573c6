"""llic.taskbook: no task is lost, no result is recorded twice, failed tasks move to other agents."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llic.task import ERROR_KEEP, HOST_KEEP, TaskResult
from llic.taskbook import Assignment, TaskBook, TaskState


def ok_result(process: int, attempt: int, exit_code: int = 0, host: str = "node1") -> TaskResult:
    return TaskResult(process, attempt, "ok", exit_code=exit_code, run_time=1.5, host=host)


def bad_result(process: int, attempt: int) -> TaskResult:
    return TaskResult(process, attempt, "launch_failed", error="exec format error", host="node2")


def test_take_hands_out_front_first_with_run_numbers() -> None:
    book = TaskBook(range(5), max_attempts=3)
    assert book.take(0, 2) == [Assignment(0, 1), Assignment(1, 1)]
    assert book.take(1, 10) == [Assignment(2, 1), Assignment(3, 1), Assignment(4, 1)]
    assert book.take(2, 1) == []
    assert book.running_on(0) == {0, 1}
    assert book.counts().running == 5 and book.queued == 0 and not book.finished


def test_result_recorded_once() -> None:
    book = TaskBook(range(2), max_attempts=3)
    book.take(0, 2)
    assert book.complete(0, ok_result(0, 1), now=10.0)
    assert (
        book[0].state is TaskState.DONE and book[0].outcome == ok_result(0, 1) and book[0].completed == 10.0
    )
    assert book.check(0, 0, 1) == "duplicate result for process 0: already done"
    assert not book.complete(0, ok_result(0, 1, exit_code=7), now=11.0)
    assert book[0].outcome == ok_result(0, 1) and book[0].completed == 10.0  # never overwritten
    assert not book.complete(1, ok_result(1, 1), now=12.0)  # not the chef that holds it
    assert not book.complete(0, ok_result(1, 2), now=12.0)  # not the current run
    assert not book.complete(0, ok_result(99, 1), now=12.0)  # unknown
    assert book.ignored == 4
    assert book[0].recorded == 1 and book[1].recorded == 0  # the refused ones were not recorded
    assert book.complete(0, ok_result(1, 1), now=13.0) and book.finished
    assert [r.recorded for r in book.records()] == [1, 1]


def test_nonzero_exit_is_done_like_condor() -> None:
    book = TaskBook([7], max_attempts=1)
    book.take(0, 1)
    assert book.complete(0, ok_result(7, 1, exit_code=3), now=1.0)
    assert book[7].state is TaskState.DONE


def test_failed_run_is_retried_elsewhere_then_failed_for_good() -> None:
    book = TaskBook(range(3), max_attempts=2)
    assert book.take(0, 1) == [Assignment(0, 1)]
    assert book.complete(0, bad_result(0, 1), now=1.0)
    assert book[0].state is TaskState.QUEUED and book[0].failures == 1 and book.retries == 1
    # chef 0 failed it and chef 1 can take tasks: chef 0 gets the next one instead
    assert book.take(0, 1, others=[1]) == [Assignment(1, 1)]
    assert book.can_take(1, others=[0]) and book.take(1, 1, others=[0]) == [Assignment(0, 2)]
    assert book.complete(1, bad_result(0, 2), now=2.0)
    assert (
        book[0].state is TaskState.FAILED and book[0].completed == 2.0 and book[0].outcome == bad_result(0, 2)
    )
    assert book[0].recorded == 2  # both failures, though `outcome` keeps the last only
    assert book.counts().failed == 1


def test_failed_task_goes_back_to_same_chef_when_nobody_else_can() -> None:
    book = TaskBook([0], max_attempts=3)
    book.take(0, 1)
    book.complete(0, bad_result(0, 1), now=1.0)
    assert not book.can_take(0, others=[1])
    assert book.take(0, 1, others=[1]) == []
    assert book.take(0, 1, others=[]) == [Assignment(0, 2)]  # chef 0 is the only one left
    book.complete(0, bad_result(0, 2), now=2.0)
    book.take(1, 1)
    book.complete(1, bad_result(0, 3), now=3.0)
    assert book[0].state is TaskState.FAILED


def test_requeue_chef_puts_its_tasks_at_the_front() -> None:
    book = TaskBook(range(6), max_attempts=3)
    book.take(0, 2)
    book.take(1, 2)
    assert book.requeue_chef(1) == [2, 3]
    assert book.lost == 2 and book.running_on(1) == frozenset()
    assert [a.process for a in book.take(2, 3)] == [2, 3, 4]
    assert book[2].attempt == 2 and book[2].failures == 0  # a lost run is not a failure


def test_from_records_keeps_results_and_requeues_running() -> None:
    book = TaskBook(range(4), max_attempts=3)
    book.take(0, 3)
    book.complete(0, ok_result(1, 1), now=5.0)
    again = TaskBook.from_records(book.records(), 3, book.counters())
    assert again[1].state is TaskState.DONE and again[1].outcome == ok_result(1, 1)
    assert again.counts() == type(again.counts())(4, 3, 0, 1, 0)
    assert [a.process for a in again.take(0, 4)] == [0, 2, 3]
    assert again.lost == 2


def test_the_book_keeps_a_result_without_its_tails() -> None:
    """What the state file holds of a result: no stdout/stderr tails, no start time, the error
    cut to ERROR_KEEP characters and the host (1 MB from a lying agent, saved at every save of
    the state file) to HOST_KEEP; the rest as the agent said."""
    book = TaskBook([3], max_attempts=2)
    book.take(0, 1)
    host, error = "n" * 1_000_000, "e" * 10_000
    result = TaskResult(3, 1, "prepare_failed", started=5.0, finished=6.0, host=host, error=error)
    result.stdout_tail, result.stderr_tail = "x" * 4096, "y"
    assert book.complete(0, result, now=7.0)
    kept = book[3].outcome
    short = TaskResult(3, 1, "prepare_failed", finished=6.0, host="n" * HOST_KEEP, error="e" * ERROR_KEEP)
    assert kept == short
    assert not kept.ok and result.stdout_tail == "x" * 4096  # the agent's own result is left as it was


# ----------------------------------------------------------------------------- properties

CHEFS = 3
ops = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, CHEFS - 1), st.integers(1, 4)),
        st.tuples(st.just("ok"), st.integers(0, CHEFS - 1), st.integers(0, 20)),
        st.tuples(st.just("fail"), st.integers(0, CHEFS - 1), st.integers(0, 20)),
        st.tuples(st.just("dup"), st.integers(0, CHEFS - 1), st.integers(0, 20)),
        st.tuples(st.just("lose"), st.integers(0, CHEFS - 1), st.just(0)),
        st.tuples(st.just("reload"), st.just(0), st.just(0)),
    ),
    max_size=80,
)


def check_invariants(book: TaskBook, n: int) -> None:
    counts = book.counts()
    assert counts.total == n == counts.queued + counts.running + counts.done + counts.failed
    records = book.records()
    assert sorted(r.process for r in records) == list(range(n))
    held = {p for c in range(CHEFS) for p in book.running_on(c)}
    assert held == {r.process for r in records if r.state is TaskState.RUNNING}
    for r in records:
        assert (r.chef is not None) == (r.state is TaskState.RUNNING)
        assert (r.state is TaskState.DONE) == (r.outcome is not None and r.outcome.ok)
        assert r.failures <= book.max_attempts
        # every failure recorded, and one success when done: never a result twice
        assert r.recorded == r.failures + (r.state is TaskState.DONE)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 12), attempts=st.integers(1, 3), script=ops)
def test_any_interleaving_loses_nothing_and_records_once(n: int, attempts: int, script: list) -> None:
    book = TaskBook(range(n), attempts)
    recorded: dict[int, TaskResult] = {}  # the ledger of accepted successful results
    runs: dict[int, list[Assignment]] = {c: [] for c in range(CHEFS)}  # what each chef was handed
    for op, chef, k in script:
        if op == "take":
            runs[chef] += book.take(chef, k, others=[c for c in range(CHEFS) if c != chef])
        elif op in ("ok", "fail", "dup") and runs[chef]:
            a = runs[chef][k % len(runs[chef])]
            outcome = (
                bad_result(a.process, a.attempt)
                if op == "fail"
                else ok_result(a.process, a.attempt, exit_code=k, host=f"h{chef}")
            )
            before = book[a.process].state
            accepted = book.complete(chef, outcome, now=float(k))
            if accepted and outcome.ok:
                assert a.process not in recorded and before is TaskState.RUNNING
                recorded[a.process] = outcome
            if op == "dup":
                assert not book.complete(chef, outcome, now=float(k))
        elif op == "lose":
            book.requeue_chef(chef)
        elif op == "reload":
            book = TaskBook.from_records(book.records(), attempts, book.counters())
        check_invariants(book, n)
        for p, outcome in recorded.items():
            assert book[p].state is TaskState.DONE and book[p].outcome == outcome
    # drain (the agents holding tasks are lost first): every task ends done or failed for good
    for chef in range(CHEFS):
        book.requeue_chef(chef)
    for _ in range(n * (attempts + 1) + 1):
        for chef in range(CHEFS):
            for a in book.take(chef, 2):
                book.complete(
                    chef,
                    ok_result(a.process, a.attempt) if a.process % 3 else bad_result(a.process, a.attempt),
                    now=0.0,
                )
    assert book.finished
    assert all(r.state in (TaskState.DONE, TaskState.FAILED) for r in book.records())
    check_invariants(book, n)
