"""The agent's launcher in this process: what the master's `cancel` does to a task it holds.

Launcher.cancel (issue 20) on the posix_spawn launcher: a running task's process group is killed
and the task reported by `poll`, killed; a task still waiting is dropped and answered at once as
launch-failed, without ever starting. Whole runs with the real agent are in
test_job_policy_driver.py.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.harness.sandbox import poll_until
from llic import protocol as p
from llic.agent.launcher import Launcher
from llic.agent.workspace import CAPTURE, Job


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher("test-host")
    launcher.start(str(tmp_path))  # SIGCHLD: pytest runs tests in the main thread
    try:
        yield launcher
    finally:
        launcher.close()  # kills whatever a failed test left running


def sh_job(process: int, script: str, cwd: Path) -> Job:
    task = p.Task(process=process, executable="/bin/sh", arguments=["-c", script], initialdir=str(cwd))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return Job(task, cwd=str(cwd), argv=["/bin/sh", "-c", script], env=env, stdout=CAPTURE, stderr=CAPTURE)


def finished(launcher: Launcher, reported: list[Job]) -> bool:
    reported.extend(launcher.poll())
    return launcher.idle


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_cancel_kills_the_running_task_and_its_process_group(launcher: Launcher, tmp_path: Path) -> None:
    job = sh_job(1, "sleep 300 & echo $! > bg.pid; wait", tmp_path)
    assert launcher.submit(job) == []
    assert launcher.running is not None and launcher.running.job is job
    bg = int(poll_until("the task's background sleep", lambda: (tmp_path / "bg.pid").read_text().strip()))

    assert launcher.cancel((1, 0)) == []  # running: killed, reported by poll like any ended task

    reported: list[Job] = []
    poll_until(
        "the cancelled task to be reported", lambda: finished(launcher, reported), timeout=60, poll=0.05
    )
    assert reported == [job]
    result = job.result
    assert result is not None and (result.process, result.attempt) == (1, 0)
    assert (result.status, result.signal, result.exit_code) == (p.STATUS_OK, signal.SIGKILL, None)
    poll_until(
        f"the task's background process {bg} to be killed", lambda: not _alive(bg), timeout=30, poll=0.05
    )


def test_cancel_drops_a_waiting_task_as_launch_failed_without_starting_it(
    launcher: Launcher, tmp_path: Path
) -> None:
    first = sh_job(1, "sleep 300", tmp_path)
    second = sh_job(2, "touch ran", tmp_path)
    assert launcher.submit(first) == []
    assert launcher.submit(second) == []
    assert list(launcher.waiting) == [second]

    assert launcher.cancel((2, 0)) == [second]  # answered at once: its result goes back now

    assert not launcher.waiting
    result = second.result
    assert result is not None and (result.process, result.attempt, result.host) == (2, 0, "test-host")
    assert result.status == p.STATUS_LAUNCH_FAILED
    assert result.error == "cancelled by the master before it started"
    assert launcher.running is not None and launcher.running.job is first  # the running one goes on

    assert launcher.cancel((1, 0)) == []
    reported: list[Job] = []
    poll_until("the first task to be reported", lambda: finished(launcher, reported), timeout=60, poll=0.05)
    assert reported == [first]
    assert not (tmp_path / "ran").exists()  # the cancelled task never started


def test_cancel_of_a_task_that_already_ended_changes_nothing(launcher: Launcher, tmp_path: Path) -> None:
    job = sh_job(1, "exit 7", tmp_path)
    launcher.submit(job)
    reported: list[Job] = []
    poll_until("the task to end", lambda: finished(launcher, reported), timeout=60, poll=0.05)
    assert launcher.cancel((1, 0)) == []
    assert reported == [job]
    assert job.result is not None and job.result.exit_code == 7


class _Stop(BaseException):
    """As the agent's Stopped: raised by the stop signal's handler."""


def test_a_stop_signal_right_after_the_spawn_finds_the_task_recorded(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM between posix_spawn and the launcher's bookkeeping used to leave the task running
    unknown to abort() (test_agent's SIGTERM test failed once under load): the signal now waits
    until the task is recorded, so closing the launcher kills it."""
    from llic.agent import launcher as launcher_module

    def stop(signum: int, _frame: object) -> None:
        raise _Stop(signum)

    recorded = launcher_module._Running

    def signalled_at_once(job: Job, pid: int) -> object:
        # arrives in the window the mask closes; sent to this thread, as the kernel delivers it
        # to the single-threaded agent (a process-directed kill could go to a thread an earlier
        # test left, which has it unblocked)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return recorded(job, pid)

    monkeypatch.setattr(launcher_module, "_Running", signalled_at_once)
    old = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(_Stop):
            launcher.submit(sh_job(0, "exec sleep 60", tmp_path))
    finally:
        signal.signal(signal.SIGTERM, old)
    assert launcher.running is not None, "the task was spawned but not recorded"
    pid = launcher.running.pid
    assert _alive(pid)
    launcher.close()
    poll_until("the task killed", lambda: not _alive(pid), timeout=10, poll=0.05)


@pytest.mark.parametrize("terminal", [False, True])
def test_a_task_runs_in_a_process_group_of_its_own_and_a_session_of_its_own_only_under_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    # HTCondor starts the agent without a controlling terminal: its tasks stay in its session
    # (a new session is a new scheduling autogroup, slower to wake on a loaded machine)
    monkeypatch.setattr("llic.agent.launcher._has_terminal", lambda: terminal)
    launcher = Launcher("test-host")
    launcher.start(str(tmp_path))
    try:
        job = sh_job(1, "echo $$ $(cut -d' ' -f5,6 /proc/$$/stat) > ids", tmp_path)
        assert launcher.submit(job) == []
        reported: list[Job] = []
        poll_until("the task to end", lambda: finished(launcher, reported), timeout=60, poll=0.05)
    finally:
        launcher.close()
    assert reported == [job] and job.result is not None and job.result.exit_code == 0
    pid, group, session = (int(x) for x in (tmp_path / "ids").read_text().split())
    assert group == pid  # killpg(pid) reaches it and whatever it leaves
    assert (session == pid) is terminal and (session == os.getsid(0)) is not terminal
