"""The master's trio driver (llic/master.py) on loopback, without HTCondor: fake agents written
here on protocol.py test what the master refuses and how it survives bad peers; the real agent
zipapp, run as local processes (LocalAgents), tests a whole run in a TRANSFER mode."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from llic import master as m
from llic import master_core, submitter
from llic import protocol as p
from llic.agent_build import build_agent
from llic.agent_job import AGENT_ATTR, AgentSetup, agent_job, prepare_agent, write_secret
from llic.config import LlicConfig
from llic.events import AgentSubmitted, SubmitAgent
from llic.master_core import MasterStatus
from llic.plan import input_blobs
from llic.runners import AgentRunner, agent_ip, request_attributes, usable_ip
from llic.state import MasterInfo, initial_state, load_state, restore, save_state, snapshot
from llic.submit import parse_submit_file
from llic.taskbook import TaskState

NFS_SUB = """\
executable = /bin/echo
arguments = task $(Process)
should_transfer_files = NO
output = out.$(Process)
queue {n}
"""


def make_state(tmp: Path, sub: str, *, cluster: int = 9, **config: Any) -> Path:
    """A master's output directory as master_submitter leaves it: block description + state."""
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "job.sub").write_text(sub)
    block = parse_submit_file(work / "job.sub", cwd=work).blocks[0]
    out = tmp / "m"
    out.mkdir()
    (out / "master.m1.sub").write_text(block.submit_text())
    info = MasterInfo("m1", "tester", cluster, str(out / "master.m1.sub"), 0)
    values: dict[str, Any] = {
        "initial_master_port_number": 0,
        "queue_poll_interval": 0.2,
        "reschedule_interval": 0.2,
        "state_save_interval": 0.1,
        "window_size": 2,
    }
    values.update(config)
    cfg = LlicConfig(**values)
    processes = [t.process for t in block.tasks(cluster)]
    save_state(out / "master.m1.state", initial_state(info, cfg, processes, time.time()))
    return out / "master.m1.state"


@pytest.fixture(autouse=True)
def short_exit_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """FakeRunner's agents never leave the queue by themselves: their final grace is cut short
    (the test of the grace itself uses real local agents)."""
    monkeypatch.setattr(master_core, "AGENT_EXIT_GRACE", 0.2)


class FakeRunner:
    """Records agent submissions and removals; runs nothing (the test plays the agents)."""

    def __init__(self, slots: int = 1) -> None:
        self._slots = slots
        self.submitted: list[dict[str, str]] = []
        self.removed: list[str] = []
        self.removed_all = 0
        self.reschedules = 0
        self.published: dict[str, object] = {}  # the master's job ad, as it would be

    async def slots(self, plan: object) -> int:
        return self._slots

    async def submit(self, description: dict[str, str]) -> str:
        self.submitted.append(description)
        return f"{len(self.submitted)}.0"

    async def remove(self, job_ids: Sequence[str], reason: str) -> None:
        self.removed += list(job_ids)

    async def remove_all(self, master_id: str, reason: str) -> None:
        self.removed_all += 1

    async def alive(self, master_id: str) -> set[str]:
        return {f"{i + 1}.0" for i in range(len(self.submitted))} - set(self.removed)

    async def reschedule(self) -> None:
        self.reschedules += 1

    async def agent_host(self) -> str | None:
        return "127.0.0.1"

    async def publish(self, master_id: str, cluster: int, attrs: dict[str, object]) -> None:
        self.published.update(attrs)

    async def aclose(self) -> None:
        return None

    def agent_names(self) -> list[str]:
        return [json.loads(d[f"MY.{AGENT_ATTR}"]) for d in self.submitted]


async def until(what: str, predicate: Callable[[], Any], timeout: float = 30) -> Any:
    with trio.fail_after(timeout):
        while not (value := predicate()):
            await trio.sleep(0.01)
    return value


class Running:
    """A master running in a nursery; `rc` once it returned."""

    def __init__(self, master: m.Master, port: int) -> None:
        self.master = master
        self.port = port
        self.rc: int | None = None


