"""Command line of poold (reserved: the daemon arrives with its own issue)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poold")
    parser.parse_args(argv)
    print("poold: not implemented yet in this release", file=sys.stderr)
    return 2
