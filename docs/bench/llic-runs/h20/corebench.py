"""The master core alone: 6 agents, window 6, 30,000 tasks, results in batches of 3 (as the agents
send them); CPU per task, best of 5. And the agent's encoding of a 3-result batch."""
import sys, time
repo = sys.argv[1]
sys.path.insert(0, repo)
from llic.config import LlicConfig
from llic.events import AgentConnected, AgentSubmitted, ResultReceived, SendTasks, SubmitAgent
from llic.master_core import MasterCore
from llic.task import TaskResult
from llic import lean_msgpack, protocol

def run(n=30000):
    core = MasterCore.new(range(n), LlicConfig(window_size=6))
    out = core.start(6, now=0.0)
    subs = [a for a in out.actions if isinstance(a, SubmitAgent)]
    held = {}
    for i, s in enumerate(subs):
        core.handle(AgentSubmitted(s.agent, f"{i}.0"), 1.0)
        o = core.handle(AgentConnected(s.agent), 1.0)
        held[s.agent] = [t for a in o.actions if isinstance(a, SendTasks) for t in a.tasks]
    batch = hasattr(core, "handle_results")
    t0 = time.process_time()
    now = 2.0
    while not core.over:
        for agent, h in held.items():
            rs = [ResultReceived(agent, TaskResult(a.process, a.attempt, "ok", exit_code=0, host="n1", run_time=0.001)) for a in h[:3]]
            del h[:3]
            if not rs:
                continue
            now += 0.001
            outs = [core.handle_results(rs, now)] if batch else [core.handle(r, now) for r in rs]
            for o in outs:
                h += [t for a in o.actions if isinstance(a, SendTasks) for t in a.tasks]
    return (time.process_time() - t0) / n * 1e6

def enc(n=20000):
    rs = [TaskResult(i, 1, "ok", exit_code=0, host="slot1@host.example", run_time=0.0012, started=1.7e9, finished=1.7e9+0.001) for i in range(3)]
    msg = {"t": protocol.RESULTS, "results": [protocol._wire(r) for r in rs]}
    t0 = time.process_time()
    for _ in range(n):
        lean_msgpack.packb(msg)
    return (time.process_time() - t0) / n / 3 * 1e6

print(f"core us/task {min(run() for _ in range(5)):.1f}   lean encode us/result {min(enc() for _ in range(5)):.2f}")
