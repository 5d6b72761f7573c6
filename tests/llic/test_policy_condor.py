"""Issue 20 on real HTCondor (deploy/sandbox): what llic honours of a submit file beyond the jobs
themselves. master_submitter submits masters in the scheduler universe of a three-host pool, the
masters run the tasks through agents, and then:

- `log = ...`: the job event log is read by htcondor2.JobEventLog, with one terminated event per
  task under the master's cluster and the task's process, and by HTCondor's own condor_wait;
- `max_retries = 2`: a task that fails twice, then succeeds, runs three times;
- `on_exit_hold`: a task is held, master_q shows it with its reason, master_release releases it;
- `queue input in (...)`: each task reads its own input (the queue variable is the command).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import htcondor2
import pytest

from deploy.harness.sandbox import Sandbox, SandboxPool, poll_until, sandbox_cli
from llic.master_core import MasterStatus
from llic.state import MasterState, load_state
from llic.taskbook import TaskState

pytestmark = pytest.mark.htcondor

REPO = Path(__file__).resolve().parents[2]
MASTER = "/opt/condor-selforg/bin/llic-master"  # where install-selforg puts it inside the root
POOL = "llp"
LLIC_CONFIG = "RESCHEDULE_INTERVAL = 2\nQUEUE_POLL_INTERVAL = 3\nWINDOW_SIZE = 2\n"
# a task that fails with exit code $3 until it has run $2 times (its runs counted in a file)
FLAKY = """#!/bin/sh
n=$(cat "runs.$1" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "runs.$1"
if [ "$n" -lt "$2" ]; then echo "run $n of task $1 fails" >&2; exit "$3"; fi
echo "task $1 done after $n runs"
"""


@pytest.fixture(scope="module")
def pool(sandbox: Sandbox) -> Iterator[SandboxPool]:
    sandbox_cli("install-selforg")  # the master runs inside the root, from this checkout
    pool = sandbox.up(POOL, slots=2, hosts=3)
    yield pool
    sandbox.down(POOL)


def workdir(sandbox: Sandbox, name: str, submit_file: str) -> Path:
    """A directory the sandbox user can write, with the flaky task and the submit file."""
    work = sandbox.shared_dir() / name
    work.mkdir()
    work.chmod(0o1777)
    (work / "flaky.sh").write_text(FLAKY)
    (work / "flaky.sh").chmod(0o755)
    (work / "job.sub").write_text(submit_file)
    (work / "llic.conf").write_text(LLIC_CONFIG)
    return work


def tool(name: str) -> str:
    return str(REPO / ".venv/bin" / name)


def client_env(pool: SandboxPool) -> dict[str, str]:
    return dict(os.environ, **pool.llic_env(), LLIC_MASTER=MASTER)


def submit(pool: SandboxPool, work: Path) -> Path:
    """master_submitter as a user runs it; the state file of the one master."""
    res = subprocess.run(
        [
            tool("master_submitter"),
            "job.sub",
            "llic.conf",
            "--name",
            f"condor-sandbox@{pool.hosts[0]['name']}",
        ],
        cwd=work,
        env=client_env(pool),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    (line,) = res.stdout.splitlines()
    return Path(line.split("state file ")[1].split(";")[0])


def wait_state(
    pool: SandboxPool,
    state_path: Path,
    what: str,
    predicate: Callable[[MasterState], bool],
    timeout: float = 240,
) -> MasterState:
    def check() -> MasterState | None:
        state = load_state(state_path)
        return state if predicate(state) else None

    try:
        return poll_until(what, check, timeout=timeout, poll=1.0)
    except TimeoutError as e:
        queue = pool.exec("condor_q", "-af", "ClusterId", "JobStatus", "HoldReason", check=False)
        err = (state_path.parent / "master.err").read_text()[-3000:]
        raise AssertionError(f"{e}\nqueue:\n{queue.stdout}\nmaster.err:\n{err}") from None


def done(state: MasterState) -> bool:
    return state.status is not MasterStatus.RUNNING


def events(log: Path) -> list[tuple[int, int, int, dict[str, object]]]:
    return [(int(e.type), e.cluster, e.proc, dict(e)) for e in htcondor2.JobEventLog(str(log)).events(0)]


def test_log_max_retries_and_condor_wait(sandbox: Sandbox, pool: SandboxPool) -> None:
    """Process 1 fails twice (exit 1), then succeeds; max_retries = 2 runs it three times. The log
    has one terminated event per task, all with return value 0, and condor_wait reads it."""
    work = workdir(
        sandbox,
        "policy-retries",
        "executable = flaky.sh\narguments = $(Process) $(runs) 1\nshould_transfer_files = NO\n"
        "output = out.$(Process)\nerror = err.$(Process)\nlog = job.log\nmax_retries = 2\n"
        "request_memory = 64\nqueue runs in (1, 3, 1, 1)\n",
    )
    state_path = submit(pool, work)
    state = wait_state(pool, state_path, "the master to finish", done)
    assert state.status is MasterStatus.DONE and state.counts().done == 4
    assert [(work / f"runs.{p}").read_text().strip() for p in range(4)] == ["1", "3", "1", "1"]
    assert (work / "out.1").read_text() == "task 1 done after 3 runs\n"
    got = events(work / "job.log")
    cluster = state.info.cluster
    assert {c for _, c, _, _ in got} == {cluster}
    terminated = sorted((p, e["ReturnValue"]) for t, _, p, e in got if t == 5)
    assert terminated == [(0, 0), (1, 0), (2, 0), (3, 0)]  # one per task
    assert sorted(p for t, _, p, _ in got if t == 0) == [0, 1, 2, 3]
    retried = [(p, e["ReturnValue"]) for t, _, p, e in got if t == 4 and e.get("TerminatedAndRequeued")]
    assert retried == [(1, 1), (1, 1)]
    res = pool.exec("condor_wait", "-wait", "60", str(work / "job.log"), check=False)
    assert res.returncode == 0 and "All jobs done." in res.stdout, res.stdout + res.stderr


def test_on_exit_hold_master_q_and_master_release(sandbox: Sandbox, pool: SandboxPool) -> None:
    """Process 1 exits 3 on its first run: on_exit_hold holds it; master_q shows it held with its
    reason; master_release runs it again, and it succeeds."""
    work = workdir(
        sandbox,
        "policy-hold",
        "executable = flaky.sh\narguments = $(Process) $(runs) 3\nshould_transfer_files = NO\n"
        "output = out.$(Process)\nlog = job.log\non_exit_hold = ExitCode == 3\n"
        'on_exit_hold_reason = strcat("task exited ", ExitCode)\nrequest_memory = 64\n'
        "queue runs in (1, 2, 1)\n",
    )
    state_path = submit(pool, work)
    state = wait_state(
        pool, state_path, "a held task", lambda s: s.counts().held == 1 and s.counts().done == 2
    )
    (held,) = [t for t in state.tasks if t.state is TaskState.HELD]
    assert (held.process, held.hold_reason, held.hold_code) == (1, "task exited 3", 3)
    view = subprocess.run(
        [tool("master_q"), str(state_path)], capture_output=True, text=True, env=client_env(pool)
    )
    assert view.returncode == 0, view.stderr
    assert "1 held, 0 failed" in view.stdout
    assert f"{state.info.master_id} process 1: task exited 3 (code 3, subcode 0)" in view.stdout
    assert state.status is MasterStatus.RUNNING  # a held task keeps its master, as HTCondor keeps a job
    release = subprocess.run(
        [tool("master_release"), str(state_path), "1"], capture_output=True, text=True, env=client_env(pool)
    )
    assert release.returncode == 0 and "asked to release 1 task(s)" in release.stdout, release.stderr
    state = wait_state(pool, state_path, "the master to finish", done)
    assert state.status is MasterStatus.DONE and state.counts().done == 3
    assert (work / "out.1").read_text() == "task 1 done after 2 runs\n"
    kinds = [t for t, _, p, _ in events(work / "job.log") if p == 1]
    assert kinds == [0, 1, 12, 13, 1, 5]


def test_queue_input_in_runs_each_task_on_its_input(sandbox: Sandbox, pool: SandboxPool) -> None:
    """`queue input in (...)`: the queue variable is the input command; files are transferred."""
    work = workdir(
        sandbox,
        "policy-input",
        "executable = /bin/cat\nshould_transfer_files = YES\noutput = out.$(Process)\n"
        "log = job.log\nrequest_memory = 64\nqueue input in (a.txt, b.txt, c.txt)\n",
    )
    for name in "abc":
        (work / f"{name}.txt").write_text(f"input {name}\n")
    started = time.monotonic()
    state_path = submit(pool, work)
    state = wait_state(pool, state_path, "the master to finish", done)
    assert state.status is MasterStatus.DONE and state.counts().done == 3
    assert [(work / f"out.{p}").read_text() for p in range(3)] == ["input a\n", "input b\n", "input c\n"]
    assert sorted(p for t, _, p, _ in events(work / "job.log") if t == 5) == [0, 1, 2]
    print(f"queue input in: 3 tasks in {time.monotonic() - started:.1f} s")
