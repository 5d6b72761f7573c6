"""Command line of poold: run the daemon, show its state, check a config, run simulations."""

from __future__ import annotations

import argparse
import json
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.cli import DaemonCli, add_command, run_main
from common.condor_defaults import read_condor_config
from common.config import ConfigError
from common.events import printable
from poolD.config import PooldConfig, with_condor_values
from poolD.policy import Policy


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1)")
    return value


def _share(text: str) -> float | None:
    if text == "none":
        return None
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share in (0, 1]")
    return value


def build_parser() -> argparse.ArgumentParser:
    """poold's parser: run, status and check-config (common.cli), and the simulate experiments."""
    parser, sub = CLI.parser()
    simulate = add_command(
        sub,
        "simulate",
        "run poolD's logic on the simulator (needs the [sim] extra)",
        "Run poolD's own decision code on simulated pools and networks (the sim package); "
        "prints JSON or tables. Needs pip install 'condor-selforg[sim]'.",
    )
    what = simulate.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    overlay = add_command(what, "overlay", "the overlay alone: joins, lookups, churn; prints a JSON summary")
    overlay.add_argument("--nodes", type=int, required=True, help="pools (overlay nodes) to simulate")
    overlay.add_argument("--seed", type=int, default=1, help="random seed (the same seed, the same run)")
    overlay.add_argument(
        "--topology", default="transit-stub", help="transit-stub, or a latency matrix file (ms)"
    )
    overlay.add_argument("--churn", type=_fraction, default=0.0, help="fraction of nodes that crash")
    overlay.add_argument("--loss", type=_fraction, default=0.0, help="message loss probability")
    overlay.add_argument("--lookups", type=int, default=10_000, help="lookups of random keys to measure")
    overlay.add_argument("--join-interval", type=float, default=0.2, help="virtual seconds between joins")
    overlay.add_argument("--settle", type=float, default=300.0, help="virtual seconds after the last join")
    overlay.add_argument("--steady", type=float, default=600.0, help="window measuring maintenance traffic")
    overlay.add_argument("--repair", type=float, default=300.0, help="virtual seconds of repair after churn")
    overlay.add_argument(
        "--detect-samples", type=int, default=100, help="isolated crashes timed for detect_median_s/_p99_s"
    )
    traces = add_command(what, "traces", "job exchange between EASY sites on SWF traces; prints JSON")
    traces.add_argument(
        "--trace", action="append", required=True, metavar="FILE:SLOTS", help="a site's trace (repeatable)"
    )
    traces.add_argument("--months", type=float, default=11.0, help="keep this many months of each trace")
    traces.add_argument("--seed", type=int, default=1, help="random seed")
    traces.set_defaults(simulate=_simulate_traces)
    paper = add_command(what, "paper", "the flock paper's 1000-pool experiment (Fig. 6-10); prints JSON")
    paper.add_argument("--pools", type=int, default=1000, help="pools to simulate")
    paper.add_argument("--seed", type=int, default=1, help="random seed")
    paper.add_argument("--out", type=Path, help="write CSV and PNG figures into this directory")
    paper.add_argument(
        "--flock-within",
        type=_share,
        default=0.7,
        help="give every pool a max_rtt of the round trip across this share of the network's "
        "diameter (default 0.7, where the paper saw its farthest jobs; 'none': no bound)",
    )
    paper.add_argument(
        "--settle", type=float, default=600.0, help="virtual seconds the overlay runs after the last join"
    )
    paper.set_defaults(simulate=_simulate_paper)
    four = add_command(what, "four-pools", "the flock paper's four-pool prototype (Tables 2-3)")
    four.add_argument("--seed", type=int, default=1, help="random seed")
    four.add_argument(
        "--jobs-per-sequence",
        type=int,
        default=100,
        help="keep each sequence's first N jobs (bench/four-pools runs 15 on real HTCondor)",
    )
    four.add_argument("-json", "--json", dest="json", action="store_true", help="print JSON, not tables")
    four.set_defaults(simulate=_simulate_four_pools)
    return parser


