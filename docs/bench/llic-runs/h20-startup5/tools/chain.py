# a measurement script kept with its results, not product code
"""One line per start-up step and run, from measure.py's output (sub-second HTCondor logs): seconds
from master_submitter's start. python chain.py OUT"""

import datetime
import glob
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])
recs = [json.loads(line) for line in open(out / "startup.jsonl")]
TS = re.compile(r"^(\d\d)/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) (.*)")


def parse(path):
    evs = []
    for line in open(path, errors="replace"):
        m = TS.match(line)
        if m:
            mo, d, y, hh, mi, ss, ms, rest = m.groups()
            t = datetime.datetime(
                2000 + int(y), int(mo), int(d), int(hh), int(mi), int(ss), int(ms.ljust(6, "0")[:6])
            ).timestamp()
            evs.append((t, rest))
    return evs


logs = {f.split("/logs/")[1]: parse(f) for f in glob.glob(str(out / "logs" / "host*" / "*Log*"))}
STEPS = [
    ("neg_cycle", "NegotiatorLog", r"Started Negotiation Cycle"),
    ("neg_match", "NegotiatorLog", r"Matched "),
    ("sched_resched", "SchedLog", r"[Rr]eschedule"),
    ("sched_univ", "SchedLog", r"Successfully created sched universe"),
    ("shadow", "ShadowLog", r"STARTING UP"),
    ("starter", "StarterLog", r"STARTING UP"),
    ("xfer_done", "StarterLog", r"File transfer completed"),
    ("exec", "StarterLog", r"Create_Process succeeded"),
]


def marks(timing):
    d = {}
    for t in timing:
        parts = t.split()
        if parts[1].startswith("gw.") or parts[1] == "_read_submit":
            d.setdefault(parts[1], []).append(float(parts[-1]))
        else:
            d[parts[1]] = [float(parts[-1])]
    return d


for r in recs:
    w = r["wall0"]
    hi = w + r["first_task_s"] + 0.5
    m = marks(r["timing"])
    row = {"run": r["run"], "load": round(r["load"], 1)}
    row["act"] = m.get("gw.act", [None])[0]
    row["token"] = m.get("gw.fetch_token", [None])[0]
    row["submit2"] = m.get("gw.submit", [None, None])[-1]
    row["sub_end"] = m.get("end", [None])[0]
    for name, logname, pat in STEPS:
        ts = sorted(
            t - w
            for f, evs in logs.items()
            if logname in f
            for t, rest in evs
            if w - 1 <= t <= hi and re.search(pat, rest)
        )
        if name in ("neg_cycle", "sched_resched"):
            row[name] = [round(t, 2) for t in ts]
        else:
            row[name] = round(ts[0], 2) if ts else None
    row["master_listen"] = r["master_started_s"]
    row["first_task"] = r["first_task_s"]
    row["took"] = r["took_s"]
    print(json.dumps(row))
