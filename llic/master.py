"""llic's master (seed §3.7-3.8, §3.10): the trio driver around `MasterCore`.

    python -m llic.master STATE_FILE [--host ADDR] [--agent-python PATH] [--local-agents]
    (installed as `llic-master`)

master_submitter submits this in the scheduler universe, one per queue statement; HTCondor
re-runs it when it is killed or exits non-zero, and it resumes from STATE_FILE. What it does:

1. Loads the state file (`llic.state`) and the queue block's submit description next to it
   (`MasterInfo.submit_file`), and resolves the tasks with `$(Cluster)` = `MasterInfo.cluster`.
   An unusable state file or description is one line on stderr and exit status 2, with nothing
   deleted or rewritten (master_submitter's `on_exit_hold` then holds the job, so HTCondor does
   not re-run a master that cannot start).
2. Builds the agent zipapp into its output directory (the state file's directory), opens its TCP
   server on INITIAL_MASTER_PORT_NUMBER or, if taken, any free port, removes agent jobs a
   previous run may have left (by the `LlicMaster` job attribute: an agent submitted just before
   a crash is in no state file), and starts the core (`MasterCore.start`).
3. Carries out the core's actions: agents are submitted through `common.condor.Gateway` as
   vanilla jobs tagged `+LlicMaster = "<id>"`, running `python3 agent.pyz HOST PORT AGENT INPUT`;
   each connection is authenticated (protocol.py's handshake with a per-run secret written into
   the agents' input files) and then served by a sending and a receiving task, so that a large
   result never blocks a task on its way (and the reverse). In TRANSFER modes a task's private
   input files travel with it as blobs, and returned files are placed with `files.place_outputs`;
   a result counts only through `ResultReceived` (the core records each task once).
4. Every RESCHEDULE_INTERVAL, while agents wait for slots, asks the schedd for a negotiation
   cycle; every QUEUE_POLL_INTERVAL, reads which agent jobs are still idle or running, so that
   an agent that died before connecting (or was held, or removed) is noticed (`QueueSnapshot`).
5. Saves the state when the core says `save_now` (before acting) and otherwise when `dirty`, at
   most STATE_SAVE_INTERVAL apart; at the end removes every agent job it ever submitted (and, by
   attribute, any other of this master's), saves, and exits 0 (all done) or 3 (gave up: every
   chef unrecoverable; master_submitter's `on_exit_hold` holds it with that reason).

Malformed input from the network (garbage, unknown or oversized frames, a wrong secret, a
handshake that stalls) is dropped with its connection and counted in `counters` (in the state
file's `extra`); it never stops the master.

The agents' address for the master (HOST): `--host`, else the IP address of the schedd the
master runs next to (from `_condor_SCHEDD_ADDRESS_FILE`, which HTCondor gives scheduler-universe
jobs, else from the schedd's ad), else the local address of the route to the collector, else
the host name's address. The schedd listens where execute machines reach it (NETWORK_INTERFACE),
which is what agents need too.

`--local-agents` runs agents as local processes instead of HTCondor jobs (LocalAgents below):
for tests and the dispatch benchmark; no HTCondor is involved then.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
import trio

from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError
from common.config import ConfigError
from llic import protocol
from llic.agent.inputfile import AgentInput, InitialTask
from llic.agent_build import build_agent
from llic.chef import (
    Action,
    AgentConnected,
    AgentSubmitted,
    BulkReady,
    ChefState,
    CloseConnection,
    ConnectionBroken,
    GrantBulk,
    MasterEvent,
    MasterStatus,
    Output,
    QueueSnapshot,
    RefuseAgent,
    RemoveAgents,
    ResultReceived,
    SendNoMoreTasks,
    SendTasks,
    SubmitAgent,
    SubmitFailed,
    TransferDone,
    parse_agent_name,
    unfinished,
)
from llic.config import LlicConfig
from llic.files import OutputPlacementError, place_outputs
from llic.netadmit import IN, OUT, Capacity, NetAdmit
from llic.state import MasterInfo, MasterState, StateFileError, load_state, restore, save_state, snapshot
from llic.submit import SubmitFileError, TaskSpec, parse_submit_file
from llic.taskbook import Assignment, TaskOutcome

log = structlog.get_logger("llic.master")

EXIT_DONE = 0
EXIT_FAILED = 1  # anything unexpected: HTCondor re-runs the master, which resumes
EXIT_UNUSABLE = 2  # state file or submit description unusable: held, not re-run
EXIT_GAVE_UP = 3  # every chef unrecoverable: held, not re-run
HANDSHAKE_TIMEOUT = 30.0  # an authenticated agent answers in milliseconds
CLOSE_TIMEOUT = 10.0  # a closing connection gets this long to deliver what is queued for it
RECV_SIZE = 1 << 18
SUBMIT_BACKOFF_MAX = 30.0  # seconds between agent submissions that keep failing, at most
RESCHEDULE_FOLLOW_UP = 2.0  # seconds from the reschedule after a submission to the next one
AGENT_EXIT_GRACE = 10.0  # seconds finished agents get to leave the queue before the final removal
SAVE_CHECK = 0.25  # how often the saver looks at `dirty`
MIN_RATE_ATTR = "llicminmbps"  # +LlicMinMbps = 8 in the submit file (issue 8 item 4)
AGENT_PYTHON = "/usr/bin/python3"
MASTER_ATTR = "LlicMaster"  # job attribute naming the master on every agent job
AGENT_ATTR = "LlicAgent"
CONDOR_STDOUT = "agent.out"


class PlanError(Exception):
    """The master cannot start from this state file / submit description; one line."""


# --------------------------------------------------------------------------------------------
# what a master works from


@dataclass
class Plan:
    """Everything fixed for one master: from its state file and its queue block."""

    state_path: Path
    info: MasterInfo
    config: LlicConfig
    mode: str
    specs: dict[int, TaskSpec]
    common_inputs: list[str]  # as named in the submit file, relative to the initialdir
    executable: str | None  # TRANSFER modes: the executable HTCondor transfers with each agent
    agent_attributes: dict[str, str]

    @property
    def outdir(self) -> Path:
        return self.state_path.parent

    @property
    def transfer(self) -> bool:
        return self.mode in protocol.TRANSFER_MODES

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
                src = _source(spec.initialdir, name)
                if os.path.isdir(src):
                    for root, _dirs, files in os.walk(src):
                        total += sum(_size(os.path.join(root, f)) for f in files)
                else:
                    total += _size(src)
            sizes[process] = total
        return sizes

    def private_inputs(self, spec: TaskSpec) -> list[str]:
        common = set(self.common_inputs)
        names = list(spec.transfer_input_files)
        if spec.input is not None and spec.input not in names:
            names.append(spec.input)
        return [n for n in names if n not in common]


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
        specs = {spec.process: spec for spec in block.tasks(info.cluster)}
        mode = str(block.mode)
        attributes = block.agent_attributes()
        common = block.common_input_files(info.cluster) if mode in protocol.TRANSFER_MODES else []
    except SubmitFileError as e:
        raise PlanError(f"{state_path}: submit description: {e}") from None
    in_state = {t.process for t in state.tasks}
    if set(specs) != in_state:
        missing = sorted(in_state - set(specs))[:5]
        extra = sorted(set(specs) - in_state)[:5]
        raise PlanError(
            f"{state_path}: the state file's tasks and {submit_path}'s jobs differ "
            f"(only in the state file: {missing}; only in the description: {extra})"
        )
    executable = None
    if mode in protocol.TRANSFER_MODES:
        names = {spec.executable for spec in specs.values()}
        if len(names) == 1:
            (name,) = names
            if os.path.isabs(name) and os.path.isfile(name):
                executable = name
    plan = Plan(state_path, info, config, mode, specs, common, executable, attributes)
    return state, plan


def task_of(spec: TaskSpec, attempt: int) -> protocol.Task:
    return protocol.Task(
        process=spec.process,
        executable=spec.executable,
        initialdir=spec.initialdir,
        attempt=attempt,
        arguments=list(spec.arguments),
        environment=dict(spec.environment),
        input=spec.input,
        output=spec.output,
        error=spec.error,
        transfer_input_files=list(spec.transfer_input_files),
        transfer_output_files=None
        if spec.transfer_output_files is None
        else list(spec.transfer_output_files),
    )


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _is_url(name: str) -> bool:
    return "://" in name


def _source(iwd: str, name: str) -> str:
    return os.path.normpath(name if os.path.isabs(name) else os.path.join(iwd, name))


def input_blobs(iwd: str, names: Sequence[str]) -> tuple[list[dict[str, Any]], list[bytes], list[str]]:
    """The files `names` (relative to `iwd`) as blobs at the paths HTCondor would give them in an
    execution directory: a file at its base name, a directory `d` as `d/...`, `d/` as its
    contents. A file that cannot be read is left out (the agent then reports the task as
    prepare_failed, naming it) and noted. Blocking: run in a thread."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    notes: list[str] = []
    seen: set[str] = set()

    def add(path: str, rel: str) -> None:
        if rel in seen:
            return
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            mode = os.stat(path).st_mode & 0o777
        except OSError as e:
            notes.append(f"{path}: {e.strerror or e}")
            return
        seen.add(rel)
        entries.append(protocol.file_entry(rel, data, mode=mode))
        blobs.append(data)

    for name in names:
        if _is_url(name):
            continue
        src = _source(iwd, name)
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
        src = _source(iwd, name)
        if name.endswith("/") and os.path.isdir(src):
            out += sorted(os.listdir(src))
        else:
            out.append(os.path.basename(name.rstrip("/")))
    return out


