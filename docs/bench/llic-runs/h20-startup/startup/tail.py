# ruff: noqa: E501  (a measurement script kept with its results, not product code)
"""Chains of back-to-back tasks (one per agent) from a master state file: per agent, first start, last end, tasks."""

import json
import sys

recs = []
for line in open(sys.argv[1]):
    line = line.strip().rstrip(",")
    if line.startswith('{"process"'):
        r = json.loads(line)
        o = r.get("outcome")
        if o and o.get("finished"):
            recs.append((o["finished"] - o["run_time"], o["finished"]))
recs.sort()
chains = []  # each: [first_start, last_end, n]
for s, e in recs:
    best = None
    for c in chains:
        if c[1] <= s + 0.002 and (best is None or c[1] > best[1]):
            best = c
    if best is not None and s - best[1] < 0.5:
        best[1] = e
        best[2] += 1
    else:
        chains.append([s, e, 1])
t0 = min(c[0] for c in chains)
for c in sorted(chains):
    print(f"agent start {c[0] - t0:7.3f} end {c[1] - t0:8.3f} tasks {c[2]}")
print(
    "spread of ends", round(max(c[1] for c in chains) - min(c[1] for c in chains), 3), "chains", len(chains)
)
