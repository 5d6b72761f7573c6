"""An optional Prometheus endpoint (`[daemon] metrics_listen = "host:port"`, off by default).

It serves the same figures as the daemon's ClassAd (common.advertise), computed when scraped:
numbers and booleans as gauges named `<daemon>_<figure in snake case>` (counters for figures
whose name ends in Total), strings as the labels of one `<daemon>_info` metric. prometheus-client
renders them; it comes with the [metrics] extra (`pip install 'condor-selforg[metrics]'`). The
HTTP side is a few lines of trio on the daemon's event loop: a scrape sees the daemon's state
between two of its steps, never half way through one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import structlog
import trio

from common.config import ConfigError

log = structlog.get_logger("metrics")

MAX_REQUEST = 8192
Figures = dict[str, bool | int | float | str | None]


def require_prometheus_client(key: str = "daemon.metrics_listen") -> None:
    """ConfigError saying which extra to install, when the endpoint is asked for without it."""
    try:
        import prometheus_client  # noqa: F401
    except ModuleNotFoundError:
        raise ConfigError(f"{key} needs prometheus-client: pip install 'condor-selforg[metrics]'") from None


def parse_listen(text: str) -> tuple[str, int]:
    """'host:port' to listen on (port 0: any free one); ValueError names the bad text."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return host, int(port)


def snake(name: str) -> str:
    """FreeSlots -> free_slots; FlockTo -> flock_to."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class FiguresCollector:
    """A prometheus_client collector over a daemon's figures, read at each scrape."""

    def __init__(self, prefix: str, figures: Callable[[], Figures]) -> None:
        self.prefix = prefix
        self.figures = figures

    def collect(self) -> Iterator[Any]:
        """One metric family per figure (prometheus_client's Collector protocol)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        labels: dict[str, str] = {}
        for key, value in self.figures().items():
            name = f"{self.prefix}_{snake(key)}"
            if isinstance(value, bool | int | float):
                if key.endswith("Total"):
                    yield CounterMetricFamily(name.removesuffix("_total"), f"{key} (ClassAd)", value=value)
                else:
                    yield GaugeMetricFamily(name, f"{key} (ClassAd)", value=float(value))
            elif isinstance(value, str):
                labels[snake(key)] = value
        yield InfoMetricFamily(self.prefix, "the daemon's string figures (ClassAd)", value=labels)


def render(prefix: str, figures: Callable[[], Figures]) -> tuple[bytes, str]:
    """The exposition text and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(FiguresCollector(prefix, figures))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST


async def serve_metrics(
    listen: str,
    prefix: str,
    figures: Callable[[], Figures],
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer `GET /metrics` on `listen` (host:port) until cancelled; reports the bound port."""
    require_prometheus_client()
    host, port = parse_listen(listen)
    listeners = await trio.open_tcp_listeners(port, host=host)

    async def one(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(5):
                while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    data += chunk
            method, _, rest = data.partition(b" ")
            path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            if method != b"GET":
                status, body, ctype = b"405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path in (b"/metrics", b"/"):
                try:
                    body, ctype = render(prefix, figures)
                    status = b"200 OK"
                except Exception as e:  # a scrape must never take the daemon down
                    log.warning("metrics not rendered", error=str(e))
                    status, body, ctype = b"500 Internal Server Error", b"error\n", "text/plain"
            else:
                status, body, ctype = b"404 Not Found", b"try /metrics\n", "text/plain"
            head = b"HTTP/1.0 " + status + f"\r\nContent-Type: {ctype}\r\n".encode()
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            try:
                await stream.send_all(head + body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(one, listeners)