def agent_job(
    plan: Plan,
    agent: str,
    agent_dir: Path,
    pyz: Path,
    host: str,
    port: int,
    extra_inputs: Sequence[str] = (),
    agent_python: str = AGENT_PYTHON,
) -> dict[str, str]:
    """The submit description of one agent job (seed §3.4 1.d): the user's requirements and
    request_* (QueueBlock.agent_attributes), the agent zipapp and its input file, in TRANSFER
    modes the executable and the common inputs (cached by the agent for every task)."""
    iwd = next(iter(plan.specs.values())).initialdir if plan.specs else str(plan.outdir)
    inputs = [str(pyz), str(agent_dir / "input.json")]
    if plan.transfer:
        if plan.executable:
            inputs.append(plan.executable)
        inputs += [_source(iwd, n) + ("/" if n.endswith("/") else "") for n in plan.common_inputs]
    inputs += list(extra_inputs)
    desc = dict(plan.agent_attributes)
    desc.update(
        {
            "universe": "vanilla",
            "executable": agent_python,
            "transfer_executable": "false",
            "arguments": f"-I {pyz.name} {host} {port} {agent} input.json",
            "initialdir": str(agent_dir),
            "should_transfer_files": "YES",
            "when_to_transfer_output": "ON_EXIT",
            "transfer_input_files": ", ".join(inputs),
            "output": str(agent_dir / CONDOR_STDOUT),
            "error": str(agent_dir / "agent.err"),
            "log": str(plan.outdir / "agents.log"),
            f"MY.{MASTER_ATTR}": json.dumps(plan.info.master_id),
            f"MY.{AGENT_ATTR}": json.dumps(agent),
        }
    )
    return desc


# --------------------------------------------------------------------------------------------
# where agents run


