"""h20-common: one agent's task cycle (prepare, spawn, wait, collect, discard) in one process,
no master, as h20-transfer's cycle.py: `cycle.py MODE N [KIND]`, one JSON line.

KIND `true` (default): /bin/true with nothing to install. KIND `common`: the common case's task
(bench/llic's blast.sh, a 50 MB shared `db` hard-linked from the cache, a private 10 kB query as
a blob, an output file read back), its script's own run included. Run with PYTHONPATH at the
checkout to measure; the JSON says which code ran (`code`) and the trash's figures if it has one.
"""

import json
import os
import select
import shutil
import sys
import tempfile
import time

import llic
from llic import protocol
from llic.agent.inputfile import AgentInput
from llic.agent.launcher import Launcher
from llic.agent.workspace import Workspace
from llic.task import Task

BLAST = '#!/bin/sh\n{ head -c 65536 "$2" | cksum; cat "$1"; } > "$3"\n'

mode, n = sys.argv[1], int(sys.argv[2])
kind = sys.argv[3] if len(sys.argv) > 3 else "true"
tmp = tempfile.mkdtemp(prefix="h20c-", dir=os.environ.get("CYCLE_DIR"))
query = os.urandom(10240)
if kind == "common":
    with open(os.path.join(tmp, "db"), "wb") as fh:
        fh.write(os.urandom(50 << 20))
    with open(os.path.join(tmp, "blast.sh"), "w") as fh:
        fh.write(BLAST)
    cfg = AgentInput(
        master="m", secret=b"x" * 32, window=2, mode=mode, files_style="condor",
        executable="blast.sh", common_files=["db"],
    )  # fmt: skip
else:
    cfg = AgentInput(master="m", secret=b"x" * 32, window=2, mode=mode, files_style="condor")
ws = Workspace(cfg, tmp, tmp, dict(os.environ))
ws.setup()
la = Launcher("h")
la.start(ws.work)


def task(i: int) -> tuple[Task, list]:
    if kind != "common":
        return Task(i, "/bin/true", tmp), []
    t = Task(
        i, "blast.sh", tmp, arguments=(f"query.{i}", "db", f"out.{i}"),
        transfer_input_files=("db", f"query.{i}"),
    )  # fmt: skip
    return t, [(protocol.file_entry(f"query.{i}", query), query)]


def loop() -> None:
    """N tasks one after another, as the agent runs them."""
    for i in range(n):
        t, blobs = task(i)
        job = ws.prepare(t, blobs)
        la.submit(job)
        done = []
        while not done:
            select.select([la._wake_r], [], [], 1.0)
            done = la.poll()
        entries, _blobs, notes = ws.collect(job)
        assert kind != "common" or [e["path"] for e in entries] == [f"out.{i}"], (entries, notes)
        ws.discard(job)


t, c = time.perf_counter(), time.process_time()
loop()
wall, cpu = time.perf_counter() - t, time.process_time() - c
children = os.times()
record = {
    "code": os.path.dirname(os.path.dirname(llic.__file__)),
    "mode": mode,
    "kind": kind,
    "tasks": n,
    "tasks_per_s": round(n / wall),
    "agent_cpu_us_per_task": round(1e6 * cpu / n),
    "load": os.getloadavg()[0],
    "disk_load": os.environ.get("CYCLE_DISK_LOAD") == "1",
}
trash = getattr(ws, "trash", None)
if trash is not None:
    record["trash_removed_by_agent"] = trash.removed_here
    record["trash_pending_at_end"] = trash.waiting
t = time.perf_counter()
la.close()
ws.cleanup()
record["cleanup_s"] = round(time.perf_counter() - t, 3)
print(json.dumps(record), flush=True)
shutil.rmtree(tmp, ignore_errors=True)
