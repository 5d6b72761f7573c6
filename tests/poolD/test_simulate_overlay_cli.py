"""`poold simulate overlay` prints the summary the overlay issue specifies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poolD.cli import main

KEYS = {
    "nodes", "hops_mean", "hops_p99", "rdp_mean", "rdp_p99", "join_msgs_per_node",
    "maintenance_msgs_per_node_per_min", "lookups", "lookup_success", "sim_seconds", "wall_seconds",
    "detect_median_s", "detect_p99_s", "bytes_per_node_per_min", "maintenance_by_type",
}  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", "overlay", "--settle", "60", "--steady", "60", "--repair", "120", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_summary_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "--nodes", "80", "--seed", "3", "--lookups", "500", "--detect-samples", "10")
    assert KEYS <= result.keys()
    assert result["nodes"] == 80 and result["lookups"] == 500 and result["lookup_success"] == 1.0
    # (A lookup from the key's own root takes no hop; at 80 nodes lookahead takes the others
    # to their root in one.)
    assert 0.9 <= result["hops_mean"] <= 3 and result["rdp_mean"] >= 1.0
    assert result["maintenance_msgs_per_node_per_min"] > 0 and result["join_msgs_per_node"] > 0
    # Every timed crash was repaired (a crash never repaired would count as the 600 s timeout),
    # and a message is more than a sealed envelope's ~60 bytes.
    assert result["detect_samples"] == 10 and 0 < result["detect_median_s"] <= result["detect_p99_s"] < 600
    assert result["bytes_per_node_per_min"] > 60 * result["maintenance_msgs_per_node_per_min"]
    # The breakdown by type adds up to the total (each type rounded to 0.01).
    by_type = result["maintenance_by_type"]
    total = result["maintenance_msgs_per_node_per_min"]
    assert by_type and abs(sum(by_type.values()) - total) <= 0.01 * len(by_type)


def test_churn_and_matrix_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = tmp_path / "lat.txt"
    size = 30
    matrix.write_text("\n".join(" ".join(str(abs(i - j) * 2.0) for j in range(size)) for i in range(size)))
    result = run(capsys, "--nodes", "60", "--topology", str(matrix), "--churn", "0.2", "--lookups", "300")
    assert result["nodes_alive"] == 48 and result["lookup_success"] == 1.0


def test_bad_matrix_file_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1\n")
    assert main(["simulate", "overlay", "--nodes", "5", "--topology", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("poold: error: ") and str(bad) in err and err.count("\n") == 1
