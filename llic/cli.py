"""Command lines of llic: master_submitter, master_q, master_rm (masters: llic/master_rm.py; tasks:
the user's requests, llic/user_requests.py), master_release and master_hold; the master itself:
llic/master.py."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from common.condor import Gateway
    from llic.submit import SubmitFile

# what --dry-run prints of each task, in this order (a task's whole record is llic.task.Task)
DRY_RUN_FIELDS = (
    "executable",
    "arguments",
    "environment",
    "input",
    "output",
    "error",
    "initialdir",
    "transfer_input_files",
    "process",
    "cluster",
)


def master_submitter(argv: list[str] | None = None) -> int:
    """master_submitter [--dry-run] [--wait] FILE [CONFIG]: one master per queue statement of FILE.

    --dry-run submits nothing and prints one JSON object per task, in process order, resolved as
    `condor_submit -dry-run` would (first cluster 1). Without it, one master per queue statement
    is submitted in the scheduler universe (llic/submitter.py); --wait shows their progress.
    """
    from common.cli_style import new_parser

    prog = "master_submitter"
    parser = new_parser(
        prog,
        "Run an HTCondor submit file's jobs through llic: one master (a scheduler-universe job) per "
        "queue statement, which runs the tasks on a few agents.",
    )
    parser.add_argument("file", metavar="FILE", help="the HTCondor submit file")
    parser.add_argument(
        "config", metavar="CONFIG", nargs="?", help="llic_config file (else $LLIC_CONFIG_FILENAME)"
    )
    parser.add_argument("--dry-run", action="store_true", help="submit nothing; print each task as JSON")
    parser.add_argument("--wait", action="store_true", help="wait until every master has finished")
    parser.add_argument("-name", "--name", dest="schedd", help="the schedd to submit the masters to")
    parser.add_argument(
        "--master",
        help="the llic-master script the master job runs on the schedd's host "
        "(default: $LLIC_MASTER, else the one next to this Python)",
    )
    parser.add_argument(
        "--condor-config",
        help="CONDOR_CONFIG for the master on the schedd's host (default: the schedd's "
        "$(CONFIG_ROOT)/condor_config)",
    )
    args = parser.parse_args(argv)
    if not args.dry_run:
        return _submit(prog, args)
    return _dry_run(prog, args)


def _dry_run(prog: str, args: argparse.Namespace) -> int:
    """`--dry-run`: each task as JSON, resolved one at a time and printed at once, so that a
    100,000-task file costs no more memory than its items (condor_submit -dry-run streams too).
    The llic_config (and pydantic with it) is read only when one is named."""
    import json
    import os
    from pathlib import Path

    from llic.submit import SubmitFileError, parse_submit_file

    try:
        if args.config or os.environ.get("LLIC_CONFIG_FILENAME"):
            from common.config import ConfigError
            from llic.config import load_llic_config

            try:
                load_llic_config(Path(args.config) if args.config else None)
            except ConfigError as e:
                print(f"{prog}: error: {e}", file=sys.stderr)
                return 2
        submit = parse_submit_file(args.file, cwd=Path.cwd())
        for warning in submit.warnings:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        _print_ignored(prog, submit)
        write = sys.stdout.write
        for block in submit.blocks:
            for task in block.iter_tasks(1 + block.cluster_offset):
                data = task.to_dict()
                write(json.dumps({key: data[key] for key in DRY_RUN_FIELDS}) + "\n")
    except SubmitFileError as e:
        sys.stdout.flush()
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `| head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _print_ignored(prog: str, submit: SubmitFile) -> None:
    """One note per command llic ignores (notification, batch_name...), with why, on stderr."""
    from llic.submit.commands import ignored_commands

    seen: set[str] = set()
    for block in submit.blocks:
        for note in ignored_commands(block):
            if note not in seen:
                seen.add(note)
                print(f"{prog}: note: {note}", file=sys.stderr)


def _submit(prog: str, args: argparse.Namespace) -> int:
    """The real submission (llic/submitter.py): print each master and how to watch it.

    What the schedd waits for comes first, and the rest overlaps it (the first task runs
    seconds sooner for it): the gateway's worker (a Python loading HTCondor's bindings) starts
    before this process imports the submitter; while the worker finds the schedd, its
    configuration and the masters' token (`find_target`; the token comes from a tool, a process
    of its own, and is waited for only when the first master is released), a thread imports the
    submitter and reads the submit file, and another builds the agent zipapp into the user's
    cache (`agent_build.agent_cache_dir`) if it is not there."""
    import outcome
    import trio

    from common.condor import Gateway
    from llic.master_token import condor_tools

    async def run() -> int:
        # the second gateway only fetches the masters' token (a tool) while the first one works
        async with Gateway(tools=condor_tools()) as gw, Gateway(tools=condor_tools()) as token_gw:
            await gw.start()
            if args.schedd:
                await token_gw.start()
            result = await outcome.acapture(_submit_with, prog, args, gw, token_gw)
            return result.unwrap()  # raised here, not wrapped in an exception group

    try:
        _quiet_logging(prog)
        return trio.run(run)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if not isinstance(e, _submit_errors()):
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        from common.condor import GatewayError

        return 1 if isinstance(e, GatewayError) else 2


def _quiet_logging(prog: str) -> None:
    from common.logging import configure_logging

    configure_logging(prog, level="warning", json=False)  # the gateway's debug lines are not for users


def _submit_errors() -> tuple[type[Exception], ...]:
    """What a submission reports as one line (the user's file, config or pool), not a traceback."""
    from common.condor import GatewayError
    from common.config import ConfigError
    from llic.state import StateFileError
    from llic.submit import SubmitFileError
    from llic.submit_target import SubmitError

    return (SubmitFileError, ConfigError, SubmitError, StateFileError, GatewayError)


def _read_submit(prog: str, args: argparse.Namespace) -> SubmitFile:
    """Import the submitter (in the worker's start-up) and read the submit file."""
    from pathlib import Path

    import llic.submitter  # noqa: F401 (imported here, in this thread: seconds of the critical path)
    from llic.submit import parse_submit_file

    submit = parse_submit_file(args.file, cwd=Path.cwd())
    for warning in submit.warnings:
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    _print_ignored(prog, submit)
    return submit


async def _submit_with(prog: str, args: argparse.Namespace, gw: Gateway, token_gw: Gateway) -> int:
    import outcome
    import trio

    # the masters' token is fetched in `background` while the first master and its agents are
    # submitted (llic/submitter.py's module doc); a fetch no master waited for is cancelled
    async with trio.open_nursery() as background:
        done = await outcome.acapture(_submit_in, prog, args, gw, token_gw, background)
        background.cancel_scope.cancel()
    return done.unwrap()  # raised here, not in an exception group


async def _submit_in(
    prog: str, args: argparse.Namespace, gw: Gateway, token_gw: Gateway, background: trio.Nursery
) -> int:
    from pathlib import Path

    import outcome
    import trio

    from llic.agent_build import agent_cache_dir, cached_agent
    from llic.config import load_llic_config
    from llic.submit_target import find_target  # light: before the thread imports the submitter

    config = load_llic_config(Path(args.config) if args.config else None).resolved(Path.cwd())
    cache = agent_cache_dir()
    found: list[outcome.Outcome] = []

    async def find() -> None:
        try:
            found.append(
                outcome.Value(
                    await find_target(
                        gw,
                        config,
                        schedd_name=args.schedd,
                        condor_config=args.condor_config,
                        token_gw=token_gw,
                        background=background,
                    )
                )
            )
        except Exception as e:
            found.append(outcome.Error(e))

    def prebuild() -> None:
        try:
            if cache is not None:
                cached_agent(cache)
        except Exception:  # the real build (llic/submitter.py) tries again and reports
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(find)
        nursery.start_soon(trio.to_thread.run_sync, prebuild)
        read = await outcome.acapture(trio.to_thread.run_sync, _read_submit, prog, args)
        if isinstance(read, outcome.Error):
            nursery.cancel_scope.cancel()
    submit = read.unwrap()
    target = found[0].unwrap()

    from llic.submitter import default_master, submit_masters, wait_masters

    masters = await submit_masters(
        submit,
        config,
        gw,
        master=args.master or default_master(),
        target=target,
        agent_cache=cache,
    )
    for m in masters:
        with_agents = f", {m.agents} agents with it" if m.agents else ""
        with_agents += ", holding its owner's token" if m.token else ""
        print(
            f"master {m.master_id} (job {m.job_id}{with_agents}): {m.tasks} tasks of queue statement "
            f"{m.block} (line {m.line}); state file {m.state_path}; watch: master_q {m.state_path}",
            flush=True,
        )
    if args.wait:
        return await wait_masters(masters, gw, args.schedd)
    return 0


def master_q(argv: list[str] | None = None) -> int:
    """master_q: how far llic masters have got (llic/master_q.py)."""
    from llic.master_q import main

    return main(argv)


def _request_parser(action: str, prog: str) -> argparse.ArgumentParser:
    from pathlib import Path

    from common.cli_style import new_parser

    verb = {"release": "release held", "remove": "remove", "hold": "hold"}[action]
    parser = new_parser(
        prog,
        f"Ask an llic master to {verb} tasks (as condor_{'rm' if action == 'remove' else action} "
        "does jobs); without PROCESS, every task it applies to.",
    )
    parser.add_argument("state_file", metavar="STATE_FILE", type=Path, help="the master's master.<id>.state")
    parser.add_argument("processes", metavar="PROCESS", type=int, nargs="*", help="task process numbers")
    parser.add_argument(
        "-reason", "--reason", help=f"the reason the job event log records (default: via {prog})"
    )
    return parser


def _request(action: str, prog: str, argv: list[str] | None) -> int:
    """master_release / master_hold: ask a master to act on its tasks."""
    args = _request_parser(action, prog).parse_args(argv)
    return ask_master(action, prog, args.state_file, args.processes, args.reason)


def ask_master(action: str, prog: str, state_file: Path, processes: list[int], reason: str | None) -> int:
    """Write a request for the master whose state file this is (llic/user_requests.py)."""
    from llic.state import StateFileError, load_state
    from llic.taskbook import TaskState
    from llic.user_requests import Request, write_request

    try:
        state = load_state(state_file)
    except StateFileError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    known = {t.process: t.state for t in state.tasks}
    unknown = [p for p in processes if p not in known]
    if unknown:
        print(f"{prog}: error: master {state.info.master_id} has no process {unknown[0]}", file=sys.stderr)
        return 2
    applies = {
        "release": (TaskState.HELD,),
        "remove": (TaskState.QUEUED, TaskState.RUNNING, TaskState.HELD),
        "hold": (TaskState.QUEUED, TaskState.RUNNING),
    }[action]
    chosen = processes or [p for p, st in known.items() if st in applies]
    matching = [p for p in chosen if known[p] in applies]
    path = write_request(
        state_file.parent, Request(action, tuple(processes) or None, reason or f"via {prog}")
    )
    others = len(chosen) - len(matching)
    skipped = f" ({others} others are not in a state it applies to)" if others else ""
    print(
        f"master {state.info.master_id}: asked to {action} {len(matching)} task(s){skipped}; "
        f"the master acts on {path.name} within seconds while it runs"
    )
    return 0


def master_release(argv: list[str] | None = None) -> int:
    """master_release STATE_FILE [PROCESS ...]: release held tasks (condor_release)."""
    return _request("release", "master_release", argv)


def master_rm(argv: list[str] | None = None) -> int:
    """master_rm MASTER_ID|CLUSTER ...: cancel masters and their agents (as condor_rm CLUSTER);
    master_rm STATE_FILE [PROCESS ...]: remove tasks (as condor_rm CLUSTER.PROC). llic/master_rm.py."""
    from llic.master_rm import main

    return main(argv)


def master_hold(argv: list[str] | None = None) -> int:
    """master_hold STATE_FILE [PROCESS ...]: hold tasks (condor_hold)."""
    return _request("hold", "master_hold", argv)
