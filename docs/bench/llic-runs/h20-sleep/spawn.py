"""posix_spawn + waitpid of `/bin/sleep D`, N per round, alternately plain, with setsid, with a
process group, with a process group and file actions: the medians over ROUNDS of the overhead per
task over the sleep (ms). `python spawn.py N D ROUNDS` (run on the shared machine at load 8-10:
setsid 7.9-10.0 ms, the others 5.0-5.6 ms: a new session is a new scheduling autogroup)."""

import os
import statistics
import sys
import time

N, D, ROUNDS = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ARGV = ["/bin/sleep", D]
STDIO = [(os.POSIX_SPAWN_DUP2, 0, 0), (os.POSIX_SPAWN_DUP2, 1, 1), (os.POSIX_SPAWN_DUP2, 2, 2)]
VARIANTS: dict[str, dict] = {
    "raw": {},
    "setsid": {"setsid": True},
    "setpgroup": {"setpgroup": 0},
    "pgroup+fa": {"setpgroup": 0, "file_actions": STDIO},
}
overheads: dict[str, list[float]] = {k: [] for k in VARIANTS}
for _ in range(ROUNDS):
    for name, kw in VARIANTS.items():
        t = time.monotonic()
        for _ in range(N):
            os.waitpid(os.posix_spawn(ARGV[0], ARGV, os.environ, **kw), 0)
        overheads[name].append(((time.monotonic() - t) / N - float(D)) * 1e3)
for name, values in overheads.items():
    print(name, round(statistics.median(values), 2), [round(x, 1) for x in values])
