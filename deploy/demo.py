"""`make demo`: poolD's flocking on four real HTCondor pools.

Pools A-D (3 slots each, real HTCondor 23.9 daemons in sandbox hosts) get a burst of short jobs
at D, twice: first with no poolD (D's jobs can only queue for D's three slots), then with poolD
on every central manager, joined through A (D's poolD finds A-C's free slots and points D's
schedd at them). The demo prints where D's jobs ran and how long they waited, then tears down.

The pools run HTCondor's recommended security, each with its own signing key: the tokens that let
D's schedd in at A-C and their negotiators in at D are negotiated by the poolds themselves
(`[trust]`, deploy/harness/federation.py); the demo prints what they decided about them.
`SANDBOX_SECURITY=open` runs the old open pools instead, for comparison.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness works from a checkout

import trio

from common.logging import configure_logging
from deploy.harness.federation import Federation
from deploy.harness.sandbox import Sandbox

POOLS = ["A", "B", "C", "D"]
JOBS = 24
SECONDS = 6


async def burst(fed: Federation) -> list[dict]:
    """Submit the burst at D and wait for it; returns the finished jobs' records."""
    async with fed.pools["D"].gateway() as gw:
        result = await gw.submit(
            {"executable": "/bin/sleep", "arguments": str(SECONDS), "should_transfer_files": "NO",
             "initialdir": "/tmp"},
            count=JOBS,
        )  # fmt: skip
        with trio.fail_after(600):
            while True:
                done = await gw.job_history(
                    f"ClusterId == {result.cluster}",
                    [
                        "ProcId",
                        "QDate",
                        "JobCurrentStartDate",
                        "CompletionDate",
                        "LastRemoteHost",
                        "ExitCode",
                    ],
                )
                if len(done) == JOBS:
                    return done
                await trio.sleep(1)


def summary(jobs: list[dict]) -> dict[str, object]:
    waits = [j["JobCurrentStartDate"] - j["QDate"] for j in jobs]
    where = {p: 0 for p in POOLS}
    for j in jobs:
        where[str(j.get("LastRemoteHost", "?@?.?")).split("@")[-1].split(".")[1]] += 1
    span = max(j["CompletionDate"] for j in jobs) - min(j["QDate"] for j in jobs)
    return {
        "ran at A/B/C/D": "/".join(str(where[p]) for p in POOLS),
        "wait mean (s)": f"{statistics.fmean(waits):.1f}",
        "wait max (s)": f"{max(waits):.0f}",
        "all done after (s)": f"{span:.0f}",
        "failed": str(sum(1 for j in jobs if j.get("ExitCode") != 0)),
    }


def _willing_if_complete(fed: Federation) -> list[dict]:
    willing = fed.status("D")["willing_list"]
    return willing if len(willing) == 3 else []


def main() -> int:
    if os.geteuid() != 0:
        print("demo: run as root (the sandbox makes network namespaces)", file=sys.stderr)
        return 2
    configure_logging("demo", level="warning")
    box = Sandbox()  # recommended security (SANDBOX_SECURITY=open: the old open pools)
    workdir = box.shared_dir()
    print(f"starting pools {', '.join(POOLS)}: 3 slots each, real HTCondor in sandbox hosts ...")
    fed = Federation(box, workdir, POOLS)
    trust = ", tokens between pools by poolD" if fed.trusting("D") else ""
    print(f"security: {fed.pools['D'].security}{trust}")
    try:
        print(f"burst of {JOBS} x {SECONDS}-second jobs at D, no poolD ...")
        without = summary(trio.run(burst, fed))
        print("starting poolD on every central manager, joined through A ...")
        fed.start_all()
        willing = fed.wait("D to learn of A-C's free slots", lambda: _willing_if_complete(fed))
        print("D's willing list: " + ", ".join(f"{e['pool']} ({e['free_slots']} free)" for e in willing))
        print("same burst at D, with poolD ...")
        with_poold = summary(trio.run(burst, fed))
        for name in POOLS:
            print(f"what {name}'s poold decided:")
            for line in fed.status(name)["decisions"]:
                if "flock" in line.lower() or "idle" in line or "token" in line:
                    print(f"  {line}")
        print()
        print(f"{'':<22}{'without poolD':>16}{'with poolD':>14}")
        for key in without:
            print(f"{key:<22}{without[key]:>16}{with_poold[key]:>14}")
        return 1 if without["failed"] != "0" or with_poold["failed"] != "0" else 0
    finally:
        try:
            fed.stop_all()  # a poold whose stop hangs is reported, after the pools are down
        finally:
            for name in POOLS:
                box.down(name)
            shutil.rmtree(workdir, ignore_errors=True)
            print("pools stopped")


if __name__ == "__main__":
    sys.exit(main())
