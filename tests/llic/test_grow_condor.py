"""Issue 20 item 3 on real HTCondor (deploy/sandbox, 3 hosts x 2 slots, the sandbox's default
security): a master's agents grow as matching slots free up and shrink as the queue drains.

Four of the pool's six slots run plain vanilla jobs when master_submitter submits 400 short
tasks: two `sleep 40`, two that run until the test ends them. The master starts with the agents
the two free slots allow (master_submitter submits one per matching slot, claimed or not: the
others wait in the queue, where the negotiator, or the schedd reusing its claim, starts them as
slots free up); when the two `sleep 40` end, its agents take the freed slots; when the queue
drains while one long task still runs, the agents with nothing left to do leave: those running
are told no_more_tasks and exit, the two still waiting for a slot are dismissed (removed before
they connected), and the one with the long task stays until it is done. Every task is recorded
once, no agent is left in the queue and every slot is free at the end. Checked from the schedd's
queue and history, the master's state file and the tasks' own record of their runs.

The pool itself grows too: a master runs a long queue on a pool of two hosts (4 slots, one agent
each) when a third execute machine joins it (`deploy/sandbox up` with one more host); the master
counts the matching slots again (every QUEUE_POLL_INTERVAL), starts agents in the new machine's
slots, and never has more agent jobs than the pool has slots. The tasks from GATE on wait until
the test has seen the new agents run, so that the queue is still long when the machine joins
however loaded this machine is; then the queue drains and every agent leaves by itself."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.harness.sandbox import Sandbox, SandboxPool, poll_until, sandbox_cli
from llic.chef import ChefState
from llic.master_core import MasterStatus
from llic.state import MasterState, load_state
from llic.taskbook import TaskState
from tests.llic.test_master_condor import (  # the module's fixture and helpers (its tests stay there)
    master_history,
    pool,
    shared,
    submit,
    wait_agents_gone,
    wait_done,
)

pytestmark = pytest.mark.htcondor

__all__ = ["pool"]  # a fixture, used by name

N = 400
PLAIN = 4  # plain jobs, one slot each, of the pool's 6
SHORT = 2  # of which these end after 40 s, the others when the test has seen the agents shrink
LONG = N - 1  # the last task handed out: it runs until the test lets it end
TASK = """#!/bin/sh
# one llic task: note the run, then sleep 0.5 s, or (the last task) wait for the test's go
echo "$1" >> runs.log
if [ "$1" = "{long}" ]; then
    while [ ! -e release ]; do sleep 0.2; done
else
    sleep 0.5
fi
"""

PLAIN_JOB = f"""#!/bin/sh
# a plain job: the first {SHORT} sleep 40 s, the others wait for the test's go
if [ "$1" -lt {SHORT} ]; then
    sleep 40
else
    while [ ! -e plain-release ]; do sleep 0.5; done
fi
"""


@dataclass(frozen=True)
class Sample:
    """One look at the schedd's queue during the run."""

    at: float  # seconds since master_submitter was called
    plain_running: int
    agents_idle: int
    agents_running: int
    done: int  # tasks done, from the master's state file


def queue_sample(pool: SandboxPool, plain: int, master_id: str, t0: float, state_path: Path) -> Sample:
    rows = pool.exec("condor_q", "-af", "ClusterId", "JobStatus", "LlicMaster").stdout.split("\n")
    plain_running = idle = running = 0
    for row in filter(None, rows):
        cluster, status, owner_master = row.split(maxsplit=2)
        if int(cluster) == plain and status == "2":
            plain_running += 1
        elif owner_master == master_id:
            idle += status == "1"
            running += status == "2"
    return Sample(time.monotonic() - t0, plain_running, idle, running, load_state(state_path).counts().done)


def plain_jobs(pool: SandboxPool, work: Path) -> int:
    """PLAIN jobs through condor_submit, SHORT of them `sleep 40`, the others until the file
    plain-release exists; their cluster, once all run."""
    (work / "plain.sh").write_text(PLAIN_JOB)
    (work / "plain.sh").chmod(0o755)
    (work / "plain.sub").write_text(
        f"universe = vanilla\nexecutable = {work / 'plain.sh'}\narguments = $(Process)\n"
        f"should_transfer_files = NO\noutput = plain.$(Process).out\nqueue {PLAIN}\n"
    )
    out = pool.exec("sh", "-c", f"cd {work} && exec condor_submit plain.sub").stdout
    cluster = int(out.strip().rstrip(".").rsplit(" ", 1)[1])

    def all_running() -> bool:
        res = pool.exec(
            "condor_q", "-constraint", f"ClusterId == {cluster} && JobStatus == 2", "-af", "ProcId"
        )
        return len(res.stdout.split()) == PLAIN

    pool.exec("condor_reschedule")
    poll_until(f"{PLAIN} plain jobs running", all_running, timeout=180, poll=1.0)
    return cluster


