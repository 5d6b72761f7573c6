"""llic on real HTCondor (deploy/sandbox): master_submitter submits masters in the scheduler
universe on a pool of three hosts, the masters (inside the root, from /opt/condor-selforg) submit
agents to the execute slots, and the user's jobs run through them. Checked with HTCondor's own
tools (condor_q, condor_history) and the files the jobs write."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy.harness.sandbox import Sandbox, SandboxPool, poll_until, sandbox_cli
from llic import submitter
from llic.master_core import MasterStatus
from llic.state import MasterState, load_state
from llic.taskbook import TaskState

pytestmark = pytest.mark.htcondor

REPO = Path(__file__).resolve().parents[2]
MASTER = "/opt/condor-selforg/bin/llic-master"  # where install-selforg puts it inside the root
POOL = "llm"
N = 200
LLIC_CONFIG = "RESCHEDULE_INTERVAL = 2\nQUEUE_POLL_INTERVAL = 3\nWINDOW_SIZE = 4\n"
SCRIPT = """#!/bin/sh
# a job: common input, private input, a file of its own, stdout and stderr
cat common.txt "$2" > "res.$1"
echo "out $1"
echo "err $1" >&2
"""


@pytest.fixture(scope="module")
def pool(sandbox: Sandbox) -> Iterator[SandboxPool]:
    sandbox_cli("install-selforg")  # the master runs inside the root, from this checkout
    pool = sandbox.up(POOL, slots=2, hosts=3)
    yield pool
    sandbox.down(POOL)


def shared(sandbox: Sandbox, name: str) -> Path:
    """A directory jobs (the sandbox user) can write to."""
    path = sandbox.shared_dir() / name
    path.mkdir()
    path.chmod(0o1777)
    return path


def submit(pool: SandboxPool, work: Path, *extra: str) -> list[Path]:
    """master_submitter as a user runs it; the state files it names."""
    (work / "llic.conf").write_text(LLIC_CONFIG)
    env = dict(os.environ, **pool.llic_env(), LLIC_MASTER=MASTER)
    res = subprocess.run(
        [
            str(REPO / ".venv/bin/master_submitter"),
            "job.sub",
            "llic.conf",
            "--name",
            schedd_name(pool),
            *extra,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    states = [Path(line.split("state file ")[1].split(";")[0]) for line in res.stdout.splitlines()]
    assert states and all(s.exists() for s in states), res.stdout
    if pool.security == "recommended":  # FS fails for the master there (llic/master_token.py)
        assert all("holding its owner's token" in line for line in res.stdout.splitlines()), (
            res.stdout + res.stderr
        )
    return states


def schedd_name(pool: SandboxPool) -> str:
    return f"condor-sandbox@{pool.hosts[0]['name']}"


def wait_done(pool: SandboxPool, state_path: Path, timeout: float = 240) -> MasterState:
    def finished() -> MasterState | None:
        state = load_state(state_path)
        return state if state.status is not MasterStatus.RUNNING else None

    try:
        return poll_until(f"master {state_path.name}", finished, timeout=timeout, poll=1.0)
    except TimeoutError as e:
        queue = pool.exec(
            "condor_q", "-af", "ClusterId", "JobStatus", "HoldReason", "LlicMaster", check=False
        )
        err = (state_path.parent / "master.err").read_text()[-3000:]
        raise AssertionError(f"{e}\nqueue:\n{queue.stdout}\nmaster.err:\n{err}") from None


def agent_jobs_left(pool: SandboxPool, master_id: str) -> str:
    return pool.exec(
        "condor_q", "-constraint", f'LlicMaster =?= "{master_id}"', "-af", "ClusterId", "ProcId", "JobStatus"
    ).stdout.strip()


def wait_agents_gone(pool: SandboxPool, master_id: str, timeout: float = 60) -> None:
    """The master leaves no agent behind. A running agent it removed stays in the queue as
    removed (JobStatus 3) until its shadow has ended, which may be after the master itself has
    left (seen once in CI); any agent still in the queue after `timeout`, whatever its status,
    fails the test. A loop of its own, not poll_until: the failure lists the jobs left."""
    left = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = agent_jobs_left(pool, master_id)
        if not left:
            return
        time.sleep(0.5)
    raise AssertionError(
        f"agents still in the queue {timeout:g} s after the master left (cluster proc status):\n{left}"
    )


def master_history(pool: SandboxPool, state: MasterState) -> list[str]:
    cluster = state.info.cluster
    res = pool.exec(
        "condor_history", "-constraint", f"ClusterId == {cluster}", "-af", "ExitCode", "JobRunCount"
    )
    return res.stdout.split()


def make_work(sandbox: Sandbox, name: str, mode: str) -> Path:
    """The submit directory for one mode, with its inputs."""
    work = shared(sandbox, name)
    (work / "job.sh").write_text(SCRIPT)
    (work / "job.sh").chmod(0o755)
    per_dir = mode.endswith("INITIALDIR")
    for i in range(N):
        iwd = work / f"run{i}" if per_dir else work
        if per_dir:
            iwd.mkdir()
            iwd.chmod(0o1777)
        (iwd / "common.txt").write_text("common\n")
        (iwd / (f"in.{i}" if not per_dir else "in.txt")).write_text(f"in {i}\n")
    lines = []
    if mode.startswith("NFS"):
        lines += [f"executable = {work / 'job.sh'}", "should_transfer_files = NO"]
    else:
        lines += ["executable = job.sh", "should_transfer_files = YES"]
        lines += ["transfer_input_files = common.txt, " + ("in.txt" if per_dir else "in.$(Process)")]
    if per_dir:
        lines += ["initialdir = run$(Process)", "arguments = $(Process) in.txt"]
    else:
        lines += ["arguments = $(Process) in.$(Process)"]
    lines += ["output = out.$(Process)", "error = err.$(Process)", "request_memory = 64", f"queue {N}"]
    (work / "job.sub").write_text("\n".join(lines) + "\n")
    return work


@pytest.mark.parametrize("mode", ["NFS", "NFS_INITIALDIR", "TRANSFER", "TRANSFER_INITIALDIR"])
def test_200_jobs_complete_with_their_outputs(sandbox: Sandbox, pool: SandboxPool, mode: str) -> None:
    work = make_work(sandbox, f"mode-{mode.lower()}", mode)
    t0 = time.monotonic()
    (state_path,) = submit(pool, work)
    state = wait_done(pool, state_path)
    took = time.monotonic() - t0
    assert state.status is MasterStatus.DONE, state.status
    assert all(t.state is TaskState.DONE and t.outcome and t.outcome.exit_code == 0 for t in state.tasks)
    per_dir = mode.endswith("INITIALDIR")
    for i in range(N):
        iwd = work / f"run{i}" if per_dir else work
        assert (iwd / f"out.{i}").read_text() == f"out {i}\n"
        assert (iwd / f"err.{i}").read_text() == f"err {i}\n"
        assert (iwd / f"res.{i}").read_text() == f"common\nin {i}\n"
    poll_until("the master to leave the queue", lambda: master_history(pool, state)[:1] == ["0"], timeout=60)
    assert not (state_path.parent / "tokens.d").exists()  # a finished master leaves no token behind
    wait_agents_gone(pool, state.info.master_id)
    agents = pool.exec(
        "condor_history", "-constraint", f'LlicMaster =?= "{state.info.master_id}"', "-af", "LastRemoteHost"
    ).stdout.split()
    machines = {slot.split("@")[-1] for slot in agents if slot != "undefined"}
    assert len(machines) >= 2, agents  # the agents ran on several hosts of the pool
    print(f"{mode}: {N} jobs in {took:.1f} s, agents on {sorted(machines)}")


def _pids(match: str) -> list[int]:
    """Processes (any namespace) whose command line contains `match`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if match in cmdline:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _slow_nfs(sandbox: Sandbox, name: str, seconds: float, output: str = "out.$(Process)") -> Path:
    work = shared(sandbox, name)
    (work / "job.sub").write_text(
        "executable = /bin/sh\n"
        f"arguments = \"-c 'echo $(Process) >> runs.log; sleep {seconds}; echo done $(Process)'\"\n"
        f"should_transfer_files = NO\noutput = {output}\nqueue {N}\n"
    )
    return work


