"""The job policy and the job event log in a whole master run, without HTCondor daemons: the
master's trio driver (llic/master.py) and the real agent zipapp as local processes (LocalAgents),
on submit files with max_retries, on_exit_hold, periodic_remove and hold = true; the event log is
read back with htcondor2.JobEventLog. tests/llic/test_policy_condor.py does the same on real
HTCondor."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import htcondor2
import pytest
import trio

from llic import master as m
from llic.config import LlicConfig
from llic.eventlog import append_events, log_path, submit_event
from llic.state import MasterInfo, MasterStatus, initial_state, load_state, save_state
from llic.submit import parse_submit_file
from llic.taskbook import TaskState
from llic.user_requests import Request, write_request

pytestmark = pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3")

CLUSTER = 77
# a task that fails (exit 1, or 3) until it has run RUNS times; its runs are counted in a file
SCRIPT = """#!/bin/sh
n=$(cat "runs.$1" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "runs.$1"
if [ "$n" -lt "$2" ]; then exit "$3"; fi
echo "done $1"
"""


def prepare(tmp: Path, sub: str, **config: Any) -> Path:
    """What master_submitter leaves for a master: its block, its state file (tasks submitted on
    hold held) and the submit events of the job event logs."""
    work = tmp / "work"
    work.mkdir()
    (work / "task.sh").write_text(SCRIPT)
    (work / "task.sh").chmod(0o755)
    (work / "job.sub").write_text(sub)
    block = parse_submit_file("job.sub", cwd=work).blocks[0]
    out = tmp / "m"
    out.mkdir()
    (out / "master.m1.sub").write_text(block.submit_text())
    values: dict[str, Any] = {
        "initial_master_port_number": 0,
        "queue_poll_interval": 0.5,
        "reschedule_interval": 0.5,
        "state_save_interval": 0.1,
        "periodic_expr_interval": 0.5,
        "window_size": 2,
    }
    values.update(config)
    tasks = block.tasks(CLUSTER)
    info = MasterInfo("m1", "tester", CLUSTER, str(out / "master.m1.sub"), 0)
    state = initial_state(
        info,
        LlicConfig(**values),
        [t.process for t in tasks],
        time.time(),
        held=[t.process for t in tasks if t.hold],
    )
    save_state(out / "master.m1.state", state)
    events: dict[str, list[str]] = {}
    for t in tasks:
        if t.log:
            events.setdefault(log_path(t.initialdir, t.log), []).append(
                submit_event(CLUSTER, t.process, time.time(), "<test>")
            )
    assert append_events(events) == []
    return out / "master.m1.state"


async def run_master(state_path: Path, tmp: Path, *, during: Any = None) -> int:
    state, plan = m.load_plan(state_path)
    runner = m.LocalAgents(tmp / "scratch", slots=2)
    master = m.Master(plan, state, runner, host="127.0.0.1")
    rc: list[int] = []

    async def go(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        rc.append(await master.run(task_status=task_status))

    try:
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                await nursery.start(go)
                if during is not None:
                    await during(state_path)
    finally:
        await runner.aclose()
    return rc[0]


def events(log: Path) -> list[tuple[int, int, int, dict[str, Any]]]:
    return [(int(e.type), e.cluster, e.proc, dict(e)) for e in htcondor2.JobEventLog(str(log)).events(0)]


async def until_state(state_path: Path, predicate: Any, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while not predicate(load_state(state_path)):
            await trio.sleep(0.1)


async def test_max_retries_runs_a_task_until_it_succeeds_and_the_log_shows_it(tmp_path: Path) -> None:
    state_path = prepare(
        tmp_path,
        "executable = task.sh\narguments = $(Process) $(runs) 1\n"
        "should_transfer_files = NO\nlog = job.log\nmax_retries = 2\noutput = out.$(Process)\n"
        "queue runs in (3, 1, 1)\n",
    )
    assert await run_master(state_path, tmp_path) == m.EXIT_DONE
    work = tmp_path / "work"
    assert [(work / f"runs.{p}").read_text().strip() for p in range(3)] == ["3", "1", "1"]
    got = events(work / "job.log")
    terminated = [(p, e["ReturnValue"]) for t, c, p, e in got if t == 5 and c == CLUSTER]
    assert sorted(terminated) == [(0, 0), (1, 0), (2, 0)]  # one terminated event per task
    requeued = [(p, e["ReturnValue"]) for t, _, p, e in got if t == 4 and e.get("TerminatedAndRequeued")]
    assert requeued == [(0, 1), (0, 1)]  # process 0 failed twice, then succeeded
    assert [p for t, _, p, _ in got if t == 0] == [0, 1, 2]
    assert [p for t, _, p, _ in got if t == 1].count(0) == 3
    final = load_state(state_path)
    assert final.counts().done == 3 and final.counters["requeued"] == 2


async def test_on_exit_hold_holds_until_master_release(tmp_path: Path) -> None:
    state_path = prepare(
        tmp_path,
        "executable = task.sh\narguments = $(Process) $(runs) 3\nshould_transfer_files = NO\nlog = job.log\n"
        'on_exit_hold = ExitCode == 3\non_exit_hold_reason = strcat("exit code ", ExitCode)\n'
        "queue runs in (1, 2)\n",
    )

    async def release_when_held(path: Path) -> None:
        await until_state(path, lambda s: s.counts().held == 1 and s.counts().done == 1)
        held = [t for t in load_state(path).tasks if t.state is TaskState.HELD]
        assert [(t.process, t.hold_reason, t.hold_code) for t in held] == [(1, "exit code 3", 3)]
        write_request(path.parent, Request("release", None, "checked by the test"))

    assert await run_master(state_path, tmp_path, during=release_when_held) == m.EXIT_DONE
    got = events(tmp_path / "work" / "job.log")
    kinds = [t for t, _, p, _ in got if p == 1]
    assert kinds == [0, 1, 12, 13, 1, 5]
    assert [e["HoldReason"] for t, _, _, e in got if t == 12] == ["exit code 3"]
    assert [e["Reason"] for t, _, _, e in got if t == 13] == ["checked by the test"]
    assert load_state(state_path).counts().done == 2


async def test_periodic_remove_stops_a_running_task(tmp_path: Path) -> None:
    state_path = prepare(
        tmp_path,
        "executable = /bin/sleep\narguments = 120\nshould_transfer_files = NO\nlog = job.log\n"
        "periodic_remove = JobStatus == 2 && CurrentTime - JobCurrentStartDate > 1\nqueue 2\n",
    )
    started = time.monotonic()
    assert await run_master(state_path, tmp_path) == m.EXIT_DONE
    assert time.monotonic() - started < 60  # the sleeps were killed, not waited for
    final = load_state(state_path)
    assert final.counts().removed == 2
    got = events(tmp_path / "work" / "job.log")
    aborted = [e["Reason"] for t, _, _, e in got if t == 9]
    assert len(aborted) == 2 and all("PeriodicRemove" in r for r in aborted)


async def test_tasks_submitted_on_hold_wait_for_master_rm(tmp_path: Path) -> None:
    state_path = prepare(
        tmp_path,
        "executable = /bin/true\nshould_transfer_files = NO\nlog = job.log\n"
        "hold = $(Process) == 1\nqueue 2\n",
    )
    assert load_state(state_path).counts().held == 1

    async def remove_when_idle(path: Path) -> None:
        await until_state(path, lambda s: s.counts().done == 1)
        write_request(path.parent, Request("remove", (1,), "not wanted"))

    assert await run_master(state_path, tmp_path, during=remove_when_idle) == m.EXIT_DONE
    got = events(tmp_path / "work" / "job.log")
    assert [t for t, _, p, _ in got if p == 1] == [0, 9]
    assert load_state(state_path).counts().removed == 1


async def test_the_state_says_done_only_once_the_job_event_log_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user who sees the run done (master_q, --wait) and then reads the log finds every task's
    terminated event there, however slowly the log is written (here 0.3 s per write)."""
    slow = m.append_events

    def slow_append(texts: dict[str, list[str]]) -> list[str]:
        time.sleep(0.3)
        return slow(texts)

    monkeypatch.setattr(m, "append_events", slow_append)
    state_path = prepare(
        tmp_path,
        "executable = task.sh\narguments = $(Process) 1 1\nshould_transfer_files = NO\n"
        "log = job.log\nqueue 4\n",
    )
    seen: list[list[int]] = []

    async def read_log_when_done(path: Path) -> None:
        await until_state(path, lambda s: s.status is not MasterStatus.RUNNING)
        seen.append(sorted(p for t, _, p, _ in events(tmp_path / "work" / "job.log") if t == 5))

    assert await run_master(state_path, tmp_path, during=read_log_when_done) == m.EXIT_DONE
    assert seen == [[0, 1, 2, 3]]
