"""A stand-in for systemd's notification socket: a unix datagram socket that records every
message (READY=1, STATUS=..., WATCHDOG=1) with the time it arrived, for tests of the daemons'
systemd protocol (common.systemd)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path


class NotifySocket:
    """Bound at `path` (mode 0666, so a daemon running as another user can send to it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o666)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def texts(self, prefix: str = "") -> list[str]:
        """The messages so far that start with `prefix`, in order."""
        return [m for _, m in list(self.messages) if m.startswith(prefix)]

    def times(self, message: str) -> list[float]:
        """When each copy of `message` arrived."""
        return [t for t, m in list(self.messages) if m == message]

    def close(self) -> None:
        """Stop reading and remove the socket."""
        self._stop = True
        self._thread.join()
        self.sock.close()
        self.path.unlink(missing_ok=True)
