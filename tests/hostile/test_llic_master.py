"""Issue 14, row 6: what a peer that holds nothing can do to an llic master (row 9, the modes
of returned files, is in tests/llic/test_files.py). On loopback, without HTCondor: the master's driver in
this process (fake agents from test_master_driver) for the exact counters, and a real
`llic-master` process with real local agents under a flood of connections for its memory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from llic import connection
from llic import protocol as p
from llic.state import load_state
from tests.llic.test_master_driver import (
    NFS_SUB,
    FakeAgent,
    FakeRunner,
    closed_by_master,
    make_state,
    secret_of,
    start_master,
    until,
)

pytestmark = pytest.mark.hostile


async def test_the_master_listens_only_where_agents_are_told_to_connect(tmp_path: Path) -> None:
    """Row 6: on main the master listened on 0.0.0.0. 127.0.0.2 is this machine too (all of
    127/8 is loopback), but not the address agents were given."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=1))
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, FakeRunner())
        assert run.master.listen_host() == "127.0.0.1"
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.2", run.port)
        (await trio.open_tcp_stream("127.0.0.1", run.port)).socket.close()
        nursery.cancel_scope.cancel()


async def test_a_peer_may_send_a_few_kb_before_it_authenticates(tmp_path: Path) -> None:
    """Row 6: main buffered a hello frame of up to 1 MiB from anyone, until the handshake timed
    out. Now a frame larger than PREAUTH_BYTES, or more bytes than that in all, ends the
    connection at once, counted as malformed."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=2))
    runner = FakeRunner()
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (agent,) = await until("a submission", runner.agent_names)
        big = await FakeAgent.connect(run.port)
        await big.stream.send_all((1 << 20).to_bytes(4, "big") + os.urandom(20_000))
        assert await closed_by_master(big)
        trickle = await FakeAgent.connect(run.port)  # small frames, but too many bytes
        hello = {"t": "hello", "agent": agent, "master": "m1", "version": 1, "nonce_a": p.make_nonce()}
        with pytest.raises(trio.BrokenResourceError):
            for _ in range(200):
                await trickle.send(hello | {"pad": "x" * 100})
        assert run.master.counters["malformed"] == 2
        assert run.master.counters["handshake_timeouts"] == 0
        good = await FakeAgent.connect(run.port)
        good.real = secret_of(state_path, agent)
        assert (await good.handshake(agent, good.real) or p.Message("x", {})).type == p.WELCOME
        assert sorted(await good.serve()) == [0, 1]


async def test_idle_connections_past_the_cap_push_out_the_oldest_and_agents_still_connect(
    tmp_path: Path,
) -> None:
    """Row 6: main kept every unauthenticated connection until its handshake timed out."""
    state_path = make_state(tmp_path, NFS_SUB.format(n=2))
    runner = FakeRunner()
    extra = 20
    async with trio.open_nursery() as nursery:
        run = await start_master(nursery, state_path, runner)
        (agent,) = await until("a submission", runner.agent_names)
        idle = [await FakeAgent.connect(run.port) for _ in range(connection.MAX_UNAUTHENTICATED + extra)]
        await until("the oldest dropped", lambda: run.master.counters["unauthenticated_dropped"] >= extra)
        assert len(run.master.links.unauthenticated) <= connection.MAX_UNAUTHENTICATED
        for old in idle[:extra]:
            assert await closed_by_master(old)
        good = await FakeAgent.connect(run.port)
        good.real = secret_of(state_path, agent)
        assert (await good.handshake(agent, good.real) or p.Message("x", {})).type == p.WELCOME
        assert sorted(await good.serve()) == [0, 1]
        for s in idle:
            await s.stream.aclose()


# --------------------------------------------------------------------------- a live master, flooded

FLOOD_CONNECTIONS = 300  # half announce a 1 MiB hello and send 900 KiB of it, half sit idle
RSS_BOUND = 32 << 20  # what the flood may add to the master's resident memory
JUNK = (1 << 20).to_bytes(4, "big") + os.urandom(900 << 10)


def _rss(pid: int) -> int:
    """Resident memory of a live process (0 once it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _flood(port: int, rounds: int, sent: list[int]) -> None:
    """Half the connections announce a 1 MiB hello and send 900 KiB of it; half say nothing.
    Each reconnects (after a pause) when the master drops it, `rounds` times."""

    async def one(junk: bool) -> None:
        for _ in range(rounds):
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.5)
                continue
            try:
                if junk:
                    await stream.send_all(JUNK)
                sent[0] += 1
                while await stream.receive_some(4096):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            finally:
                await stream.aclose()
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        for i in range(FLOOD_CONNECTIONS):
            nursery.start_soon(one, i % 2 == 0)


