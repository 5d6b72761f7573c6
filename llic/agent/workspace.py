"""Preparing tasks to run and collecting what they leave behind (seed §3.9.2: the communicator's part).

NFS modes: the task runs in its initialdir and reads and writes its files there; nothing travels.
TRANSFER modes: each task gets a new execution directory under the agent's scratch directory. The
executable and the common input files, transferred once by HTCondor next to the input file (the
cache), are hard-linked into it (copied if linking fails) and made read-only in the cache so that
a task cannot spoil them for the next one; the task's private inputs arrive as blobs with its
`task` message (or, for initial tasks, next to the input file). stdout/stderr are captured next to
the execution directory, not in it, and return as `stdout`/`stderr` blobs; the files the task
created or changed return as `file` blobs, chosen by `files.select_outputs` per files style.

A finished task's directory is renamed into the agent's trash directory (same file system, ~0.04
ms) and removed there by a background thread: while the disk is busy (as when workers' large
inputs arrive) `rmdir` waits 3-6 ms on an ext4 mounted with `discard` (~0.05 ms of CPU), more
than the rest of a short task's cycle, and the waits of parallel removals overlap. A process
that escaped its task's process group and goes on writing in its old directory writes into the
trash, never into a later task's directory (each task's is made anew). The trash holds at most
TRASH_DIRS directories and TRASH_BYTES of the tasks' own files; beyond that the agent removes
the directory itself, as before; what is left is removed when the agent ends.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import protocol
from ..files import STYLE_IMPROVED, DirInfo, UnsafePath, normalize_relpath, safe_join, select_outputs
from .inputfile import AgentInput

STDOUT_NAME = "_condor_stdout"
STDERR_NAME = "_condor_stderr"
CAPTURE = ""  # a stream with no file of its own: the launcher's capture file, for the result's tail
TRASH_DIRS = 64  # finished tasks' directories waiting for the background removal, at most
TRASH_BYTES = 256 << 20  # ... and the bytes of the tasks' own files in them (inputs and outputs)
TRASH_NAME = "trash"  # in the work directory, beside the tasks' (named task-P.A)
REMOVE_DEPTH = 64  # directory levels the trash descends, at most
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PrepareError(Exception):
    """The task cannot run here (missing input, unsafe name, disk trouble): a prepare_failed result."""


@dataclass
class Job:
    """A task ready for the launcher, and after it ran, its result."""

    task: protocol.Task
    cwd: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None  # None: /dev/null
    stdout: str = CAPTURE
    stderr: str | None = None  # None: merged into stdout (output == error); CAPTURE: for the tail only
    exec_dir: str | None = None  # TRANSFER modes only
    executable_name: str | None = None  # the linked executable, never sent back
    before: DirInfo | None = None
    after: DirInfo | None = None
    temporary: list[str] = field(default_factory=list)  # capture files removed after the result went
    input_bytes: int = 0  # TRANSFER modes: the private inputs written into exec_dir
    result: protocol.TaskResult | None = None

    @property
    def key(self) -> tuple[int, int]:
        """(process, attempt): which run of which task this is."""
        return self.task.key


def _resolve(iwd: str, name: str) -> str:
    return os.path.normpath(name if os.path.isabs(name) else os.path.join(iwd, name))


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _install(src: str, dst: str) -> None:
    """Put a cached file or directory into an execution directory without copying data if possible."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.isdir(src):
        shutil.copytree(src, dst, copy_function=_link_or_copy, dirs_exist_ok=True)
    else:
        _link_or_copy(src, dst)


