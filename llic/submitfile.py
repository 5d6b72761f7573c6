"""HTCondor submit files, resolved into tasks the way `condor_submit` (23.9) resolves them.

Why this exists: `master_submitter` takes the user's own submit file and runs its jobs as llic
tasks, so every task must get exactly the executable, arguments, environment, files and
directory that `condor_submit` would have given the job. htcondor2's `Submit` keeps only the first
queue statement and cannot list per-job values, and the bindings may only be imported by
`common/condor/worker.py`, so this module reads submit files itself (standard library only).

It follows HTCondor's own code (condor_utils/config.cpp, submit_utils.cpp, condor_submit.V6/
submit.cpp, condor_arglist.cpp, env.cpp at v23.9.6) and is checked against the real
`condor_submit -dry-run` by tests/llic/test_dryrun_condor.py. What it reads:

- lines: `#` comments, blank lines, continuation with a trailing `\\` (a `#` line inside a
  continuation counts as blank, a `#` line never continues), leading/trailing white space trimmed;
- `name = value` with case-insensitive names (macro references in a name are expanded),
  `+Attr = value` / `MY.Attr = value` (stored as `MY.Attr`), `-Attr =`;
- macros, expanded lazily when a value is used (as condor does): `$(X)`, `$(X:default)` (the
  default when X is undefined or empty), `$(DOLLAR)`, `$$(X)` left for HTCondor, `$ENV(X)`
  (`UNDEFINED` when unset, `$ENV(X:default)`), `$Fpdnxbqa(X)`, `$BASENAME(X)`, `$DIRNAME(X)`,
  `$SUBSTR(X,start[,len])`, `$CHOICE(i,list)`, `$INT(X[,fmt])`; a self reference (`X = $(X) more`)
  is expanded when the line is read;
- the built-in macros `$(Process)`/`$(ProcId)`, `$(Cluster)`/`$(ClusterId)`, `$(JobId)`,
  `$(Item)` and the other queue variables, `$(ItemIndex)`/`$(Row)`, `$(Step)`, `$(Node)`,
  `$(SUBMIT_FILE)`, `$(SUBMIT_TIME)`, `$(Year)`/`$(Month)`/`$(Day)`, `$(ARCH)`, `$(OPSYS)`,
  `$(IsLinux)`, `$(IsWindows)`;
- every queue form: `queue`, `queue N`, `queue [N] [VARS] in|from|matching [files|dirs|any]
  [slice] (items)`, items on the line, in a `( ... )` block over several lines, or `from FILE`;
  N is an integer expression; several variables per item split as condor_submit does (at the
  first `,`, space or tab; the last variable takes the rest; a variable an item has no field for
  keeps its previous value); `matching` globs relative to the working directory (directories
  get a trailing `/`, duplicates across patterns are dropped);
- `executable` (absolute: relative to the working directory unless `transfer_executable = false`),
  `arguments` (new syntax in double quotes with `''`/`""` escapes and single-quote grouping, old
  syntax with `\\"`), `arguments2`, `environment`/`env` (new syntax, or old `;`-separated with an
  optional leading delimiter), `environment2`, `getenv = true`, `input`/`output`/`error` (and
  `stdin`/`stdout`/`stderr`), `initialdir` (relative to the working directory),
  `transfer_input_files`, `transfer_output_files`, `should_transfer_files`,
  `when_to_transfer_output`, `universe` (vanilla only).

The working directory (`cwd`) plays the part of condor_submit's current directory: `initialdir`,
a relative `executable`, `queue ... from FILE` and `queue ... matching` are relative to it (not
to the submit file's directory, as condor_submit does too). `master_submitter` passes its own
current directory.

condor_submit behaviours reproduced on purpose, because they change what a job gets:
- several queue statements form one cluster and process numbers continue, until the raw
  `executable` changes: then a new cluster starts and process numbers restart at 0;
- a job whose `input`/`output`/`error`/`arguments`/`transfer_input_files`/
  `transfer_output_files`/`executable` expands to nothing takes the value of the first job of
  the submission (its "cluster ad"; each new cluster's first job updates it), and a job's
  `environment` is merged over that first job's environment;
- after a queue statement with variables, those variables are `<Queue_item>` for later ones;
- `initialdir` must be a directory and a transferred executable must exist (condor_submit refuses
  the submission otherwise); input files are not checked (condor_submit 23.9 skips that check).

Rejected with a SubmitFileError (condor_submit knows them, llic does not need them):
`include`, `use`, `if`/`elif`/`else`/`endif`, `error :`/`warning :`, `name @= TAG` multi-line
values, `queue ... from CMD |` and `from -`, `$RANDOM_CHOICE()`, `$RANDOM_INTEGER()`, `$REAL()`,
`$STRING()`, `$EVAL()`, `$Ff(...)` (full path), `$(OPSYSVER)` and the other macros that come
from the submit machine's HTCondor configuration, `getenv` with a list of names, universes other
than vanilla, environment entries without `=`, negative slice steps. A value condor would
compute with ClassAd expressions (queue counts, `$INT()`) is limited to integer arithmetic.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llic.submit.arguments import parse_arguments, split_args  # noqa: F401 (tests import it from here)
from llic.submit.environment import (  # noqa: F401 (tests import the parse_v*_environment from here)
    import_environment,
    parse_environment,
    parse_v1_environment,
    parse_v2_environment,
)
from llic.submit.errors import ExpandError, SubmitFileError
from llic.submit.lines import LogicalLines
from llic.submit.macros import (
    Expander,
    Macro,
    is_identifier_char,
    job_builtins,
    macro_lookup,
    shared_builtins,
)
from llic.submit.queue import (
    QUEUE_ITEM_UNUSED,
    Foreach,
    QueueArgs,
    QueueItemsError,
    assign_item,
    load_items,
    parse_queue_args,
)
from llic.submit.task import TaskSpec
from llic.submit.values import WHITESPACE, parse_bool, split_list

__all__ = [
    "Mode",
    "QueueBlock",
    "SubmitFile",
    "SubmitFileError",
    "TaskSpec",
    "parse_submit_file",
    "parse_submit_text",
]

NULL_FILE = "/dev/null"
DIRECTIVE = "#llic: "  # first line of QueueBlock.submit_text(): what the text alone cannot say
NOTHING = "$(_llic_nothing_)"  # an undefined macro: expands to nothing


class Mode(enum.StrEnum):
    """How an agent gets at a task's files (seed §3.3): in place on a shared file system, or sent
    by the master; `_INITIALDIR` when the submit file sets an initial directory (then no input
    file is common to all tasks)."""

    NFS = "NFS"
    NFS_INITIALDIR = "NFS_INITIALDIR"
    TRANSFER = "TRANSFER"
    TRANSFER_INITIALDIR = "TRANSFER_INITIALDIR"


# ---------------------------------------------------------------------------------------------
# the parsed file


# submit commands an agent job carries over from the user's job (QueueBlock.agent_attributes)
_AGENT_KEYS = {
    "requirements",
    "rank",
    "accounting_group",
    "accounting_group_user",
    "concurrency_limits",
    "priority",
    "nice_user",
    "job_machine_attrs",
    "universe",
}


@dataclass
class _Context:
    """What a parse carries into every queue block."""

    where: str  # the file name used in messages
    submit_file: str  # $(SUBMIT_FILE)
    cwd: Path
    environ: Mapping[str, str]
    submit_time: int


class QueueBlock:
    """One queue statement and the submit commands in effect at it (later statements inherit
    earlier commands, as in condor_submit): one llic master."""

    def __init__(
        self,
        *,
        ctx: _Context,
        index: int,
        line: int,
        macros: dict[str, Macro],
        qargs: QueueArgs,
        queue_text: str,
        first_process: int,
        cluster_offset: int,
        starts_cluster: bool,
        base_blocks: tuple[QueueBlock, ...],
        fixed_base: TaskSpec | None = None,
    ) -> None:
        self._ctx = ctx
        self.index = index
        self.line = line
        self._macros = macros
        self._qargs = qargs
        self.queue_text = queue_text
        self.first_process = first_process
        self.cluster_offset = cluster_offset
        self.starts_cluster = starts_cluster
        self._base_blocks = base_blocks
        self._fixed_base = fixed_base
        self._tasks: dict[int, list[TaskSpec]] = {}
        self._checks: dict[tuple[str, Callable[[str], bool]], bool] = {}
        self._items = qargs.selected_items()

    # -- what the block is

    @property
    def path(self) -> str:
        return self._ctx.where

    @property
    def cwd(self) -> Path:
        return self._ctx.cwd

    @property
    def count(self) -> int:
        """Jobs per item (the N of `queue N ...`)."""
        return self._qargs.count

    @property
    def variables(self) -> list[str]:
        return list(self._qargs.variables)

    @property
    def items(self) -> list[str | None]:
        """The selected items (None for a `queue N` without items)."""
        return [it for _, it in self._items]

    @property
    def num_tasks(self) -> int:
        return self._qargs.count * len(self._items)

    def commands(self) -> dict[str, str]:
        """The raw submit commands in effect (names as written, values unexpanded)."""
        return {m.name: m.value for m in self._macros.values()}

    def __repr__(self) -> str:
        return f"QueueBlock({self.path}:{self.line}: queue {self.queue_text!r}, {self.num_tasks} tasks)"

    # -- macro lookup

    @functools.cached_property
    def _shared_builtins(self) -> dict[str, str]:
        return shared_builtins(self._ctx.submit_file, self._ctx.submit_time)

    def _iter_contexts(self, cluster: int, limit: int | None = None) -> Iterator[tuple[int, Expander]]:
        """(process, expander) for every job of the block, in order."""
        names = [v.lower() for v in self._qargs.variables]
        values = dict.fromkeys(names, "")
        process = self.first_process
        made = 0
        for row, item in self._items:
            if item is not None:
                assign_item(values, names, item)
            for step in range(self._qargs.count):
                if limit is not None and made >= limit:
                    return
                live = {"cluster": str(cluster), "process": str(process), **values}
                lookup = macro_lookup(
                    self._macros,
                    live,
                    job_builtins(cluster, process, row, step),
                    self._shared_builtins,
                    refuse_config=True,
                )
                yield process, Expander(lookup, self._ctx.environ)
                process += 1
                made += 1

    # -- resolution

    def _param(self, ex: Expander, name: str, alt: str | None = None) -> tuple[str | None, str]:
        """condor's submit_param: (expanded value or None if undefined/empty, the name found)."""
        m = self._macros.get(name.lower())
        used = name
        if m is None and alt is not None:
            m = self._macros.get(alt.lower())
            used = alt
        if m is None:
            return None, name
        try:
            value = ex.expand(m.value)
        except ExpandError as e:
            raise SubmitFileError(self.path, m.line, f"{m.name}: {e}") from None
        return (value or None), used

    def _line_of(self, *names: str) -> int:
        for name in names:
            m = self._macros.get(name.lower())
            if m is not None:
                return m.line
        return self.line

    def _fail(self, message: str, *names: str) -> SubmitFileError:
        return SubmitFileError(self.path, self._line_of(*names), message)

    @staticmethod
    def _exists(path: str) -> bool:
        return "$$(" in path or os.path.lexists(path)

    def _checked(self, path: str, check: Callable[[str], bool]) -> bool:
        """check(path), asked once per path (jobs often share a directory or an executable)."""
        key = (path, check)
        if key not in self._checks:
            self._checks[key] = check(path)
        return self._checks[key]

    def _compute_base(self, cluster: int) -> TaskSpec | None:
        """The cluster ad's values this block's jobs fall back on (see the module docstring)."""
        if self._fixed_base is not None:
            return self._fixed_base
        base: TaskSpec | None = None
        for src in self._base_blocks:
            src_cluster = cluster - (self.cluster_offset - src.cluster_offset)
            _, ex = next(src._iter_contexts(src_cluster, limit=1))
            base = src._resolve(ex, src.first_process, src_cluster, base)
        return base

    def tasks(self, cluster: int) -> list[TaskSpec]:
        """Every job of this queue statement, with `$(Cluster)` = cluster, in process order."""
        if cluster not in self._tasks:
            self._check_universe()
            base = self._compute_base(cluster)
            out: list[TaskSpec] = []
            for process, ex in self._iter_contexts(cluster):
                task = self._resolve(ex, process, cluster, base)
                if base is None:
                    base = task
                out.append(task)
            self._tasks[cluster] = out
        return list(self._tasks[cluster])

    def _check_universe(self) -> None:
        first = next(self._iter_contexts(1 + self.cluster_offset, limit=1), None)
        if first is None:
            return
        universe, _ = self._param(first[1], "universe", "JobUniverse")
        if universe is not None and universe.strip(WHITESPACE).lower() not in ("vanilla", "5"):
            raise self._fail(
                f"universe {universe}: llic runs vanilla universe jobs only", "universe", "JobUniverse"
            )

    def _should_transfer(self, ex: Expander) -> tuple[str, str]:
        """(should_transfer_files, when_to_transfer_output) after condor's checks and defaults."""
        should, _ = self._param(ex, "ShouldTransferFiles", "should_transfer_files")
        when, _ = self._param(ex, "WhenToTransferOutput", "when_to_transfer_output")
        default_should = should is None
        should_v = "IF_NEEDED" if should is None else should.upper()
        if should_v not in ("YES", "NO", "IF_NEEDED"):
            raise self._fail(
                f"invalid value ({should}) for should_transfer_files: specify YES, NO or IF_NEEDED",
                "ShouldTransferFiles",
                "should_transfer_files",
            )
        when_v = "ON_EXIT" if when is None else when.upper()
        if when_v not in ("ON_EXIT", "ON_EXIT_OR_EVICT", "NEVER"):
            raise self._fail(
                f"invalid value ({when}) for WhenToTransferOutput.  Please either specify ON_EXIT, "
                "or ON_EXIT_OR_EVICT",
                "WhenToTransferOutput",
                "when_to_transfer_output",
            )
        if not default_should and when is None and should_v == "NO":
            when_v = "NEVER"
        if (should_v == "NO") != (when_v == "NEVER"):
            raise self._fail(
                f"WhenToTransferOutput specified as {when_v} yet ShouldTransferFiles defined as {should_v}",
                "WhenToTransferOutput",
                "when_to_transfer_output",
            )
        if default_should and when_v == "ON_EXIT_OR_EVICT":
            should_v = "YES"
        if when_v == "ON_EXIT_OR_EVICT" and should_v == "IF_NEEDED":
            raise self._fail(
                '"when_to_transfer_output = ON_EXIT_OR_EVICT" and "should_transfer_files = IF_NEEDED" '
                "are incompatible",
                "WhenToTransferOutput",
                "when_to_transfer_output",
            )
        return should_v, when_v

    def _resolve(self, ex: Expander, process: int, cluster: int, base: TaskSpec | None) -> TaskSpec:
        """One job's TaskSpec, following condor's SetIWD, SetExecutable, SetArguments, SetEnvironment,
        SetStdin/out/err and SetTransferFiles."""
        # initialdir
        iwd_value, _ = self._param(ex, "initialdir", "Iwd")
        if iwd_value is None:
            iwd_value, _ = self._param(ex, "initial_dir", "job_iwd")
        cwd = str(self._ctx.cwd)
        if iwd_value is None:
            iwd = cwd
        elif iwd_value.startswith("/"):
            iwd = iwd_value
        else:
            iwd = cwd.rstrip("/") + "/" + iwd_value.lstrip("/")
        iwd = re.sub("//+", "/", iwd)
        if not self._checked(iwd, os.path.isdir):
            raise self._fail(f"No such directory: {iwd}", "initialdir", "Iwd", "initial_dir", "job_iwd")

        # executable
        exe, _ = self._param(ex, "executable", "Cmd")
        if exe is None:
            if base is None:
                raise self._fail("No 'executable' parameter was provided")
            executable = base.executable
        else:
            xfer, _ = self._param(ex, "transfer_executable", "TransferExecutable")
            if xfer is not None and xfer[:1] in ("F", "f"):
                executable = exe
            else:
                executable = re.sub("//+", "/", "/" + (exe if exe.startswith("/") else f"{cwd}/{exe}"))
                if not self._checked(executable, self._exists):
                    raise self._fail(f"Executable file {exe} does not exist", "executable", "Cmd")

        # arguments
        args1, name1 = self._param(ex, "arguments", "Args")
        args2, _ = self._param(ex, "arguments2")
        if args1 is not None and args2 is not None:
            allow, _ = self._param(ex, "allow_arguments_v1")
            if not (allow and parse_bool(allow)):
                raise self._fail(
                    "If you wish to specify both 'arguments' and 'arguments2' for maximal compatibility "
                    "with different versions of Condor, then you must also specify allow_arguments_v1=true.",
                    "arguments2",
                )
        try:
            if args2 is not None:
                arguments = tuple(parse_arguments(args2, v2_only=True))
            elif args1 is not None:
                arguments = tuple(parse_arguments(args1))
            else:
                arguments = base.arguments if base is not None else ()
        except ValueError as e:
            raise self._fail(
                f"{name1 if args2 is None else 'arguments2'}: {e}", name1, "arguments2"
            ) from None

        environment = self._environment(ex, base)

        # input, output, error
        streams: list[str | None] = []
        for key, alt, attr in (
            ("input", "stdin", "input"),
            ("output", "stdout", "output"),
            ("error", "stderr", "error"),
        ):
            value, _ = self._param(ex, key, alt)
            if value is None:
                streams.append(getattr(base, attr) if base is not None else None)
            else:
                streams.append(None if value == NULL_FILE else value)
        stdin = streams[0]

        # transfer files
        should, _ = self._should_transfer(ex)
        inputs = self._file_list(ex, "transfer_input_files", "TransferInputFiles")
        outputs = self._file_list(ex, "transfer_output_files", "TransferOutputFiles")
        if should == "NO" and (inputs or outputs is not None):
            which = "transfer_input_files" if inputs else "transfer_output_files"
            raise self._fail(
                f"{which} names files to transfer, but should_transfer_files is NO",
                which,
            )
        if inputs:
            transfer_input = tuple(inputs)
        else:
            transfer_input = base.transfer_input_files if base is not None else ()
        if outputs is None:
            transfer_output = base.transfer_output_files if base is not None else None
        else:
            transfer_output = tuple(outputs)

        return TaskSpec(
            process=process,
            cluster=cluster,
            executable=executable,
            arguments=arguments,
            environment=environment,
            input=stdin,
            output=streams[1],
            error=streams[2],
            initialdir=iwd,
            transfer_input_files=transfer_input,
            transfer_output_files=transfer_output,
        )

    def _file_list(self, ex: Expander, name: str, alt: str) -> list[str] | None:
        """A comma-separated file list; None when not given, [] for `""`."""
        value, _ = self._param(ex, name, alt)
        if value is None:
            return None
        if value == '""':
            return [] if name == "transfer_output_files" else None
        return split_list(value, ",")

    def _environment(self, ex: Expander, base: TaskSpec | None) -> dict[str, str]:
        env1, name1 = self._param(ex, "environment", "env")
        env2, _ = self._param(ex, "environment2")
        if env1 is not None and env2 is not None:
            allow, _ = self._param(ex, "allow_environment_v1")
            if not (allow and parse_bool(allow)):
                raise self._fail(
                    "If you wish to specify both 'environment' and 'environment2' for maximal compatibility "
                    "with different versions of Condor, then you must also specify "
                    "allow_environment_v1=true.",
                    "environment2",
                )
        if base is not None and env1 is None and env2 is None:
            return dict(base.environment)
        env: dict[str, str] = dict(base.environment) if base is not None else {}
        try:
            if env2 is not None:
                parse_environment(env2, env, v2_only=True)
            elif env1 is not None:
                parse_environment(env1, env)
        except ValueError as e:
            raise self._fail(
                f"{name1 if env2 is None else 'environment2'}: {e}", name1, "environment2"
            ) from None
        getenv, _ = self._param(ex, "getenv", "get_env")
        if getenv is not None:
            flag = parse_bool(getenv)
            if flag is None:
                raise self._fail(
                    "getenv with a list of variables is not supported by llic (use true or false)", "getenv"
                )
            if flag:
                import_environment(env, self._ctx.environ, old_syntax=env2 is None and env1 is not None)
        return env

    # -- what llic needs beyond the tasks

    @property
    def mode(self) -> Mode:
        """NFS when should_transfer_files is NO, else TRANSFER (condor's default is IF_NEEDED);
        `_INITIALDIR` when an initial directory is set."""
        first = next(self._iter_contexts(1 + self.cluster_offset, limit=1), None)
        assert first is not None
        ex = first[1]
        should, _ = self._should_transfer(ex)
        initialdir = any(
            self._param(ex, a, b)[0] is not None
            for a, b in (("initialdir", "Iwd"), ("initial_dir", "job_iwd"))
        )
        if should == "NO":
            return Mode.NFS_INITIALDIR if initialdir else Mode.NFS
        return Mode.TRANSFER_INITIALDIR if initialdir else Mode.TRANSFER

    def agent_attributes(self) -> dict[str, str]:
        """The commands an agent job inherits from the user's jobs: requirements, rank, request_*,
        +Attr/MY.Attr, accounting and priority settings (expanded; they must be the same for every
        task, since one agent runs many of them)."""
        keys = [
            m
            for low, m in self._macros.items()
            if low in _AGENT_KEYS or low.startswith("request_") or low.startswith("my.")
        ]
        out: dict[str, str] = {}
        first: dict[str, str | None] = {}
        for n, (_, ex) in enumerate(self._iter_contexts(1 + self.cluster_offset)):
            for m in keys:
                value, _ = self._param(ex, m.name)
                if n == 0:
                    first[m.name] = value
                    if value is not None:
                        out[m.name] = value
                elif value != first[m.name]:
                    raise SubmitFileError(
                        self.path,
                        m.line,
                        f"{m.name} differs between the jobs of this queue statement; "
                        "an llic agent runs them all, so it must be the same",
                    )
        return out

    def common_input_files(self, cluster: int) -> list[str]:
        """Input files (transfer_input_files and the input file) that every task of the block names
        identically: sent to an agent once (seed §3.3). Empty when an initial directory is set."""
        if self.mode in (Mode.NFS_INITIALDIR, Mode.TRANSFER_INITIALDIR):
            return []
        tasks = self.tasks(cluster)
        common = [f for f in _input_files(tasks[0])]
        for task in tasks[1:]:
            names = set(_input_files(task))
            common = [f for f in common if f in names]
        return common

    def private_input_files(self, task: TaskSpec) -> list[str]:
        """The task's input files that are not common ones: sent with the task."""
        common = set(self.common_input_files(task.cluster))
        return [f for f in _input_files(task) if f not in common]

    # -- the master's copy

    def submit_text(self) -> str:
        """A self-contained submit description of this block: its commands and one queue statement
        with the items written out. Its first line, a `#llic:` comment, carries what the text alone
        cannot (working directory, first process number, cluster position, the environment it
        reads, and the values condor_submit's cluster ad gives jobs that leave a command empty);
        `parse_submit_text` on it yields this block's tasks again."""
        base = self._compute_base(1 + self.cluster_offset)
        uses_env = any("$ENV(" in m.value for m in self._macros.values()) or any(
            "$ENV(" in (it or "") for _, it in self._items
        )
        getenv = self._macros.get("getenv") or self._macros.get("get_env")
        if getenv is not None:
            environ = dict(self._ctx.environ)
        elif uses_env:
            names = set()
            for text in [m.value for m in self._macros.values()] + [it or "" for _, it in self._items]:
                names.update(re.findall(r"\$ENV\(([A-Za-z0-9_./]+)", text))
            environ = {k: v for k, v in self._ctx.environ.items() if k in names}
        else:
            environ = {}
        directive = {
            "cwd": str(self._ctx.cwd),
            "submit_file": self._ctx.submit_file,
            "submit_time": self._ctx.submit_time,
            "first_process": self.first_process,
            "cluster_offset": self.cluster_offset,
            "starts_cluster": self.starts_cluster,
            "base": None if base is None else base.to_dict(),
            "environ": environ,
        }
        lines = [DIRECTIVE + json.dumps(directive, sort_keys=True)]
        for low, m in self._macros.items():
            if low in ("cluster", "process"):
                continue
            value = m.value
            if value != value.strip(WHITESPACE):  # blanks a line would lose: keep them behind an empty macro
                value = f"{NOTHING}{value}{NOTHING}"
            lines.append(f"{m.name} = {value}")
        qa = self._qargs
        if qa.mode is Foreach.NOT:
            lines.append(f"queue {qa.count}")
        else:
            lines.append(
                f"queue {qa.count} {','.join(qa.variables)} from {qa.slice.text} (".replace("  ", " ")
            )
            if all(_inline_item(item) for item in qa.items):
                lines.extend(qa.items)
            else:  # a line a submit file cannot hold as an item (e.g. "#..." read from a file)
                directive["items"] = list(qa.items)
                lines[0] = DIRECTIVE + json.dumps(directive, sort_keys=True)
            lines.append(")")
        return "\n".join(lines) + "\n"


