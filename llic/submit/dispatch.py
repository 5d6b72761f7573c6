"""What llic needs of a queue block beyond condor_submit's resolution of its jobs: how agents get
at the tasks' files (Mode), the commands an agent job inherits from the user's jobs, and which
input files are common to every task (sent to an agent once) or private to one (seed §3.3).
Mode itself is llic/task.py's, shared with the master, the agent and the wire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llic.submit.commands import Handling, command
from llic.submit.errors import SubmitFileError
from llic.submit.resolve import should_transfer
from llic.task import Mode, Task

if TYPE_CHECKING:
    from llic.submit.block import QueueBlock


def transfer_mode(block: QueueBlock) -> Mode:
    """NFS when should_transfer_files is NO, else TRANSFER (condor's default is IF_NEEDED);
    `_INITIALDIR` when an initial directory is set."""
    job = block.first_job()
    assert job is not None
    should, _ = should_transfer(job)
    initialdir = job.sets_initialdir()
    if should == "NO":
        return Mode.NFS_INITIALDIR if initialdir else Mode.NFS
    return Mode.TRANSFER_INITIALDIR if initialdir else Mode.TRANSFER


def agent_attributes(block: QueueBlock) -> dict[str, str]:
    """The commands an agent job inherits from the user's jobs (commands.py's AGENT ones:
    requirements, rank, request_*, +Attr/MY.Attr, accounting and priority settings) and the
    universe (expanded; they must be the same for every task, since one agent runs many of
    them)."""
    keys = [m for low, m in block.macros.items() if low == "universe" or _for_agent(low)]
    out: dict[str, str] = {}
    first: dict[str, str | None] = {}
    for n, (_, job) in enumerate(block.jobs(1 + block.cluster_offset)):
        for m in keys:
            value, _ = job.param(m.name)
            if n == 0:
                first[m.name] = value
                if value is not None:
                    out[m.name] = value
            elif value != first[m.name]:
                raise SubmitFileError(
                    block.path,
                    m.line,
                    f"{m.name} differs between the jobs of this queue statement; "
                    "an llic agent runs them all, so it must be the same",
                )
    return out


def _for_agent(name: str) -> bool:
    found = command(name)
    return found is not None and found.handling is Handling.AGENT


def common_input_files(block: QueueBlock, cluster: int) -> list[str]:
    """Input files (transfer_input_files and the input file) that every task of the block names
    identically: sent to an agent once (seed §3.3). Empty when an initial directory is set."""
    if block.mode in (Mode.NFS_INITIALDIR, Mode.TRANSFER_INITIALDIR):
        return []
    tasks = block.tasks(cluster)
    common = [f for f in _input_files(tasks[0])]
    for task in tasks[1:]:
        names = set(_input_files(task))
        common = [f for f in common if f in names]
    return common


def private_input_files(block: QueueBlock, task: Task) -> list[str]:
    """The task's input files that are not common ones: sent with the task."""
    common = set(common_input_files(block, task.cluster))
    return [f for f in _input_files(task) if f not in common]


def _input_files(task: Task) -> list[str]:
    files = list(task.transfer_input_files)
    if task.input is not None and task.input not in files:
        files.append(task.input)
    return files
