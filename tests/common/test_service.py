"""common.service: systemd notification, watchdog period, the control socket."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import trio

from common.service import (
    MAX_CONTROL_CLIENTS,
    REQUEST_SECONDS,
    query_control,
    sd_notify,
    serve_control,
    watchdog_period,
)


def test_sd_notify_sends_to_notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert sd_notify("READY=1")
        assert server.recv(100) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not sd_notify("READY=1")


def test_watchdog_period_is_half_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert watchdog_period() == 15.0
    monkeypatch.delenv("WATCHDOG_USEC")
    assert watchdog_period() is None


async def test_control_socket_answers_and_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "ctl.sock"

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        return {"echo": request}

    async with trio.open_nursery() as nursery:
        await nursery.start(serve_control, path, handler)
        assert (path.stat().st_mode & 0o777) == 0o660
        reply = await trio.to_thread.run_sync(query_control, path, {"cmd": "status"})
        assert reply == {"echo": {"cmd": "status"}}
        stream = await trio.open_unix_socket(str(path))
        await stream.send_all(b"not json\n")
        garbage = await stream.receive_some(1000)
        assert b"bad request" in garbage
        await stream.aclose()
        nursery.cancel_scope.cancel()
    assert not path.exists()


async def test_control_socket_refuses_to_replace_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "important"
    path.write_text("keep me")

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        return {}

    with pytest.raises(OSError, match="not a socket"):
        await serve_control(path, handler)
    assert path.read_text() == "keep me"


async def test_idle_control_connections_beyond_the_limit_are_closed_and_status_still_answers(
    tmp_path: Path,
) -> None:
    """Review, 2026-11-28: a local client holding idle connections took the daemon's file
    descriptors (each held up to 5 s, any number at once). Now at most MAX_CONTROL_CLIENTS are
    served at once; the others are closed at once, and once the idle ones time out status answers."""
    path = tmp_path / "ctl.sock"

    async def handler(request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    async with trio.open_nursery() as nursery:
        await nursery.start(serve_control, path, handler)
        idle = [await trio.open_unix_socket(str(path)) for _ in range(MAX_CONTROL_CLIENTS)]
        await trio.sleep(0.1)
        extra = await trio.open_unix_socket(str(path))
        with trio.fail_after(2):
            assert await extra.receive_some(100) == b""  # closed, not held
        with trio.fail_after(REQUEST_SECONDS + 5):
            while True:  # the idle ones time out, freeing their places
                try:
                    reply = await trio.to_thread.run_sync(query_control, path, {"cmd": "status"})
                except (OSError, ValueError):  # refused, or closed with no answer
                    await trio.sleep(0.5)
                    continue
                if reply == {"ok": True}:
                    break
                await trio.sleep(0.5)
        for stream in (*idle, extra):
            await stream.aclose()
        nursery.cancel_scope.cancel()
