"""The agent's input file: everything a chef tells its agent before they ever talk (seed §3.9.1, §3.9.4).

A JSON object (UTF-8), written by the chef with mode 0600 since it holds the secret, transferred by
HTCondor next to the agent:

    {
      "format": 1,
      "master": "m-1234",              # the master's id, sent back in `hello`
      "secret": "<64 hex digits>",     # the per-master secret (protocol.make_secret().hex())
      "window": 6,                     # WINDOW_SIZE; the master's `welcome` has the final word
      "mode": "TRANSFER",              # NFS | NFS_INITIALDIR | TRANSFER | TRANSFER_INITIALDIR
      "files_style": "condor",         # FILES_STYLE_MODE: condor | improved
      "executable": "blast",           # TRANSFER modes: the job's executable as HTCondor placed it
                                       #   next to this file; null: run each task's `executable` as is
      "common_files": ["db.fasta"],    # TRANSFER modes: inputs shared by all tasks, next to this file
      "initial_tasks": [               # INITIAL_JOBS_NUMBER tasks, run before the master is reached
        {"task": {<protocol.Task map>}, "files": ["query.7", ["init-3/db", "db"]]}
      ],                               #   `files`: that task's private inputs, next to this file:
                                       #   a name, or [name here, path in the execution directory]
      "connect_timeout": 60,           # optional: seconds to keep trying to reach the master
      "debug": false                   # optional: LLIC_DEBUG, progress lines on stderr
    }

File names here are relative to the input file's directory (HTCondor's scratch directory) and may
not leave it. Unknown keys are ignored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .. import protocol
from ..files import STYLES, UnsafePath, normalize_relpath

FORMAT = 1


class InputFileError(Exception):
    """The input file is unreadable or wrong; the message names the file and the key."""


@dataclass
class InitialTask:
    """A task the chef wrote into the input file, run before the master is reached."""

    task: protocol.Task
    files: list[tuple[str, str]] = field(
        default_factory=list
    )  # (name next to the input file, path in exec dir)


@dataclass
class AgentInput:
    """The agent's input file: its master, secret, window, mode and the files every task shares."""

    master: str
    secret: bytes
    window: int
    mode: str
    files_style: str
    executable: str | None = None
    common_files: list[str] = field(default_factory=list)
    initial_tasks: list[InitialTask] = field(default_factory=list)
    connect_timeout: float = 60.0
    debug: bool = False

    @property
    def transfer(self) -> bool:
        """Whether tasks' files travel with them (TRANSFER modes) rather than sit on a shared file system."""
        return self.mode in protocol.TRANSFER_MODES

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this input (what a chef writes)."""
        return {
            "format": FORMAT,
            "master": self.master,
            "secret": self.secret.hex(),
            "window": self.window,
            "mode": self.mode,
            "files_style": self.files_style,
            "executable": self.executable,
            "common_files": list(self.common_files),
            "initial_tasks": [
                {"task": it.task.to_dict(), "files": [list(pair) for pair in it.files]}
                for it in self.initial_tasks
            ],
            "connect_timeout": self.connect_timeout,
            "debug": self.debug,
        }


def _local_name(value: Any, where: str) -> str:
    try:
        return normalize_relpath(value)
    except UnsafePath as exc:
        raise InputFileError(f"{where}: {exc}") from None


def parse_input(data: Any, source: str = "input file") -> AgentInput:
    """Validate the decoded JSON object; InputFileError names `source` and the offending key."""

    def fail(key: str, what: str) -> InputFileError:
        return InputFileError(f"{source}: {key}: {what}")

    if not isinstance(data, dict):
        raise InputFileError(f"{source}: expected a JSON object")
    if data.get("format") != FORMAT:
        raise fail("format", f"expected {FORMAT}, got {data.get('format')!r}")
    for key in ("master", "secret", "window", "mode", "files_style"):
        if key not in data:
            raise fail(key, "missing")
    master = data["master"]
    if not isinstance(master, str) or not master:
        raise fail("master", "expected a non-empty string")
    try:
        secret = protocol.secret_from_hex(data["secret"])
    except (TypeError, ValueError) as exc:
        raise fail("secret", str(exc)) from None
    window = data["window"]
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise fail("window", f"expected an integer >= 1, got {window!r}")
    mode = data["mode"]
    if mode not in protocol.MODES:
        raise fail("mode", f"expected one of {', '.join(protocol.MODES)}, got {mode!r}")
    style = data["files_style"]
    if style not in STYLES:
        raise fail("files_style", f"expected one of {', '.join(STYLES)}, got {style!r}")
    executable = data.get("executable")
    if executable is not None:
        executable = _local_name(executable, f"{source}: executable")
    common = data.get("common_files", [])
    if not isinstance(common, list):
        raise fail("common_files", "expected a list")
    common_files = [_local_name(name, f"{source}: common_files[{i}]") for i, name in enumerate(common)]
    initial = data.get("initial_tasks", [])
    if not isinstance(initial, list):
        raise fail("initial_tasks", "expected a list")
    initial_tasks = []
    for i, item in enumerate(initial):
        where = f"initial_tasks[{i}]"
        if not isinstance(item, dict):
            raise fail(where, "expected an object with 'task' and 'files'")
        try:
            task = protocol.Task.from_dict(item.get("task"))
        except protocol.ProtocolError as exc:
            raise fail(where, str(exc)) from None
        names = item.get("files", [])
        if not isinstance(names, list):
            raise fail(f"{where}.files", "expected a list")
        files = []
        for j, name in enumerate(names):
            pair = name if isinstance(name, list) else [name, name]
            if len(pair) != 2:
                raise fail(f"{where}.files[{j}]", "expected a name or a [name, path] pair")
            here = _local_name(pair[0], f"{source}: {where}.files[{j}]")
            files.append((here, _local_name(pair[1], f"{source}: {where}.files[{j}]")))
        initial_tasks.append(InitialTask(task, files))
    keys = [it.task.key for it in initial_tasks]
    if len(set(keys)) != len(keys):
        raise fail("initial_tasks", "the same process and attempt appear twice")
    timeout = data.get("connect_timeout", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise fail("connect_timeout", f"expected a number of seconds > 0, got {timeout!r}")
    debug = data.get("debug", False)
    if not isinstance(debug, bool):
        raise fail("debug", "expected true or false")
    return AgentInput(
        master=master,
        secret=secret,
        window=window,
        mode=mode,
        files_style=style,
        executable=executable,
        common_files=common_files,
        initial_tasks=initial_tasks,
        connect_timeout=float(timeout),
        debug=debug,
    )


def load_input(path: str) -> AgentInput:
    """Read and validate the input file at `path`."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise InputFileError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputFileError(f"{path}: not JSON: {exc}") from None
    return parse_input(data, os.fspath(path))