@pytest.mark.parametrize("output", ["out.$(Process)", "out.$(Cluster).$(Process)"])
def test_agents_come_with_the_master_and_leave_by_themselves_when_the_queue_drains(
    sandbox: Sandbox, pool: SandboxPool, output: str
) -> None:
    """master_submitter submits the master's first agents with it: they are in the queue (on
    their way to slots) before the master job starts, one per matching slot, and the master
    adopts them instead of submitting its own; before the master job (a cluster of their own
    first, not held) unless the description uses the cluster, which is the master job's (then
    after it, held, and released with it). When the queue drains, each agent that connected
    leaves by itself (it is never stopped by a signal: the master's removal comes after its
    grace), and none is left in the queue."""
    work = _slow_nfs(sandbox, "prelaunch" + str(len(output)), 0.1, output)
    (state_path,) = submit(pool, work)
    state = wait_done(pool, state_path)
    assert state.status is MasterStatus.DONE
    assert all(t.state is TaskState.DONE for t in state.tasks)
    agents = state.extra["prelaunch"]["cluster"]
    if "Cluster" in output:
        assert agents > state.info.cluster  # submitted after the master job: they need its cluster
        assert (work / f"out.{state.info.cluster}.0").read_text() == "done 0\n"
    else:
        assert agents < state.info.cluster  # submitted first
        assert (work / "out.0").read_text() == "done 0\n"
    assert len(state.chefs) == 6  # 3 hosts x 2 slots match
    # each chef's only agent is the one master_submitter submitted: the master submitted none
    assert [(c.launches, c.job_ids) for c in state.chefs] == [(1, [f"{agents}.{i}"]) for i in range(6)]
    poll_until("the master to leave the queue", lambda: master_history(pool, state)[:1] == ["0"], timeout=60)
    wait_agents_gone(pool, state.info.master_id)
    master = pool.exec(
        "condor_history", "-constraint", f"ClusterId == {state.info.cluster}", "-af", "QDate", "JobStartDate"
    ).stdout.split()
    rows = pool.exec(
        "condor_history", "-constraint", f"ClusterId == {agents}", "-af", "ProcId", "QDate", "JobStartDate"
    ).stdout.splitlines()
    assert len(rows) == 6, rows
    master_started = int(master[1])
    assert all(int(row.split()[1]) <= master_started for row in rows)  # queued before the master ran
    # every agent that connected was told no_more_tasks and left by itself (one that had not
    # connected by the end, on a slow machine, is removed at once, as it should be)
    finished = [c.index for c in state.chefs if c.no_more_sent]
    assert finished
    for i in finished:
        err = (state_path.parent / "agents" / f"1.{i}.1" / "agent.err").read_text()
        assert "stopped by signal" not in err and "fatal" not in err, (i, err)
    first_agent = min(int(row.split()[2]) for row in rows if row.split()[2] != "undefined")
    print(
        f"master queued {master[0]}, started {master_started}; first agent started {first_agent}"
        f" ({first_agent - master_started:+d} s from the master's start)"
    )