async def test_a_flooded_master_stays_small_and_its_agents_still_connect(tmp_path: Path) -> None:
    """A real llic-master with a real local agent: a flood of unauthenticated connections
    (junk and idle ones, reconnecting when dropped) while the agent's tasks run and, after one
    agent is killed, while its replacement connects. The master's RSS stays within RSS_BOUND of
    what it was before the flood, and every task is recorded once."""
    release = tmp_path / "release"
    sub = (
        "executable = /bin/sh\n"
        f"arguments = \"-c 'while [ ! -e {release} ]; do sleep 0.2; done'\"\n"
        "should_transfer_files = NO\n"
        "queue 4\n"
    )
    port = _free_port()
    state_path = make_state(tmp_path, sub, initial_master_port_number=port, window_size=1)
    log = tmp_path / "master.log"
    with open(log, "wb") as out:
        master = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llic.master",
                str(state_path),
                "--host",
                "127.0.0.1",
                "--local-agents",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        await until("the first agent connected", lambda: "agent connected" in log.read_text(), timeout=60)
        baseline = _rss(master.pid)
        peak = [baseline]
        sent = [0]

        async def watch() -> None:
            while True:
                peak[0] = max(peak[0], _rss(master.pid))
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            nursery.start_soon(_flood, port, 4, sent)
            await until("the flood under way", lambda: sent[0] >= FLOOD_CONNECTIONS, timeout=60)
            agents = _agent_pids(master.pid)
            assert agents, "no local agent process found"
            for pid in agents:
                os.kill(pid, 9)  # its chef submits a new one, which must connect through the flood
            await until(
                "a second agent connected", lambda: log.read_text().count("agent connected") >= 2, timeout=90
            )
            release.touch()
            await until("the master to finish", lambda: master.poll() is not None, timeout=120)
            nursery.cancel_scope.cancel()
        assert master.returncode == 0, log.read_text()[-3000:]
        print(f"master RSS before the flood {baseline >> 20} MiB, peak {peak[0] >> 20} MiB")
        assert peak[0] - baseline < RSS_BOUND, (baseline, peak[0])
        state = load_state(state_path)
        counters = state.extra["counters"]
        assert sorted(t.process for t in state.tasks if t.state.value == "done") == [0, 1, 2, 3]
        assert counters["malformed"] + counters.get("unauthenticated_dropped", 0) >= FLOOD_CONNECTIONS // 2
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()


def _agent_pids(master_pid: int) -> list[int]:
    """The master's local agent processes (children whose command line runs the agent zipapp)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == master_pid and b"pyz" in cmdline:
            pids.append(int(entry.name))
    return pids


def test_master_listen_address_is_an_ipv4_address_a_name_or_star() -> None:
    from common.config import ConfigError
    from llic.config import parse_llic_config

    for ok in ("", "*", "10.0.0.5", "submit.example.org"):
        assert parse_llic_config(f"MASTER_LISTEN_ADDRESS = {ok}\n", source="c").master_listen_address == ok
    for bad in ("0.0.0.0:2853", "fd00::5", "a b", "-x"):
        with pytest.raises(ConfigError, match="MASTER_LISTEN_ADDRESS"):
            parse_llic_config(f"MASTER_LISTEN_ADDRESS = {bad}\n", source="c")
