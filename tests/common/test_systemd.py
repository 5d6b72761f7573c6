"""common.systemd: the watchdog follows the event loop, STATUS= follows the daemon's line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from common.systemd import StatusReporter, sd_notify
from tests.notify_socket import NotifySocket

REPO = Path(__file__).resolve().parents[2]

# A daemon's event loop with the watchdog task, and a task that blocks the loop for 3 s (a call
# that does not return: the hang the watchdog is for), then lets it run again.
HANGING_LOOP = """
import time, trio
from common.systemd import sd_notify, watchdog_loop

async def main():
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog_loop)
        await trio.sleep(1.0)
        sd_notify("STATUS=blocking")
        time.sleep(3.0)
        sd_notify("STATUS=unblocked")
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()

trio.run(main)
"""


def test_a_hung_event_loop_stops_the_watchdog_pings(tmp_path: Path) -> None:
    notify = NotifySocket(tmp_path / "notify")
    try:
        env = {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "400000", "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", HANGING_LOOP], cwd=REPO, env=env, check=True, timeout=60)
        time.sleep(0.5)
    finally:
        notify.close()
    texts = [m for _, m in notify.messages]
    blocked, unblocked = texts.index("STATUS=blocking"), texts.index("STATUS=unblocked")
    # Pings every 0.2 s while the loop runs, before and after; none while it hangs (3 s). In the
    # order the datagrams came, not by clock: a loaded machine may receive them late.
    assert "WATCHDOG=1" not in texts[blocked:unblocked], texts
    assert "WATCHDOG=1" in texts[:blocked] and "WATCHDOG=1" in texts[unblocked:], texts


async def test_status_is_sent_when_the_line_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.setblocking(False)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        line = ["joining the ring"]
        reporter = StatusReporter(lambda: line[0])
        reporter.update()
        reporter.update()
        line[0] = "waiting for the pool's collector 10.0.0.1:9618:\n  connection refused"
        reporter.update()
        got = []
        while True:
            try:
                got.append(server.recv(4096).decode())
            except BlockingIOError:
                break
    assert got == [
        "STATUS=joining the ring",
        "STATUS=waiting for the pool's collector 10.0.0.1:9618: connection refused",
    ]


async def test_a_failing_status_line_does_not_stop_the_daemon() -> None:
    def broken() -> str:
        raise KeyError("no core yet")

    reporter = StatusReporter(broken, interval=0.01)
    with trio.move_on_after(0.05):
        await reporter.run()
    assert reporter.current is None


def test_sd_notify_without_systemd_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
