"""llic/connection.py on a socket pair: tasks written at once to an agent whose sender has
nothing under way, the rest (a full socket) and everything after it by the sender, all in
order; small private inputs read ahead into the sender's write; results received together
placed in one go."""

from __future__ import annotations

import os
import socket
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from llic import connection
from llic import protocol as p
from llic.connection import AgentConnection, Connections
from llic.events import ResultReceived, SendNoMoreTasks, SendTasks, TransferDone
from llic.netadmit import IN
from llic.taskbook import Assignment

AGENT = "1.0.1"


def connections(specs: dict[int, p.Task]) -> Connections:
    plan = SimpleNamespace(specs=specs, transfer=False, private_inputs=lambda spec: [])
    return Connections(plan, bytes(32), lambda event: None, lambda *a: True, Counter())  # type: ignore[arg-type]


def pair(small: bool) -> tuple[AgentConnection, socket.socket]:
    """The master's end as an AgentConnection of protocol version 2, and the agent's end."""
    master, agent = socket.socketpair()
    if small:  # a socket that takes a few kB at once: a large batch is written in parts
        master.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        agent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(master))
    return AgentConnection(AGENT, 0, "peer", stream, version=2), agent


async def read_all(sock: socket.socket) -> list[p.Message]:
    """Every message until the master's end closes."""
    decoder = p.Decoder(p.FROM_MASTER)
    got: list[p.Message] = []
    sock.setblocking(False)
    while True:
        await trio.lowlevel.wait_readable(sock)
        data = sock.recv(1 << 16)
        if not data:
            return got
        decoder.feed(data)
        got += list(decoder)


async def until_idle(conn: AgentConnection) -> None:
    with trio.fail_after(10):
        while not conn.sender_idle:
            await trio.sleep(0.001)


async def test_tasks_go_out_at_once_when_the_sender_is_idle() -> None:
    specs = {i: p.Task(i, "/bin/true", "/data", cluster=7) for i in range(3)}
    links = connections(specs)
    conn, agent = pair(small=False)
    links.conns[AGENT] = conn
    async with trio.open_nursery() as nursery:
        nursery.start_soon(links._sender, conn)
        await until_idle(conn)
        links.deliver(SendTasks(AGENT, (Assignment(0, 1), Assignment(1, 1))))
        assert not conn.outbox  # written by deliver itself: nothing left for the sender
        links.deliver(SendTasks(AGENT, (Assignment(2, 4),)))
        assert not conn.outbox
        conn.close("done")
        got = await read_all(agent)
    assert [m.type for m in got] == [p.TASKS, p.TASKS]
    assert [(t.process, t.attempt, t.cluster) for m in got for t in m.tasks()] == [
        (0, 1, 7),
        (1, 1, 7),
        (2, 4, 7),
    ]
    agent.close()


async def test_what_the_socket_does_not_take_at_once_follows_in_order() -> None:
    """A batch larger than the socket takes: deliver writes a part, the sender the rest, and
    what the core says meanwhile (more tasks, no_more_tasks) goes after it, never between."""
    big = ["x" * 20000]
    specs = {i: p.Task(i, "/bin/echo", "/data", arguments=big) for i in range(8)}
    links = connections(specs)
    conn, agent = pair(small=True)
    links.conns[AGENT] = conn
    got: list[Any] = []

    async def reader() -> None:
        got.extend(await read_all(agent))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(links._sender, conn)
        await until_idle(conn)
        links.deliver(SendTasks(AGENT, tuple(Assignment(i, 1) for i in range(6))))
        assert conn.outbox and isinstance(conn.outbox[0], bytes)  # the rest, for the sender
        links.deliver(SendTasks(AGENT, (Assignment(6, 2), Assignment(7, 2))))
        links.deliver(SendNoMoreTasks(AGENT))
        conn.close("done")
        nursery.start_soon(reader)
    assert [m.type for m in got] == [p.TASKS, p.TASKS, p.NO_MORE_TASKS]
    tasks = [t for m in got[:2] for t in m.tasks()]
    assert [(t.process, t.attempt) for t in tasks] == [(i, 1) for i in range(6)] + [(6, 2), (7, 2)]
    assert all(t.arguments == tuple(big) for t in tasks)
    agent.close()


def transfer_connections(
    specs: dict[int, p.Task], events: list[Any], wants: Any = lambda *a: True
) -> Connections:
    """Connections of a TRANSFER-mode plan whose tasks' private inputs are their input files."""
    plan = SimpleNamespace(
        specs=specs,
        transfer=True,
        private_inputs=lambda spec: list(spec.transfer_input_files),
        config=SimpleNamespace(files_style_mode="condor"),
        protected_paths=frozenset(),
    )
    return Connections(plan, bytes(32), events.append, wants, Counter())  # type: ignore[arg-type]


