"""What every daemon of the suite needs around its protocol: a local control socket for its CLI
(`poold status`, `faultd status`) and signal handling; systemd's protocol is common.systemd."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
import trio

from common.systemd import READY, reloading, sd_notify, watchdog_period

__all__ = ["print_status", "query_control", "sd_notify", "serve_control", "signal_loop", "watchdog_period"]

log = structlog.get_logger("service")

ControlHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
MAX_REQUEST = 64 * 1024


async def serve_control(
    path: Path, handler: ControlHandler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Answer one JSON request line per connection on a unix socket (mode 0660)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_socket():
        path.unlink()
    elif path.exists():
        raise OSError(f"{path} exists and is not a socket; refusing to replace it")
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(str(path))
    os.chmod(path, 0o660)
    sock.listen(16)
    listener = trio.SocketListener(sock)

    async def one(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(5):
                while b"\n" not in data and len(data) < MAX_REQUEST:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    data += chunk
            try:
                request = json.loads(data.split(b"\n", 1)[0] or b"{}")
                if not isinstance(request, dict):
                    raise ValueError("request must be a JSON object")
                reply = await handler(request)
            except (ValueError, KeyError) as e:
                reply = {"error": f"bad request: {e}"}
            try:
                await stream.send_all(json.dumps(reply, default=str).encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    try:
        task_status.started()
        await trio.serve_listeners(one, [listener])
    finally:
        with trio.CancelScope(shield=True):
            path.unlink(missing_ok=True)


def print_status(prog: str, path: Path, render: Callable[[dict[str, Any]], str], *, as_json: bool) -> int:
    """`poold status` / `faultd status`: ask the daemon on its control socket, print the answer
    (JSON or `render`ed); exit 1 with one line naming the socket if the daemon cannot be reached."""
    try:
        status = query_control(path, {"cmd": "status"})
    except OSError as e:
        print(f"{prog}: cannot reach the daemon at {path}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(json.dumps(status, indent=2) if as_json else render(status))
    return 0


def query_control(path: Path, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """The CLI side: one request, one reply (blocking; the CLI has nothing else to do)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


async def signal_loop(on_reload: Callable[[], Awaitable[None]], cancel: trio.CancelScope) -> None:
    """SIGHUP reloads; SIGTERM and SIGINT end the service through its cancel scope."""
    with trio.open_signal_receiver(signal.SIGHUP, signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if signum == signal.SIGHUP:
                log.info("SIGHUP: reloading")
                reloading()
                await on_reload()
                sd_notify(READY)
            else:
                log.info("stopping", signal=signal.Signals(signum).name)
                sd_notify("STOPPING=1")
                cancel.cancel()
                return
