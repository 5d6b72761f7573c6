"""The file-level parser (config.cpp: Parse_macros with the submit syntax; submit.cpp: queue
handling): logical lines into submit commands and queue statements into QueueBlocks, errors
naming file:line.

A command is `name = value` with a case-insensitive name (macro references in a name are
expanded), `+Attr = value` / `MY.Attr = value` (stored as `MY.Attr`), `-Attr =`, or `name @= TAG`
followed by the lines of its value and a line `@TAG`. Directives (`_Parser._line`):
`if`/`elif`/`else`/`endif` (conditionals.py; a `:` before a line inside an `if`, or before
`if`, is dropped, as condor does for old parsers' sake), `include [ifexist] : FILE`,
`include [ifexist] command|output [into FILE] : CMD` and `include : CMD |` (sources.py; an
included source is read like the file, with its own `if` stack, and may not hold a queue
statement), `warning : TEXT` (a warning) and `error [CODE] : TEXT` (the file is refused);
`use` (HTCondor's configuration templates) is refused. The numbering follows
condor_submit: several queue statements form one cluster and process numbers continue, until the
raw `executable` changes: then a new cluster starts and process numbers restart at 0. After a
queue statement with variables, those variables are `<Queue_item>` for later statements.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from common.files import read_regular
from llic.submit.block import QueueBlock, SubmitContext
from llic.submit.conditionals import ConditionError, IfStack, conditional_keyword, evaluate_condition
from llic.submit.errors import ExpandError, SubmitFileError
from llic.submit.lines import LogicalLines
from llic.submit.macros import (
    CONFIG_MACROS,
    Expander,
    Macro,
    is_identifier_char,
    macro_lookup,
    shared_builtins,
)
from llic.submit.master_copy import read_directive
from llic.submit.queue import (
    QUEUE_ITEM_UNUSED,
    Foreach,
    QueueArgs,
    QueueItemsError,
    load_items,
    parse_queue_args,
)
from llic.submit.sources import MAX_SOURCE_BYTES, SourceError, is_command, read_source, write_into
from llic.submit.values import WHITESPACE
from llic.task import Task

MAX_INCLUDE_DEPTH = 20  # condor's CONFIG_MAX_NESTING_DEPTH
_IF_WITH_COLON = re.compile(r":if(?:[ \t\n\v\f\r]|$)")


@dataclass
class _Source:
    """One source of lines being read: the submit file, or an included file or command."""

    where: str  # its name in messages
    lines: LogicalLines
    depth: int  # 0: the submit file itself
    ifs: IfStack = field(default_factory=IfStack)
    here: tuple[str, str, int, list[str]] | None = None  # an open `name @= TAG`: name, tag, line, lines


@dataclass
class SubmitFile:
    """A parsed submit file: one QueueBlock per queue statement that makes jobs."""

    path: str
    cwd: Path
    blocks: list[QueueBlock]
    warnings: list[str] = field(default_factory=list)

    def tasks(self, cluster: int = 1) -> list[Task]:
        """Every job in process order, numbered as condor_submit -dry-run does (first cluster =
        cluster, the next one, after an executable change, cluster + 1)."""
        out: list[Task] = []
        for block in self.blocks:
            out.extend(block.tasks(cluster + block.cluster_offset))
        return out


class _Parser:
    """Reads a submit text line by line, keeping the commands in effect and the numbering, and
    makes a QueueBlock of each queue statement."""

    def __init__(
        self,
        text: str,
        ctx: SubmitContext,
        *,
        first_process: int,
        cluster_offset: int,
        base: Task | None,
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
        self._source: _Source | None = None  # the source being read
        self._shared = shared_builtins(ctx.submit_file, ctx.submit_time)
        self.base_blocks: list[QueueBlock] = []
        self.last_live = {"process": str(max(first_process - 1, 0)), "row": "0", "step": "0"}

    def fail(self, line: int, message: str) -> SubmitFileError:
        """An error at line of the source being read."""
        return SubmitFileError(self._source.where if self._source else self.ctx.where, line, message)

    def _lookup(self, *, refuse_config: bool = False) -> Callable[[str], str | None]:
        """A macro's raw value as condor_submit has it at this line of the file."""
        cluster = str(1 + self.cluster_offset)
        live = {"cluster": cluster, "process": self.last_live["process"]}
        defaults = {
            "clusterid": cluster,
            "procid": self.last_live["process"],
            "row": self.last_live["row"],
            "itemindex": self.last_live["row"],
            "step": self.last_live["step"],
        }
        return macro_lookup(self.macros, live, defaults, self._shared, refuse_config=refuse_config)

    def _expander(self) -> Expander:
        """Expansion while reading the file: the values condor_submit has at that moment."""
        return Expander(self._lookup(), self.ctx.environ)

    def parse(self) -> SubmitFile:
        """Every line, then the file's blocks."""
        self._read(_Source(self.ctx.where, self.lines, 0))
        return SubmitFile(path=self.ctx.where, cwd=self.ctx.cwd, blocks=self.blocks, warnings=self.warnings)

    def _read(self, source: _Source) -> None:
        """Every line of one source (the file, or an included one), each with its own `if` stack."""
        outer, self._source = self._source, source
        try:
            while (got := source.lines.next()) is not None:
                lineno, line = got
                if not line or line.startswith("#") or not line.strip(WHITESPACE):
                    continue
                if source.here is not None:
                    self._here_line(source, lineno, line)
                    continue
                self._line(lineno, line)
            if source.here is not None:
                raise self.fail(source.here[2], f"end of file while looking for '@{source.here[1]}'")
        finally:
            self._source = outer

    def _here_line(self, source: _Source, lineno: int, line: str) -> None:
        """A line of a `name @= TAG` value, or its end `@TAG`."""
        assert source.here is not None
        name, tag, start, lines = source.here
        if line[:1] == "@" and line[1:] == tag:
            source.here = None
            self._set(name, "\n".join(lines), start, expand_self=True)
        else:
            lines.append(line)

    def _line(self, lineno: int, line: str) -> None:
        """One logical line: a conditional, a command, a queue statement or a directive."""
        source = self._source
        assert source is not None
        if line.startswith(":") and (source.ifs.inside or _IF_WITH_COLON.match(line)):
            line = line[1:]
        keyword = conditional_keyword(line)
        if keyword is not None:
            try:
                source.ifs.line(keyword, line[len(keyword) :].lstrip(WHITESPACE), self._condition)
            except ConditionError as e:
                raise self.fail(lineno, str(e)) from None
            return
        if not source.ifs.enabled:
            return
        statement = _split_statement(line)
        if statement is None:
            self._queue(lineno, line)
            return
        name, op, rhs, word_before_op, between = statement
        directive = name[1:].lower() if name.startswith("@") else name.lower()
        if op == ":" and directive in ("include", "use", "error", "warning"):
            self._directive(lineno, directive, between, rhs)
            return
        if word_before_op and op != "@":
            self._queue(lineno, line)
            return
        try:
            name = self._expander().expand(name)
        except ExpandError as e:
            raise self.fail(lineno, str(e)) from None
        if op == "=" and name[:1] in ("+", "-"):
            self._set(f"MY.{name[1:]}", rhs if name[0] == "+" else "", lineno, expand_self=False)
            return
        if op not in ("=", "@") or name.lower() == "queue":
            self._queue(lineno, line)
            return
        if not name or not all(is_identifier_char(c) for c in name):
            raise self.fail(lineno, f"Illegal Identifier: <{name}>")
        if op == "@":
            source.here = (name, rhs, lineno, [])
            return
        self._set(name, rhs, lineno, expand_self=True)

    def _condition(self, condition: str) -> bool:
        """An `if`/`elif` condition's truth, as at this line."""
        lookup = self._lookup()

        def raw(name: str) -> str | None:
            value = lookup(name)
            return "(configured)" if value is None and name.lower() in CONFIG_MACROS else value

        def expand(text: str) -> str:
            try:
                return self._expander().expand(text)
            except ExpandError as e:
                raise ConditionError(str(e)) from None

        return evaluate_condition(condition, expand, raw)

    def _directive(self, lineno: int, directive: str, between: str, rhs: str) -> None:
        """`include`, `error`, `warning` (and `use`, refused)."""
        try:
            text = self._expander().expand(rhs)
        except ExpandError as e:
            raise self.fail(lineno, str(e)) from None
        if directive == "warning":
            self.warnings.append(f"{self.fail(lineno, text)}")
            return
        if directive == "error":
            raise self.fail(lineno, text or "error")
        if directive == "use":
            raise self.fail(lineno, "'use' (HTCondor's configuration templates) is not supported by llic")
        self._include(lineno, between, text)

    def _include(self, lineno: int, options: str, target: str) -> None:
        """`include [ifexist] [command|output [into FILE]] : TARGET`: read the file, or the
        command's output, as part of the submit file."""
        words = options.split()
        must_exist = True
        command = False
        into: str | None = None
        if words and words[0] in ("ifexist", "ifexists"):
            must_exist = False
            words = words[1:]
        if words:
            if words[0] not in ("output", "command"):
                raise self.fail(lineno, f"unexpected keyword(s) '{options.strip(WHITESPACE)}' after include")
            command = True
            if len(words) > 1 and words[1] == "into":
                if len(words) < 3:
                    raise self.fail(
                        lineno,
                        f"unexpected keyword(s) '{options.strip(WHITESPACE)}' after include "
                        "expected filename after keyword 'into'",
                    )
                try:
                    into = self._expander().expand(words[2])
                except ExpandError as e:
                    raise self.fail(lineno, str(e)) from None
                if into.endswith("|"):
                    raise self.fail(lineno, "destination for 'include into' may not be a script")
                if not into:
                    raise self.fail(lineno, "destination for 'include into' expanded to ''")
        source = self._source
        assert source is not None
        if source.depth + 1 >= MAX_INCLUDE_DEPTH:
            raise self.fail(lineno, f"include {target}: includes nested too deep")
        try:
            if into is not None and (self.ctx.cwd / into).is_file():
                text = read_source(into, self.ctx.cwd, self.ctx.environ)
            else:
                text = read_source(target, self.ctx.cwd, self.ctx.environ, command=command)
                if into is not None:
                    write_into(into, text, self.ctx.cwd)
        except SourceError as e:
            if not must_exist:
                return
            raise self.fail(lineno, f"include {target}: {e}") from None
        name = target if not (command or is_command(target)) else target.rstrip(WHITESPACE)
        self._read(_Source(name, LogicalLines(text), source.depth + 1))

    def _set(self, name: str, rhs: str, lineno: int, *, expand_self: bool) -> None:
        """Set a command (the first spelling of its name is kept); a self reference is expanded now."""
        value = rhs
        if expand_self:
            try:
                value = self._expander().expand(rhs, self_name=name)
            except ExpandError as e:
                raise self.fail(lineno, f"{name}: {e}") from None
        old = self.macros.get(name.lower())
        self.macros[name.lower()] = Macro(old.name if old else name, value, lineno)

    def _queue(self, lineno: int, line: str) -> None:
        """A queue statement: a QueueBlock when it makes jobs, numbered as condor_submit numbers them."""
        if self._source is not None and self._source.depth > 0:
            if re.match(r"queue(?:[ \t\n\v\f\r]|$)", line, re.IGNORECASE):
                raise self.fail(lineno, "Queue statement not allowed in include file or command")
        raw_args, qa = self._queue_args(lineno, line)
        exe = (self._raw("executable"), self._raw("cmd"))
        new_exe = exe != self.last_exe
        self.last_exe = exe
        selected = qa.selected_items()
        if not selected:
            if qa.mode.is_matching:
                self.warnings.append(f"{self.ctx.where}:{lineno}: queue matching found no files; no jobs")
            return
        starts = self._starts_cluster(new_exe)
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
        jobs = qa.count * len(selected)
        if jobs:
            self.blocks.append(block)
            self.next_process += jobs
            self.last_live = {
                "process": str(self.next_process - 1),
                "row": str(selected.last()[0]),
                "step": str(qa.count - 1),
            }
        for var in qa.variables:
            self._set(var, QUEUE_ITEM_UNUSED, lineno, expand_self=False)

    def _queue_args(self, lineno: int, line: str) -> tuple[str, QueueArgs]:
        """(the statement's raw arguments, the statement parsed with its items read)."""
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
            assert self._source is not None
            load_items(qa, self._source.lines, self.ctx.cwd, self.ctx.environ)
        except QueueItemsError as e:
            raise self.fail(lineno, str(e)) from None
        if self.forced_items is not None and qa.mode is not Foreach.NOT:
            qa.items, self.forced_items = self.forced_items, None
        return raw_args, qa

    def _starts_cluster(self, new_exe: bool) -> bool:
        """Whether the statement starts a cluster: the first one, and one after the raw
        `executable` changed (a block's own text keeps the numbering its directive gives)."""
        if self.resume is not None:
            starts, self.resume, self.has_cluster = self.resume, None, True
            return starts
        if new_exe or not self.has_cluster:
            if self.has_cluster:
                self.cluster_offset += 1
                self.next_process = 0
            self.has_cluster = True
            return True
        return False

    def _raw(self, name: str) -> str:
        """A command's value as written ("" when not set)."""
        m = self.macros.get(name)
        return m.value if m is not None else ""