async def start_master(nursery: trio.Nursery, state_path: Path, runner: AgentRunner) -> Running:
    state, plan = m.load_plan(state_path)
    master = m.Master(plan, state, runner, host="127.0.0.1", handshake_timeout=1.0)
    box: list[Running] = []

    async def go(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        rc = await master.run(task_status=task_status)
        box[0].rc = rc

    port = await nursery.start(go)
    box.append(Running(master, port))
    return box[0]


def secret_of(state_path: Path, agent: str) -> bytes:
    data = json.loads((state_path.parent / "agents" / agent / "input.json").read_text())
    return bytes.fromhex(data["secret"])


class FakeAgent:
    """The agent's side of the protocol, driven step by step."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = p.Decoder(p.FROM_MASTER)

    @classmethod
    async def connect(cls, port: int) -> FakeAgent:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, msg: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        await self.stream.send_all(p.encode(msg, blobs))

    async def recv(self) -> p.Message | None:
        """The next message; None when the master closed the connection."""
        with trio.fail_after(30):
            while (msg := self.decoder.next()) is None:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    return None
                if not data:
                    return None
                self.decoder.feed(data)
        return msg

    async def handshake(
        self, agent: str, secret: bytes, master: str = "m1", version: int = 1
    ) -> p.Message | None:
        nonce_a = p.make_nonce()
        await self.send(
            {"t": "hello", "agent": agent, "master": master, "version": version, "nonce_a": nonce_a}
        )
        challenge = await self.recv()
        if challenge is None or challenge.type != p.CHALLENGE:
            return challenge
        assert p.check_master_mac(secret, nonce_a, agent, challenge.body["mac_m"]) == (secret == self.real)
        await self.send({"t": "auth", "mac_a": p.agent_mac(secret, challenge.body["nonce_m"], agent)})
        return await self.recv()

    real = b""

    async def serve(self, exit_code: int = 0, duplicate: bool = False) -> list[int]:
        """Answer every task with an ok result until no_more_tasks; the processes run."""
        done: list[int] = []
        while True:
            msg = await self.recv()
            if msg is None or msg.type == p.NO_MORE_TASKS:
                await self.stream.aclose()
                return done
            task = msg.task()
            result = p.TaskResult(task.process, task.attempt, p.STATUS_OK, exit_code=exit_code, host="fake")
            await self.send({"t": "result", "result": result})
            if duplicate:
                await self.send({"t": "result", "result": result})
            done.append(task.process)


async def closed_by_master(agent: FakeAgent, *, allowed: tuple[str, ...] = (p.REFUSED,)) -> bool:
    """Read until the master closes; True if it did, having said nothing but `allowed`."""
    while (msg := await agent.recv()) is not None:
        if msg.type not in allowed:
            return False
    return True


async def test_a_wrong_secret_is_refused_and_counted_and_the_right_agent_is_served(tmp_path: Path) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=5))
    runner = FakeRunner()
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (agent,) = await until("a submission", runner.agent_names)
        secret = secret_of(state_path, agent)
        intruder = await FakeAgent.connect(run.port)
        answer = await intruder.handshake(agent, bytes(32))
        assert answer is not None and answer.type == p.REFUSED
        assert answer.body["reason"] == "authentication failed"
        assert await closed_by_master(intruder)
        good = await FakeAgent.connect(run.port)
        good.real = secret
        welcome = await good.handshake(agent, secret)
        assert welcome is not None and welcome.type == p.WELCOME and welcome.body["window"] == 32  # the most
        assert sorted(await good.serve()) == [0, 1, 2, 3, 4]
    assert run.rc == m.EXIT_DONE
    state = load_state(state_path)
    assert state.status is MasterStatus.DONE
    assert state.extra["counters"]["auth_failures"] == 1
    assert [t.state for t in state.tasks] == [TaskState.DONE] * 5
    assert runner.removed_all == 2  # at the start (crash gap) and at the end
    # The job ad's progress (what master_q lists masters by), as of the master's end.
    assert {k: runner.published[k] for k in ("LlicStatus", "LlicTotal", "LlicDone", "LlicIdle")} == {
        "LlicStatus": "done", "LlicTotal": 5, "LlicDone": 5, "LlicIdle": 0,
    }  # fmt: skip
    assert runner.published["LlicStateFile"] == str(state_path)
    assert not {"Owner", "ClusterId", "LlicMasterId"} & set(runner.published)  # the job ad's own


async def test_an_agent_of_version_2_gets_tasks_in_batches_and_may_answer_in_batches(tmp_path: Path) -> None:
    """Protocol version 2: the welcome offers batches, the tasks without files come in `tasks`
    messages (never one by one), and results may go back in `results` messages."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=9), window_size=3)
    runner = FakeRunner()
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (agent,) = await until("a submission", runner.agent_names)
        fake = await FakeAgent.connect(run.port)
        fake.real = secret_of(state_path, agent)
        welcome = await fake.handshake(agent, fake.real, version=2)
        assert welcome is not None and welcome.body == {"window": 32, "batch": True}  # the most it may send
        kinds, done = [], []
        while (msg := await fake.recv()) is not None and msg.type != p.NO_MORE_TASKS:
            kinds.append(msg.type)
            tasks = msg.tasks()
            results = [
                p.TaskResult(t.process, t.attempt, p.STATUS_OK, exit_code=0, host="fake") for t in tasks
            ]
            await fake.send({"t": "results", "results": results})
            done += [t.process for t in tasks]
        await fake.stream.aclose()
    assert run.rc == m.EXIT_DONE and sorted(done) == list(range(9))
    assert set(kinds) == {p.TASKS}
    state = load_state(state_path)
    assert [t.state for t in state.tasks] == [TaskState.DONE] * 9 and state.extra["counters"]["results"] == 9


async def test_malformed_frames_and_stalled_handshakes_are_dropped_and_counted(tmp_path: Path) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=3))
    runner = FakeRunner()
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (agent,) = await until("a submission", runner.agent_names)
        secret = secret_of(state_path, agent)
        bad_frames = [
            b"\x00\x00\x00\x05hello",  # not msgpack
            b"\xff\xff\xff\xff",  # a 4 GiB frame announced
            p.encode({"t": "auth", "mac_a": bytes(32)}),  # auth before hello
            b"\x00\x00\x00\x03\x93\x01\x02",  # msgpack, but a list
        ]
        for frames in bad_frames:
            peer = await FakeAgent.connect(run.port)
            await peer.stream.send_all(frames)
            assert await closed_by_master(peer)
        other = await FakeAgent.connect(run.port)
        refused = await other.handshake(agent, secret, master="someone-else")
        assert (
            refused is not None
            and refused.type == p.REFUSED
            and "this is master m1" in refused.body["reason"]
        )
        nobody = await FakeAgent.connect(run.port)
        refused = await nobody.handshake("../etc", secret)
        assert refused is not None and refused.type == p.REFUSED
        silent = await FakeAgent.connect(run.port)  # says nothing: dropped after handshake_timeout
        assert await closed_by_master(silent)
        counters = run.master.counters
        assert counters["malformed"] == 4 and counters["handshake_timeouts"] == 1
        assert counters["refused_wrong_master"] == 1 and counters["refused_unknown_agent"] == 1
        good = await FakeAgent.connect(run.port)
        good.real = secret
        assert (await good.handshake(agent, secret) or p.Message("x", {})).type == p.WELCOME
        assert sorted(await good.serve()) == [0, 1, 2]
    assert run.rc == m.EXIT_DONE
    assert load_state(state_path).extra["counters"]["connections"] == 8


