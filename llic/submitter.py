"""master_submitter (seed §3.6): one llic master per queue statement, each a scheduler-universe job,
and its first agents with it.

For each queue block of the user's submit file:

1. A master id (time, pid, block: unique, and usable in file names) and its output directory
   (`state.master_output_dir` under MASTER_OUTPUTS_DIR_PREFIX_PATH) holding the block's
   self-contained submit description (`QueueBlock.submit_text`) and the initial state file,
   written atomically before anything is submitted.
2. The master's first agents, in one cluster (`MasterCore.prelaunch`: as many as the pool has
   matching slots, MAX_CHEFS_NUMBER at most), submitted not on hold and before the master job,
   with a reschedule: every submission starts a queue scan, whose reschedule starts a
   negotiation cycle, and the negotiator starts no other one for NEGOTIATOR_CYCLE_DELAY (whole
   seconds) after a cycle; a cycle that finds the agents held (as they were, submitted after the
   held master and released with it) kept them 1-2.4 s from their slots (NegotiatorLog, load
   ~5). So the agents are idle from the first scan, whose cycle matches them; the master starts
   at the next scan (SCHEDD_MIN_INTERVAL later), while they are claiming their slots and
   starting. They know the run's secret (agents.secret, 0600, for the master) and look for their
   master on the schedd's address, on the PORT_SPAN ports from INITIAL_MASTER_PORT_NUMBER (it
   listens on the first free one; they retry until it does); the state file names every one of
   them (saved before the master job exists, so before it can start). Run as root,
   master_submitter first hands the directory to the user the schedd authenticates it as
   (condor_ping's identity: the jobs' owner; the shadows read the agents' input files as that
   user). Only when the submit description names no cluster (`$(Cluster)`: the master job's,
   not known yet) and, as root, that user is a local one other than root; otherwise the agents
   come after the master job, on hold, and are released with it (step 4). Not done at all when
   INITIAL_MASTER_PORT_NUMBER is 0 (any port: the agents could not find it) or the schedd's
   address is not one execute machines reach; the master then submits its agents itself.
3. The master job, submitted through the gateway on hold (tasks submitted on hold, `hold =
   true`, are held in the initial state file): universe scheduler (so HTCondor never
   evacuates it, and re-runs it when it fails, seed §3.2), `llic-master STATE_FILE`.
   `on_exit_remove` lets it leave the queue only after exit status 0; killed by a signal or
   exiting with any other status it is run again and resumes from its state file. Exit statuses
   2 (state file or description unusable) and 3 (gave up), and a 20th run, hold it instead, with
   the reason in HoldReason, so a master that cannot succeed is not restarted forever. Its
   `OtherJobRemoveRequirements` names its agents (`LlicMaster`): removing the master removes
   them, whatever state it is in (before it exists, a failed submission removes them itself).
   The state file is rewritten with the job's cluster (the tasks' `$(Cluster)`, as
   condor_submit would give them). The tasks' job event logs get their submit events (000,
   under cluster.process).
4. The directory is handed to the job's owner when master_submitter runs as root (the sandbox's
   clients claim to be its unprivileged user: HTCondor runs no job as root), and the master (with
   its agents when they were held) is released, and the schedd is asked to reschedule, as
   condor_submit does after a submit: a negotiation cycle and a queue scan (which starts
   scheduler-universe jobs) now, not at the next interval; and once more shortly after
   (`_follow_up`), since the first cycle often misses agents released then.

The submitting user's token for the masters is fetched once from the schedd
(`condor_token_fetch`, READ and WRITE, MASTER_TOKEN_LIFETIME seconds; in the sandbox a wrapper
and a chroot, 0.8-1.2 s at load 8-10, the last of master_submitter's look-ups) while the first
master's agents and the master are submitted, and written into each master's output directory
(0700/0600) before step 4 releases it: the master presents it, since a job cannot always
authenticate as its owner by FS (llic/master_token.py). master_submitter runs
HTCondor's tools from PATH, or with the command prefix $LLIC_CONDOR_TOOLS.

Scheduler-universe jobs get no CONDOR_CONFIG from HTCondor (their environment is the job's own
plus `_condor_SCHEDD_ADDRESS_FILE`, `_CONDOR_JOB_AD` and similar), so the master job is given
`CONDOR_CONFIG` explicitly: `--condor-config`, else `$(CONFIG_ROOT)/condor_config` as the schedd
itself reports CONFIG_ROOT (the directory of the configuration file it was started with).

The master job runs the `llic-master` script given by `--master` (default $LLIC_MASTER, else
the one next to this Python): on a real submit host that is the same /opt/condor-selforg venv
master_submitter runs from; in the sandbox it is the venv `deploy/sandbox install-selforg` makes
inside the root. The script, not `python -m`: the schedd starts a job with only the executable's
base name as argv[0], and a venv's python started that way does not find its venv.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import re
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio

from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError
from llic import protocol
from llic.agent_build import build_agent
from llic.agent_job import MASTER_ATTR, PORT_SPAN, AgentSetup, prepare_agent, write_secret
from llic.config import LlicConfig
from llic.eventlog import append_events, log_path, submit_event
from llic.events import AgentSubmitted, SubmitAgent
from llic.master_core import MasterStatus
from llic.master_token import TOOLS_ENV, condor_tools, remove_token, write_token  # noqa: F401 (re-exported)
from llic.plan import make_plan
from llic.runners import matching_slots
from llic.state import (
    MasterInfo,
    MasterState,
    StateFileError,
    initial_state,
    load_state,
    master_output_dir,
    restore,
    save_state,
    snapshot,
    state_file_name,
)
from llic.submit import QueueBlock, SubmitFile
from llic.submit_target import SubmitError, Target, find_target

MASTER_MAX_RUNS = 20  # runs before HTCondor holds a master that keeps failing
MASTER_ENV = "LLIC_MASTER"
EXIT_UNUSABLE = 2
FOLLOW_UP_AFTER = 0.3  # seconds from the release's reschedule to the follow-up (_follow_up)
EXIT_GAVE_UP = 3
# a submit description that uses the cluster ($(Cluster), $(ClusterId), $INT(Cluster)...): its
# agents wait for the master's (module doc, step 2)
_CLUSTER = re.compile(r"\$[a-z]*\(\s*cluster", re.IGNORECASE)


@dataclass
class SubmittedMaster:
    """One master master_submitter submitted: its id, job, queue statement, task count and state file."""

    master_id: str
    job_id: str
    block: int
    line: int
    tasks: int
    state_path: Path
    agents: int = 0  # submitted with it (0: the master submits its own)
    token: bool = False  # the master holds its owner's token (llic/master_token.py)


def quote_arguments(args: list[str]) -> str:
    """HTCondor's new argument syntax: the whole in double quotes, each argument in single
    quotes (a quote inside doubled), so paths with spaces survive."""
    parts = ["'" + a.replace("'", "''").replace('"', '""') + "'" for a in args]
    return '"' + " ".join(parts) + '"'


def quote_environment(env: dict[str, str]) -> str:
    """An environment as the submit language's new syntax quotes it (`"A='x' B='y'"`)."""
    parts = [f"{k}='" + v.replace("'", "''").replace('"', '""') + "'" for k, v in env.items()]
    return '"' + " ".join(parts) + '"'


