"""The master's state file (seed §3.6, §3.10): what a master restarted by HTCondor resumes from,
and what master_q reads.

Layout: a header line `llic-master-state <version> sha256:<hex>` and a JSON body (one task per
line, so a person can read it). The checksum covers the body, so a torn or edited file is
recognised instead of resumed from. Saving is atomic: write a temporary file in the same
directory, fsync it, rename it over the old one, fsync the directory; a crash at any point leaves
either the old or the new state, never a mix.

A file that is missing, unreadable, damaged, of another version or not ours raises
`StateFileError` naming the file and what is wrong. Nothing here deletes or overwrites such a
file: `save_state` refuses to replace a file that is not an llic state file, and the master loads
its state before it ever saves, so it stops on a damaged one.

Where the files are: each master has an output directory (`master_output_dir`) under
MASTER_OUTPUTS_DIR_PREFIX_PATH holding `master.<id>.state` (`state_file_name`);
`find_state_files` (master_q ALL) looks for `master.*.state` there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import operator
import os
import re
import threading
import typing
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring as _encode_str  # type: ignore[attr-defined]
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from common.config import ConfigError
from common.files import open_regular, read_regular
from llic.chef import ChefRecord, ChefState
from llic.config import LlicConfig
from llic.master_core import MasterCore, MasterStatus
from llic.netadmit import NetAdmit
from llic.task import STATUS_OK, TaskResult
from llic.task_policy import HOLD_SUBMITTED_ON_HOLD, Decision, TaskPolicy, Verdict
from llic.taskbook import TaskBook, TaskCounts, TaskRecord, TaskState

SUBMITTED_ON_HOLD = Decision(Verdict.HOLD, "submitted on hold at user's request", HOLD_SUBMITTED_ON_HOLD)
MAGIC = "llic-master-state"
VERSION = 1
STATE_GLOB = "master.*.state"
MASTER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # \Z: '$' takes a final newline too
# A 100,000-task file is some 10 MB; a task's line stays under a few KiB (the result's tails are
# cut short), so this bounds what master_q and master_rm read, not what a master writes.
MAX_STATE_BYTES = 1 << 30
# The latest time a state file may name (9999-12-31 UTC): any master's clock, and what master_q
# can show as a date; 1e300, infinity or NaN crashed it.
MAX_TIME = 253402300799.0


class StateFileError(Exception):
    """A state file that cannot be used; str() is one line naming the file."""


@dataclass(frozen=True)
class MasterInfo:
    """Who this master is: fixed when master_submitter creates it."""

    master_id: str  # unique among masters, used in file and directory names
    owner: str  # the submitting user
    cluster: int  # the cluster number the tasks' $(Cluster) expands to
    submit_file: str  # the queue block's submit description given to this master
    block: int  # which queue statement of the user's submit file (0-based)

    def __post_init__(self) -> None:
        if not MASTER_ID.match(self.master_id):
            raise ValueError(f"master id {self.master_id!r}: letters, digits, '_', '.', '-' only")


@dataclass
class MasterState:
    """Everything a master's state file holds (what `load_state` returns and `save_state` writes)."""

    info: MasterInfo
    config: dict[str, Any]  # LlicConfig.snapshot() the master runs with
    status: MasterStatus
    started: float | None  # the master's first start (None: not started yet)
    saved: float
    run: int  # how many times the master has started (MasterCore.run)
    tasks: list[TaskRecord]
    chefs: list[ChefRecord]
    counters: dict[str, int] = field(default_factory=dict)  # TaskBook.counters()
    extra: dict[str, Any] = field(default_factory=dict)  # the driver's own (JSON) facts

    def counts(self) -> TaskCounts:
        """How many tasks are in each state."""
        by = dict.fromkeys(TaskState, 0)
        for rec in self.tasks:
            by[rec.state] += 1
        return TaskCounts(
            len(self.tasks),
            by[TaskState.QUEUED],
            by[TaskState.RUNNING],
            by[TaskState.DONE],
            by[TaskState.FAILED],
            by[TaskState.HELD],
            by[TaskState.REMOVED],
        )

    def agents_by_state(self) -> dict[str, int]:
        """How many chefs are in each ChefState."""
        counts = dict.fromkeys((s.value for s in ChefState), 0)
        for chef in self.chefs:
            counts[chef.state.value] += 1
        return counts