def request_attributes(attributes: dict[str, str]) -> dict[str, float]:
    """request_memory = 256 as the job ad has it (RequestMemory = 256), for evaluating the
    requirements against slots; values that are not plain numbers are left out."""
    out: dict[str, float] = {}
    for key, value in attributes.items():
        if key.lower().startswith("request_"):
            name = "Request" + "".join(part.capitalize() for part in key[len("request_") :].split("_"))
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


class AgentRunner(Protocol):
    """How the master gets agents run: HTCondor (GatewayAgents) or local processes (LocalAgents)."""

    async def slots(self, plan: Plan) -> int:
        """How many slots could run this block's agents (seed §3.7 step 4: matching machines)."""
        ...

    async def submit(self, description: dict[str, str]) -> str:
        """Submit one agent job; its job id. GatewayError when refused."""
        ...

    async def remove(self, job_ids: Sequence[str], reason: str) -> None: ...

    async def remove_all(self, master_id: str, reason: str) -> None:
        """Every agent job tagged with this master (also ones no state file knows)."""
        ...

    async def alive(self, master_id: str) -> set[str]:
        """Ids of this master's agent jobs that are idle or running."""
        ...

    async def reschedule(self) -> None: ...

    async def agent_host(self) -> str | None:
        """The address agents reach this master at, if the runner knows it."""
        ...

    async def aclose(self) -> None: ...


def _ip_of_sinful(sinful: str) -> str | None:
    """'10.0.0.5' from '<10.0.0.5:9618?addrs=...>'."""
    text = sinful.strip().lstrip("<").split("?", 1)[0].rstrip(">")
    host = text.rsplit(":", 1)[0].strip("[]")
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    return host


def _usable(ip: str | None) -> bool:
    return bool(ip) and not ip.startswith("127.") and ip != "0.0.0.0"


class GatewayAgents:
    """Agents as HTCondor jobs at the schedd this master runs next to."""

    def __init__(self, gateway: Gateway, schedd_name: str | None = None) -> None:
        self.gw = gateway
        self.schedd_name = schedd_name

    def schedd(self) -> DaemonRef | None:
        """The local schedd, by the address file HTCondor names for scheduler-universe jobs (read
        every time: a restarted schedd has a new port), else by name through the collector."""
        path = os.environ.get("_condor_SCHEDD_ADDRESS_FILE")
        if path:
            try:
                with open(path) as fh:
                    address = fh.readline().strip()
                if address.startswith("<"):
                    return DaemonRef(kind=DaemonKind.SCHEDD, address=address)
            except OSError:
                pass
        if self.schedd_name:
            return DaemonRef(kind=DaemonKind.SCHEDD, name=self.schedd_name)
        return None

    async def slots(self, plan: Plan) -> int:
        attributes = plan.agent_attributes
        requirements = next((v for k, v in attributes.items() if k.lower() == "requirements"), None)
        if not requirements:
            return (await self.gw.pool_load()).total_slots
        return await self.gw.count_slots(requirements, request_attributes(attributes))

    async def submit(self, description: dict[str, str]) -> str:
        result = await self.gw.submit(description, schedd=self.schedd())
        return f"{result.cluster}.{result.first_proc}"

    async def remove(self, job_ids: Sequence[str], reason: str) -> None:
        await self._remove(list(job_ids), reason)

    async def remove_all(self, master_id: str, reason: str) -> None:
        await self._remove(f"{MASTER_ATTR} == {json.dumps(master_id)}", reason)

    async def _remove(self, jobs: str | list[str], reason: str) -> None:
        try:
            await self.gw.remove_jobs(jobs, reason, schedd=self.schedd())
        except GatewayError as e:
            # HTCondor answers "no such job" when everything named has left already: not an error.
            if "matched" not in str(e).lower() and "no such" not in str(e).lower():
                raise

    async def alive(self, master_id: str) -> set[str]:
        jobs = await self.gw.query_jobs(
            f"{MASTER_ATTR} == {json.dumps(master_id)}",
            ["ClusterId", "ProcId", "JobStatus"],
            schedd=self.schedd(),
        )
        return {f"{j['ClusterId']}.{j['ProcId']}" for j in jobs if j.get("JobStatus") in (1, 2)}

    async def reschedule(self) -> None:
        await self.gw.reschedule(schedd=self.schedd())

    async def agent_host(self) -> str | None:
        ref = self.schedd()
        if ref is not None and ref.address:
            ip = _ip_of_sinful(ref.address)
            if _usable(ip):
                return ip
        if self.schedd_name:
            for schedd in await self.gw.list_schedds():
                if schedd.name == self.schedd_name and schedd.address:
                    ip = _ip_of_sinful(schedd.address)
                    if _usable(ip):
                        return ip
        return None

    async def aclose(self) -> None:
        await self.gw.aclose()


