"""Per run: when the agents were matched and the first executed, when the master's process was
created and when it loaded its state, the first task and the total (seconds from
master_submitter's start), from analyze.py's text and measure.py's startup.jsonl.
Usage: summary.py OUT (measure.py's output directory, with analyze.py's output in analysis.txt)."""

import json
import re
import sys
from pathlib import Path

EVENT = re.compile(r"\s+(-?[\d.]+) (\S+)\s+(.*)")


def first(block: str, pattern: str) -> float | None:
    """The time of the first log line in `block` matching `pattern`."""
    for line in block.splitlines():
        m = EVENT.match(line)
        if m and re.search(pattern, m.group(3)):
            return float(m.group(1))
    return None


out = Path(sys.argv[1])
recs = [json.loads(line) for line in open(out / "startup.jsonl")]
blocks = (out / "analysis.txt").read_text().split("=" * 100)[1:]
for rec, block in zip(recs, blocks, strict=True):
    row = {
        "run": rec["run"],
        "repo": Path(rec["repo"]).name,
        "load": round(rec["load"], 2),
        "agents_matched": first(block, r"Negotiation ended: \d+ jobs matched"),
        "first_agent_exec": first(block, r"Create_Process succeeded"),
        "master_process": first(block, r"created sched universe process"),
        "master_started": rec["master_started_s"],
        "first_task": rec["first_task_s"],
        "took": rec["took_s"],
        "submitter": rec["submitter_s"],
    }
    print(json.dumps(row))