# ----------------------------------------------------------------------------- core <-> state


def initial_state(
    info: MasterInfo, config: LlicConfig, processes: list[int], now: float, held: Iterable[int] = ()
) -> MasterState:
    """A new master's state (every task queued, those of `held` held as submitted on hold, no
    chef yet): what master_submitter writes."""
    book = TaskBook(processes, config.max_task_attempts)
    for process in held:
        book.hold(process, SUBMITTED_ON_HOLD, now)
    return MasterState(info, config.snapshot(), MasterStatus.RUNNING, None, now, 0, book.records(), [])


def snapshot(
    core: MasterCore,
    info: MasterInfo,
    now: float,
    extra: dict[str, Any] | None = None,
    *,
    copy: bool = True,
) -> MasterState:
    """The state to save now: a copy, so the core may go on while it is written; with
    copy=False the task records are the core's own (for a save that encodes them at once)."""
    records = core.book.records()
    return MasterState(
        info,
        core.config.snapshot(),
        core.status,
        core.started,
        now,
        core.run,
        [r.copy() for r in records] if copy else records,
        [replace(c, job_ids=list(c.job_ids)) for c in core.chef_records()],
        core.book.counters(),
        dict(extra or {}),
    )


def restore(
    state: MasterState,
    config: LlicConfig | None = None,
    net: NetAdmit | None = None,
    *,
    policy: TaskPolicy | None = None,
    log_events: bool = False,
) -> MasterCore:
    """The core a restarted master goes on with (then call `start`): results recorded before are
    kept exactly once; tasks that were running are queued again (their agents are removed by
    `start`). `config` defaults to the snapshot the master ran with; `net`, the network
    admission it runs with (default: accounting only, no limits); `policy`, the tasks' job
    policy (default: HTCondor's without policy commands); `log_events`, whether the tasks'
    events are wanted for job event logs."""
    if config is None:
        try:
            config = LlicConfig.from_snapshot(state.config, source=f"state of master {state.info.master_id}")
        except ConfigError as e:
            raise StateFileError(str(e)) from None
    book = TaskBook.from_records(state.tasks, config.max_task_attempts, state.counters)
    chefs = [replace(c, job_ids=list(c.job_ids)) for c in state.chefs]
    return MasterCore(
        book,
        config,
        chefs,
        state.started,
        state.run,
        net,
        policy=policy,
        cluster=state.info.cluster,
        log_events=log_events,
    )


# ----------------------------------------------------------------------------- files


def state_file_name(master_id: str) -> str:
    """`master.<id>.state`: the state file's name in the master's output directory."""
    return f"master.{master_id}.state"


def master_output_dir(prefix: str, master_id: str) -> Path:
    """MASTER_OUTPUTS_DIR_PREFIX_PATH extended for one master (seed §5): a directory prefix
    (existing, or ending in '/') gets a subdirectory `master.<id>`; any other prefix gets
    `.<id>` appended (`/scratch/run` → `/scratch/run.<id>`)."""
    if prefix.endswith("/") or os.path.isdir(prefix):
        return Path(prefix) / f"master.{master_id}"
    return Path(f"{prefix}.{master_id}")


def find_state_files(prefix: str) -> list[Path]:
    """Every `master.*.state` where master_output_dir puts them for `prefix` (and in the prefix
    directory itself). Unreadable directories are skipped; the order is by path."""
    base = Path(prefix)
    dirs: list[Path] = []
    if prefix.endswith("/") or base.is_dir():
        dirs.append(base)
        dirs += _subdirs(base, "")
    else:
        dirs += _subdirs(base.parent, base.name + ".")
    found: set[Path] = set()
    for d in dirs:
        try:
            found.update(p for p in d.glob(STATE_GLOB) if p.is_file())
        except OSError:
            continue
    return sorted(found)


