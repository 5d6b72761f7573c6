"""Tests for the simulator's network model: transit-stub latencies, matrix files, node placement."""

from __future__ import annotations

import pathlib
from collections import Counter

import numpy as np
import pytest

from sim.topology import LatencyMatrix, Placement, TopologyError, load_matrix, transit_stub

STUB_DOMAIN = 10  # routers per stub domain (default)
TRANSIT_DOMAIN = 10 * 2 * 10  # stub routers per transit domain (default)


@pytest.fixture(scope="module")
def default_ts() -> LatencyMatrix:
    """Built once: several tests look at the same default topology."""
    return transit_stub(7)


def small_matrix(n: int, seed: int = 0) -> LatencyMatrix:
    """A cheap valid matrix (points on a line) for placement tests that don't need a real topology."""
    x = np.random.default_rng(seed).uniform(0, 0.1, n)
    return LatencyMatrix(np.abs(x[:, None] - x[None, :]), name=f"line{n}")


def test_transit_stub_is_deterministic_for_a_seed() -> None:
    a = transit_stub(3).matrix
    b = transit_stub(3).matrix
    assert np.array_equal(a, b)


def test_transit_stub_differs_across_seeds() -> None:
    assert not np.array_equal(transit_stub(3).matrix, transit_stub(4).matrix)


def test_default_shape_is_one_endpoint_per_stub_router(default_ts: LatencyMatrix) -> None:
    assert default_ts.size == 1000
    assert default_ts.matrix.shape == (1000, 1000)
    assert default_ts.matrix.dtype == np.float64


def test_custom_sizes_give_matching_shape() -> None:
    m = transit_stub(
        1,
        transit_domains=2,
        routers_per_transit_domain=3,
        stub_domains_per_transit_router=1,
        routers_per_stub_domain=4,
    )
    assert m.size == 2 * 3 * 1 * 4


def test_symmetric_zero_diagonal_and_positive_off_diagonal(default_ts: LatencyMatrix) -> None:
    m = default_ts.matrix
    assert np.array_equal(m, m.T)
    assert np.all(np.diagonal(m) == 0.0)
    off = m[~np.eye(m.shape[0], dtype=bool)]
    assert np.all(np.isfinite(off))
    assert np.all(off > 0.0)


def test_triangle_inequality_on_sampled_triples(default_ts: LatencyMatrix) -> None:
    rng = np.random.default_rng(99)
    for a, b, c in rng.integers(0, default_ts.size, size=(200, 3)):
        assert default_ts.latency(a, c) <= default_ts.latency(a, b) + default_ts.latency(b, c) + 1e-12


def test_diameter_is_matrix_max_and_plausible(default_ts: LatencyMatrix) -> None:
    assert default_ts.diameter == float(default_ts.matrix.max())
    assert 0.05 <= default_ts.diameter <= 1.0


def test_same_stub_domain_closer_than_different_transit_domains(default_ts: LatencyMatrix) -> None:
    m = default_ts.matrix
    idx = np.arange(default_ts.size)
    same_stub = (idx[:, None] // STUB_DOMAIN == idx[None, :] // STUB_DOMAIN) & (idx[:, None] != idx[None, :])
    other_transit = idx[:, None] // TRANSIT_DOMAIN != idx[None, :] // TRANSIT_DOMAIN
    assert m[same_stub].mean() < m[other_transit].mean()
    # Intra-stub paths are made of 1-5 ms links only, so they stay far below any WAN path.
    assert m[same_stub].max() < m[other_transit].min()


def test_latency_returns_python_float(default_ts: LatencyMatrix) -> None:
    value = default_ts.latency(0, 999)
    assert type(value) is float
    assert value == default_ts.matrix[0, 999]


@pytest.mark.parametrize(
    ("matrix", "problem"),
    [
        (np.zeros((2, 3)), "square"),
        (np.zeros((0, 0)), "empty"),
        (np.array([[0.0, np.nan], [np.nan, 0.0]]), "not finite"),
        (np.array([[0.0, -1.0], [-1.0, 0.0]]), "negative"),
        (np.array([[1.0, 2.0], [2.0, 0.0]]), "diagonal"),
        (np.array([[0.0, 1.0], [2.0, 0.0]]), "not symmetric"),
    ],
)
def test_latency_matrix_rejects_bad_arrays(matrix: np.ndarray, problem: str) -> None:
    with pytest.raises(TopologyError, match=problem) as info:
        LatencyMatrix(matrix, name="bad")
    assert str(info.value).startswith("bad: ")


def test_latency_matrix_copies_and_freezes_input() -> None:
    source = np.array([[0.0, 1.0], [1.0, 0.0]])
    m = LatencyMatrix(source, name="two")
    source[0, 1] = 5.0
    assert m.latency(0, 1) == 1.0
    with pytest.raises(ValueError, match="read-only"):
        m.matrix[0, 1] = 3.0


def test_load_matrix_round_trip_converts_ms_to_seconds(tmp_path: pathlib.Path) -> None:
    ms = np.array([[0, 10, 20.5], [10, 0, 4], [20.5, 4, 0]])
    path = tmp_path / "lat.txt"
    path.write_text(
        "# three endpoints, milliseconds\n\n0 10 20.5\n10, 0, 4\n  # indented comment\n20.5,4\t0\n"
    )
    m = load_matrix(path)
    assert m.size == 3
    assert np.allclose(m.matrix, ms / 1000.0)
    assert m.latency(0, 2) == pytest.approx(0.0205)
    assert m.name == str(path)
    assert load_matrix(str(path)).matrix.tolist() == m.matrix.tolist()


def test_load_matrix_accepts_a_saved_transit_stub(tmp_path: pathlib.Path) -> None:
    original = transit_stub(
        5, transit_domains=2, routers_per_transit_domain=3, stub_domains_per_transit_router=1
    )
    path = tmp_path / "ts.csv"
    np.savetxt(path, original.matrix * 1000.0, delimiter=",", fmt="%.17g")
    assert np.allclose(load_matrix(path).matrix, original.matrix, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("0 1 2 3\n1 0 1 1\n2 1 0\n3 1 1 0\n", ":3:", "expected 4 values, got 3"),
        ("# header\n0 1\n1 zero\n", ":3:", "not a number: 'zero'"),
        ("0 1\n1 inf\n", ":2:", "not a finite number"),
        ("0 1 2\n1 0 3\n", ": ", "not square: 2 rows of 3 values"),
        ("0 1\n1 0\n2 2\n", ":3:", "not square"),
        ("0 1 2\n1 0 3\n2 4 0\n", ":3:", "not symmetric"),
        ("0 1\n\n-1 0\n", ":3:", "negative"),
        ("0 1\n1 0.5\n", ":2:", "diagonal"),
        ("# nothing here\n\n", ": ", "no matrix rows"),
    ],
)
def test_load_matrix_errors_name_file_and_line(
    tmp_path: pathlib.Path, text: str, where: str, problem: str
) -> None:
    path = tmp_path / "lat.txt"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_matrix(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}{where}")
    assert problem in message


