"""Crashes in the middle of a rolling upgrade, on the simulator (sim.mixed_ring): a ring of old
nodes (3715ee6) half upgraded one by one; then 3 old and 3 new nodes crash for good and 2 old
nodes restart (as old) through an upgraded bootstrap; measured 300 s later. Prints one JSON
line. Usage: overlay_crash_midupgrade.py NODES SEED (run from the tree whose core is "current")."""

import json
import sys

from sim.mixed_ring import Counts, MixedRing, _summary, rolling_upgrade

n, s = int(sys.argv[1]), int(sys.argv[2])
ring = MixedRing(n, s, set(range(n)))
ring.net.run_until(n * 0.5 + 300)
ring.counts = Counts()
rolling_upgrade(ring, nodes=list(range(0, n, 2)), lookups=50)
net = ring.net
old = sorted(ring.old)
new = [i for i in range(n) if i not in ring.old]
for i in old[:3] + new[:3]:
    net.crash(i)
net.run_until(net.now + 5)
for i in old[3:5]:
    net.crash(i)
    net.run_until(net.now + 5)
    ring.start(i, old=True, bootstrap=new[5], at=net.now)
net.run_until(net.now + 300)
print(json.dumps({"seed": s, "nodes": n} | _summary(ring)))