def _subdirs(directory: Path, starting: str) -> list[Path]:
    try:
        return sorted(d for d in directory.iterdir() if d.name.startswith(starting) and d.is_dir())
    except OSError:
        return []


class StateWriter:
    """Saves one master's state file again and again: a task whose record did not change since
    the last save keeps its encoded line, so a save costs what changed plus a quick look at
    each record (the master saves every STATE_SAVE_INTERVAL while results stream in).

    A save is two steps: `encode` (the state as it is now, in the caller's thread) and `write`
    (the file, fsync, rename: may run in another thread, so the master goes on serving agents
    meanwhile). Writes are serialized, and one encoded before a save already written is
    skipped: the file never goes back to an older state."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lines: dict[int, tuple[tuple[Any, ...], str]] = {}
        self._encoded = 0  # saves encoded so far
        self._written = 0  # the newest of them written
        self._lock = threading.Lock()

    def save(self, state: MasterState, changed: Collection[int] | None = None) -> None:
        """save_state(path, state), reusing the lines of unchanged tasks."""
        self.write(self.encode(state, changed))

    def encode(self, state: MasterState, changed: Collection[int] | None = None) -> tuple[int, bytes]:
        """The file's bytes for `state`, numbered for `write`. `changed`: the processes whose
        records may differ from when this writer last encoded them (`MasterCore.take_changed`
        since then); the others keep their lines without a look. None: every record is
        compared with its line's (a look per record and save: for 100,000 tasks, saved every
        STATE_SAVE_INTERVAL, that was most of a save)."""
        self._encoded += 1
        return self._encoded, _file_bytes(state, self._lines, changed)

    def write(self, encoded: tuple[int, bytes]) -> None:
        """Write what `encode` gave (atomically), unless a later save was written already."""
        number, data = encoded
        with self._lock:
            if number < self._written:
                return
            _write_file(self.path, data)
            self._written = number


def save_state(
    path: Path, state: MasterState, lines: dict[int, tuple[tuple[Any, ...], str]] | None = None
) -> None:
    """Write atomically (temporary file, fsync, rename, fsync of the directory). Refuses to
    replace a file that is not an llic state file. `lines`: encoded task lines to reuse and
    update (StateWriter's)."""
    _write_file(Path(path), _file_bytes(state, lines))


def _file_bytes(
    state: MasterState,
    lines: dict[int, tuple[tuple[Any, ...], str]] | None,
    changed: Collection[int] | None = None,
) -> bytes:
    body = _encode(state, lines, changed)
    return f"{MAGIC} {VERSION} sha256:{hashlib.sha256(body).hexdigest()}\n".encode() + body


def _write_file(path: Path, data: bytes) -> None:
    if path.exists() and not _looks_like_state(path):
        raise StateFileError(f"{path}: exists and is not an llic master state file; not overwritten")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
                f.flush()
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StateFileError(f"{path}: cannot save: {e.strerror or e}") from None
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_state(path: Path) -> MasterState:
    """Read and check a state file; StateFileError (one line, naming the file) on any problem.
    The file is never changed."""
    path = Path(path)
    try:
        data = read_regular(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        raise StateFileError(f"{path}: no such state file") from None
    except OSError as e:
        raise StateFileError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # a FIFO would block the reader; a huge file fill its memory
        raise StateFileError(f"{path}: {e}, not read as a state file") from None
    header, newline, body = data.partition(b"\n")
    try:
        magic, version, digest = header.decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        magic = version = digest = ""
    if magic != MAGIC or not newline:
        raise StateFileError(f"{path}: not an llic master state file (bad header)")
    if version != str(VERSION):
        raise StateFileError(
            f"{path}: state file version {version[:20]!r}; this llic reads version {VERSION}"
        )
    if digest != "sha256:" + hashlib.sha256(body).hexdigest():
        raise StateFileError(f"{path}: checksum mismatch: the file is damaged (torn write or edited)")
    try:
        raw = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise StateFileError(f"{path}: unreadable body: {e}") from None
    except ValueError as e:
        raise StateFileError(f"{path}: unreadable body: Invalid JSON: {e}") from None
    except RecursionError:
        raise StateFileError(f"{path}: unreadable body: Invalid JSON: nested too deep") from None
    if not isinstance(raw, dict):
        raise StateFileError(f"{path}: wrong content at (body): Input should be a valid dictionary")
    raw_tasks = raw.pop("tasks", None)
    try:
        head = _Head.model_validate(raw)
        if not isinstance(raw_tasks, list):
            raise _Bad("tasks", "Field required" if raw_tasks is None else "Input should be a valid list")
        tasks = [_read_task(t, i) for i, t in enumerate(raw_tasks)]
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        raise StateFileError(f"{path}: wrong content at {where}: {err['msg']}") from None
    except _Bad as e:
        raise StateFileError(f"{path}: wrong content at {e.where}: {e.why}") from None
    del raw, raw_tasks
    try:
        return _decode(head, tasks)
    except ValueError as e:
        raise StateFileError(f"{path}: inconsistent content: {e}") from None


def _looks_like_state(path: Path) -> bool:
    """Whether `path` is a regular file that starts as a state file (a FIFO must not hang the save)."""
    try:
        fd, _ = open_regular(path)
    except (OSError, ValueError):
        return False
    try:
        return os.read(fd, len(MAGIC) + 1) == f"{MAGIC} ".encode()
    except OSError:
        return False
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- encoding


def _encode(
    state: MasterState,
    lines: dict[int, tuple[tuple[Any, ...], str]] | None = None,
    changed: Collection[int] | None = None,
) -> bytes:
    head = {
        "master": vars(state.info),
        "config": state.config,
        "status": state.status.value,
        "started": state.started,
        "saved": state.saved,
        "run": state.run,
        "counters": state.counters,
        "extra": state.extra,
        "chefs": [{**vars(c), "state": c.state.value} for c in state.chefs],
    }
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False)
    if lines is None:
        tasks = ",\n".join(_task_line(t) for t in state.tasks)
    elif changed is not None:
        encoded = []
        for t in state.tasks:
            known = lines.get(t.process)
            if known is None or t.process in changed:
                known = lines[t.process] = (_fingerprint(t), _task_line(t))
            encoded.append(known[1])
        tasks = ",\n".join(encoded)
    else:
        encoded = []
        for t in state.tasks:
            key = _fingerprint(t)
            known = lines.get(t.process)
            if known is None or known[0] != key:
                known = lines[t.process] = (key, _task_line(t))
            encoded.append(known[1])
        tasks = ",\n".join(encoded)
    return (text[:-1] + ',"tasks":[\n' + tasks + "\n]}\n").encode("utf-8")


def _task_line(rec: TaskRecord) -> str:
    """The record's line: `_task_json` as compact JSON. Written out by hand for the records a
    flood of short tasks leaves (json.dumps of the map cost a master ~8 us per task and save);
    any value of another type than its field's plain one goes through json.dumps, and so
    does every record with a hold or failures on other chefs."""
    line = _fast_line(rec)
    if line is None:
        line = json.dumps(_task_json(rec), separators=(",", ":"), ensure_ascii=False)
    return line


def _fast_line(rec: TaskRecord) -> str | None:
    """`_task_line` without json.dumps, or None where it does not apply."""
    process, attempt, failures, chef = rec.process, rec.attempt, rec.failures, rec.chef
    if (
        rec.hold_reason is not None
        or rec.failed_on
        or type(process) is not int
        or type(attempt) is not int
        or type(failures) is not int
        or (chef is not None and type(chef) is not int)
    ):
        return None
    line = f'{{"process":{process},"state":"{rec.state.value}"'
    if attempt:
        line += f',"attempt":{attempt}'
    if failures:
        line += f',"failures":{failures}'
    if chef is not None:
        line += f',"chef":{chef}'
    outcome = rec.outcome
    if outcome is not None:
        text = _outcome_text(outcome)
        if text is None:
            return None
        line += text
    completions, entered, wall_clock, completed, recorded = (
        rec.completions,
        rec.entered,
        rec.wall_clock,
        rec.completed,
        rec.recorded,
    )
    if not (_plain_number(completions) and _plain_number(wall_clock) and _plain_number(recorded)):
        return None
    if completions:
        line += f',"completions":{completions}'
    if entered is not None:
        if not _plain_number(entered):
            return None
        line += f',"entered":{entered}'
    if wall_clock:
        line += f',"wall_clock":{wall_clock}'
    if completed is not None:
        if not _plain_number(completed):
            return None
        line += f',"completed":{completed}'
    if recorded:
        line += f',"recorded":{recorded}'
    return line + "}"


def _outcome_text(outcome: TaskResult) -> str | None:
    """`,"outcome":{...}` as `_task_json` has it, or None for a value json.dumps must write."""
    status, run_time = outcome.status, outcome.run_time
    if type(status) is not str or not _plain_number(run_time):
        return None
    text = f',"outcome":{{"status":{_encode_str(status)}' if status else ',"outcome":{'
    sep = "," if status else ""
    for name, value in (("exit_code", outcome.exit_code), ("signal", outcome.signal)):
        if value is not None:
            if type(value) is not int:
                return None
            text += f'{sep}"{name}":{value}'
            sep = ","
    text += f'{sep}"run_time":{float(run_time)}'
    for name, value in (
        ("started", outcome.started),
        ("finished", outcome.finished),
        ("host", outcome.host),
        ("stdout_tail", outcome.stdout_tail),
        ("stderr_tail", outcome.stderr_tail),
        ("error", outcome.error),
    ):
        if value is None or value == "":
            continue
        if type(value) is str:
            text += f',"{name}":{_encode_str(value)}'
        elif _plain_number(value):
            text += f',"{name}":{value}'
        else:
            return None
    return text + "}"


def _plain_number(value: object) -> bool:
    """An int or a finite float (not a bool): json.dumps writes it as f"{value}" does."""
    kind = type(value)
    return kind is int or (kind is float and math.isfinite(value))  # type: ignore[arg-type]


def _fingerprint(rec: TaskRecord) -> tuple[Any, ...]:
    """Every field of the record (and how many chefs failed it: `failed_on` only grows, in
    place), compared by value: equal fingerprints, equal lines. Objects (the outcome, a
    TaskResult) hold as long as the task book replaces them rather than changing them in place,
    which it does."""
    return (*_FIELDS(rec), len(rec.failed_on))


_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(TaskRecord)))


