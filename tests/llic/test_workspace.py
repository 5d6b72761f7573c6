"""The agent's TRANSFER execution directories (llic/agent/workspace.py): a new one per task, a
finished one renamed into the trash and removed in the background, the trash bounded, nothing
followed through a symlink, nothing left at the end; and the plan's private inputs."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from deploy.harness.sandbox import poll_until
from llic import protocol as p
from llic.agent.inputfile import AgentInput
from llic.agent.launcher import Launcher
from llic.agent.workspace import TRASH_NAME, Job, PrepareError, Trash, Workspace
from llic.files import STYLE_CONDOR, STYLE_IMPROVED, DirInfo, OutputPlacementError, place_outputs
from llic.plan import Plan
from llic.state import MasterInfo


def workspace(tmp_path: Path) -> Workspace:
    """A TRANSFER workspace whose cache holds a common file `db` and the executable `run.sh`."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "db").write_bytes(b"common data")
    (home / "run.sh").write_text('#!/bin/sh\necho "$1" > out\n')
    config = AgentInput(
        master="m",
        secret=b"x" * 32,
        window=2,
        mode="TRANSFER",
        files_style="condor",
        executable="run.sh",
        common_files=["db"],
    )
    ws = Workspace(config, str(home), str(tmp_path), dict(os.environ))
    ws.setup()
    return ws


def task(process: int, iwd: Path) -> p.Task:
    return p.Task(process, "run.sh", str(iwd), arguments=(str(process),), transfer_input_files=("db", "q"))


def prepare(ws: Workspace, process: int) -> Job:
    """Task `process` prepared with its private input `q` (a blob, as the master sends it)."""
    data = f"query {process}".encode()
    return ws.prepare(task(process, Path(ws.home)), [(p.file_entry("q", data), data)])


def finish(job: Job) -> None:
    """As if the task ran and wrote its output (the launcher's snapshot after it)."""
    assert job.exec_dir is not None
    Path(job.exec_dir, "out").write_text(f"{job.task.process}\n")
    job.after = DirInfo.snapshot(job.exec_dir)


def outputs(ws: Workspace, job: Job) -> list[str]:
    entries, _blobs, notes = ws.collect(job)
    assert not notes
    return [e["path"] for e in entries]


def trash_entries(ws: Workspace) -> list[str]:
    """Directories in the trash's buckets now."""
    trash = Path(ws.work, TRASH_NAME)
    return [f"{bucket.name}/{d.name}" for bucket in sorted(trash.iterdir()) for d in bucket.iterdir()]