def _inline_item(item: str) -> bool:
    """Whether an item reads back the same as a line of an inline `from ( ... )` list."""
    return not item.startswith(("#", ")")) and not item.endswith("\\") and item == item.strip(WHITESPACE)


def _input_files(task: TaskSpec) -> list[str]:
    files = list(task.transfer_input_files)
    if task.input is not None and task.input not in files:
        files.append(task.input)
    return files


@dataclass
class SubmitFile:
    """A parsed submit file: one QueueBlock per queue statement that makes jobs."""

    path: str
    cwd: Path
    blocks: list[QueueBlock]
    warnings: list[str] = field(default_factory=list)

    def tasks(self, cluster: int = 1) -> list[TaskSpec]:
        """Every job in process order, numbered as condor_submit -dry-run does (first cluster =
        cluster, the next one, after an executable change, cluster + 1)."""
        out: list[TaskSpec] = []
        for block in self.blocks:
            out.extend(block.tasks(cluster + block.cluster_offset))
        return out


# ---------------------------------------------------------------------------------------------
# the parser (config.cpp: Parse_macros with the submit syntax; submit.cpp: queue handling)


class _Parser:
    def __init__(
        self,
        text: str,
        ctx: _Context,
        *,
        first_process: int,
        cluster_offset: int,
        base: TaskSpec | None,
        items: list[str] | None = None,
        resume: bool | None = None,
    ) -> None:
        self.ctx = ctx
        self.forced_items = items
        self.lines = LogicalLines(text)
        self.macros: dict[str, Macro] = {}
        self.blocks: list[QueueBlock] = []
        self.warnings: list[str] = []
        self.next_process = first_process
        self.cluster_offset = cluster_offset
        self.has_cluster = False
        self.resume = resume  # a block's own text: its first queue statement keeps the given numbering
        self.fixed_base = base
        self.last_exe: tuple[str, str] | None = None
        self.base_blocks: list[QueueBlock] = []
        self.last_live = {"process": str(max(first_process - 1, 0)), "row": "0", "step": "0"}

    def fail(self, line: int, message: str) -> SubmitFileError:
        return SubmitFileError(self.ctx.where, line, message)

    def _expander(self) -> Expander:
        """Expansion while reading the file: the values condor_submit has at that moment."""
        cluster = str(1 + self.cluster_offset)
        live = {"cluster": cluster, "process": self.last_live["process"]}
        defaults = {
            "clusterid": cluster,
            "procid": self.last_live["process"],
            "row": self.last_live["row"],
            "itemindex": self.last_live["row"],
            "step": self.last_live["step"],
            "node": "",
            "jobid": "$(ClusterId).$(ProcId)",
            "submit_file": self.ctx.submit_file,
        }
        lookup = macro_lookup(self.macros, live, defaults, refuse_config=False)
        return Expander(lookup, self.ctx.environ)

    def parse(self) -> SubmitFile:
        while (got := self.lines.next()) is not None:
            lineno, line = got
            if not line or line.startswith("#") or not line.strip(WHITESPACE):
                continue
            self._line(lineno, line)
        return SubmitFile(path=self.ctx.where, cwd=self.ctx.cwd, blocks=self.blocks, warnings=self.warnings)

    def _line(self, lineno: int, line: str) -> None:
        word = re.match(r"[^ \t\n\v\f\r]*", line)
        first_word = word.group(0).lower() if word else ""
        if first_word in ("if", "elif", "else", "endif") or line.startswith(":"):
            raise self.fail(
                lineno, f"'{first_word or line}' (conditional submit files) is not supported by llic"
            )
        n = len(line)
        i = 0
        while i < n and line[i] not in WHITESPACE and line[i] not in "=:":
            i += 1
        if i >= n:
            self._queue(lineno, line)
            return
        name = line[:i]
        op = line[i]
        ptr = i + 1
        word_before_op = False
        if op not in "=:":
            while ptr < n and line[ptr] in WHITESPACE:
                ptr += 1
            if ptr < n and line[ptr] not in "=:@":
                word_before_op = True
            while ptr < n and line[ptr] not in "=:@":
                ptr += 1
            op = line[ptr] if ptr < n else ""
            if op:
                ptr += 1
                if op == "@":
                    if ptr < n and line[ptr] == "=":
                        ptr += 1
                    else:
                        op = ""
        while ptr < n and line[ptr] in WHITESPACE:
            ptr += 1
        rhs = line[ptr:]
        keyword = name.lstrip("@").lower()
        if op == ":" and keyword in ("include", "use", "error", "warning"):
            raise self.fail(lineno, f"'{keyword}' is not supported by llic")
        if word_before_op and op != "@":
            self._queue(lineno, line)
            return
        try:
            name = self._expander().expand(name)
        except ExpandError as e:
            raise self.fail(lineno, str(e)) from None
        if op == "@":
            raise self.fail(lineno, f"'{name} @=' (multi-line values) is not supported by llic")
        if op == "=" and name[:1] in ("+", "-"):
            self._set(f"MY.{name[1:]}", rhs if name[0] == "+" else "", lineno, expand_self=False)
            return
        if op != "=" or name.lower() == "queue":
            self._queue(lineno, line)
            return
        if not name or not all(is_identifier_char(c) for c in name):
            raise self.fail(lineno, f"Illegal Identifier: <{name}>")
        self._set(name, rhs, lineno, expand_self=True)

    def _set(self, name: str, rhs: str, lineno: int, *, expand_self: bool) -> None:
        value = rhs
        if expand_self:
            try:
                value = self._expander().expand(rhs, self_name=name)
            except ExpandError as e:
                raise self.fail(lineno, f"{name}: {e}") from None
        old = self.macros.get(name.lower())
        self.macros[name.lower()] = Macro(old.name if old else name, value, lineno)

    def _queue(self, lineno: int, line: str) -> None:
        m = re.match(r"queue(?:[ \t\n\v\f\r]+|$)", line, re.IGNORECASE)
        if not m:
            raise self.fail(lineno, f"cannot parse: {line}")
        raw_args = line[m.end() :]
        try:
            expanded = self._expander().expand(raw_args)
        except ExpandError as e:
            raise self.fail(lineno, str(e)) from None
        try:
            qa = parse_queue_args(expanded)
        except ValueError as e:
            raise self.fail(lineno, f"invalid Queue statement: {e}") from None
        try:
            load_items(qa, self.lines, self.ctx.cwd)
        except QueueItemsError as e:
            raise self.fail(lineno, str(e)) from None
        if self.forced_items is not None and qa.mode is not Foreach.NOT:
            qa.items, self.forced_items = self.forced_items, None

        exe = (self._raw("executable"), self._raw("cmd"))
        new_exe = exe != self.last_exe
        self.last_exe = exe

        n_items = len(qa.selected_items())
        if n_items == 0:
            if qa.mode.is_matching:
                self.warnings.append(f"{self.ctx.where}:{lineno}: queue matching found no files; no jobs")
            return
        starts = False
        if self.resume is not None:
            starts, self.resume, self.has_cluster = self.resume, None, True
        elif new_exe or not self.has_cluster:
            if self.has_cluster:
                self.cluster_offset += 1
                self.next_process = 0
            self.has_cluster = True
            starts = True
        block = QueueBlock(
            ctx=self.ctx,
            index=len(self.blocks),
            line=lineno,
            macros=dict(self.macros),
            qargs=qa,
            queue_text=raw_args.strip(WHITESPACE),
            first_process=self.next_process,
            cluster_offset=self.cluster_offset,
            starts_cluster=starts,
            base_blocks=tuple(self.base_blocks),
            fixed_base=self.fixed_base,
        )
        if starts and self.fixed_base is None:
            self.base_blocks.append(block)
        jobs = qa.count * n_items
        if jobs:
            self.blocks.append(block)
            self.next_process += jobs
            self.last_live = {
                "process": str(self.next_process - 1),
                "row": str(block._items[-1][0]),
                "step": str(qa.count - 1),
            }
        for var in qa.variables:
            self._set(var, QUEUE_ITEM_UNUSED, lineno, expand_self=False)

    def _raw(self, name: str) -> str:
        m = self.macros.get(name)
        return m.value if m is not None else ""


