"""master_rm (condor_rm for llic): cancel masters, their agents with them; or remove some tasks.

    master_rm MASTER_ID|CLUSTER ... [-name SCHEDD] [-reason TEXT]
    master_rm STATE_FILE [PROCESS ...] [-reason TEXT]

A master is a cluster and its tasks are its jobs, so master_rm acts as condor_rm does on either.
Named by its id (master.<id>/) or its job's cluster, a master is cancelled: master_rm removes the
master's job (the scheduler-universe job master_submitter made; the master, told to stop, removes
its agents and saves its state on the way out), then every agent job tagged with that master
(`LlicMaster`), in case the master was not running to do it. Nothing is deleted: the state file
and the output directory stay, and master_q still reads them. Named by its state file, the master
is asked to remove tasks (the PROCESS numbers given, else every task not yet finished): it records
each as removed in its job event log and stops those running (llic/user_requests.py), as
master_release and master_hold ask it to release or hold them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from common.cli import new_parser, run_main
from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError
from common.config import ConfigError
from llic.agent_job import MASTER_ATTR
from llic.state import MASTER_ID

MASTER_JOB = "LlicMasterId"  # the master job's attribute (llic.submitter.master_job)
DEFAULT_REASON = "removed by master_rm"


def build_parser() -> argparse.ArgumentParser:
    """master_rm's command line."""
    parser = new_parser("master_rm", __doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument(
        "targets",
        nargs="+",
        metavar="MASTER_ID|CLUSTER ... | STATE_FILE [PROCESS ...]",
        help="the masters to cancel; or a master's state file and the tasks to remove",
    )
    parser.add_argument(
        "-name", "--name", dest="schedd", help="the schedd (default: every schedd of the pool)"
    )
    parser.add_argument(
        "-reason",
        "--reason",
        help=f"the reason HTCondor records (default: '{DEFAULT_REASON}'; for tasks: 'via master_rm')",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """master_rm's entry point: 0 when every master was found and removed (or the request for
    tasks written), 1 when one was not, 2 for a bad command line or state file."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if names_state_file(args.targets[0]):
        from llic.cli import ask_master

        processes = args.targets[1:]
        if not all(p.isdigit() for p in processes) or args.schedd:
            parser.error("after a STATE_FILE come only task process numbers (and no -name)")
        return run_main(
            "master_rm",
            lambda: ask_master(
                "remove", "master_rm", Path(args.targets[0]), [int(p) for p in processes], args.reason
            ),
        )
    return run_main("master_rm", lambda: _main(args))


def names_state_file(target: str) -> bool:
    """A master's state file (its tasks are meant), not a master id or cluster."""
    return target.endswith(".state") or Path(target).is_file()


def master_id_of(target: str) -> tuple[str | None, int | None]:
    """(master id, cluster) a target names: digits a cluster, else a master id (ConfigError if it
    cannot be one)."""
    if names_state_file(target):
        raise ConfigError(
            f"{target}: a state file names tasks (master_rm STATE_FILE [PROCESS ...]), give it first"
        )
    if target.isdigit():
        return None, int(target)
    if not MASTER_ID.match(target):
        raise ConfigError(
            f"{target!r} is neither a master id (letters, digits, '_', '.', '-') nor a cluster number"
        )
    return target, None


def _main(args: argparse.Namespace) -> int:
    import trio

    targets = [master_id_of(t) for t in args.targets]

    async def cancel() -> int:
        async with Gateway(timeout=60) as gw:
            remover = Remover(gw, args.reason or DEFAULT_REASON)
            await remover.find_schedds(args.schedd)
            results = [await remover.cancel(mid, cluster, text) for (mid, cluster), text in zip(
                targets, args.targets, strict=True)]  # fmt: skip
        return 0 if all(results) else 1

    try:
        return trio.run(cancel)
    except GatewayError as e:
        raise ConfigError(f"HTCondor: {e}") from None


class Remover:
    """Finds masters' jobs in the schedds and removes them and their agents."""

    def __init__(self, gw: Gateway, reason: str) -> None:
        self.gw = gw
        self.reason = reason
        self.schedds: list[DaemonRef] = []

    async def find_schedds(self, name: str | None) -> None:
        """The named schedd, else every schedd of the pool."""
        names = [name] if name else [s.name for s in await self.gw.list_schedds() if s.name]
        self.schedds = [DaemonRef(kind=DaemonKind.SCHEDD, name=n) for n in names]

    async def cancel(self, master_id: str | None, cluster: int | None, text: str) -> bool:
        """Remove the masters a target names, and their agents; print one line each."""
        where = f"{MASTER_JOB} == {json.dumps(master_id)}" if master_id else f"ClusterId == {cluster}"
        found: list[tuple[DaemonRef, dict[str, Any]]] = []
        for ref in self.schedds:
            jobs = await self.gw.query_jobs(
                f"{where} && {MASTER_JOB} =!= undefined && JobUniverse == 7",
                ["ClusterId", "ProcId", MASTER_JOB, "LlicStateFile"],
                schedd=ref,
            )
            found += [(ref, job) for job in jobs]
        ids = sorted({str(job[MASTER_JOB]) for _, job in found} or ({master_id} if master_id else set()))
        if not ids:
            print(f"master_rm: no llic master in cluster {cluster}", file=sys.stderr)
            return False
        ok = True
        for mid in ids:
            masters = [(ref, job) for ref, job in found if str(job[MASTER_JOB]) == mid]
            for ref, job in masters:
                await self._remove(f"ClusterId == {job['ClusterId']} && ProcId == {job['ProcId']}", ref)
            agents = 0
            for ref in self.schedds:
                agents += await self._remove(f"{MASTER_ATTR} == {json.dumps(mid)}", ref)
            if not masters and not agents:
                print(f"master_rm: no master {mid} in the queue ({text})", file=sys.stderr)
                ok = False
                continue
            state = next((str(j["LlicStateFile"]) for _, j in masters if j.get("LlicStateFile")), None)
            jobs_text = ", ".join(f"{j['ClusterId']}.{j['ProcId']}" for _, j in masters) or "not in the queue"
            kept = f"state kept in {state}" if state else "state kept"
            print(f"master {mid}: master job {jobs_text} removed, {agents} agent job(s) removed; {kept}")
        return ok

    async def _remove(self, constraint: str, ref: DaemonRef) -> int:
        try:
            return await self.gw.remove_jobs(constraint, self.reason, schedd=ref)
        except GatewayError as e:
            # HTCondor answers "no such job" when nothing matched: nothing to remove.
            if "matched" in str(e).lower() or "no such" in str(e).lower():
                return 0
            raise
