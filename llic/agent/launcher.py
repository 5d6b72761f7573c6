"""The launcher thread: runs prepared tasks one at a time, in the order they came (seed §3.9.3).

Each task runs in its own session (process group) with stdin/stdout/stderr on its files, so the
agent can kill everything it started: the leftovers of a task that exits (condor kills the job's
processes too), and the running task when the agent must stop.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO

from .. import protocol
from ..files import DirInfo
from .workspace import Job


def tail(path: str | None, size: int = protocol.TAIL_SIZE) -> str:
    """The last `size` bytes of a file as text (undecodable bytes replaced); '' if unreadable."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            data = fh.read(size)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass  # nothing left, or not ours


class _LaunchError(Exception):
    """The task could not be started; the text goes into the result's `error`."""


class Launcher(threading.Thread):
    """Takes Jobs from `jobs` (None stops it), hands each finished Job to `done`."""

    def __init__(self, jobs: queue.Queue[Job | None], done: Callable[[Job], None], host: str) -> None:
        super().__init__(name="llic-launcher", daemon=True)
        self.jobs = jobs
        self.done = done
        self.host = host
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._current: tuple[int, int] | None = None  # the (process, attempt) running now
        self._cancelled: set[tuple[int, int]] = set()  # the master stopped these
        self._aborted = False

    def run(self) -> None:
        """Run queued jobs until told to stop; a job that raises is still reported, as a failed launch."""
        while True:
            job = self.jobs.get()
            if job is None or self._aborted:
                return
            try:
                self.run_job(job)
            except Exception as exc:  # never leave a task unreported: the agent would wait forever
                result = protocol.TaskResult(
                    job.task.process, job.task.attempt, protocol.STATUS_LAUNCH_FAILED
                )
                result.host = self.host
                result.error = f"agent error while running the task: {type(exc).__name__}: {exc}"
                job.result = result
            if self._aborted:
                return
            self.done(job)

    def cancel(self, key: tuple[int, int]) -> None:
        """The master stopped this task: kill it if it runs, skip it if it has not started."""
        with self._lock:
            self._cancelled.add(key)
            if self._current == key and self._proc is not None:
                _kill_group(self._proc.pid)

    def abort(self) -> None:
        """Stop now: kill the running task and everything it started; run nothing more."""
        with self._lock:
            self._aborted = True
            if self._proc is not None:
                _kill_group(self._proc.pid)
        self.jobs.put(None)

    def run_job(self, job: Job) -> None:
        """Run one task to its end and put its result on the communicator's queue."""
        task = job.task
        result = protocol.TaskResult(task.process, task.attempt, protocol.STATUS_OK, host=self.host)
        started = time.time()
        clock = time.monotonic()
        with self._lock:
            self._current = task.key
        try:
            proc = self._start(job)
        except _LaunchError as exc:
            result.status = protocol.STATUS_LAUNCH_FAILED
            result.error = str(exc)
        else:
            self._wait(proc)
            code = proc.returncode
            if code < 0:
                result.signal = -code
            else:
                result.exit_code = code
        result.started = started
        result.finished = time.time()
        result.run_time = max(0.0, time.monotonic() - clock)
        result.stdout_tail = tail(job.stdout)
        result.stderr_tail = tail(job.stderr)
        if job.exec_dir is not None:
            job.after = DirInfo.snapshot(job.exec_dir)
        job.result = result

    def _start(self, job: Job) -> subprocess.Popen[bytes]:
        """The running task, its stdio on its files; _LaunchError says which file or exec failed."""
        with contextlib.ExitStack() as files:

            def open_(path: str, mode: str, what: str) -> IO[bytes]:
                try:
                    return files.enter_context(open(path, mode))
                except OSError as exc:
                    raise _LaunchError(f"cannot open {what} {path}: {exc.strerror or exc}") from None

            stdin = open_(job.stdin or os.devnull, "rb", "input")
            stdout = open_(job.stdout, "wb", "output")
            stderr: IO[bytes] | int = (
                subprocess.STDOUT if job.stderr is None else open_(job.stderr, "wb", "error")
            )
            with self._lock:
                if self._aborted:
                    raise _LaunchError("the agent is stopping")
                if job.task.key in self._cancelled:
                    raise _LaunchError("cancelled by the master before it started")
                try:
                    self._proc = subprocess.Popen(
                        job.argv,
                        cwd=job.cwd,
                        env=job.env,
                        stdin=stdin,
                        stdout=stdout,
                        stderr=stderr,
                        close_fds=True,
                        start_new_session=True,
                    )
                except (OSError, ValueError) as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    raise _LaunchError(f"cannot start {job.argv[0]!r}: {reason}") from None
                return self._proc

    def _wait(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for the task, kill what it left running in its group, then reap it."""
        if hasattr(os, "waitid"):
            try:
                # WNOWAIT keeps the pid (and so the group id) ours until the group is killed
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass
        else:
            proc.wait()
        _kill_group(proc.pid)
        proc.wait()
        with self._lock:
            self._proc = None
            self._current = None
