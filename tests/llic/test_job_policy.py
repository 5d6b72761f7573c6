"""Issue 20, Deliver 2 without HTCondor daemons: the job policy evaluated as HTCondor evaluates
it (llic/job_policy.py, with HTCondor's ClassAd library), the task book's held and removed
tasks and their events, the master core's periodic policy and the user's requests, the job
event log read back by htcondor2.JobEventLog, output remaps, and the requests and views of
master_release / master_q."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import htcondor2
import pytest

from llic.cli import master_hold, master_release, master_rm
from llic.config import LlicConfig
from llic.eventlog import append_events, format_event, submit_event
from llic.events import (
    AgentConnected,
    AgentSubmitted,
    CancelTask,
    Output,
    ResultReceived,
    SaveState,
    SendTasks,
    UserRequest,
    WriteEvents,
)
from llic.files import parse_remaps, place_outputs
from llic.job_policy import task_policy
from llic.master_core import MasterCore, MasterStatus
from llic.master_q import render_table, summarize
from llic.state import MasterInfo, initial_state, load_state, restore, save_state, snapshot
from llic.submit import parse_submit_text
from llic.task import STATUS_LAUNCH_FAILED, Task, TaskResult
from llic.task_policy import HELD, IDLE, RUNNING, DefaultPolicy, JobFacts, Verdict
from llic.taskbook import EventKind, TaskBook, TaskEvent, TaskState
from llic.user_requests import MAX_REQUEST_BYTES, Request, read_requests, remove_request, write_request

DATA = Path(__file__).parent / "data"


def policy_of(text: str, n: int = 1):
    """The policy of the tasks a submit text makes (as a master builds it)."""
    sub = parse_submit_text(f"executable = /bin/echo\n{text}\nqueue {n}\n", cwd="/", environ={})
    block = sub.blocks[0]
    return task_policy(block.tasks(7), block.agent_attributes())


def facts(status: int = RUNNING, completions: int = 1, **kw: object) -> JobFacts:
    base: dict[str, object] = dict(cluster=7, process=0, status=status, starts=completions or 1)
    base.update(completions=completions, qdate=100.0, entered=100.0, now=200.0)
    base.update(kw)
    return JobFacts(**base)  # type: ignore[arg-type]


# -- the policy: HTCondor's semantics


def test_max_retries_runs_a_failing_job_max_retries_plus_one_times() -> None:
    policy = policy_of("max_retries = 2")
    verdicts = [policy.on_exit(facts(completions=n, exit_code=1)).verdict for n in (1, 2, 3)]
    assert verdicts == [Verdict.REQUEUE, Verdict.REQUEUE, Verdict.DONE]
    assert policy.on_exit(facts(completions=1, exit_code=0)).verdict is Verdict.DONE
    assert policy.on_exit(facts(completions=1, exit_signal=9)).verdict is Verdict.REQUEUE


def test_success_exit_code_and_retry_until() -> None:
    policy = policy_of("max_retries = 5\nsuccess_exit_code = 3")
    assert policy.on_exit(facts(exit_code=3)).verdict is Verdict.DONE
    assert policy.on_exit(facts(exit_code=0)).verdict is Verdict.REQUEUE
    policy = policy_of("max_retries = 5\nretry_until = 7")  # a futility code: stop retrying
    assert policy.on_exit(facts(exit_code=7)).verdict is Verdict.DONE
    assert policy.on_exit(facts(exit_code=6)).verdict is Verdict.REQUEUE


def test_on_exit_remove_and_on_exit_hold() -> None:
    policy = policy_of("on_exit_remove = ExitCode < 5")
    assert policy.on_exit(facts(exit_code=4)).verdict is Verdict.DONE
    assert policy.on_exit(facts(exit_code=9)).verdict is Verdict.REQUEUE
    assert policy.on_exit(facts(exit_signal=9)).verdict is Verdict.DONE  # undefined: removed
    policy = policy_of('on_exit_hold = ExitCode =!= 0\non_exit_hold_reason = strcat("exit ", ExitCode)')
    held = policy.on_exit(facts(exit_code=3))
    assert (held.verdict, held.reason, held.code, held.subcode) == (Verdict.HOLD, "exit 3", 3, 0)
    assert policy.on_exit(facts(exit_code=0)).verdict is Verdict.DONE
    held = policy_of("on_exit_hold = true\non_exit_hold_subcode = 42").on_exit(facts(exit_code=0))
    assert held.reason == "The job attribute OnExitHold expression 'true' evaluated to TRUE"
    assert held.subcode == 42


def test_periodic_expressions() -> None:
    policy = policy_of(
        "periodic_hold = NumJobStarts > 2\nperiodic_release = HoldReasonCode == 3\n"
        "periodic_remove = JobStatus == 1 && CurrentTime - QDate > 1000 && MyLimit > 1\n+MyLimit = 2"
    )
    assert policy.has_periodic()
    assert policy.periodic(facts(status=IDLE, completions=0, starts=1)) is None
    hold = policy.periodic(facts(status=IDLE, completions=0, starts=3))
    assert hold is not None and hold.verdict is Verdict.HOLD and hold.code == 3
    release = policy.periodic(facts(status=HELD, completions=0, hold_code=3))
    assert release is not None and release.verdict is Verdict.RELEASE
    assert policy.periodic(facts(status=HELD, completions=0, hold_code=1)) is None  # held by the user
    remove = policy.periodic(facts(status=IDLE, completions=0, now=2000.0))
    assert remove is not None and remove.verdict is Verdict.REMOVE
    # at exit the periodic checks come first (HTCondor's PERIODIC_THEN_EXIT)
    assert policy.on_exit(facts(starts=3, exit_code=0)).verdict is Verdict.HOLD


def test_no_policy_command_means_htcondors_default() -> None:
    assert isinstance(policy_of("arguments = x"), DefaultPolicy)
    assert policy_of("arguments = x").on_exit(facts(exit_code=1)).verdict is Verdict.DONE


# -- the task book


def run_once(book: TaskBook, process: int, exit_code: int, decide, now: float) -> None:
    (a,) = [t for t in book.take(0, 1, now=now, host="10.0.0.9") if t.process == process]
    book.complete(0, TaskResult(process, a.attempt, "ok", exit_code=exit_code, run_time=1.0), now + 1, decide)


def test_task_book_retries_holds_releases_removes_and_records_events() -> None:
    policy = policy_of("max_retries = 1\non_exit_hold = ExitCode == 9")
    book = TaskBook([0, 1, 2], max_attempts=3)
    book.log_events = True

    def decide(rec, result, now):
        return policy.on_exit(facts(completions=rec.completions, exit_code=result.exit_code))

    run_once(book, 0, 1, decide, 10.0)
    assert book[0].state is TaskState.QUEUED and book.queue()[0] == 0 and book.requeued == 1
    run_once(book, 0, 1, decide, 20.0)
    assert book[0].state is TaskState.DONE and book[0].completions == 2
    run_once(book, 1, 9, decide, 30.0)
    assert book[1].state is TaskState.HELD and book[1].hold_code == 3
    assert not book.finished and book.idle is False  # 2 is still queued
    book.remove(2, 40.0, "no longer wanted")
    assert book.idle and not book.finished  # only the held one is left: the master waits
    assert book.release(1, 50.0, "via master_release")
    run_once(book, 1, 0, decide, 60.0)
    assert book.finished and book.counts().removed == 1 and book.counts().done == 2
    kinds = [(e.process, e.kind) for e in book.take_events()]
    assert kinds == [
        (0, EventKind.EXECUTE),
        (0, EventKind.REQUEUED),
        (0, EventKind.EXECUTE),
        (0, EventKind.TERMINATED),
        (1, EventKind.EXECUTE),
        (1, EventKind.HELD),
        (2, EventKind.ABORTED),
        (1, EventKind.RELEASED),
        (1, EventKind.EXECUTE),
        (1, EventKind.TERMINATED),
    ]
    assert book.take_events() == []


def test_a_running_task_that_is_held_frees_its_place_and_its_late_result_is_ignored() -> None:
    book = TaskBook([0, 1], max_attempts=3)
    (a, _) = book.take(4, 2, now=1.0)
    from llic.task_policy import Decision

    assert book.hold(0, Decision(Verdict.HOLD, "by the user", 1), 2.0) == 4
    assert book.running_on(4) == {1}
    assert book.check(4, 0, a.attempt) is not None
    assert not book.complete(4, TaskResult(0, a.attempt, "ok", exit_code=0), 3.0) and book.ignored == 1


# -- the master core


def core_with(text: str, n: int, **cfg: float) -> MasterCore:
    config = LlicConfig(window_size=4, initial_jobs_number=0, periodic_expr_interval=5.0, **cfg)
    return MasterCore(
        TaskBook(range(n), config.max_task_attempts), config, policy=policy_of(text, n), log_events=True
    )


def of(out: Output, kind: type) -> list:
    return [a for a in out.actions if isinstance(a, kind)]


def connected(core: MasterCore, now: float) -> tuple[str, list[int]]:
    out = core.start(1, now)
    agent = core.chefs[0].agent
    core.handle(AgentSubmitted(agent, "5.0"), now)
    out = core.handle(AgentConnected(agent, "10.1.2.3"), now)
    sent = [t.process for a in of(out, SendTasks) for t in a.tasks]
    assert of(out, WriteEvents)  # the execute events
    return agent, sent


def test_core_retries_by_the_policy_and_writes_events() -> None:
    core = core_with("max_retries = 2", 1)
    agent, sent = connected(core, 0.0)
    assert sent == [0]
    for attempt, code in ((1, 1), (2, 1), (3, 0)):
        out = core.handle(ResultReceived(agent, TaskResult(0, attempt, "ok", exit_code=code)), float(attempt))
        events = [e.kind for a in of(out, WriteEvents) for e in a.events]
        assert events[0] is (EventKind.REQUEUED if code else EventKind.TERMINATED)
    assert core.finished and core.book[0].completions == 3


def test_core_periodic_remove_cancels_a_running_task() -> None:
    core = core_with("periodic_remove = JobStatus == 2 && CurrentTime - JobCurrentStartDate > 10", 2)
    _, sent = connected(core, 0.0)
    assert sent == [0, 1]
    assert not of(core.on_timer(5.0), CancelTask)
    out = core.on_timer(20.0)
    assert sorted(c.process for c in of(out, CancelTask)) == [0, 1]
    assert core.counts().removed == 2 and core.finished
    assert [e.kind for a in of(out, WriteEvents) for e in a.events] == [EventKind.ABORTED] * 2


def test_user_requests_hold_release_and_remove() -> None:
    core = core_with("arguments = x", 3)
    agent, _ = connected(core, 0.0)
    out = core.handle(UserRequest("hold", (0,), ""), 1.0)
    assert isinstance(out.actions[0], SaveState)  # saved before anything else happens
    assert of(out, CancelTask) == [CancelTask(agent, 0, 1)]
    assert core.book[0].state is TaskState.HELD and core.book[0].hold_code == 1
    for p in (1, 2):
        core.handle(ResultReceived(agent, TaskResult(p, 1, "ok", exit_code=0)), 2.0)
    assert not core.over and core.status is MasterStatus.RUNNING  # a held task keeps it waiting
    out = core.handle(UserRequest("release", None, "go"), 3.0)
    assert core.book[0].state in (TaskState.QUEUED, TaskState.RUNNING)
    core.handle(UserRequest("remove", None, ""), 4.0)
    assert core.finished and core.counts().removed == 1


# -- the state file


def test_held_tasks_survive_the_state_file_and_old_files_still_load(tmp_path: Path) -> None:
    info = MasterInfo("m", "u", 12, "s.sub", 0)
    state = initial_state(info, LlicConfig(), [0, 1, 2], 10.0, held=[1])
    assert state.counts().held == 1
    path = tmp_path / "master.m.state"
    save_state(path, state)
    loaded = load_state(path)
    assert loaded == state and loaded.tasks[[t.process for t in loaded.tasks].index(1)].hold_code == 15
    core = restore(loaded)
    assert core.book[1].state is TaskState.HELD and not core.finished
    old = load_state(DATA / "master.v1.state")  # written by main before issue 20
    again = snapshot(restore(old), old.info, 1.0)
    assert again.counts().total == old.counts().total and again.counts().done == old.counts().done
    done = {t.process: t.outcome for t in old.tasks if t.state is TaskState.DONE}
    assert {t.process: t.outcome for t in again.tasks if t.state is TaskState.DONE} == done


# -- the job event log


def test_events_are_read_back_by_htcondor2(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    now = time.time()

    ok = TaskResult(0, 1, "ok", exit_code=3)
    killed = TaskResult(1, 1, "ok", signal=9)
    texts = [submit_event(1234, p, now, "<submit>", "notes") for p in (0, 1)]
    texts += [
        format_event(1234, TaskEvent(0, EventKind.EXECUTE, now, reason="10.0.0.5")),
        format_event(1234, TaskEvent(0, EventKind.REQUEUED, now, result=ok)),
        format_event(1234, TaskEvent(0, EventKind.TERMINATED, now, result=ok)),
        format_event(1234, TaskEvent(1, EventKind.HELD, now, reason="why", code=3, subcode=7)),
        format_event(1234, TaskEvent(1, EventKind.RELEASED, now, reason="go")),
        format_event(1234, TaskEvent(1, EventKind.EVICTED, now, reason="agent lost")),
        format_event(1234, TaskEvent(1, EventKind.TERMINATED, now, result=killed)),
        format_event(1234, TaskEvent(1, EventKind.ABORTED, now, reason="removed")),
    ]
    assert append_events({str(log): texts}) == []
    got = [(int(e.type), e.cluster, e.proc, dict(e)) for e in htcondor2.JobEventLog(str(log)).events(0)]
    assert [(t, c, p) for t, c, p, _ in got] == [
        (0, 1234, 0), (0, 1234, 1), (1, 1234, 0), (4, 1234, 0), (5, 1234, 0),
        (12, 1234, 1), (13, 1234, 1), (4, 1234, 1), (5, 1234, 1), (9, 1234, 1),
    ]  # fmt: skip
    assert got[0][3]["LogNotes"] == "notes" and got[2][3]["ExecuteHost"] == "<10.0.0.5:0>"
    assert got[3][3]["TerminatedAndRequeued"] and got[3][3]["ReturnValue"] == 3
    assert got[4][3]["ReturnValue"] == 3 and got[8][3]["TerminatedBySignal"] == 9
    assert (got[5][3]["HoldReason"], got[5][3]["HoldReasonCode"], got[5][3]["HoldReasonSubCode"]) == (
        "why",
        3,
        7,
    )
    assert got[9][3]["Reason"] == "removed"


def test_an_agents_error_text_is_one_short_line_of_the_event_log(tmp_path: Path) -> None:
    """A lying agent's error (newlines, `...`, 900 KB) cannot end its event and forge another
    (a `terminated, return value 0` for task 2, which never ran), nor fill the log."""
    forged = format_event(1234, TaskEvent(2, EventKind.TERMINATED, 1.0, result=TaskResult(2, 1, "ok")))
    core = core_with("", 3)
    agent, sent = connected(core, 0.0)
    assert sent == [0, 1, 2]
    texts = []
    for process, error in enumerate(("no\n...\n" + forged, "Trace\r\n\x00\u2028" + "Y" * 900_000)):
        result = TaskResult(process, core.book[process].attempt, STATUS_LAUNCH_FAILED, error=error)
        out = core.handle(ResultReceived(agent, result), 1.0)
        texts += [format_event(1234, e) for a in of(out, WriteEvents) for e in a.events]
    log = tmp_path / "job.log"
    assert append_events({str(log): texts}) == []
    assert log.stat().st_size < 5000
    got = [(int(e.type), e.proc) for e in htcondor2.JobEventLog(str(log)).events(0)]
    assert got == [(4, 0), (4, 1)]
    assert log.read_text().count("\n...\n") == len(texts) == 2


# -- output remaps


def test_transfer_output_remaps(tmp_path: Path) -> None:
    assert parse_remaps("out.txt = results/o.1; a\\;b = c; x=/abs/y") == {
        "out.txt": "results/o.1",
        "a;b": "c",
        "x": "/abs/y",
    }
    (tmp_path / "results").mkdir()
    task = Task(
        process=1, executable="/bin/echo", initialdir=str(tmp_path), output_remaps="out.txt = results/o.1"
    )
    files = [({"path": "out.txt", "size": 2}, b"hi"), ({"path": "other", "size": 1}, b"x")]
    place_outputs(task, files, "condor")
    assert (tmp_path / "results" / "o.1").read_bytes() == b"hi" and (tmp_path / "other").exists()
    assert not (tmp_path / "out.txt").exists()


# -- master_release / master_rm / master_hold and master_q


def test_requests_and_their_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = MasterInfo("m", "u", 12, "s.sub", 0)
    path = tmp_path / "master.m.state"
    save_state(path, initial_state(info, LlicConfig(), [0, 1, 2], 10.0, held=[1, 2]))
    assert master_release([str(path), "1"]) == 0
    assert "asked to release 1 task(s)" in capsys.readouterr().out
    assert master_rm([str(path)]) == 0 and master_hold([str(path), "0", "-reason", "wait"]) == 0
    assert master_release([str(path), "9"]) == 2 and "no process 9" in capsys.readouterr().err
    found = [r for _, r in read_requests(tmp_path)]
    assert found == [
        Request("release", (1,), "via master_release"),
        Request("remove", None, "via master_rm"),
        Request("hold", (0,), "wait"),
    ]
    write_request(tmp_path, Request("release", None, "x"))
    (tmp_path / "request.0.1.json").write_text(json.dumps({"action": "explode"}))
    assert isinstance(read_requests(tmp_path)[0][1], str)  # a bad file is reported, not obeyed


def test_request_files_that_are_not_small_regular_files_are_reported_not_read(tmp_path: Path) -> None:
    """Only the output directory's owner can put files there, but a FIFO named as a request
    blocked the master's request loop for good (the read waited for a writer), a huge one was
    read whole into memory, a symbolic link read wherever it pointed, and a directory of that
    name stopped the loop (its removal raised). Each is reported, removed if it can be, else
    skipped from then on; the requests beside them are obeyed."""
    os.mkfifo(tmp_path / "request.1.1.json")
    with open(tmp_path / "request.2.1.json", "wb") as f:
        f.truncate(MAX_REQUEST_BYTES + 1)
    (tmp_path / "elsewhere.json").write_text(json.dumps({"action": "remove"}))
    (tmp_path / "request.3.1.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "request.4.1.json").mkdir()
    (tmp_path / "request.5.1.json").write_text(json.dumps({"action": "hold", "processes": [3]}))
    found = dict(read_requests(tmp_path))  # returns: nothing blocks
    problems = {p.name: r for p, r in found.items() if isinstance(r, str)}
    assert sorted(problems) == [f"request.{i}.1.json" for i in (1, 2, 3, 4)]
    assert "not a regular file" in problems["request.1.1.json"]
    assert "more than the" in problems["request.2.1.json"]
    assert found[tmp_path / "request.5.1.json"] == Request("hold", (3,), "")
    stuck: set[str] = set()
    assert [remove_request(p, stuck) is None for p in sorted(found)] == [True, True, True, False, True]
    assert stuck == {"request.4.1.json"}
    assert read_requests(tmp_path, stuck) == [] and (tmp_path / "elsewhere.json").exists()


def test_master_rm_refuses_a_target_that_is_no_master_id_before_asking_htcondor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("bad id!", "abc\n"):
        assert master_rm([bad]) == 2
        assert f"{bad!r} is neither a master id" in capsys.readouterr().err


def test_master_q_shows_held_tasks() -> None:
    info = MasterInfo("m", "u", 12, "s.sub", 0)
    state = initial_state(info, LlicConfig(), [0, 1, 2], 10.0, held=[2])
    row = summarize(state)
    assert row["held"] == 1 and row["held_tasks"][0]["process"] == 2
    text = render_table([row], "t")
    assert "1 held, 0 failed" in text
    assert "m process 2: submitted on hold at user's request (code 15, subcode 0)" in text


@pytest.mark.parametrize(
    "raw",
    [
        {"process": 1, "state": "queued"},
        {"process": 1, "state": "held", "hold_reason": "r", "hold_code": 3, "hold_subcode": 0, "entered": 5},
        {
            "process": 2,
            "state": "done",
            "attempt": 1,
            "outcome": {"status": "ok", "exit_code": 0, "run_time": 1},
        },
        {
            "process": 3,
            "state": "failed",
            "failed_on": [0, 2],
            "outcome": {"status": "prepare_failed", "error": "x"},
        },
        {"process": -1, "state": "queued"},
        {"process": 1, "state": "asleep"},
        {"process": 1},
        {"process": 1, "state": "queued", "extra": 1},
        {"process": True, "state": "queued"},
        {"process": 1.0, "state": "queued"},
        {"process": 1, "state": "queued", "completed": "soon"},
        {"process": 1, "state": "queued", "failed_on": [1, "x"]},
        {"process": 1, "state": "done", "outcome": {"status": "ok", "exit_code": "0"}},
        {"process": 1, "state": "done", "outcome": {"status": "ok", "bogus": 1}},
        {"process": 1, "state": "queued", "wall_clock": -1},
        [1, 2],
    ],
)
def test_the_state_files_task_check_agrees_with_its_schema(raw: object) -> None:
    """llic/state.py reads tasks without pydantic (memory); it accepts exactly what _Task does
    with the same JSON."""
    from pydantic import ValidationError

    from llic.state import _Bad, _read_task, _Task

    try:
        _Task.model_validate_json(json.dumps(raw))
        schema_ok = True
    except ValidationError:
        schema_ok = False
    try:
        _read_task(raw, 0)
        ours_ok = True
    except _Bad:
        ours_ok = False
    assert ours_ok == schema_ok