def test_an_agent_killed_mid_run_costs_nothing(sandbox: Sandbox, pool: SandboxPool) -> None:
    """kill -9 of one agent: its tasks run again on other agents, its chef submits a new one,
    and every task's result is recorded exactly once. Counted from two sides: each run of a
    task appends its process number to runs.log (the agents' side), and the state file keeps,
    per task, how many results the master recorded and how often it handed the task out."""
    work = _slow_nfs(sandbox, "kill-agent", 0.3)
    (state_path,) = submit(pool, work)

    def an_agent_at_work() -> int | None:
        state = load_state(state_path)
        port = state.extra.get("port")
        if port is None or state.counts().done < 30:
            return None
        # its port, or the range it scanned for it (agents submitted with the master)
        pids = [pid for pid in _pids(" 1.0.1 input.json") if str(port) in _cmdline(pid)]
        return pids[0] if pids else None

    pid = poll_until("agent 1.0.1 at work", an_agent_at_work, timeout=120, poll=0.2)
    os.kill(pid, signal.SIGKILL)
    state = wait_done(pool, state_path)
    assert state.status is MasterStatus.DONE
    assert all(t.state is TaskState.DONE for t in state.tasks)
    assert state.chefs[0].recoveries == 1 and state.chefs[0].launches == 2
    assert state.counters["lost"] >= 1
    runs = collections.Counter(map(int, (work / "runs.log").read_text().split()))
    assert sorted(runs) == list(range(N))  # every task ran
    ran_again = sorted(p for p, n in runs.items() if n > 1)
    assert ran_again, "no task ran twice: the kill did not hit an agent at work"
    # exactly once: one recorded result per task (no failures here), the tasks that ran twice
    # included, so as many recorded results as tasks
    tasks = {t.process: t for t in state.tasks}
    assert sorted(tasks) == list(range(N))
    assert {p: (t.recorded, t.failures) for p, t in tasks.items()} == {p: (1, 0) for p in range(N)}
    assert [tasks[p].recorded for p in ran_again] == [1] * len(ran_again)
    assert sum(t.recorded for t in state.tasks) == N
    # every run was a hand-out, and every hand-out after a task's first was of a run lost with
    # its agent (or a failed one retried): the two sides agree
    assert [p for p in range(N) if tasks[p].attempt < runs[p]] == []
    assert all(tasks[p].attempt >= 2 for p in ran_again)
    assert sum(t.attempt for t in state.tasks) == N + state.counters["lost"] + state.counters["retries"]
    for i in range(N):
        assert (work / f"out.{i}").read_text() == f"done {i}\n"
    poll_until("the master to leave the queue", lambda: master_history(pool, state)[:1] == ["0"], timeout=60)
    wait_agents_gone(pool, state.info.master_id)


