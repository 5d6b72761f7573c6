"""Do parallel rmdirs overlap? `parallel_rmdir.py DIR THREADS`: 400 empty directories removed by
THREADS threads; rmdirs per second."""

import os
import shutil
import sys
import threading
import time

base, k, n = sys.argv[1], int(sys.argv[2]), 400
os.makedirs(base, exist_ok=True)
dirs = [os.path.join(base, f"d{i}") for i in range(n)]
for d in dirs:
    os.mkdir(d)
wall = time.perf_counter()
threads = [
    threading.Thread(target=lambda part: [os.rmdir(d) for d in part], args=(dirs[j::k],)) for j in range(k)
]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"threads {k}: {n / (time.perf_counter() - wall):.0f} rmdir/s")
shutil.rmtree(base)
