"""TaskSpec: one job of a submit file as condor_submit resolves it, the record a master hands an agent.

Alone in its module because llic's task records (this one, protocol.Task, TaskResult) are to become
one; the package re-exports it as `llic.submit.TaskSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskSpec:
    """One job of the submit file as condor_submit resolves it: what a master hands an agent.

    `input`/`output`/`error` are None for no redirection (condor's /dev/null) and relative to
    `initialdir` unless absolute; `initialdir` is absolute; `arguments` are split as the job
    gets them.
    """

    process: int
    cluster: int
    executable: str
    arguments: tuple[str, ...]
    environment: Mapping[str, str]
    input: str | None
    output: str | None
    error: str | None
    initialdir: str
    transfer_input_files: tuple[str, ...]
    transfer_output_files: tuple[str, ...] | None

    def to_json(self) -> dict[str, Any]:
        """What `master_submitter --dry-run` prints for this task (JSON-able)."""
        return {
            "executable": self.executable,
            "arguments": list(self.arguments),
            "environment": dict(self.environment),
            "input": self.input,
            "output": self.output,
            "error": self.error,
            "initialdir": self.initialdir,
            "transfer_input_files": list(self.transfer_input_files),
            "process": self.process,
            "cluster": self.cluster,
        }

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-able (to_json plus transfer_output_files)."""
        data = self.to_json()
        out = self.transfer_output_files
        data["transfer_output_files"] = None if out is None else list(out)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSpec:
        out = data.get("transfer_output_files")
        return cls(
            process=int(data["process"]),
            cluster=int(data["cluster"]),
            executable=str(data["executable"]),
            arguments=tuple(str(a) for a in data["arguments"]),
            environment={str(k): str(v) for k, v in dict(data["environment"]).items()},
            input=data.get("input"),
            output=data.get("output"),
            error=data.get("error"),
            initialdir=str(data["initialdir"]),
            transfer_input_files=tuple(str(f) for f in data["transfer_input_files"]),
            transfer_output_files=None if out is None else tuple(str(f) for f in out),
        )
