"""The launcher: runs prepared tasks one at a time, in the order they came (seed §3.9.3).

It runs in the agent's one thread, beside the communicator: a task is started with
`os.posix_spawn` (no thread, no fork of the Python process), and its end is noticed through
SIGCHLD, which Python writes to a wake-up socket the communicator's `select` watches next to the
master's socket (`fileno`). So a task is started, and the next one after it, without a hand-off
between threads, which cost more than the spawn itself in a flood of short tasks.

Each task runs in its own process group with stdin/stdout/stderr on its files, so the agent can
kill everything it started: the leftovers of a task that exits (condor kills the job's processes
too), and the running task when the agent must stop. The group stays in the agent's session
unless the agent has a controlling terminal (run by hand: a task then gets a session of its own,
away from the terminal's signals). HTCondor starts a job without one; and on Linux a new session
is a new scheduling autogroup (`sched_autogroup_enabled`), whose wake-ups cost every task ~2.5 ms
more on a loaded machine (a spawn-and-wait loop of `sleep 0.1` at load 8-10: 7.9 ms over the
sleep per task with a session each, 5.0 ms with a process group each). A stream that only feeds the
result's tail (no output/error file of its own, `workspace.CAPTURE`) goes to one of two capture
files the launcher keeps for the agent's life, emptied before each task.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import deque

from .. import protocol
from ..files import DirInfo
from .workspace import CAPTURE, Job


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


def _tail_fd(fd: int, size: int = protocol.TAIL_SIZE) -> tuple[str, int]:
    """The tail of a capture file, and how long the file is."""
    try:
        end = os.fstat(fd).st_size
        data = os.pread(fd, size, max(0, end - size)) if end else b""
    except OSError:
        return "", 1
    return data.decode("utf-8", errors="replace"), end


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass  # nothing left, or not ours


try:  # the C function: signal.pthread_sigmask turns every signal of the old mask into an enum
    from _signal import pthread_sigmask as _sigmask
except ImportError:  # pragma: no cover (not CPython)
    _sigmask = signal.pthread_sigmask


def _on_child(signum: int, frame: object) -> None:
    """SIGCHLD: nothing to do here; Python's wake-up fd tells the communicator's select."""


# The signals that stop the agent (HTCondor's SIGTERM on vacate or condor_rm, and the others a
# user or the starter may send): __main__ turns them into Stopped.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _LaunchError(Exception):
    """The task could not be started; the text goes into the result's `error`."""


class _Running:
    """The task being run: its process and when it started."""

    def __init__(self, job: Job, pid: int) -> None:
        self.job = job
        self.pid = pid
        self.started = time.time()
        self.clock = time.monotonic()