async def test_garbage_after_authentication_costs_only_that_agent(tmp_path: Path) -> None:
    """The chef recovers: tasks go back to the queue, the agent job is removed, a new agent is
    submitted, and every task is recorded once."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=4))
    runner = FakeRunner()
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (first,) = await until("a submission", runner.agent_names)
        secret = secret_of(state_path, first)
        rogue = await FakeAgent.connect(run.port)
        rogue.real = secret
        assert (await rogue.handshake(first, secret) or p.Message("x", {})).type == p.WELCOME
        task = await rogue.recv()
        assert task is not None and task.type == p.TASK
        await rogue.stream.send_all(b"\x00\x00\x00\x04junk")
        assert await closed_by_master(rogue, allowed=(p.TASK,))
        names = await until("a second agent", lambda: runner.agent_names()[1:])
        assert names == [first.rsplit(".", 1)[0] + ".2"]
        assert runner.removed == ["1.0"]
        second = await FakeAgent.connect(run.port)
        second.real = secret_of(state_path, names[0])
        assert (await second.handshake(names[0], second.real) or p.Message("x", {})).type == p.WELCOME
        assert sorted(await second.serve()) == [0, 1, 2, 3]
    assert run.rc == m.EXIT_DONE
    state = load_state(state_path)
    assert state.extra["counters"]["malformed"] == 1
    assert all(t.state is TaskState.DONE and t.failures == 0 for t in state.tasks)
    assert state.counters["lost"] >= 1 and state.chefs[0].recoveries == 1


async def test_duplicate_and_unknown_results_are_ignored(tmp_path: Path) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=3))
    runner = FakeRunner()
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (agent,) = await until("a submission", runner.agent_names)
        fake = await FakeAgent.connect(run.port)
        fake.real = secret_of(state_path, agent)
        assert (await fake.handshake(agent, fake.real) or p.Message("x", {})).type == p.WELCOME
        unknown = p.TaskResult(77, 1, p.STATUS_OK, exit_code=0)
        await fake.send({"t": "result", "result": unknown})
        assert sorted(await fake.serve(duplicate=True)) == [0, 1, 2]
    assert run.rc == m.EXIT_DONE
    state = load_state(state_path)
    # process 77 and the second copies of 0 and 1; the second copy of 2 arrives after the chef
    # has terminated (then it is dropped uncounted) or just before
    assert state.counters["ignored"] in (3, 4)
    assert [(t.process, t.state, t.attempt) for t in state.tasks] == [
        (i, TaskState.DONE, 1) for i in range(3)
    ]


TRANSFER_SUB = """\
executable = job.sh
arguments = $(Process)
should_transfer_files = YES
transfer_input_files = common.txt, in.$(Process)
output = out.$(Process)
error = err.$(Process)
queue 6
"""
JOB_SH = """#!/bin/sh
cat common.txt "in.$1" > "made.$1"
echo "stdout $1"
echo "stderr $1" >&2
"""


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
@pytest.mark.parametrize("initial", [0, 2])
async def test_local_agents_run_a_transfer_block(tmp_path: Path, initial: int) -> None:
    """The real agent zipapp: common input cached, private inputs as blobs (or, for initial
    tasks, next to the input file), outputs and stdout/stderr placed in condor style."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(JOB_SH)
    (work / "job.sh").chmod(0o755)
    (work / "common.txt").write_text("common\n")
    for i in range(6):
        (work / f"in.{i}").write_text(f"private {i}\n")
    state_path = make_state(tmp_path, TRANSFER_SUB, initial_jobs_number=initial)
    state, plan = m.load_plan(state_path)
    assert plan.mode == "TRANSFER" and plan.common_inputs == ["common.txt"]
    runner = m.LocalAgents(tmp_path / "scratch", slots=2)
    master = m.Master(plan, state, runner, host="127.0.0.1")
    with trio.fail_after(60):
        rc = await master.run()
    await runner.aclose()
    assert rc == m.EXIT_DONE, (plan.outdir / "agents").glob("*/agent.err")
    for i in range(6):
        assert (work / f"made.{i}").read_text() == f"common\nprivate {i}\n"
        assert (work / f"out.{i}").read_text() == f"stdout {i}\n"
        assert (work / f"err.{i}").read_text() == f"stderr {i}\n"
    description = runner.submitted[0]
    shipped = [n.strip() for n in description["transfer_input_files"].split(",")]
    assert str(work / "job.sh") in shipped and str(work / "common.txt") in shipped
    assert not any(n.endswith("in.0") for n in shipped) or initial
    final = load_state(state_path)
    assert final.status is MasterStatus.DONE and final.counts().done == 6


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_finished_agents_leave_by_themselves_before_the_final_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final grace: agents told no_more_tasks exit by themselves (status 0) once their
    results are back; the master removes them only after they left or the grace ran out (a
    grace longer than any test needs: LocalAgents.remove kills, and a killed agent fails this)."""
    monkeypatch.setattr(master_core, "AGENT_EXIT_GRACE", 600.0)
    state_path = make_state(tmp_path, NFS_SUB.format(n=40))
    (tmp_path / "work").chmod(0o755)
    state, plan = m.load_plan(state_path)
    runner = m.LocalAgents(tmp_path / "scratch", slots=3)
    master = m.Master(plan, state, runner, host="127.0.0.1")
    rc = await master.run()
    codes = {job: proc.returncode for job, proc in runner.procs.items()}
    await runner.aclose()
    assert rc == m.EXIT_DONE
    # the agents that connected were told no_more_tasks and left by themselves; one that had not
    # connected when the others had run everything is removed at once, as it should be
    finished = [c.job_id for c in load_state(state_path).chefs if c.no_more_sent]
    assert finished and [codes[job] for job in finished] == [0] * len(finished), codes


def free_port_pair() -> int:
    """The first of two consecutive free loopback ports."""
    import socket

    for _ in range(200):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two consecutive free ports")


async def prelaunched(tmp_path: Path, *, tasks: int, agents: int) -> tuple:
    """What master_submitter does before the master runs, without HTCondor: `agents` agents
    launched on this machine (one slot each) with the run's secret and a pair of ports, named in
    the state file. Returns the state file, the state and plan the master starts from, the
    agents' runner and the first port."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=tasks))
    (tmp_path / "work").chmod(0o755)
    state, plan = m.load_plan(state_path)
    core = restore(state, plan.config)
    launches = [a for a in core.prelaunch(agents, time.time()).actions if isinstance(a, SubmitAgent)]
    secret = p.make_secret()
    write_secret(plan.outdir, secret)
    first = free_port_pair()
    setup = AgentSetup(build_agent(plan.outdir), "127.0.0.1", f"{first}-{first + 1}", secret)
    runner = m.LocalAgents(tmp_path / "scratch", slots=agents)
    for launch in launches:  # the agents run before there is any master
        description, _ = prepare_agent(plan, launch, setup)
        core.handle(AgentSubmitted(launch.agent, await runner.submit(description)), time.time())
    extra = {"prelaunch": {"host": "127.0.0.1", "ports": [first, first + 1], "cluster": 1}}
    save_state(state_path, snapshot(core, plan.info, time.time(), extra))
    state, plan = m.load_plan(state_path)
    return state_path, state, plan, runner, first


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_agents_started_before_the_master_are_adopted_once_it_listens(tmp_path: Path) -> None:
    """What master_submitter does, without HTCondor: the first agents are launched before the
    master exists (prelaunch), told a range of ports and the run's secret, and named in the state
    file; they start at once and keep looking. The master, started after them, listens on that
    range, adopts them and submits none of its own; they run every task and exit 0."""
    state_path, state, plan, runner, first = await prelaunched(tmp_path, tasks=20, agents=2)
    master = m.Master(plan, state, runner, host="127.0.0.1")
    with trio.fail_after(120):
        rc = await master.run()
    codes = {job: proc.returncode for job, proc in runner.procs.items()}
    await runner.aclose()
    assert rc == m.EXIT_DONE and master.port in (first, first + 1)
    assert len(runner.submitted) == 2  # only the two prelaunched agents
    final = load_state(state_path)
    assert final.status is MasterStatus.DONE and final.counts().done == 20
    assert [(c.launches, c.recoveries) for c in final.chefs] == [(1, 0), (1, 0)]
    # those that connected ran the tasks and left by themselves (on a busy machine one of them
    # may find everything done before it connects: it is removed at the end, as it should be)
    finished = [c.job_id for c in final.chefs if c.no_more_sent]
    assert finished and [codes[job] for job in finished] == [0] * len(finished), codes