def _task_json(rec: TaskRecord) -> dict[str, Any]:
    """Defaults left out: a never-run task is `{"process":N,"state":"queued"}`."""
    out: dict[str, Any] = {"process": rec.process, "state": rec.state.value}
    if rec.attempt:
        out["attempt"] = rec.attempt
    if rec.failures:
        out["failures"] = rec.failures
    if rec.chef is not None:
        out["chef"] = rec.chef
    if rec.failed_on:
        out["failed_on"] = sorted(rec.failed_on)
    if rec.outcome is not None:
        fields = rec.outcome.to_dict().items()
        out["outcome"] = {k: v for k, v in fields if k in _OUTCOME_FIELDS and v not in (None, "")}
    if rec.completions:
        out["completions"] = rec.completions
    if rec.hold_reason is not None:
        out["hold_reason"] = rec.hold_reason
        out["hold_code"] = rec.hold_code
        out["hold_subcode"] = rec.hold_subcode
    if rec.entered is not None:
        out["entered"] = rec.entered
    if rec.wall_clock:
        out["wall_clock"] = rec.wall_clock
    if rec.completed is not None:
        out["completed"] = rec.completed
    if rec.recorded:
        out["recorded"] = rec.recorded
    return out


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Info(_M):
    master_id: str
    owner: str
    cluster: int
    submit_file: str
    block: int = Field(ge=0)