class Launcher:
    """Runs the Jobs given to `submit`, one at a time; `poll` returns those that finished."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.waiting: deque[Job] = deque()
        self.running: _Running | None = None
        self._aborted = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._old_wakeup = -1
        self._old_handler: object = None
        self._devnull = -1
        self._captures: tuple[int, int] = (-1, -1)
        self._written = [False, False]  # a capture file holds something: empty it before reuse
        self._home = -1
        self._started = False
        self._own_session = True  # each task a session of its own, else a process group (start)

    # -- life ---------------------------------------------------------------------------------

    def start(self, capture_dir: str) -> None:
        """Be told of children's ends (SIGCHLD; main thread only) and keep the capture files
        in `capture_dir`."""
        self._old_handler = signal.signal(signal.SIGCHLD, _on_child)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self._started = True
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self._captures = (
            os.open(os.path.join(capture_dir, "capture.stdout"), flags, 0o600),
            os.open(os.path.join(capture_dir, "capture.stderr"), flags, 0o600),
        )
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._home = os.open(".", os.O_RDONLY | os.O_CLOEXEC)
        self._own_session = _has_terminal()  # module doc

    def fileno(self) -> int:
        """Readable when a child may have ended: then call `poll`."""
        return self._wake_r.fileno()

    def close(self) -> None:
        """Stop (killing a running task) and let go of the signal, the wake-up socket, the files."""
        self.abort()
        if self._started:
            signal.set_wakeup_fd(self._old_wakeup)
            signal.signal(signal.SIGCHLD, self._old_handler)  # type: ignore[arg-type]
            self._started = False
        for fd in (*self._captures, self._devnull, self._home):
            if fd >= 0:
                os.close(fd)
        self._captures, self._devnull, self._home = (-1, -1), -1, -1
        self._wake_r.close()
        self._wake_w.close()

    def cancel(self, key: tuple[int, int]) -> list[Job]:
        """The master stopped this task: kill its process group if it runs (`poll` then reports
        it, killed); if it is still waiting, drop it and return it, answered as launch-failed.
        Either way its result goes back, as the agent's accounting expects."""
        running = self.running
        if running is not None and running.job.task.key == key:
            _kill_group(running.pid)
            return []
        for job in self.waiting:
            if job.task.key == key:
                self.waiting.remove(job)
                job.result = protocol.TaskResult(
                    key[0],
                    key[1],
                    protocol.STATUS_LAUNCH_FAILED,
                    host=self.host,
                    error="cancelled by the master before it started",
                )
                self._finish(job, None)
                return [job]
        return []  # finished already: its result is on its way

    def abort(self) -> None:
        """Stop now: kill the running task and everything it started; run nothing more."""
        self._aborted = True
        self.waiting.clear()
        running, self.running = self.running, None
        if running is not None:
            _kill_group(running.pid)
            try:
                os.waitpid(running.pid, 0)
            except ChildProcessError:
                pass

    # -- tasks --------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return self.running is None and not self.waiting

    def submit(self, job: Job) -> list[Job]:
        """Queue a prepared job (started at once when nothing runs); the jobs that could not be
        started meanwhile, with their results (launch_failed)."""
        self.waiting.append(job)
        return self._start_next()

    def poll(self) -> list[Job]:
        """The jobs that finished since the last call (with their results), in order; the next
        waiting job is started first, so the slot is not idle while results go back."""
        try:  # one read empties it (a byte per signal); a second would only find nothing
            while len(self._wake_r.recv(4096)) == 4096:
                pass
        except (BlockingIOError, InterruptedError):
            pass
        running = self.running
        if running is None:
            return self._start_next()
        if not _ended(running.pid):
            return []
        _kill_group(running.pid)
        try:
            _, status = os.waitpid(running.pid, 0)
        except ChildProcessError:
            status = None
        self.running = None
        job = running.job
        result = job.result = protocol.TaskResult(
            job.task.process, job.task.attempt, protocol.STATUS_OK, host=self.host
        )
        if status is None:
            result.status = protocol.STATUS_LAUNCH_FAILED
            result.error = "the task's process could not be waited for"
        elif os.WIFSIGNALED(status):
            result.signal = os.WTERMSIG(status)
        else:
            result.exit_code = os.WEXITSTATUS(status)
        self._finish(job, running)
        return [job, *self._start_next()]

    def _finish(self, job: Job, running: _Running | None) -> None:
        result = job.result
        assert result is not None
        result.started = running.started if running else time.time()
        result.finished = time.time()
        result.run_time = max(0.0, time.monotonic() - running.clock) if running else 0.0
        result.stdout_tail = self._tail(job.stdout, 0)
        result.stderr_tail = "" if job.stderr is None else self._tail(job.stderr, 1)
        if job.exec_dir is not None:
            job.after = DirInfo.snapshot(job.exec_dir)

    def _tail(self, path: str, which: int) -> str:
        if path != CAPTURE:
            return tail(path)
        text, size = _tail_fd(self._captures[which])
        self._written[which] = size > 0
        return text

    def _start_next(self) -> list[Job]:
        """Start waiting jobs until one runs; those that cannot start are returned, failed."""
        failed: list[Job] = []
        while self.running is None and self.waiting and not self._aborted:
            job = self.waiting.popleft()
            # A stop signal between the spawn and the bookkeeping would leave the task running
            # unknown to abort(): the signals wait (blocked) until the task is recorded.
            mask = _sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                self.running = _Running(job, self._spawn(job, mask))
            except _LaunchError as exc:
                job.result = protocol.TaskResult(
                    job.task.process,
                    job.task.attempt,
                    protocol.STATUS_LAUNCH_FAILED,
                    host=self.host,
                    error=str(exc),
                )
                self._finish(job, None)
                failed.append(job)
            finally:
                _sigmask(signal.SIG_SETMASK, mask)
        return failed

    def _open(self, path: str, flags: int, what: str, opened: list[int]) -> int:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise _LaunchError(f"cannot open {what} {path}: {exc.strerror or exc}") from None
        opened.append(fd)
        return fd

    def _spawn(self, job: Job, sigmask: set[int]) -> int:
        """The running task's pid, its stdio on its files, `sigmask` its signal mask (the agent's
        own before it blocked its stop signals); _LaunchError says which file or exec failed."""
        opened: list[int] = []
        try:
            write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            stdin = self._open(job.stdin, os.O_RDONLY, "input", opened) if job.stdin else self._devnull
            streams = []
            for path, which, what in ((job.stdout, 0, "output"), (job.stderr, 1, "error")):
                if path is None:  # merged into stdout, as condor does when both name one file
                    streams.append(streams[0])
                elif path == CAPTURE:
                    fd = self._captures[which]
                    if self._written[which]:  # a silent task (most) leaves nothing to empty
                        os.ftruncate(fd, 0)
                        os.lseek(fd, 0, os.SEEK_SET)
                        self._written[which] = False
                    streams.append(fd)
                else:
                    streams.append(self._open(path, write, what, opened))
            program = _program(job.argv[0], job.env)
            try:
                os.chdir(job.cwd)
            except OSError as exc:
                raise _LaunchError(f"cannot enter {job.cwd}: {exc.strerror or exc}") from None
            stdio = [
                (os.POSIX_SPAWN_DUP2, stdin, 0),
                (os.POSIX_SPAWN_DUP2, streams[0], 1),
                (os.POSIX_SPAWN_DUP2, streams[1], 2),
            ]
            try:
                if self._own_session:
                    return os.posix_spawn(
                        program, job.argv, job.env, file_actions=stdio, setsid=True, setsigmask=sigmask
                    )
                return os.posix_spawn(
                    program, job.argv, job.env, file_actions=stdio, setpgroup=0, setsigmask=sigmask
                )
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise _LaunchError(f"cannot start {job.argv[0]!r}: {reason}") from None
            finally:
                os.fchdir(self._home)
        finally:
            for fd in opened:
                os.close(fd)


def _has_terminal() -> bool:
    """This process has a controlling terminal (its tasks then get sessions of their own)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def _ended(pid: int) -> bool:
    """Has the task's process ended? It stays unreaped (waitid's WNOWAIT), so its pid, and with
    it the group id, stays ours until the group is killed; without waitid it is reaped here."""
    try:
        if hasattr(os, "waitid"):
            return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


def _program(name: str, env: dict[str, str]) -> str:
    """What to execute: a name with a slash as it is (relative to the task's directory), else
    the first file of that name on the task's PATH (as execvp looks, and Popen did); not found:
    the name itself, which then fails to start with ENOENT."""
    if "/" in name:
        return name
    for directory in os.get_exec_path(env):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return name