def new_master_id(block: int) -> str:
    """Unique per submission and usable in a file name: local time, pid, queue statement."""
    return f"{time.strftime('%Y%m%d%H%M%S')}.{os.getpid()}.{block}"


def master_job(
    state_path: Path,
    *,
    master: str,
    condor_config: str | None,
    batch_name: str,
) -> dict[str, str]:
    """The master's submit description (seed §3.6)."""
    outdir = state_path.parent
    master_id = state_path.name.removeprefix("master.").removesuffix(".state")
    desc = {
        "universe": "scheduler",
        "executable": master,
        "arguments": quote_arguments([str(state_path)]),
        "initialdir": str(outdir),
        "output": str(outdir / "master.out"),
        "error": str(outdir / "master.err"),
        "log": str(outdir / "master.log"),
        "batch_name": json.dumps(batch_name),
        "hold": "true",
        # Leave the queue only after exit 0; a signal or another status re-runs the master,
        # except the ones that say a re-run cannot help (then: held, with the reason).
        "on_exit_remove": "(ExitBySignal =?= false) && (ExitCode =?= 0)",
        "on_exit_hold": (
            f"((ExitBySignal =?= false) && (ExitCode =?= {EXIT_UNUSABLE} || ExitCode =?= {EXIT_GAVE_UP}))"
            f" || (JobRunCount >= {MASTER_MAX_RUNS})"
        ),
        "on_exit_hold_reason": (
            f'ifThenElse(ExitCode =?= {EXIT_UNUSABLE}, "llic master: unusable state file or submit '
            f'description (see master.err)", ifThenElse(ExitCode =?= {EXIT_GAVE_UP}, "llic master gave up: '
            f'every agent failed (see master.err)", "llic master failed {MASTER_MAX_RUNS} times"))'
        ),
        "MY.LlicMasterId": json.dumps(master_id),
        # removing the master removes its agents too, also while it is idle or held
        "MY.OtherJobRemoveRequirements": json.dumps(f"{MASTER_ATTR} =?= {json.dumps(master_id)}"),
    }
    if condor_config:
        desc["environment"] = quote_environment({"CONDOR_CONFIG": condor_config})
    return desc


