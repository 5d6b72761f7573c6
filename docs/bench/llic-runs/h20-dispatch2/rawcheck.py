"""Is bench/llic's raw side (one posix_spawn + waitpid loop per core in a multiprocessing.Pool
forked from the benchmark's process, which holds llic, trio and the rest) dearer per spawn than
the same loops in fresh small interpreters (python3 -I -S)? Alternately, 4 rounds, 3 s each.

    PYTHONPATH=REPO .venv/bin/python docs/bench/llic-runs/h20-dispatch2/rawcheck.py
"""

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[4] / "bench" / "llic"
loader = importlib.machinery.SourceFileLoader("benchllic", str(BENCH))
spec = importlib.util.spec_from_loader("benchllic", loader)
assert spec is not None
b = importlib.util.module_from_spec(spec)
sys.modules["benchllic"] = b  # the Pool's workers find _spawn_loop by its module
loader.exec_module(b)
LOOP = """
import os, time
n = 0; end = time.perf_counter() + 3.0
while time.perf_counter() < end:
    pid = os.posix_spawn("/bin/true", ["/bin/true"], os.environ); os.waitpid(pid, 0); n += 1
print(n)
"""


def fresh() -> dict[str, float]:
    """The bench's loops, each in a fresh interpreter."""
    cpu = b.cpu_seconds()
    procs = [
        subprocess.Popen([sys.executable, "-I", "-S", "-c", LOOP], stdout=subprocess.PIPE, text=True)
        for _ in range(os.cpu_count() or 1)
    ]
    n = sum(int(p.communicate()[0]) for p in procs)
    return {"rate": n / 3.0, "cpu": (b.cpu_seconds() - cpu) / n}


for i in range(4):
    steps = [("pool", b.fork_exec_rate), ("fresh", fresh)]
    for name, step in steps if i % 2 == 0 else steps[::-1]:
        r = step()
        load = os.getloadavg()[0]
        print(f"{name}: {r['rate']:.0f} spawns/s, {r['cpu'] * 1e3:.3f} ms CPU per spawn, load {load:.2f}")
