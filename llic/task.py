"""One task of a master, from the submit file to its result, defined once for every part of llic.

- `Task`: one job of the user's cluster as condor_submit would resolve it (the submit-file parser
  makes them, with `attempt` 0), and as the master hands it to an agent, with the number of
  this run (`with_attempt`). The same record travels on the wire, in an agent's input file and
  in the submit description a master is given (`to_dict` / `from_dict`).
- `TaskResult`: how one run ended, as the agent reports it; the master keeps `kept()` of it in
  its task book, and its state file stores those fields (llic/state.py's schema is made from
  this class, not written again).
- `Mode`: how an agent gets at a task's files (seed §3.3), one per queue statement; the statuses
  a run ends with (`STATUS_OK` is the only one that means the job ran).

Stdlib only and Python 3.9+: the agent ships this module in its zipapp (llic/agent_build.py),
next to protocol.py, which re-exports it for the wire. `from_dict` checks a map as it comes
from a peer or a file: anything else is a ProtocolError naming the field.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Mode(str, enum.Enum):  # noqa: UP042 (enum.StrEnum is 3.11+; the agent runs on 3.9)
    """How an agent gets at a task's files (seed §3.3): in place on a shared file system, or sent
    by the master; `_INITIALDIR` when the submit file sets an initial directory (then no input
    file is common to all tasks). A str: compares equal to, and prints as, its value."""

    NFS = "NFS"
    NFS_INITIALDIR = "NFS_INITIALDIR"
    TRANSFER = "TRANSFER"
    TRANSFER_INITIALDIR = "TRANSFER_INITIALDIR"

    def __str__(self) -> str:
        return self.value


MODES = tuple(Mode)
TRANSFER_MODES = (Mode.TRANSFER, Mode.TRANSFER_INITIALDIR)

STATUS_OK = "ok"  # the job ran (whatever its exit code: HTCondor too calls that completed)
STATUS_PREPARE_FAILED = "prepare_failed"  # its files or directory could not be made ready
STATUS_LAUNCH_FAILED = "launch_failed"  # it could not be started
STATUSES = (STATUS_OK, STATUS_PREPARE_FAILED, STATUS_LAUNCH_FAILED)
TAIL_SIZE = 4096  # characters of stdout/stderr an agent sends back in a TaskResult
ERROR_KEEP = 500  # characters of a result's error text the master keeps (the state file stays small)
HOST_KEEP = 255  # characters of a result's host the master keeps (a DNS name has at most 253)


class ProtocolError(ValueError):
    """The peer sent something llic's protocol does not allow (a message, or a task or result
    map on the wire or in an agent's input file); drop the connection, refuse the file."""


# ---------------------------------------------------------------------------------------------
# map checks (protocol.py checks its messages' other fields with these too)


def _fail(where: str, what: str) -> ProtocolError:
    return ProtocolError(f"{where}: {what}")


def _int(value: Any, where: str, minimum: int | None = 0) -> int:
    # bool is an int subclass, and True is not a process number
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(where, f"expected an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise _fail(where, f"expected an integer >= {minimum}, got {value}")
    return value


def _opt_int(value: Any, where: str, minimum: int | None = 0) -> int | None:
    return None if value is None else _int(value, where, minimum)


# The largest time or duration a result may carry (some 31,000 years, or a date far past any
# clock): a run's times are added up (RemoteWallClockTime), and two of 1e308 made infinity,
# which the state file then held and could not be read back from.
MAX_RESULT_SECONDS = 1e12


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, f"expected a number, got {type(value).__name__}")
    if not 0 <= value <= MAX_RESULT_SECONDS:  # (NaN too)
        raise _fail(where, f"expected a number from 0 to {MAX_RESULT_SECONDS:g}, got {value}")
    return float(value)


