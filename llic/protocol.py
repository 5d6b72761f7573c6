"""The llic master-agent wire protocol, sans-IO: frames, an incremental decoder, the handshake MACs.

Stdlib + msgpack only, Python 3.9+, works with msgpack's pure-Python fallback: the agent ships this
module inside its zipapp. Nothing here touches a socket except the two small blocking helpers at the
end (the agent's); the master feeds the same `Decoder` from trio streams and sends `encode_frames`.

Frames: a 4-byte big-endian length, then that many bytes. A message frame holds one msgpack map
`{"t": type, ...fields}` (at most 1 MiB). A `task` or `result` message may carry
`"files": [{"path": rel, "size": n, "mode": int, "kind": "file"|"stdout"|"stderr"}, ...]` and is
then followed by one raw blob frame per entry, in order, each exactly `size` bytes (at most 1 GiB;
a result's, at most 2 GiB in all). The limits are checked from the header, before any buffer
grows. `path` is a canonical relative path (`files.check_relpath`); `kind` (default `file`) marks
the task's captured stdout/stderr, which the master places where the task's `output`/`error` say
(`files.place_outputs`): an agent never chooses where they go. Master -> agent blobs are always
`file`s: the private inputs of a task in TRANSFER modes, at the path where condor would put them
in the execution directory.

Messages (fields beyond these are dropped on decoding, so later versions can add some):

    agent -> master   hello {agent, master, version, nonce_a}   auth {mac_a}   result {result} + files
                      bulk_ready {process, attempt, size}   results {results}
    master -> agent   challenge {nonce_m, mac_m}   welcome {window[, bulk_threshold][, batch]}
                      refused {reason[, master]}   task {task} + files   no_more_tasks {}
                      bulk_go {process, attempt[, rate_bps]}   tasks {tasks}
                      cancel {process, attempt}

Batches (version 2): `tasks {tasks: [task, ...]}` and `results {results: [result, ...]}` carry
several tasks or results without files in one message, each exactly as its `task`/`result`
would, so that a flood of short tasks costs one message, one write and one wake-up per batch
rather than per task. A master sends `tasks` only to an agent whose hello says version 2 or
later, and says `batch: true` in its welcome to such an agent only; an agent sends `results`
only after that. Either side of version 1 thus never sees a batch.

`cancel` (issue 20): the master held or removed a task the agent holds (the job's periodic
policy, or the user): the agent kills it if it runs, or reports it without running it; either
way its result still comes back (the master ignores it), so the agent's accounting is unchanged.
An older agent refuses the message and its connection is dropped, which loses its other tasks
to a new agent (the masters build their own agents, so this does not happen in practice).

Bulk returns (issue 8 item 3), an optional addition both ways: a master that serializes large
results says `bulk_threshold` (bytes) in its welcome. An agent that was told it announces a result
whose files are larger with `bulk_ready` instead of sending it, goes on with its other tasks and
results, and sends that result when `bulk_go` names it, at no more than `rate_bps` bits per second
when the grant names one (the subnet's limit is shared with the master's paced inputs). An older
agent ignores the field (fields beyond the known ones are dropped) and sends every result at once,
as before; an agent that was not told (an older master) never sends `bulk_ready`.

A master that is not the one an agent's hello names says so in its refusal (`master`: its own id),
so that an agent looking for its master on a range of ports (llic/agent_job.py) goes on to the
next one; an agent that does not know the field takes it as any refusal.

Handshake, mutual, with the master's 32-byte secret (given to the agent in its input file):
hello -> challenge (mac_m = master_mac(secret, nonce_a, agent)) -> the agent checks mac_m and sends
auth (mac_a = agent_mac(secret, nonce_m, agent)) -> welcome or refused. A master decodes with
`Decoder(allowed={HELLO})` until then, so an unauthenticated peer can make it buffer 1 MiB at most.

Anything malformed raises ProtocolError: the caller drops the connection.

The agent may be writing a large result while a task is on its way to it: a master must keep
reading while it sends (separate send and receive tasks), or both sides can block on full buffers.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import llic

from . import lean_msgpack
from .files import KIND_FILE, KINDS, UnsafePath, check_relpath

# the records, modes and statuses of llic/task.py are the wire's: re-exported
from .task import MODES as MODES
from .task import STATUS_LAUNCH_FAILED as STATUS_LAUNCH_FAILED
from .task import STATUS_OK as STATUS_OK
from .task import STATUS_PREPARE_FAILED as STATUS_PREPARE_FAILED
from .task import STATUSES as STATUSES
from .task import TAIL_SIZE as TAIL_SIZE
from .task import TRANSFER_MODES as TRANSFER_MODES
from .task import Mode as Mode
from .task import ProtocolError as ProtocolError
from .task import Task as Task
from .task import TaskResult as TaskResult
from .task import _fail, _int, _map, _require, _str

PROTOCOL_VERSION = 2  # 2: tasks and results batches
HEADER = struct.Struct(">I")
MAX_MESSAGE = 1 << 20  # 1 MiB: a task or result with its file list is a few KiB
MAX_BLOB = 1 << 30  # 1 GiB per file: larger outputs are not sent (the result says so in `error`)
# 2 GiB of files in one `result`: the master holds a result's files in memory until it places
# them (one message at a time per agent), so this bounds what one agent can make it hold; an
# agent sends no more (the files past it are left out, the result's `error` says so)
MAX_RESULT_BYTES = 2 * MAX_BLOB
SECRET_SIZE = 32
NONCE_SIZE = 32
MAC_SIZE = 32  # HMAC-SHA256
MAX_FILE_MODE = 0o7777

HELLO = "hello"
CHALLENGE = "challenge"
AUTH = "auth"
WELCOME = "welcome"
REFUSED = "refused"
TASK = "task"
NO_MORE_TASKS = "no_more_tasks"
TASKS = "tasks"
RESULT = "result"
RESULTS = "results"
BULK_READY = "bulk_ready"
BULK_GO = "bulk_go"
MAX_BATCH = 1024  # tasks or results in one batch
CANCEL = "cancel"
FROM_AGENT = frozenset({HELLO, AUTH, RESULT, RESULTS, BULK_READY})
FROM_MASTER = frozenset({CHALLENGE, WELCOME, REFUSED, TASK, TASKS, NO_MORE_TASKS, BULK_GO, CANCEL})
MESSAGE_TYPES = FROM_AGENT | FROM_MASTER


# ---------------------------------------------------------------------------------------------
# field checks beyond llic/task.py's


def _bytes(value: Any, where: str, size: int) -> bytes:
    if not isinstance(value, bytes):
        raise _fail(where, f"expected {size} bytes, got {type(value).__name__}")
    if len(value) != size:
        raise _fail(where, f"expected {size} bytes, got {len(value)}")
    return value


# ---------------------------------------------------------------------------------------------
# messages

_Check = Callable[[Any, str], Any]


def _check_nonce(value: Any, where: str) -> bytes:
    return _bytes(value, where, NONCE_SIZE)


def _check_mac(value: Any, where: str) -> bytes:
    return _bytes(value, where, MAC_SIZE)


def _check_count(value: Any, where: str) -> int:
    return _int(value, where)


def _check_positive(value: Any, where: str) -> int:
    return _int(value, where, minimum=1)


def _check_text(value: Any, where: str) -> str:
    return _str(value, where, nonempty=True)


class _Checked(dict):  # type: ignore[type-arg]
    """A task or result map the sender built from its own record (`_wire`): taken as it is."""


def _check_task(value: Any, where: str) -> Any:
    """Sending: the sender's own map (`_Checked`), as it is. Receiving: the Task the map reads
    as (the body keeps the record, not its map again: the receiver wants the record, and making
    the map a second time cost as much as checking it)."""
    if isinstance(value, _Checked):
        return value
    return Task.from_dict(value)


def _check_result(value: Any, where: str) -> Any:
    """As `_check_task`, for a TaskResult."""
    if isinstance(value, _Checked):
        return value
    return TaskResult.from_dict(value)


def _record(value: Any, kind: Any) -> Any:
    return value if isinstance(value, kind) else kind.from_dict(value)


def _batch(check: _Check) -> _Check:
    def check_list(value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise _fail(where, f"expected a list, got {type(value).__name__}")
        if not 0 < len(value) <= MAX_BATCH:
            raise _fail(where, f"expected 1 to {MAX_BATCH} items, got {len(value)}")
        return [check(item, f"{where}[{i}]") for i, item in enumerate(value)]

    return check_list


def _check_true(value: Any, where: str) -> bool:
    if value is not True:
        raise _fail(where, f"expected true, got {value!r}")
    return True


_FIELDS: dict[str, dict[str, _Check]] = {
    HELLO: {"agent": _check_text, "master": _check_text, "version": _check_positive, "nonce_a": _check_nonce},
    CHALLENGE: {"nonce_m": _check_nonce, "mac_m": _check_mac},
    AUTH: {"mac_a": _check_mac},
    WELCOME: {"window": _check_positive},
    REFUSED: {"reason": _str},
    TASK: {"task": _check_task},
    TASKS: {"tasks": _batch(_check_task)},
    NO_MORE_TASKS: {},
    RESULT: {"result": _check_result},
    RESULTS: {"results": _batch(_check_result)},
    BULK_READY: {"process": _check_count, "attempt": _check_count, "size": _check_count},
    BULK_GO: {"process": _check_count, "attempt": _check_count},
    CANCEL: {"process": _check_count, "attempt": _check_count},
}
# fields a message may leave out (None or absent: not there), added after version 1 shipped
_OPTIONAL: dict[str, dict[str, _Check]] = {
    WELCOME: {"bulk_threshold": _check_positive, "batch": _check_true},
    REFUSED: {"master": _check_text},  # present: the id of a master other than the one asked for
    BULK_GO: {"rate_bps": _check_positive},  # absent: send as fast as the link goes
}
# which file kinds each message type may carry
_FILE_KINDS: dict[str, tuple[str, ...]] = {TASK: (KIND_FILE,), RESULT: KINDS}


def _check_files(value: Any, kinds: tuple[str, ...], max_blob: int, max_files: float) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _fail("files", f"expected a list, got {type(value).__name__}")
    total = 0
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(value):
        where = f"files[{i}]"
        raw = _map(raw, where)
        path = _str(_require(raw, "path", where), f"{where}.path")
        try:
            check_relpath(path)
        except UnsafePath as exc:
            raise _fail(f"{where}.path", str(exc)) from None
        size = _int(_require(raw, "size", where), f"{where}.size")
        if size > max_blob:
            raise _fail(f"{where}.size", f"{size} bytes is more than the {max_blob}-byte blob limit")
        total += size
        if total > max_files:
            raise _fail("files", f"more than the {max_files}-byte limit of one result's files")
        mode = _int(raw.get("mode", 0o644), f"{where}.mode")
        if mode > MAX_FILE_MODE:
            raise _fail(f"{where}.mode", f"not a file mode: {mode:o}")
        kind = _str(raw.get("kind", KIND_FILE), f"{where}.kind")
        if kind not in kinds:
            raise _fail(f"{where}.kind", f"{kind!r} not allowed here")
        if (kind, path) in seen:
            raise _fail(f"{where}.path", f"{path!r} appears twice")
        seen.add((kind, path))
        entries.append({"path": path, "size": size, "mode": mode, "kind": kind})
    return entries


def validate_message(
    msg: Any,
    allowed: Iterable[str] | None = None,
    max_blob: int = MAX_BLOB,
    max_files: int = MAX_RESULT_BYTES,
) -> tuple[str, dict[str, Any]]:
    """(type, body) of a message map, body holding the known fields only (normalized: a task or
    result as its checked record, Task or TaskResult); else ProtocolError."""
    msg = _map(msg, "message")
    mtype = msg.get("t")
    if not isinstance(mtype, str) or mtype not in _FIELDS:
        raise _fail("message", f"unknown type {mtype!r}")
    if allowed is not None and mtype not in allowed:
        raise _fail("message", f"{mtype!r} not expected here")
    body: dict[str, Any] = {}
    for name, check in _FIELDS[mtype].items():
        body[name] = check(_require(msg, name, mtype), f"{mtype}.{name}")
    for name, check in _OPTIONAL.get(mtype, {}).items():
        if msg.get(name) is not None:
            body[name] = check(msg[name], f"{mtype}.{name}")
    if "files" in msg:
        if mtype not in _FILE_KINDS:
            raise _fail(mtype, "this message carries no files")
        # a task's inputs are the user's own files, sent by the master: only results are capped
        total = max_files if mtype == RESULT else math.inf
        files = _check_files(msg["files"], _FILE_KINDS[mtype], max_blob, total)
        if files:
            body["files"] = files
    return mtype, body


@dataclass
class Message:
    """A decoded message: `body` has the validated fields (without "t"), `blobs` one bytes per file entry."""

    type: str
    body: dict[str, Any]
    blobs: list[bytes] = field(default_factory=list)

    @property
    def files(self) -> list[dict[str, Any]]:
        """The message's file entries, one per blob (none: [])."""
        return self.body.get("files", [])

    def file_pairs(self) -> list[tuple[dict[str, Any], bytes]]:
        """(entry, content) per file, what `files.place_outputs` takes."""
        return list(zip(self.files, self.blobs))  # noqa: B905 (strict= is 3.10+; lengths checked)

    def task(self) -> Task:
        """The `task` message's task, checked."""
        return _record(self.body["task"], Task)  # type: ignore[no-any-return]

    def tasks(self) -> list[Task]:
        """The tasks of a `task` or `tasks` message, checked."""
        if self.type == TASKS:
            return [_record(t, Task) for t in self.body["tasks"]]
        return [self.task()]

    def result(self) -> TaskResult:
        """The `result` message's result, checked."""
        return _record(self.body["result"], TaskResult)  # type: ignore[no-any-return]

    def results(self) -> list[TaskResult]:
        """The results of a `result` or `results` message, checked."""
        if self.type == RESULTS:
            return [_record(r, TaskResult) for r in self.body["results"]]
        return [self.result()]


