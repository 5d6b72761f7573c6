"""Command line of poold. `simulate overlay` runs the overlay benchmark; the daemon itself
(`run`, `status`) arrives with the poolD issue."""

from __future__ import annotations

import argparse
import json
import sys

from common.cli import run_main
from common.config import ConfigError


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poold", description="self-organizing flocking of HTCondor pools")
    sub = parser.add_subparsers(dest="command", required=True)
    simulate = sub.add_parser("simulate", help="run poolD's logic on the simulator")
    what = simulate.add_subparsers(dest="experiment", required=True)
    overlay = what.add_parser("overlay", help="the overlay alone: joins, lookups, churn; prints JSON")
    overlay.add_argument("--nodes", type=int, required=True)
    overlay.add_argument("--seed", type=int, default=1)
    overlay.add_argument(
        "--topology", default="transit-stub", help="transit-stub, or a latency matrix file (ms)"
    )
    overlay.add_argument("--churn", type=_fraction, default=0.0, help="fraction of nodes that crash")
    overlay.add_argument("--loss", type=_fraction, default=0.0, help="message loss probability")
    overlay.add_argument("--lookups", type=int, default=10_000)
    overlay.add_argument("--join-interval", type=float, default=0.2, help="virtual seconds between joins")
    overlay.add_argument("--settle", type=float, default=300.0, help="virtual seconds after the last join")
    overlay.add_argument("--steady", type=float, default=600.0, help="window measuring maintenance traffic")
    overlay.add_argument("--repair", type=float, default=300.0, help="virtual seconds of repair after churn")
    for name in ("run", "status"):
        sub.add_parser(name, help="(arrives with the poolD daemon)")
    return parser


def _simulate_overlay(args: argparse.Namespace) -> int:
    from common.overlay.experiment import ExperimentConfig, OverlayExperiment
    from common.overlay.topology import TopologyError

    if args.nodes < 1 or args.lookups < 1:
        print("poold: error: --nodes and --lookups must be at least 1", file=sys.stderr)
        return 2
    config = ExperimentConfig(
        nodes=args.nodes, seed=args.seed, topology=args.topology, churn=args.churn, loss=args.loss,
        lookups=args.lookups, join_interval=args.join_interval, settle_seconds=args.settle,
        steady_seconds=args.steady, repair_seconds=args.repair,
    )  # fmt: skip
    try:
        result = OverlayExperiment(config).run()
    except TopologyError as e:
        raise ConfigError(str(e)) from None
    print(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "simulate":
        return run_main("poold", lambda: _simulate_overlay(args))
    print(f"poold {args.command}: not implemented yet in this release", file=sys.stderr)
    return 2
