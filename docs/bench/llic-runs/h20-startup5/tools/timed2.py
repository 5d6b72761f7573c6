# ruff: noqa: N812  (a measurement script kept with its results, not product code)
"""master_submitter with the gateway's calls and a few phases timed (stderr TIMING lines)."""

import os
import sys
import time

T0 = float(os.environ.get("T0_WALL") or time.time())
marks = [("python", time.time() - T0)]
import common.condor.gateway as G  # noqa: E402

marks.append(("gateway-imported", time.time() - T0))
orig_call = G.Gateway.call


async def call(self, op, **k):
    t = time.time()
    r = await orig_call(self, op, **k)
    marks.append((f"gw.{op} {t - T0:.3f}->", time.time() - T0))
    return r


G.Gateway.call = call
if hasattr(G.Gateway, "start"):
    orig_start = G.Gateway.start

    async def start(self):
        t = time.time()
        await orig_start(self)
        marks.append((f"gw.start {t - T0:.3f}->", time.time() - T0))

    G.Gateway.start = start
import llic.cli  # noqa: E402

for name in ("_read_submit",):
    if hasattr(llic.cli, name):
        f = getattr(llic.cli, name)

        def w(*a, _f=f, _n=name, **k):
            t = time.time()
            r = _f(*a, **k)
            marks.append((f"{_n} {t - T0:.3f}->", time.time() - T0))
            return r

        setattr(llic.cli, name, w)
try:
    rc = llic.cli.master_submitter(sys.argv[1:])
finally:
    marks.append(("end", time.time() - T0))
    for n, t in marks:
        print(f"TIMING {n} {t:.3f}", file=sys.stderr)
sys.exit(rc)