def _check(config: PooldConfig, path: Path) -> None:
    if config.daemon.policy_file is not None:
        Policy.load(config.daemon.policy_file)
    state = config.daemon.state_file
    if state is not None:
        try:
            mode = state.stat().st_mode
        except FileNotFoundError:
            mode = None  # a first start
        except OSError as e:
            raise ConfigError(f"{path}: daemon.state_file: {state}: {e.strerror or e}") from None
        if mode is not None and not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise ConfigError(f"{path}: daemon.state_file: {state} is {kind}, not a state file")
    cert = config.ring.check_key(path).cert
    if cert.pool != config.pool.name:
        raise ConfigError(
            f"{path}: pool.name is {config.pool.name!r}, but the node certificate is for {cert.pool!r}"
        )


def _resolve(config: PooldConfig, path: Path) -> PooldConfig:
    """`[pool] collector` from HTCondor's COLLECTOR_HOST when the file leaves it out."""
    if config.pool.collector is not None:
        return config
    return with_condor_values(
        config, read_condor_config(config.pool.condor_config, ["COLLECTOR_HOST"]), str(path)
    )


def _serve(config: PooldConfig, reread: Callable[[], PooldConfig]) -> int:
    import trio

    from common.logging import configure_logging
    from poolD.service import PoolDaemon

    configure_logging("poold", config.pool.name, level=config.daemon.log_level)
    trio.run(PoolDaemon(config, reread=reread).serve)
    return 0


def _describe(config: PooldConfig) -> str:
    policy = str(config.daemon.policy_file) if config.daemon.policy_file else "none (every pool allowed)"
    ring = config.ring
    return (
        f"pool {config.pool.name}, ring {ring.node_name} on port {ring.port}, "
        f"bootstrap {', '.join(ring.seeds()) or 'none: founds a ring'}, policy {policy}"
    )


def render_status(s: dict[str, Any]) -> str:
    """`poold status` for a terminal, from the status the daemon's control socket returns."""
    lines = [
        f"pool {s['pool']} (collector {s['collector']}), overlay node {s['node']['addr']} "
        f"id {s['node']['id'][:8]}…, {'joined' if s['joined'] else 'joining'}"
    ]
    if s.get("seeds_unheard"):  # asked again every revive_interval until they answer
        lines.append("seeds not heard from: " + ", ".join(s["seeds_unheard"]))
    gate = s.get("manager_role")
    if gate:  # poold behind faultD's role (issue 16)
        epoch = gate["active_epoch"] if gate["mode"] == "active" else gate["epoch"]
        why = f"; {gate['problem']}" if gate.get("problem") else ""
        lines.append(f"manager role: {gate['mode']} (epoch {epoch}){why}")
    load = s.get("load")
    if load:
        idle = sum(x["idle"] for x in load["schedds"])
        lines.append(f"load: {load['free_slots']}/{load['total_slots']} slots free, {idle} idle jobs")
    if s.get("load_error"):
        lines.append(f"load error: {s['load_error']}")
    lines.append(
        f"leaf set ({len(s['leaf_set'])}): "
        + ", ".join(f"{p['addr']} {p['rtt_ms']}ms" for p in s["leaf_set"])
    )
    for r, row in enumerate(s["routing_table"]):
        lines.append(f"row {r}: " + ", ".join(f"[{p['col']:x}] {p['addr']} {p['rtt_ms']}ms" for p in row))
    lines.append("willing list:" if s["willing_list"] else "willing list: empty")
    for e in s["willing_list"]:
        lines.append(
            f"  {e['pool']:<20} {e['collector']:<22} row {e['row']} rtt {e['rtt_ms']}ms "
            f"free {e['free_slots']} queue {e['queue_length']} expires in {e['expires_in']}s"
        )
    for schedd, flock in s["flock_to"].items():
        lines.append(f"FLOCK_TO on {schedd}: {', '.join(flock) or '(none)'}")
    if s["blacklist"]:
        lines.append(
            "blacklist: " + ", ".join(f"{p} ({printable(b['reason'])})" for p, b in s["blacklist"].items())
        )
    lines += _token_lines(s.get("tokens") or {})
    lines.append(
        f"offers accepted {s['offers']['accepted']}, dropped {s['offers']['dropped']}, "
        f"overlay drops {s['overlay_drops']}"
    )
    lines.append("last decisions:")
    lines += [f"  {printable(d, 1000)}" for d in s["decisions"][-10:]]  # they quote peers
    return "\n".join(lines)


