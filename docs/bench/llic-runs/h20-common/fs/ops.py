"""What each file-system step of a TRANSFER task's directory costs here (wall and CPU, ms per
directory, 500 directories): `ops.py DIR` (DIR on the file system to measure)."""

import os
import shutil
import sys
import time

base = sys.argv[1]
n = 500
os.makedirs(base, exist_ok=True)
big = os.path.join(base, "big")
with open(big, "wb") as fh:
    fh.write(b"x" * 1000)


def make(i: int) -> str:
    """A task's directory as the agent fills it: a hard link, a 10 kB input, a small output."""
    d = os.path.join(base, f"d{i}")
    os.mkdir(d, 0o700)
    os.link(big, d + "/big")
    for name, size in (("in", 10240), ("out", 100)):
        with open(f"{d}/{name}", "wb") as fh:
            fh.write(b"y" * size)
    return d


def timed(label: str, step) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{label}: wall {1e3 * wall / n:.3f} ms/dir  cpu {1e3 * cpu / n:.3f} ms/dir", flush=True)


dirs: list[str] = []
timed("mkdir+fill", lambda: dirs.extend(make(i) for i in range(n)))
timed("rmtree", lambda: [shutil.rmtree(d) for d in dirs])
dirs.clear()
timed("mkdir+fill", lambda: dirs.extend(make(i) for i in range(n)))
os.mkdir(base + "/trash")
timed("rename into trash", lambda: [os.rename(d, base + "/trash/" + os.path.basename(d)) for d in dirs])
timed("rmtree trash", lambda: shutil.rmtree(base + "/trash"))
empty = [os.path.join(base, f"e{i}") for i in range(n)]
timed("mkdir (empty)", lambda: [os.mkdir(d) for d in empty])
timed("rmdir (empty)", lambda: [os.rmdir(d) for d in empty])
shutil.rmtree(base)
