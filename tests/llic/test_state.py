"""llic.state: the master's state file survives crashes, refuses damage, never destroys a file."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llic import state as state_module
from llic.chef import ChefState
from llic.config import LlicConfig
from llic.events import (
    AgentConnected,
    AgentSubmitted,
    ConnectionBroken,
    RemoveAgents,
    ResultReceived,
    SaveState,
)
from llic.master_core import MasterCore, MasterStatus
from llic.state import (
    MasterInfo,
    MasterState,
    StateFileError,
    StateWriter,
    find_state_files,
    initial_state,
    load_state,
    master_output_dir,
    restore,
    save_state,
    snapshot,
    state_file_name,
)
from llic.task import TaskResult
from llic.taskbook import TaskRecord, TaskState
from tests.llic.test_chef import Sim, check_end, simulate, tasks_sent

INFO = MasterInfo("1234.0", "alice", 1234, "/home/alice/job.sub", 0)


def ok_result(process: int, attempt: int) -> TaskResult:
    return TaskResult(process, attempt, "ok", exit_code=0, run_time=0.25, host="node7", finished=100.5)


def busy_core() -> MasterCore:
    """A core in mid-run: results done and failed, chefs in several states."""
    core = MasterCore.new(range(8), LlicConfig(window_size=2, max_task_attempts=1))
    save, a, _ = core.start(2, 10.0).actions
    assert save == SaveState()
    core.handle(AgentSubmitted(a.agent, "55.0"), 11.0)  # type: ignore[union-attr]
    sent = tasks_sent(core.handle(AgentConnected(a.agent), 12.0), a.agent)  # type: ignore[union-attr]
    core.handle(ResultReceived(a.agent, ok_result(sent[0].process, sent[0].attempt)), 13.0)  # type: ignore[union-attr]
    bad = TaskResult(
        sent[1].process, sent[1].attempt, "launch_failed", error="no such file: ünïcode", host="node8"
    )
    core.handle(ResultReceived(a.agent, bad), 14.0)  # type: ignore[union-attr]
    return core


def saved(tmp_path: Path, core: MasterCore | None = None) -> tuple[Path, MasterState]:
    path = tmp_path / state_file_name(INFO.master_id)
    state = snapshot(core or busy_core(), INFO, 15.0, extra={"port": 2853})
    save_state(path, state)
    return path, state


def test_round_trip(tmp_path: Path) -> None:
    path, state = saved(tmp_path)
    loaded = load_state(path)
    assert loaded == state
    assert loaded.counts().done == 1 and loaded.counts().failed == 1 and loaded.counts().running == 2
    assert loaded.extra == {"port": 2853} and loaded.run == 1 and loaded.status is MasterStatus.RUNNING
    recorded = {r.state: r.recorded for r in loaded.tasks if r.state in (TaskState.DONE, TaskState.FAILED)}
    assert recorded == {TaskState.DONE: 1, TaskState.FAILED: 1}
    assert [c.state for c in loaded.chefs] == [ChefState.RUNNING, ChefState.LAUNCHED]


def test_a_state_writer_writes_what_a_fresh_save_writes_after_every_change(tmp_path: Path) -> None:
    """StateWriter reuses the lines of unchanged tasks: after each change (results, a failure
    retried, an agent lost, a restart), its file is byte for byte what a fresh save writes."""
    core = busy_core()
    writer = StateWriter(tmp_path / "a.state")
    fresh = tmp_path / "b.state"

    told = StateWriter(tmp_path / "c.state")  # told what changed, as the master's is

    def same() -> None:
        writer.save(snapshot(core, INFO, 20.0, copy=False))
        told.save(snapshot(core, INFO, 20.0, copy=False), core.take_changed())
        save_state(fresh, snapshot(core, INFO, 20.0))
        assert writer.path.read_bytes() == fresh.read_bytes() == told.path.read_bytes()

    same()
    agent = core.chefs[0].agent
    held = sorted(core.book.running_on(0))
    core.handle(ResultReceived(agent, ok_result(held[0], core.book[held[0]].attempt)), 16.0)
    same()
    core.handle(ConnectionBroken(agent, "lost"), 17.0)  # its tasks back to the queue
    same()
    core = restore(load_state(writer.path))
    told = StateWriter(tmp_path / "c.state")  # a restarted master's writer knows no lines
    core.start(2, 18.0)
    same()
    assert load_state(writer.path).counts() == core.counts()


def test_file_layout_header_checksum_and_one_task_per_line(tmp_path: Path) -> None:
    path, state = saved(tmp_path)
    header, body = path.read_bytes().split(b"\n", 1)
    assert header == f"llic-master-state 1 sha256:{hashlib.sha256(body).hexdigest()}".encode()
    assert body.count(b'\n{"process":') == len(state.tasks)
    assert b'{"process":7,"state":"queued"}' in body
    assert body.count(b'"recorded":1}') == 2  # the done task and the failed one, each recorded once
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_restore_requeues_running_and_keeps_results(tmp_path: Path) -> None:
    path, _ = saved(tmp_path)
    core = restore(load_state(path))
    counts = core.book.counts()
    assert (counts.done, counts.failed, counts.running, counts.queued) == (1, 1, 0, 6)
    done = next(r for r in core.book.records() if r.state is TaskState.DONE)
    assert done.outcome == ok_result(done.process, done.attempt)
    assert core.config == LlicConfig(window_size=2, max_task_attempts=1) and core.run == 1
    out = core.start(2, 20.0)
    assert core.run == 2 and core.agent_job_ids() == ["55.0"]
    assert out.actions[0] == SaveState() and out.actions[1].job_ids == ("55.0",)  # type: ignore[union-attr]


def test_initial_state_then_start(tmp_path: Path) -> None:
    path = tmp_path / "master.x.state"
    save_state(path, initial_state(INFO, LlicConfig(), [0, 1, 2, 5], now=1.0))
    state = load_state(path)
    assert state.started is None and state.chefs == [] and state.counts().queued == 4
    core = restore(state)
    out = core.start(10, 2.0)
    assert out.actions[0] == SaveState() and len(out.actions) == 5 and core.started == 2.0


def test_missing_file_is_a_clear_error_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "master.gone.state"
    with pytest.raises(StateFileError, match=f"^{path}: no such state file$"):
        load_state(path)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def _corrupt_cases(good: bytes) -> dict[str, tuple[bytes, str]]:
    header, body = good.split(b"\n", 1)

    def signed(new_body: bytes, version: str = "1") -> bytes:
        return (
            f"llic-master-state {version} sha256:{hashlib.sha256(new_body).hexdigest()}\n".encode() + new_body
        )

    flipped = bytearray(good)
    flipped[min(len(header) + 20, len(good) - 1)] ^= 0x01
    return {
        "bit flip": (bytes(flipped), "checksum mismatch: the file is damaged"),
        "truncated": (good[: len(good) // 2], "checksum mismatch"),
        "empty": (b"", "not an llic master state file"),
        "binary": (b"\x00\xff\xfe garbage", "not an llic master state file"),
        "someone else's": (b"[global]\nx = 1\n", "not an llic master state file"),
        "newer version": (signed(body, "2"), "state file version '2'; this llic reads version 1"),
        "not utf-8": (signed(b"\xff\xfe{}"), "unreadable body"),
        "not json": (signed(b"{not json"), "unreadable body"),
        "nested too deep": (signed(b"[" * 100_000), "unreadable body: Invalid JSON: nested too deep"),
        "wrong schema": (
            signed(body.replace(b'"status":"running"', b'"status":"asleep"')),
            "wrong content at status",
        ),
        "missing field": (signed(body.replace(b'"run":1,', b"")), "wrong content at run"),
        # master_q showed these as dates: OverflowError (timestamp out of range) or ValueError
        "saved out of range": (
            signed(body.replace(b'"saved":15.0', b'"saved":1e300')),
            "wrong content at saved: Input should be less than or equal to",
        ),
        "started infinite": (
            signed(body.replace(b'"started":10.0', b'"started":Infinity')),
            "wrong content at started: Input should be a finite number",
        ),
        "saved NaN": (signed(body.replace(b'"saved":15.0', b'"saved":NaN')), "wrong content at saved"),
        "task time NaN": (
            signed(body.replace(b'"entered":13.0', b'"entered":NaN')),
            "wrong content at tasks.4.entered: Input should be a finite number",
        ),
        "unknown field": (signed(body.replace(b'"run":1,', b'"run":1,"x":2,')), "wrong content at x"),
        "duplicate task": (
            signed(body.replace(b'{"process":7,"state":"queued"}', b'{"process":6,"state":"queued"}')),
            "inconsistent content: process 6 appears twice",
        ),
        "running without chef": (
            signed(body.replace(b'{"process":7,"state":"queued"}', b'{"process":7,"state":"running"}')),
            "inconsistent content: process 7: a task has a chef exactly when it is running",
        ),
        "bad master id": (
            signed(body.replace(b'"1234.0"', b'"../x"')),
            "inconsistent content: master: master id",
        ),
    }


@pytest.mark.parametrize("case", list(_corrupt_cases(b"x\ny")))
def test_corrupt_file_is_a_clear_error_and_left_untouched(tmp_path: Path, case: str) -> None:
    path, _ = saved(tmp_path)
    content, expected = _corrupt_cases(path.read_bytes())[case]
    path.write_bytes(content)
    before = os.stat(path)
    with pytest.raises(StateFileError) as info:
        load_state(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message
    assert path.read_bytes() == content and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_bad_config_snapshot_is_a_state_error(tmp_path: Path) -> None:
    _, state = saved(tmp_path)
    state.config["WINDOW_SIZE"] = 0
    with pytest.raises(StateFileError, match=r"state of master 1234\.0: WINDOW_SIZE"):
        restore(state)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match="is a directory"):
        load_state(tmp_path)


def test_a_fifo_or_an_oversized_file_is_refused_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "master.fifo.state"
    os.mkfifo(fifo)  # a plain open blocks until a writer comes: master_q and master_rm hung
    with pytest.raises(StateFileError, match=f"^{fifo}: not a regular file, not read as a state file$"):
        load_state(fifo)
    path, _ = saved(tmp_path)
    monkeypatch.setattr(state_module, "MAX_STATE_BYTES", path.stat().st_size - 1)
    with pytest.raises(StateFileError, match=f"^{path}: .* bytes, more than the .* allowed, not read"):
        load_state(path)


def test_save_never_overwrites_a_file_that_is_not_a_state_file(tmp_path: Path) -> None:
    path = tmp_path / "master.1.state"
    path.write_text("precious\n")
    with pytest.raises(StateFileError, match="exists and is not an llic master state file; not overwritten"):
        save_state(path, initial_state(INFO, LlicConfig(), [0], now=0.0))
    assert path.read_text() == "precious\n" and sorted(tmp_path.iterdir()) == [path]
    fifo = tmp_path / "master.2.state"
    os.mkfifo(fifo)  # the check before the save opened it plainly: the master's save hung
    directory = tmp_path / "master.3.state"
    directory.mkdir()
    for path in (fifo, directory):
        with pytest.raises(StateFileError, match="not an llic master state file; not overwritten"):
            save_state(path, initial_state(INFO, LlicConfig(), [0], now=0.0))


def test_a_crash_during_save_leaves_the_old_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, state = saved(tmp_path)
    old = path.read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StateFileError, match="cannot save: No space left on device"):
        save_state(path, initial_state(INFO, LlicConfig(), [0], now=0.0))
    assert path.read_bytes() == old and load_state(path) == state
    assert sorted(tmp_path.iterdir()) == [path]  # the temporary file is gone


def test_save_into_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match="cannot save"):
        save_state(tmp_path / "nope" / "master.1.state", initial_state(INFO, LlicConfig(), [0], now=0.0))


def test_master_id_is_checked() -> None:
    for bad in ("", "../etc", "a/b", ".hidden", "a b"):
        with pytest.raises(ValueError):
            MasterInfo(bad, "u", 1, "s", 0)


def test_output_dirs_and_finding_state_files(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    assert master_output_dir(str(outputs), "7.0") == outputs / "master.7.0"
    assert master_output_dir(str(tmp_path / "new") + "/", "7.0") == tmp_path / "new" / "master.7.0"
    assert master_output_dir(str(tmp_path / "run"), "7.0") == tmp_path / "run.7.0"
    state = initial_state(INFO, LlicConfig(), [0], now=0.0)
    files = []
    for prefix, mid in ((str(outputs), "1.0"), (str(outputs), "2.0"), (str(tmp_path / "run"), "3.0")):
        d = master_output_dir(prefix, mid)
        d.mkdir()
        files.append(d / state_file_name(mid))
        save_state(files[-1], state)
    (outputs / "master.1.0" / ".master.1.0.state.tmp-99").write_text("half")  # a crashed save
    (outputs / "master.1.0" / "master.1.0.in").write_text("not ours")
    (tmp_path / "run.other").mkdir()
    assert find_state_files(str(outputs)) == files[:2]
    assert find_state_files(str(outputs) + "/") == files[:2]
    assert find_state_files(str(tmp_path / "run")) == files[2:]
    assert find_state_files(str(tmp_path / "absent")) == []


# ----------------------------------------------------------------------------- property


def _through_a_file(directory: Path):  # type: ignore[no-untyped-def]
    def restart_via(state: MasterState) -> MasterState:
        path = directory / state_file_name(state.info.master_id)
        save_state(path, state)
        return load_state(path)

    return restart_via


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_restarts_through_the_state_file_lose_nothing_and_record_nothing_twice(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_end(simulate(data, restart_via=_through_a_file(Path(tmp))))


# ----------------------------------------------------------------------------- older files

V1_FILE = Path(__file__).parent / "data" / "master.v1.state"


def test_a_state_file_of_an_earlier_llic_still_loads_and_resumes(tmp_path: Path) -> None:
    """data/master.v1.state was written by llic at commit c5200e9, before the task record and
    its outcome were shared (taskbook.TaskOutcome, a schema of its own in state.py): a MasterCore
    on 8 tasks and 3 chefs, through submissions, two connections (one on a limited subnet),
    results (ok with an exit code, ok by a signal with a non-ASCII error, launch_failed), a
    large-result request and a broken connection, then `save_state(snapshot(...))`. It loads,
    the master resumes from it, and this llic writes its outcomes back with the same fields."""
    state = load_state(V1_FILE)
    assert state.info == MasterInfo("m1", "alice", 1234, "/home/alice/run/master.m1.sub", 0)
    assert state.status is MasterStatus.RUNNING and state.run == 1 and state.saved == 108.0
    assert [c.state for c in state.chefs] == [ChefState.RUNNING, ChefState.LAUNCHED, ChefState.LAUNCHED]
    assert (state.counts().done, state.counts().running, state.counts().queued) == (2, 2, 4)
    outcomes = {t.process: t.outcome for t in state.tasks if t.outcome is not None}
    assert outcomes == {
        0: TaskResult(0, 1, "ok", exit_code=0, run_time=1.25, host="node1", finished=1700000003.5),
        2: TaskResult(
            2,
            1,
            "ok",
            signal=9,
            run_time=0.5,
            host="node2",
            finished=1700000004.0,
            error="output files not placed: ünïcode/ä: No space left on device",
        ),
        3: TaskResult(3, 1, "launch_failed", host="node2", error="exec format error"),
    }
    assert state.extra["net"]["subnets"]["10.1.0.0/16"]["limit_bps"] == 8e6

    core = restore(state)
    out = core.start(3, 200.0)
    assert out.actions[0] == SaveState() and core.run == 2
    assert out.actions[1] == RemoveAgents(("40.0", "41.0", "42.0"), "left by the previous run of this master")
    assert core.counts().done == 2 and core.counts().running == 0  # the old run's tasks queued again

    path = tmp_path / "master.m1.state"
    save_state(path, snapshot(core, state.info, 201.0, state.extra))
    old = {t["process"]: t.get("outcome") for t in _task_lines(V1_FILE)}
    new = {t["process"]: t.get("outcome") for t in _task_lines(path)}
    assert new == old  # the same outcome fields, written the same way
    assert {t.process: t.outcome for t in load_state(path).tasks if t.outcome} == outcomes


def _task_lines(path: Path) -> list[dict[str, object]]:
    body = path.read_bytes().partition(b"\n")[2]
    return json.loads(body)["tasks"]


_texts = st.text(max_size=12)
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 2e9)
_outcomes = st.builds(
    TaskResult,
    process=st.integers(0, 99),
    attempt=st.integers(0, 9),
    status=st.sampled_from(["ok", "prepare_failed", "launch_failed", ""]),
    exit_code=st.none() | st.integers(-(2**40), 2**40) | st.booleans(),
    signal=st.none() | st.integers(1, 64),
    run_time=st.floats(0, 1e9) | st.integers(0, 9),
    started=st.none() | _floats,
    finished=st.none() | _floats,
    host=_texts,
    stdout_tail=_texts,
    stderr_tail=st.just(""),
    error=st.none() | _texts,
)
_records = st.builds(
    TaskRecord,
    process=st.integers(0, 2**40),
    state=st.sampled_from(list(TaskState)),
    attempt=st.integers(0, 9),
    failures=st.integers(0, 3),
    chef=st.none() | st.integers(0, 5),
    failed_on=st.frozensets(st.integers(0, 5), max_size=2),
    outcome=st.none() | _outcomes,
    completed=st.none() | _floats,
    recorded=st.integers(0, 3),
    completions=st.integers(0, 3),
    hold_reason=st.none() | _texts,
    entered=st.none() | _floats,
    wall_clock=st.floats(0, 1e6) | st.integers(0, 5),
)


@settings(max_examples=500, deadline=None)
@given(_records)
def test_task_lines_are_json_dumps_of_the_records_maps(rec: TaskRecord) -> None:
    """A task's line is written by hand for the common records (a save re-encodes every record
    that changed): the very text json.dumps makes of `_task_json`, whatever the values."""
    expected = json.dumps(state_module._task_json(rec), separators=(",", ":"), ensure_ascii=False)
    assert state_module._task_line(rec) == expected


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_writer_told_what_changed_writes_what_a_fresh_save_writes(data: st.DataObject) -> None:
    """The master's writer encodes again only the records the core says changed since its last
    save (every change of a record goes through the task book's _move or _start): through any
    interleaving of the chef property test, at every save, its bytes are a fresh save's."""
    current: list[Any] = [None, None]  # the core, and its master's writer
    plain_save = Sim.save

    def save(sim: Sim) -> None:
        plain_save(sim)
        if current[0] is not sim.core:  # a (re)started master: a new writer
            current[:] = [sim.core, StateWriter(Path("/nonexistent/m.state"))]
        state = snapshot(sim.core, INFO, sim.now, copy=False)
        encoded = current[1].encode(state, sim.core.take_changed())[1]
        assert encoded == state_module._file_bytes(state, None)

    Sim.save = save  # type: ignore[method-assign]
    try:
        check_end(simulate(data))
    finally:
        Sim.save = plain_save  # type: ignore[method-assign]
