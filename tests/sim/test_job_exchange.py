"""SWF parsing and `poold simulate traces` on small hand-written and cut-down traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from poolD.cli import main
from sim.swf import MONTH_SECONDS, read_swf, trace_name

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"


def swf_line(job: int, submit: int, run: int, procs: int, estimate: int) -> str:
    fields = [job, submit, 0, run, procs, -1, -1, procs, estimate, -1, 1, 1, 1, 1, 1, 1, -1, -1]
    return " ".join(str(f) for f in fields)


def write_swf(path: Path, lines: list[str], *, max_procs: int = 8) -> Path:
    header = [
        "; Version: 2.2",
        "; Computer: test",
        f"; MaxNodes: {max_procs}",
        f"; MaxProcs: {max_procs}",
        ";",
    ]
    with gzip.open(path, "wt") as f:
        f.write("\n".join([*header, *lines]) + "\n")
    return path


def test_read_swf_header_drops_and_cutoff(tmp_path: Path) -> None:
    path = write_swf(
        tmp_path / "TEST-1999-1.0-cln.swf.gz",
        [
            swf_line(1, 100, 50, 2, 60),
            swf_line(2, 110, 80, 4, 60),  # runs past its estimate: cut to 60
            swf_line(3, 120, -1, 2, 60),  # no run time
            swf_line(4, 130, 10, 2, -1),  # no estimate
            swf_line(5, 140, 10, 16, 60),  # wider than the site
            "",
            swf_line(6, 100 + int(2 * MONTH_SECONDS), 10, 1, 60),  # after the first month
        ],
    )
    trace = read_swf(path, months=1)
    assert trace.name == "TEST-1999-1.0-cln" == trace_name(path)
    assert (trace.max_procs, trace.max_nodes, trace.slots) == (8, 8, 8)
    assert trace.submit == [0, 10] and trace.nodes == [2, 4] and trace.runtime == [50, 60]
    assert trace.estimate == [60, 60]
    assert trace.dropped == {"no_runtime": 1, "no_estimate": 1, "too_wide": 1, "after_cutoff": 1}
    assert read_swf(path, months=None).jobs == 3
    assert read_swf(path, slots=16, months=None).jobs == 4  # a bigger site takes the wide job


def cut_trace(src: Path, dst: Path, jobs: int) -> Path:
    """The header and the first `jobs` job lines of a real trace."""
    out, n = [], 0
    with gzip.open(src, "rt") as f:
        for line in f:
            if not line.startswith(";"):
                n += 1
                if n > jobs:
                    break
            out.append(line)
    with gzip.open(dst, "wt") as f:
        f.writelines(out)
    return dst


DATA = Path(__file__).parent / "data"  # the header and first 600 jobs of two real traces (cut_trace)


@pytest.fixture
def small_traces() -> list[str]:
    return [f"{DATA / 'KTH-SP2-1996-2.1-cln.swf.gz'}:100", f"{DATA / 'SDSC-SP2-1998-4.2-cln.swf.gz'}:128"]


def run_cli(capsys: pytest.CaptureFixture[str], traces: list[str], seed: int) -> dict:
    argv = ["simulate", "traces", "--seed", str(seed)]
    for t in traces:
        argv += ["--trace", t]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_traces_json_and_determinism(small_traces: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    first = run_cli(capsys, small_traces, seed=3)
    assert [s["name"] for s in first["sites"]] == ["KTH-SP2-1996-2.1-cln", "SDSC-SP2-1998-4.2-cln"]
    for site in first["sites"]:
        assert site["slots"] in (100, 128) and site["jobs"] > 0 and site["dropped"] >= 0
        assert set(site["policies"]) == {"none", "poold", "pull"}
        for metrics in site["policies"].values():
            assert set(metrics) == {"awrt_s", "utilization", "dsa", "cmax_s"}
            assert 0 < metrics["utilization"] <= 1 and metrics["awrt_s"] > 0
        assert site["policies"]["none"]["dsa"] == 1.0
    assert set(first["migration"]) == {"none", "poold", "pull"}
    for matrix in first["migration"].values():
        assert len(matrix) == 2 and all(len(row) == 2 for row in matrix)
        assert all(abs(sum(row) - 1) < 1e-3 for row in matrix)
    assert first["migration"]["none"] == [[1.0, 0.0], [0.0, 1.0]]
    assert set(first["overall_utilization"]) == {"none", "poold", "pull"}
    assert run_cli(capsys, small_traces, seed=3) == first