# A task's outcome is a TaskResult (llic/task.py) less what the task record already says (which
# process, which run): the schema is made from that class, so the two cannot drift apart. The
# fields TaskResult.kept() empties are read if present and never written.
_OUTCOME_FIELDS = tuple(
    f.name for f in dataclasses.fields(TaskResult) if f.name not in ("process", "attempt")
)
_Outcome = create_model(
    "_Outcome",
    __base__=_M,
    **{
        f.name: (typing.get_type_hints(TaskResult)[f.name], f.default)
        for f in dataclasses.fields(TaskResult)
        if f.name in _OUTCOME_FIELDS
    },
)


class _Task(_M):
    process: int = Field(ge=0)
    state: Literal["queued", "running", "done", "failed", "held", "removed"]
    attempt: int = Field(0, ge=0)
    failures: int = Field(0, ge=0)
    chef: int | None = Field(None, ge=0)
    failed_on: tuple[int, ...] = ()
    outcome: _Outcome | None = None
    completed: float | None = None
    recorded: int = Field(0, ge=0)
    completions: int = Field(0, ge=0)
    hold_reason: str | None = None
    hold_code: int = 0
    hold_subcode: int = 0
    entered: float | None = None
    wall_clock: float = Field(0.0, ge=0)


class _Chef(_M):
    index: int = Field(ge=0)
    state: Literal["created", "launched", "running", "terminated", "unrecoverable"]
    launches: int = Field(ge=0)
    recoveries: int = Field(ge=0)
    failures: int = Field(ge=0)
    no_more_sent: bool
    job_id: str | None
    job_ids: list[str]


