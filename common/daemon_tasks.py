"""What poold and faultd run beside their own work, started the same way in both: the control
socket, the optional Prometheus endpoint, the systemd watchdog and status line, the daemon's ad in
the collector and the signal handling, then READY to systemd."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from common.advertise import Advertiser, Figures
from common.metrics import serve_metrics
from common.service import ControlHandler, serve_control, signal_loop
from common.systemd import READY, StatusReporter, sd_notify, watchdog_loop


async def start_daemon_tasks(
    nursery: trio.Nursery,
    name: str,
    *,
    control_socket: Path,
    on_control: ControlHandler,
    metrics_listen: str | None,
    figures: Callable[[], Figures],
    status_line: StatusReporter,
    advertiser: Advertiser,
    on_reload: Callable[[], Awaitable[None]],
) -> int | None:
    """Start them in `nursery` (a signal cancels it), tell systemd the daemon is ready, and return
    the port the metrics endpoint bound, if one is configured."""
    await nursery.start(serve_control, control_socket, on_control)
    metrics_port = None
    if metrics_listen is not None:
        metrics_port = await nursery.start(serve_metrics, metrics_listen, name, figures)
    nursery.start_soon(watchdog_loop)
    nursery.start_soon(status_line.run)
    nursery.start_soon(advertiser.run)
    nursery.start_soon(signal_loop, on_reload, nursery.cancel_scope)
    sd_notify(READY)
    return metrics_port
