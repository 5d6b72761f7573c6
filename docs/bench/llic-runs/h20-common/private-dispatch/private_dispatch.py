"""One llic master feeding 4 local agents (no HTCondor), to see where llic's common case loses
its time once the agents run: N x /bin/true without and with a 10 kB private input per task
(alternately), `plain_transfer` (/bin/true in a TRANSFER mode, no inputs: added by h20-private),
and (`blast`) the common case's own task (blast.sh, its query, a 1 MB db, an
output back). Tasks per second between the 10th and 90th percentile of completions.

    cd docs/bench/llic-runs/h20-peers2/private-dispatch
    PYTHONPATH=$REPO nice -n 10 $REPO/.venv/bin/python private_dispatch.py 2000 [blast]
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import trio

from llic.agent_build import build_agent
from llic.config import LlicConfig
from llic.master import Master
from llic.plan import load_plan
from llic.runners import LocalAgents
from llic.state import MasterInfo, initial_state, load_state, save_state
from llic.submit import parse_submit_file

BLAST = Path("/tmp/llic-bench-common/blast.sh")  # bench/llic's task script
TRANSFER = "should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n"


def submit_text(work: Path, tasks: int, kind: str) -> str:
    """The submit file of one kind of run, its inputs written into `work`."""
    if kind == "plain":
        return f"executable = /bin/true\nshould_transfer_files = NO\nqueue {tasks}\n"
    if kind == "plain_transfer":
        return f"executable = /bin/true\n{TRANSFER}queue {tasks}\n"
    query = os.urandom(10240)
    for i in range(tasks):
        (work / f"query.{i}").write_bytes(query)
    if kind == "private":
        return (
            f"executable = /bin/true\narguments = query.$(Process)\n{TRANSFER}"
            f"transfer_input_files = query.$(Process)\nqueue {tasks}\n"
        )
    (work / "db").write_bytes(os.urandom(1 << 20))
    (work / "blast.sh").write_text(BLAST.read_text())
    (work / "blast.sh").chmod(0o755)
    return (
        f"executable = blast.sh\narguments = query.$(Process) db out.$(Process)\n{TRANSFER}"
        f"transfer_input_files = db, query.$(Process)\nqueue {tasks}\n"
    )


def run(tasks: int, agents: int, kind: str) -> float:
    """Tasks per second of one master run (as bench/llic's dispatch measures it)."""
    with tempfile.TemporaryDirectory(prefix="llic-pd-") as tmp:
        work = Path(tmp)
        (work / "job.sub").write_text(submit_text(work, tasks, kind))
        block = parse_submit_file(work / "job.sub", cwd=work).blocks[0]
        out = work / "m"
        out.mkdir()
        (out / "master.bench.sub").write_text(block.submit_text())
        info = MasterInfo("bench", "bench", 1, str(out / "master.bench.sub"), 0)
        config = LlicConfig(initial_master_port_number=0)
        processes = [t.process for t in block.tasks(1)]
        save_state(out / "master.bench.state", initial_state(info, config, processes, time.time()))
        state, plan = load_plan(out / "master.bench.state")
        build_agent(out)

        async def go() -> int:
            runner = LocalAgents(work / "scratch", slots=agents)
            try:
                return await Master(plan, state, runner, host="127.0.0.1").run()
            finally:
                await runner.aclose()

        assert trio.run(go) == 0
        ends = sorted(t.completed for t in load_state(out / "master.bench.state").tasks if t.completed)
    assert len(ends) == tasks, len(ends)
    lo, hi = ends[len(ends) // 10], ends[len(ends) * 9 // 10]
    return (len(ends) * 8 // 10) / (hi - lo)


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    kinds = ["blast", "blast"] if sys.argv[2:] == ["blast"] else ["plain", "private", "private", "plain"]
    for kind in kinds:
        before = os.getloadavg()[0]
        rate = run(tasks, 4, kind)
        load = [round(before, 2), round(os.getloadavg()[0], 2)]
        record = {"kind": kind, "tasks": tasks, "agents": 4, "tasks_per_s": round(rate, 1), "load": load}
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
