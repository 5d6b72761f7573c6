"""What one llic master works from: its `Plan`, read from its state file and its queue block.

`load_plan` reads the state file (llic/state.py) and the submit description master_submitter left
next to it, resolves the tasks with `$(Cluster)` = `MasterInfo.cluster`, and checks that both name
the same tasks; whatever is wrong is one line (StateFileError or PlanError) naming the file, and
nothing is written. The plan then says, for the driver: each task's Task, the block's mode,
which input files are common to every task (they travel with each agent job) and which are a
task's own (the master sends them with the task), and how the submit file limits the network
(`+LlicMinMbps`). Reading files is blocking: the driver calls these from a thread.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.config import ConfigError
from llic import protocol
from llic.config import LlicConfig
from llic.eventlog import log_path
from llic.files import input_paths
from llic.netadmit import Capacity, NetAdmit
from llic.state import MasterInfo, MasterState, load_state
from llic.submit import QueueBlock, SubmitFileError, parse_submit_file
from llic.task import Task
from llic.task_policy import EXPRESSIONS, DefaultPolicy, TaskPolicy

MIN_RATE_ATTR = "llicminmbps"  # +LlicMinMbps = 8 in the submit file (issue 8 item 4)


class PlanError(Exception):
    """The master cannot start from this state file / submit description; one line."""


@dataclass
class Plan:
    """Everything fixed for one master: from its state file and its queue block."""

    state_path: Path
    info: MasterInfo
    config: LlicConfig
    mode: str
    specs: dict[int, Task]
    common_inputs: list[str]  # as named in the submit file, relative to the initialdir
    executable: str | None  # TRANSFER modes: the executable HTCondor transfers with each agent
    agent_attributes: dict[str, str]
    # the common inputs as a set: private_inputs asks it twice per task (read ahead, then send)
    _common: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._common = frozenset(self.common_inputs)

    @property
    def outdir(self) -> Path:
        """The master's output directory: its state file, the agents' directories, logs."""
        return self.state_path.parent

    @property
    def transfer(self) -> bool:
        """A TRANSFER mode: the master sends inputs and receives outputs (else a shared file
        system holds them)."""
        return self.mode in protocol.TRANSFER_MODES

    @property
    def common_dir(self) -> str:
        """The directory the common inputs are named relative to (the tasks' initialdir)."""
        return next(iter(self.specs.values())).initialdir if self.specs else str(self.outdir)

    @property
    def min_bps(self) -> float:
        """The submit file's `+LlicMinMbps` in bits per second (0: none, or not a number)."""
        for key, value in self.agent_attributes.items():
            name = key.lower().removeprefix("my.").removeprefix("+")
            if name == MIN_RATE_ATTR:
                try:
                    mbps = float(value.strip().strip('"'))
                except ValueError:
                    return 0.0
                return mbps * 1e6 if math.isfinite(mbps) and mbps > 0 else 0.0
        return 0.0

    def input_sizes(self) -> dict[int, int]:
        """Bytes of each task's private inputs (what travels with it; 0: nothing). Blocking."""
        if not self.transfer:
            return {}
        sizes: dict[int, int] = {}
        for process, spec in self.specs.items():
            total = 0
            for name in self.private_inputs(spec):
                if _is_url(name):
                    continue
                src = source_path(spec.initialdir, name)
                if os.path.isdir(src):
                    for root, _dirs, files in os.walk(src):
                        total += sum(_size(os.path.join(root, f)) for f in files)
                else:
                    total += _size(src)
            sizes[process] = total
        return sizes

    def private_inputs(self, spec: Task) -> list[str]:
        """The input files that are this task's own (its `input` too): they travel with it."""
        common = self._common
        names = [n for n in spec.transfer_input_files if n not in common]
        if (
            spec.input is not None
            and spec.input not in common
            and spec.input not in spec.transfer_input_files
        ):
            names.append(spec.input)
        return names

    @functools.cached_property
    def protected_paths(self) -> frozenset[str]:
        """What an agent's returned files never overwrite unless the task lists them in
        transfer_output_files (files.place_outputs): every task's executable and input files,
        its job event log and where its stdout and stderr go, and this master's directory
        (its submit description, state file, agent secret, user requests, agent zipapp: in
        FILES_STYLE_MODE improved it lies inside the tasks' initialdir) and files."""
        paths = {path for spec in self.specs.values() for path in input_paths(spec)}
        for spec in self.specs.values():
            for name in (spec.log, spec.output, spec.error):
                if name:
                    paths.add(os.path.normpath(os.path.join(spec.initialdir, name)))
        paths.add(os.path.normpath(self.outdir))
        paths.add(os.path.normpath(self.outdir / self.info.submit_file))
        paths.add(os.path.normpath(self.state_path))
        return frozenset(paths)

    def logs(self) -> dict[int, str]:
        """Each task's job event log (those with a `log` only), as a path on this machine."""
        return {p: log_path(spec.initialdir, spec.log) for p, spec in self.specs.items() if spec.log}

    def policy(self) -> TaskPolicy:
        """The tasks' job policy (llic/job_policy.py, which loads HTCondor's ClassAd library);
        HTCondor's default when no task has a policy command."""
        if not any(name in EXPRESSIONS for spec in self.specs.values() for name in spec.policy):
            return DefaultPolicy()
        from llic.job_policy import task_policy  # classad2: only for masters that need it

        return task_policy(self.specs.values(), self.agent_attributes)

    def net_admission(self, figures: Any = None) -> NetAdmit:
        """The network admission this master runs with: the limits of its config, the submit
        file's `+LlicMinMbps`, serialized large returns in TRANSFER modes, and the totals of an
        earlier run (`figures`, the state file's `extra.net`) carried on."""
        net = NetAdmit(
            Capacity.parse(self.config.network_capacity),
            per_subnet=self.config.network_transfers_per_subnet,
            min_bps=self.min_bps,
            bulk_threshold=self.config.bulk_output_threshold if self.transfer else 0,
        )
        net.stats.restore(figures)
        return net


def load_plan(state_path: Path) -> tuple[MasterState, Plan]:
    """The state and plan of the master at `state_path`; StateFileError or PlanError (one line,
    naming the file) when they cannot be used. Reads only."""
    state_path = Path(state_path).absolute()
    state = load_state(state_path)
    info = state.info
    try:
        config = LlicConfig.from_snapshot(state.config, source=f"{state_path}: config")
    except ConfigError as e:
        raise PlanError(str(e)) from None
    submit_path = Path(info.submit_file)
    if not submit_path.is_absolute():
        submit_path = state_path.parent / submit_path
    try:
        submit = parse_submit_file(submit_path)
    except SubmitFileError as e:
        raise PlanError(f"{state_path}: submit description: {e}") from None
    if len(submit.blocks) != 1:
        raise PlanError(
            f"{submit_path}: a master's submit description has one queue statement, not {len(submit.blocks)}"
        )
    block = submit.blocks[0]
    try:
        plan = make_plan(state_path, info, config, block)
    except SubmitFileError as e:
        raise PlanError(f"{state_path}: submit description: {e}") from None
    specs = plan.specs
    in_state = {t.process for t in state.tasks}
    if set(specs) != in_state:
        missing = sorted(in_state - set(specs))[:5]
        extra = sorted(set(specs) - in_state)[:5]
        raise PlanError(
            f"{state_path}: the state file's tasks and {submit_path}'s jobs differ "
            f"(only in the state file: {missing}; only in the description: {extra})"
        )
    return state, plan


def make_plan(
    state_path: Path, info: MasterInfo, config: LlicConfig, block: QueueBlock, tasks: Sequence[Task] = ()
) -> Plan:
    """The plan of a master's queue block with its cluster (`info.cluster`); `tasks`, when
    given, are the block's tasks already resolved with that cluster. SubmitFileError as the
    block raises it."""
    specs = {spec.process: spec for spec in (tasks or block.tasks(info.cluster))}
    mode = str(block.mode)
    attributes = block.agent_attributes()
    common = block.common_input_files(info.cluster) if mode in protocol.TRANSFER_MODES else []
    executable = None
    if mode in protocol.TRANSFER_MODES:
        names = {spec.executable for spec in specs.values()}
        if len(names) == 1:
            (name,) = names
            if os.path.isabs(name) and os.path.isfile(name):
                executable = name
    return Plan(Path(state_path).absolute(), info, config, mode, specs, common, executable, attributes)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _is_url(name: str) -> bool:
    return "://" in name


def source_path(iwd: str, name: str) -> str:
    """Where the submit file's input `name` is on this machine (relative to `iwd` unless absolute)."""
    return os.path.normpath(name if os.path.isabs(name) else os.path.join(iwd, name))


class InputsTooLarge(Exception):
    """A task's private inputs pass the limit `input_blobs` was given."""


def input_blobs(
    iwd: str, names: Sequence[str], limit: int | None = None
) -> tuple[list[dict[str, Any]], list[bytes], list[str]]:
    """The files `names` (relative to `iwd`) as blobs at the paths HTCondor would give them in an
    execution directory: a file at its base name, a directory `d` as `d/...`, `d/` as its
    contents. A file that cannot be read is left out (the agent then reports the task as
    prepare_failed, naming it) and noted. With a `limit`, InputsTooLarge as soon as more than
    `limit` bytes are read (never more than limit + 1 of them: the master reads small inputs
    ahead, within a memory budget). Blocking: run in a thread."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    notes: list[str] = []
    seen: set[str] = set()
    left = [limit]

    def add(path: str, rel: str) -> None:
        if rel in seen:
            return
        try:
            with open(path, "rb") as fh:
                data = fh.read() if left[0] is None else fh.read(left[0] + 1)
            mode = os.stat(path).st_mode & 0o777
        except OSError as e:
            notes.append(f"{path}: {e.strerror or e}")
            return
        if left[0] is not None:
            left[0] -= len(data)
            if left[0] < 0:
                raise InputsTooLarge(path)
        seen.add(rel)
        entries.append(protocol.file_entry(rel, data, mode=mode))
        blobs.append(data)

    for name in names:
        if _is_url(name):
            continue
        src = source_path(iwd, name)
        if os.path.isdir(src):
            prefix = "" if name.endswith("/") else os.path.basename(src.rstrip("/")) + "/"
            for root, dirs, files in os.walk(src):
                dirs.sort()
                for file in sorted(files):
                    full = os.path.join(root, file)
                    add(full, prefix + os.path.relpath(full, src).replace(os.sep, "/"))
        else:
            add(src, os.path.basename(name.rstrip("/")))
    return entries, blobs, notes


def common_names(iwd: str, names: Sequence[str]) -> list[str]:
    """Where common inputs land next to the agent's input file (HTCondor's transfer rules)."""
    out: list[str] = []
    for name in names:
        if _is_url(name):
            continue
        src = source_path(iwd, name)
        if name.endswith("/") and os.path.isdir(src):
            out += sorted(os.listdir(src))
        else:
            out.append(os.path.basename(name.rstrip("/")))
    return out
