"""A rolling upgrade on the simulator (sim.mixed_ring): N old nodes (3715ee6), each restarted as
a current one in turn; prints one JSON line. Usage: overlay_rolling60.py NODES SEED (run from the
tree whose core is "current")."""

import json
import sys

from sim.mixed_ring import Counts, MixedRing, _summary, rolling_upgrade

n, s = int(sys.argv[1]), int(sys.argv[2])
ring = MixedRing(n, s, set(range(n)))
ring.net.run_until(n * 0.5 + 300)
ring.counts = Counts()
up = rolling_upgrade(ring)
ring.net.run_until(ring.net.now + 300)
print(json.dumps({"seed": s, "nodes": n} | up | _summary(ring)))
