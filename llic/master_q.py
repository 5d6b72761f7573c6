"""master_q (seed §6): how far each master has got, read from its state file, condor_q style.

    master_q STATE_FILE|ALL [CONFIG] [-json] [-net]

ALL reads every `master.*.state` under MASTER_OUTPUTS_DIR_PREFIX_PATH of the configuration
(CONFIG, else $LLIC_CONFIG_FILENAME, else the defaults); see `llic.state.find_state_files`. The
seed names these files `master.*.in`; ours say what they are.

The numbers are as of the master's last save (at most STATE_SAVE_INTERVAL old while it runs).
TASKS/S is the rate over the last minute before that save (a pool's slots come and go, so the
recent rate predicts the rest better than the average since the start); for a master that has
ended, it is the average over its whole run. ETA is the tasks left at that rate. Held tasks
are counted in the totals line and listed below it with their hold reasons (the first
HELD_SHOWN of each master; `-json`: "held" and "held_tasks"); master_release releases them.

`-net` shows llic's transfers instead (issue 8, llic/netadmit.py): per subnet its limit, bytes
sent to agents (IN) and back (OUT), the rate over the last seconds before the save, the highest
such rate seen, and what admission control has reserved; then per agent. `-json` carries the
same figures under "net".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common.cli import EXIT_USER_ERROR, run_main
from llic.chef import ChefState
from llic.config import load_llic_config
from llic.master_core import MasterStatus
from llic.netadmit import format_rate
from llic.state import MasterState, StateFileError, find_state_files, load_state
from llic.taskbook import TaskState

RATE_WINDOW = 60.0  # seconds of completions that make up the current rate
HELD_SHOWN = 100  # held tasks -json lists with their reasons (the count has them all)
AGENT_STATES = [
    ChefState.CREATED,
    ChefState.LAUNCHED,
    ChefState.RUNNING,
    ChefState.TERMINATED,
    ChefState.UNRECOVERABLE,
]


def summarize(state: MasterState, path: Path | None = None) -> dict[str, Any]:
    """One master's row, as JSON-able values (what `-json` prints)."""
    counts = state.counts()
    rate = _rate(state)
    left = counts.unfinished
    eta: float | None
    if left == 0:
        eta = 0.0
    elif rate:
        eta = left / rate
    else:
        eta = None
    return {
        "path": None if path is None else str(path),
        "master_id": state.info.master_id,
        "owner": state.info.owner,
        "cluster": state.info.cluster,
        "block": state.info.block,
        "submit_file": state.info.submit_file,
        "status": state.status.value,
        "submitted": state.started,
        "saved": state.saved,
        "total": counts.total,
        "done": counts.done,
        "running": counts.running,
        "queued": counts.queued,
        "failed": counts.failed,
        "held": counts.held,
        "removed": counts.removed,
        "held_tasks": [
            {"process": t.process, "reason": t.hold_reason, "code": t.hold_code, "subcode": t.hold_subcode}
            for t in state.tasks
            if t.state is TaskState.HELD
        ][:HELD_SHOWN],
        "agents": state.agents_by_state(),
        "agent_jobs_submitted": sum(len(c.job_ids) for c in state.chefs),
        "tasks_per_second": rate,
        "eta_seconds": eta,
        "retries": state.counters.get("retries", 0),
        "lost": state.counters.get("lost", 0),
        "net": state.extra.get("net"),
    }


def _rate(state: MasterState) -> float | None:
    if state.started is None:
        return None
    ends = [
        t.completed
        for t in state.tasks
        if t.completed is not None and t.state in (TaskState.DONE, TaskState.FAILED)
    ]
    if state.status is not MasterStatus.RUNNING:
        span = (max(ends) if ends else state.saved) - state.started
        return len(ends) / span if span > 0 and ends else None
    window = min(RATE_WINDOW, state.saved - state.started)
    if window <= 0:
        return None
    return sum(1 for end in ends if end > state.saved - window) / window


def render_table(rows: list[dict[str, Any]], title: str) -> str:
    """condor_q's look: a title line, a header, one line per master, a totals line."""
    w = max([12, *(len(r["master_id"]) for r in rows)])
    header = (
        f"{'ID':<{w}} {'OWNER':<10} {'SUBMITTED':<11} {'DONE':>7} {'RUN':>6} {'IDLE':>7} {'FAILED':>6} "
        f"{'TOTAL':>7} {'AGENTS C/L/R/T/U':>17} {'TASKS/S':>8} {'ETA':>11} STATUS"
    )
    lines = [f"-- {title}", header]
    for r in rows:
        agents = "/".join(str(r["agents"].get(s.value, 0)) for s in AGENT_STATES)
        lines.append(
            f"{r['master_id']:<{w}} {r['owner'][:10]:<10} {_when(r['submitted']):<11} {r['done']:>7} "
            f"{r['running']:>6} {r['queued']:>7} {r['failed']:>6} {r['total']:>7} {agents:>17} "
            f"{_rate_text(r['tasks_per_second']):>8} {_duration(r['eta_seconds']):>11} {r['status']}"
        )
    total = {k: sum(r[k] for r in rows) for k in ("total", "done", "running", "queued", "held", "failed")}
    agents_running = sum(r["agents"].get(ChefState.RUNNING.value, 0) for r in rows)
    agents_waiting = sum(r["agents"].get(ChefState.LAUNCHED.value, 0) for r in rows)
    held_text = f"{total['held']} held, " if total["held"] else ""
    lines.append("")
    lines.append(
        f"Total for {len(rows)} master{'s' if len(rows) != 1 else ''}: {total['total']} tasks; "
        f"{total['done']} done, {total['running']} running, {total['queued']} idle, "
        f"{held_text}{total['failed']} failed; "
        f"agents: {agents_running} running, {agents_waiting} waiting for a slot"
    )
    held = [(r["master_id"], t) for r in rows for t in r.get("held_tasks", [])]
    if held:
        lines.append("")
        lines.append(
            f"-- {total['held']} held task{'s' if total['held'] != 1 else ''} (master_release releases them)"
        )
        for master_id, t in held:
            codes = f"code {t['code']}, subcode {t['subcode']}"
            lines.append(f"{master_id} process {t['process']}: {t['reason']} ({codes})")
    return "\n".join(lines)