def test_prelaunched_agents_share_one_description_with_process_in_their_names(tmp_path: Path) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=5))
    state, plan = m.load_plan(state_path)
    core = restore(state, plan.config)
    launches = [a for a in core.prelaunch(3, 0.0).actions if isinstance(a, SubmitAgent)]
    setup = AgentSetup(plan.outdir / "agent.pyz", "10.0.0.1", "2853-2868", b"s" * 32)
    descriptions = [prepare_agent(plan, a, setup)[0] for a in launches]
    generic = submitter._by_process(descriptions, [a.agent for a in launches])
    assert generic is not None and "1.$(Process).1" in generic["arguments"]
    assert " 2853-2868 " in generic["arguments"]
    # nothing comes back but stdout and stderr: said, so the starter starts the agent at once
    # (with TransferOutput undefined it sleeps 1 s after the download, to tell changed files)
    assert generic["MY.TransferOutput"] == '""'
    for i, description in enumerate(descriptions):
        assert {k: v.replace("$(Process)", str(i)) for k, v in generic.items()} == description
    odd = [descriptions[0], {**descriptions[1], "request_memory": "99"}, descriptions[2]]
    assert submitter._by_process(odd, [a.agent for a in launches]) is None  # differs elsewhere


def test_removing_the_master_removes_its_agents(tmp_path: Path) -> None:
    desc = submitter.master_job(
        tmp_path / "master.20261123.7.0.state", master="/x/llic-master", condor_config=None, batch_name="b"
    )
    assert json.loads(desc["MY.OtherJobRemoveRequirements"]) == 'LlicMaster =?= "20261123.7.0"'
    assert json.loads(desc["MY.LlicMasterId"]) == "20261123.7.0"


