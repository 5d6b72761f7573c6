"""The sealed TCP channel for replicated state, and the Condor Module's files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

import faultD.condor_role
from common.condor import DaemonRef, Gateway, GatewayError
from common.overlay.bulk import BulkChannel
from common.overlay.envelope import SignedSealer
from common.overlay.identity import IdentityFiles, NodeIdentity, load_identity
from common.overlay.messages import Peer
from common.wire import HEADER, Message, MessageCodec
from deploy.harness.ring_keys import RingKeys
from deploy.harness.sandbox import poll_until_async
from faultD.condor_role import ACCOUNTANT, CondorRole, RoleRefused, daemon_answers
from faultD.config import CondorSection
from faultD.messages import PoolState, ReplicaPush, StateFile
from faultD.service import BULK_TYPES

KEY = bytes(range(32))
ME = Peer(id=5, addr="127.0.0.1:1")


def push(data: bytes = b"priorities") -> ReplicaPush:
    files = [StateFile(name="accountant", data=data)]
    state = PoolState(
        manager=5, epoch=1, version=3, taken_at=1.0, files=files, checksum=PoolState.digest(files)
    )
    return ReplicaPush(sender=ME, state=state)


async def send_raw(port: int, data: bytes) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)


def identity(tmp_path: Path) -> NodeIdentity:
    """ME's key and certificate (node id 5, speaking from 127.0.0.1), in a ring of its own."""
    keys = RingKeys(tmp_path, ring="faultd:t")
    files = keys.node("me", hosts=["127.0.0.1"], pool="t", node_id=ME.id)
    return load_identity(IdentityFiles(files.key, files.cert, keys.ca_file, None), same_pool=True)


