# ruff: noqa: B007,E501,E741,N806  (a measurement script kept with its results, not product code)
"""Per-run start-up timeline from measure.py's output: submitter marks, HTCondor log events (sub-second), tasks."""

import datetime
import glob
import json
import os
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])
recs = (
    [json.loads(l) for l in open(out / "startup.jsonl")]
    if (out / "startup.jsonl").exists()
    else [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
)
TS = re.compile(r"^(\d\d)/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) (.*)")


def parse(path):
    evs = []
    for line in open(path, errors="replace"):
        m = TS.match(line)
        if not m:
            continue
        mo, d, y, H, M, S, ms, rest = m.groups()
        t = datetime.datetime(
            2000 + int(y), int(mo), int(d), int(H), int(M), int(S), int(ms.ljust(6, "0")[:6])
        ).timestamp()
        evs.append((t, rest))
    return evs


logs = {}
for f in glob.glob(str(out / "logs" / "host*" / "*")):
    base = os.path.basename(f)
    if base.startswith(
        ("SchedLog", "NegotiatorLog", "StartLog", "StarterLog.slot", "ShadowLog", "CollectorLog")
    ):
        logs[f.split("/logs/")[1]] = parse(f)
PATTERNS = [
    (
        "sched",
        "SchedLog",
        r"(Received a reschedule|reschedule|Called reschedule_negotiator|Starting add_shadow_birthdate|Starting sched universe|Successfully created sched universe|Activating|Sent ad to central manager|Negotiat|Shadow pid \d+ for job|match \()",
    ),
    (
        "neg",
        "NegotiatorLog",
        r"(Started Negotiation Cycle|Matched |Finished Negotiation Cycle|Phase 4|Negotiating with|Got reschedule)",
    ),
    (
        "startd",
        "StartLog",
        r"(Request accepted|Changing state and activity|Got activate_claim|Remote job ID)",
    ),
    (
        "starter",
        "StarterLog",
        r"(STARTING UP|Create_Process succeeded|Communicating with shadow|File transfer|Running job as user|About to exec)",
    ),
    ("shadow", "ShadowLog", r"(STARTING UP|Request to run on|Initialized user_priv)"),
]
for r in recs:
    w = r["wall0"]
    print("=" * 100)
    print(
        f"run {r['run']} repo {r.get('repo')} load {r['load']:.1f}->{r.get('load_after', 0):.1f} took {r['took_s']} submitter {r['submitter_s']} master_started {r['master_started_s']} first_task {r['first_task_s']} first6 {r.get('first6')}"
    )
    print("  steps", r.get("steps"))
    for t in r["timing"]:
        print("  ", t)
    end = w + r["took_s"]
    lo, hi = w - 0.5, w + min(r["took_s"], r["first_task_s"] + 1.0)
    rows = []
    for name, evs in logs.items():
        for kind, logname, pat in PATTERNS:
            if logname in name:
                for t, rest in evs:
                    if lo <= t <= hi and re.search(pat, rest):
                        rows.append((t - w, name, rest[:150]))
    for t, name, rest in sorted(rows):
        print(f"   {t:7.3f} {name:28s} {rest}")