def parse_submit_text(
    text: str,
    *,
    name: str = "<submit>",
    cwd: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    submit_file: str | None = None,
) -> SubmitFile:
    """Parse submit commands given as text. `name` is used in messages; `cwd` (default: the
    current directory) is condor_submit's working directory; `environ` (default: os.environ) is
    what `$ENV()` and `getenv` read. A leading `#llic:` line (from QueueBlock.submit_text) overrides
    the working directory, the environment and the numbering."""
    first_process, cluster_offset, base, items, resume = 0, 0, None, None, None
    submit_time = int(time.time())
    first_line, _, _ = text.partition("\n")
    if first_line.startswith(DIRECTIVE):
        try:
            d = json.loads(first_line[len(DIRECTIVE) :])
            cwd = d["cwd"]
            submit_file = d["submit_file"]
            submit_time = int(d["submit_time"])
            first_process = int(d["first_process"])
            cluster_offset = int(d["cluster_offset"])
            base = None if d["base"] is None else TaskSpec.from_dict(d["base"])
            environ = {str(k): str(v) for k, v in d["environ"].items()}
            items = None if d.get("items") is None else [str(i) for i in d["items"]]
            resume = bool(d["starts_cluster"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SubmitFileError(name, 1, f"malformed {DIRECTIVE.strip()} line: {e}") from None
    ctx = _Context(
        where=name,
        submit_file=name if submit_file is None else submit_file,
        cwd=Path(os.getcwd() if cwd is None else cwd).absolute(),
        environ=os.environ if environ is None else environ,
        submit_time=submit_time,
    )
    parser = _Parser(
        text,
        ctx,
        first_process=first_process,
        cluster_offset=cluster_offset,
        base=base,
        items=items,
        resume=resume,
    )
    return parser.parse()


def parse_submit_file(
    path: Path | str, *, cwd: Path | str | None = None, environ: Mapping[str, str] | None = None
) -> SubmitFile:
    """Parse a submit file as `condor_submit path` run in `cwd` (default: the current directory)
    would (a relative path is relative to cwd); errors are SubmitFileError("path:line: ...")."""
    where = str(path)
    full = Path(path) if cwd is None else Path(cwd) / path
    try:
        raw = full.read_bytes()
    except OSError as e:
        raise SubmitFileError(where, None, f"cannot read the submit file: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SubmitFileError(where, line, "not UTF-8 text") from None
    return parse_submit_text(text, name=where, cwd=cwd, environ=environ, submit_file=where)