def _token_lines(tokens: dict[str, Any]) -> list[str]:
    """Cross-pool trust ([trust]) in `poold status`: the tokens our daemons hold of other pools,
    those we asked for and wait on, those we approved for others; nothing without [trust]."""
    if not tokens:
        return []
    held = ", ".join(f"{k} ({v:.0f}s left)" for k, v in sorted(tokens.get("held", {}).items()))
    asked = ", ".join(f"{k} (request {v})" for k, v in sorted(tokens.get("asked", {}).items()))
    issued = ", ".join(f"{k} ({v:.0f}s left)" for k, v in sorted(tokens.get("issued", {}).items()))
    waits = sorted(tokens.get("backing_off", {}).items())
    backing_off = ", ".join(f"{k} (after a failure or refusal: next request in {v:.0f}s)" for k, v in waits)
    lines = [
        f"tokens held: {held or 'none'}",
        f"tokens asked for: {asked or 'none'}",
        f"tokens issued: {issued or 'none'}",
    ]
    return lines + ([f"tokens waiting: {backing_off}"] if backing_off else [])


def _simulate_overlay(args: argparse.Namespace) -> int:
    from sim.overlay_experiment import ExperimentConfig, OverlayExperiment
    from sim.topology import TopologyError

    if args.nodes < 1 or args.lookups < 1:
        print("poold: error: --nodes and --lookups must be at least 1", file=sys.stderr)
        return 2
    if args.detect_samples < 0:
        print("poold: error: --detect-samples must be at least 0", file=sys.stderr)
        return 2
    config = ExperimentConfig(
        nodes=args.nodes,
        seed=args.seed,
        topology=args.topology,
        churn=args.churn,
        loss=args.loss,
        lookups=args.lookups,
        join_interval=args.join_interval,
        settle_seconds=args.settle,
        steady_seconds=args.steady,
        repair_seconds=args.repair,
        detect_samples=args.detect_samples,
    )
    try:
        result = OverlayExperiment(config).run()
    except TopologyError as e:
        raise ConfigError(str(e)) from None
    print(json.dumps(result, indent=2))
    return 0


def _simulate_traces(args: argparse.Namespace) -> int:
    from sim.job_exchange import cli_main

    return cli_main(args.trace, args.months, args.seed)


def _simulate_paper(args: argparse.Namespace) -> int:
    from sim.flock_paper import PaperConfig, run_paper

    if args.pools < 2:
        print("poold: error: --pools must be at least 2", file=sys.stderr)
        return 2
    if args.settle < 0:
        print("poold: error: --settle must not be negative", file=sys.stderr)
        return 2
    config = PaperConfig(pools=args.pools, seed=args.seed, flock_within=args.flock_within, settle=args.settle)
    print(json.dumps(run_paper(config, args.out), indent=2))
    return 0


def _simulate_four_pools(args: argparse.Namespace) -> int:
    from sim.flock_paper import render_four_pools, run_four_pools

    if not 1 <= args.jobs_per_sequence <= 100:
        got = args.jobs_per_sequence
        print(f"poold: error: --jobs-per-sequence must be 1..100, got {got}", file=sys.stderr)
        return 2
    result = run_four_pools(args.seed, args.jobs_per_sequence)
    print(json.dumps(result, indent=2) if args.json else render_four_pools(result))
    return 0


CLI = DaemonCli(
    prog="poold",
    description="self-organizing flocking of HTCondor pools",
    default_config=Path("/etc/poold/poold.toml"),
    model=PooldConfig,
    check=_check,
    serve=_serve,
    describe=_describe,
    render_status=render_status,
    status_help="what the running daemon knows and did",
    check_help="validate a config file and its policy file",
    resolve=_resolve,
    service_user="condor",  # poold.service's User=
)

SIM_DEPENDENCIES = ("numpy", "scipy", "matplotlib")


def _simulate(args: argparse.Namespace) -> int:
    """`poold simulate ...`: the simulators are evaluation code in the `sim` package, whose
    dependencies come with the `[sim]` extra; without them, say how to get them."""
    try:
        return getattr(args, "simulate", _simulate_overlay)(args)
    except ModuleNotFoundError as e:
        if e.name not in SIM_DEPENDENCIES:
            raise
        raise ConfigError(
            f"'poold simulate' needs the simulation extra ({e.name} is not installed): "
            "pip install 'condor-selforg[sim]'"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """poold's entry point: parse `argv` and run the command; user errors exit 2 with one line."""
    args = build_parser().parse_args(argv)
    if args.command == "simulate":
        return run_main("poold", lambda: _simulate(args))
    return run_main("poold", lambda: CLI.command(args))
