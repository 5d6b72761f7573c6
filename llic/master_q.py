"""master_q (seed §6): how far each master has got, condor_q style.

    master_q [STATE_FILE|ALL] [CONFIG] [-name SCHEDD] [-allusers] [-constraint EXPR] [-af ATTR ...]
             [-long] [-nobatch] [-totals] [-json] [-net]

Where from: a state file; ALL, every `master.*.state` under MASTER_OUTPUTS_DIR_PREFIX_PATH of the
configuration (CONFIG, else $LLIC_CONFIG_FILENAME, else the site file, else the defaults; see
`llic.state.find_state_files`); or, with neither, the schedds of the pool: every master job there
carries its progress in its own job ad (`LlicDone`, `LlicTotal`, ... which the master keeps up to
date; `condor_q -af LlicMasterId LlicDone` shows them too), so masters are listed wherever their
state files are; as condor_q, only the user's own unless `-allusers` (root and condor see every user's).
The seed names state files `master.*.in`; ours say what they are.

As condor_q does: each master is a ClassAd (`master_ad`: LlicMasterId, Owner, ClusterId,
LlicStatus, LlicTotal, LlicDone, LlicRunning, LlicIdle, LlicFailed, LlicAgentsRunning, ...);
`-constraint` keeps those for which a ClassAd expression is true (the bindings evaluate it),
`-af` prints the named attributes space-separated, one line per master, `-long` prints
`Attr = value` blocks, `-totals` only the totals line. `-nobatch` lists tasks instead of masters
(a master is a batch; a task is a job), each a ClassAd too (`task_ad`: ClusterId, ProcId,
LlicTaskState, ExitCode, RemoteHost, ...), from the masters' state files.

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
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from common.classad_text import literal
from common.cli import EXIT_USER_ERROR, new_parser, run_main
from common.config import ConfigError
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


# A master's row (summarize) as ClassAd attributes: what the master puts in its job ad, what
# -constraint, -af and -long see.
MASTER_ATTRS = {
    "master_id": "LlicMasterId",
    "owner": "Owner",
    "cluster": "ClusterId",
    "block": "LlicBlock",
    "submit_file": "LlicSubmitFile",
    "status": "LlicStatus",
    "submitted": "LlicSubmitted",
    "saved": "LlicSaved",
    "total": "LlicTotal",
    "done": "LlicDone",
    "running": "LlicRunning",
    "queued": "LlicIdle",
    "failed": "LlicFailed",
    "held": "LlicHeld",
    "removed": "LlicRemoved",
    "agent_jobs_submitted": "LlicAgentJobsSubmitted",
    "tasks_per_second": "LlicTasksPerSecond",
    "eta_seconds": "LlicEtaSeconds",
    "retries": "LlicRetries",
    "lost": "LlicLost",
    "path": "LlicStateFile",
}
AGENT_ATTR = "LlicAgents{}"  # per agent state: LlicAgentsRunning, LlicAgentsLaunched, ...


def master_ad(row: dict[str, Any]) -> dict[str, Any]:
    """A master's row as a ClassAd (plain values; None is undefined)."""
    ad = {attr: row.get(key) for key, attr in MASTER_ATTRS.items()}
    for state in AGENT_STATES:
        ad[AGENT_ATTR.format(state.value.capitalize())] = row["agents"].get(state.value, 0)
    return ad


def row_of_ad(ad: dict[str, Any]) -> dict[str, Any]:
    """The inverse of master_ad, for masters listed from their job ads."""
    row = {key: ad.get(attr) for key, attr in MASTER_ATTRS.items()}
    for key in ("total", "done", "running", "queued", "failed", "held", "removed", "agent_jobs_submitted",
                "retries", "lost"):  # fmt: skip
        row[key] = int(row[key] or 0)
    row["owner"] = str(row["owner"] or "?")
    row["agents"] = {s.value: int(ad.get(AGENT_ATTR.format(s.value.capitalize())) or 0) for s in AGENT_STATES}
    row["net"] = None
    return row


def task_ads(state: MasterState) -> list[dict[str, Any]]:
    """Each task as a ClassAd, as condor_q shows a job: -nobatch lists these."""
    out = []
    for t in state.tasks:
        o = t.outcome
        out.append(
            {
                "LlicMasterId": state.info.master_id,
                "Owner": state.info.owner,
                "ClusterId": state.info.cluster,
                "ProcId": t.process,
                "LlicTaskState": t.state.value,
                "LlicAttempts": t.attempt,
                "LlicFailures": t.failures,
                "ExitCode": o.exit_code if o else None,
                "ExitSignal": o.signal if o else None,
                "RemoteHost": (o.host or None) if o else None,
                "RemoteWallClockTime": o.run_time if o else None,
                "LlicError": o.error if o else None,
                "CompletionDate": t.completed,
            }
        )
    return out


