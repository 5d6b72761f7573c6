"""The llic master's core alone, and the agent's encoding of results: CPU per task, best of 5.

    .venv/bin/python docs/bench/llic-runs/h20/corebench.py REPO

REPO: the checkout whose llic is measured (main's or a branch's). The core gets 6 agents, window
6, 30,000 tasks, and each agent's results in batches of 3 (as `results` messages bring them):
with `handle_results` where the core has it, else one `handle` per result. The encoding is
`lean_msgpack.packb` of a `results` message of 3 plain results.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def core_us_per_task(llic: dict[str, Any], n: int = 30000) -> float:
    """CPU microseconds per task of the core handling n tasks' results."""
    events, core_mod, task_mod = llic["events"], llic["master_core"], llic["task"]
    core = core_mod.MasterCore.new(range(n), llic["config"].LlicConfig(window_size=6))
    out = core.start(6, now=0.0)
    submits = [a for a in out.actions if isinstance(a, events.SubmitAgent)]
    held: dict[str, list[Any]] = {}
    for i, sub in enumerate(submits):
        core.handle(events.AgentSubmitted(sub.agent, f"{i}.0"), 1.0)
        connected = core.handle(events.AgentConnected(sub.agent), 1.0)
        held[sub.agent] = [t for a in connected.actions if isinstance(a, events.SendTasks) for t in a.tasks]
    batched = hasattr(core, "handle_results")
    start, now = time.process_time(), 2.0
    while not core.over:
        for agent, tasks in held.items():
            results = [
                events.ResultReceived(
                    agent,
                    task_mod.TaskResult(a.process, a.attempt, "ok", exit_code=0, host="n1", run_time=0.001),
                )
                for a in tasks[:3]
            ]
            del tasks[:3]
            if not results:
                continue
            now += 0.001
            outs = [core.handle_results(results, now)] if batched else [core.handle(r, now) for r in results]
            for o in outs:
                tasks += [t for a in o.actions if isinstance(a, events.SendTasks) for t in a.tasks]
    return (time.process_time() - start) / n * 1e6


def encode_us_per_result(llic: dict[str, Any], n: int = 20000) -> float:
    """CPU microseconds per result of encoding a 3-result `results` message with the lean codec."""
    protocol, task_mod = llic["protocol"], llic["task"]
    results = [
        task_mod.TaskResult(
            i, 1, "ok", exit_code=0, host="slot1@host.example", run_time=0.0012, started=1.7e9, finished=1.7e9
        )
        for i in range(3)
    ]
    msg = {"t": protocol.RESULTS, "results": [protocol._wire(r) for r in results]}
    start = time.process_time()
    for _ in range(n):
        llic["lean_msgpack"].packb(msg)
    return (time.process_time() - start) / n / 3 * 1e6


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    import importlib

    names = ("config", "events", "master_core", "task", "protocol", "lean_msgpack")
    llic = {name: importlib.import_module(f"llic.{name}") for name in names}
    core = min(core_us_per_task(llic) for _ in range(5))
    encode = min(encode_us_per_result(llic) for _ in range(5))
    print(f"core us/task {core:.1f}   lean encode us/result {encode:.2f}")


if __name__ == "__main__":
    main()