def file_entry(path: str, data: bytes, mode: int = 0o644, kind: str = KIND_FILE) -> dict[str, Any]:
    """The `files` entry describing `data`."""
    return {"path": path, "size": len(data), "mode": mode & MAX_FILE_MODE, "kind": kind}


# Where msgpack runs as its pure-Python fallback (the agent, which ships no compiled code), the
# protocol's own encoder and decoder do the same work in a third of the time (llic/lean_msgpack.py).
# In the agent's zipapp (its llic stub says so) msgpack is always that fallback, so it is not even
# imported there: importing it cost each agent ~10 ms of start-up.
if getattr(llic, "AGENT_ZIPAPP", False):
    _LEAN = True
else:
    import msgpack

    _LEAN = getattr(getattr(msgpack, "Unpacker", None), "__module__", "") == "msgpack.fallback"


def _packb(obj: Any) -> bytes:
    if _LEAN:
        return lean_msgpack.packb(obj)
    return msgpack.packb(obj, use_bin_type=True)


def _unpackb(payload: bytes) -> Any:
    if _LEAN:
        return lean_msgpack.unpackb(payload)
    return msgpack.unpackb(payload, raw=False, strict_map_key=True, ext_hook=_no_ext)


def encode_frames(msg: Mapping[str, Any], blobs: list[bytes] | None = None) -> list[bytes]:
    """The frames of `msg` (a map with "t") and its blobs, validated as the receiver will (but
    for Task and TaskResult objects, which are taken as built: see `_plain`).

    Small frames come with their header in one bytes; a large blob comes as header, then the blob
    itself (not copied), so senders can write the list piece by piece.
    """
    plain = {k: _plain(v) for k, v in msg.items()}
    mtype, body = validate_message(plain)
    blobs = list(blobs or [])
    files = body.get("files", [])
    if len(blobs) != len(files):
        raise ProtocolError(f"{mtype}: {len(files)} file entries but {len(blobs)} blobs")
    for entry, blob in zip(files, blobs):  # noqa: B905 (3.9)
        if len(blob) != entry["size"]:
            raise ProtocolError(
                f"{mtype}: blob for {entry['path']!r} has {len(blob)} bytes, not {entry['size']}"
            )
    try:
        payload = _packb(dict(body, t=mtype))
    except (TypeError, ValueError, OverflowError) as exc:  # e.g. a str that is not valid Unicode
        raise ProtocolError(f"{mtype}: cannot encode: {exc}") from None
    if len(payload) > MAX_MESSAGE:
        raise ProtocolError(
            f"{mtype}: {len(payload)} bytes is more than the {MAX_MESSAGE}-byte message limit"
        )
    frames = [HEADER.pack(len(payload)) + payload]
    for blob in blobs:
        if len(blob) <= 65536:
            frames.append(HEADER.pack(len(blob)) + bytes(blob))
        else:
            frames.append(HEADER.pack(len(blob)))
            frames.append(blob)
    return frames