def autoformat(value: Any) -> str:
    """A value as condor_q -af prints it: strings bare, the rest as ClassAd text."""
    return value if isinstance(value, str) else literal(value)


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
                + (
                    f", {bulk['expired']} not returned in their time"
                    if isinstance(bulk.get("expired"), int) and bulk["expired"]
                    else ""
                )
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
    """A date, or '-' for none or one no clock shows (a job ad's attribute may hold anything)."""
    if epoch is None:  # localtime(None) is now
        return "-"
    try:
        return time.strftime("%m/%d %H:%M", time.localtime(epoch))
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"


def _rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}"


def _duration(seconds: float | None) -> str:
    """condor_q's RUN_TIME form: days+hh:mm:ss."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    return f"{s // 86400}+{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def build_parser() -> argparse.ArgumentParser:
    """master_q's command line, condor_q's options where they mean the same."""
    parser = new_parser("master_q", "Progress of llic masters, condor_q style (see the module's doc).")
    parser.add_argument(
        "target",
        metavar="STATE_FILE|ALL",
        nargs="?",
        help="a master.<id>.state file, or ALL (every one under MASTER_OUTPUTS_DIR_PREFIX_PATH); "
        "none: the masters in the pool's schedds",
    )
    parser.add_argument(
        "config", metavar="CONFIG", nargs="?", type=Path, help="llic config (default: $LLIC_CONFIG_FILENAME)"
    )
    parser.add_argument("-name", "--name", dest="schedd", help="only this schedd (with no STATE_FILE|ALL)")
    parser.add_argument(
        "-allusers",
        "--allusers",
        dest="allusers",
        action="store_true",
        help="every user's masters (no STATE_FILE|ALL; default: yours as condor_q; root, condor: all)",
    )
    parser.add_argument(
        "-constraint", "--constraint", dest="constraint", help="a ClassAd expression each master must satisfy"
    )
    parser.add_argument(
        "-af", "-autoformat", "--af", dest="af", nargs="+", metavar="ATTR", help="print these attributes"
    )
    parser.add_argument("-long", "--long", "-l", dest="long", action="store_true", help="every attribute")
    parser.add_argument(
        "-nobatch", "--nobatch", dest="nobatch", action="store_true", help="one line per task, not per master"
    )
    parser.add_argument("-totals", "--totals", dest="totals", action="store_true", help="only the totals")
    parser.add_argument("-json", "--json", dest="json", action="store_true", help="print a JSON list")
    parser.add_argument(
        "-net", "--net", dest="net", action="store_true", help="llic's transfers per subnet and agent"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """master_q's entry point: user errors are one line and exit 2."""
    args = build_parser().parse_args(argv)
    return run_main("master_q", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    errors: list[str] = []
    rows: list[dict[str, Any]] = []
    states: list[MasterState] = []
    if args.target is None:
        if args.config is not None:
            raise ConfigError("a CONFIG needs STATE_FILE or ALL before it")
        rows, title = _from_schedds(args.schedd, None if args.allusers else _own_masters_only())
        if args.nobatch:
            for r in rows:
                try:
                    states.append(load_state(Path(str(r["path"]))))
                except (StateFileError, TypeError, ValueError) as e:
                    errors.append(f"master {r['master_id']}: state file not readable here: {e}")
    else:
        config = load_llic_config(args.config)
        if args.target == "ALL":
            prefix = config.master_outputs_dir_prefix_path
            paths = find_state_files(prefix)
            title = f"llic masters under {prefix}"
        else:
            paths = [Path(args.target)]
            title = f"llic master {args.target}"
        for path in paths:
            try:
                state = load_state(path)
            except StateFileError as e:
                errors.append(str(e))
                continue
            states.append(state)
            rows.append(summarize(state, path))
        if args.target != "ALL" and errors:
            print(f"master_q: error: {errors[0]}", file=sys.stderr)
            return EXIT_USER_ERROR
    if args.nobatch:
        _print_tasks(args, [ad for s in states for ad in task_ads(s)], title)
    else:
        _print_masters(args, rows, title)
    for error in errors:
        print(f"master_q: skipped: {error}", file=sys.stderr)
    return 1 if errors else 0


def _matching(constraint: str | None, ads: list[dict[str, Any]]) -> list[bool]:
    """-constraint, evaluated by the bindings (through the gateway's worker)."""
    if constraint is None:
        return [True] * len(ads)
    import trio

    from common.condor import CondorError, Gateway, GatewayError

    async def match() -> list[bool]:
        async with Gateway(timeout=30) as gw:
            return await gw.match_ads(constraint, ads)

    try:
        return trio.run(match)
    except CondorError as e:
        raise ConfigError(f"-constraint: {e.condor_message}") from None
    except GatewayError as e:
        raise ConfigError(f"-constraint: cannot evaluate: {e}") from None


def _print_masters(args: argparse.Namespace, rows: list[dict[str, Any]], title: str) -> None:
    ads = [master_ad(r) for r in rows]
    keep = _matching(args.constraint, ads)
    rows = [r for r, k in zip(rows, keep, strict=True) if k]
    ads = [a for a, k in zip(ads, keep, strict=True) if k]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.af:
        for ad in ads:
            print(" ".join(autoformat(ad.get(attr)) for attr in args.af))
    elif args.long:
        print("\n\n".join("\n".join(f"{k} = {literal(v)}" for k, v in ad.items()) for ad in ads))
    elif args.net:
        print(render_net(rows, title))
    elif args.totals:
        print(render_table(rows, title).splitlines()[-1])
    else:
        print(render_table(rows, title))


def _print_tasks(args: argparse.Namespace, ads: list[dict[str, Any]], title: str) -> None:
    keep = _matching(args.constraint, ads)
    ads = [a for a, k in zip(ads, keep, strict=True) if k]
    if args.json:
        print(json.dumps(ads, indent=2))
    elif args.af:
        for ad in ads:
            print(" ".join(autoformat(ad.get(attr)) for attr in args.af))
    elif args.long:
        print("\n\n".join("\n".join(f"{k} = {literal(v)}" for k, v in ad.items()) for ad in ads))
    else:
        print(render_tasks(ads, title, totals_only=args.totals))


def render_tasks(ads: list[dict[str, Any]], title: str, *, totals_only: bool = False) -> str:
    """condor_q -nobatch's look, for tasks: one line each, then the totals."""
    lines = [] if totals_only else [
        f"-- {title}: tasks",
        f"{'ID':<14} {'OWNER':<10} {'MASTER':<22} {'STATE':<8} {'RUNS':>4} {'EXIT':>5} {'RUN_TIME':>11} HOST",
    ]  # fmt: skip
    for ad in [] if totals_only else ads:
        exit_code = (
            ad["ExitCode"]
            if ad["ExitCode"] is not None
            else ("sig" + str(ad["ExitSignal"]) if ad["ExitSignal"] else "-")
        )
        run_time = _duration(ad["RemoteWallClockTime"]) if ad["RemoteWallClockTime"] is not None else "-"
        job = f"{ad['ClusterId']}.{ad['ProcId']}"
        lines.append(
            f"{job:<14} {str(ad['Owner'])[:10]:<10} "
            f"{ad['LlicMasterId']:<22} {ad['LlicTaskState']:<8} {ad['LlicAttempts']:>4} {exit_code:>5} "
            f"{run_time:>11} {ad['RemoteHost'] or '-'}"
        )
    count = {s.value: sum(1 for a in ads if a["LlicTaskState"] == s.value) for s in TaskState}
    if not totals_only:
        lines.append("")
    lines.append(
        f"Total for {len(ads)} task{'s' if len(ads) != 1 else ''}: {count['done']} done, "
        f"{count['running']} running, {count['queued']} idle, {count['failed']} failed"
    )
    return "\n".join(lines)


QUEUE_SUPER_USERS = ("root", "condor")  # HTCondor's default QUEUE_SUPER_USERS: condor_q shows them all


def _own_masters_only() -> str | None:
    """The user whose masters master_q shows by default, as the schedd names a job's Owner;
    None (every user's) for a queue superuser or a uid without a name."""
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return None
    return None if user in QUEUE_SUPER_USERS else user


def masters_constraint(owner: str | None) -> str:
    """The job constraint that picks llic masters (scheduler universe, LlicMasterId), `owner`'s
    only if given."""
    constraint = "LlicMasterId =!= undefined && JobUniverse == 7"
    return constraint if owner is None else f"{constraint} && Owner == {json.dumps(owner)}"


def _from_schedds(schedd: str | None, owner: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Masters from their job ads, in every schedd of the pool (or the one named); only
    `owner`'s if given (condor_q shows only the user's own jobs, unless -allusers or root)."""
    import trio

    from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError

    projection = [*MASTER_ATTRS.values(), *(AGENT_ATTR.format(s.value.capitalize()) for s in AGENT_STATES)]
    constraint = masters_constraint(owner)

    async def query() -> list[dict[str, Any]]:
        async with Gateway(timeout=30) as gw:
            names = [schedd] if schedd else [s.name for s in await gw.list_schedds() if s.name]
            ads: list[dict[str, Any]] = []
            for name in names:
                ref = DaemonRef(kind=DaemonKind.SCHEDD, name=name)
                ads += await gw.query_jobs(constraint, projection, schedd=ref)
            return ads

    try:
        ads = trio.run(query)
    except GatewayError as e:
        raise ConfigError(f"cannot read the schedds' queues: {e}") from None
    title = f"llic masters in schedd {schedd}" if schedd else "llic masters in the pool's schedds"
    if owner is not None:
        title = title.replace("llic masters", f"llic masters of {owner}", 1)
    return [row_of_ad(ad) for ad in ads], title
