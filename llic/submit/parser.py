"""The file-level parser (config.cpp: Parse_macros with the submit syntax; submit.cpp: queue
handling): logical lines into submit commands and queue statements into QueueBlocks, errors
naming file:line.

A command is `name = value` with a case-insensitive name (macro references in a name are
expanded), `+Attr = value` / `MY.Attr = value` (stored as `MY.Attr`) or `-Attr =`. Directives
condor_submit knows and llic refuses are refused in `_Parser._line`: `if`/`elif`/`else`/`endif`,
`include`, `use`, `error :`/`warning :`, `name @= TAG` multi-line values. The numbering follows
condor_submit: several queue statements form one cluster and process numbers continue, until the
raw `executable` changes: then a new cluster starts and process numbers restart at 0. After a
queue statement with variables, those variables are `<Queue_item>` for later statements.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llic.submit.block import QueueBlock, SubmitContext
from llic.submit.errors import ExpandError, SubmitFileError
from llic.submit.lines import LogicalLines
from llic.submit.macros import Expander, Macro, is_identifier_char, macro_lookup
from llic.submit.master_copy import read_directive
from llic.submit.queue import (
    QUEUE_ITEM_UNUSED,
    Foreach,
    QueueArgs,
    QueueItemsError,
    load_items,
    parse_queue_args,
)
from llic.submit.values import WHITESPACE
from llic.task import Task


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
        self.base_blocks: list[QueueBlock] = []
        self.last_live = {"process": str(max(first_process - 1, 0)), "row": "0", "step": "0"}

    def fail(self, line: int, message: str) -> SubmitFileError:
        """An error at line of the file being read."""
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
        """Every line, then the file's blocks."""
        while (got := self.lines.next()) is not None:
            lineno, line = got
            if not line or line.startswith("#") or not line.strip(WHITESPACE):
                continue
            self._line(lineno, line)
        return SubmitFile(path=self.ctx.where, cwd=self.ctx.cwd, blocks=self.blocks, warnings=self.warnings)

    def _line(self, lineno: int, line: str) -> None:
        """One logical line: a command, a queue statement, or a directive llic refuses."""
        word = re.match(r"[^ \t\n\v\f\r]*", line)
        first_word = word.group(0).lower() if word else ""
        if first_word in ("if", "elif", "else", "endif") or line.startswith(":"):
            raise self.fail(
                lineno, f"'{first_word or line}' (conditional submit files) is not supported by llic"
            )
        statement = _split_statement(line)
        if statement is None:
            self._queue(lineno, line)
            return
        name, op, rhs, word_before_op = statement
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
                "row": str(selected[-1][0]),
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
            load_items(qa, self.lines, self.ctx.cwd)
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


def _split_statement(line: str) -> tuple[str, str, str, bool] | None:
    """config.cpp's reading of a line as (name, operator, value, a second word stands before the
    operator); the operator is `=`, `:`, `@` (for `@=`) or "" (none). None for a line that is one
    word (a bare `queue`)."""
    n = len(line)
    i = 0
    while i < n and line[i] not in WHITESPACE and line[i] not in "=:":
        i += 1
    if i >= n:
        return None
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
    return name, op, line[ptr:], word_before_op


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
        raw = full.read_bytes()
    except OSError as e:
        raise SubmitFileError(where, None, f"cannot read the submit file: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SubmitFileError(where, line, "not UTF-8 text") from None
    return parse_submit_text(text, name=where, cwd=cwd, environ=environ, submit_file=where)
