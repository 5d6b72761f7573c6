"""The suite's command-line style, without the daemon skeleton of common/cli.py (nor its
pydantic, ~15 MB): exit codes, `--version`, help that shows defaults. A command that needs no
config model (master_submitter --dry-run reading a 100,000-task file, whose memory is measured
against condor_submit's) builds its parser from here alone."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `yes | head` reports for `yes`
PACKAGE = "condor-selforg"


def version() -> str:
    """The installed distribution's version ('unknown' when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (unless it has none: None, or a flag's False);
    descriptions keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.required:
            return action.help
        return super()._get_help_string(action)


def new_parser(prog: str, description: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A parser in the suite's style: defaults in the help, and `--version`."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=HelpFormatter, **kwargs
    )
    add_version(parser, prog)
    return parser


class _VersionAction(argparse.Action):
    """argparse's `version` action, with the version looked up only when asked for: reading the
    installed distributions' metadata costs every command ~5 MB and some milliseconds."""

    def __init__(self, option_strings: list[str], prog: str, help: str | None = None, **kwargs: Any) -> None:
        help = help or "show program's version number and exit"
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )
        self.prog = prog

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None
    ) -> None:
        sys.stdout.write(f"{self.prog} ({PACKAGE}) {version()}\n")
        parser.exit()


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """`--version` (and HTCondor's `-version`): the suite's version, then exit 0."""
    parser.add_argument("-version", "--version", action=_VersionAction, prog=prog)


def add_command(sub: Any, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose `-h` says what it does (`description`, else `help`) and its defaults."""
    return sub.add_parser(name, help=help, description=description or help, formatter_class=HelpFormatter)
