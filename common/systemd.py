"""systemd's service protocol (sd_notify(3)) for the suite's trio daemons.

- READY=1 once the daemon serves, STOPPING=1 when it begins to stop, RELOADING=1 (with
  MONOTONIC_USEC) and READY=1 around a SIGHUP reload.
- STATUS=: one line saying what the daemon is doing or waiting for (`systemctl status` shows it);
  `StatusReporter` sends it whenever the daemon's own description of itself changes.
- WATCHDOG=1: `watchdog_loop` pings every half WatchdogSec from the event loop itself. What the
  watchdog watches is that loop: while it runs, pings go out whatever the daemon is waiting for (a
  dead collector is a reason to wait and say so in STATUS=, not to be restarted, least of all
  while faultD is moving the collector); a loop that hangs (a task blocking in a call that never
  returns) stops them, and systemd restarts the daemon after WatchdogSec.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import structlog
import trio

log = structlog.get_logger("systemd")

READY = "READY=1"
MAX_STATUS = 200  # characters of STATUS= (systemctl status shows one line)


def sd_notify(state: str) -> bool:
    """Tell systemd about our state (READY=1, WATCHDOG=1, STOPPING=1, STATUS=...), if it listens."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(state.encode(), address)
        except OSError as e:
            log.warning("sd_notify failed", error=str(e))
            return False
    return True


def watchdog_period() -> float | None:
    """Half the watchdog interval systemd asked for (WATCHDOG_USEC), or None without one."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6


async def watchdog_loop() -> None:
    """Ping systemd's watchdog every half interval for as long as the event loop runs."""
    period = watchdog_period()
    if period is None:
        return
    while True:
        sd_notify("WATCHDOG=1")
        await trio.sleep(period)


def reloading() -> None:
    """Tell systemd a reload has begun (READY=1 says it is over)."""
    sd_notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")


class StatusReporter:
    """Sends STATUS= whenever `describe()` (the daemon's one line about itself) changes."""

    def __init__(self, describe: Callable[[], str], *, interval: float = 1.0) -> None:
        self.describe = describe
        self.interval = interval
        self.current: str | None = None

    def update(self) -> str | None:
        """Describe the daemon now; send STATUS= if the line changed. Returns the line."""
        try:
            text = " ".join(self.describe().split())[:MAX_STATUS]
        except Exception as e:  # a status line must never take the daemon down
            log.warning("status line failed", error=str(e))
            return self.current
        if text != self.current:
            self.current = text
            sd_notify(f"STATUS={text}")
        return text

    async def run(self) -> None:
        """Update every `interval` seconds until cancelled."""
        while True:
            self.update()
            await trio.sleep(self.interval)
