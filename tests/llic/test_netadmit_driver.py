"""Network admission and accounting in the master's trio driver (issue 8), on loopback with the
real agent zipapp as local processes (LocalAgents): every local agent is on 127.0.0.0/8, which
gets a low limit, so each private-input transfer is paced at its reservation and the measured
rate of the subnet stays under the limit; the figures land in the state file and master_q.

The rates are checked where the bytes arrive, not only in the master's own accounting: the
agents talk to the master through a relay (`Relay`) that timestamps every chunk as it reads it.
Bounds are cumulative from a moment before any transfer could start, so they hold at any speed:
a slow or loaded machine only delivers later, never more bytes by a given time."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import trio

from llic import master as m
from llic import master_q
from llic import protocol as p
from llic.master_core import MasterStatus
from llic.netadmit import IN, OUT
from llic.state import load_state

from .test_master_driver import make_state

SUB = """\
executable = job.sh
arguments = $(Process)
should_transfer_files = YES
transfer_input_files = in.$(Process)
output = out.$(Process)
+LlicMinMbps = 1
queue {n}
"""
JOB_SH = """#!/bin/sh
wc -c < "in.$1"
"""
SIZE = 100_000  # bytes per private input: 0.8 Mbit
LIMIT_MBPS = 4
UNPACED = 64 << 10  # bytes the limit does not cover: handshakes, no_more_tasks, small results


class Arrived(NamedTuple):
    """One protocol message as the relay passed it on."""

    conn: int  # the relay's number for the agent's connection
    direction: str  # netadmit's IN (master to agent) or OUT
    kind: str  # the message type
    blob_bytes: int  # its files
    first: float  # when its first and last bytes arrived
    last: float


class Relay:
    """A TCP relay between local agents and the master that records, by its own reading of the
    clock in threads of its own, every chunk as it arrives (time, connection, direction, bytes)
    and every protocol message (first and last chunk's time): what the receiving side saw,
    independent of the master's accounting. The wall clock, as the pacing uses it.

    The first `together` agents are held until all of them have connected, then passed on at
    once, so that each finds tasks left however slowly the machine starts them. `pause_out`
    seconds after each chunk from an agent make a slow link: a large result takes a while."""

    def __init__(self, together: int = 1, pause_out: float = 0.0) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.together = together
        self.pause_out = pause_out
        self.upstream = 0  # the master's port: set before the first agent starts
        self.opened: float | None = None  # when the first agent connected: before any transfer
        self.chunks: list[tuple[float, int, str, int]] = []  # (time, conn, direction, bytes)
        self.messages: list[Arrived] = []
        self.errors: list[BaseException] = []
        self._sockets: list[socket.socket] = [self.listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        held: list[socket.socket] = []
        n = 0
        while True:
            try:
                agent, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self.opened is None:
                    self.opened = time.time()
            held.append(agent)
            if n + len(held) < self.together:
                continue
            for waiting in held:
                master = socket.create_connection(("127.0.0.1", self.upstream))
                self._sockets += [waiting, master]
                for src, dst, direction in ((waiting, master, OUT), (master, waiting, IN)):
                    threading.Thread(target=self._pump, args=(n, src, dst, direction), daemon=True).start()
                n += 1
            held = []

    def _pump(self, conn: int, src: socket.socket, dst: socket.socket, direction: str) -> None:
        decoder = p.Decoder()
        first = 0.0
        try:
            while data := src.recv(1 << 16):
                now = time.time()
                if decoder.idle:
                    first = now
                decoder.feed(data)
                with self._lock:
                    self.chunks.append((now, conn, direction, len(data)))
                    for msg in decoder:
                        self.messages.append(
                            Arrived(conn, direction, msg.type, sum(map(len, msg.blobs)), first, now)
                        )
                        first = now  # the next message, if any, began in this chunk
                dst.sendall(data)
                if direction == OUT and self.pause_out:
                    time.sleep(self.pause_out)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the other side went away: the master's or the agent's business
        except BaseException as exc:  # a stream that does not decode: the test fails on it
            self.errors.append(exc)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def bytes_ahead_of(self, bps: float) -> float:
        """The most bytes (both directions) that arrived by some moment beyond what `bps`
        allows since the first agent connected: <= 0 when never faster than `bps`."""
        assert self.opened is not None, "no agent connected through the relay"
        total, worst = 0, float("-inf")
        for at, _conn, _direction, nbytes in sorted(self.chunks):
            total += nbytes
            worst = max(worst, total - bps / 8 * (at - self.opened))
        return worst


class RelayedAgents(m.LocalAgents):
    """LocalAgents that connect to the master through a Relay."""

    def __init__(self, scratch: Path, slots: int, pause_out: float = 0.0) -> None:
        super().__init__(scratch, slots=slots)
        self.relay = Relay(together=slots, pause_out=pause_out)

    async def submit(self, description: dict[str, str]) -> str:
        pyz, host, port, *rest = description["arguments"].split()[1:]  # after -I
        self.relay.upstream = int(port)
        arguments = " ".join(["-I", pyz, host, str(self.relay.port), *rest])
        return await super().submit({**description, "arguments": arguments})


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_limited_subnet_is_paced_and_accounted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 8
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(JOB_SH)
    (work / "job.sh").chmod(0o755)
    for i in range(n):
        (work / f"in.{i}").write_bytes(os.urandom(SIZE))
    state_path = make_state(
        tmp_path,
        SUB.format(n=n),
        network_capacity=f"127.0.0.0/8:{LIMIT_MBPS}Mbps",
        network_transfers_per_subnet=2,
        window_size=3,
    )
    state, plan = m.load_plan(state_path)
    assert plan.min_bps == 1e6
    runner = RelayedAgents(tmp_path / "scratch", slots=3)  # the three agents connect together
    relay = runner.relay
    master = m.Master(plan, state, runner, host="127.0.0.1")
    started = trio.current_time()
    with trio.fail_after(120):
        rc = await master.run()
    elapsed = trio.current_time() - started
    await runner.aclose()
    relay.close()
    assert rc == m.EXIT_DONE
    assert relay.errors == []
    for i in range(n):
        assert (work / f"out.{i}").read_text().strip() == str(SIZE)
    final = load_state(state_path)
    assert final.status is MasterStatus.DONE and final.counts().done == n
    net = final.extra["net"]
    subnet = net["subnets"]["127.0.0.0/8"]
    limit = LIMIT_MBPS * 1e6
    # Where the bytes arrived: every input came through, and the subnet's traffic (inputs, task
    # messages, results, handshakes) never ran ahead of the limit, counted from the first agent's
    # connection (no transfer starts before it). Each input is paced at its reservation and the
    # reservations sum to at most the limit, so only the few unpaced bytes can be ahead; an
    # unpaced input alone would be SIZE ahead.
    inputs = [a.blob_bytes for a in relay.messages if (a.direction, a.kind) == (IN, p.TASK)]
    assert inputs == [SIZE] * n
    ahead = relay.bytes_ahead_of(limit)
    assert ahead <= UNPACED, f"{ahead:.0f} bytes arrived ahead of {LIMIT_MBPS} Mbps"
    # the master's own accounting: its figures agree with what arrived, and it saw no excess
    assert subnet["limit_bps"] == limit
    assert subnet["bytes_in"] == sum(inputs)  # blobs (the message frames are not counted)
    assert subnet["bytes_out"] > 0 and net["master"]["transfers"] >= 2 * n
    assert subnet["max_reserved_bps"] <= limit
    assert subnet["peak_bps"] <= limit * 1.02  # paced: the 10 s window never saw more than the limit
    assert net["held"] > 0  # 2 transfers at a time, 3 agents: some waited
    # each agent took transfers (one at a time each: its connection carries one paced transfer);
    # they connected together, so each filled its window of 3 from the 8 tasks
    assert len(net["agents"]) == 3 and all(row["bytes_in"] > 0 for row in net["agents"].values())
    assert sum(row["transfers"] for row in net["agents"].values()) == net["master"]["transfers"]

    assert master_q.main([str(state_path), "-net"]) == 0
    text = capsys.readouterr().out
    assert "127.0.0.0/8" in text and "4Mbps" in text
    assert master_q.main([str(state_path), "-json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["net"]["subnets"]["127.0.0.0/8"]["bytes_in"] == subnet["bytes_in"]
    if os.environ.get("LLIC_NET_REPORT"):  # the figures docs/bench/network-loopback.json records
        Path(os.environ["LLIC_NET_REPORT"]).write_text(
            json.dumps({"elapsed_s": elapsed, "tasks": n, "input_bytes": SIZE, "net": net}, indent=2) + "\n"
        )
        print(text)


BULK_SUB = """\
executable = job.sh
arguments = $(Process) {barrier}
should_transfer_files = YES
output = out.$(Process)
queue {n}
"""
BULK_SH = """#!/bin/sh
# processes 0 and 1 write a large file, then wait for each other, so that both large results are
# ready at once (on two agents: one each, window 1); the others write a small one
if [ "$1" -lt 2 ]; then
    head -c {big} /dev/zero > res.$1
    touch "$2/ready.$1"
    while [ ! -e "$2/ready.0" ] || [ ! -e "$2/ready.1" ]; do sleep 0.05; done
else
    echo small > res.$1
fi
echo done $1
"""
BIG = 12 << 20
THRESHOLD = 1 << 20


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_two_large_outputs_on_one_subnet_do_not_overlap(tmp_path: Path) -> None:
    """Two agents on 127.0.0.0/8 finish a large output each at about the same moment: with
    BULK_OUTPUT_THRESHOLD under their size the master lets one return at a time (the second
    agent announces its result and waits), so the two return transfers, as the master timed
    them and as they arrived at the relay, do not overlap; the small results go at once; every
    file arrives whole."""
    n = 6
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(BULK_SH.replace("{big}", str(BIG)))
    (work / "job.sh").chmod(0o755)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    sub = BULK_SUB.format(n=n, barrier=barrier)
    state_path = make_state(tmp_path, sub, bulk_output_threshold=THRESHOLD, window_size=1)
    state, plan = m.load_plan(state_path)
    # the two agents connect together; a large result takes about half a second through the relay
    runner = RelayedAgents(tmp_path / "scratch", slots=2, pause_out=0.002)
    relay = runner.relay
    master = m.Master(plan, state, runner, host="127.0.0.1")
    with trio.fail_after(120):
        rc = await master.run()
    await runner.aclose()
    relay.close()
    assert rc == m.EXIT_DONE
    assert relay.errors == []
    for i in range(n):
        assert (work / f"out.{i}").read_text() == f"done {i}\n"
        assert (work / f"res.{i}").stat().st_size == (BIG if i < 2 else 6)
    final = load_state(state_path)
    net = final.extra["net"]
    assert final.extra["counters"]["bulk_requests"] == 2
    assert net["bulk"]["grants"] == 2 and net["bulk"]["threshold"] == THRESHOLD
    assert net["bulk"]["waiting"] == {} and net["bulk"]["active"] == {}  # nothing left behind
    large = sorted(
        (start, end)
        for _agent, _subnet, direction, nbytes, start, end in net["log"]
        if direction == "out"
        if nbytes > THRESHOLD
    )
    assert len(large) == 2
    assert large[0][1] <= large[1][0], f"large returns overlapped: {large}"
    # as the relay saw them arrive: the second large result's first byte came after the first's
    # last (at any speed: the master grants the second only once it has the whole first)
    arrived = sorted(
        (a.first, a.last)
        for a in relay.messages
        if (a.direction, a.kind) == (OUT, p.RESULT) and a.blob_bytes > THRESHOLD
    )
    assert len(arrived) == 2
    assert arrived[0][1] <= arrived[1][0], f"large results arrived overlapping: {arrived}"