# Fields a record's map leaves out on the wire when they hold these values: what `from_dict` takes
# for a missing field (so every version reads the short map as the whole one). The agent's
# pure-Python msgpack pays per object: a task of a plain `queue N` file goes from 26 objects to 10.
_WIRE_DEFAULTS: dict[type, dict[str, Any]] = {
    Task: {
        "cluster": 0,
        "attempt": 0,
        "arguments": [],
        "environment": {},
        "input": None,
        "output": None,
        "error": None,
        "transfer_input_files": [],
        "transfer_output_files": None,
    },
    TaskResult: {
        "exit_code": None,
        "signal": None,
        "run_time": 0.0,
        "started": None,
        "finished": None,
        "host": "",
        "stdout_tail": "",
        "stderr_tail": "",
        "error": None,
    },
}


def _wire(record: Task | TaskResult) -> _Checked:
    """The record's map without the fields that hold their defaults, marked as checked."""
    if isinstance(record, Task):
        return task_map(record, record.attempt)
    return _result_map(record)


def task_map(task: Task, attempt: int) -> _Checked:
    """Run `attempt` of `task` as its wire map (`_WIRE_DEFAULTS` left out, fields in `to_dict`'s
    order), made from the task directly: the master sends a task per result, and copying it
    (`with_attempt`) and then its whole map (`to_dict`) only to drop most of it cost more than
    encoding it."""
    out = _Checked(process=task.process)
    if task.cluster != 0 or type(task.cluster) is not int:
        out["cluster"] = task.cluster
    if attempt != 0 or type(attempt) is not int:
        out["attempt"] = attempt
    out["executable"] = task.executable
    if task.arguments:
        out["arguments"] = list(task.arguments)
    if task.environment:
        out["environment"] = dict(task.environment)
    if task.input is not None:
        out["input"] = task.input
    if task.output is not None:
        out["output"] = task.output
    if task.error is not None:
        out["error"] = task.error
    out["initialdir"] = task.initialdir
    if task.transfer_input_files:
        out["transfer_input_files"] = list(task.transfer_input_files)
    if task.transfer_output_files is not None:
        out["transfer_output_files"] = list(task.transfer_output_files)
    if task.log is not None:
        out["log"] = task.log
    if task.hold:
        out["hold"] = True
    if task.policy:
        out["policy"] = dict(task.policy)
    if task.output_remaps is not None:
        out["output_remaps"] = task.output_remaps
    return out