def _chmod(path: str, set_bits: int = 0, clear_bits: int = 0o222) -> None:
    """Best effort: a cache file owned by someone else stays as it is."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            os.chmod(path, (stat.S_IMODE(st.st_mode) | set_bits) & ~clear_bits)
    except OSError:
        pass


def _read_only(path: str) -> None:
    """Protect a cached input: it is hard-linked into every execution directory."""
    if not os.path.isdir(path):
        _chmod(path)
        return
    for root, _dirs, names in os.walk(path):
        for name in names:
            _chmod(os.path.join(root, name))


def _remove_at(dir_fd: int, name: str, depth: int = 0) -> None:
    """Remove the entry `name` of the directory `dir_fd` (a tree, a file, a symlink: never
    followed), as far as possible; by fds all the way down (shutil.rmtree takes a `dir_fd` only
    from Python 3.11; the agent runs on 3.9). A tree deeper than REMOVE_DEPTH is left for the
    removal of the work directory at the agent's end."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return
    except OSError:
        pass  # a directory (EISDIR), or gone
    if depth > REMOVE_DEPTH:
        return
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)  # O_NOFOLLOW: a symlink is not followed
    except OSError:
        return
    try:
        for entry in os.listdir(fd):
            _remove_at(fd, entry, depth + 1)
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        pass


def _own_bytes(job: Job) -> int:
    """Bytes of a finished task's own files in its directory: what it created or changed, and its
    private inputs (the hard links of the cache take no room of their own)."""
    if job.after is None:
        return 0
    before = job.before.files if job.before is not None else {}
    own = sum(sig[0] for rel, sig in job.after.files.items() if before.get(rel) != sig)
    return own + job.input_bytes


