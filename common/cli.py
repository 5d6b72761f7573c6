"""What every command-line entry point shares: user errors become one line, not a traceback; a
closed pipe (`| head`) or Ctrl-C ends the command quietly; `--version`; help that shows defaults;
and the skeleton of a daemon's command line (`run`, `status`, `check-config`, `keys`), which poold
and faultd fill in with their own config model, daemon and status rendering."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import Field, field_validator

from common.cli_style import EXIT_BROKEN_PIPE as EXIT_BROKEN_PIPE
from common.cli_style import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from common.cli_style import EXIT_USER_ERROR as EXIT_USER_ERROR
from common.cli_style import PACKAGE as PACKAGE
from common.cli_style import HelpFormatter as HelpFormatter
from common.cli_style import add_command as add_command
from common.cli_style import add_version as add_version
from common.cli_style import new_parser as new_parser
from common.cli_style import version as version
from common.config import ConfigError, StrictModel, load_config


def run_main(prog: str, main: Callable[[], int]) -> int:
    """Run `main` and flush what it printed. A ConfigError is printed as `prog: error: ...` and
    exits 2; Ctrl-C exits 130 and a reader that went away (`| head`, `| true`) 141, both without a
    traceback. Logging not yet configured goes to stderr at warning level (the gateway's debug
    lines are not for the command's output)."""
    import structlog

    if not structlog.is_configured():
        from common.logging import configure_logging

        configure_logging(prog, level="warning")
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence_stdout()
        return EXIT_BROKEN_PIPE


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class DaemonSection(StrictModel):
    """The `[daemon]` section every daemon of the suite has (each sets its own socket default)."""

    control_socket: Path
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    gateway_timeout: float = Field(30.0, gt=0, description="seconds an HTCondor call may take")
    advertise_interval: float = Field(
        60.0,
        ge=0,
        le=86_400,
        description="seconds between updates of the daemon's ClassAd in the collector; 0: no ad",
    )
    metrics_listen: str | None = Field(
        None, description="host:port of a Prometheus endpoint (needs the [metrics] extra); unset: none"
    )

    @field_validator("metrics_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is not None:
            from common.metrics import parse_listen

            parse_listen(value)
        return value


C = TypeVar("C", bound=StrictModel)


@dataclass(frozen=True)
class DaemonCli(Generic[C]):
    """A daemon's command line: how to read its config, run it, name it and show its status."""

    prog: str
    description: str
    default_config: Path
    model: type[C]
    check: Callable[[C, Path], None]  # what parsing cannot check (key file, policy file, dirs)
    serve: Callable[[C, Callable[[], C]], int]  # run the daemon until it stops; 2nd: re-read the config
    describe: Callable[[C], str]  # check-config's one line about a good file
    render_status: Callable[[dict[str, Any]], str]
    status_help: str
    check_help: str = "validate a config file"
    # Fills in what the file leaves to HTCondor's configuration (common.condor_defaults).
    resolve: Callable[[C, Path], C] | None = None
    # The user the daemon's shipped systemd unit runs it as (None: root), unless the installed
    # unit says otherwise (common.install.daemon_user): `keys new-node` run as root gives it the
    # node's key, and check-config run as root checks that it can read its keys.
    service_user: str | None = None

    def parser(self) -> tuple[argparse.ArgumentParser, Any]:
        """The parser with run, status and check-config; the subparsers, for more commands."""
        parser = new_parser(self.prog, self.description)
        sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        run = add_command(
            sub,
            "run",
            "run the daemon in the foreground (what the systemd unit starts)",
            "Run the daemon until SIGTERM or SIGINT. Under systemd (Type=notify) it reports READY, "
            "STATUS and WATCHDOG; SIGHUP reloads what can change without a restart and logs what "
            "cannot.",
        )
        run.add_argument("--config", type=Path, default=self.default_config, help="the config file")
        status = add_command(sub, "status", self.status_help)
        status.add_argument(
            "--config", type=Path, default=self.default_config, help="to find the control socket"
        )
        status.add_argument("--socket", type=Path, help="control socket (overrides the config)")
        status.add_argument(
            "-json", "--json", dest="json", action="store_true", help="print the daemon's answer as JSON"
        )
        check = add_command(sub, "check-config", self.check_help)
        check.add_argument("file", type=Path, help="the config file to check")
        from common.keys import add_keys_parser

        add_keys_parser(sub, self.prog, self.service_user)
        return parser, sub

    def load(self, path: Path) -> C:
        """Read, validate and check a config file (ConfigError names the file and key)."""
        config = load_config(path, self.model)
        if self.resolve is not None:
            config = self.resolve(config, path)
        if config.daemon.metrics_listen is not None:  # type: ignore[attr-defined]
            from common.metrics import require_prometheus_client

            try:
                require_prometheus_client()
            except ConfigError as e:
                raise ConfigError(f"{path}: {e}") from None
        self.check(config, path)
        return config

    def command(self, args: argparse.Namespace) -> int:
        """Carry out run, status, check-config or keys."""
        from common.logging import configure_logging
        from common.service import print_status

        configure_logging(self.prog, level="warning")  # until `run` knows the daemon's own level

        if args.command == "keys":
            from common.keys import run_keys

            return run_keys(args)
        if args.command == "run":
            path = args.config
            return self.serve(self.load(path), lambda: self.load(path))
        if args.command == "status":
            path = args.socket or load_config(args.config, self.model).daemon.control_socket
            return print_status(self.prog, path, self.render_status, as_json=args.json)
        config = self.load(args.file)
        self._check_key_owners(config, args.file)
        print(f"{args.file}: ok ({self.describe(config)})")
        return 0

    def _check_key_owners(self, config: C, path: Path) -> None:
        """Run as root, check-config reads every file; the daemon, run as its service user, reads
        only its own: a key left to root passed the check and stopped the daemon at its start."""
        from common.install import daemon_user
        from common.keys import user_exists
        from common.overlay.auth import KeyFileError, check_readable_by

        user = daemon_user(self.prog, self.service_user)
        if user is None or os.geteuid() != 0 or not user_exists(user):
            return  # (without the user, HTCondor is not installed: systemd would say so first)
        ring = config.ring  # type: ignore[attr-defined]
        for key, what in ((ring.key_file, "ring key"), (ring.identity_files().node_key, "node private key")):
            try:
                check_readable_by(key, user, self.prog, what)
            except KeyFileError as e:
                raise ConfigError(f"{path}: {e}") from None