def _split_statement(line: str) -> tuple[str, str, str, bool, str] | None:
    """config.cpp's reading of a line as (name, operator, value, a second word stands before the
    operator, the text between name and operator); the operator is `=`, `:`, `@` (for `@=`) or
    "" (none). None for a line that is one word (a bare `queue`)."""
    n = len(line)
    i = 0
    while i < n and line[i] not in WHITESPACE and line[i] not in "=:":
        i += 1
    if i >= n:
        return None
    name = line[:i]
    op = line[i]
    ptr = i + 1
    op_at = i
    word_before_op = False
    if op not in "=:":
        while ptr < n and line[ptr] in WHITESPACE:
            ptr += 1
        if ptr < n and line[ptr] not in "=:@":
            word_before_op = True
        while ptr < n and line[ptr] not in "=:@":
            ptr += 1
        op_at = ptr
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
    return name, op, line[ptr:], word_before_op, line[i:op_at]


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
    directive = read_directive(text, name)
    if directive is not None:
        cwd = directive.cwd
        submit_file = directive.submit_file
        submit_time = directive.submit_time
        first_process = directive.first_process
        cluster_offset = directive.cluster_offset
        base = directive.base
        environ = directive.environ
        items = directive.items
        resume = directive.starts_cluster
    ctx = SubmitContext(
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
        raw = read_regular(full, MAX_SOURCE_BYTES)
    except OSError as e:
        raise SubmitFileError(where, None, f"cannot read the submit file: {e.strerror}") from None
    except ValueError as e:
        raise SubmitFileError(where, None, f"cannot read the submit file: {e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SubmitFileError(where, line, "not UTF-8 text") from None
    return parse_submit_text(text, name=where, cwd=cwd, environ=environ, submit_file=where)