def _opt_number(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _str(value: Any, where: str, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise _fail(where, f"expected a string, got {type(value).__name__}")
    if nonempty and not value:
        raise _fail(where, "must not be empty")
    return value


def _opt_str(value: Any, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, f"expected a boolean, got {type(value).__name__}")
    return value


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise _fail(where, f"expected a list, got {type(value).__name__}")
    return [_str(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a map, got {type(value).__name__}")
    return {_str(k, f"{where} key"): _str(v, f"{where}[{k!r}]") for k, v in value.items()}


def _map(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a map, got {type(value).__name__}")
    return value


def _require(data: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in data:
        raise _fail(where, f"missing field {name!r}")
    return data[name]


# ---------------------------------------------------------------------------------------------
# the task and its result


# slots where the Python has them (3.10+): a 100,000-task master saves a dict per task; the
# agent's 3.9 goes without
_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}


@dataclass(frozen=True, **_SLOTS)
class Task:
    """One job of the cluster: what the agent runs, with the number of this run (`attempt`).

    `input`/`output`/`error` are None for no redirection (condor's /dev/null) and, like
    `transfer_input_files`, as submitted (relative to `initialdir` unless absolute);
    `initialdir` is absolute on the submit machine; `arguments` are split as the job gets them.
    `cluster` is the cluster number `$(Cluster)` expanded to (0: not known). Sequences are kept
    as tuples, whatever they are given as; maps as dicts (one given as a dict is not copied:
    never change a task's maps).

    What the master alone acts on (the agent ignores it): `log`, the job event log's path as
    submitted; `hold`, submitted on hold; `policy`, the job's policy attributes as condor_submit
    writes them into the job ad (`OnExitRemove`, `OnExitHold`, `PeriodicRemove`, `JobMaxRetries`
    ..., values as ClassAd expressions); `output_remaps`, `transfer_output_remaps` without its
    quotes.
    """

    process: int
    executable: str
    initialdir: str
    cluster: int = 0
    attempt: int = 0
    arguments: Sequence[str] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    input: str | None = None
    output: str | None = None
    error: str | None = None
    transfer_input_files: Sequence[str] = ()
    transfer_output_files: Sequence[str] | None = None
    log: str | None = None
    hold: bool = False
    policy: Mapping[str, str] = field(default_factory=dict)
    output_remaps: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalized once, here
        put(self, "arguments", tuple(self.arguments))
        # a dict is kept as given: the parser hands the tasks of a block one shared dict for
        # equal environments and policies (nothing changes a task's maps), which a 100,000-task
        # master notices
        if type(self.environment) is not dict:
            put(self, "environment", dict(self.environment))
        if type(self.policy) is not dict:
            put(self, "policy", dict(self.policy))
        put(self, "transfer_input_files", tuple(self.transfer_input_files))
        if self.transfer_output_files is not None:
            put(self, "transfer_output_files", tuple(self.transfer_output_files))

    @property
    def key(self) -> tuple[int, int]:
        """(process, attempt): which run of which task."""
        return (self.process, self.attempt)

    def with_attempt(self, attempt: int) -> Task:
        """Run number `attempt` of this task: a field-by-field copy (its fields are normalized
        already; dataclasses.replace would run __init__ and __post_init__ again, per task sent)."""
        new = object.__new__(Task)
        put = object.__setattr__  # frozen
        for name in _TASK_FIELDS:
            put(new, name, getattr(self, name))
        put(new, "attempt", attempt)
        return new

    def to_dict(self) -> dict[str, Any]:
        """The map form (msgpack, JSON): lists and dicts, every field (the master's own ones,
        `log` ... `output_remaps`, only when set)."""
        out = {
            "process": self.process,
            "cluster": self.cluster,
            "attempt": self.attempt,
            "executable": self.executable,
            "arguments": list(self.arguments),
            "environment": dict(self.environment),
            "input": self.input,
            "output": self.output,
            "error": self.error,
            "initialdir": self.initialdir,
            "transfer_input_files": list(self.transfer_input_files),
            "transfer_output_files": (
                None if self.transfer_output_files is None else list(self.transfer_output_files)
            ),
        }
        if self.log is not None:
            out["log"] = self.log
        if self.hold:
            out["hold"] = True
        if self.policy:
            out["policy"] = dict(self.policy)
        if self.output_remaps is not None:
            out["output_remaps"] = self.output_remaps
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Task:
        """Validate a task map from the wire, an input file or a submit directive; ProtocolError
        names the bad field. `cluster` and `attempt` may be left out (0), and the master's own
        fields (absent in maps from older llic)."""
        if type(data) is dict and data.keys() <= _PLAIN_TASK_KEYS:
            # the common task (the agent reads one per task): its fields of their plain types
            get = data.get
            process, cluster, attempt = get("process"), get("cluster", 0), get("attempt", 0)
            executable, initialdir = get("executable"), get("initialdir")
            arguments = get("arguments", _NO_ARGUMENTS)
            if (
                type(process) is int
                and process >= 0
                and type(cluster) is int
                and cluster >= 0
                and type(attempt) is int
                and attempt >= 0
                and type(executable) is str
                and executable
                and type(initialdir) is str
                and initialdir.startswith("/")
                and (
                    arguments is _NO_ARGUMENTS
                    or (type(arguments) is list and all(type(a) is str for a in arguments))
                )
            ):
                task = object.__new__(cls)
                put = object.__setattr__  # frozen; the fields as __post_init__ leaves them
                put(task, "process", process)
                put(task, "executable", executable)
                put(task, "initialdir", initialdir)
                put(task, "cluster", cluster)
                put(task, "attempt", attempt)
                put(task, "arguments", tuple(arguments))
                put(task, "environment", {})
                for name in ("input", "output", "error", "transfer_output_files", "log", "output_remaps"):
                    put(task, name, None)
                put(task, "transfer_input_files", ())
                put(task, "hold", False)
                put(task, "policy", {})
                return task
        return cls._checked(data)

    @classmethod
    def _checked(cls, data: Any) -> Task:
        """from_dict field by field: what a map that is not the common kind goes through, and
        what names the field that is wrong."""
        data = _map(data, "task")
        get = data.get
        initialdir = _str(_require(data, "initialdir", "task"), "task.initialdir", nonempty=True)
        if not initialdir.startswith("/"):
            raise _fail("task.initialdir", f"must be absolute, got {initialdir!r}")
        tof = get("transfer_output_files")
        return cls(
            process=_int(_require(data, "process", "task"), "task.process"),
            cluster=_int(get("cluster", 0), "task.cluster"),
            attempt=_int(get("attempt", 0), "task.attempt"),
            executable=_str(_require(data, "executable", "task"), "task.executable", nonempty=True),
            arguments=_str_list(get("arguments", []), "task.arguments"),
            environment=_str_map(get("environment", {}), "task.environment"),
            input=_opt_str(get("input"), "task.input"),
            output=_opt_str(get("output"), "task.output"),
            error=_opt_str(get("error"), "task.error"),
            initialdir=initialdir,
            transfer_input_files=_str_list(get("transfer_input_files", []), "task.transfer_input_files"),
            transfer_output_files=None if tof is None else _str_list(tof, "task.transfer_output_files"),
            log=_opt_str(get("log"), "task.log"),
            hold=_bool(get("hold", False), "task.hold"),
            policy=_str_map(get("policy", {}), "task.policy"),
            output_remaps=_opt_str(get("output_remaps"), "task.output_remaps"),
        )


_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(Task))
# the keys of a task whose other fields hold their defaults (what `Task.from_dict` reads at once)
_NO_ARGUMENTS: tuple[str, ...] = ()  # a task map without `arguments` (told apart from a null)
_PLAIN_TASK_KEYS = frozenset({"process", "cluster", "attempt", "executable", "initialdir", "arguments"})


@dataclass
class TaskResult:
    """How one run of a task ended. `status` ok: it ran, and exactly one of `exit_code`/`signal`
    is set; otherwise `error` says why it did not. `started`/`finished` are the agent's clock."""

    process: int
    attempt: int
    status: str
    exit_code: int | None = None
    signal: int | None = None
    run_time: float = 0.0
    started: float | None = None
    finished: float | None = None
    host: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        """(process, attempt): which run of which task."""
        return (self.process, self.attempt)

    @property
    def ok(self) -> bool:
        """The job ran (whatever its exit code)."""
        return self.status == STATUS_OK

    def kept(self) -> TaskResult:
        """What the master keeps of it: no stdout/stderr tails and no start time (the state file
        stays small), the error cut to ERROR_KEEP characters and the host to HOST_KEEP (both as
        the agent says, any length)."""
        new = object.__new__(TaskResult)  # a plain copy: dataclasses.replace runs __init__
        new.__dict__.update(self.__dict__)
        new.started, new.stdout_tail, new.stderr_tail = None, "", ""
        new.error = None if self.error is None else self.error[:ERROR_KEEP]
        new.host = self.host[:HOST_KEEP]
        return new

    def to_dict(self) -> dict[str, Any]:
        """The map form (msgpack, JSON), every field."""
        return {
            "process": self.process,
            "attempt": self.attempt,
            "status": self.status,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "run_time": float(self.run_time),
            "started": self.started,
            "finished": self.finished,
            "host": self.host,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Any) -> TaskResult:
        """Validate a result map from the wire; ProtocolError names the bad field."""
        if type(data) is dict:  # the common result, every field of its plain type: checked at once
            get = data.get
            process, attempt, status = get("process"), get("attempt"), get("status")
            exit_code, signal = get("exit_code"), get("signal")
            run_time, started, finished = get("run_time", 0.0), get("started"), get("finished")
            host, out_tail, err_tail = get("host", ""), get("stdout_tail", ""), get("stderr_tail", "")
            error = get("error")
            if (
                type(process) is int
                and process >= 0
                and type(attempt) is int
                and attempt >= 0
                and type(status) is str
                and (exit_code is None or type(exit_code) is int)
                and (signal is None or (type(signal) is int and signal >= 1))
                and (status != STATUS_OK or (exit_code is None) != (signal is None))
                and status in STATUSES
                and type(run_time) is float
                and 0.0 <= run_time <= MAX_RESULT_SECONDS
                and (started is None or (type(started) is float and 0.0 <= started <= MAX_RESULT_SECONDS))
                and (finished is None or (type(finished) is float and 0.0 <= finished <= MAX_RESULT_SECONDS))
                and type(host) is str
                and type(out_tail) is str
                and type(err_tail) is str
                and len(out_tail) <= TAIL_SIZE
                and len(err_tail) <= TAIL_SIZE
                and (error is None or type(error) is str)
            ):
                return cls(
                    process, attempt, status, exit_code, signal, run_time, started, finished, host,
                    out_tail, err_tail, error,
                )  # fmt: skip
        return cls._checked(data)

    @classmethod
    def _checked(cls, data: Any) -> TaskResult:
        """from_dict field by field: what a map that is not the common kind goes through, and
        what names the field that is wrong."""
        data = _map(data, "result")
        get = data.get
        status = _str(_require(data, "status", "result"), "result.status")
        if status not in STATUSES:
            raise _fail("result.status", f"unknown status {status!r}")
        result = cls(
            process=_int(_require(data, "process", "result"), "result.process"),
            attempt=_int(_require(data, "attempt", "result"), "result.attempt"),
            status=status,
            exit_code=_opt_int(get("exit_code"), "result.exit_code", minimum=None),
            signal=_opt_int(get("signal"), "result.signal", minimum=1),
            run_time=_number(get("run_time", 0.0), "result.run_time"),
            started=_opt_number(get("started"), "result.started"),
            finished=_opt_number(get("finished"), "result.finished"),
            host=_str(get("host", ""), "result.host"),
            stdout_tail=_str(get("stdout_tail", ""), "result.stdout_tail"),
            stderr_tail=_str(get("stderr_tail", ""), "result.stderr_tail"),
            error=_opt_str(get("error"), "result.error"),
        )
        for name in ("stdout_tail", "stderr_tail"):
            if len(getattr(result, name)) > TAIL_SIZE:
                raise _fail(f"result.{name}", f"longer than {TAIL_SIZE} characters")
        if status == STATUS_OK and (result.exit_code is None) == (result.signal is None):
            raise _fail("result", "status ok needs exactly one of exit_code and signal")
        return result
