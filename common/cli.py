"""What every command-line entry point shares: user errors become one line, not a traceback;
and the skeleton of a daemon's command line (`run`, `status`, `check-config`, `keys`), which poold
and faultd fill in with their own config model, daemon and status rendering."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import Field

from common.config import ConfigError, StrictModel, load_config

EXIT_USER_ERROR = 2


def run_main(prog: str, main: Callable[[], int]) -> int:
    """Run `main`; a ConfigError is printed as `prog: error: ...` and exits 2."""
    try:
        return main()
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130


class DaemonSection(StrictModel):
    """The `[daemon]` section every daemon of the suite has (each sets its own socket default)."""

    control_socket: Path
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    gateway_timeout: float = Field(30.0, gt=0, description="seconds an HTCondor call may take")


C = TypeVar("C", bound=StrictModel)


@dataclass(frozen=True)
class DaemonCli(Generic[C]):
    """A daemon's command line: how to read its config, run it, name it and show its status."""

    prog: str
    description: str
    default_config: Path
    model: type[C]
    check: Callable[[C, Path], None]  # what parsing cannot check (key file, policy file, dirs)
    serve: Callable[[C], int]  # run the daemon until it stops
    describe: Callable[[C], str]  # check-config's one line about a good file
    render_status: Callable[[dict[str, Any]], str]
    status_help: str
    check_help: str = "validate a config file"

    def parser(self) -> tuple[argparse.ArgumentParser, Any]:
        """The parser with run, status and check-config; the subparsers, for more commands."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        sub = parser.add_subparsers(dest="command", required=True)
        run = sub.add_parser("run", help="run the daemon (systemd: Type=notify)")
        run.add_argument("--config", type=Path, default=self.default_config)
        status = sub.add_parser("status", help=self.status_help)
        status.add_argument(
            "--config", type=Path, default=self.default_config, help="to find the control socket"
        )
        status.add_argument("--socket", type=Path, help="control socket (overrides the config)")
        status.add_argument("--json", action="store_true")
        check = sub.add_parser("check-config", help=self.check_help)
        check.add_argument("file", type=Path)
        from common.keys import add_keys_parser

        add_keys_parser(sub, self.prog)
        return parser, sub

    def load(self, path: Path) -> C:
        """Read, validate and check a config file (ConfigError names the file and key)."""
        config = load_config(path, self.model)
        self.check(config, path)
        return config

    def command(self, args: argparse.Namespace) -> int:
        """Carry out run, status, check-config or keys."""
        from common.service import print_status

        if args.command == "keys":
            from common.keys import run_keys

            return run_keys(args)
        if args.command == "run":
            return self.serve(self.load(args.config))
        if args.command == "status":
            path = args.socket or load_config(args.config, self.model).daemon.control_socket
            return print_status(self.prog, path, self.render_status, as_json=args.json)
        config = self.load(args.file)
        print(f"{args.file}: ok ({self.describe(config)})")
        return 0
