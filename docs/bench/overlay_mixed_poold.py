"""Real poold processes of two versions in one federation ring on loopback: two from OLD_TREE
(e.g. a worktree of 3715ee6) and two from NEW_TREE, the first of FOUNDER's kind founding the ring
and the others joining through it; 60 s later each one's status (joined leaf set, drop counters).

    python docs/bench/overlay_mixed_poold.py OLD_TREE NEW_TREE old|new WORKDIR

No HTCondor: the collector is 127.0.0.1:9 and discovery and flocking run hourly (the hostile
suite's live poold config, tests/hostile/live.py), with failure detection as in production
(leaf_timeout 5 s, hop_timeout 2 s). Traffic goes to 127.0.0.1 only; the daemons are stopped.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from deploy.harness.ring_keys import RingKeys
from tests.hostile.live import LiveDaemon, free_port, poold_config

OLD, NEW, FOUNDER = sys.argv[1], sys.argv[2], sys.argv[3]
work = Path(sys.argv[4])
work.mkdir(parents=True, exist_ok=True)
keys = RingKeys(work / "ring", ring="poold")


class Tree(LiveDaemon):
    """A live poold run from a given source tree (its own PYTHONPATH and working directory)."""

    def __init__(self, tree: str, *args: str | Path) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.tree = tree

    def start(self) -> None:
        """Start the daemon from its tree; wait until its control socket answers."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "poolD", "run", "--config", str(self.config)],
                stdout=log, stderr=log, cwd=self.tree, env={"PYTHONPATH": self.tree, "PATH": "/usr/bin:/bin"},
            )  # fmt: skip
        self.wait("its control socket answers", lambda: self.status())


order = [("old", OLD), ("old", OLD), ("new", NEW), ("new", NEW)]
if FOUNDER == "new":
    order = order[2:] + order[:2]
daemons = []
boot = None
for i, (kind, tree) in enumerate(order):
    name = f"{kind}{i}"
    port = free_port()
    cfg = poold_config(keys, name, port, work, bootstrap=boot)
    cfg = cfg.replace("leaf_timeout = 600.0", "leaf_timeout = 5.0")
    cfg = cfg.replace("hop_timeout = 600.0", "hop_timeout = 2.0")
    d = Tree(tree, work, "poold", name, cfg)
    d.start()
    daemons.append(d)
    boot = boot or f"127.0.0.1:{port}"
    time.sleep(1)
time.sleep(60)
out: dict[str, object] = {"old": OLD, "new": NEW, "founder": FOUNDER}
for d in daemons:
    s = d.status() or {}
    leaf = s.get("leaf_set") or []
    out[d.name] = {"alive": d.alive(), "joined": s.get("joined"), "leaf_set": len(leaf), "drops": d.drops()}
for d in daemons:
    d.stop()
print(json.dumps(out))
