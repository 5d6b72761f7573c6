"""What runs on a pool's machines stays apart from evaluation code: the daemons and CLIs load no
simulator and none of its dependencies, and `poold simulate` says how to get them."""

from __future__ import annotations

import subprocess
import sys

import pytest

EVALUATION = ("sim", "numpy", "scipy", "matplotlib")


@pytest.mark.parametrize(
    "module",
    ["poolD.service", "poolD.cli", "faultD.service", "faultD.cli", "llic.master", "llic.cli", "llic.agent"],
)
def test_product_modules_load_no_evaluation_code(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in {EVALUATION!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"{module} loads {out.strip()}"


def test_simulate_without_the_sim_extra_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['numpy'] = None\n"  # as if numpy were not installed
        "from poolD.cli import main\n"
        "sys.exit(main(['simulate', 'four-pools']))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "poold: error: 'poold simulate' needs the simulation extra (numpy is not installed): "
        "pip install 'condor-selforg[sim]'"
    )
