"""Command lines of llic (reserved: they arrive with the llic issue)."""

from __future__ import annotations

import argparse
import sys


def _reserved(prog: str, argv: list[str] | None) -> int:
    argparse.ArgumentParser(prog=prog).parse_known_args(argv)
    print(f"{prog}: not implemented yet in this release", file=sys.stderr)
    return 2


def master_submitter(argv: list[str] | None = None) -> int:
    """master_submitter [--dry-run] [--wait] FILE [CONFIG]: one master per queue statement of FILE.

    --dry-run submits nothing and prints one JSON object per task, in process order, resolved as
    `condor_submit -dry-run` would (first cluster 1); real submission is not implemented yet.
    """
    import json
    import os
    from pathlib import Path

    from common.config import ConfigError
    from llic.config import load_llic_config
    from llic.submitfile import SubmitFileError, parse_submit_file

    prog = "master_submitter"
    parser = argparse.ArgumentParser(
        prog=prog, description="Run an HTCondor submit file's jobs through llic."
    )
    parser.add_argument("file", metavar="FILE", help="the HTCondor submit file")
    parser.add_argument(
        "config", metavar="CONFIG", nargs="?", help="llic_config file (else $LLIC_CONFIG_FILENAME)"
    )
    parser.add_argument("--dry-run", action="store_true", help="submit nothing; print each task as JSON")
    parser.add_argument("--wait", action="store_true", help="wait until every master has finished")
    args = parser.parse_args(argv)
    if not args.dry_run:
        print(f"{prog}: not implemented yet in this release (only --dry-run)", file=sys.stderr)
        return 2
    try:
        load_llic_config(Path(args.config) if args.config else None)
        submit = parse_submit_file(args.file, cwd=Path.cwd())
        for warning in submit.warnings:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        for block in submit.blocks:
            for task in block.tasks(1 + block.cluster_offset):
                print(json.dumps(task.to_json()))
    except (SubmitFileError, ConfigError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `| head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def master_q(argv: list[str] | None = None) -> int:
    from llic.master_q import main

    return main(argv)
