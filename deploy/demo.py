"""`make demo`: a real HTCondor pool, a few jobs through the gateway, their results, tear-down.

Grows with the suite; for now it shows the foundation every daemon stands on: a sandbox pool of
two hosts and the HTCondor gateway driving it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from common.condor import Gateway
from common.logging import configure_logging

SANDBOX = Path(__file__).resolve().parent / "sandbox"
POOL = "demo"
JOBS = 6


def sandbox(*args: str) -> str:
    return subprocess.run([str(SANDBOX), *args], check=True, capture_output=True, text=True).stdout


async def run_jobs(pool: dict, workdir: Path) -> int:
    async with Gateway(condor_config=pool["client_config"], collector=pool["collector"]) as gw:
        load = await gw.pool_load()
        print(
            f"pool {POOL}: {load.total_slots} slots ({load.free_slots} free) on {len(pool['hosts'])} hosts, "
            f"{len(load.schedds)} schedds; HTCondor bindings {(await gw.version()).split()[1]}"
        )
        result = await gw.submit(
            {
                "executable": "/bin/sh",
                "arguments": "\"-c 'echo $(Process) x $(Process) = `expr $(Process) \\* $(Process)`'\"",
                "initialdir": str(workdir),
                "output": "out.$(Process)",
                "error": "err.$(Process)",
                "should_transfer_files": "NO",
            },
            count=JOBS,
        )
        print(f"submitted jobs {result.job_ids[0]}..{result.job_ids[-1]} through the gateway")
        await gw.reschedule()
        with trio.fail_after(180):
            while True:
                done = await gw.job_history(
                    f"ClusterId == {result.cluster}",
                    ["ProcId", "ExitCode", "LastRemoteHost", "RemoteWallClockTime"],
                )
                if len(done) == JOBS:
                    break
                await trio.sleep(1)
    print(f"{'job':<8}{'exit':<6}{'ran on':<34}output")
    failures = 0
    for job in sorted(done, key=lambda j: j["ProcId"]):
        output = (workdir / f"out.{job['ProcId']}").read_text().strip()
        failures += job["ExitCode"] != 0
        host = job.get("LastRemoteHost", "?")
        print(f"{result.cluster}.{job['ProcId']:<6}{job['ExitCode']:<6}{host:<34}{output}")
    return failures


def main() -> int:
    if os.geteuid() != 0:
        print("demo: run as root (the sandbox makes network namespaces)", file=sys.stderr)
        return 2
    configure_logging("demo", level="warning")
    print("starting sandbox pool (real HTCondor 23.9 daemons in a Debian 13 root)...")
    pool = json.loads(sandbox("up", POOL, "--slots", "2", "--hosts", "2", "--json"))
    workdir = Path(tempfile.mkdtemp(prefix="demo-", dir="/tmp"))
    os.chmod(workdir, 0o1777)
    try:
        failures = trio.run(run_jobs, pool, workdir)
    finally:
        sandbox("down", POOL)
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"pool {POOL} stopped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
