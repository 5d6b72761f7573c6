"""llic/connection.py's sending side on a socket pair: tasks written at once to an agent whose
sender has nothing under way, the rest (a full socket) and everything after it by the sender,
all in order."""

from __future__ import annotations

import socket
from collections import Counter
from types import SimpleNamespace
from typing import Any

import trio

from llic import protocol as p
from llic.connection import AgentConnection, Connections
from llic.events import SendNoMoreTasks, SendTasks
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