def test_each_task_gets_a_new_directory_and_the_old_one_goes_to_the_trash(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    try:
        first = prepare(ws, 0)
        first_dir = first.exec_dir
        assert first_dir is not None
        finish(first)
        Path(first_dir, "left-behind").write_text("x")
        assert outputs(ws, first) == ["out"]
        ws.discard(first)
        assert not os.path.lexists(first_dir)
        second = prepare(ws, 1)
        assert second.exec_dir is not None and second.exec_dir != first_dir
        assert sorted(os.listdir(second.exec_dir)) == ["db", "q", "run.sh"]
        assert Path(second.exec_dir, "q").read_bytes() == b"query 1"
        finish(second)
        assert outputs(ws, second) == ["out"]
        ws.discard(second)
        trash = ws.trash
        assert trash is not None
        trash.wait_empty()
        assert trash.waiting == 0 and trash_entries(ws) == []
        assert trash.removed_here == 0  # both went by the background
        assert Path(ws.home, "db").read_bytes() == b"common data"  # the cache's hard link survives
    finally:
        ws.cleanup()


def test_an_escaped_process_cannot_reach_a_later_tasks_directory(tmp_path: Path) -> None:
    """A process that left its task's process group writes on in its working directory and at
    its task's `_CONDOR_SCRATCH_DIR`: both land in the trash (its directory, renamed) or nowhere
    (removed), never among the next task's outputs."""
    ws = workspace(tmp_path)
    escaped = None
    try:
        first = prepare(ws, 0)
        first_dir = first.exec_dir
        assert first_dir is not None
        counter = tmp_path / "iterations"  # outside the work directory: how far it got
        script = (
            'i=0; while :; do i=$((i+1)); echo x > "leak.$i"; echo y > "$_CONDOR_SCRATCH_DIR/abs.$i"; '
            f"echo $i > {counter}; done"
        )
        escaped = subprocess.Popen(
            ["/bin/sh", "-c", script],
            cwd=first_dir,
            env=first.env,
            start_new_session=True,  # out of reach of the kill of the task's process group
            stderr=subprocess.DEVNULL,
        )

        def iterations() -> int:
            try:
                return int(counter.read_text() or 0)
            except (OSError, ValueError):
                return 0

        poll_until("the escaped process writing", lambda: iterations() > 10, timeout=60, poll=0.02)
        finish(first)
        assert first.env["_CONDOR_SCRATCH_DIR"] == first_dir
        ws.discard(first)
        second = prepare(ws, 1)
        assert second.exec_dir is not None
        start = iterations()
        poll_until("the escaped process going on", lambda: iterations() > start + 100, timeout=60, poll=0.02)
        finish(second)
        assert escaped.poll() is None  # still running all along
        assert outputs(ws, second) == ["out"]
        assert sorted(os.listdir(second.exec_dir)) == ["db", "out", "q", "run.sh"]
        assert not os.path.lexists(first_dir)  # not made again by its absolute writes
    finally:
        if escaped is not None:
            os.killpg(escaped.pid, signal.SIGKILL)
            escaped.wait()
        ws.cleanup()


def test_the_trash_is_bounded_in_directories_and_bytes(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    try:
        assert ws.trash is not None
        ws.trash.max_dirs = 3
        for process in range(40):
            job = prepare(ws, process)
            finish(job)
            ws.discard(job)
            assert len(trash_entries(ws)) <= 3  # on disk, whatever the thread has done so far
            assert ws.trash.waiting <= 3
        ws.trash.wait_empty()
        ws.trash.max_bytes = 100  # a task's own files over it: removed in place, at once
        job = prepare(ws, 99)
        finish(job)
        Path(job.exec_dir or "", "big").write_bytes(b"z" * 200)
        job.after = DirInfo.snapshot(job.exec_dir or "")
        exec_dir = job.exec_dir
        before = ws.trash.removed_here
        ws.discard(job)
        assert ws.trash.removed_here == before + 1
        assert exec_dir is not None and not os.path.lexists(exec_dir) and trash_entries(ws) == []
    finally:
        ws.cleanup()


def test_a_directory_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    try:
        job = prepare(ws, 0)
        assert job.exec_dir is not None
        finish(job)
        os.symlink(outside, Path(job.exec_dir, "link"))  # a symlink inside the directory
        exec_dir = job.exec_dir
        ws.discard(job)
        # the task's directory itself replaced by a symlink (a planted one at the next task's name)
        planted = Path(ws.work, "task-1.0")
        planted.symlink_to(outside)
        job = prepare(ws, 1)
        assert job.exec_dir == str(planted) and planted.is_dir() and not planted.is_symlink()
        finish(job)
        os.rename(job.exec_dir, Path(ws.work, "moved-away"))
        os.symlink(outside, job.exec_dir)
        ws.discard(job)
        assert ws.trash is not None
        ws.trash.wait_empty()
        assert (outside / "precious").read_text() == "keep" and sorted(os.listdir(outside)) == ["precious"]
        assert not os.path.lexists(exec_dir) and not os.path.lexists(planted)
        assert trash_entries(ws) == []
    finally:
        ws.cleanup()
    assert (outside / "precious").read_text() == "keep"


def test_cleanup_removes_the_trash_and_stops_its_thread(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    work = ws.work
    jobs = []
    for process in range(10):
        job = prepare(ws, process)
        finish(job)
        jobs.append(job)
    for job in jobs:
        ws.discard(job)
    trash = ws.trash
    assert trash is not None
    thread = trash._thread
    assert thread is not None
    ws.cleanup()
    assert not os.path.lexists(work)
    assert not thread.is_alive()
    assert ws.trash is None


def test_a_half_prepared_directory_goes_too(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    try:
        with pytest.raises(PrepareError, match="was not transferred"):
            ws.prepare(task(0, Path(ws.home)))  # no blob for its input `q`
        assert not os.path.lexists(Path(ws.work, "task-0.0"))
    finally:
        ws.cleanup()


def test_the_trash_removes_in_place_what_it_cannot_move(tmp_path: Path) -> None:
    work_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        trash = Trash(work_fd, max_dirs=0)
        (tmp_path / "a" / "b").mkdir(parents=True)
        (tmp_path / "a" / "b" / "f").write_text("x")
        trash.put("a")
        assert not (tmp_path / "a").exists() and trash.removed_here == 1
        trash.put("gone")  # nothing there: nothing to do
        trash.close()
    finally:
        os.close(work_fd)


def test_the_agent_runs_tasks_with_the_trash_in_a_real_launcher(tmp_path: Path) -> None:
    """The launcher's spawns (which change the working directory) beside the trash's thread."""
    ws = workspace(tmp_path)
    launcher = Launcher("h")
    launcher.start(ws.work)
    try:
        for process in range(30):
            job = prepare(ws, process)
            assert not launcher.submit(job)
            done: list[Job] = []

            def ended(done: list[Job] = done) -> list[Job]:
                done.extend(launcher.poll())
                return done

            poll_until("the task's end", ended, timeout=60, poll=0.01)
            assert done == [job] and job.result is not None and job.result.exit_code == 0
            assert outputs(ws, job) == ["out"]
            assert Path(job.exec_dir or "", "out").read_text() == f"{process}\n"
            ws.discard(job)
    finally:
        launcher.close()
        ws.cleanup()


def test_an_agent_sends_at_most_max_result_bytes_of_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master refuses a result whose files pass MAX_RESULT_BYTES in all: the agent leaves
    out the files past it (and says so), and sends the rest."""
    monkeypatch.setattr(p, "MAX_RESULT_BYTES", 100)
    ws = workspace(tmp_path)
    try:
        job = prepare(ws, 0)
        assert job.exec_dir is not None
        for name, size in (("a", 60), ("b", 50), ("c", 40)):
            Path(job.exec_dir, name).write_bytes(b"x" * size)
        job.after = DirInfo.snapshot(job.exec_dir)
        entries, blobs, notes = ws.collect(job)
        assert [e["path"] for e in entries] == ["a", "c"] and sum(map(len, blobs)) == 100
        assert len(notes) == 1 and notes[0].startswith("b: past the 100-byte limit")
    finally:
        ws.cleanup()


def test_stdout_and_stderr_are_the_last_files_a_result_past_its_limit_leaves_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTCondor always returns them; they were collected last, so the first left out."""
    monkeypatch.setattr(p, "MAX_RESULT_BYTES", 100)
    ws = workspace(tmp_path)
    try:
        job = prepare(ws, 0)
        assert job.exec_dir is not None
        job.task = p.Task(0, job.task.executable, job.task.initialdir, output="out.txt", error="err.txt")
        Path(job.exec_dir, "big").write_bytes(b"x" * 95)
        job.stdout, job.stderr = str(tmp_path / "so"), str(tmp_path / "se")
        Path(job.stdout).write_bytes(b"y" * 10)
        Path(job.stderr).write_bytes(b"z" * 10)
        job.after = DirInfo.snapshot(job.exec_dir)
        entries, _, notes = ws.collect(job)
        assert [e.get("kind") for e in entries] == ["stdout", "stderr"]
        assert len(notes) == 1 and notes[0].startswith("big: past the 100-byte limit")
    finally:
        ws.cleanup()


def test_private_inputs_leave_out_the_common_ones() -> None:
    plan = Plan(
        Path("/x/state"),
        None,
        None,
        "TRANSFER",
        {},
        ["db", "lib/"],
        None,
        {},  # type: ignore[arg-type]
    )
    spec = p.Task(0, "a", "/x", input="in.0", transfer_input_files=("db", "q.0", "lib/"))
    assert plan.private_inputs(spec) == ["q.0", "in.0"]
    spec = p.Task(1, "a", "/x", input="db", transfer_input_files=("q.1",))
    assert plan.private_inputs(spec) == ["q.1"]
    spec = p.Task(2, "a", "/x", input="q.2", transfer_input_files=("q.2",))
    assert plan.private_inputs(spec) == ["q.2"]


def test_the_plan_protects_every_tasks_inputs_executable_and_the_masters_files() -> None:
    """What place_outputs never overwrites for a task without transfer_output_files."""
    specs = {
        0: p.Task(0, "run.sh", "/x", input="in.0", transfer_input_files=("db", "http://h/u"), log="job.log"),
        1: p.Task(1, "/bin/sh", "/y", transfer_input_files=("q.1", "/abs/z"), output="o.1", error="/e/1"),
    }
    info = MasterInfo("m", "alice", 5, "job.sub", 0)
    plan = Plan(Path("/out/state"), info, None, "TRANSFER", specs, ["db"], None, {})  # type: ignore[arg-type]
    assert plan.protected_paths == {
        "/x/run.sh",
        "/x/in.0",
        "/x/db",
        "/x/job.log",
        "/bin/sh",
        "/y/q.1",
        "/abs/z",
        "/y/o.1",
        "/e/1",
        "/out",
        "/out/job.sub",
        "/out/state",
    }


def test_a_lying_agent_reaches_neither_the_event_log_nor_the_masters_directory(tmp_path: Path) -> None:
    """Review of the protected paths: a task's job event log (a forged 'terminated' event) and,
    with FILES_STYLE_MODE improved, the master's directory inside the initialdir (its agent
    secret, user requests, agent zipapp) were left open."""
    (tmp_path / "master.7").mkdir()
    kept = ["job.log", "master.7/agents.secret", "master.7/llic-agent-0123456789abcdef.pyz"]
    for name in kept:
        (tmp_path / name).write_text("original")
    spec = p.Task(0, str(tmp_path / "run.sh"), str(tmp_path), log="job.log")
    info = MasterInfo("7", "alice", 5, "master.7.sub", 0)
    plan = Plan(tmp_path / "master.7" / "master.7.state", info, None, "TRANSFER", {0: spec}, [], None, {})  # type: ignore[arg-type]

    def returned(*names: str) -> list[tuple[dict[str, object], bytes]]:
        return [(p.file_entry(name, b"evil"), b"evil") for name in names]

    with pytest.raises(OutputPlacementError) as condor:
        place_outputs(spec, returned("job.log", "new.out"), STYLE_CONDOR, protected=plan.protected_paths)
    with pytest.raises(OutputPlacementError) as improved:
        place_outputs(spec, returned(*kept[1:], "master.7/request.1.0.json"), STYLE_IMPROVED,
                      protected=plan.protected_paths)  # fmt: skip
    assert [path for path, _ in condor.value.errors] == ["job.log"]
    assert len(improved.value.errors) == 3
    assert all((tmp_path / name).read_text() == "original" for name in kept)
    assert not (tmp_path / "master.7" / "request.1.0.json").exists()
    assert (tmp_path / "new.out").read_bytes() == b"evil"  # a new file is placed
