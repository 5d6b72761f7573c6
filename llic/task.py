"""What the submit file, the master, its state file and the agent say about tasks, defined once.

Stdlib only and Python 3.9+: the agent ships this module in its zipapp (llic/agent_build.py),
next to protocol.py, which re-exports it for the wire.

- `Mode`: how an agent gets at a task's files (seed §3.3), one per queue statement.
- The statuses a run of a task ends with (`STATUS_OK` is the only one that means the job ran).
"""

from __future__ import annotations

import enum


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