async def test_state_file_problems_are_one_line_and_touch_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=2))
    assert m.main([str(tmp_path / "nowhere.state")]) == m.EXIT_UNUSABLE
    err = capsys.readouterr().err.strip()
    assert err == f"llic-master: error: {tmp_path / 'nowhere.state'}: no such state file"
    data = bytearray(state_path.read_bytes())
    data[-10] ^= 0x20
    state_path.write_bytes(bytes(data))
    before = sorted(os.listdir(state_path.parent))
    assert m.main([str(state_path)]) == m.EXIT_UNUSABLE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "checksum mismatch" in err and str(state_path) in err
    assert state_path.read_bytes() == bytes(data) and sorted(os.listdir(state_path.parent)) == before


async def test_a_submit_description_that_does_not_match_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=2))
    sub = state_path.parent / "master.m1.sub"
    sub.write_text(sub.read_text().replace("queue 2", "queue 3"))
    assert m.main([str(state_path)]) == m.EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert "tasks and" in err and "only in the description: [2]" in err
    sub.unlink()
    assert m.main([str(state_path)]) == m.EXIT_UNUSABLE
    assert "cannot read the submit file" in capsys.readouterr().err


def test_agent_job_carries_the_users_requirements_and_the_master_tag(tmp_path: Path) -> None:
    sub = NFS_SUB.format(n=2).replace(
        "queue", 'requirements = (Memory > 64)\nrequest_memory = 100\n+Project = "x"\nqueue'
    )
    state_path = make_state(tmp_path, sub)
    _, plan = m.load_plan(state_path)
    pyz = tmp_path / "llic-agent-0.pyz"
    desc = agent_job(plan, "1.0.1", tmp_path / "a", pyz, "10.0.0.5", 2853)
    assert desc["requirements"] == "(Memory > 64)" and desc["request_memory"] == "100"
    assert (
        desc["MY.Project"] == '"x"' and desc["MY.LlicMaster"] == '"m1"' and desc["MY.LlicAgent"] == '"1.0.1"'
    )
    assert desc["universe"] == "vanilla" and desc["executable"] == "/usr/bin/python3"
    assert desc["arguments"] == "-I llic-agent-0.pyz 10.0.0.5 2853 1.0.1 input.json"
    assert desc["transfer_input_files"] == f"{pyz}, {tmp_path / 'a' / 'input.json'}"


