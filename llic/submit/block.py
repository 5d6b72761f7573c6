"""A queue block: one queue statement with the submit commands in effect at it, its items, and its
jobs, numbered as condor_submit numbers them; one llic master runs one block.

The parser decides the numbering (several queue statements form one cluster and process numbers
continue, until the raw `executable` changes: then a new cluster starts and process numbers
restart at 0); a block carries its first process number and its cluster's offset from the
submission's first. Its jobs are resolved by resolve.py; what llic needs beyond them by
dispatch.py; the master's copy of the block by master_copy.py.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from llic.submit import dispatch, master_copy
from llic.submit.commands import check_commands
from llic.submit.macros import Expander, Macro, job_builtins, macro_lookup, shared_builtins
from llic.submit.queue import QueueArgs, assign_item
from llic.submit.resolve import JobCommands, PathChecks, check_universe, resolve_task
from llic.task import Mode, Task


@dataclass
class SubmitContext:
    """What a parse carries into every queue block."""

    where: str  # the file name used in messages
    submit_file: str  # $(SUBMIT_FILE)
    cwd: Path  # condor_submit's working directory
    environ: Mapping[str, str]  # condor_submit's environment ($ENV(), getenv)
    submit_time: int  # $(SUBMIT_TIME)


class QueueBlock:
    """One queue statement and the submit commands in effect at it (later statements inherit
    earlier commands, as in condor_submit): one llic master."""

    def __init__(
        self,
        *,
        ctx: SubmitContext,
        index: int,
        line: int,
        macros: dict[str, Macro],
        qargs: QueueArgs,
        queue_text: str,
        first_process: int,
        cluster_offset: int,
        starts_cluster: bool,
        base_blocks: tuple[QueueBlock, ...],
        fixed_base: Task | None = None,
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
        self._tasks: dict[int, list[Task]] = {}
        self._checks = PathChecks()
        self._items = qargs.selected_items()

    # -- what the block is

    @property
    def path(self) -> str:
        """The submit file's name as given (used in messages)."""
        return self._ctx.where

    @property
    def cwd(self) -> Path:
        """condor_submit's working directory for this file."""
        return self._ctx.cwd

    @property
    def context(self) -> SubmitContext:
        """What the parse gave every block: file name, working directory, environment, time."""
        return self._ctx

    @property
    def macros(self) -> Mapping[str, Macro]:
        """The submit commands in effect, by lower-case name (read only)."""
        return types.MappingProxyType(self._macros)

    @property
    def queue_args(self) -> QueueArgs:
        """The queue statement as parsed, its items read (all of them: the slice is not applied)."""
        return self._qargs

    @property
    def count(self) -> int:
        """Jobs per item (the N of `queue N ...`)."""
        return self._qargs.count

    @property
    def variables(self) -> list[str]:
        """The queue statement's variables (`Item` when it names none)."""
        return list(self._qargs.variables)

    @property
    def items(self) -> list[str | None]:
        """The selected items (None for a `queue N` without items)."""
        return [it for _, it in self._items]

    @property
    def num_tasks(self) -> int:
        """How many jobs the statement makes."""
        return self._qargs.count * len(self._items)

    def commands(self) -> dict[str, str]:
        """The raw submit commands in effect (names as written, values unexpanded)."""
        return {m.name: m.value for m in self._macros.values()}

    def __repr__(self) -> str:
        return f"QueueBlock({self.path}:{self.line}: queue {self.queue_text!r}, {self.num_tasks} tasks)"

    # -- the jobs

    @functools.cached_property
    def _shared_builtins(self) -> dict[str, str]:
        return shared_builtins(self._ctx.submit_file, self._ctx.submit_time)

    def jobs(self, cluster: int, limit: int | None = None) -> Iterator[tuple[int, JobCommands]]:
        """(process, the commands as that job sees them) for every job of the block (the first
        `limit` ones), in order, with `$(Cluster)` = cluster."""
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
                yield (
                    process,
                    JobCommands(
                        self.path,
                        self._macros,
                        Expander(lookup, self._ctx.environ),
                        self.line,
                        dict(values) if values else None,
                    ),
                )
                process += 1
                made += 1

    def first_job(self) -> JobCommands | None:
        """The commands as the block's first job sees them (its cluster numbered as in
        `master_submitter --dry-run`); None for a block without jobs."""
        first = next(self.jobs(1 + self.cluster_offset, limit=1), None)
        return None if first is None else first[1]

    def _resolve(self, job: JobCommands, process: int, cluster: int, base: Task | None) -> Task:
        return resolve_task(
            job,
            process=process,
            cluster=cluster,
            base=base,
            cwd=self._ctx.cwd,
            environ=self._ctx.environ,
            checks=self._checks,
        )

    def cluster_ad(self, cluster: int) -> Task | None:
        """The values this block's jobs fall back on for a command they leave empty: condor_submit's
        cluster ad, the first job of the submission as each new cluster's first job updates it."""
        if self._fixed_base is not None:
            return self._fixed_base
        base: Task | None = None
        for src in self._base_blocks:
            src_cluster = cluster - (self.cluster_offset - src.cluster_offset)
            _, job = next(src.jobs(src_cluster, limit=1))
            base = src._resolve(job, src.first_process, src_cluster, base)
        return base

    def tasks(self, cluster: int) -> list[Task]:
        """Every job of this queue statement, with `$(Cluster)` = cluster, in process order (kept
        once made: dispatch.py asks again and again)."""
        if cluster not in self._tasks:
            self._tasks[cluster] = list(self.iter_tasks(cluster))
        return list(self._tasks[cluster])

    def iter_tasks(self, cluster: int) -> Iterator[Task]:
        """The same jobs one at a time, none kept: a 100,000-task block costs one task's memory
        (what `master_submitter --dry-run` and the submission read)."""
        if cluster in self._tasks:
            yield from self._tasks[cluster]
            return
        first = self.first_job()
        if first is not None:
            check_universe(first)
            check_commands(self)
        base = self.cluster_ad(cluster)
        for process, job in self.jobs(cluster):
            task = self._resolve(job, process, cluster, base)
            if base is None:
                base = task
            yield task

    # -- what llic needs beyond the tasks (dispatch.py) and the master's copy (master_copy.py)

    @property
    def mode(self) -> Mode:
        """How agents get at the tasks' files (dispatch.transfer_mode)."""
        return dispatch.transfer_mode(self)

    def agent_attributes(self) -> dict[str, str]:
        """The commands an agent job inherits from the user's jobs (dispatch.agent_attributes)."""
        return dispatch.agent_attributes(self)

    def common_input_files(self, cluster: int) -> list[str]:
        """Input files every task names identically: sent to an agent once (dispatch)."""
        return dispatch.common_input_files(self, cluster)

    def private_input_files(self, task: Task) -> list[str]:
        """The task's input files that are not common ones: sent with the task (dispatch)."""
        return dispatch.private_input_files(self, task)

    def submit_text(self) -> str:
        """A self-contained submit description of this block (master_copy.block_submit_text)."""
        return master_copy.block_submit_text(self)