async def test_bulk_channel_delivers_sealed_messages_and_drops_the_rest(tmp_path: Path) -> None:
    got: list[Message] = []

    async def on_message(msg: Message, peer: str) -> None:
        got.append(msg)

    codec = MessageCodec(list(BULK_TYPES), name="t", max_size=1 << 20)
    me = identity(tmp_path)
    channel = BulkChannel(KEY, me, codec, on_message)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(channel.serve, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        big = push(os.urandom(200_000))
        assert await channel.send(f"127.0.0.1:{port}", big)
        await poll_until_async("the big push delivered", lambda: got)
        assert got == [big]

        # A stranger's key, garbage, a lying header, a truncated frame: all dropped and counted.
        stranger = SignedSealer(bytes(32), me, context="bulk", name="x").seal(
            codec.encode(push()), f"127.0.0.1:{port}", time.time(), os.urandom(16)
        )
        await send_raw(port, HEADER.pack(len(stranger)) + stranger)
        await send_raw(port, HEADER.pack(5) + b"hello")
        await send_raw(port, HEADER.pack(1 << 30) + b"x")
        await send_raw(port, HEADER.pack(100) + b"short")
        # Each connection ends in a drop or a delivery: wait until all four have ended either way.
        await poll_until_async(
            "the four connections handled", lambda: sum(channel.drops.values()) + len(got) >= 5
        )
        assert got == [big]
        assert sum(channel.drops.values()) == 4, channel.drops
        # ... and the channel still works.
        assert await channel.send(f"127.0.0.1:{port}", push(b"again"))
        await poll_until_async("the second push delivered", lambda: len(got) >= 2)
        assert got == [big, push(b"again")]
        nursery.cancel_scope.cancel()


@pytest.mark.hostile
async def test_one_address_cannot_take_every_unauthenticated_slot(tmp_path: Path) -> None:
    """Idle connections (which may wait header_timeout before they are dropped) from one source
    take at most its own slots; a member's message still gets through beside them, and the
    global cap still holds against several sources."""
    got: list[Message] = []

    async def on_message(msg: Message, peer: str) -> None:
        got.append(msg)

    codec = MessageCodec(list(BULK_TYPES), name="t", max_size=1 << 20)
    channel = BulkChannel(
        KEY, identity(tmp_path), codec, on_message,
        header_timeout=120, max_unauthenticated=4, max_unauthenticated_per_peer=2,
    )  # fmt: skip
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(channel.serve, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        idle: list[trio.SocketStream] = []

        async def hold(source: str, held: int) -> None:
            idle.append(await trio.open_tcp_stream("127.0.0.1", port, local_address=source))
            await poll_until_async(f"{held} connections held", lambda: channel.unauthenticated >= held)

        await hold("127.0.0.2", 1)
        await hold("127.0.0.2", 2)
        idle.append(await trio.open_tcp_stream("127.0.0.1", port, local_address="127.0.0.2"))
        await poll_until_async(
            "the third from 127.0.0.2 refused", lambda: channel.drops.get("too_many_from_peer") == 1
        )
        assert await channel.send(f"127.0.0.1:{port}", push(b"beside them"))
        await poll_until_async("the member's push delivered", lambda: got)
        assert got == [push(b"beside them")]
        await hold("127.0.0.3", 3)
        await hold("127.0.0.4", 4)
        idle.append(await trio.open_tcp_stream("127.0.0.1", port, local_address="127.0.0.5"))
        await poll_until_async(
            "a fifth source over the cap refused", lambda: channel.drops.get("too_many_connections") == 1
        )
        assert channel.drops.get("too_many_from_peer") == 1 and channel.unauthenticated == 4
        for stream in idle:
            await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_send_to_nobody_fails_softly(tmp_path: Path) -> None:
    async def ignore(msg: Message, peer: str) -> None: ...

    channel = BulkChannel(
        KEY, identity(tmp_path), MessageCodec(list(BULK_TYPES), name="t"), ignore, timeout=2
    )
    assert not await channel.send("127.0.0.1:9", push())
    assert channel.send_failures == 1


class ReconfigRecorder(Gateway):
    """A gateway whose reconfig only records its target: the role file's consequences are
    checked here, HTCondor's in tests/faultD/test_failover_condor.py."""

    def __init__(self) -> None:
        super().__init__(collector="127.0.0.1:9618")
        self.reconfigured: list[DaemonRef] = []

    async def reconfig(self, daemon: DaemonRef, collector: str | None = None) -> None:  # type: ignore[override]
        self.reconfigured.append(daemon)


def condor_role(tmp_path: Path) -> CondorRole:
    for d in ("config.d", "log", "spool"):
        (tmp_path / d).mkdir(parents=True)
    policy = tmp_path / "20-negotiator-policy.conf"
    policy.write_text("NEGOTIATOR_CYCLE_DELAY = 5\n")
    section = CondorSection(
        config_dir=tmp_path / "config.d",
        log_dir=tmp_path / "log",
        spool_dir=tmp_path / "spool",
        manager_config_files=[policy],
    )
    return CondorRole(section, ReconfigRecorder())


def test_role_file_names_daemons_and_collector(tmp_path: Path) -> None:
    role = condor_role(tmp_path)
    role.collector = "10.0.0.7:9618"
    text = role.render()
    assert "DAEMON_LIST = MASTER, SCHEDD, STARTD\n" in text and "COLLECTOR_HOST = 10.0.0.7:9618" in text
    role.managing = True
    assert "DAEMON_LIST = MASTER, SCHEDD, STARTD, COLLECTOR, NEGOTIATOR\n" in role.render()


def test_state_round_trip_restores_accountant_and_manager_config(tmp_path: Path) -> None:
    origin = condor_role(tmp_path / "cm")
    (tmp_path / "cm" / "spool" / ACCOUNTANT).write_bytes(b"107 Accountant state")
    files = origin.read_state()
    assert sorted(f.name for f in files) == ["accountant", "config/20-negotiator-policy.conf"]
    state = PoolState(
        manager=1, epoch=1, version=1, taken_at=0.0, files=files, checksum=PoolState.digest(files)
    )

    replacement = condor_role(tmp_path / "ex1")
    replacement.restore(state)
    assert (tmp_path / "ex1" / "spool" / ACCOUNTANT).read_bytes() == b"107 Accountant state"
    installed = tmp_path / "ex1" / "config.d" / "98-faultd-manager-20-negotiator-policy.conf"
    assert installed.read_text() == "NEGOTIATOR_CYCLE_DELAY = 5\n"

    corrupt = state.model_copy(update={"checksum": "f" * 64})
    (tmp_path / "ex1" / "spool" / ACCOUNTANT).write_bytes(b"local")
    replacement.restore(corrupt)  # refused: nothing overwritten
    assert (tmp_path / "ex1" / "spool" / ACCOUNTANT).read_bytes() == b"local"


def test_a_state_beyond_its_limit_leaves_out_the_files_that_do_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holders refuse a replica beyond STATE_BYTES_LIMIT (security review: near the bulk
    channel's 64 MiB, a successor pushing it on failed): the manager sends what fits."""
    monkeypatch.setattr("faultD.condor_role.STATE_BYTES_LIMIT", 30)
    origin = condor_role(tmp_path)
    (tmp_path / "spool" / ACCOUNTANT).write_bytes(b"107 Accountant state")  # 20 bytes
    files = origin.read_state()  # the policy file (27 bytes) would exceed 30
    assert [f.name for f in files] == ["accountant"]


def replica(files: list[StateFile]) -> PoolState:
    return PoolState(
        manager=9, epoch=1, version=10**9, taken_at=0.0, files=files, checksum=PoolState.digest(files)
    )


@pytest.mark.hostile
async def test_a_takeover_writes_only_faultds_files_with_checked_contents(tmp_path: Path) -> None:
    """Issue 14, row 4: a replica (from whoever could push one) carried a config file that added a
    daemon to DAEMON_LIST, and it was installed as is. Now a takeover writes only the role file
    and the configured manager config files, and only lines the central-manager allow-list
    passes; the rest is refused whole, counted, and the takeover goes on."""
    role = condor_role(tmp_path)
    (tmp_path / "log" / ".master_address").write_text("<127.0.0.1:1>\n")
    lst, port = await listener()  # the collector answers: the takeover does not wait for it
    (tmp_path / "log" / ".collector_address").write_text(f"<127.0.0.1:{port}>\n")
    evil = [
        StateFile(name="accountant", data=b"107 Accountant state"),
        StateFile(
            name="config/20-negotiator-policy.conf",
            data=b"NEGOTIATOR_CYCLE_DELAY = 5\nDAEMON_LIST = $(DAEMON_LIST), EVIL\n",
        ),
        StateFile(name="config/00-evil.conf", data=b"ALLOW_ADMINISTRATOR = *\n"),
        StateFile(name="config/../../condor_config", data=b"NEGOTIATOR_INTERVAL = 1\n"),
        StateFile(name="../../etc/cron.d/x", data=b"* * * * * root sh\n"),
    ]
    await role.start_manager(replica(evil), "127.0.0.1:9618")
    config_dir = tmp_path / "config.d"
    assert sorted(p.name for p in config_dir.iterdir()) == ["99-faultd-role.conf"]
    assert (tmp_path / "spool" / ACCOUNTANT).read_bytes() == b"107 Accountant state"
    assert role.refused == 4 and "DAEMON_LIST: not a knob this writer may set" in role.refusals[0]
    assert "DAEMON_LIST = MASTER, SCHEDD, STARTD, COLLECTOR, NEGOTIATOR\n" in role.role_file.read_text()

    # The same file without the forged line is installed, as what was checked.
    good = [StateFile(name="config/20-negotiator-policy.conf", data=b"# ok\nNEGOTIATOR_CYCLE_DELAY = 5\n")]
    role.restore(replica(good))
    installed = config_dir / "98-faultd-manager-20-negotiator-policy.conf"
    assert installed.read_text() == "NEGOTIATOR_CYCLE_DELAY = 5\n"
    await lst.aclose()


@pytest.mark.hostile
async def test_a_collector_outside_the_grammar_never_reaches_the_role_file(tmp_path: Path) -> None:
    role = condor_role(tmp_path)
    (tmp_path / "log" / ".master_address").write_text("<127.0.0.1:1>\n")
    await role.point_to("10.0.0.7:9618")
    before = role.role_file.read_text()
    for collector in ["x_y:9618", "10.0.0.7:99999", "evil:1\nDAEMON_LIST = MASTER, EVIL"]:
        with pytest.raises(RoleRefused):
            await role.point_to(collector)
        assert role.role_file.read_text() == before and role.collector == "10.0.0.7:9618"


def spy_on_daemon_answers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, bool]]:
    """Record what faultD.condor_role asks daemon_answers, and the answers, in order: how a test
    knows that a role change is waiting for a daemon, rather than guessing from the clock."""
    answers: list[tuple[Path, bool]] = []

    async def spy(address_file: Path, timeout: float = 0.5) -> bool:
        answer = await daemon_answers(address_file, timeout)
        answers.append((address_file, answer))
        return answer

    monkeypatch.setattr(faultD.condor_role, "daemon_answers", spy)
    return answers


async def listener() -> tuple[trio.SocketListener, int]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    return listeners[0], listeners[0].socket.getsockname()[1]


async def test_daemon_answers_only_when_its_address_listens(tmp_path: Path) -> None:
    address_file = tmp_path / ".negotiator_address"
    assert not await daemon_answers(address_file)  # no file: the daemon exited
    address_file.write_text("garbage\n")
    assert not await daemon_answers(address_file)
    lst, port = await listener()
    address_file.write_text(f"<127.0.0.1:{port}?addrs=127.0.0.1-{port}>\n$CondorVersion: 23.9.6 $\n")
    assert await daemon_answers(address_file)
    await lst.aclose()
    assert not await daemon_answers(address_file)  # a file left by a killed daemon


async def test_leaving_the_manager_role_waits_until_the_manager_daemons_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted faultd is a listener in memory, but the role file its master started from
    says manager: pointing at another manager must still wait for the collector and
    negotiator to stop, so that taking the role back later starts them afresh."""
    role = condor_role(tmp_path)
    (tmp_path / "log" / ".master_address").write_text("<127.0.0.1:1>\n")
    role.managing, role.collector = True, "127.0.0.1:9618"
    role.role_file.write_text(role.render())  # what the master ran by before the crash

    restarted = condor_role(tmp_path / "after")
    restarted.section = role.section  # the same machine, a new faultd
    lst, port = await listener()
    (tmp_path / "log" / ".negotiator_address").write_text(f"<127.0.0.1:{port}>\n")
    done = trio.Event()

    async def point() -> None:
        await restarted.point_to("10.0.0.9:9618")
        done.set()

    answers = spy_on_daemon_answers(monkeypatch)
    negotiator = tmp_path / "log" / ".negotiator_address"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(point)
        # Until point_to has asked whether the negotiator still answers and heard yes (or, wrongly,
        # returned): from then on it must not return until the negotiator is gone.
        await poll_until_async(
            "point_to to see the negotiator answering",
            lambda: done.is_set() or (negotiator, True) in answers,
        )
        assert not done.is_set(), "returned while the negotiator still listened"
        assert "# role: listener" in role.role_file.read_text()  # the master was told at once
        await lst.aclose()  # the negotiator exits
        await poll_until_async("point_to to return", done.is_set)
    gateway = restarted.gateway
    assert isinstance(gateway, ReconfigRecorder) and len(gateway.reconfigured) == 1

    # A listener that stays a listener does not wait, whatever address files say: it does not
    # even look at them.
    lst, port = await listener()
    (tmp_path / "log" / ".collector_address").write_text(f"<127.0.0.1:{port}>\n")
    answers.clear()
    await restarted.point_to("10.0.0.8:9618")
    assert answers == [] and "COLLECTOR_HOST = 10.0.0.8:9618" in role.role_file.read_text()
    await lst.aclose()


async def test_taking_the_manager_role_starts_the_collector_before_the_negotiator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negotiator's first ad is lost if its collector is not listening yet: the role file
    names the collector alone until the collector answers, then both."""
    role = condor_role(tmp_path)
    (tmp_path / "log" / ".master_address").write_text("<127.0.0.1:1>\n")
    done = trio.Event()

    async def take() -> None:
        await role.start_manager(None, "127.0.0.1:9618")
        done.set()

    answers = spy_on_daemon_answers(monkeypatch)
    collector = role.address_file("COLLECTOR")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(take)
        # Asked once before the role file named the collector, then again while waiting for it
        # (or start_manager wrongly returned without waiting).
        await poll_until_async(
            "start_manager to wait for the collector",
            lambda: done.is_set() or answers.count((collector, False)) >= 2,
        )
        assert not done.is_set()
        assert "DAEMON_LIST = MASTER, SCHEDD, STARTD, COLLECTOR\n" in role.role_file.read_text()
        lst, port = await listener()  # the master started the collector
        collector.write_text(f"<127.0.0.1:{port}>\n")
        await poll_until_async("start_manager to return", done.is_set)
    assert "DAEMON_LIST = MASTER, SCHEDD, STARTD, COLLECTOR, NEGOTIATOR\n" in role.role_file.read_text()
    gateway = role.gateway
    assert isinstance(gateway, ReconfigRecorder) and len(gateway.reconfigured) == 2

    # Already answering (a manager told again to manage): one reconfig, the negotiator never dropped.
    await role.start_manager(None, "127.0.0.1:9618")
    assert len(gateway.reconfigured) == 3
    await lst.aclose()


class FirstReconfigFails(ReconfigRecorder):
    """The first reconfig fails as an unreachable master's does; faultD.service retries."""

    async def reconfig(self, daemon: DaemonRef, collector: str | None = None) -> None:  # type: ignore[override]
        if not self.reconfigured:
            self.reconfigured.append(daemon)
            raise GatewayError("reconfig", "master not reachable yet")
        await super().reconfig(daemon, collector)


async def test_a_retried_takeover_does_not_restore_poolds_state_file_again(tmp_path: Path) -> None:
    """poold resumes as soon as faultD manages (after the restore), and writes its state file
    from then on; a takeover retried after a failed reconfig must not put the replica back over
    it (issue 16)."""
    role = condor_role(tmp_path)
    poold_state = tmp_path / "poold.state.json"
    role.section = role.section.model_copy(update={"poold_state": poold_state})
    role.gateway = FirstReconfigFails()
    (tmp_path / "log" / ".master_address").write_text("<127.0.0.1:1>\n")
    lst, port = await listener()
    (tmp_path / "log" / ".collector_address").write_text(f"<127.0.0.1:{port}>\n")
    state = replica([StateFile(name="poold", data=b"replicated")])
    with pytest.raises(GatewayError):
        await role.start_manager(state, "127.0.0.1:9618")
    assert poold_state.read_bytes() == b"replicated" and role.managing
    poold_state.write_bytes(b"written by the poold that resumed")
    await role.start_manager(state, "127.0.0.1:9618")  # faultD.service's retry
    assert poold_state.read_bytes() == b"written by the poold that resumed"
    await lst.aclose()