def test_agents_grow_into_freed_slots_and_leave_as_the_queue_drains(
    sandbox: Sandbox, pool: SandboxPool
) -> None:
    work = shared(sandbox, "grow")
    (work / "task.sh").write_text(TASK.replace("{long}", str(LONG)))
    (work / "task.sh").chmod(0o755)
    (work / "job.sub").write_text(
        f"executable = {work / 'task.sh'}\narguments = $(Process)\nshould_transfer_files = NO\n"
        f"output = out.$(Process)\nqueue {N}\n"
    )
    plain = plain_jobs(pool, work)
    t0 = time.monotonic()
    samples: list[Sample] = []
    try:
        (state_path,) = submit(pool, work)
        master_id = load_state(state_path).info.master_id

        # Until the queue has drained (nothing queued, the long task running): the queue over time.
        def drained() -> bool:
            samples.append(queue_sample(pool, plain, master_id, t0, state_path))
            state = load_state(state_path)
            assert state.status is MasterStatus.RUNNING, state.status  # the long task holds it open
            return state.counts().queued == 0 and state.tasks[LONG].state is TaskState.RUNNING

        poll_until("the queue to drain", drained, timeout=300, poll=0.5)
        drained_at = len(samples)

        # Shrink: while the long task runs (and the other plain jobs hold their slots), every agent
        # but the long task's leaves: those running exit, those still waiting are dismissed.
        def one_agent_left() -> bool:
            sample = queue_sample(pool, plain, master_id, t0, state_path)
            samples.append(sample)
            return sample.agents_idle + sample.agents_running == 1

        poll_until("every agent but the long task's to leave", one_agent_left, timeout=180, poll=0.5)

        def all_but_the_long_one_done() -> MasterState | None:
            state = load_state(state_path)  # saved within STATE_SAVE_INTERVAL of a change
            return state if state.counts().done == N - 1 else None

        state = poll_until(
            "the state file to show every other task done", all_but_the_long_one_done, timeout=60
        )
        assert state.status is MasterStatus.RUNNING and state.tasks[LONG].state is TaskState.RUNNING
        assert samples[-1].plain_running == PLAIN - SHORT
        (work / "release").touch()
        state = wait_done(pool, state_path)
        took = time.monotonic() - t0
    finally:
        (work / "release").touch()
        (work / "plain-release").touch()
    for sample in samples:
        print(sample)
    print(f"{N} tasks in {took:.1f} s from master_submitter; queue drained at sample {drained_at}")

    # The start: only the two free slots ran agents while the plain jobs held the other four.
    busy = [s for s in samples if s.plain_running == PLAIN]
    assert busy and max(s.agents_running for s in busy) <= 6 - PLAIN, busy
    assert any(s.agents_running >= 1 and s.done > 0 for s in busy), busy  # and worked meanwhile
    # Growth: once the `sleep 40` jobs had ended, more agents ran at once than at the start.
    freed = [s for s in samples[:drained_at] if s.plain_running == PLAIN - SHORT]
    assert freed and max(s.agents_running for s in freed) > 6 - PLAIN, samples
    # ... which the schedd's history says too: agents started after the first plain job ended.
    poll_until("the plain jobs to leave the queue", lambda: not plain_left(pool, plain), timeout=120)
    plain_ends = pool.exec(
        "condor_history", "-constraint", f"ClusterId == {plain}", "-af", "CompletionDate"
    ).stdout.split()
    assert len(plain_ends) == PLAIN
    poll_until("the master to leave the queue", lambda: master_history(pool, state)[:1] == ["0"], timeout=60)
    wait_agents_gone(pool, master_id)
    agents = pool.exec(
        "condor_history", "-constraint", f'LlicMaster =?= "{master_id}"',
        "-af", "ClusterId", "ProcId", "JobStatus", "ExitCode", "JobStartDate", "NumJobStarts",
    ).stdout.splitlines()  # fmt: skip
    print("agents (cluster proc status exit start starts):", *agents, sep="\n  ")
    started = sorted(int(row.split()[4]) for row in agents if row.split()[4] != "undefined")
    assert len([t for t in started if t >= min(map(int, plain_ends))]) >= 1, (plain_ends, agents)

    # Every task done, recorded once, run once (no agent was lost on the way).
    assert state.status is MasterStatus.DONE
    assert all(t.state is TaskState.DONE and t.recorded == 1 for t in state.tasks)
    runs = collections.Counter(map(int, (work / "runs.log").read_text().split()))
    assert runs == collections.Counter(range(N))
    # Shrinking: each agent that connected exited by itself (exit 0); the others (the two waiting
    # for the slots the held-open plain jobs kept) were dismissed: removed before they connected.
    # None was held, none was launched twice.
    assert len(state.chefs) == 6 and all(c.launches == 1 for c in state.chefs), state.chefs
    chef_of = {job: c for c in state.chefs for job in c.job_ids}
    assert len(agents) == len(chef_of) == 6, agents
    exited, dismissed = [], []
    for row in agents:
        cluster, proc, status, exit_code, _, starts = row.split()
        chef = chef_of[f"{cluster}.{proc}"]
        assert chef.state is ChefState.TERMINATED
        if chef.no_more_sent:
            assert (status, exit_code) == ("4", "0"), row
            exited.append(chef.index)
        else:
            assert status == "3", row
            dismissed.append((chef.index, starts))
    assert len(exited) == 6 - (PLAIN - SHORT) and len(dismissed) == PLAIN - SHORT, agents
    print(f"exited by themselves: chefs {exited}; dismissed (chef, NumJobStarts): {dismissed}")

    # The slots are free again.
    def slots_free() -> bool:
        states = pool.exec("condor_status", "-af", "State").stdout.split()
        return bool(states) and set(states) == {"Unclaimed"}

    poll_until("every slot unclaimed", slots_free, timeout=180, poll=1.0)


