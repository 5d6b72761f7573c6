"""`python3 agent.pyz HOST PORT AGENT_ID INPUT_FILE`: the agent's command line.

PORT is the master's port, or FIRST-LAST: a range the agent tries in turn until its master
answers (agents submitted with their master, before it has chosen its port).

Exit status: 0 when the master said no more tasks and every result was delivered; 1 on a fatal
error (master unreachable, handshake failed, connection lost, protocol violation), reported as one
`llic-agent: fatal: ...` line on stderr; 2 on a bad command line or input file; 128+N when stopped
by signal N (HTCondor's SIGTERM on vacate or condor_rm). `--self-check` prints what the agent runs
on (Python, msgpack implementation, protocol version) as JSON and exits 0.

Files: common files, the executable and initial tasks' files are looked up next to INPUT_FILE;
execution directories go into `_CONDOR_SCRATCH_DIR` (the current directory if unset).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from .. import protocol
from .communicator import Agent, AgentFatal, parse_ports
from .inputfile import InputFileError, load_input
from .launcher import STOP_SIGNALS
from .workspace import Workspace


class Stopped(BaseException):
    """A termination signal arrived; BaseException so no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, _frame: Any) -> None:
    raise Stopped(signum)


def self_check() -> dict[str, Any]:
    """What the agent runs on (Python, msgpack, protocol version), for `--self-check`."""
    import msgpack

    return {
        "python": ".".join(map(str, sys.version_info[:3])),
        "msgpack": msgpack.Unpacker.__module__,
        "msgpack_file": getattr(msgpack, "__file__", None),
        "protocol": protocol.PROTOCOL_VERSION,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llic-agent", description="Run an llic master's tasks here.")
    parser.add_argument("host", nargs="?", help="the master's host")
    parser.add_argument("port", nargs="?", help="the master's port, or a range FIRST-LAST")
    parser.add_argument("agent_id", nargs="?", help="this agent's id, as its chef knows it")
    parser.add_argument("input_file", nargs="?", help="the input file (JSON) the chef wrote")
    parser.add_argument("--self-check", action="store_true", help="print the runtime as JSON and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The agent's command line: connect to the master and run its tasks (or `--self-check`)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.self_check:
        print(json.dumps(self_check()))
        return 0
    if args.input_file is None:
        parser.print_usage(sys.stderr)
        print("llic-agent: HOST PORT AGENT_ID INPUT_FILE are required", file=sys.stderr)
        return 2
    try:
        ports = parse_ports(args.port)
    except ValueError:
        parser.print_usage(sys.stderr)
        print(f"llic-agent: PORT: expected a port or FIRST-LAST, got {args.port!r}", file=sys.stderr)
        return 2
    try:
        config = load_input(args.input_file)
    except InputFileError as exc:
        print(f"llic-agent: {exc}", file=sys.stderr)
        return 2
    home = os.path.dirname(os.path.abspath(args.input_file))
    scratch = os.environ.get("_CONDOR_SCRATCH_DIR") or os.getcwd()
    workspace = Workspace(config, home=home, scratch=scratch, base_env=os.environ)
    agent = Agent(args.host, ports, args.agent_id, config, workspace)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_signal)
    try:
        agent.run()
    except Stopped as stop:
        print(f"llic-agent: stopped by signal {stop.signum}", file=sys.stderr)
        return 128 + stop.signum
    except AgentFatal as exc:
        print(f"llic-agent: fatal: {exc}", file=sys.stderr)
        return 1
    except protocol.ProtocolError as exc:
        print(f"llic-agent: fatal: protocol error from the master: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"llic-agent: fatal: connection to the master lost: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
