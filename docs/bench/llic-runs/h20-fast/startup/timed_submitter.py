"""master_submitter with each phase's wall time on stderr (for finding its start-up cost)."""

import functools
import sys
import time

T0 = time.time()
import trio  # noqa: E402, F401

marks = []


def mark(name):
    marks.append((name, time.time() - T0))


import common.condor.gateway as G  # noqa: E402, N812
import llic.cli  # noqa: E402
import llic.submit as SUB  # noqa: E402, N812
import llic.submitter as S  # noqa: E402, N812

mark("imports")


def wrap_async(owner, name, label=None):
    f = getattr(owner, name)

    @functools.wraps(f)
    async def w(*a, **k):
        t = time.time()
        r = await f(*a, **k)
        marks.append((f"{label or name} {t - T0:.3f}->", time.time() - T0))
        return r

    setattr(owner, name, w)


def wrap_sync(owner, name, label=None):
    f = getattr(owner, name)

    @functools.wraps(f)
    def w(*a, **k):
        t = time.time()
        r = f(*a, **k)
        marks.append((f"{label or name} {t - T0:.3f}->", time.time() - T0))
        return r

    setattr(owner, name, w)


orig_call = G.Gateway.call


async def call(self, op, **k):
    t = time.time()
    r = await orig_call(self, op, **k)
    marks.append((f"gw.{op} {t - T0:.3f}->", time.time() - T0))
    return r


G.Gateway.call = call
wrap_sync(S, "build_agent")
wrap_sync(S, "make_plan")
wrap_sync(SUB, "parse_submit_file")
wrap_sync(S, "prepare_agent")
wrap_sync(S, "save_state")
try:
    rc = llic.cli.master_submitter(sys.argv[1:])
finally:
    mark("end")
    for n, t in marks:
        print(f"TIMING {n} {t:.3f}", file=sys.stderr)
sys.exit(rc)