def test_load_matrix_ragged_row_message_is_exact(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "lat.txt"
    path.write_text("0 1 2 3\n1 0 1 1\n2 1 0\n3 1 1 0\n")
    with pytest.raises(TopologyError) as info:
        load_matrix(path)
    assert str(info.value) == f"{path}:3: expected 4 values, got 3"


def test_load_matrix_missing_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "absent.txt"
    with pytest.raises(TopologyError) as info:
        load_matrix(path)
    message = str(info.value)
    assert message.startswith(f"{path}: cannot read")
    assert "\n" not in message


def test_placement_distinct_endpoints_when_they_suffice(default_ts: LatencyMatrix) -> None:
    full = Placement(default_ts, 1000, seed=1)
    assert sorted(full.endpoint_of) == list(range(1000))  # one node per stub router, as in the paper
    part = Placement(default_ts, 300, seed=1)
    assert len(set(part.endpoint_of)) == 300
    assert part.n_nodes == 300


def test_placement_balances_nodes_beyond_size() -> None:
    topo = small_matrix(100)
    p = Placement(topo, 2500 + 37, seed=4)
    counts = Counter(p.endpoint_of)
    assert set(counts) == set(range(100))
    assert set(counts.values()) == {25, 26}
    assert sum(counts.values()) == 2537
    exact = Placement(topo, 2500, seed=4)
    assert set(Counter(exact.endpoint_of).values()) == {25}


def test_placement_is_deterministic_for_a_seed() -> None:
    topo = small_matrix(100)
    a, b, c = Placement(topo, 250, seed=9), Placement(topo, 250, seed=9), Placement(topo, 250, seed=10)
    assert a.endpoint_of == b.endpoint_of and a.access == b.access
    assert a.endpoint_of != c.endpoint_of


def test_placement_latency_symmetric_zero_self_and_includes_access() -> None:
    topo = small_matrix(50)
    p = Placement(topo, 120, seed=2, access_delay=(0.001, 0.003))
    assert all(0.001 <= a <= 0.003 for a in p.access)
    for i in range(p.n_nodes):
        assert p.latency(i, i) == 0.0
    rng = np.random.default_rng(0)
    for i, j in rng.integers(0, p.n_nodes, size=(500, 2)):
        i, j = int(i), int(j)
        assert p.latency(i, j) == p.latency(j, i)
        if i != j:
            expected = p.access[i] + topo.latency(p.endpoint_of[i], p.endpoint_of[j]) + p.access[j]
            assert p.latency(i, j) == pytest.approx(expected, abs=1e-15)
            assert 0.0 < p.latency(i, j) <= p.diameter


def test_placement_diameter_bounds_every_pair() -> None:
    topo = small_matrix(30)
    p = Placement(topo, 60, seed=3)
    worst = max(p.latency(i, j) for i in range(p.n_nodes) for j in range(p.n_nodes))
    assert worst <= p.diameter
    assert p.diameter == topo.diameter + 2 * max(p.access)


def test_placement_rejects_bad_arguments() -> None:
    topo = small_matrix(5)
    with pytest.raises(ValueError, match="n_nodes must be >= 1, got 0"):
        Placement(topo, 0, seed=1)
    with pytest.raises(ValueError, match=r"access_delay must be \(low, high\) with 0 <= low <= high"):
        Placement(topo, 3, seed=1, access_delay=(0.002, 0.001))
