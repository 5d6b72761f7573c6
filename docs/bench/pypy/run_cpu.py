"""Run a simulator benchmark script under PyPy (evaluation only; see sitecustomize.py here).

    apt-get install pypy3 pypy3-venv && pypy3 -m venv /tmp/pypy-venv
    /tmp/pypy-venv/bin/pip install numpy pydantic==2.10.6 pydantic-core==2.27.2 msgpack structlog \\
        trio tomli typing_extensions eval_type_backport cryptography
    .venv/bin/python -c "import numpy; from sim.topology import transit_stub; \\
        numpy.save('/tmp/ts-1.npy', transit_stub(1).matrix)"     # scipy has no PyPy 3.9 wheel
    SHIM_ROOT=$PWD PYTHONPATH=$PWD:$PWD/docs/bench/pypy PYTHONDONTWRITEBYTECODE=1 \\
        /tmp/pypy-venv/bin/python docs/bench/pypy/run_cpu.py docs/bench/overlay_cpu.py 1000

The transit-stub matrix of seed S is read from TS_CACHE_DIR/ts-S.npy (default /tmp), made by
CPython as above: the same float64 values, so the run is the same (equal trace digests)."""

import os
import runpy
import sys

import numpy as np

import sim.overlay_experiment as experiment
import sim.topology as topology


def cached_transit_stub(seed: int) -> topology.LatencyMatrix:
    path = os.path.join(os.environ.get("TS_CACHE_DIR", "/tmp"), f"ts-{seed}.npy")
    name = f"transit_stub(seed={seed}, 5x10 transit, 2x10 stub per transit router)"
    return topology.LatencyMatrix(np.load(path), name=name)


experiment.transit_stub = cached_transit_stub  # type: ignore[assignment]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