def _result_map(result: TaskResult) -> _Checked:
    """A result's wire map (`_WIRE_DEFAULTS` left out, fields in `to_dict`'s order)."""
    out = _Checked(process=result.process, attempt=result.attempt, status=result.status)
    if result.exit_code is not None:
        out["exit_code"] = result.exit_code
    if result.signal is not None:
        out["signal"] = result.signal
    run_time = float(result.run_time)
    if run_time != 0.0:
        out["run_time"] = run_time
    if result.started is not None:
        out["started"] = result.started
    if result.finished is not None:
        out["finished"] = result.finished
    if result.host != "" or type(result.host) is not str:
        out["host"] = result.host
    if result.stdout_tail != "" or type(result.stdout_tail) is not str:
        out["stdout_tail"] = result.stdout_tail
    if result.stderr_tail != "" or type(result.stderr_tail) is not str:
        out["stderr_tail"] = result.stderr_tail
    if result.error is not None:
        out["error"] = result.error
    return out


def _plain(value: Any) -> Any:
    """Records in their short map form (`_WIRE_DEFAULTS`), marked as checked: the sender's own
    Task and TaskResult objects are not read back through `from_dict` before they go (it cost the
    master about a tenth of its CPU in a flood of short tasks, the agent as much); the receiver
    checks every one."""
    if isinstance(value, (Task, TaskResult)):
        return _wire(value)
    if isinstance(value, list) and value and isinstance(value[0], (Task, TaskResult)):
        return [_wire(v) for v in value]
    return value


