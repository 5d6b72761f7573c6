"""The sealed TCP channel for replicated state, and the Condor Module's files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio

from common.condor import Gateway
from common.overlay.auth import Sealer
from common.overlay.bulk import BulkChannel
from common.overlay.messages import Peer
from common.wire import HEADER, Message, MessageCodec
from faultD.condor_role import ACCOUNTANT, CondorRole
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


async def test_bulk_channel_delivers_sealed_messages_and_drops_the_rest() -> None:
    got: list[Message] = []

    async def on_message(msg: Message, peer: str) -> None:
        got.append(msg)

    codec = MessageCodec(list(BULK_TYPES), name="t", max_size=1 << 20)
    channel = BulkChannel(KEY, codec, on_message)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(channel.serve, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        big = push(os.urandom(200_000))
        assert await channel.send(f"127.0.0.1:{port}", big)
        await trio.sleep(0.2)
        assert got == [big]

        # A stranger's key, garbage, a lying header, a truncated frame: all dropped and counted.
        stranger = Sealer(bytes(32), window=30.0, name="x").seal(
            codec.encode(push()), time.time(), os.urandom(16)
        )
        await send_raw(port, HEADER.pack(len(stranger)) + stranger)
        await send_raw(port, HEADER.pack(5) + b"hello")
        await send_raw(port, HEADER.pack(1 << 30) + b"x")
        await send_raw(port, HEADER.pack(100) + b"short")
        await trio.sleep(0.3)
        assert got == [big]
        assert sum(channel.drops.values()) == 4, channel.drops
        # ... and the channel still works.
        assert await channel.send(f"127.0.0.1:{port}", push(b"again"))
        await trio.sleep(0.2)
        assert len(got) == 2
        nursery.cancel_scope.cancel()


async def test_send_to_nobody_fails_softly() -> None:
    async def ignore(msg: Message, peer: str) -> None: ...

    channel = BulkChannel(KEY, MessageCodec(list(BULK_TYPES), name="t"), ignore, timeout=2)
    assert not await channel.send("127.0.0.1:9", push())
    assert channel.send_failures == 1


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
    return CondorRole(section, Gateway(collector="127.0.0.1:9618"))


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