def test_a_master_killed_mid_run_is_restarted_by_htcondor_and_finishes(
    sandbox: Sandbox, pool: SandboxPool
) -> None:
    work = _slow_nfs(sandbox, "kill-master", 0.2)
    (state_path,) = submit(pool, work)

    def master_at_work() -> int | None:
        state = load_state(state_path)
        pids = _pids(f"llic-master {state_path}")
        return pids[0] if pids and state.counts().done >= 40 else None

    pid = poll_until("the master at work", master_at_work, timeout=120, poll=0.2)
    os.kill(pid, signal.SIGKILL)
    state = wait_done(pool, state_path)
    assert state.status is MasterStatus.DONE and state.run >= 2
    assert all(t.state is TaskState.DONE for t in state.tasks)
    for i in range(N):
        assert (work / f"out.{i}").read_text() == f"done {i}\n"
    history = poll_until("the master to leave the queue", lambda: master_history(pool, state), timeout=60)
    assert history[0] == "0" and int(history[1]) >= 2  # exit 0, after a second run
    wait_agents_gone(pool, state.info.master_id)
    assert "master starting" in (state_path.parent / "master.err").read_text()


def test_a_corrupt_or_missing_state_file_is_an_error_and_the_job_is_held(
    sandbox: Sandbox, pool: SandboxPool
) -> None:
    work = shared(sandbox, "corrupt")
    state_path = work / "master.x.state"
    state_path.write_bytes(b"llic-master-state 1 sha256:00\n{}\n")
    state_path.chmod(0o644)
    res = pool.exec(MASTER, str(state_path), check=False)
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == f"llic-master: error: {state_path}: checksum mismatch: the file is damaged (torn write or edited)"
    )
    res = pool.exec(MASTER, str(work / "missing.state"), check=False)
    assert (res.returncode, res.stderr.strip()) == (
        2,
        f"llic-master: error: {work / 'missing.state'}: no such state file",
    )
    assert sorted(p.name for p in work.iterdir()) == ["master.x.state"]

    async def held() -> str:
        async with pool.gateway() as gw:
            desc = submitter.master_job(state_path, master=MASTER, condor_config=None, batch_name="corrupt")
            desc["environment"] = submitter.quote_environment({"CONDOR_CONFIG": pool.hosts[0]["config_file"]})
            result = await gw.submit(desc)
            await gw.call(
                "act",
                action="release",
                constraint=f"ClusterId == {result.cluster}",
                reason="test",
                schedd=None,
                collector=None,
            )
            with trio.fail_after(60):
                while True:
                    (job,) = await gw.query_jobs(
                        f"ClusterId == {result.cluster}", ["JobStatus", "HoldReason"]
                    )
                    if job["JobStatus"] == 5 and "submitted on hold" not in str(job.get("HoldReason")):
                        await gw.remove_jobs([f"{result.cluster}.0"], "test done")
                        return str(job["HoldReason"])
                    await trio.sleep(0.5)

    reason = trio.run(held)
    assert reason == "llic master: unusable state file or submit description (see master.err)"
    assert state_path.read_bytes() == b"llic-master-state 1 sha256:00\n{}\n"
    assert json.dumps(sorted(p.name for p in work.iterdir())) == json.dumps(
        ["master.err", "master.log", "master.out", "master.x.state"]
    )


