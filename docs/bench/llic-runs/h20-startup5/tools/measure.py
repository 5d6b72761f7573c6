# ruff: noqa: E501,RUF005  (a measurement script kept with its results, not product code)
"""Start-up timeline with sub-second HTCondor logs: N llic runs of CASE in one pool (bench/llic's pool), alternating
the checkouts in $AB_REPOS for master_submitter, the logs kept. PYTHONPATH=REPO flock ... python measure.py N OUT [CASE]."""

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
timed = len(sys.argv) <= 4 or sys.argv[4] != "plain"
REPOS = [Path(r) for r in os.environ.get("AB_REPOS", str(REPO)).split(",")]
out.mkdir(parents=True, exist_ok=True)
B.sandbox_cli("install-selforg")
sandbox = B.Sandbox()
pool = sandbox.up(B.POOL, slots=B.SLOTS, hosts=B.HOSTS)
recs = []
try:
    for h in range(B.HOSTS):
        d = pool.local_dir(h) / "config.d"
        d.mkdir(exist_ok=True)
        (d / "99-subsecond.config").write_text(
            "ALL_DEBUG = D_SUB_SECOND\nSCHEDD_DEBUG = D_SUB_SECOND D_FULLDEBUG\nNEGOTIATOR_DEBUG = D_SUB_SECOND D_FULLDEBUG\nSTARTER_DEBUG = D_SUB_SECOND D_FULLDEBUG\nSHADOW_DEBUG = D_SUB_SECOND D_FULLDEBUG\nSTARTD_DEBUG = D_SUB_SECOND D_FULLDEBUG\n"
        )
        os.chmod(d / "99-subsecond.config", 0o644)
        # the daemons read it on a reconfig, which needs ADMINISTRATOR: the pool's admin token
        admin_env = dict(os.environ, **B.token_environment(pool.token_dir("admin")))
        res = subprocess.run(
            [*pool.tools(h), "condor_reconfig"], env=admin_env, capture_output=True, text=True
        )
        print("reconfig", h, res.returncode, res.stderr.strip()[-200:], file=sys.stderr)
    time.sleep(3)
    base = sandbox.shared_dir()
    for r in range(runs):
        B.wait_quiet(pool)
        time.sleep(2)
        work = B.shared(base, f"llic{r}")
        B.write_job(work, case)
        repo = REPOS[r % len(REPOS)]
        env = dict(os.environ, **pool.llic_env(), LLIC_MASTER=B.MASTER, PYTHONPATH=str(repo))
        schedd = f"condor-sandbox@{pool.hosts[0]['name']}"
        ld = os.getloadavg()[0]
        cmd = (
            [str(REPO / ".venv/bin/python"), str(Path(__file__).with_name("timed2.py"))]
            if timed
            else [str(REPO / ".venv/bin/master_submitter")]
        )
        wall0 = time.time()
        t0 = time.monotonic()
        env["T0_WALL"] = repr(wall0)
        res = subprocess.run(
            cmd + ["job.sub", "--name", schedd], cwd=work, env=env, capture_output=True, text=True
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
        while B.queue_ids(pool):
            time.sleep(0.3)
        tl = B.timeline(st, wall0, took)
        first = min(h["first_start_s"] for h in tl["hosts"].values())
        starts = sorted(
            rec.outcome.finished - rec.outcome.run_time - wall0
            for rec in st.tasks
            if rec.outcome and rec.outcome.finished
        )
        ends = sorted(
            rec.outcome.finished - wall0 for rec in st.tasks if rec.outcome and rec.outcome.finished
        )
        timing = [line for line in res.stderr.splitlines() if line.startswith("TIMING")]
        steps = B.condor_steps(pool, st, wall0)
        rec = {
            "run": r,
            "repo": str(repo),
            "load": ld,
            "load_after": os.getloadavg()[0],
            "took_s": round(took, 2),
            "submitter_s": round(sub_s, 2),
            "master_started_s": round(st.started - wall0, 2) if st.started else None,
            "first_task_s": first,
            "first6": [round(s, 2) for s in starts[:6]],
            "last6_end": [round(e, 2) for e in ends[-8:]],
            "timing": timing,
            "steps": steps,
            "wall0": wall0,
            "outdir": str(state_path.parent),
        }
        # master.err / agents' err files
        recs.append(rec)
        print(json.dumps(rec), flush=True)
        subprocess.run(["cp", "-r", str(state_path.parent), str(out / f"outdir{r}")], check=False)
    B.wait_quiet(pool)
finally:
    B.keep_logs(pool, out / "logs")
    sandbox.down(B.POOL)
    for path in sandbox.dirs:
        subprocess.run(["rm", "-rf", path], check=False)
(out / "startup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