def plain_left(pool: SandboxPool, cluster: int) -> str:
    return pool.exec("condor_q", "-constraint", f"ClusterId == {cluster}", "-af", "ProcId").stdout.strip()


# ---------------------------------------------------------------- a machine joins the pool mid-run

GROW_POOL = "llgrow"
GROW_N = 800
GATE = 100  # tasks from this one on wait for the file `go` (the test's: the machine has joined)
GROW_TASK = f"""#!/bin/sh
# one llic task: note the run and the slot's scratch directory (which names the execute host);
# from task {GATE} on, wait until the test has seen the new machine's agents; then sleep 0.5 s
echo "$1 $_CONDOR_SCRATCH_DIR" >> runs.log
if [ "$1" -ge {GATE} ]; then
    while [ ! -e go ]; do sleep 0.2; done
fi
sleep 0.5
"""


@pytest.fixture
def small_pool(sandbox: Sandbox) -> Iterator[SandboxPool]:
    """Two hosts of 2 slots each: the pool before the third machine joins."""
    sandbox_cli("install-selforg")  # the master runs inside the root, from this checkout
    small = sandbox.up(GROW_POOL, slots=2, hosts=2)
    yield small
    sandbox.down(GROW_POOL)


@dataclass(frozen=True)
class PoolSample:
    """One look at the pool and the master's agents: the agents first, then the slots."""

    agents_idle: int
    agents_running: int
    agents_on: tuple[str, ...]  # the hosts the running agents are on
    slots: int  # slot ads in the collector, counted after the agents


def pool_sample(pool: SandboxPool, master_id: str) -> PoolSample:
    rows = pool.exec(
        "condor_q", "-constraint", f'LlicMaster =?= "{master_id}"', "-af", "JobStatus", "RemoteHost"
    ).stdout.splitlines()
    idle = sum(row.split()[0] == "1" for row in rows)
    on = tuple(sorted(row.split()[1].split("@")[-1] for row in rows if row.split()[0] == "2"))
    slots = len(pool.exec("condor_status", "-af", "Name").stdout.split())
    return PoolSample(idle, len(on), on, slots)