class LocalAgents:
    """Agents as processes on this machine, each in a scratch directory filled the way HTCondor
    would fill it (transfer_input_files at their base names). For tests and the dispatch
    benchmark: no HTCondor, no negotiation; `slots` is what the caller says."""

    def __init__(self, scratch: Path, slots: int = 2, python: str = AGENT_PYTHON) -> None:
        self.scratch = Path(scratch)
        self._slots = slots
        self.python = python
        self.procs: dict[str, trio.Process] = {}
        self.submitted: list[dict[str, str]] = []
        self._n = 0

    async def slots(self, plan: Plan) -> int:
        return self._slots

    async def submit(self, description: dict[str, str]) -> str:
        self._n += 1
        job_id = f"{self._n}.0"
        home = self.scratch / f"job{self._n}"
        iwd = Path(description["initialdir"])
        await trio.to_thread.run_sync(self._transfer, description, home, iwd)
        argv = [self.python, *description["arguments"].split()]
        with open(iwd / CONDOR_STDOUT, "ab") as out, open(iwd / "agent.err", "ab") as err:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "_CONDOR_SCRATCH_DIR": str(home)}
            self.procs[job_id] = await trio.lowlevel.open_process(
                argv, cwd=home, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )
        self.submitted.append(description)
        return job_id

    @staticmethod
    def _transfer(description: dict[str, str], home: Path, iwd: Path) -> None:
        home.mkdir(parents=True)
        for name in (n.strip() for n in description.get("transfer_input_files", "").split(",")):
            if not name:
                continue
            src = Path(name) if os.path.isabs(name) else iwd / name
            if src.is_dir():
                if name.endswith("/"):
                    shutil.copytree(src, home, dirs_exist_ok=True)
                else:
                    shutil.copytree(src, home / src.name)
            else:
                shutil.copy2(src, home / src.name)

    async def remove(self, job_ids: Sequence[str], reason: str) -> None:
        for job in job_ids:
            proc = self.procs.get(job)
            if proc is not None and proc.returncode is None:
                proc.kill()

    async def remove_all(self, master_id: str, reason: str) -> None:
        await self.remove(list(self.procs), reason)

    async def alive(self, master_id: str) -> set[str]:
        return {job for job, proc in self.procs.items() if proc.poll() is None}

    async def reschedule(self) -> None:
        return None

    async def agent_host(self) -> str | None:
        return "127.0.0.1"

    async def aclose(self) -> None:
        await self.remove_all("", "closing")
        for proc in self.procs.values():
            with trio.move_on_after(5):
                await proc.wait()


# --------------------------------------------------------------------------------------------
# connections


@dataclass
class AgentConnection:
    """One authenticated agent's connection: what the core says goes into `outbox`, in order."""

    agent: str
    chef: int
    peer: str
    stream: trio.SocketStream
    send: trio.MemorySendChannel[Action | None] = field(init=False)
    outbox: trio.MemoryReceiveChannel[Action | None] = field(init=False)
    refusal: str | None = None
    closing: str | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    recv_started: float | None = None  # when the first bytes of the message being received came

    def __post_init__(self) -> None:
        self.send, self.outbox = trio.open_memory_channel(math.inf)

    def close(self, reason: str) -> None:
        """Deliver what is queued, then close (within CLOSE_TIMEOUT)."""
        if self.closing is None:
            self.closing = reason
            self.send.send_nowait(None)
            self.scope.deadline = min(self.scope.deadline, trio.current_time() + CLOSE_TIMEOUT)


class _Closed(Exception):
    """The peer closed the connection between messages."""


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


# --------------------------------------------------------------------------------------------
# the driver