def _master_tool(pool: SandboxPool, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """master_q or master_rm as a user on the submit host runs them (the pool's client config)."""
    env = dict(os.environ, CONDOR_CONFIG=pool.client_config)
    return subprocess.run(
        [str(REPO / ".venv/bin" / tool), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_master_q_lists_masters_from_the_schedd_and_master_rm_cancels_one(
    sandbox: Sandbox, pool: SandboxPool
) -> None:
    """The master keeps its progress in its own job ad, so master_q answers from the schedd, as
    condor_q would (-constraint, -af), without the state file; master_rm removes the master and
    its agents and keeps the state."""
    work = _slow_nfs(sandbox, "master-rm", 2.0)
    (state_path,) = submit(pool, work)
    master_id = load_state(state_path).info.master_id

    def listed() -> str | None:
        res = _master_tool(pool, "master_q", "-constraint", f'LlicMasterId == "{master_id}" && LlicDone > 0',
                           "-af", "LlicMasterId", "LlicTotal", "LlicStatus", "LlicStateFile")  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout or None

    assert poll_until("the master's progress in its job ad", listed, timeout=180, poll=1.0) == (
        f"{master_id} {N} running {state_path}\n"
    )
    # The same attributes through HTCondor's own tool.
    q = pool.exec(
        "condor_q", "-constraint", f'LlicMasterId == "{master_id}"', "-af", "LlicTotal", "LlicStatus"
    )
    assert q.stdout == f"{N} running\n"
    none = _master_tool(pool, "master_q", "-constraint", 'LlicMasterId == "no-such"', "-af", "LlicMasterId")
    assert (none.returncode, none.stdout) == (0, "")
    assert poll_until("agents at work", lambda: agent_jobs_left(pool, master_id), timeout=120)

    rm = _master_tool(pool, "master_rm", master_id)
    assert rm.returncode == 0, rm.stderr
    assert (
        rm.stdout.startswith(f"master {master_id}: master job ")
        and f"state kept in {state_path}" in rm.stdout
    )
    wait_agents_gone(pool, master_id)
    poll_until(  # a removed master leaves the queue once it has stopped (removing its agents, saving)
        "the master job to leave the queue",
        lambda: (
            pool.exec("condor_q", "-constraint", f'LlicMasterId == "{master_id}"', "-af", "ClusterId").stdout
            == ""
        ),
        timeout=120,
    )
    state = load_state(state_path)  # kept, and readable
    assert state.info.master_id == master_id and state.counts().total == N
    again = _master_tool(pool, "master_rm", master_id)
    assert (
        again.returncode == 1
        and again.stderr == f"master_rm: no master {master_id} in the queue ({master_id})\n"
    )
