"""Resolution: one job's values from the submit commands it sees, as condor_submit's SetIWD,
SetExecutable, SetArguments, SetEnvironment, SetStdin/out/err and SetTransferFiles compute them.

A job sees its block's commands through a JobCommands (the commands, expanded with that job's
queue variables and built-in macros). What a job leaves empty (`input`, `output`, `error`,
`arguments`, `transfer_input_files`, `transfer_output_files`, `executable`, `log`,
`transfer_output_remaps`, each policy attribute) it takes from `base`, the first job of the
submission's cluster (condor_submit's cluster ad), and its environment is merged over that
job's. `initialdir` must be a directory and a transferred
executable must exist (condor_submit refuses the submission otherwise); input files are not
checked (condor_submit 23.9 skips that check).

A new command that changes what a job does is read here, in resolve_task or a helper of its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from llic.submit.arguments import parse_arguments
from llic.submit.classad_values import submit_bool
from llic.submit.environment import import_environment, parse_environment
from llic.submit.errors import ExpandError, SubmitFileError
from llic.submit.macros import Expander, Macro
from llic.submit.policy import job_policy
from llic.submit.values import WHITESPACE, split_list
from llic.task import Task

NULL_FILE = "/dev/null"
T = TypeVar("T")
_INITIALDIR_NAMES = (("initialdir", "Iwd"), ("initial_dir", "job_iwd"))


class JobCommands:
    """The submit commands as one job sees them: values expanded with that job's macros; errors
    name the line that set the command (else the queue statement's line). A queue variable
    named like a command (`queue input in (a, b)`) is that command for the job, as condor's
    submit_param reads the loop's live values first."""

    def __init__(
        self,
        path: str,
        commands: Mapping[str, Macro],
        expander: Expander,
        line: int,
        variables: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self._commands = commands
        self._expander = expander
        self._line = line
        self._variables = variables or {}

    @property
    def expander(self) -> Expander:
        """The expander this job's values are expanded with (its macros and environment)."""
        return self._expander

    def param(self, name: str, alt: str | None = None) -> tuple[str | None, str]:
        """condor's submit_param: (expanded value or None if undefined/empty, the name found)."""
        for key in (name, alt):
            if key is None:
                continue
            low = key.lower()
            if low in self._variables:
                return self._expanded(key, self._variables[low], self._line), key
            m = self._commands.get(low)
            if m is not None:
                return self._expanded(m.name, m.value, m.line), key
        return None, name

    def defined(self, name: str) -> bool:
        """Whether the job sees a value for `name` (a command or a queue variable), empty or not."""
        low = name.lower()
        return low in self._variables or low in self._commands

    def line_of(self, name: str) -> int:
        """The line that set `name` (the queue statement's when a queue variable or nothing did)."""
        m = self._commands.get(name.lower())
        return m.line if m is not None and name.lower() not in self._variables else self._line

    def _expanded(self, name: str, value: str, line: int) -> str | None:
        try:
            return self._expander.expand(value) or None
        except ExpandError as e:
            raise SubmitFileError(self.path, line, f"{name}: {e}") from None

    def fail(self, message: str, *names: str) -> SubmitFileError:
        """An error at the line of the first of names that is set (else the queue statement's)."""
        for name in names:
            if self.defined(name):
                return SubmitFileError(self.path, self.line_of(name), message)
        return SubmitFileError(self.path, self._line, message)

    def sets_initialdir(self) -> bool:
        """Whether the job has an initial directory of its own (`initialdir` or a synonym)."""
        return any(self.param(name, alt)[0] is not None for name, alt in _INITIALDIR_NAMES)


class PathChecks:
    """Each check of a path asked once (a block's jobs often share a directory or an executable),
    and one object for equal values the block's tasks keep (`share`): their paths, environments
    and policies are mostly the same, and a 100,000-task master holds every task."""

    def __init__(self) -> None:
        self._results: dict[tuple[str, Callable[[str], bool]], bool] = {}
        self._shared: dict[object, Any] = {}

    def __call__(self, path: str, check: Callable[[str], bool]) -> bool:
        """check(path), from the first time it was asked."""
        key = (path, check)
        if key not in self._results:
            self._results[key] = check(path)
        return self._results[key]

    def share(self, value: T, key: object = None) -> T:
        """The first value seen equal to this one (compared by `key`, default the value)."""
        return self._shared.setdefault(value if key is None else key, value)


def check_universe(job: JobCommands) -> None:
    """Refuse any universe but vanilla."""
    universe, _ = job.param("universe", "JobUniverse")
    if universe is not None and universe.strip(WHITESPACE).lower() not in ("vanilla", "5"):
        raise job.fail(
            f"universe {universe}: llic runs vanilla universe jobs only", "universe", "JobUniverse"
        )


# condor's getShouldTransferFilesNum (enum_utils.cpp): its table, any case. NULL maps to 0, which
# is neither YES, NO nor IF_NEEDED: files are transferred, and ShouldTransferFiles says "NULL".
_SHOULD_VALUES = {
    "YES": "YES",
    "TRUE": "YES",
    "ALWAYS": "YES",
    "NO": "NO",
    "FALSE": "NO",
    "NEVER": "NO",
    "IF_NEEDED": "IF_NEEDED",
    "AUTO": "IF_NEEDED",
    "NULL": "NULL",
}
# condor's getFileTransferOutputNum. Its table has no end marker, so in 23.9 a value it does not
# hold is looked up in the table that follows it in memory, ShouldTransferFiles's: YES/TRUE read
# as ON_EXIT_OR_EVICT (2), NO/FALSE/NEVER as ON_EXIT (1), IF_NEEDED/AUTO as ON_SUCCESS (3). Seen
# with condor_submit -dry-run 23.9.6; reproduced because it decides which files are accepted.
_WHEN_VALUES = {
    "ON_EXIT_OR_EVICT": "ON_EXIT_OR_EVICT",
    "ALWAYS": "ON_EXIT_OR_EVICT",
    "ON_EXIT": "ON_EXIT",
    "ONEXIT": "ON_EXIT",
    "NONE": "NEVER",
    "NULL": "NEVER",
    "ON_SUCCESS": "ON_SUCCESS",
    "ONSUCCESS": "ON_SUCCESS",
    "YES": "ON_EXIT_OR_EVICT",
    "TRUE": "ON_EXIT_OR_EVICT",
    "NO": "ON_EXIT",
    "FALSE": "ON_EXIT",
    "NEVER": "ON_EXIT",
    "IF_NEEDED": "ON_SUCCESS",
    "AUTO": "ON_SUCCESS",
}


def when_value(when: str) -> str | None:
    """What condor_submit 23.9 reads a when_to_transfer_output value as (None: invalid)."""
    return _WHEN_VALUES.get(when.upper())


def should_transfer(job: JobCommands) -> tuple[str, str]:
    """(should_transfer_files, when_to_transfer_output) after condor's checks and defaults
    (submit_utils.cpp SetTransferFiles): should is YES, NO, IF_NEEDED or NULL; when is ON_EXIT,
    ON_EXIT_OR_EVICT, ON_SUCCESS or NEVER (condor's FTO_NONE)."""
    should, _ = job.param("ShouldTransferFiles", "should_transfer_files")
    when, _ = job.param("WhenToTransferOutput", "when_to_transfer_output")
    default_should = should is None
    if should is None:
        should_v = "IF_NEEDED"
    else:
        got = _SHOULD_VALUES.get(should.upper())
        if got is None:
            raise job.fail(
                f"invalid value ({should}) for ShouldTransferFiles.  Please either specify YES, NO, "
                "or IF_NEEDED and try again.",
                "ShouldTransferFiles",
                "should_transfer_files",
            )
        should_v = got
    when_text = "ON_EXIT" if when is None else when
    if when is None:
        when_v = "ON_EXIT"
    else:
        got = _WHEN_VALUES.get(when.upper())
        if got is None:
            raise job.fail(
                f"invalid value ({when}) for WhenToTransferOutput.  Please either specify ON_EXIT, "
                "or ON_EXIT_OR_EVICT and try again.",
                "WhenToTransferOutput",
                "when_to_transfer_output",
            )
        when_v = got
    if not default_should and when is None and should_v == "NO":
        when_v, when_text = "NEVER", "NEVER"
    if (should_v == "NO") != (when_v == "NEVER"):
        raise job.fail(
            f"WhenToTransferOutput specified as {when_text} yet ShouldTransferFiles defined as "
            f"{should or should_v}.  Please remove this contradiction from your submit file and try again.",
            "WhenToTransferOutput",
            "when_to_transfer_output",
        )
    if default_should and when_v == "ON_EXIT_OR_EVICT":
        should_v = "YES"
    if when_v == "ON_EXIT_OR_EVICT" and should_v == "IF_NEEDED":
        raise job.fail(
            '"when_to_transfer_output = ON_EXIT_OR_EVICT" and "should_transfer_files = IF_NEEDED" '
            "are incompatible",
            "WhenToTransferOutput",
            "when_to_transfer_output",
        )
    return should_v, when_v


def resolve_task(
    job: JobCommands,
    *,
    process: int,
    cluster: int,
    base: Task | None,
    cwd: Path,
    environ: Mapping[str, str],
    checks: PathChecks,
) -> Task:
    """One job's Task; `cwd` is condor_submit's working directory, `environ` its environment."""
    cwd_text = str(cwd)
    initialdir = checks.share(_initialdir(job, cwd_text, checks))
    job.expander.cwd = initialdir  # condor's SetIWD: `$Ff()` in every later command is relative to it
    executable = checks.share(_executable(job, cwd_text, base, checks))
    arguments = _arguments(job, base)
    environment = _environment(job, base, environ)
    environment = checks.share(environment, ("env", *environment.items()))
    policy = job_policy(job)
    if base is not None and base.policy:  # the cluster ad's attributes a job does not set stay
        policy = {**base.policy, **policy}
    policy = checks.share(policy, ("policy", *policy.items()))
    stdin, stdout, stderr = _streams(job, base)
    transfer_input, transfer_output = _transfer_files(job, base)
    log, _ = job.param("log", "UserLog")
    hold, _ = job.param("hold")
    remaps, _ = job.param("transfer_output_remaps", "TransferOutputRemaps")
    if base is not None:  # as in the cluster ad, when the job sets none of its own
        log = base.log if log is None else log
        remaps = base.output_remaps if remaps is None else remaps
    return Task(
        process=process,
        cluster=cluster,
        executable=executable,
        arguments=arguments,
        environment=environment,
        input=stdin,
        output=stdout,
        error=stderr,
        initialdir=initialdir,
        transfer_input_files=transfer_input,
        transfer_output_files=transfer_output,
        log=log,
        hold=hold is not None and submit_bool(hold) is True,
        policy=policy,
        output_remaps=None if remaps is None else remaps.strip('"') or None,
    )


def _initialdir(job: JobCommands, cwd: str, checks: PathChecks) -> str:
    """SetIWD: absolute, relative to the working directory; it must be a directory."""
    iwd_value = None
    for name, alt in _INITIALDIR_NAMES:
        iwd_value, _ = job.param(name, alt)
        if iwd_value is not None:
            break
    if iwd_value is None:
        iwd = cwd
    elif iwd_value.startswith("/"):
        iwd = iwd_value
    else:
        iwd = cwd.rstrip("/") + "/" + iwd_value.lstrip("/")
    iwd = re.sub("//+", "/", iwd)
    if not checks(iwd, os.path.isdir):
        raise job.fail(f"No such directory: {iwd}", "initialdir", "Iwd", "initial_dir", "job_iwd")
    return iwd


def _exists(path: str) -> bool:
    return "$$(" in path or os.path.lexists(path)


def _executable(job: JobCommands, cwd: str, base: Task | None, checks: PathChecks) -> str:
    """SetExecutable: absolute (relative to the working directory) and existing, unless
    `transfer_executable = false`."""
    exe, _ = job.param("executable", "Cmd")
    if exe is None:
        if base is None:
            raise job.fail("No 'executable' parameter was provided")
        return base.executable
    xfer, _ = job.param("transfer_executable", "TransferExecutable")
    if xfer is not None and xfer[:1] in ("F", "f"):
        return exe
    executable = re.sub("//+", "/", "/" + (exe if exe.startswith("/") else f"{cwd}/{exe}"))
    if not checks(executable, _exists):
        raise job.fail(f"Executable file {exe} does not exist", "executable", "Cmd")
    return executable


def _old_and_new_syntax(job: JobCommands, what: str, alt: str) -> tuple[str | None, str, str | None]:
    """(`what` or `alt`, the name found, `what2`): both only with `allow_what_v1 = true`."""
    old, old_name = job.param(what, alt)
    new, _ = job.param(f"{what}2")
    if old is not None and new is not None:
        allow, _ = job.param(f"allow_{what}_v1")
        if not (allow and submit_bool(allow)):
            raise job.fail(
                f"If you wish to specify both '{what}' and '{what}2' for maximal compatibility "
                f"with different versions of Condor, then you must also specify allow_{what}_v1=true.",
                f"{what}2",
            )
    return old, old_name, new


def _arguments(job: JobCommands, base: Task | None) -> tuple[str, ...]:
    """SetArguments: `arguments2` (new syntax) before `arguments` (either syntax)."""
    args1, name1, args2 = _old_and_new_syntax(job, "arguments", "Args")
    try:
        if args2 is not None:
            return tuple(parse_arguments(args2, v2_only=True))
        if args1 is not None:
            return tuple(parse_arguments(args1))
    except ValueError as e:
        raise job.fail(f"{name1 if args2 is None else 'arguments2'}: {e}", name1, "arguments2") from None
    return base.arguments if base is not None else ()


def _environment(job: JobCommands, base: Task | None, environ: Mapping[str, str]) -> dict[str, str]:
    """SetEnvironment: `environment2` before `environment`, merged over the cluster ad's; then
    `getenv`."""
    env1, name1, env2 = _old_and_new_syntax(job, "environment", "env")
    if base is not None and env1 is None and env2 is None:
        return dict(base.environment)
    env: dict[str, str] = dict(base.environment) if base is not None else {}
    try:
        if env2 is not None:
            parse_environment(env2, env, v2_only=True)
        elif env1 is not None:
            parse_environment(env1, env)
    except ValueError as e:
        raise job.fail(f"{name1 if env2 is None else 'environment2'}: {e}", name1, "environment2") from None
    getenv, _ = job.param("getenv", "get_env")
    if getenv is not None:
        flag = submit_bool(getenv)
        old_syntax = env2 is None and env1 is not None
        if flag is None:
            import_environment(env, environ, old_syntax=old_syntax, names=getenv)
        elif flag:
            import_environment(env, environ, old_syntax=old_syntax)
    return env


def _streams(job: JobCommands, base: Task | None) -> tuple[str | None, str | None, str | None]:
    """SetStdin/SetStdout/SetStderr: (input, output, error), None for /dev/null."""
    streams: list[str | None] = []
    for key, alt, attr in (
        ("input", "stdin", "input"),
        ("output", "stdout", "output"),
        ("error", "stderr", "error"),
    ):
        value, _ = job.param(key, alt)
        if value is None:
            streams.append(getattr(base, attr) if base is not None else None)
        else:
            streams.append(None if value == NULL_FILE else value)
    return streams[0], streams[1], streams[2]


def _transfer_files(job: JobCommands, base: Task | None) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """SetTransferFiles: (transfer_input_files, transfer_output_files); none with
    `should_transfer_files = NO`."""
    should, _ = should_transfer(job)
    inputs = _file_list(job, "transfer_input_files", "TransferInputFiles")
    outputs = _file_list(job, "transfer_output_files", "TransferOutputFiles")
    if should == "NO" and (inputs or outputs is not None):
        which = "transfer_input_files" if inputs else "transfer_output_files"
        raise job.fail(f"{which} names files to transfer, but should_transfer_files is NO", which)
    if inputs:
        transfer_input = tuple(inputs)
    else:
        transfer_input = base.transfer_input_files if base is not None else ()
    if outputs is None:
        transfer_output = base.transfer_output_files if base is not None else None
    else:
        transfer_output = tuple(outputs)
    return transfer_input, transfer_output


def _file_list(job: JobCommands, name: str, alt: str) -> list[str] | None:
    """A comma-separated file list; None when not given, [] for `""`."""
    value, _ = job.param(name, alt)
    if value is None:
        return None
    if value == '""':
        return [] if name == "transfer_output_files" else None
    return split_list(value, ",")
