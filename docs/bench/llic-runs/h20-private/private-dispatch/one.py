"""One kind of private_dispatch.py's runs in this process (for py-spy, and for pairs of runs
started together): `one.py TASKS KIND`, one JSON line."""

import json
import os
import sys

import private_dispatch as pd

kind = sys.argv[2]
rate = pd.run(int(sys.argv[1]), 4, kind)
print(json.dumps({"kind": kind, "tasks_per_s": round(rate, 1), "load": os.getloadavg()[0]}), flush=True)
