"""private_dispatch.run for one kind, with the CPU of this process (the master) and of its
children (agents and their tasks)."""

import json
import os
import resource
import sys

import private_dispatch as pd

kind = sys.argv[2]
rate = pd.run(int(sys.argv[1]), 4, kind)
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
record = {"kind": kind, "tasks_per_s": round(rate, 1), "load": os.getloadavg()[0]}
record["master_cpu_s"] = round(me.ru_utime + me.ru_stime, 2)  # with its set-up (inputs, zipapp)
record["children_cpu_s"] = round(kids.ru_utime + kids.ru_stime, 2)  # agents and their tasks
print(json.dumps(record), flush=True)
