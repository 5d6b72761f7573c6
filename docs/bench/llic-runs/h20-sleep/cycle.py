"""One local agent (the zipapp built from REPO) running N x `/bin/sleep D` under a master, against
a raw posix_spawn + waitpid loop: per task, the agent's gap between one task's end and the next
one's start, its run time over D, and the whole cycle over D (ms). `python cycle.py REPO N D`
(at load ~10: 6.2-7.7 ms per cycle with a session per task, 2.7-3.6 ms with a process group)."""

import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import trio

from llic.agent_build import build_agent
from llic.config import LlicConfig
from llic.master import Master
from llic.plan import load_plan
from llic.runners import LocalAgents
from llic.state import MasterInfo, initial_state, load_state, save_state
from llic.submit import parse_submit_file

N, D = int(sys.argv[2]), sys.argv[3]


def raw() -> float:
    t = time.monotonic()
    for _ in range(N):
        os.waitpid(os.posix_spawn("/bin/sleep", ["/bin/sleep", D], os.environ), 0)
    return (time.monotonic() - t) / N - float(D)


def agent() -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="llic-cycle-") as tmp:
        work = Path(tmp)
        (work / "job.sub").write_text(
            f"executable = /bin/sleep\narguments = {D}\nshould_transfer_files = NO\nqueue {N}\n"
        )
        block = parse_submit_file(work / "job.sub", cwd=work).blocks[0]
        out = work / "m"
        out.mkdir()
        (out / "master.c.sub").write_text(block.submit_text())
        info = MasterInfo("c", "c", 1, str(out / "master.c.sub"), 0)
        config = LlicConfig(initial_master_port_number=0)
        save_state(
            out / "master.c.state",
            initial_state(info, config, [t.process for t in block.tasks(1)], time.time()),
        )
        state, plan = load_plan(out / "master.c.state")
        build_agent(out)

        async def run() -> int:
            runner = LocalAgents(work / "scratch", slots=1)
            try:
                return await Master(plan, state, runner, host="127.0.0.1").run()
            finally:
                await runner.aclose()

        trio.run(run)
        outcomes = [t.outcome for t in load_state(out / "master.c.state").tasks if t.outcome is not None]
        recs = sorted((o.finished - o.run_time, o.finished, o.run_time) for o in outcomes if o.finished)
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(recs)]
    runs = [r[2] - float(D) for r in recs]
    return statistics.mean(gaps), statistics.mean(runs), (recs[-1][1] - recs[0][0]) / N - float(D)


for _ in range(2):
    cycle = [round(x * 1e3, 2) for x in agent()]
    print(
        f"raw overhead/task ms {raw() * 1e3:.2f}; agent gap, run overhead, cycle overhead ms {cycle};"
        f" load {os.getloadavg()[0]:.1f}"
    )