async def _release(gw: Gateway, schedd: DaemonRef, clusters: list[int]) -> None:
    await gw.call(
        "act",
        action="release",
        constraint=" || ".join(f"ClusterId == {c}" for c in clusters),
        reason="llic master_submitter: state file ready",
        schedd=schedd.model_dump(mode="json", exclude_none=True),
        collector=gw.collector,
    )
    try:  # module doc, step 4; only sooner: the next interval does the same
        await gw.reschedule(schedd=schedd)
    except GatewayError:
        pass


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for root, dirs, files in os.walk(path):
        os.chown(root, uid, gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


async def submit_masters(
    submit: SubmitFile,
    config: LlicConfig,
    gw: Gateway,
    *,
    schedd_name: str | None = None,
    master: str,
    condor_config: str | None = None,
    target: Target | None = None,
    agent_cache: Path | None = None,
) -> list[SubmittedMaster]:
    """Submit one master per queue block; see the module doc. `target`: as `find_target` found
    it (else found here); `agent_cache`: where the agent zipapp is built once (`agent_build`)."""
    if target is None:
        target = await find_target(gw, config, schedd_name=schedd_name, condor_config=condor_config)
    prefix = config.master_outputs_dir_prefix_path
    if prefix.endswith("/"):
        Path(prefix).mkdir(parents=True, exist_ok=True)
    submitted: list[SubmittedMaster] = []
    for block in submit.blocks:
        submitted.append(await _submit_one(submit, block, config, gw, master, target, agent_cache))
    if any(m.agents for m in submitted):
        await _follow_up(gw, target.schedd)
    return submitted


async def _follow_up(gw: Gateway, schedd: DaemonRef) -> None:
    """One more reschedule, FOLLOW_UP_AFTER seconds after the release's (module doc, step 4):
    the negotiation cycle the first one starts often queries the collector before the schedd's
    submitter ad shows the agents as idle, and finds nothing to match; the agents then waited for
    the next periodic cycle (up to NEGOTIATOR_INTERVAL). The schedd runs the scan this one asks
    for no sooner than SCHEDD_MIN_INTERVAL after the last; the ad is there by then."""
    await trio.sleep(FOLLOW_UP_AFTER)
    try:
        await gw.reschedule(schedd=schedd)
    except GatewayError:
        pass


async def _submit_one(
    submit: SubmitFile,
    block: QueueBlock,
    config: LlicConfig,
    gw: Gateway,
    master: str,
    target: Target,
    agent_cache: Path | None,
) -> SubmittedMaster:
    schedd, agent_host = target.schedd, target.agent_host
    prefix = config.master_outputs_dir_prefix_path
    master_id = new_master_id(block.index)
    outdir = master_output_dir(prefix, master_id)
    n = 1
    while True:
        try:
            outdir.mkdir(parents=False)
            break
        except FileExistsError:
            n += 1
            master_id = f"{new_master_id(block.index)}-{n}"
            outdir = master_output_dir(prefix, master_id)
        except OSError as e:
            raise SubmitError(f"cannot create {outdir}: {e.strerror or e}") from None
    state_path = outdir / state_file_name(master_id)
    sub_path = outdir / f"master.{master_id}.sub"
    sub_path.write_text(block.submit_text())
    processes: list[int] = []
    held: list[int] = []
    logs: dict[int, tuple[str, str]] = {}  # process -> (its job event log, the submit event's notes)
    for task in block.iter_tasks(1 + block.cluster_offset):
        processes.append(task.process)
        if task.hold:
            held.append(task.process)
        if task.log:
            logs[task.process] = (
                log_path(task.initialdir, task.log),
                task.policy.get("SubmitEventNotes", ""),
            )
    # The tasks' $(Cluster) is the master job's cluster, known once it is submitted (below).
    info = MasterInfo(master_id, _whoami(), 0, str(sub_path), block.index)
    state = initial_state(info, config, processes, time.time(), held=held)
    state.extra = {"schedd": schedd.name, "submit_file": submit.path, "line": block.line}
    save_state(state_path, state)
    prelaunch = agent_host is not None and bool(config.initial_master_port_number)
    # agents first (module doc, step 2) when they do not depend on the master's cluster and, run
    # as root, the directory can be handed to the jobs' owner before they exist
    first = prelaunch and not uses_cluster(block.submit_text())
    owner_ids = await _owner_ids(gw, schedd) if first and os.geteuid() == 0 else None
    first = first and (owner_ids is not None or os.geteuid() != 0)
    desc = master_job(
        state_path,
        master=master,
        condor_config=target.condor_config,
        batch_name=f"llic {os.path.basename(submit.path)}#{block.index}",
    )
    job_id: str | None = None
    agents = 0
    token: str | None = None
    try:
        clusters: list[int] = []
        if first:
            assert agent_host is not None  # `first` implies it
            state, _, agents = await _prelaunch(
                gw, schedd, state_path, state, config, block, agent_host, agent_cache, held=False,
                owner_ids=owner_ids,
            )  # fmt: skip
            save_state(state_path, state)  # names the agents before the master job exists
        result = await gw.submit(desc, schedd=schedd)  # on hold until the state file is complete
        job_id = f"{result.cluster}.{result.first_proc}"
        clusters.append(result.cluster)
        (owner_ad,) = await gw.query_jobs(f"ClusterId == {result.cluster}", ["Owner"], schedd=schedd)
        owner = str(owner_ad.get("Owner") or info.owner)
        if owner_ids is not None and _ids(owner) != owner_ids:
            raise SubmitError(f"the schedd made {owner!r} the master job's owner, not the identity it named")
        state = replace(state, info=replace(state.info, cluster=result.cluster, owner=owner))
        if prelaunch and not first:
            state, agent_cluster, agents = await _prelaunch(
                gw, schedd, state_path, state, config, block, agent_host, agent_cache
            )
            if agent_cluster is not None:
                clusters.append(agent_cluster)
        save_state(state_path, state)
        written = await trio.to_thread.run_sync(_write_submit_events, logs, result.cluster)
        token = await target.token.wait()  # fetched meanwhile: the master cannot run before
        if token is not None:
            write_token(outdir, token)  # handed to the owner with outdir below
        if os.geteuid() == 0 and owner != "root":
            pw_uid, pw_gid = _ids(owner) or (None, None)
            if pw_uid is None or pw_gid is None:
                raise SubmitError(f"the master job's owner {owner!r} is not a user here")
            _chown_tree(outdir, pw_uid, pw_gid)
            for path in written:  # the master, running as the owner, appends to them
                os.chown(path, pw_uid, pw_gid)
        await _release(gw, schedd, clusters)
    except BaseException:
        remove_token(outdir)
        with trio.CancelScope(shield=True):
            reason = "llic master_submitter failed before releasing it"
            for jobs in ([job_id] if job_id else [], f"{MASTER_ATTR} =?= {json.dumps(master_id)}"):
                if not jobs:
                    continue
                try:
                    await gw.remove_jobs(jobs, reason, schedd=schedd)
                except GatewayError:
                    pass
        raise
    assert job_id is not None  # submitted, or raised above
    return SubmittedMaster(
        master_id, job_id, block.index, block.line, len(processes), state_path, agents, token is not None
    )


async def _prelaunch(
    gw: Gateway,
    schedd: DaemonRef,
    state_path: Path,
    state: MasterState,
    config: LlicConfig,
    block: QueueBlock,
    host: str,
    agent_cache: Path | None = None,
    *,
    held: bool = True,
    owner_ids: tuple[int, int] | None = None,
) -> tuple[MasterState, int | None, int]:
    """The master's first agents (module doc, step 2), submitted in one cluster, on hold unless
    `held` is False (then with the output directory handed to `owner_ids` first, when given): the
    state to save (naming them), their cluster and how many. None and 0 when the pool's slots
    cannot be counted or the agents' descriptions do not fit one cluster (the master then
    starts its own)."""
    plan = await trio.to_thread.run_sync(make_plan, state_path, state.info, config, block)
    try:
        slots = await matching_slots(gw, plan.agent_attributes)
    except GatewayError:
        return state, None, 0
    now = time.time()
    core = restore(state, config)  # every task queued, those submitted on hold held
    launches = [a for a in core.prelaunch(slots, now).actions if isinstance(a, SubmitAgent)]
    if not launches:
        return state, None, 0
    secret = protocol.make_secret()
    write_secret(plan.outdir, secret)
    first = config.initial_master_port_number
    ports = [first, min(first + PORT_SPAN - 1, 65535)]
    pyz = await trio.to_thread.run_sync(functools.partial(build_agent, plan.outdir, cache=agent_cache))
    setup = AgentSetup(pyz, host, f"{ports[0]}-{ports[1]}", secret)
    descriptions = [(await trio.to_thread.run_sync(prepare_agent, plan, a, setup))[0] for a in launches]
    description = _by_process(descriptions, [a.agent for a in launches])
    if description is None:
        return state, None, 0
    if held:
        description["hold"] = "true"  # released with the master, once the state file names them
    elif owner_ids is not None:  # the shadows read the agents' input files as the owner
        await trio.to_thread.run_sync(_chown_tree, plan.outdir, *owner_ids)
    result = await gw.submit(description, count=len(launches), schedd=schedd)
    if not held:  # as condor_submit does: a negotiation cycle now, not at the next interval
        try:
            await gw.reschedule(schedd=schedd)
        except GatewayError:
            pass
    for i, launch in enumerate(launches):
        core.handle(AgentSubmitted(launch.agent, f"{result.cluster}.{result.first_proc + i}"), now)
    extra = dict(state.extra, prelaunch={"host": host, "ports": ports, "cluster": result.cluster})
    return snapshot(core, state.info, now, extra), result.cluster, len(launches)


async def _owner_ids(gw: Gateway, schedd: DaemonRef) -> tuple[int, int] | None:
    """The uid and gid of the user the schedd will make the owner of what we submit (the identity
    it authenticates us as, `user@domain`), for master_submitter run as root; None when it names
    none that is a user here."""
    try:
        check = await gw.ping(schedd, "WRITE")
    except GatewayError:
        return None
    if not check.authorized or not check.identity:
        return None
    return _ids(check.identity.split("@", 1)[0])


def _ids(user: str) -> tuple[int, int] | None:
    """A local user's uid and gid (None: no such user, or root: HTCondor runs no job as root)."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    return None if pw.pw_uid == 0 else (pw.pw_uid, pw.pw_gid)


def uses_cluster(description: str) -> bool:
    """Whether a submit description uses the cluster (`$(Cluster)`, `$(ClusterId)`,
    `$INT(Cluster)`...): then its agents are submitted after the master job, whose cluster it is
    (module doc, step 2)."""
    return _CLUSTER.search(description) is not None


def _by_process(descriptions: list[dict[str, str]], agents: list[str]) -> dict[str, str] | None:
    """One submit description for the agents `agents` (chefs 0, 1, ... of launch 1, as procs 0,
    1, ... of one cluster): the first one's, its agent's name written with `$(Process)`. Checked
    against every description; None if one differs elsewhere (a path that happens to hold the
    first agent's name)."""
    run, _, launch = agents[0].split(".")
    pattern = f"{run}.$(Process).{launch}"
    generic = {k: v.replace(agents[0], pattern) for k, v in descriptions[0].items()}
    for process, (agent, description) in enumerate(zip(agents, descriptions, strict=True)):
        if agent != f"{run}.{process}.{launch}" or description != {
            k: v.replace(pattern, agent) for k, v in generic.items()
        }:
            return None
    return generic


def _write_submit_events(logs: dict[int, tuple[str, str]], cluster: int) -> list[str]:
    """The job event logs' submit events (000), as the schedd writes them when condor_submit
    queues the jobs; returns the logs written. A log that cannot be written stops the submission
    (condor_submit too refuses a log it cannot write)."""
    host = f"<{socket.gethostname()}>"
    now = time.time()
    texts: dict[str, list[str]] = {}
    for process, (path, notes) in logs.items():
        texts.setdefault(path, []).append(submit_event(cluster, process, now, host, notes))
    problems = append_events(texts)
    if problems:
        raise SubmitError(f"cannot write the job event log {problems[0]}")
    return list(texts)


def _whoami() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


# --------------------------------------------------------------------------------------------
# --wait


@dataclass
class _Watch:
    master: SubmittedMaster
    state: MasterState | None = None
    problem: str | None = None


async def wait_masters(
    masters: list[SubmittedMaster], gw: Gateway, schedd_name: str | None, *, poll: float = 1.0
) -> int:
    """A live progress bar (rich) until every master has finished; 0 if all tasks are done.

    Progress comes from the state files (as master_q reads them); the queue is checked too, so
    that a held master (its HoldReason says why) or one that left the queue ends the wait."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    watches = [_Watch(m) for m in masters]
    schedd = DaemonRef(kind=DaemonKind.SCHEDD, name=schedd_name) if schedd_name else None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
    )
    last_queue = -1e9
    with Progress(*columns, console=console) as progress:
        bars = [
            progress.add_task(f"master {w.master.master_id}", total=w.master.tasks, note="") for w in watches
        ]
        while True:
            for w, bar in zip(watches, bars, strict=True):
                try:
                    w.state = await trio.to_thread.run_sync(load_state, w.master.state_path)
                except StateFileError as e:
                    w.problem = str(e)
                    continue
                c = w.state.counts()
                note = f"{c.running} running, {c.failed} failed" if c.failed else f"{c.running} running"
                progress.update(bar, completed=c.done + c.failed, note=f"{note}, {w.state.status}")
            if all(w.state is not None and w.state.status is not MasterStatus.RUNNING for w in watches):
                break
            if trio.current_time() - last_queue >= 5 * poll:
                last_queue = trio.current_time()
                if await _queue_problems(gw, schedd, watches):
                    break
            await trio.sleep(poll)
    code = 0
    for w in watches:
        if w.state is not None and w.state.status is not MasterStatus.RUNNING:
            c = w.state.counts()
            print(f"master {w.master.master_id}: {w.state.status}: {c}")
            if w.state.status is not MasterStatus.DONE or c.failed:
                code = 1
        else:
            print(f"master {w.master.master_id}: {w.problem or 'not finished'}", file=sys.stderr)
            code = 1
    return code


async def _queue_problems(gw: Gateway, schedd: DaemonRef | None, watches: list[_Watch]) -> bool:
    """Note masters that are held or gone; True when none is left running."""
    clusters = " || ".join(f"ClusterId == {w.master.job_id.split('.')[0]}" for w in watches)
    try:
        jobs = await gw.query_jobs(clusters, ["ClusterId", "JobStatus", "HoldReason"], schedd=schedd)
    except GatewayError as e:
        print(f"master_submitter: queue not readable: {e}", file=sys.stderr)
        return False
    by_cluster: dict[str, dict[str, Any]] = {str(j["ClusterId"]): j for j in jobs}
    running = 0
    for w in watches:
        job = by_cluster.get(w.master.job_id.split(".")[0])
        finished = w.state is not None and w.state.status is not MasterStatus.RUNNING
        if job is None and not finished:
            w.problem = f"job {w.master.job_id} left the queue before finishing (removed?)"
        elif job is not None and job.get("JobStatus") == 5:
            w.problem = f"job {w.master.job_id} is held: {job.get('HoldReason')}"
        elif not finished:
            running += 1
    return running == 0


def default_master() -> str:
    """The llic-master to submit: $LLIC_MASTER, else the one beside this Python."""
    return os.environ.get(MASTER_ENV) or str(Path(sys.executable).parent / "llic-master")