def test_agents_grow_into_a_machine_that_joins_the_pool_mid_run(
    sandbox: Sandbox, small_pool: SandboxPool
) -> None:
    work = shared(sandbox, "join")
    (work / "task.sh").write_text(GROW_TASK)
    (work / "task.sh").chmod(0o755)
    (work / "job.sub").write_text(
        f"executable = {work / 'task.sh'}\narguments = $(Process)\nshould_transfer_files = NO\n"
        f"output = out.$(Process)\nqueue {GROW_N}\n"
    )
    new_host = f"ex2.{GROW_POOL}.sandbox"
    samples: list[PoolSample] = []
    try:
        (state_path,) = submit(small_pool, work)
        master_id = load_state(state_path).info.master_id

        def sample() -> PoolSample:
            samples.append(pool_sample(small_pool, master_id))
            return samples[-1]

        # Before: one agent per slot of the two hosts, at work (half the tasks below GATE done).
        def four_agents_at_work() -> bool:
            return sample().agents_running == 4 and load_state(state_path).counts().done >= GATE // 2

        poll_until("four agents at work", four_agents_at_work, timeout=300, poll=1.0)
        before = len(samples)

        # A third machine joins the running pool (its two slots now in the collector).
        t_join = time.monotonic()
        grown = sandbox.up(GROW_POOL, slots=2, hosts=3)
        t_joined = time.monotonic()
        assert [h["name"] for h in grown.hosts][-1] == new_host
        assert sample().slots == 6

        # The master counts the slots again and starts agents in the new ones; the queue is
        # still long (the agents running wait for `go` with their tasks, the rest queued).
        def agents_on_the_new_machine() -> bool:
            return sample().agents_on.count(new_host) == 2

        poll_until("two agents running on the new machine", agents_on_the_new_machine, timeout=300)
        t_grown = time.monotonic()
        state = load_state(state_path)
        assert state.status is MasterStatus.RUNNING and state.counts().queued > 0, state.counts()
        (work / "go").touch()

        # The queue drains; the agents leave by themselves.
        def drained() -> bool:
            sample()
            return load_state(state_path).status is not MasterStatus.RUNNING

        poll_until("the master to finish", drained, timeout=600, poll=1.0)
        state = wait_done(small_pool, state_path)
    finally:
        (work / "go").touch()
    for s in samples:
        print(s)
    print(f"the machine joined in {t_joined - t_join:.1f} s; its agents ran {t_grown - t_joined:.1f} s later")

    # Never over-asking: no more agent jobs (idle or running) than the pool had slots, 4 before
    # the machine joined, 6 after; one chef per slot in the end, each launched once.
    assert all(s.agents_idle + s.agents_running <= s.slots for s in samples), samples
    assert all(s.slots == 4 and s.agents_idle + s.agents_running <= 4 for s in samples[:before]), samples
    assert len(state.chefs) == 6 and all(c.launches == 1 for c in state.chefs), state.chefs

    # Every task done, recorded once, run once; some on the new machine.
    assert state.status is MasterStatus.DONE
    assert all(t.state is TaskState.DONE and t.recorded == 1 for t in state.tasks)
    runs = [line.split() for line in (work / "runs.log").read_text().splitlines()]
    assert collections.Counter(int(r[0]) for r in runs) == collections.Counter(range(GROW_N))
    on_new = [r for r in runs if f"/{GROW_POOL}/ex2/" in r[1]]
    assert on_new and all(int(r[0]) >= GATE for r in on_new), on_new[:5]
    print(f"{len(on_new)} of {GROW_N} tasks ran on the machine that joined")

    # The agents: two per host, the new one's included; each ran once and left by itself (told
    # no_more_tasks as the queue drained: exit 0), none is left in the queue.
    poll_until(
        "the master to leave the queue", lambda: master_history(small_pool, state)[:1] == ["0"], timeout=60
    )
    wait_agents_gone(small_pool, master_id)
    agents = small_pool.exec(
        "condor_history", "-constraint", f'LlicMaster =?= "{master_id}"',
        "-af", "JobStatus", "ExitCode", "NumJobStarts", "LastRemoteHost",
    ).stdout.splitlines()  # fmt: skip
    print("agents (status exit starts host):", *agents, sep="\n  ")
    assert len(agents) == 6 and all(a.split()[:3] == ["4", "0", "1"] for a in agents), agents
    hosts = collections.Counter(a.split()[3].split("@")[-1] for a in agents)
    assert hosts == {f"{h}.{GROW_POOL}.sandbox": 2 for h in ("cm", "ex1", "ex2")}, hosts
    assert all(c.state is ChefState.TERMINATED and c.no_more_sent for c in state.chefs), state.chefs