@pytest.mark.parametrize("budget_tasks", [100, 2])
async def test_small_private_inputs_go_in_the_turns_write_and_large_ones_by_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget_tasks: int
) -> None:
    """Tasks with small private inputs, one with a large one (past SMALL_INPUTS) and one whose
    input is missing arrive in order, each with its files; past the read-ahead budget tasks go
    by themselves. A transfer is accounted per task that carried files, and the budget is all
    given back."""
    monkeypatch.setattr(connection, "READ_AHEAD_BUDGET", budget_tasks * connection.SMALL_INPUTS)
    contents = {i: os.urandom(10240) for i in range(6)}
    contents[4] = os.urandom(connection.SMALL_INPUTS + 1)
    for i, data in contents.items():
        (tmp_path / f"q.{i}").write_bytes(data)
    specs = {i: p.Task(i, "/bin/true", str(tmp_path), transfer_input_files=(f"q.{i}",)) for i in range(7)}
    events: list[Any] = []
    links = transfer_connections(specs, events)
    conn, agent = pair(small=False)
    links.conns[AGENT] = conn
    got: list[Any] = []

    async def reader() -> None:
        got.extend(await read_all(agent))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(links._sender, conn)
        nursery.start_soon(reader)
        await until_idle(conn)
        links.deliver(SendTasks(AGENT, tuple(Assignment(i, 1) for i in range(7))))
        links.deliver(SendNoMoreTasks(AGENT))
        conn.close("done")
    assert [m.type for m in got] == [p.TASK] * 7 + [p.NO_MORE_TASKS]
    assert [m.task().process for m in got[:7]] == list(range(7))
    for i in range(6):
        assert [f["path"] for f in got[i].files] == [f"q.{i}"] and got[i].blobs == [contents[i]]
    assert got[6].files == []  # q.6 is missing: the agent says so (prepare_failed)
    transfers = [e for e in events if isinstance(e, TransferDone)]
    assert [(e.process, e.direction, e.nbytes) for e in transfers] == [
        (i, IN, len(contents[i])) for i in range(6)
    ]
    assert links.read_ahead == 0
    agent.close()


async def test_results_received_together_are_placed_once_each(tmp_path: Path) -> None:
    """`result` messages that arrive together: each result for the core, in order; the files of
    those it records placed (one thread hop), a second copy of a result not placed over the
    first, one that cannot be placed reported in its error, one the core does not want left."""
    specs = {i: p.Task(i, "/bin/true", str(tmp_path)) for i in range(4)}
    (tmp_path / "out.2").mkdir()  # a directory where task 2's output would go: cannot be placed
    events: list[Any] = []
    links = transfer_connections(specs, events, wants=lambda agent, process, attempt: process != 3)
    conn, agent = pair(small=False)
    frames: list[bytes] = []
    sent = [(0, b"first"), (1, b"one"), (0, b"second"), (2, b"two"), (3, b"three")]
    for process, data in sent:
        result = p.TaskResult(process, 1, p.STATUS_OK, exit_code=0)
        entry = p.file_entry(f"out.{process}", data)
        frames += p.encode_frames({"t": p.RESULT, "result": result, "files": [entry]}, [data])
    agent.sendall(b"".join(frames))
    agent.close()
    with pytest.raises(connection._Closed):
        await links._receiver(conn, p.Decoder({p.RESULT, p.RESULTS}))
    results = [e.result for e in events if isinstance(e, ResultReceived)]
    assert [r.process for r in results] == [0, 1, 0, 2, 3]
    assert (tmp_path / "out.0").read_bytes() == b"first" and (tmp_path / "out.1").read_bytes() == b"one"
    assert not (tmp_path / "out.3").exists()
    assert results[3].error is not None and "output files not placed" in results[3].error
    assert [r.error for i, r in enumerate(results) if i != 3] == [None] * 4
    assert links.counters["results"] == 5 and links.counters["placement_errors"] == 1
    assert [e.process for e in events if isinstance(e, TransferDone)] == [0, 1, 0, 2, 3]


async def test_a_result_after_a_failure_in_its_group_is_asked_about_once_the_failure_counts(
    tmp_path: Path,
) -> None:
    """A run that did not go may make the chef start over (max_task_failures): the results
    received with it, after it, no longer count, and their files must not be placed; those
    before it still are. (Here the core stops wanting results once it has seen a failure.)"""
    specs = {i: p.Task(i, "/bin/true", str(tmp_path)) for i in range(3)}
    events: list[Any] = []

    def wants(agent: str, process: int, attempt: int) -> bool:
        return not any(isinstance(e, ResultReceived) and not e.result.ok for e in events)

    links = transfer_connections(specs, events, wants=wants)
    conn, agent = pair(small=False)
    frames: list[bytes] = []
    for process, status in ((0, p.STATUS_OK), (1, p.STATUS_LAUNCH_FAILED), (2, p.STATUS_OK)):
        result = p.TaskResult(process, 1, status, exit_code=0)
        data = f"from {process}".encode()
        entry = p.file_entry(f"out.{process}", data)
        frames += p.encode_frames({"t": p.RESULT, "result": result, "files": [entry]}, [data])
    agent.sendall(b"".join(frames))
    agent.close()
    with pytest.raises(connection._Closed):
        await links._receiver(conn, p.Decoder({p.RESULT, p.RESULTS}))
    assert [e.result.process for e in events if isinstance(e, ResultReceived)] == [0, 1, 2]
    assert (tmp_path / "out.0").read_bytes() == b"from 0" and (tmp_path / "out.1").read_bytes() == b"from 1"
    assert not (tmp_path / "out.2").exists()