class Master:
    """One run of one master. `run()` returns the exit status."""

    def __init__(
        self,
        plan: Plan,
        state: MasterState,
        runner: AgentRunner,
        *,
        host: str | None = None,
        port: int | None = None,
        agent_python: str = AGENT_PYTHON,
    ) -> None:
        self.plan = plan
        self.config = plan.config
        self.core = restore(state, plan.config)
        net = NetAdmit(
            Capacity.parse(plan.config.network_capacity),
            per_subnet=plan.config.network_transfers_per_subnet,
            min_bps=plan.min_bps,
            bulk_threshold=plan.config.bulk_output_threshold if plan.transfer else 0,
        )
        net.stats.restore(state.extra.get("net"))
        self.core.use_net(net)
        self.runner = runner
        self.extra: dict[str, Any] = dict(state.extra)
        self.counters: Counter[str] = Counter()
        self.secret = protocol.make_secret()
        self.host = host
        self.port = plan.config.initial_master_port_number if port is None else port
        self.agent_python = agent_python
        self.handshake_timeout = HANDSHAKE_TIMEOUT
        self.conns: dict[str, AgentConnection] = {}
        self.pyz: Path | None = None
        self.last_save = -math.inf
        self.stop_reason: str | None = None
        self.exit_signal: int | None = None
        self._over = trio.Event()
        self._wake_reschedule = trio.Event()
        self._submit_send, self._submit_recv = trio.open_memory_channel[SubmitAgent](math.inf)
        self._remove_send, self._remove_recv = trio.open_memory_channel[RemoveAgents](math.inf)
        self.log = log.bind(master=plan.info.master_id)

    # ------------------------------------------------------------------ the core

    def feed(self, event: MasterEvent) -> None:
        self.apply(self.core.handle(event, time.time()))

    def apply(self, out: Output) -> None:
        """Carry out the core's output: save first when it asks, then queue every action where
        it belongs (nothing here waits, so events are handled in the order they happened)."""
        for note in out.notes:
            self.log.info(note)
        if self.core.save_now:
            self.save()
        for action in out.actions:
            match action:
                case SubmitAgent():
                    self._submit_send.send_nowait(action)
                case RemoveAgents():
                    self._remove_send.send_nowait(action)
                case SendTasks() | SendNoMoreTasks() | GrantBulk():
                    conn = self.conns.get(action.agent)
                    if conn is not None and conn.closing is None:
                        conn.send.send_nowait(action)
                case CloseConnection(agent=agent, reason=reason):
                    conn = self.conns.get(agent)
                    if conn is not None:
                        conn.close(reason)
                case RefuseAgent(agent=agent, reason=reason):
                    conn = self.conns.get(agent)
                    if conn is not None and conn.refusal is None:
                        conn.refusal = reason
        if self.core.over:
            self._over.set()

    def save(self) -> None:
        """Write the state file now (atomic; StateFileError propagates: the master exits and
        HTCondor re-runs it from the last good save)."""
        self.extra["counters"] = dict(self.counters)
        self.extra["agent_host"] = self.host
        self.extra["port"] = self.port
        self.extra["net"] = self.core.net.snapshot(time.time())
        save_state(self.plan.state_path, snapshot(self.core, self.plan.info, time.time(), self.extra))
        self.core.dirty = False
        self.core.save_now = False
        self.last_save = trio.current_time()

    # ------------------------------------------------------------------ the run

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> int:
        info = self.plan.info
        listeners = await self._listen()
        self.port = listeners[0].socket.getsockname()[1]
        if self.host is None:
            self.host = await self._find_host()
        self.pyz = await trio.to_thread.run_sync(build_agent, self.plan.outdir)
        self.core.net.sizes = await trio.to_thread.run_sync(self.plan.input_sizes)
        self.log.info(
            "master starting",
            run=self.core.run + 1,
            tasks=str(self.core.book.counts()),
            mode=self.plan.mode,
            agents_connect_to=f"{self.host}:{self.port}",
        )
        try:
            await self.runner.remove_all(info.master_id, "llic master starting: agents of an earlier run")
        except GatewayError as e:
            self.log.warning("could not remove earlier agents", error=str(e))
        try:
            slots = await self.runner.slots(self.plan)
        except GatewayError as e:
            self.log.warning("could not count the pool's slots; starting one agent", error=str(e))
            slots = 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._serve_listeners, listeners, nursery)
            nursery.start_soon(self._submitter)
            nursery.start_soon(self._remover)
            nursery.start_soon(self._saver)
            nursery.start_soon(self._rescheduler)
            nursery.start_soon(self._poller)
            nursery.start_soon(self._signals)
            self.apply(self.core.start(slots, time.time()))
            task_status.started(self.port)
            await self._over.wait()
            await self._finish()
            nursery.cancel_scope.cancel()
        status = self.core.status
        counts = self.core.book.counts()
        self.log.info("master finished", status=str(status), tasks=str(counts), counters=dict(self.counters))
        if status is MasterStatus.DONE:
            return EXIT_DONE
        if status is MasterStatus.GAVE_UP:
            left = unfinished(self.core.book)
            print(
                f"llic-master: gave up: every agent failed {self.config.num_agent_recoveries} recoveries;"
                f" {len(left)} tasks unfinished (processes {left[:20]}{'...' if len(left) > 20 else ''})",
                file=sys.stderr,
            )
            return EXIT_GAVE_UP
        return 128 + (self.exit_signal or 0) if self.exit_signal else EXIT_FAILED

    async def _finish(self) -> None:
        reason = self.stop_reason or ("all tasks done" if self.core.finished else "gave up")
        done = [c.rec.job_id for c in self.core.chefs if c.state is ChefState.TERMINATED]
        leaving = {job for job in done if job is not None}
        out = self.core.finish(time.time(), reason)
        self.apply(out)
        with trio.move_on_after(60) as scope:
            scope.shield = True
            if self.core.finished and self.stop_reason is None:
                await self._let_agents_leave(leaving)
            for action in out.actions:
                if isinstance(action, RemoveAgents):
                    await self._remove_quietly(action.job_ids, action.reason)
            try:
                await self.runner.remove_all(self.plan.info.master_id, f"llic master: {reason}")
            except GatewayError as e:
                self.log.warning("final removal by attribute failed", error=str(e))
            for conn in list(self.conns.values()):
                conn.close(reason)
            self.save()

    async def _let_agents_leave(self, leaving: set[str]) -> None:
        """Agents that finished their tasks exit by themselves within moments; removing them
        before that would only cut their output and log short."""
        with trio.move_on_after(AGENT_EXIT_GRACE):
            while leaving:
                try:
                    if not leaving & await self.runner.alive(self.plan.info.master_id):
                        return
                except GatewayError:
                    return
                await trio.sleep(0.5)

    async def _listen(self) -> list[trio.SocketListener]:
        """INITIAL_MASTER_PORT_NUMBER if free, else any free port (seed §5)."""
        if self.port:
            try:
                return await trio.open_tcp_listeners(self.port, host="0.0.0.0")
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                self.log.info("port taken; using a free one", port=self.port)
        return await trio.open_tcp_listeners(0, host="0.0.0.0")

    async def _find_host(self) -> str:
        try:
            host = await self.runner.agent_host()
        except GatewayError as e:
            self.log.warning("could not ask the schedd for its address", error=str(e))
            host = None
        if host:
            return host
        return _route_address() or socket.gethostbyname(socket.gethostname())

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                self.exit_signal = signum
                self.stop_reason = f"stopped by signal {signal.Signals(signum).name}"
                self.log.warning(self.stop_reason)
                self._over.set()
                return

    # ------------------------------------------------------------------ HTCondor side

    async def _submitter(self) -> None:
        """Submit agents one at a time. After a refusal the chef resubmits at once (and counts a
        recovery), so failures in a row are spaced out (1, 2, 4 ... 30 s): a schedd that is
        restarting should not use up every chef's NUM_AGENT_RECOVERIES in a second."""
        failures = 0
        async for action in self._submit_recv:
            if self.core.stopped:
                continue
            try:
                description = await trio.to_thread.run_sync(self._prepare_agent, action)
                job_id = await self.runner.submit(description)
            except (GatewayError, OSError, protocol.ProtocolError) as e:
                self.counters["submit_failures"] += 1
                self.log.warning("agent submission failed", agent=action.agent, error=str(e))
                await trio.sleep(min(SUBMIT_BACKOFF_MAX, 2.0**failures))
                failures += 1
                self.feed(SubmitFailed(action.agent, str(e)))
                continue
            failures = 0
            self.log.debug("agent submitted", agent=action.agent, job=job_id)
            self.feed(AgentSubmitted(action.agent, job_id))
            if self._submit_recv.statistics().current_buffer_used == 0:
                self._wake_reschedule.set()

    def _prepare_agent(self, action: SubmitAgent) -> dict[str, str]:
        """The agent's directory and input file (0600: it holds the secret), then its job."""
        assert self.pyz is not None and self.host is not None
        plan = self.plan
        agent_dir = plan.outdir / "agents" / action.agent
        if agent_dir.exists():
            shutil.rmtree(agent_dir)
        agent_dir.mkdir(parents=True)
        iwd = next(iter(plan.specs.values())).initialdir if plan.specs else str(plan.outdir)
        initial: list[InitialTask] = []
        extra_inputs: list[str] = []
        for assignment in action.initial:
            spec = plan.specs[assignment.process]
            pairs: list[tuple[str, str]] = []
            if plan.transfer:
                folder = f"init-{spec.process}"
                entries, blobs, notes = input_blobs(spec.initialdir, plan.private_inputs(spec))
                for entry, blob in zip(entries, blobs, strict=True):
                    target = agent_dir / folder / entry["path"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(blob)
                    pairs.append((f"{folder}/{entry['path']}", entry["path"]))
                for note in notes:
                    self.log.warning("initial task input not readable", process=spec.process, note=note)
                if entries:
                    extra_inputs.append(str(agent_dir / folder))
            initial.append(InitialTask(task_of(spec, assignment.attempt), pairs))
        config = AgentInput(
            master=plan.info.master_id,
            secret=self.secret,
            window=self.config.window_size,
            mode=plan.mode,
            files_style=str(self.config.files_style_mode),
            executable=os.path.basename(plan.executable) if plan.transfer and plan.executable else None,
            common_files=common_names(iwd, plan.common_inputs) if plan.transfer else [],
            initial_tasks=initial,
            connect_timeout=120.0,
            debug=self.config.llic_debug,
        )
        path = agent_dir / "input.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(config.to_json(), fh)
        assert self.pyz is not None
        return agent_job(
            plan, action.agent, agent_dir, self.pyz, self.host, self.port, extra_inputs, self.agent_python
        )

    async def _remover(self) -> None:
        async for action in self._remove_recv:
            await self._remove_quietly(action.job_ids, action.reason)

    async def _remove_quietly(self, job_ids: Sequence[str], reason: str) -> None:
        try:
            await self.runner.remove(job_ids, f"llic master {self.plan.info.master_id}: {reason}")
            self.log.debug("agents removed", jobs=list(job_ids), reason=reason)
        except GatewayError as e:
            self.log.warning("agent removal failed", jobs=list(job_ids), error=str(e))

    async def _rescheduler(self) -> None:
        """§3.7 step 7: while agents wait for slots, ask for negotiation cycles. Right after
        agents were submitted, once at once and once more RESCHEDULE_FOLLOW_UP later: the first
        cycle often starts before the schedd's submitter ad shows the new idle jobs."""
        wait = self.config.reschedule_interval
        while True:
            with trio.move_on_after(wait):
                await self._wake_reschedule.wait()
            woken = self._wake_reschedule.is_set()
            self._wake_reschedule = trio.Event()
            wait = (
                min(RESCHEDULE_FOLLOW_UP, self.config.reschedule_interval)
                if woken
                else self.config.reschedule_interval
            )
            if any(c.state is ChefState.LAUNCHED for c in self.core.chefs):
                try:
                    await self.runner.reschedule()
                except GatewayError as e:
                    self.log.warning("reschedule failed", error=str(e))

    async def _poller(self) -> None:
        """§3.7: agents gone from the schedd queue. Jobs learned while the query ran count as
        alive (the answer may predate them)."""
        while True:
            await trio.sleep(self.config.queue_poll_interval)
            known = set(self.core.agent_job_ids())
            try:
                alive = await self.runner.alive(self.plan.info.master_id)
            except GatewayError as e:
                self.log.warning("queue poll failed", error=str(e))
                continue
            alive |= set(self.core.agent_job_ids()) - known
            self.feed(QueueSnapshot(frozenset(alive)))

    async def _saver(self) -> None:
        while True:
            await trio.sleep(SAVE_CHECK)
            if self.core.dirty and trio.current_time() - self.last_save >= self.config.state_save_interval:
                self.save()

    # ------------------------------------------------------------------ agents' connections

    async def _serve_listeners(self, listeners: list[trio.SocketListener], nursery: trio.Nursery) -> None:
        await trio.serve_listeners(self._serve_agent, listeners, handler_nursery=nursery)

    async def _serve_agent(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        self.counters["connections"] += 1
        conn: AgentConnection | None = None
        try:
            decoder = protocol.Decoder({protocol.HELLO})
            try:
                with trio.fail_after(self.handshake_timeout):
                    conn = await self._handshake(stream, decoder, peer)
            except trio.TooSlowError:
                self.counters["handshake_timeouts"] += 1
                self.log.warning("handshake timed out", peer=peer)
                return
            if conn is None:
                return
            await self._serve_connection(conn, decoder)
        except protocol.ProtocolError as e:
            self.counters["malformed"] += 1
            self.log.warning(
                "malformed message: connection dropped",
                peer=peer,
                agent=conn.agent if conn else None,
                error=str(e),
            )
            if conn is not None:
                self.feed(ConnectionBroken(conn.agent, f"protocol error: {e}"))
        except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            if conn is not None and conn.closing is None:
                reason = "agent closed the connection" if isinstance(e, _Closed) else f"connection lost: {e}"
                self.feed(ConnectionBroken(conn.agent, reason))
        except StateFileError:
            raise
        except Exception as e:  # a bug met on one connection must not stop the master
            self.counters["connection_errors"] += 1
            self.log.exception("connection failed", peer=peer, agent=conn.agent if conn else None)
            if conn is not None and conn.closing is None:
                self.feed(ConnectionBroken(conn.agent, f"master error: {type(e).__name__}: {e}"))
        finally:
            if conn is not None and self.conns.get(conn.agent) is conn:
                del self.conns[conn.agent]
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _read(self, stream: trio.SocketStream, decoder: protocol.Decoder) -> protocol.Message:
        while True:
            msg = decoder.next()
            if msg is not None:
                return msg
            data = await stream.receive_some(RECV_SIZE)
            if not data:
                decoder.eof()
                raise _Closed
            decoder.feed(data)

    async def _send(
        self, stream: trio.SocketStream, msg: dict[str, Any], blobs: list[bytes] | None = None
    ) -> None:
        for frame in protocol.encode_frames(msg, blobs):
            await stream.send_all(frame)

    async def _refuse(self, stream: trio.SocketStream, reason: str, counter: str, peer: str) -> None:
        self.counters[counter] += 1
        self.log.warning("agent refused", peer=peer, reason=reason)
        with trio.move_on_after(5):
            await self._send(stream, {"t": protocol.REFUSED, "reason": reason})

    async def _handshake(
        self, stream: trio.SocketStream, decoder: protocol.Decoder, peer: str
    ) -> AgentConnection | None:
        """protocol.py's handshake; an AgentConnection registered with the core, or None after
        a refusal."""
        hello = await self._read(stream, decoder)
        agent = hello.body["agent"]
        if hello.body["master"] != self.plan.info.master_id:
            await self._refuse(
                stream, f"this is master {self.plan.info.master_id}", "refused_wrong_master", peer
            )
            return None
        parsed = parse_agent_name(agent)
        if parsed is None:
            await self._refuse(stream, f"{agent!r} is not an agent name", "refused_unknown_agent", peer)
            return None
        nonce_m = protocol.make_nonce()
        mac_m = protocol.master_mac(self.secret, hello.body["nonce_a"], agent)
        await self._send(stream, {"t": protocol.CHALLENGE, "nonce_m": nonce_m, "mac_m": mac_m})
        decoder.allowed = frozenset({protocol.AUTH})
        auth = await self._read(stream, decoder)
        if not protocol.check_agent_mac(self.secret, nonce_m, agent, auth.body["mac_a"]):
            await self._refuse(stream, "authentication failed", "auth_failures", peer)
            return None
        decoder.allowed = frozenset({protocol.RESULT, protocol.BULK_READY})
        if agent in self.conns:
            await self._refuse(stream, "already connected", "refused_duplicate", peer)
            return None
        conn = AgentConnection(agent, parsed[1], peer, stream)
        self.conns[agent] = conn
        self.feed(AgentConnected(agent, peer.rsplit(":", 1)[0].strip("[]")))
        if conn.refusal is not None:
            del self.conns[agent]
            await self._refuse(stream, conn.refusal, "refused_by_chef", peer)
            return None
        self.log.info("agent connected", agent=agent, peer=peer)
        return conn

    async def _serve_connection(self, conn: AgentConnection, decoder: protocol.Decoder) -> None:
        welcome: dict[str, Any] = {"t": protocol.WELCOME, "window": self.config.window_size}
        if self.core.net.bulk_threshold > 0:
            welcome["bulk_threshold"] = self.core.net.bulk_threshold  # agents ask before large returns
        await self._send(conn.stream, welcome)
        failure: list[BaseException] = []

        async def guarded(part: Any, *args: Any) -> None:
            # The first failure of either half ends both; it is re-raised below as itself, not
            # wrapped in the nursery's ExceptionGroup, so _serve_agent can tell what happened.
            try:
                await part(conn, *args)
            except Exception as e:
                failure.append(e)
            nursery.cancel_scope.cancel()

        with conn.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(guarded, self._sender)
                nursery.start_soon(guarded, self._receiver, decoder)
        if failure:
            raise failure[0]

    async def _sender(self, conn: AgentConnection) -> None:
        async for action in conn.outbox:
            match action:
                case None:
                    await conn.stream.send_eof()
                    return
                case SendTasks(tasks=tasks):
                    for assignment in tasks:
                        await self._send_task(conn, assignment)
                case SendNoMoreTasks():
                    await self._send(conn.stream, {"t": protocol.NO_MORE_TASKS})
                case GrantBulk(process=process, attempt=attempt, rate_bps=rate_bps):
                    go: dict[str, Any] = {"t": protocol.BULK_GO, "process": process, "attempt": attempt}
                    if rate_bps > 0:
                        go["rate_bps"] = max(1, math.floor(rate_bps))  # the agent paces at this
                    await self._send(conn.stream, go)

    async def _send_task(self, conn: AgentConnection, assignment: Assignment) -> None:
        spec = self.plan.specs[assignment.process]
        task = task_of(spec, assignment.attempt)
        entries: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        if self.plan.transfer:
            private = self.plan.private_inputs(spec)
            if private:
                entries, blobs, notes = await trio.to_thread.run_sync(input_blobs, spec.initialdir, private)
                for note in notes:
                    self.log.warning("task input not readable", process=spec.process, note=note)
        msg: dict[str, Any] = {"t": protocol.TASK, "task": task}
        if entries:
            msg["files"] = entries
        try:
            frames = protocol.encode_frames(msg, blobs)
        except protocol.ProtocolError as e:
            # Too large to send (message or blob limit): the task fails as if it could not be
            # prepared, so it is retried and, past MAX_TASK_ATTEMPTS, failed for good.
            self.counters["unsendable_tasks"] += 1
            self.log.warning("task cannot be sent", process=spec.process, error=str(e))
            outcome = TaskOutcome(protocol.STATUS_PREPARE_FAILED, error=f"master cannot send the task: {e}")
            self.feed(ResultReceived(conn.agent, assignment.process, assignment.attempt, outcome))
            return
        pace = self.core.net.pace(assignment.process)
        start = time.time()
        written = [False]
        try:
            if pace is None:
                for frame in frames:
                    await conn.stream.send_all(frame)
                written[0] = True
            else:
                await self._send_paced(conn.stream, frames, pace, start, written)
        finally:
            # only a transfer that was written whole counts (a broken one ends with its agent)
            if entries and written[0]:
                nbytes = sum(e["size"] for e in entries)
                self.feed(TransferDone(conn.agent, assignment.process, IN, nbytes, start, time.time()))

    async def _send_paced(
        self, stream: trio.SocketStream, frames: list[bytes], pace: float, start: float, written: list[bool]
    ) -> None:
        """Write at most `pace` bits per second (the rate admission reserved for this transfer),
        so that a subnet's measured rate stays under its limit. Each chunk waits until the rate
        allows it, never after: no byte is ahead of the pace at any moment, and the last one
        leaves when the reservation's time is up. (Pausing after a chunk instead let the agent
        have a whole small input, run it and answer while the master still sat in its pause, so
        the result, not the transfer's end, freed the reservation, always for that agent.)"""
        total = sum(len(frame) for frame in frames)
        sent = 0
        for chunk, due in protocol.paced_chunks(frames, pace):
            wait = due - (time.time() - start)
            if wait > 0:
                await trio.sleep(wait)
            await stream.send_all(chunk)
            sent += len(chunk)
            written[0] = sent == total

    async def _receiver(self, conn: AgentConnection, decoder: protocol.Decoder) -> None:
        while True:
            msg = decoder.next()
            if msg is None:
                data = await conn.stream.receive_some(RECV_SIZE)
                if not data:
                    decoder.eof()
                    raise _Closed
                if decoder.idle:
                    conn.recv_started = time.time()
                decoder.feed(data)
                continue
            started = conn.recv_started if conn.recv_started is not None else time.time()
            conn.recv_started = None if decoder.idle else time.time()
            if msg.type == protocol.BULK_READY:
                self.counters["bulk_requests"] += 1
                body = msg.body
                self.feed(BulkReady(conn.agent, body["process"], body["attempt"], body["size"]))
                continue
            await self._on_result(conn, msg, started)

    async def _on_result(self, conn: AgentConnection, msg: protocol.Message, started: float) -> None:
        result = msg.result()
        if msg.files:
            nbytes = sum(e["size"] for e in msg.files)
            self.feed(TransferDone(conn.agent, result.process, OUT, nbytes, started, time.time()))
        self.counters["results"] += 1
        chef = self.core.chefs[conn.chef] if conn.chef < len(self.core.chefs) else None
        current = (
            chef is not None
            and chef.agent == conn.agent
            and chef.state is ChefState.RUNNING
            and self.core.book.check(conn.chef, result.process, result.attempt) is None
        )
        error = result.error
        if current and msg.files:
            spec = self.plan.specs[result.process]
            style = str(self.config.files_style_mode)
            try:
                await trio.to_thread.run_sync(place_outputs, spec, msg.file_pairs(), style)
            except (OutputPlacementError, OSError, ValueError) as e:
                self.counters["placement_errors"] += 1
                self.log.warning("output files not placed", process=result.process, error=str(e))
                error = f"{error + '; ' if error else ''}output files not placed: {e}"
        data = result.to_dict()
        data["error"] = error
        self.feed(ResultReceived(conn.agent, result.process, result.attempt, TaskOutcome.from_message(data)))


def _route_address() -> str | None:
    """The local address of the route to the collector (no packet is sent), a guess for
    machines where the schedd's address is not known."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9618))
            ip = s.getsockname()[0]
    except OSError:
        return None
    return ip if _usable(ip) else None


# --------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llic-master", description="An llic master (run by master_submitter)."
    )
    parser.add_argument("state_file", type=Path, help="the master's state file (master.<id>.state)")
    parser.add_argument("--host", help="the address agents connect to (default: the schedd's)")
    parser.add_argument("--port", type=int, help="first port to try (default INITIAL_MASTER_PORT_NUMBER)")
    parser.add_argument(
        "--agent-python", default=AGENT_PYTHON, help=f"python3 on execute machines (default {AGENT_PYTHON})"
    )
    parser.add_argument(
        "--local-agents",
        type=int,
        metavar="N",
        help="run up to N agents as local processes instead of HTCondor jobs (tests, benchmarks)",
    )
    return parser


async def _amain(args: argparse.Namespace, state: MasterState, plan: Plan) -> int:
    runner: AgentRunner
    if args.local_agents:
        runner = LocalAgents(plan.outdir / "local-agents", slots=args.local_agents, python=args.agent_python)
    else:
        runner = GatewayAgents(Gateway(), schedd_name=plan_schedd(state))
    try:
        master = Master(plan, state, runner, host=args.host, port=args.port, agent_python=args.agent_python)
        code = await master.run()
        summary = {"master": plan.info.master_id, "status": str(master.core.status)}
        print(json.dumps(summary | {"tasks": vars(master.core.book.counts())}), flush=True)  # master.out
        return code
    finally:
        with trio.CancelScope(shield=True):
            await runner.aclose()


def plan_schedd(state: MasterState) -> str | None:
    schedd = state.extra.get("schedd")
    return schedd if isinstance(schedd, str) else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from common.logging import configure_logging

    try:
        state, plan = load_plan(args.state_file)
    except (StateFileError, PlanError) as e:
        print(f"llic-master: error: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    level = "debug" if plan.config.llic_debug else "info"
    configure_logging("llic-master", plan.info.master_id, level=level, json=False)
    try:
        return trio.run(_amain, args, state, plan)
    except StateFileError as e:
        print(f"llic-master: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
