"""Command lines of llic: master_submitter, master_q and master_rm (the master itself: llic/master.py)."""

from __future__ import annotations

import argparse
import sys

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
    import json
    import os
    from pathlib import Path

    from common.cli import new_parser
    from common.config import ConfigError
    from llic.config import load_llic_config
    from llic.submit import SubmitFileError, parse_submit_file

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
    try:
        load_llic_config(Path(args.config) if args.config else None)
        submit = parse_submit_file(args.file, cwd=Path.cwd())
        for warning in submit.warnings:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        for block in submit.blocks:
            for task in block.tasks(1 + block.cluster_offset):
                data = task.to_dict()
                print(json.dumps({key: data[key] for key in DRY_RUN_FIELDS}))
    except (SubmitFileError, ConfigError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `| head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _submit(prog: str, args: argparse.Namespace) -> int:
    """The real submission (llic/submitter.py): print each master and how to watch it."""
    from pathlib import Path

    import trio

    from common.condor import Gateway, GatewayError
    from common.config import ConfigError
    from common.logging import configure_logging
    from llic.config import load_llic_config
    from llic.state import StateFileError
    from llic.submit import SubmitFileError, parse_submit_file
    from llic.submitter import SubmitError, default_master, submit_masters, wait_masters

    configure_logging(prog, level="warning", json=False)  # the gateway's debug lines are not for users

    async def run() -> int:
        config = load_llic_config(Path(args.config) if args.config else None).resolved(Path.cwd())
        submit = parse_submit_file(args.file, cwd=Path.cwd())
        for warning in submit.warnings:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        async with Gateway() as gw:
            masters = await submit_masters(
                submit,
                config,
                gw,
                schedd_name=args.schedd,
                master=args.master or default_master(),
                condor_config=args.condor_config,
            )
            for m in masters:
                print(
                    f"master {m.master_id} (job {m.job_id}): {m.tasks} tasks of queue statement "
                    f"{m.block} (line {m.line}); state file {m.state_path}; watch: master_q {m.state_path}",
                    flush=True,
                )
            if args.wait:
                return await wait_masters(masters, gw, args.schedd)
        return 0

    try:
        return trio.run(run)
    except (SubmitFileError, ConfigError, SubmitError, StateFileError, GatewayError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2 if not isinstance(e, GatewayError) else 1
    except KeyboardInterrupt:
        return 130


def master_q(argv: list[str] | None = None) -> int:
    """master_q: how far llic masters have got (llic/master_q.py)."""
    from llic.master_q import main

    return main(argv)


def master_rm(argv: list[str] | None = None) -> int:
    """master_rm: cancel llic masters and their agents (llic/master_rm.py)."""
    from llic.master_rm import main

    return main(argv)
