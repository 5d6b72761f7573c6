"""The agent zipapp end to end, against a small master written here on protocol.py and files.py.

The agent runs as `/usr/bin/python3 -I agent.pyz ...`: the system Python, isolated from the venv,
so these tests also prove the archive is self-contained. No HTCondor involved. Every test that
runs the agent runs it twice: on this machine's python3, and on Debian 11's python3.9 (the oldest
Python the agent claims to support) in deploy/sandbox's cached bullseye root; the second needs
root to provision and enter that root, so it carries the htcondor mark (make test, as root).
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deploy.harness.sandbox import SANDBOX, poll_until, sandbox_cli
from llic import agent_build
from llic import protocol as p
from llic.agent.inputfile import AgentInput, InitialTask, InputFileError, parse_input
from llic.files import place_outputs

SYSTEM_PYTHON = "/usr/bin/python3"
SECRET = bytes.fromhex("11" * 32)
JOB_SH = """#!/bin/sh
# a job: reads a common input, its private input (also its stdin), writes top-level and nested outputs
set -e
{ cat common.txt; cat; echo "X=$X"; } > "out.$P.txt"
mkdir -p "sub/$P"
echo nested > "sub/$P/n.txt"
echo "stdout of $P"
echo "stderr of $P" >&2
exit 3
"""

pytestmark = pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs a system python3")


@pytest.fixture(scope="session")
def python39(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Debian 11's python3.9, the oldest Python the agent supports, as a command prefix:
    `deploy/sandbox agent-python -- ARGS` runs it inside the cached bullseye root, in the
    caller's directory (under /tmp, shared with the root) and on this machine's network, so it
    reaches a master on loopback. Provisioned here when missing (about a minute, once). Never
    skipped: without it the claim goes unchecked, so the tests that need it fail."""
    if os.geteuid() != 0:
        pytest.fail(
            "the agent's Python 3.9 comes from deploy/sandbox's Debian 11 root, which needs root: "
            "run 'make test' as root, or 'make test-unit' for the tests that do not need it"
        )
    res = sandbox_cli("provision-agent-root", check=False)
    if res.returncode != 0:
        pytest.fail(f"no Python 3.9 for the agent: deploy/sandbox provision-agent-root failed:\n{res.stderr}")
    command = [str(SANDBOX), "agent-python", "--"]
    probe = subprocess.run(
        [*command, "-I", "-c", "import sys; print(*sys.version_info[:2])"],
        cwd=tmp_path_factory.getbasetemp(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (probe.returncode, probe.stdout) == (0, "3 9\n"), probe.stderr
    return command


@pytest.fixture(params=["system", pytest.param("3.9", marks=pytest.mark.htcondor)])
def python(request: pytest.FixtureRequest) -> list[str]:
    """The interpreter the agent runs on: this machine's python3, then Debian 11's python3.9."""
    if request.param == "system":
        return [SYSTEM_PYTHON]
    command: list[str] = request.getfixturevalue("python39")
    return command


@pytest.fixture(scope="session")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_build.build_agent(tmp_path_factory.mktemp("agent-build"))


# ---------------------------------------------------------------------------------------------
# a master for tests


@dataclass
class FakeMaster:
    """The chef's side of seed §3.9.4 in one thread: keep `window` tasks at the agent, collect results."""

    tasks: list[p.Task]
    window: int
    style: str = "condor"
    transfer: bool = False
    common_files: tuple[str, ...] = ()
    initial: list[p.Task] = field(default_factory=list)
    secret: bytes = SECRET
    master_id: str = "m1"
    # misbehaviours, to see the agent refuse them
    extra_frames: Callable[[p.Task], bytes] | None = None
    over_window: bool = False
    refuse: bool = False
    hang_up_after: int | None = None
    # bulk returns: announced in the welcome; a large result is granted only once every other
    # outstanding result is in (so the test sees the small ones pass it), one at a time
    bulk_threshold: int | None = None
    bulk_rate: int | None = None  # rate_bps in bulk_go, as on a limited subnet
    listener: socket.socket | None = None  # where to listen (default: a free port)
    batch: bool = False  # protocol version 2: tasks in `tasks` batches, results taken in batches
    welcome_window: int | None = None  # the welcome's window, when above the `window` kept there

    def __post_init__(self) -> None:
        if self.listener is None:
            self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(30)
        self.port = self.listener.getsockname()[1]
        self.results: dict[tuple[int, int], p.TaskResult] = {}
        self.files: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self.max_outstanding = 0
        self.arrivals: list[tuple[str, int]] = []  # (message type, process) in order
        self.bulk_seconds: dict[tuple[int, int], float] = {}  # from bulk_go to the whole result
        self.outcome = "not started"
        self.outstanding: set[tuple[int, int]] = set()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.listener.accept()
            conn.settimeout(30)
            with conn:
                self._serve(conn)
        except (ConnectionResetError, BrokenPipeError):
            # the agent went away (a fatal error on its side, a signal): what the test checks
            self.outcome = f"agent closed with {len(self.outstanding)} outstanding"
        except BaseException as exc:  # a protocol violation seen here, a timeout: join() raises it
            self.error = exc
            self.outcome = f"error: {exc!r}"
        finally:
            self.listener.close()

    def _task_files(self, task: p.Task) -> tuple[list[dict[str, Any]], list[bytes]]:
        """TRANSFER modes: the task's private inputs, read from its initialdir, at their base names."""
        if not self.transfer:
            return [], []
        names = [n for n in task.transfer_input_files if n not in self.common_files]
        entries, blobs = [], []
        for name in names:
            data = (Path(task.initialdir) / name).read_bytes()
            entries.append(p.file_entry(os.path.basename(name), data))
            blobs.append(data)
        return entries, blobs

    def _serve(self, conn: socket.socket) -> None:
        decoder = p.Decoder({p.HELLO})
        hello = p.recv_message(conn, decoder)
        assert hello is not None
        assert hello.body["master"] == self.master_id and hello.body["version"] == p.PROTOCOL_VERSION
        agent = hello.body["agent"]
        nonce_m = p.make_nonce()
        mac_m = p.master_mac(self.secret, hello.body["nonce_a"], agent)
        p.send_message(conn, {"t": "challenge", "nonce_m": nonce_m, "mac_m": mac_m})
        decoder.allowed = frozenset({p.AUTH})
        auth = p.recv_message(conn, decoder)
        if auth is None:
            self.outcome = "agent hung up in the handshake"
            return
        if self.refuse or not p.check_agent_mac(self.secret, nonce_m, agent, auth.body["mac_a"]):
            p.send_message(conn, {"t": "refused", "reason": "not one of my agents"})
            self.outcome = "refused"
            return
        welcome: dict[str, Any] = {"t": "welcome", "window": self.welcome_window or self.window}
        if self.bulk_threshold is not None:
            welcome["bulk_threshold"] = self.bulk_threshold
        if self.batch:
            welcome["batch"] = True
        p.send_message(conn, welcome)
        decoder.allowed = frozenset({p.RESULT, p.RESULTS, p.BULK_READY})
        parked: list[tuple[int, int]] = []
        going: tuple[int, int] | None = None
        by_key = {t.key: t for t in [*self.initial, *self.tasks]}
        outstanding = self.outstanding
        outstanding.update(t.key for t in self.initial)
        pending = collections.deque(self.tasks)
        sent_no_more = False
        sent = 0
        while outstanding or not sent_no_more:
            self.max_outstanding = max(self.max_outstanding, len(outstanding))
            if self.hang_up_after is not None and sent >= self.hang_up_after:
                self.outcome = "hung up"
                return
            if self.batch and pending and len(outstanding) < self.window and not self.transfer:
                room = self.window - len(outstanding)
                batch = [pending.popleft() for _ in range(min(room, len(pending)))]
                p.send_message(conn, {"t": "tasks", "tasks": batch})
                outstanding.update(t.key for t in batch)
                sent += len(batch)
                continue
            if pending and (len(outstanding) < self.window or self.over_window):
                task = pending.popleft()
                entries, blobs = self._task_files(task)
                msg: dict[str, Any] = {"t": "task", "task": task}
                if entries:
                    msg["files"] = entries
                if self.extra_frames is not None:
                    conn.sendall(self.extra_frames(task))
                else:
                    p.send_message(conn, msg, blobs)
                outstanding.add(task.key)
                sent += 1
                continue
            if not pending and not sent_no_more:
                p.send_message(conn, {"t": "no_more_tasks"})
                sent_no_more = True
                continue
            if parked and going is None and outstanding <= set(parked):
                going = parked.pop(0)
                go: dict[str, Any] = {"t": "bulk_go", "process": going[0], "attempt": going[1]}
                if self.bulk_rate is not None:
                    go["rate_bps"] = self.bulk_rate
                p.send_message(conn, go)
                go_at = time.monotonic()
                continue
            msg_in = p.recv_message(conn, decoder)
            if msg_in is None:
                self.outcome = f"agent closed with {len(outstanding)} outstanding"
                return
            if msg_in.type == p.RESULTS:
                for result in msg_in.results():
                    self.arrivals.append((p.RESULTS, result.process))
                    assert result.key in outstanding, result
                    outstanding.discard(result.key)
                    self.results[result.key] = result
                    self.files[result.key] = []
                continue
            if msg_in.type == p.BULK_READY:
                key = (msg_in.body["process"], msg_in.body["attempt"])
                assert key in outstanding and msg_in.body["size"] > (self.bulk_threshold or 0)
                self.arrivals.append((p.BULK_READY, key[0]))
                parked.append(key)
                continue
            result = msg_in.result()
            self.arrivals.append((p.RESULT, result.process))
            if result.key == going:
                self.bulk_seconds[going] = time.monotonic() - go_at
                going = None
            assert result.key in outstanding, result
            outstanding.discard(result.key)
            self.results[result.key] = result
            self.files[result.key] = msg_in.files
            if msg_in.blobs:
                place_outputs(by_key[result.key], msg_in.file_pairs(), self.style)
        # the agent leaves on its own once everything is reported
        self.outcome = "done" if p.recv_message(conn, decoder) is None else "agent kept talking"

    def join(self) -> None:
        """Wait for the master's thread and raise what went wrong in it (a protocol violation it
        saw, a timeout): no test passes while its master saw the agent misbehave."""
        self.thread.join(60)
        assert not self.thread.is_alive(), f"the fake master is still running ({self.outcome})"
        if self.error is not None:
            raise AssertionError(f"the fake master failed: {self.error!r}") from self.error


def agent_input(mode: str, style: str, **over: Any) -> AgentInput:
    values: dict[str, Any] = {
        "master": "m1",
        "secret": SECRET,
        "window": 2,
        "mode": mode,
        "files_style": style,
        "connect_timeout": 5.0,
    }
    values.update(over)
    return AgentInput(**values)


def run_agent(
    pyz: Path,
    home: Path,
    port: int | str,
    config: AgentInput | dict[str, Any],
    python: Sequence[str] = (SYSTEM_PYTHON,),
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return finish_agent(start_agent(pyz, home, port, config, python), timeout)


def start_agent(
    pyz: Path,
    home: Path,
    port: int | str,
    config: AgentInput | dict[str, Any],
    python: Sequence[str] = (SYSTEM_PYTHON,),
) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    input_file = home / "agent.in"
    input_file.write_text(json.dumps(config.to_json() if isinstance(config, AgentInput) else config))
    input_file.chmod(0o600)
    return subprocess.Popen(
        [*python, "-I", str(pyz), "127.0.0.1", str(port), "a1", str(input_file)],
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_agent(proc: subprocess.Popen[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Wait for an agent started with start_agent (killed after `timeout`, which then raises)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# ---------------------------------------------------------------------------------------------
# every mode and files style


def make_tasks(
    submit: Path, agent_home: Path, mode: str, style: str, n: int
) -> tuple[list[p.Task], AgentInput]:
    transfer = mode in p.TRANSFER_MODES
    per_dir = mode.endswith("INITIALDIR")
    (submit / "job.sh").write_text(JOB_SH)
    (submit / "job.sh").chmod(0o755)
    tasks = []
    for proc in range(n):
        iwd = submit / f"run{proc}" if per_dir else submit
        iwd.mkdir(exist_ok=True)
        (iwd / "common.txt").write_text("common\n")
        (iwd / f"in.{proc}").write_text(f"input {proc}\n")
        if style == "condor" and not transfer:
            (iwd / "logs").mkdir(exist_ok=True)  # condor style creates no directories
        tasks.append(
            p.Task(
                process=proc,
                executable="job.sh" if transfer else str(submit / "job.sh"),
                initialdir=str(iwd),
                environment={"P": str(proc), "X": f"x{proc}"},
                input=f"in.{proc}",
                output=f"logs/{proc}.out",
                error=f"logs/{proc}.err",
                transfer_input_files=["common.txt", f"in.{proc}"] if transfer else [],
            )
        )
    config = agent_input(mode, style)
    if transfer:
        # HTCondor brings the executable (and, without initialdir, the common input) with the agent
        shutil.copy(submit / "job.sh", agent_home / "job.sh")
        config.executable = "job.sh"
        if not per_dir:
            shutil.copy(submit / "common.txt", agent_home / "common.txt")
            config.common_files = ["common.txt"]
    # the first two tasks travel in the input file; their private inputs come with the agent
    for task in tasks[:2]:
        files: list[tuple[str, str]] = []
        if transfer:
            for name in task.transfer_input_files:
                if name in config.common_files:
                    continue
                here = f"init-{task.process}/{name}"
                (agent_home / here).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(Path(task.initialdir) / name, agent_home / here)
                files.append((here, name))
        config.initial_tasks.append(InitialTask(task, files))
    return tasks, config


@pytest.mark.parametrize("style", ["condor", "improved"])
@pytest.mark.parametrize("mode", p.MODES)
def test_agent_runs_tasks_in_every_mode_and_style(
    pyz: Path, tmp_path: Path, python: list[str], mode: str, style: str
) -> None:
    submit, home = tmp_path / "submit", tmp_path / "agent"
    submit.mkdir()
    home.mkdir()
    tasks, config = make_tasks(submit, home, mode, style, n=6)
    transfer = mode in p.TRANSFER_MODES
    master = FakeMaster(
        tasks[2:],
        window=config.window,
        style=style,
        transfer=transfer,
        common_files=tuple(config.common_files),
        initial=tasks[:2],
    )
    proc = run_agent(pyz, home, master.port, config, python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert master.outcome == "done"
    assert master.max_outstanding == config.window  # the window was filled, never exceeded
    assert sorted(master.results) == [(i, 0) for i in range(6)]  # initial tasks included
    for task in tasks:
        i, iwd = task.process, Path(task.initialdir)
        result = master.results[task.key]
        assert (result.status, result.exit_code, result.signal) == ("ok", 3, None), result
        assert result.stdout_tail == f"stdout of {i}\n"
        assert result.stderr_tail == f"stderr of {i}\n"
        assert result.run_time > 0 and result.host and result.finished >= result.started  # type: ignore[operator]
        assert (iwd / f"out.{i}.txt").read_text() == f"common\ninput {i}\nX=x{i}\n"
        if not transfer:  # written in place
            assert (iwd / f"sub/{i}/n.txt").exists()
            assert (iwd / f"logs/{i}.out").read_text() == f"stdout of {i}\n"
            assert (iwd / f"logs/{i}.err").read_text() == f"stderr of {i}\n"
            assert master.files[task.key] == []
        elif style == "condor":  # top-level files only, output/error flattened into the iwd
            assert not (iwd / "sub").exists() and not (iwd / "n.txt").exists()
            assert (iwd / f"{i}.out").read_text() == f"stdout of {i}\n"
            assert (iwd / f"{i}.err").read_text() == f"stderr of {i}\n"
            assert not (iwd / "logs").exists()
        else:  # improved: subdirectories kept, output/error directories created
            assert (iwd / f"sub/{i}/n.txt").read_text() == "nested\n"
            assert (iwd / f"logs/{i}.out").read_text() == f"stdout of {i}\n"
            assert (iwd / f"logs/{i}.err").read_text() == f"stderr of {i}\n"
        if transfer:
            sent = {(e["kind"], e["path"]) for e in master.files[task.key]}
            # inputs, the executable and the common file did not travel back: they did not change
            assert not {("file", "job.sh"), ("file", "common.txt"), ("file", f"in.{i}")} & sent
            assert ("file", f"out.{i}.txt") in sent
    assert not list(home.glob("llic-work-*"))  # the agent cleaned up after itself


def test_executable_and_common_files_are_linked_from_the_cache(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """The cached copies are reused (same inode), not copied or transferred per task."""
    submit, home = tmp_path / "submit", tmp_path / "agent"
    submit.mkdir()
    home.mkdir()
    (home / "common.txt").write_text("common\n")
    (home / "job.sh").write_text('#!/bin/sh\nstat -c %i "$0" common.txt\n')
    tasks = [p.Task(process=i, executable="job.sh", initialdir=str(submit)) for i in range(3)]
    config = agent_input("TRANSFER", "condor", executable="job.sh", common_files=["common.txt"])
    master = FakeMaster(tasks, window=2, transfer=True, common_files=("common.txt",))
    proc = run_agent(pyz, home, master.port, config, python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done"
    cached = f"{(home / 'job.sh').stat().st_ino}\n{(home / 'common.txt').stat().st_ino}\n"
    assert [master.results[t.key].stdout_tail for t in tasks] == [cached] * 3
    assert (home / "common.txt").stat().st_mode & 0o222 == 0  # read-only: a task cannot spoil it


# ---------------------------------------------------------------------------------------------
# exit codes, signals, failures


def sh(proc: int, script: str, iwd: Path, **over: Any) -> p.Task:
    return p.Task(process=proc, executable="/bin/sh", arguments=["-c", script], initialdir=str(iwd), **over)


def test_exit_codes_signals_and_failures_come_back_in_results(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    home = tmp_path / "agent"
    tasks = [
        sh(0, "echo before; kill -TERM $$", tmp_path),
        sh(1, "exit 0", tmp_path, input="missing.txt"),  # cannot be prepared
        p.Task(process=2, executable="/nonexistent/prog", initialdir=str(tmp_path)),  # cannot start
        sh(
            3,
            'echo "$LLIC_T $HOME_SEEN" > env.out',
            tmp_path,
            environment={"LLIC_T": "t3", "HOME_SEEN": "yes"},
        ),
        sh(4, "head -c 10000 /dev/zero | tr '\\0' x; exit 7", tmp_path),
        sh(5, "sleep 60 & echo $! > bg.pid; exit 0", tmp_path),  # leftovers are killed
    ]
    master = FakeMaster(tasks, window=3)
    proc = run_agent(pyz, home, master.port, agent_input("NFS", "condor"), python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done"
    r = master.results
    assert (r[0, 0].status, r[0, 0].exit_code, r[0, 0].signal) == ("ok", None, signal.SIGTERM)
    assert r[0, 0].stdout_tail == "before\n"
    assert r[1, 0].status == "prepare_failed" and "missing.txt" in (r[1, 0].error or "")
    assert r[2, 0].status == "launch_failed" and "/nonexistent/prog" in (r[2, 0].error or "")
    assert (r[3, 0].status, r[3, 0].exit_code) == ("ok", 0)
    assert (tmp_path / "env.out").read_text() == "t3 yes\n"
    assert r[4, 0].exit_code == 7 and r[4, 0].stdout_tail == "x" * p.TAIL_SIZE
    assert r[5, 0].exit_code == 0
    bg = int((tmp_path / "bg.pid").read_text())
    poll_until(
        f"the task's leftover process {bg} to be killed", lambda: not _alive(bg), timeout=30, poll=0.05
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_transfer_prepare_failure_when_an_input_is_missing(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    task = sh(0, "cat in.0", tmp_path, transfer_input_files=["in.0"])  # the master sends nothing
    ok = sh(1, "echo fine > fine.txt", tmp_path)
    master = FakeMaster([task, ok], window=2)
    proc = run_agent(pyz, tmp_path / "agent", master.port, agent_input("TRANSFER", "condor"), python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done"
    assert master.results[0, 0].status == "prepare_failed"
    assert "in.0" in (master.results[0, 0].error or "")
    assert master.results[1, 0].exit_code == 0
    assert [e["path"] for e in master.files[1, 0]] == ["fine.txt"]


def test_only_initial_tasks(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    """A master with nothing more to send: the agent runs its initial tasks and leaves."""
    initial = [sh(i, f"echo {i} > init.{i}", tmp_path) for i in range(3)]
    config = agent_input("NFS", "improved", window=3, initial_tasks=[InitialTask(t) for t in initial])
    master = FakeMaster([], window=3, initial=initial)
    proc = run_agent(pyz, tmp_path / "agent", master.port, config, python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done"
    assert sorted(master.results) == [(0, 0), (1, 0), (2, 0)]
    assert [(tmp_path / f"init.{i}").read_text() for i in range(3)] == ["0\n", "1\n", "2\n"]


# ---------------------------------------------------------------------------------------------
# refusals and fatal errors: one clear line on stderr, exit 1


def fatal_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("llic-agent: fatal: ")
    return lines[0]


def test_agent_with_the_wrong_secret_does_not_talk_to_the_master(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    master = FakeMaster([sh(0, "touch ran", tmp_path)], window=1)
    config = agent_input("NFS", "condor", secret=bytes(32))
    line = fatal_line(run_agent(pyz, tmp_path / "agent", master.port, config, python=python))
    master.join()
    assert "failed to authenticate" in line
    assert master.outcome == "agent hung up in the handshake"  # it never sent its proof
    assert not (tmp_path / "ran").exists()


def test_master_with_the_wrong_secret_is_refused(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    master = FakeMaster([sh(0, "touch ran", tmp_path)], window=1, secret=b"x" * 32)
    line = fatal_line(
        run_agent(pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor"), python=python)
    )
    master.join()
    assert "failed to authenticate" in line
    assert master.outcome == "agent hung up in the handshake"  # it saw the master's proof fail
    assert not (tmp_path / "ran").exists()


def test_agent_refused_by_the_master(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    master = FakeMaster([], window=1, refuse=True)
    line = fatal_line(
        run_agent(pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor"), python=python)
    )
    master.join()
    assert "refused this agent: not one of my agents" in line
    assert master.outcome == "refused"


def free_port_pair() -> tuple[socket.socket, socket.socket]:
    """Two listening sockets on consecutive loopback ports: a range of ports to scan."""
    for _ in range(200):
        first = socket.create_server(("127.0.0.1", 0))
        port = first.getsockname()[1]
        if port >= 65535:
            first.close()
            continue
        try:
            return first, socket.create_server(("127.0.0.1", port + 1))
        except OSError:
            first.close()
    raise AssertionError("no two consecutive free ports on loopback")


class OtherMaster(threading.Thread):
    """A master of another id on a port of the range: it refuses every hello, naming itself."""

    def __init__(self, listener: socket.socket) -> None:
        super().__init__(daemon=True)
        self.listener = listener
        self.listener.settimeout(30)
        self.hellos: list[str] = []
        self.start()

    def run(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                hello = p.recv_message(conn, p.Decoder({p.HELLO}))
                assert hello is not None
                self.hellos.append(hello.body["master"])
                p.send_message(conn, {"t": "refused", "reason": "this is master m2", "master": "m2"})
        finally:
            self.listener.close()


def test_agent_sends_results_in_batches_to_a_master_that_takes_them(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """Protocol version 2: offered batches, the agent answers every result without files in
    `results` messages (none alone), each task's result exactly once."""
    tasks = [sh(i, f"exit {i % 4}", tmp_path) for i in range(24)]
    master = FakeMaster(tasks, window=4, batch=True)
    proc = run_agent(
        pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor", window=4), python=python
    )
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done"
    assert {kind for kind, _ in master.arrivals} == {p.RESULTS}
    assert sorted(process for _, process in master.arrivals) == list(range(24))
    assert {key: r.exit_code for key, r in master.results.items()} == {(i, 0): i % 4 for i in range(24)}


def test_agent_serves_a_master_that_keeps_fewer_tasks_than_its_welcome_names(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """A master that grows the window while tasks are short names the most in its welcome and
    keeps fewer: the agent serves it as any other, each result exactly once."""
    tasks = [sh(i, f"exit {i % 4}", tmp_path) for i in range(24)]
    master = FakeMaster(tasks, window=4, batch=True, welcome_window=16)
    proc = run_agent(
        pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor", window=4), python=python
    )
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done" and master.max_outstanding == 4
    assert sorted(process for _, process in master.arrivals) == list(range(24))
    assert {key: r.exit_code for key, r in master.results.items()} == {(i, 0): i % 4 for i in range(24)}


def test_results_wait_while_a_third_of_what_the_master_keeps_here_is_queued() -> None:
    """The batching rule counts against what the master fills to (the tasks held after its last
    `tasks`), not the welcome's window: against 16 (the most) with 4 kept, every result would go
    alone. The rule alone, on an agent whose launcher is a stand-in (no process runs)."""
    from types import SimpleNamespace

    from llic.agent.communicator import UNSENT_BYTES, Agent

    agent = Agent.__new__(Agent)
    agent.window, agent.filled, agent.no_more, agent.held = 16, 16, False, {}
    agent.unsent, agent.unsent_since, agent.unsent_bytes = [object()], time.monotonic(), 0
    agent._accept = lambda task, blobs, initial: agent.held.__setitem__(task.key, None)  # type: ignore[method-assign]
    decoder = p.Decoder({p.TASKS})
    for frame in p.encode_frames({"t": p.TASKS, "tasks": [sh(i, "true", Path("/")) for i in range(4)]}):
        decoder.feed(frame)
    agent._handle(next(iter(decoder)))
    assert agent.filled == 4  # what the master keeps here
    agent.launcher = SimpleNamespace(running=object(), waiting=[1, 2])  # 3 * 2 >= 4: wait
    wait = agent._flush_wait()
    assert wait is not None and wait > 0
    agent.launcher.waiting = [1]  # 3 * 1 < 4: send now
    assert agent._flush_wait() == 0.0
    agent.launcher.waiting = [1, 2]
    agent.unsent_bytes = UNSENT_BYTES  # the files of waiting results reach their bound: send now
    assert agent._flush_wait() == 0.0


def test_agent_finds_its_master_on_a_range_of_ports_past_another_master(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """Agents submitted with their master get a range of ports: another master on the first one
    refuses naming itself, and the agent goes on to the next, where its own master is."""
    low, high = free_port_pair()
    other = OtherMaster(low)
    master = FakeMaster([sh(0, "touch ran", tmp_path)], window=1, listener=high)
    ports = f"{master.port - 1}-{master.port}"
    proc = run_agent(pyz, tmp_path / "agent", ports, agent_input("NFS", "condor"), python=python)
    master.join()
    other.join(30)
    assert proc.returncode == 0, proc.stderr
    assert other.hellos == ["m1"] and master.outcome == "done"
    assert (tmp_path / "ran").exists()


def test_agent_started_before_its_master_reaches_it_once_it_listens(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """An agent that starts before its master (both submitted at once) keeps trying the range
    until the master listens on one of its ports."""
    low, high = free_port_pair()
    ports = f"{low.getsockname()[1]}-{high.getsockname()[1]}"
    low.close()
    high.close()  # nobody listens on the range when the agent starts
    agent = start_agent(
        pyz, tmp_path / "agent", ports, agent_input("NFS", "condor", connect_timeout=60), python
    )
    second = int(ports.split("-")[1])
    master = FakeMaster(
        [sh(0, "touch ran", tmp_path)], window=1, listener=socket.create_server(("127.0.0.1", second))
    )
    proc = finish_agent(agent)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done" and (tmp_path / "ran").exists()


def test_a_bad_port_argument_exits_2(pyz: Path, tmp_path: Path) -> None:
    proc = run_agent(pyz, tmp_path / "agent", "70000-70001", agent_input("NFS", "condor"))
    assert proc.returncode == 2 and "expected a port or FIRST-LAST" in proc.stderr


def test_unreachable_master(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    config = agent_input("NFS", "condor", connect_timeout=0.3)
    line = fatal_line(run_agent(pyz, tmp_path / "agent", port, config, python=python))
    assert f"cannot connect to the master at 127.0.0.1:{port}" in line


def _task_with_path(path: str) -> Callable[[p.Task], bytes]:
    def frames(task: p.Task) -> bytes:
        msg = {"t": "task", "task": task.to_dict(), "files": [{"path": path, "size": 4, "mode": 0o644}]}
        body = p.msgpack.packb(msg, use_bin_type=True)
        return p.HEADER.pack(len(body)) + body + p.HEADER.pack(4) + b"evil"

    return frames


@pytest.mark.parametrize("path", ["../evil", "../../evil", "/tmp/llic-evil", "a/../../evil"])
def test_file_names_cannot_escape_the_execution_directory(
    pyz: Path, tmp_path: Path, python: list[str], path: str
) -> None:
    home = tmp_path / "a" / "agent"
    master = FakeMaster([sh(0, "true", tmp_path)], window=1, extra_frames=_task_with_path(path))
    line = fatal_line(run_agent(pyz, home, master.port, agent_input("TRANSFER", "condor"), python=python))
    master.join()
    assert "protocol error" in line and "path" in line
    assert master.outcome.startswith("agent closed with"), master.outcome
    assert not list(tmp_path.rglob("evil")) and not Path("/tmp/llic-evil").exists()


def test_master_exceeding_the_window_is_a_protocol_error(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    tasks = [sh(i, "sleep 30", tmp_path) for i in range(3)]  # the first is still held when the next come
    master = FakeMaster(tasks, window=1, over_window=True)
    line = fatal_line(
        run_agent(pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor", window=1), python=python)
    )
    master.join()
    assert "more than the window of 1" in line
    assert master.outcome.startswith("agent closed with"), master.outcome


def test_cancel_kills_the_running_task_and_answers_a_waiting_one_unstarted(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """The master's `cancel` (issue 20), right after the second task: the first, running, is
    killed; the second, still waiting behind it, comes back launch_failed without running."""
    tasks = [sh(0, "sleep 300", tmp_path), sh(1, "touch ran", tmp_path)]

    def frames(task: p.Task) -> bytes:
        out = p.encode_frames({"t": p.TASK, "task": task})
        if task.process == 1:
            for process in (1, 0):
                out += p.encode_frames({"t": p.CANCEL, "process": process, "attempt": 0})
        return b"".join(out)

    master = FakeMaster(tasks, window=2, extra_frames=frames)
    proc = run_agent(pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor"), python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done"
    r = master.results
    assert (r[0, 0].status, r[0, 0].signal) == (p.STATUS_OK, signal.SIGKILL)
    assert r[1, 0].status == p.STATUS_LAUNCH_FAILED
    assert r[1, 0].error == "cancelled by the master before it started"
    assert not (tmp_path / "ran").exists()


def test_connection_lost(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    master = FakeMaster([sh(i, "sleep 0.2", tmp_path) for i in range(3)], window=2, hang_up_after=2)
    line = fatal_line(
        run_agent(pyz, tmp_path / "agent", master.port, agent_input("NFS", "condor"), python=python)
    )
    master.join()
    assert "closed the connection" in line
    assert master.outcome == "hung up"


def test_sigterm_stops_the_agent_and_its_task(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    home = tmp_path / "agent"
    home.mkdir()
    master = FakeMaster([sh(0, "echo $$ > task.pid; exec sleep 60", tmp_path)], window=1)
    config = agent_input("NFS", "condor")
    (home / "agent.in").write_text(json.dumps(config.to_json()))
    agent = subprocess.Popen(
        [*python, "-I", str(pyz), "127.0.0.1", str(master.port), "a1", str(home / "agent.in")],
        cwd=home,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid_file = tmp_path / "task.pid"
    task_pid = int(
        poll_until("the task to start", lambda: pid_file.read_text().strip(), timeout=60, poll=0.05)
    )
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=20)
    assert agent.returncode == 128 + signal.SIGTERM
    assert err.strip() == "llic-agent: stopped by signal 15"
    assert not _alive(task_pid)
    master.join()
    assert master.outcome == "agent closed with 1 outstanding"


def test_bad_input_file_exits_2(pyz: Path, tmp_path: Path, python: list[str]) -> None:
    config = agent_input("NFS", "condor").to_json()
    config["mode"] = "SOMETIMES"
    proc = run_agent(pyz, tmp_path / "agent", 1, config, python=python)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "agent.in: mode: expected one of NFS" in lines[0], proc.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "agent.in: format: expected 1, got 2"),
        ({"secret": "abc"}, "agent.in: secret: "),  # then Python's own words on the hex
        ({"window": 0}, "agent.in: window: expected an integer >= 1, got 0"),
        ({"files_style": "fancy"}, "agent.in: files_style: expected one of condor, improved, got 'fancy'"),
        ({"common_files": ["../etc/passwd"]}, "agent.in: common_files[0]: '..' in path '../etc/passwd'"),
        ({"executable": "/bin/sh"}, "agent.in: executable: absolute path '/bin/sh'"),
        (
            {"initial_tasks": [{"task": {"process": 1}}]},
            "agent.in: initial_tasks[0]: task: missing field 'initialdir'",
        ),
        (
            {
                "initial_tasks": [
                    {"task": {"process": 1, "executable": "x", "initialdir": "/"}, "files": [["a"]]}
                ]
            },
            "agent.in: initial_tasks[0].files[0]: expected a name or a [name, path] pair",
        ),
        ({"connect_timeout": -1}, "agent.in: connect_timeout: expected a number of seconds > 0, got -1"),
    ],
)
def test_input_file_validation(change: dict[str, Any], message: str) -> None:
    """Each bad field is an InputFileError whose message starts with the file and the field."""
    data = agent_input("NFS", "condor").to_json()
    data.update(change)
    with pytest.raises(InputFileError, match=f"^{re.escape(message)}"):
        parse_input(data, "agent.in")


def test_input_file_round_trip() -> None:
    task = p.Task(process=1, executable="x", initialdir="/d")
    config = agent_input("TRANSFER", "improved", initial_tasks=[InitialTask(task, [("init/a", "a")])])
    assert parse_input(json.loads(json.dumps(config.to_json()))) == config


# ---------------------------------------------------------------------------------------------
# the zipapp


def test_zipapp_is_self_contained_and_uses_the_pure_python_msgpack(pyz: Path, python: list[str]) -> None:
    def run(*args: str) -> str:
        command = [*python, "-I", *args]
        return subprocess.run(command, cwd=pyz.parent, capture_output=True, text=True, check=True).stdout

    info = json.loads(run(str(pyz), "--self-check"))
    assert info["python"] == run("-c", "import platform; print(platform.python_version())").strip()
    assert info["msgpack"] == "msgpack.fallback"
    assert info["msgpack_file"].startswith(str(pyz))
    assert info["protocol"] == p.PROTOCOL_VERSION
    names = zipfile.ZipFile(pyz).namelist()
    assert "llic/agent/__main__.py" in names and "msgpack/fallback.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    # bytecode for the building Python beside every module, which another Python passes over
    compiled = [n for n in names if n.endswith(".pyc")]
    assert sorted(compiled) == sorted(n + "c" for n in names if n.endswith(".py"))
    with zipfile.ZipFile(pyz) as archive:
        assert {archive.read(n)[:4] for n in compiled} == {importlib.util.MAGIC_NUMBER}
    same_python = info["python"].split(".")[:2] == platform.python_version().split(".")[:2]
    assert info["msgpack_file"].endswith("/msgpack/__init__.pyc" if same_python else "/msgpack/__init__.py")
    sources = [n.removesuffix("c") if n.endswith(".pyc") else n for n in names]
    assert not [n for n in sources if n.startswith("llic/") and n.count("/") == 1 and n not in _SHIPPED]
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")


_SHIPPED = {"llic/__init__.py", "llic/protocol.py", "llic/task.py", "llic/files.py", "llic/lean_msgpack.py"}


def test_build_is_reproducible_and_cached(tmp_path: Path, pyz: Path) -> None:
    first = agent_build.build_agent(tmp_path / "one")
    second = agent_build.build_agent(tmp_path / "two")
    assert first.name == second.name == pyz.name
    assert first.read_bytes() == second.read_bytes() == pyz.read_bytes()
    os.utime(first, ns=(0, 0))  # a rebuilt archive would have a new mtime, whatever the clock's grain
    inode = first.stat().st_ino
    assert agent_build.build_agent(tmp_path / "one") == first
    assert (first.stat().st_mtime_ns, first.stat().st_ino) == (0, inode)  # reused, not rebuilt
    assert [x.name for x in (tmp_path / "one").iterdir()] == [first.name]


def test_shipped_modules_parse_as_python39() -> None:
    """A quick check without root: the agent's own modules use no syntax newer than 3.9. Only
    syntax: the tests above run the agent itself under Debian 11's python3.9."""
    import ast

    checked = []
    for name, data in agent_build.agent_members().items():
        if name.startswith("llic/"):
            ast.parse(data, name, feature_version=(3, 9))  # SyntaxError names the file and line
            checked.append(name)
    agent_modules = {
        f"llic/agent/{f.name}" for f in Path(agent_build.__file__).with_name("agent").glob("*.py")
    }
    assert set(checked) == _SHIPPED | agent_modules


def test_in_process_agent_main_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from llic.agent.__main__ import main

    assert main([]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: llic-agent ")
    assert err[-1] == "llic-agent: HOST PORT AGENT_ID INPUT_FILE are required"


def test_large_results_wait_for_their_turn_and_small_ones_pass_them(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """With a bulk threshold in the welcome, the agent announces results over it (bulk_ready),
    sends the small ones meanwhile, and sends each large one when bulk_go names it; the files
    arrive whole. Without a threshold (every other test here) it never asks."""
    submit, home = tmp_path / "submit", tmp_path / "agent"
    submit.mkdir()
    home.mkdir()
    big = 300_000
    script = "head -c {n} /dev/zero > out.bin"
    tasks = [
        sh(0, script.format(n=big), submit, transfer_output_files=["out.bin"]),
        sh(1, script.format(n=big), submit, transfer_output_files=["out.bin"]),
        sh(2, script.format(n=10), submit, transfer_output_files=["out.bin"]),
    ]
    master = FakeMaster(tasks, window=3, transfer=True, bulk_threshold=100_000)
    proc = run_agent(pyz, home, master.port, agent_input(p.Mode.TRANSFER, "condor", window=3), python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done", master.outcome
    order = master.arrivals
    assert order.index((p.BULK_READY, 0)) < order.index((p.RESULT, 2)) < order.index((p.RESULT, 0))
    assert order.index((p.RESULT, 2)) < order.index((p.RESULT, 1))
    assert (p.BULK_READY, 2) not in order  # small: sent at once
    for process in (0, 1):
        assert [f["size"] for f in master.files[(process, 0)] if f["path"] == "out.bin"] == [big]
    assert (submit / "out.bin").stat().st_size == big  # condor style: the last placed (1's) wins


def test_a_granted_large_result_is_paced_at_the_grants_rate(
    pyz: Path, tmp_path: Path, python: list[str]
) -> None:
    """bulk_go with rate_bps (a limited subnet): the agent sends that result no faster than the
    rate, so it cannot have arrived whole before its size at that rate allows (a lower bound
    only: a busy machine makes it slower, never faster)."""
    submit, home = tmp_path / "submit", tmp_path / "agent"
    submit.mkdir()
    home.mkdir()
    big, rate = 250_000, 2_000_000  # 1 s at 2 Mbps
    tasks = [sh(0, f"head -c {big} /dev/zero > out.bin", submit, transfer_output_files=["out.bin"])]
    master = FakeMaster(tasks, window=1, transfer=True, bulk_threshold=100_000, bulk_rate=rate)
    proc = run_agent(pyz, home, master.port, agent_input(p.Mode.TRANSFER, "condor", window=1), python=python)
    master.join()
    assert proc.returncode == 0, proc.stderr
    assert master.outcome == "done", master.outcome
    assert master.bulk_seconds[(0, 0)] >= 8 * big / rate - 0.05
    assert (submit / "out.bin").stat().st_size == big


def test_cached_build_is_built_once_and_copied(tmp_path: Path, pyz: Path) -> None:
    """master_submitter builds the zipapp once per content into the user's cache and copies it
    into each master's directory (the bytecode compile is a child Python, ~0.1-0.2 s)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    first = agent_build.build_agent(tmp_path / "one", cache=cache)
    cached = cache / first.name
    assert cached.read_bytes() == first.read_bytes() == pyz.read_bytes()
    os.utime(cached, ns=(0, 0))
    second = agent_build.build_agent(tmp_path / "two", cache=cache)
    assert second.read_bytes() == pyz.read_bytes() and os.access(second, os.X_OK)
    assert cached.stat().st_mtime_ns == 0  # taken from the cache, not built again
    assert sorted(x.name for x in cache.iterdir() if not x.name.startswith(".")) == [first.name]
    assert [x.name for x in (tmp_path / "two").iterdir()] == [second.name]  # no temporary left


def test_agent_cache_dir_is_the_users_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = agent_build.agent_cache_dir()
    assert cache == tmp_path / "xdg" / "llic" and cache.stat().st_mode & 0o777 == 0o700
    cache.chmod(0o770)  # others could put an archive there that the user's agents would run
    assert agent_build.agent_cache_dir() is None
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # cannot be made: no cache
    assert agent_build.agent_cache_dir() is None