class Trash:
    """Finished tasks' execution directories, moved out of the way by a rename and removed by a
    background thread (module doc). Two buckets (directories in the trash): the agent renames
    into one while the thread empties the other, then they swap, so that the thread's `rmdir`s,
    which hold their parent's lock for their ~3 ms, never hold up the agent's renames. At most
    `max_dirs` directories and `max_bytes` bytes wait; beyond that `put` removes a directory in
    place itself. Paths go through directory fds: task processes (same user) may rename or swap
    any path, and the launcher changes the process's working directory around each spawn."""

    def __init__(self, work_fd: int, max_dirs: int = TRASH_DIRS, max_bytes: int = TRASH_BYTES) -> None:
        self.work_fd = work_fd
        self.max_dirs = max_dirs
        self.max_bytes = max_bytes
        os.mkdir(TRASH_NAME, 0o700, dir_fd=work_fd)
        self.fd = os.open(TRASH_NAME, _DIR_FLAGS, dir_fd=work_fd)
        self.buckets: list[int] = []
        for name in ("0", "1"):
            os.mkdir(name, 0o700, dir_fd=self.fd)
            self.buckets.append(os.open(name, _DIR_FLAGS, dir_fd=self.fd))
        self.filling = 0  # the bucket `put` renames into; the thread empties the other
        self.dirs = [0, 0]  # directories waiting in each bucket
        self.bytes = [0, 0]  # ... and the bytes of their tasks' own files
        self.moved = 0  # directories renamed into the trash so far (the next one's name)
        self.removed_here = 0  # directories `put` removed itself (the trash was full)
        self._cond = threading.Condition()
        self._emptying = False  # the thread is emptying the bucket not filling
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def waiting(self) -> int:
        """Directories in the trash, not removed yet."""
        return self.dirs[0] + self.dirs[1]

    def put(self, name: str, size: int = 0) -> None:
        """Move the work directory's entry `name` (a task's directory; `size`: bytes of the task's
        own files in it) into the trash, to be removed in the background; removed in place at
        once when the trash is full or it cannot be moved. Gone already: nothing to do."""
        with self._cond:
            full = self.waiting >= self.max_dirs or sum(self.bytes) + size > self.max_bytes
            if not full:
                bucket = self.filling
                self.moved += 1
                try:
                    os.rename(name, str(self.moved), src_dir_fd=self.work_fd, dst_dir_fd=self.buckets[bucket])
                except FileNotFoundError:
                    return
                except OSError:  # e.g. the name taken, and filled, by someone else
                    full = True
                else:
                    self.dirs[bucket] += 1
                    self.bytes[bucket] += size
                    if not self._emptying:  # the thread is idle: it takes this bucket now
                        self._swap()
        if full:
            self.removed_here += 1
            _remove_at(self.work_fd, name)
        elif self._thread is None:
            self._start()

    def _swap(self) -> None:
        """(Holding the lock.) The thread is to empty the bucket filled so far; `put` fills the other."""
        self.filling = 1 - self.filling
        self._emptying = True
        self._cond.notify_all()

    def _start(self) -> None:
        # the thread takes no signal: the agent's handlers, and the stop signals it blocks around
        # a spawn, stay the main thread's (a new thread inherits the mask of the one starting it)
        self._thread = threading.Thread(target=self._run, name="llic-trash", daemon=True)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self._thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._emptying and not self._closing:
                    self._cond.wait()
                if not self._emptying:
                    return
                bucket = 1 - self.filling
            self._empty(bucket)
            with self._cond:
                self.dirs[bucket] = 0
                self.bytes[bucket] = 0
                self._emptying = False
                if self.dirs[self.filling]:  # filled meanwhile: that one next
                    self._swap()
                self._cond.notify_all()

    def _empty(self, bucket: int) -> None:
        fd = self.buckets[bucket]
        try:
            names = os.listdir(fd)
        except OSError:
            return
        for name in names:
            try:
                os.rmdir(name, dir_fd=fd)  # most tasks leave their directory empty of own files
            except OSError:
                _remove_at(fd, name)

    def wait_empty(self) -> None:
        """Until the background removal has caught up (for tests)."""
        with self._cond:
            while self.waiting and self._thread is not None and self._thread.is_alive():
                if not self._emptying:
                    self._swap()
                self._cond.wait(1.0)

    def close(self) -> None:
        """Stop the thread (it ends the bucket it empties), remove what is left, let go of the fds."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        for bucket in (0, 1):
            self._empty(bucket)
            os.close(self.buckets[bucket])
        self.dirs, self.bytes = [0, 0], [0, 0]
        self.buckets = []
        os.close(self.fd)
        self.fd = -1


class Workspace:
    """The agent's files: `home` (the cache HTCondor filled) and a private work directory in `scratch`."""

    def __init__(self, config: AgentInput, home: str, scratch: str, base_env: Mapping[str, str]) -> None:
        self.config = config
        self.home = os.path.abspath(home)
        self.scratch = os.path.abspath(scratch)
        self.base_env = dict(base_env)
        self.work = ""
        self.work_fd = -1
        self.trash: Trash | None = None  # TRANSFER modes

    def setup(self) -> None:
        """Create the work directory and check the cache; OSError/UnsafePath here are fatal."""
        self.work = tempfile.mkdtemp(prefix="llic-work-", dir=self.scratch)
        if not self.config.transfer:
            return
        self.work_fd = os.open(self.work, _DIR_FLAGS)
        self.trash = Trash(self.work_fd)
        for name in self.config.common_files:
            path = safe_join(self.home, name)
            if not os.path.exists(path):
                raise FileNotFoundError(f"common file {name!r} is missing from {self.home}")
            _read_only(str(path))
        if self.config.executable:
            exe = str(safe_join(self.home, self.config.executable))
            if not os.path.isfile(exe):
                raise FileNotFoundError(f"executable {self.config.executable!r} is missing from {self.home}")
            _chmod(exe, set_bits=0o555)

    def cleanup(self) -> None:
        """Remove the agent's scratch directory and everything tasks left in it (the trash too)."""
        if self.trash is not None:
            self.trash.close()
            self.trash = None
        if self.work_fd >= 0:
            os.close(self.work_fd)
            self.work_fd = -1
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)

    # -- preparing ----------------------------------------------------------------------------

    def prepare(
        self,
        task: protocol.Task,
        blobs: Iterable[tuple[Mapping[str, Any], bytes]] = (),
        initial_files: Iterable[tuple[str, str]] = (),
    ) -> Job:
        """A Job ready to launch, or PrepareError saying why the task cannot run here."""
        try:
            try:
                if self.config.transfer:
                    return self._prepare_transfer(task, list(blobs), list(initial_files))
                if list(blobs):
                    raise PrepareError("the master sent input files in an NFS mode")
                return self._prepare_nfs(task)
            except UnsafePath as exc:
                raise PrepareError(f"unsafe file name: {exc}") from None
            except OSError as exc:
                raise PrepareError(f"{exc.filename or 'preparing'}: {exc.strerror or exc}") from None
            except ValueError as exc:  # e.g. a NUL byte in a name
                raise PrepareError(str(exc)) from None
        except PrepareError:
            if self.config.transfer:
                self._drop(self._exec_dir(task))  # half-prepared: nothing to keep
            raise

    def _drop(self, exec_dir: str, size: int = 0) -> None:
        """A task's execution directory out of the way: into the trash, removed in the background."""
        if self.trash is not None:
            self.trash.put(os.path.basename(exec_dir), size)
        else:  # not set up (never in a running agent)
            shutil.rmtree(exec_dir, ignore_errors=True)

    def _exec_dir(self, task: protocol.Task) -> str:
        return os.path.join(self.work, f"task-{task.process}.{task.attempt}")

    def _env(self, task: protocol.Task, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The agent's environment, then the agent's additions, then the task's own (which win);
        the agent's own dict when there are neither (only read: posix_spawn's `env`)."""
        if not extra and not task.environment:
            return self.base_env
        env = dict(self.base_env)
        env.update(extra or {})
        env.update(task.environment)
        return env

    def _capture(self, job: Job, suffix: str) -> str:
        path = os.path.join(self.work, f"task-{job.task.process}.{job.task.attempt}.{suffix}")
        job.temporary.append(path)
        return path

    def _streams(self, job: Job, out: str | None, err: str | None) -> None:
        """stdout/stderr files; `out`/`err` are paths or None (captured for the tails only)."""
        job.stdout = out if out is not None else CAPTURE
        if err is not None and err == out:
            job.stderr = None  # condor merges the two streams when they name one file
        else:
            job.stderr = err if err is not None else CAPTURE

    def _prepare_nfs(self, task: protocol.Task) -> Job:
        iwd = task.initialdir
        if not os.path.isdir(iwd):
            raise PrepareError(f"initialdir {iwd} does not exist here")
        job = Job(task, cwd=iwd, env=self._env(task))
        if task.input:
            job.stdin = _resolve(iwd, task.input)
            if not os.path.isfile(job.stdin):
                raise PrepareError(f"input {task.input!r} not found in {iwd}")
        streams = []
        for name in (task.output, task.error):
            if name is None:
                streams.append(None)
                continue
            path = _resolve(iwd, name)
            parent = os.path.dirname(path)
            if self.config.files_style == STYLE_IMPROVED:
                os.makedirs(parent, exist_ok=True)
            elif not os.path.isdir(parent):
                raise PrepareError(f"directory {parent} for {name!r} does not exist")
            streams.append(path)
        self._streams(job, streams[0], streams[1])
        exe = task.executable
        if not os.path.isabs(exe) and os.path.exists(os.path.join(iwd, exe)):
            exe = os.path.join(iwd, exe)
        job.argv = [exe, *task.arguments]
        return job

    def _prepare_transfer(
        self,
        task: protocol.Task,
        blobs: list[tuple[Mapping[str, Any], bytes]],
        initial_files: list[tuple[str, str]],
    ) -> Job:
        exec_dir = self._exec_dir(task)
        if os.path.lexists(exec_dir):
            self._drop(exec_dir)  # whatever is there (a planted symlink: moved, not followed)
        os.mkdir(exec_dir, 0o700)
        job = Job(task, cwd=exec_dir, exec_dir=exec_dir)
        job.env = self._env(task, {"_CONDOR_SCRATCH_DIR": exec_dir})
        for name in self.config.common_files:
            _install(str(safe_join(self.home, name)), str(safe_join(exec_dir, name)))
        if self.config.executable:
            name = posixpath.basename(self.config.executable)
            exe = str(safe_join(exec_dir, name))
            _install(str(safe_join(self.home, self.config.executable)), exe)
            job.executable_name = name
            job.argv = [exe, *task.arguments]
        else:
            job.argv = [task.executable, *task.arguments]
        for src, rel in initial_files:
            dst = safe_join(exec_dir, rel)
            dst.parent.mkdir(parents=True, exist_ok=True)
            _install(str(safe_join(self.home, src)), str(dst))
        for entry, data in blobs:
            dst = safe_join(exec_dir, entry["path"])
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_symlink() or dst.exists():
                dst.unlink()  # never write through a cached hard link or a planted symlink
            with open(dst, "xb") as fh:
                fh.write(data)
            job.input_bytes += len(data)
            os.chmod(dst, int(entry.get("mode", 0o644)) & 0o777)
        for item in task.transfer_input_files:
            if "://" in item or item.endswith("/"):
                continue  # URLs and directory contents: nothing to check by name
            name = posixpath.basename(item)
            if not os.path.lexists(os.path.join(exec_dir, name)):
                raise PrepareError(f"input file {item!r} was not transferred")
        if task.input:
            job.stdin = os.path.join(exec_dir, posixpath.basename(task.input))
            if not os.path.isfile(job.stdin):
                raise PrepareError(f"input {task.input!r} was not transferred")
        # captured next to the execution directory when they go back as files, else for the tails
        out = self._capture(job, "stdout") if task.output else None
        if task.error and task.error == task.output:
            err = out
        else:
            err = self._capture(job, "stderr") if task.error else None
        self._streams(job, out, err)
        job.before = DirInfo.snapshot(exec_dir)
        return job

    # -- results ------------------------------------------------------------------------------

    def collect(self, job: Job) -> tuple[list[dict[str, Any]], list[bytes], list[str]]:
        """The output blobs of a finished TRANSFER task: (entries, blobs, notes about files left out),
        at most MAX_RESULT_BYTES in all (the master refuses more: it holds them in memory)."""
        entries: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        notes: list[str] = []
        total = [0]  # bytes of the blobs taken so far
        if job.exec_dir is None or job.before is None or job.after is None:
            return entries, blobs, notes

        def add(path: str, rel: str, kind: str) -> None:
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                notes.append(f"{rel.encode('utf-8', 'replace').decode()}: name is not UTF-8")
                return
            try:
                st = os.stat(path)
                if st.st_size > protocol.MAX_BLOB:
                    notes.append(f"{rel}: {st.st_size} bytes, over the {protocol.MAX_BLOB}-byte limit")
                    return
                room = protocol.MAX_RESULT_BYTES - total[0]
                data = b""
                if st.st_size <= room:
                    with open(path, "rb") as fh:
                        data = fh.read(min(room, protocol.MAX_BLOB) + 1)  # one still growing: no further
            except OSError as exc:
                notes.append(f"{rel}: {exc.strerror or exc}")
                return
            if st.st_size > room or len(data) > min(room, protocol.MAX_BLOB):
                limit = protocol.MAX_RESULT_BYTES
                notes.append(f"{rel}: past the {limit}-byte limit of a result's files (or still growing)")
                return
            total[0] += len(data)
            entries.append(protocol.file_entry(rel, data, mode=stat.S_IMODE(st.st_mode), kind=kind))
            blobs.append(data)

        exclude = [job.executable_name] if job.executable_name else []
        task = job.task
        # stdout and stderr first: HTCondor always returns them, so they are the last a result
        # past MAX_RESULT_BYTES leaves out
        if task.output:
            add(job.stdout, STDOUT_NAME, "stdout")
        if task.error and job.stderr is not None:
            add(job.stderr, STDERR_NAME, "stderr")
        for rel in select_outputs(
            job.before, job.after, self.config.files_style, task.transfer_output_files, exclude
        ):
            add(os.path.join(job.exec_dir, *rel.split("/")), normalize_relpath(rel), "file")
        return entries, blobs, notes

    def discard(self, job: Job) -> None:
        """Remove what the task left in the work directory once its result is sent (its
        directory: into the trash at once, removed in the background)."""
        if job.exec_dir:
            self._drop(job.exec_dir, _own_bytes(job))
            job.exec_dir = None  # dropped once, even if discarded again
        for path in job.temporary:
            try:
                os.unlink(path)
            except OSError:
                pass
