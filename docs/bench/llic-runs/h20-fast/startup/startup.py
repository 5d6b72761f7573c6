"""Start-up timeline of llic on the bench's sandbox pool: N llic true1k runs in one pool, the
phases of master_submitter (timed_submitter.py) and HTCondor's steps (job ads, logs)."""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(os.environ["PYTHONPATH"])
loader = importlib.machinery.SourceFileLoader("benchllic", str(REPO / "bench/llic"))
spec = importlib.util.spec_from_loader("benchllic", loader)
B = importlib.util.module_from_spec(spec)
loader.exec_module(B)
runs = int(sys.argv[1])
out = Path(sys.argv[2])
case = sys.argv[3] if len(sys.argv) > 3 else "true1k"
B.sandbox_cli("install-selforg")
sandbox = B.Sandbox()
pool = sandbox.up(B.POOL, slots=B.SLOTS, hosts=B.HOSTS)
recs = []
try:
    base = sandbox.shared_dir()
    for r in range(runs):
        B.wait_quiet(pool)
        work = B.shared(base, f"llic{r}")
        B.write_job(work, case)
        env = dict(os.environ, **pool.llic_env(), LLIC_MASTER=B.MASTER, PYTHONPATH=str(REPO))
        schedd = f"condor-sandbox@{pool.hosts[0]['name']}"
        ld = os.getloadavg()[0]
        wall0 = time.time()
        t0 = time.monotonic()
        res = subprocess.run(
            [str(REPO / ".venv/bin/python"), "/tmp/h20fast/timed_submitter.py", "job.sub", "--name", schedd],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        sub_s = time.monotonic() - t0
        if res.returncode:
            print(res.stderr)
            raise SystemExit(1)
        state_path = Path(res.stdout.split("state file ")[1].split(";")[0])
        while True:
            try:
                st = B.load_state(state_path)
            except B.StateFileError:
                st = None
            if st is not None and st.status is not B.MasterStatus.RUNNING:
                break
            time.sleep(0.05)
        took = time.monotonic() - t0
        ads = pool.exec(
            "condor_q",
            "-allusers",
            "-af",
            "ClusterId",
            "ProcId",
            "JobUniverse",
            "QDate",
            "JobStartDate",
            "JobCurrentStartExecutingDate",
            check=False,
        ).stdout
        while B.queue_ids(pool):
            time.sleep(0.3)
        hist = pool.exec(
            "condor_history",
            "-af",
            "ClusterId",
            "ProcId",
            "JobUniverse",
            "QDate",
            "JobStartDate",
            "JobCurrentStartExecutingDate",
            "EnteredCurrentStatus",
            check=False,
        ).stdout
        tl = B.timeline(st, wall0, took)
        first = min(h["first_start_s"] for h in tl["hosts"].values())
        timing = [line for line in res.stderr.splitlines() if line.startswith("TIMING")]
        rec = {
            "run": r,
            "load": ld,
            "took_s": round(took, 2),
            "submitter_s": round(sub_s, 2),
            "master_started_s": round(st.started - wall0, 2) if st.started else None,
            "first_task_s": first,
            "timing": timing,
            "history": hist.splitlines()[-10:],
            "wall0": wall0,
        }
        recs.append(rec)
        print(json.dumps(rec), flush=True)
    B.wait_quiet(pool)
finally:
    B.keep_logs(pool, out / "logs")
    sandbox.down(B.POOL)
    for path in sandbox.dirs:
        subprocess.run(["rm", "-rf", path], check=False)
(out / "startup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