def render_net(rows: list[dict[str, Any]], title: str) -> str:
    """Per master: one line per subnet, then one per agent (the -net view)."""
    lines = [f"-- {title}: network (rates over the last seconds before each save)"]
    for r in rows:
        net = r.get("net")
        if not isinstance(net, dict):
            lines.append(f"{r['master_id']}: no transfer figures (no transfers yet, or an older master)")
            continue
        m = net.get("master", {})
        lines.append(
            f"{r['master_id']}: capacity {net.get('capacity') or 'unlimited'}; "
            f"{_bytes(m.get('bytes_in'))} in, {_bytes(m.get('bytes_out'))} out, "
            f"{m.get('transfers', 0)} transfers, now {_bps(m.get('rate_bps'))}; "
            f"tasks held for capacity {net.get('held', 0)}"
        )
        bulk = net.get("bulk")
        if isinstance(bulk, dict) and bulk.get("threshold"):
            waiting = sum(n for n in (bulk.get("waiting") or {}).values() if isinstance(n, int))
            lines.append(
                f"  large results (over {_size(bulk.get('threshold'))}): {bulk.get('grants', 0)} returned "
                f"one at a time per subnet, longest wait {bulk.get('max_wait_s', 0):.1f} s, "
                f"{waiting} waiting now"
            )
        lines.append(
            f"  {'SUBNET':<20} {'LIMIT':>9} {'IN':>10} {'OUT':>10} {'XFERS':>6} {'RATE':>9} "
            f"{'PEAK':>9} {'RESERVED':>9} {'MAX RSV':>9}"
        )
        for name, s in sorted(net.get("subnets", {}).items()):
            lines.append(
                f"  {name:<20} {_bps(s.get('limit_bps'), 'none'):>9} {_bytes(s.get('bytes_in')):>10} "
                f"{_bytes(s.get('bytes_out')):>10} {s.get('transfers', 0):>6} {_bps(s.get('rate_bps')):>9} "
                f"{_bps(s.get('peak_bps')):>9} {_bps(s.get('reserved_bps')):>9} "
                f"{_bps(s.get('max_reserved_bps')):>9}"
            )
        lines.append(f"  {'AGENT':<12} {'SUBNET':<20} {'IN':>10} {'OUT':>10} {'XFERS':>6} {'RATE':>9}")
        for name, a in sorted(net.get("agents", {}).items()):
            lines.append(
                f"  {name:<12} {a.get('subnet', '?'):<20} {_bytes(a.get('bytes_in')):>10} "
                f"{_bytes(a.get('bytes_out')):>10} {a.get('transfers', 0):>6} {_bps(a.get('rate_bps')):>9}"
            )
    return "\n".join(lines)


def _bps(value: Any, none: str = "-") -> str:
    return none if not isinstance(value, int | float) else format_rate(value) if value > 0 else "0"


def _bytes(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= factor:
            return f"{value / factor:.1f}{unit}"
    return f"{int(value)}B"


def _size(value: Any) -> str:
    """A size as BULK_OUTPUT_THRESHOLD is written (K, M, G: powers of 1024)."""
    if not isinstance(value, int):
        return "-"
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return f"{value}B"


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%m/%d %H:%M", time.localtime(epoch))


def _rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}"


def _duration(seconds: float | None) -> str:
    """condor_q's RUN_TIME form: days+hh:mm:ss."""
    if seconds is None:
        return "?"
    s = round(seconds)
    return f"{s // 86400}+{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def build_parser() -> argparse.ArgumentParser:
    """master_q's command line."""
    parser = argparse.ArgumentParser(
        prog="master_q", description="progress of llic masters, from their state files"
    )
    parser.add_argument("target", metavar="STATE_FILE|ALL", help="a master.<id>.state file, or ALL")
    parser.add_argument(
        "config", metavar="CONFIG", nargs="?", type=Path, help="llic config (default: $LLIC_CONFIG_FILENAME)"
    )
    parser.add_argument("-json", "--json", dest="json", action="store_true", help="print a JSON list")
    parser.add_argument(
        "-net", "--net", dest="net", action="store_true", help="llic's transfers per subnet and agent"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """`master_q`: print the progress of one master or of all, from their state files."""
    args = build_parser().parse_args(argv)
    return run_main("master_q", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    config = load_llic_config(args.config)
    errors: list[str] = []
    rows: list[dict[str, Any]] = []
    if args.target == "ALL":
        prefix = config.master_outputs_dir_prefix_path
        paths = find_state_files(prefix)
        title = f"llic masters under {prefix}"
    else:
        paths = [Path(args.target)]
        title = f"llic master {args.target}"
    for path in paths:
        try:
            rows.append(summarize(load_state(path), path))
        except StateFileError as e:
            errors.append(str(e))
    if args.target != "ALL" and errors:
        print(f"master_q: error: {errors[0]}", file=sys.stderr)
        return EXIT_USER_ERROR
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.net:
        print(render_net(rows, title))
    else:
        print(render_table(rows, title))
    for error in errors:
        print(f"master_q: skipped: {error}", file=sys.stderr)
    return 1 if errors else 0