def test_input_blobs_follow_condor_transfer_rules(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "x").write_text("x")
    (tmp_path / "f").write_text("f")
    entries, blobs, notes = input_blobs(str(tmp_path), ["f", "d", "d/", "missing", "http://h/u"])
    assert [e["path"] for e in entries] == ["f", "d/sub/x", "sub/x"]
    assert blobs == [b"f", b"x", b"x"]
    assert len(notes) == 1 and "missing" in notes[0]


def test_address_of_a_sinful_string() -> None:
    assert agent_ip("<10.213.2.10:38399?addrs=10.213.2.10-38399&alias=cm>") == "10.213.2.10"
    assert agent_ip("<cm.example:9618>") is None
    assert agent_ip("<127.0.0.1:9618>") is None and agent_ip("<[fd00::5]:9618>") is None
    assert not usable_ip("127.0.0.1") and usable_ip("10.0.0.1")


class RefusingRunner(FakeRunner):
    async def submit(self, description: dict[str, str]) -> str:
        self.submitted.append(description)
        raise m.GatewayError("submit", "the schedd said no")


async def test_agents_that_cannot_be_submitted_make_the_master_give_up_with_status_3(tmp_path: Path) -> None:
    """Refusals are retried with back-off (1 s, then 2 s) until the chef is unrecoverable; the
    master then exits 3, which master_submitter's on_exit_hold turns into a held job."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=2), num_agent_recoveries=1)
    runner = RefusingRunner()
    state, plan = m.load_plan(state_path)
    t0 = trio.current_time()
    with trio.fail_after(20):
        rc = await m.Master(plan, state, runner, host="127.0.0.1").run()
    assert rc == m.EXIT_GAVE_UP and trio.current_time() - t0 >= 3
    assert runner.agent_names() == ["1.0.1", "1.0.2"]
    final = load_state(state_path)
    assert final.status is MasterStatus.GAVE_UP and final.extra["counters"]["submit_failures"] == 2
    assert [t.state for t in final.tasks] == [TaskState.QUEUED] * 2


def test_request_attributes_are_named_as_in_the_job_ad() -> None:
    attrs = {"request_memory": "256", "request_cpus": "1", "Request_GPUs": "0", "request_disk": "1 GB"}
    attrs["rank"] = "1"
    assert request_attributes(attrs) == {"RequestMemory": 256.0, "RequestCpus": 1.0, "RequestGpus": 0.0}


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_agents_submitted_with_the_master_are_served_while_it_builds_its_zipapp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master's own zipapp (a child Python compiles it) is for the agents it submits itself:
    the agents master_submitter sent with it get their tasks before it is built."""
    import threading

    state_path, state, plan, runner, _ = await prelaunched(tmp_path, tasks=6, agents=1)
    gate = threading.Event()
    done_before_build: list[int] = []
    opened_by_a_result: list[bool] = []

    def held_build(out: Path) -> Path:
        opened_by_a_result.append(gate.wait(20))  # False: nothing was served while it waited
        return build_agent(out)

    monkeypatch.setattr(m, "build_agent", held_build)
    master = m.Master(plan, state, runner, host="127.0.0.1")

    async def open_gate_after_a_result() -> None:
        while master.core.counts().done == 0:
            await trio.sleep(0.05)
        done_before_build.append(master.core.counts().done)
        gate.set()

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(open_gate_after_a_result)
            rc = await master.run()
    gate.set()
    await runner.aclose()
    assert rc == m.EXIT_DONE and opened_by_a_result == [True] and done_before_build[0] >= 1
    assert master.setup is not None and load_state(state_path).counts().done == 6
