"""What an agent job is: its submit description, its directory and its input file.

Each agent is a vanilla job tagged `+LlicMaster = "<id>"` and `+LlicAgent = "<name>"` (so a
master can find and remove every agent of its own, also ones no state file knows), running
`python3 -I agent.pyz HOST PORT AGENT input.json`; PORT is `FIRST-LAST` for the agents
master_submitter submits with the master (prelaunched), which look for their master on that
range (it listens on the first free port of it) and know it by the run's secret, kept next to
the state file in a file only the user can read (`write_secret`). It inherits the user's requirements and
request_* (QueueBlock.agent_attributes) and transfers the agent zipapp, its input file (0600: it
holds the run's secret) and, in TRANSFER modes, the executable and the common inputs, which the
agent keeps for every task, and the private inputs of the tasks written into the input file
(INITIAL_JOBS_NUMBER). Blocking file work: the driver runs it in a thread.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llic import protocol
from llic.agent.inputfile import AgentInput, InitialTask
from llic.events import SubmitAgent
from llic.plan import Plan, common_names, input_blobs, source_path

AGENT_PYTHON = "/usr/bin/python3"
MASTER_ATTR = "LlicMaster"  # job attribute naming the master on every agent job
AGENT_ATTR = "LlicAgent"
CONDOR_STDOUT = "agent.out"
INPUT_FILE = "input.json"
CONNECT_TIMEOUT = 120.0  # seconds an agent keeps trying to reach its master
PORT_SPAN = 16  # ports a master may take from INITIAL_MASTER_PORT_NUMBER on, for prelaunched agents
SECRET_FILE = "agents.secret"  # in the master's output directory: the prelaunched agents' secret


@dataclass(frozen=True)
class AgentSetup:
    """What every agent of one run of a master gets: the zipapp, where to reach the master, the
    run's secret, and the python3 that runs it on the execute machine."""

    pyz: Path
    host: str
    port: int | str  # a port, or "FIRST-LAST" (prelaunched agents)
    secret: bytes
    python: str = AGENT_PYTHON


def agent_job(
    plan: Plan,
    agent: str,
    agent_dir: Path,
    pyz: Path,
    host: str,
    port: int | str,
    extra_inputs: Sequence[str] = (),
    agent_python: str = AGENT_PYTHON,
) -> dict[str, str]:
    """The submit description of one agent job (seed §3.4 1.d): the user's requirements and
    request_* (QueueBlock.agent_attributes), the agent zipapp and its input file, in TRANSFER
    modes the executable and the common inputs (cached by the agent for every task)."""
    inputs = [str(pyz), str(agent_dir / INPUT_FILE)]
    if plan.transfer:
        if plan.executable:
            inputs.append(plan.executable)
        inputs += [
            source_path(plan.common_dir, n) + ("/" if n.endswith("/") else "") for n in plan.common_inputs
        ]
    inputs += list(extra_inputs)
    desc = dict(plan.agent_attributes)
    desc.update(
        {
            "universe": "vanilla",
            "executable": agent_python,
            "transfer_executable": "false",
            "arguments": f"-I {pyz.name} {host} {port} {agent} {INPUT_FILE}",
            "initialdir": str(agent_dir),
            "should_transfer_files": "YES",
            "when_to_transfer_output": "ON_EXIT",
            "transfer_input_files": ", ".join(inputs),
            # Nothing but stdout and stderr comes back through HTCondor (results travel over the
            # agent's connection). Said explicitly: a job without TransferOutput gets back every
            # new or changed file, found by modification time, so its starter sleeps 1 s after
            # downloading the inputs before it starts the job (FileTransfer, time_t's 1 s grain).
            # An empty `transfer_output_files` leaves TransferOutput undefined; this sets it.
            "MY.TransferOutput": '""',
            "output": str(agent_dir / CONDOR_STDOUT),
            "error": str(agent_dir / "agent.err"),
            "log": str(plan.outdir / "agents.log"),
            f"MY.{MASTER_ATTR}": json.dumps(plan.info.master_id),
            f"MY.{AGENT_ATTR}": json.dumps(agent),
        }
    )
    return desc


def prepare_agent(plan: Plan, action: SubmitAgent, setup: AgentSetup) -> tuple[dict[str, str], list[str]]:
    """The agent's directory (made afresh) and input file, then its job description; with notes
    for the log on initial tasks' inputs that could not be read (the agent reports those tasks
    as prepare_failed)."""
    config = plan.config
    agent_dir = plan.outdir / "agents" / action.agent
    if agent_dir.exists():
        shutil.rmtree(agent_dir)
    agent_dir.mkdir(parents=True)
    initial: list[InitialTask] = []
    extra_inputs: list[str] = []
    notes: list[str] = []
    for assignment in action.initial:
        spec = plan.specs[assignment.process]
        pairs: list[tuple[str, str]] = []
        if plan.transfer:
            folder = f"init-{spec.process}"
            entries, blobs, unread = input_blobs(spec.initialdir, plan.private_inputs(spec))
            for entry, blob in zip(entries, blobs, strict=True):
                target = agent_dir / folder / entry["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blob)
                pairs.append((f"{folder}/{entry['path']}", entry["path"]))
            notes += [f"process {spec.process}: initial task input not readable: {note}" for note in unread]
            if entries:
                extra_inputs.append(str(agent_dir / folder))
        initial.append(InitialTask(spec.with_attempt(assignment.attempt), pairs))
    agent_input = AgentInput(
        master=plan.info.master_id,
        secret=setup.secret,
        window=config.window_size,
        mode=plan.mode,
        files_style=str(config.files_style_mode),
        executable=os.path.basename(plan.executable) if plan.transfer and plan.executable else None,
        common_files=common_names(plan.common_dir, plan.common_inputs) if plan.transfer else [],
        initial_tasks=initial,
        connect_timeout=CONNECT_TIMEOUT,
        debug=config.llic_debug,
    )
    fd = os.open(agent_dir / INPUT_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(agent_input.to_json(), fh)
    desc = agent_job(
        plan, action.agent, agent_dir, setup.pyz, setup.host, setup.port, extra_inputs, setup.python
    )
    return desc, notes


def write_secret(outdir: Path, secret: bytes) -> None:
    """The secret of prelaunched agents, for the master's first run: hex, mode 0600 (it lets
    whoever holds it give the user's agents tasks), created afresh."""
    path = outdir / SECRET_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret.hex() + "\n")


def read_secret(outdir: Path) -> bytes | None:
    """The secret `write_secret` left (None: no usable one)."""
    try:
        return protocol.secret_from_hex((outdir / SECRET_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