def encode(msg: Mapping[str, Any], blobs: list[bytes] | None = None) -> bytes:
    """`msg` and its blobs as one byte string (see encode_frames)."""
    return b"".join(encode_frames(msg, blobs))


def _no_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(f"msgpack extension type {code} not allowed")


class Decoder:
    """Incremental decoder: `feed` bytes as they arrive, take whole messages with `next`.

    `allowed` restricts the message types (change it as the conversation moves on). After a
    ProtocolError the decoder stays broken: every later call raises the same error.
    """

    def __init__(
        self,
        allowed: Iterable[str] | None = None,
        max_message: int = MAX_MESSAGE,
        max_blob: int = MAX_BLOB,
        max_files: int = MAX_RESULT_BYTES,
    ) -> None:
        self.allowed: frozenset[str] | None = None if allowed is None else frozenset(allowed)
        self.max_message = max_message
        self.max_blob = max_blob
        self.max_files = max_files  # bytes of one result's files, all told
        self._buf = bytearray()
        self._pending: Message | None = None  # a message whose blobs are still arriving
        self._error: ProtocolError | None = None

    @property
    def idle(self) -> bool:
        """Nothing buffered: the peer stopped at a message boundary."""
        return not self._buf and self._pending is None

    def feed(self, data: bytes) -> None:
        """Bytes as they arrived (any amount); take whole messages with `next`."""
        if self._error is not None:
            raise self._error
        self._buf += data

    def next(self) -> Message | None:
        """The next complete message, or None until more bytes arrive."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ProtocolError as exc:
            self._error = exc
            self._buf = bytearray()
            raise

    def __iter__(self) -> Iterator[Message]:
        """Every complete message buffered now."""
        while True:
            msg = self.next()
            if msg is None:
                return
            yield msg

    def eof(self) -> None:
        """The peer closed: fine between messages, ProtocolError in the middle of one."""
        if self._error is not None:
            raise self._error
        if not self.idle:
            self._error = ProtocolError("connection closed in the middle of a message")
            raise self._error

    def _take(self, size: int) -> bytes:
        with memoryview(self._buf) as view:
            data = bytes(view[HEADER.size : HEADER.size + size])
        del self._buf[: HEADER.size + size]
        return data

    def _next(self) -> Message | None:
        while len(self._buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buf)
            pending = self._pending
            if pending is None:
                if size == 0 or size > self.max_message:
                    raise ProtocolError(f"message frame of {size} bytes (limit {self.max_message})")
                if len(self._buf) < HEADER.size + size:
                    return None
                msg = self._parse(self._take(size))
                if not msg.files:
                    return msg
                self._pending = msg
                continue
            entry = pending.files[len(pending.blobs)]
            if size != entry["size"]:
                raise ProtocolError(
                    f"blob frame of {size} bytes for {entry['path']!r}, announced {entry['size']}"
                )
            if len(self._buf) < HEADER.size + size:
                return None
            pending.blobs.append(self._take(size))
            if len(pending.blobs) == len(pending.files):
                self._pending = None
                return pending
        return None

    def _parse(self, payload: bytes) -> Message:
        try:
            raw = _unpackb(payload)
        except ProtocolError:
            raise
        except Exception as exc:  # msgpack raises many kinds on garbage, RecursionError on deep nesting
            raise ProtocolError(f"not a msgpack message: {type(exc).__name__}: {exc}") from None
        if not isinstance(raw, dict):
            raise ProtocolError(f"message is a msgpack {type(raw).__name__}, not a map")
        mtype, body = validate_message(raw, self.allowed, self.max_blob, self.max_files)
        return Message(mtype, body)


# ---------------------------------------------------------------------------------------------
# handshake


def make_secret() -> bytes:
    """A fresh per-master secret (32 random bytes); goes to agents hex-encoded in their input files."""
    return os.urandom(SECRET_SIZE)


def make_nonce() -> bytes:
    """A fresh handshake nonce (32 random bytes)."""
    return os.urandom(NONCE_SIZE)


def secret_from_hex(text: str) -> bytes:
    """The secret from its hex form; ValueError if it is not 32 bytes of hex."""
    secret = bytes.fromhex(text)
    if len(secret) != SECRET_SIZE:
        raise ValueError(f"secret must be {SECRET_SIZE} bytes, got {len(secret)}")
    return secret


def _mac(secret: bytes, role: bytes, nonce: bytes, agent: str) -> bytes:
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"nonce must be {NONCE_SIZE} bytes")
    # the nonce has a fixed size, so role | nonce | agent cannot be read two ways
    return hmac.new(secret, role + nonce + agent.encode("utf-8"), hashlib.sha256).digest()


def master_mac(secret: bytes, nonce_a: bytes, agent: str) -> bytes:
    """What the master proves with: HMAC(secret, "master" | agent's nonce | agent id)."""
    return _mac(secret, b"master", nonce_a, agent)


def agent_mac(secret: bytes, nonce_m: bytes, agent: str) -> bytes:
    """What the agent proves with: HMAC(secret, "agent" | master's nonce | agent id)."""
    return _mac(secret, b"agent", nonce_m, agent)


def macs_equal(a: bytes, b: bytes) -> bool:
    """Constant-time comparison, so timing does not reveal how much of a guess was right."""
    return hmac.compare_digest(a, b)


def check_master_mac(secret: bytes, nonce_a: bytes, agent: str, mac: bytes) -> bool:
    """The agent's check of the master's proof (constant time)."""
    return macs_equal(master_mac(secret, nonce_a, agent), mac)


def check_agent_mac(secret: bytes, nonce_m: bytes, agent: str, mac: bytes) -> bool:
    """The master's check of the agent's proof (constant time)."""
    return macs_equal(agent_mac(secret, nonce_m, agent), mac)


# ---------------------------------------------------------------------------------------------
# blocking sockets (the agent)


PACE_CHUNK = 1 << 16  # bytes written between pacing checks of a rate-limited transfer


def paced_chunks(frames: Iterable[bytes], bps: float) -> Iterator[tuple[memoryview, float]]:
    """The frames in chunks, each with the second (from the transfer's start) before which it
    must not leave, so that no byte is ahead of `bps` at any moment and the last one leaves when
    the transfer's time is up. The master paces its inputs with this, the agent its granted
    large results: a chunk waits before it goes, never after."""
    sent = 0
    for frame in frames:
        view = memoryview(frame)
        for at in range(0, len(view), PACE_CHUNK):
            chunk = view[at : at + PACE_CHUNK]
            sent += len(chunk)
            yield chunk, 8 * sent / bps


def send_message(sock: Any, msg: Mapping[str, Any], blobs: list[bytes] | None = None) -> None:
    """Encode and write one message with its blobs to a blocking socket."""
    for frame in encode_frames(msg, blobs):
        sock.sendall(frame)


def recv_message(sock: Any, decoder: Decoder, bufsize: int = 1 << 18) -> Message | None:
    """The next message from a blocking socket; None if the peer closed between messages."""
    while True:
        msg = decoder.next()
        if msg is not None:
            return msg
        data = sock.recv(bufsize)
        if not data:
            decoder.eof()
            return None
        decoder.feed(data)
