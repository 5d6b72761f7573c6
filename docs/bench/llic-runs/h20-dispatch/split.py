"""Where one master's CPU goes in `bench/llic dispatch`'s run: thread CPU time around its parts.

    PYTHONPATH=REPO nice -n 10 .venv/bin/python docs/bench/llic-runs/h20-dispatch/split.py REPO [TASKS]

REPO: the checkout whose llic is measured (main's or a branch's). The same run as the benchmark's
(one master in this process, 4 local agents, TASKS x /bin/true, default 5,000), without a
profiler: the master's rusage and its children's (agents and tasks) per task, and the main
thread's CPU time inside the master's parts (an inner part counts in the outer one only).
"""

from __future__ import annotations

import collections
import functools
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, sys.argv[1])

import trio

from llic import connection as c
from llic import master as m
from llic import protocol as p
from llic.agent_build import build_agent
from llic.config import LlicConfig
from llic.plan import load_plan
from llic.runners import LocalAgents
from llic.state import MasterInfo, initial_state, save_state
from llic.submit import parse_submit_file

spent: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()
inside = [0]


def timed(owner: Any, name: str, label: str) -> None:
    """Count the thread CPU time of owner.name under `label` (outermost timed call only)."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if inside[0]:
            return inner(*args, **kwargs)
        inside[0] += 1
        start = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - start
            calls[label] += 1
            inside[0] -= 1

    setattr(owner, name, wrapper)


timed(m.Master, "feed_results", "core and its actions (results)")
timed(m.Master, "feed", "core and its actions (other events)")
timed(m.Master, "_encode_state", "state file encoding (periodic)")
timed(p.Decoder, "next", "decoding and checking messages")
timed(c.Connections, "_batch_frames", "encoding tasks (sender)")
timed(m.Master, "__init__", "Master.__init__ (state, plan)")


def main() -> None:
    tasks = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    with tempfile.TemporaryDirectory(prefix="llic-dispatch-") as tmp:
        work = Path(tmp)
        (work / "job.sub").write_text(f"executable = /bin/true\nshould_transfer_files = NO\nqueue {tasks}\n")
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

        async def run() -> int:
            runner = LocalAgents(work / "scratch", slots=4)
            try:
                return await m.Master(plan, state, runner, host="127.0.0.1").run()
            finally:
                await runner.aclose()

        me0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        thread0, wall0 = time.thread_time(), time.time()
        assert trio.run(run) == 0
        wall, thread = time.time() - wall0, time.thread_time() - thread0
        me1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    me = me1.ru_utime - me0.ru_utime + me1.ru_stime - me0.ru_stime
    kids = kids1.ru_utime - kids0.ru_utime + kids1.ru_stime - kids0.ru_stime
    us = 1e6 / tasks
    print(
        f"wall {wall:.2f} s, load {os.getloadavg()[0]:.2f}; us per task: master {me * us:.1f}"
        f" (system {(me1.ru_stime - me0.ru_stime) * us:.1f}), agents and tasks {kids * us:.1f},"
        f" together {(me + kids) * us:.1f}"
    )
    for label, seconds in spent.most_common():
        print(f"  {label:36s} {seconds * us:6.1f} us per task ({calls[label]} calls)")
    print(f"  {'the rest (trio, sockets, timers)':36s} {(thread - sum(spent.values())) * us:6.1f}")


if __name__ == "__main__":
    main()
