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
MAX_NESTING = 32  # a control request is a flat object; json's recursion must never be reached
# At most this many control connections at once, each given REQUEST_SECONDS to send its request
# and again to read the answer: a local client holding idle connections could otherwise take
# every file descriptor the daemon has (LimitNOFILE) and stop its ring and gateway.
MAX_CONTROL_CLIENTS = 16
REQUEST_SECONDS = 5.0


def parse_request(data: bytes) -> dict[str, Any]:
    """A control request line as a JSON object; ValueError (with a short reason) for anything
    else. Bounded: the size by MAX_REQUEST (the reader's limit) and the nesting by MAX_NESTING,
    counted before json sees the text, so that "[[[[..." cannot exhaust its recursion."""
    raw = data.split(b"\n", 1)[0] or b"{}"
    try:
        # Decoded strictly first: json would guess UTF-16/32 from bytes, and the count below
        # would then be of other characters than the ones json parses.
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"request is not UTF-8 ({e.reason})") from None
    depth = deepest = 0
    in_string = escaped = False
    for char in line:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_NESTING:
                raise ValueError(f"request nested deeper than {MAX_NESTING} levels")
        elif char in "]}":
            depth -= 1
    try:
        request = json.loads(line)
    except RecursionError:  # not reachable after the count above; kept as a last line
        raise ValueError("request nested too deeply") from None
    if not isinstance(request, dict):
        raise ValueError("request must be a JSON object")
    return request


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

    clients = trio.Semaphore(MAX_CONTROL_CLIENTS)

    async def one(stream: trio.SocketStream) -> None:
        """One request, one answer; nothing a client sends (or a handler raises) may end the
        server, since serve_control runs in the daemon's main nursery. At most
        MAX_CONTROL_CLIENTS at once: one beyond is closed at once."""
        try:
            async with stream:
                try:
                    clients.acquire_nowait()
                except trio.WouldBlock:
                    log.warning("control request refused: too many at once", limit=MAX_CONTROL_CLIENTS)
                    return
                try:
                    await answer(stream)
                finally:
                    clients.release()
        except Exception as e:
            log.warning("control request failed", error=f"{type(e).__name__}: {e}")

    async def answer(stream: trio.SocketStream) -> None:
        data = b""
        with trio.move_on_after(REQUEST_SECONDS):
            while b"\n" not in data and len(data) < MAX_REQUEST:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data += chunk
        try:
            request = parse_request(data[:MAX_REQUEST])
        except ValueError as e:  # json's errors and UnicodeDecodeError are ValueErrors
            reply: dict[str, Any] = {"error": f"bad request: {e}"}
        else:
            try:
                reply = await handler(request)
            except Exception as e:
                log.exception("control handler failed", error=str(e))
                reply = {"error": f"internal error: {type(e).__name__}: {e}"}
        try:
            with trio.move_on_after(REQUEST_SECONDS):  # a client that does not read holds nothing
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
