"""Command lines of llic (reserved: they arrive with the llic issue)."""

from __future__ import annotations

import argparse
import sys


def _reserved(prog: str, argv: list[str] | None) -> int:
    argparse.ArgumentParser(prog=prog).parse_known_args(argv)
    print(f"{prog}: not implemented yet in this release", file=sys.stderr)
    return 2


def master_submitter(argv: list[str] | None = None) -> int:
    return _reserved("master_submitter", argv)


def master_q(argv: list[str] | None = None) -> int:
    from llic.master_q import main

    return main(argv)
