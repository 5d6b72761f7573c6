"""The user's requests to a running master: release, remove or hold tasks (`master_release`,
`master_rm`, `master_hold`, as condor_release, condor_rm and condor_hold act on jobs).

A request is a small JSON file `request.<time>.<pid>.json` the command writes (atomically: a
temporary name, then a rename) into the master's output directory, next to its state file; the
master looks for them every second, hands each to its core (which saves the state file before
anything else), then removes the file. The directory belongs to the submitting user, so only
that user (and root) can ask. A master that is not running reads its requests when HTCondor
starts it again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from common.files import read_regular

ACTIONS = ("release", "remove", "hold")
_PREFIX = "request."
_SUFFIX = ".json"
MAX_REQUEST_BYTES = 16 << 20  # some two million process numbers: more than any submit file holds


@dataclass(frozen=True)
class Request:
    """What the user asked: the action, the processes (None: every task it applies to), why."""

    action: str
    processes: tuple[int, ...] | None
    reason: str


def write_request(outdir: Path, request: Request) -> Path:
    """Put a request where the master finds it; returns its path."""
    if request.action not in ACTIONS:
        raise ValueError(f"unknown action {request.action!r}")
    body = {
        "action": request.action,
        "processes": None if request.processes is None else list(request.processes),
        "reason": request.reason,
    }
    name = f"{_PREFIX}{time.time_ns()}.{os.getpid()}{_SUFFIX}"
    tmp = outdir / f".{name}.tmp"
    tmp.write_text(json.dumps(body))
    target = outdir / name
    os.replace(tmp, target)
    return target


def read_requests(outdir: Path, skip: Collection[str] = ()) -> list[tuple[Path, Request | str]]:
    """The requests waiting in outdir, oldest first: each a Request, or why it is unusable.
    `skip`: names already reported that could not be removed (remove_request)."""
    try:
        names = sorted(
            n for n in os.listdir(outdir) if n.startswith(_PREFIX) and n.endswith(_SUFFIX) and n not in skip
        )
    except OSError:
        return []
    found: list[tuple[Path, Request | str]] = []
    for name in names:
        path = outdir / name
        try:
            found.append(
                (path, _parse(json.loads(read_regular(path, MAX_REQUEST_BYTES, follow_symlinks=False))))
            )
        except (OSError, ValueError, TypeError, KeyError) as e:
            found.append((path, f"{type(e).__name__}: {e}"))
    return found


def remove_request(path: Path, stuck: set[str]) -> str | None:
    """Remove a request the master has taken (or reported); if it cannot be removed (a directory
    of that name, say), its name joins `stuck`, for read_requests to skip: returns why."""
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        stuck.add(path.name)
        return f"{type(e).__name__}: {e}"
    return None


def _parse(data: object) -> Request:
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    action = data["action"]
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    raw = data.get("processes")
    processes = None
    if raw is not None:
        if not isinstance(raw, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in raw):
            raise TypeError("processes must be a list of integers")
        processes = tuple(raw)
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise TypeError("reason must be text")
    return Request(action, processes, reason)