_Time = Annotated[float, Field(ge=0, le=MAX_TIME, allow_inf_nan=False)]


class _Head(_M):
    """Everything but the tasks, which _read_task checks (a 100,000-task file read through
    pydantic models costs 90 MB and 2.5 s; through json and these checks, 40 MB and 0.5 s)."""

    master: _Info
    config: dict[str, Any]
    status: Literal["running", "done", "gave_up", "stopped"]
    started: _Time | None
    saved: _Time
    run: int = Field(ge=0)
    counters: dict[str, int]
    extra: dict[str, Any]
    chefs: list[_Chef]


class _Bad(ValueError):
    """A task field that _Task would refuse: where (tasks.N.field) and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


def _check(value: Any, hint: Any, where: str) -> Any:
    """value against a field's type as pydantic's strict mode would (int, float, str, bool,
    their optional forms, tuple[int, ...], a Literal)."""
    if hint is Any:
        return value
    args = typing.get_args(hint)
    if type(None) in args:
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    if typing.get_origin(hint) is Literal:
        if value not in args:
            raise _Bad(where, f"Input should be {' or '.join(repr(a) for a in args)}")
        return value
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list):
            raise _Bad(where, "Input should be a valid tuple")
        return tuple(_check(v, int, f"{where}.{i}") for i, v in enumerate(value))
    if hint is float:
        if type(value) not in (int, float):
            raise _Bad(where, "Input should be a valid number")
        if not math.isfinite(value):  # json reads NaN and Infinity; the master never writes them
            raise _Bad(where, "Input should be a finite number")
        return float(value)
    if type(value) is not hint:
        raise _Bad(where, f"Input should be a valid {getattr(hint, '__name__', hint)}")
    return value


_TASK_HINTS = typing.get_type_hints(_Task)
_TASK_FIELDS = {name: (_TASK_HINTS[name], info) for name, info in _Task.model_fields.items()}
_OUTCOME_HINTS = {name: typing.get_type_hints(TaskResult)[name] for name in _OUTCOME_FIELDS}
_OUTCOME_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TaskResult) if f.name in _OUTCOME_FIELDS}


def _read_task(raw: Any, index: int) -> dict[str, Any]:
    """One task of the file, checked field by field as _Task would check it."""
    where = f"tasks.{index}"
    if not isinstance(raw, dict):
        raise _Bad(where, "Input should be a valid dictionary")
    for name in raw:
        if name not in _TASK_FIELDS:
            raise _Bad(f"{where}.{name}", "Extra inputs are not permitted")
    out: dict[str, Any] = {}
    for name, (hint, info) in _TASK_FIELDS.items():
        if name not in raw:
            if info.is_required():
                raise _Bad(f"{where}.{name}", "Field required")
            out[name] = info.default
            continue
        value = raw[name]
        if name == "outcome" and value is not None:
            out[name] = _read_outcome(value, f"{where}.outcome")
            continue
        value = _check(value, hint, f"{where}.{name}")
        for bound in info.metadata:
            if getattr(bound, "ge", None) is not None and value is not None and value < bound.ge:
                raise _Bad(f"{where}.{name}", f"Input should be greater than or equal to {bound.ge}")
        out[name] = value
    return out


def _read_outcome(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _Bad(where, "Input should be a valid dictionary")
    for name in raw:
        if name not in _OUTCOME_HINTS:
            raise _Bad(f"{where}.{name}", "Extra inputs are not permitted")
    out = dict(_OUTCOME_DEFAULTS)
    for name, value in raw.items():
        out[name] = _check(value, _OUTCOME_HINTS[name], f"{where}.{name}")
    return out


_TASK_STATES = {s.value: s for s in TaskState}
_NOBODY: frozenset[int] = frozenset()  # one empty set for every task no agent failed


def _decode(m: _Head, task_fields: list[dict[str, Any]]) -> MasterState:
    try:
        info = MasterInfo(**m.master.model_dump())
    except ValueError as e:
        raise ValueError(f"master: {e}") from None
    chefs = [
        ChefRecord(
            c.index,
            ChefState(c.state),
            c.launches,
            c.recoveries,
            c.failures,
            c.no_more_sent,
            c.job_id,
            c.job_ids,
        )
        for c in m.chefs
    ]
    if [c.index for c in chefs] != list(range(len(chefs))):
        raise ValueError("chefs are not numbered 0, 1, ... in order")
    tasks: list[TaskRecord] = []
    seen: set[int] = set()
    for t in task_fields:
        process = t["process"]
        if process in seen:
            raise ValueError(f"process {process} appears twice")
        seen.add(process)
        state = _TASK_STATES[t["state"]]
        chef = t["chef"]
        if (state is TaskState.RUNNING) != (chef is not None):
            raise ValueError(f"process {process}: a task has a chef exactly when it is running")
        if chef is not None and chef >= len(chefs):
            raise ValueError(f"process {process}: running on chef {chef}, which does not exist")
        result = t["outcome"]
        if state is TaskState.DONE and (result is None or result["status"] != STATUS_OK):
            raise ValueError(f"process {process}: done without a successful result")
        # the run an outcome came from is not stored: a reloaded one carries the task's latest
        outcome = None if result is None else TaskResult(process, t["attempt"], **result)
        tasks.append(
            TaskRecord(
                process,
                state,
                t["attempt"],
                t["failures"],
                chef,
                frozenset(t["failed_on"]) if t["failed_on"] else _NOBODY,
                outcome,
                t["completed"],
                t["recorded"],
                t["completions"],
                t["hold_reason"],
                t["hold_code"],
                t["hold_subcode"],
                t["entered"],
                t["wall_clock"],
            )
        )
    return MasterState(
        info, m.config, MasterStatus(m.status), m.started, m.saved, m.run, tasks, chefs, m.counters, m.extra
    )
