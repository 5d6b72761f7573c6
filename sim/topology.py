"""Network model for the simulator: who is how far from whom, in seconds.

The paper this reproduces placed its overlay on a GT-ITM transit-stub graph: 1050 routers, 50 in
transit domains and 1000 in stub domains, one overlay node per stub router, and the latency of a
pair taken as the weighted shortest-path delay between their routers; the network diameter
normalises distances. `transit_stub` rebuilds such a graph (we do not ship GT-ITM itself), and
`load_matrix` takes a measured or externally generated matrix instead.

Link delays are GT-ITM-like; values chosen so that WAN paths are tens to ~200 ms. Each is drawn
uniformly from:

    intra-stub      1-5 ms    (campus / metro links)
    stub-transit    5-15 ms   (access to the provider)
    intra-transit   10-30 ms  (within one backbone)
    inter-transit   30-80 ms  (between backbones)

With the defaults, seeds 0-4 give a median stub-to-stub latency of 126-159 ms, 90th percentile
190-245 ms and a diameter of 0.26-0.35 s.

`Placement` then attaches overlay nodes to endpoints (one per endpoint while they last, as in the
paper) with a small access delay each, and answers the per-message `latency(i, j)` cheaply.
"""

from __future__ import annotations

import math
import pathlib
import re
from array import array
from functools import cached_property

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

# Link-delay ranges in seconds (see the module docstring).
INTRA_STUB_DELAY = (0.001, 0.005)
STUB_TRANSIT_DELAY = (0.005, 0.015)
INTRA_TRANSIT_DELAY = (0.010, 0.030)
INTER_TRANSIT_DELAY = (0.030, 0.080)

# Probability of each non-tree edge inside a domain, and between two transit domains. A random
# spanning tree comes first, so every domain is connected whatever these are.
TRANSIT_EDGE_PROBABILITY = 0.5
STUB_EDGE_PROBABILITY = 0.4
INTER_TRANSIT_EDGE_PROBABILITY = 0.25

# Matrices closer to symmetric than this (seconds) are accepted and made exactly symmetric.
SYMMETRY_TOLERANCE = 1e-9

_SEPARATORS = re.compile(r"[,\s]+")


class TopologyError(Exception):
    """A latency matrix is unusable; the message is one line naming the source (file:line) at fault."""


def _find_problem(m: np.ndarray, tol: float, *, unit: str, in_file: bool) -> tuple[int, str] | None:
    """First reason `m` is not a latency matrix, as (row index, description), or None if it is one.

    Shared by `LatencyMatrix` (array indices, seconds) and `load_matrix` (1-based row/column of the
    file, milliseconds, row mapped to a line number), so both report the same problems in the same order.
    """

    def at(i: int, j: int) -> str:
        return f"row {i + 1} column {j + 1}" if in_file else f"[{i}, {j}]"

    def value(i: int, j: int) -> str:
        return f"{float(m[i, j])!r} {unit}"

    finite = np.isfinite(m)
    if not finite.all():
        i, j = (int(x) for x in np.argwhere(~finite)[0])
        return i, f"{at(i, j)} is not finite ({float(m[i, j])!r})"
    if (m < 0).any():
        i, j = (int(x) for x in np.argwhere(m < 0)[0])
        return i, f"{at(i, j)} is negative ({value(i, j)})"
    diag = np.abs(np.diagonal(m))
    if (diag > tol).any():
        i = int(np.argmax(diag > tol))
        return i, f"diagonal entry {at(i, i)} is {value(i, i)}, expected 0"
    # Report the lower-triangle entry, i.e. the later row: that is where a reader meets the mismatch.
    bad = np.tril(np.abs(m - m.T) > tol)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        return i, f"not symmetric: {at(i, j)} is {value(i, j)} but {at(j, i)} is {value(j, i)}"
    return None


class LatencyMatrix:
    """Symmetric one-way latencies in SECONDS between `size` endpoints (numpy float64 array).

    Validated once at construction so the simulator can trust every lookup; the stored array is a
    read-only, exactly symmetric copy with an exactly zero diagonal.
    """

    def __init__(self, matrix: np.ndarray, *, name: str) -> None:
        self.name: str = name
        m = np.array(matrix, dtype=np.float64)  # always a copy: the caller's array stays theirs
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise TopologyError(f"{name}: matrix must be square, got shape {m.shape}")
        if m.shape[0] == 0:
            raise TopologyError(f"{name}: matrix is empty")
        problem = _find_problem(m, SYMMETRY_TOLERANCE, unit="s", in_file=False)
        if problem is not None:
            raise TopologyError(f"{name}: {problem[1]}")
        m = (m + m.T) / 2  # exact for already-symmetric entries; removes sub-tolerance noise
        np.fill_diagonal(m, 0.0)
        m.setflags(write=False)
        self._matrix = m

    @property
    def size(self) -> int:
        """Number of endpoints (rows)."""
        return self._matrix.shape[0]

    @property
    def matrix(self) -> np.ndarray:
        """The read-only (size, size) array, for bulk use (statistics, conversion)."""
        return self._matrix

    def latency(self, a: int, b: int) -> float:
        """One-way latency in seconds between endpoints `a` and `b`."""
        return float(self._matrix[a, b])

    @cached_property
    def diameter(self) -> float:
        """Largest latency between any two endpoints; the paper normalises distances by it."""
        return float(self._matrix.max())

    def __repr__(self) -> str:
        return f"LatencyMatrix(name={self.name!r}, size={self.size})"


def _connected_domain(
    rng: np.random.Generator,
    first: int,
    n: int,
    extra_probability: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Edges of a connected random graph on routers first..first+n-1: random spanning tree + extras.

    The tree guarantees connectivity (GT-ITM instead rejects disconnected samples, which would make
    the build time depend on luck); extra edges then appear independently with `extra_probability`.
    """
    order = rng.permutation(n)
    # Router order[k] attaches to a uniformly chosen earlier router: a uniformly random recursive tree.
    parents = order[rng.integers(0, np.arange(1, n))] if n > 1 else np.empty(0, dtype=np.int64)
    iu, ju = np.triu_indices(n, 1)
    extra = rng.random(iu.size) < extra_probability
    src = np.concatenate([order[1:], iu[extra]]) + first
    dst = np.concatenate([parents, ju[extra]]) + first
    return src, dst


def transit_stub(
    seed: int,
    *,
    transit_domains: int = 5,
    routers_per_transit_domain: int = 10,
    stub_domains_per_transit_router: int = 2,
    routers_per_stub_domain: int = 10,
) -> LatencyMatrix:
    """GT-ITM-like transit-stub latencies between the STUB routers, deterministic for `seed`.

    Defaults give the paper's 1050 routers (50 transit, 1000 stub) and a 1000x1000 matrix, because
    overlay nodes sit on stub routers only. Endpoint k is the k-th stub router in construction
    order, so domains are contiguous index blocks: endpoint k is in stub domain
    k // routers_per_stub_domain, attached to transit router
    k // (stub_domains_per_transit_router * routers_per_stub_domain), in transit domain
    k // (routers_per_transit_domain * stub_domains_per_transit_router * routers_per_stub_domain).
    """
    for label, value in (
        ("transit_domains", transit_domains),
        ("routers_per_transit_domain", routers_per_transit_domain),
        ("stub_domains_per_transit_router", stub_domains_per_transit_router),
        ("routers_per_stub_domain", routers_per_stub_domain),
    ):
        if value < 1:
            raise ValueError(f"{label} must be >= 1, got {value}")
    rng = np.random.default_rng(seed)
    n_transit = transit_domains * routers_per_transit_domain
    n_stub_domains = n_transit * stub_domains_per_transit_router
    n_stub = n_stub_domains * routers_per_stub_domain
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    delays: list[np.ndarray] = []

    def add(src: np.ndarray, dst: np.ndarray, delay_range: tuple[float, float]) -> None:
        srcs.append(src)
        dsts.append(dst)
        delays.append(rng.uniform(*delay_range, size=src.size))

    # Transit routers are 0..n_transit-1, domain by domain.
    for d in range(transit_domains):
        add(
            *_connected_domain(
                rng, d * routers_per_transit_domain, routers_per_transit_domain, TRANSIT_EDGE_PROBABILITY
            ),
            INTRA_TRANSIT_DELAY,
        )
    # Transit domains form a connected graph too; each domain-level edge joins random routers.
    dom_a, dom_b = _connected_domain(rng, 0, transit_domains, INTER_TRANSIT_EDGE_PROBABILITY)
    ends = rng.integers(0, routers_per_transit_domain, size=(2, dom_a.size))
    add(
        dom_a * routers_per_transit_domain + ends[0],
        dom_b * routers_per_transit_domain + ends[1],
        INTER_TRANSIT_DELAY,
    )
    # Stub routers follow, n_transit.., stub domain by stub domain; stub domain s hangs off transit
    # router s // stub_domains_per_transit_router through one of its routers chosen at random.
    for s in range(n_stub_domains):
        first = n_transit + s * routers_per_stub_domain
        add(*_connected_domain(rng, first, routers_per_stub_domain, STUB_EDGE_PROBABILITY), INTRA_STUB_DELAY)
        gateway = first + rng.integers(0, routers_per_stub_domain, size=1)
        add(gateway, np.array([s // stub_domains_per_transit_router]), STUB_TRANSIT_DELAY)

    src = np.concatenate(srcs)
    dst = np.concatenate(dsts)
    delay = np.concatenate(delays)
    # Inter-domain edges may repeat a router pair; a sparse matrix would SUM duplicates, so keep the
    # first delay drawn for each undirected pair.
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    n_routers = n_transit + n_stub
    _, first_seen = np.unique(lo * n_routers + hi, return_index=True)
    graph = coo_matrix((delay[first_seen], (lo[first_seen], hi[first_seen])), shape=(n_routers, n_routers))
    stubs = np.arange(n_transit, n_routers)
    dist = shortest_path(graph.tocsr(), method="D", directed=False, indices=stubs)[:, stubs]
    # Dijkstra from either end may sum the same path in a different order; both are true path
    # lengths, so the smaller one is exact and makes the matrix bit-for-bit symmetric.
    dist = np.minimum(dist, dist.T)
    name = (
        f"transit_stub(seed={seed}, {transit_domains}x{routers_per_transit_domain} transit, "
        f"{stub_domains_per_transit_router}x{routers_per_stub_domain} stub per transit router)"
    )
    return LatencyMatrix(dist, name=name)


def load_matrix(path: str | pathlib.Path) -> LatencyMatrix:
    """Read a latency matrix in MILLISECONDS from a text file; the result is in seconds.

    One row per line, numbers separated by whitespace and/or commas; blank lines and lines starting
    with '#' are ignored. Every problem is a one-line TopologyError naming `path` and, when one line
    is to blame, its number, so a hand-edited file is quick to fix.
    """
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise TopologyError(f"{path}: cannot read: {reason}") from exc
    rows: list[list[float]] = []
    line_of_row: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        values: list[float] = []
        for token in _SEPARATORS.split(stripped):
            if not token:
                continue
            try:
                value = float(token)
            except ValueError:
                raise TopologyError(f"{path}:{lineno}: not a number: {token!r}") from None
            if not math.isfinite(value):
                raise TopologyError(f"{path}:{lineno}: not a finite number: {token!r}")
            values.append(value)
        if rows and len(values) != len(rows[0]):
            raise TopologyError(f"{path}:{lineno}: expected {len(rows[0])} values, got {len(values)}")
        rows.append(values)
        line_of_row.append(lineno)
    if not rows:
        raise TopologyError(f"{path}: no matrix rows (only blank or comment lines)")
    n_cols = len(rows[0])
    if len(rows) > n_cols:
        raise TopologyError(
            f"{path}:{line_of_row[n_cols]}: matrix not square: row {n_cols + 1} but only {n_cols} columns"
        )
    if len(rows) < n_cols:
        raise TopologyError(f"{path}: matrix not square: {len(rows)} rows of {n_cols} values")
    ms = np.array(rows, dtype=np.float64)
    # Checked in the file's own unit so the message quotes the numbers as written.
    problem = _find_problem(ms, SYMMETRY_TOLERANCE * 1000.0, unit="ms", in_file=True)
    if problem is not None:
        row, what = problem
        raise TopologyError(f"{path}:{line_of_row[row]}: {what}")
    return LatencyMatrix(ms / 1000.0, name=str(path))


class Placement:
    """Where overlay nodes sit: node i is attached to endpoint endpoint_of[i] with an access delay.

    With no more nodes than endpoints every node gets its own endpoint (1000 nodes on the default
    transit-stub = one per stub router, as in the paper); beyond that, endpoints are shared as evenly
    as possible (each gets floor or ceil of n_nodes/size). Deterministic for `seed`.
    """

    def __init__(
        self,
        topology: LatencyMatrix,
        n_nodes: int,
        seed: int,
        *,
        access_delay: tuple[float, float] = (0.0005, 0.002),
    ) -> None:
        if n_nodes < 1:
            raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
        lo, hi = access_delay
        if not 0.0 <= lo <= hi or not math.isfinite(hi):
            raise ValueError(f"access_delay must be (low, high) with 0 <= low <= high, got {access_delay}")
        rng = np.random.default_rng(seed)
        size = topology.size
        if n_nodes <= size:
            endpoints = rng.permutation(size)[:n_nodes]
        else:
            per, rest = divmod(n_nodes, size)
            pool = np.concatenate([np.repeat(np.arange(size), per), rng.choice(size, rest, replace=False)])
            endpoints = rng.permutation(pool)
        self.topology: LatencyMatrix = topology
        self.n_nodes: int = n_nodes
        # Plain lists, not arrays: latency() runs per simulated message and list indexing of Python
        # objects avoids numpy's per-call scalar boxing.
        self.endpoint_of: list[int] = [int(e) for e in endpoints]
        self.access: list[float] = [float(a) for a in rng.uniform(lo, hi, size=n_nodes)]
        # Measured with timeit on the default 1000x1000 matrix: rows[a][b] costs ~70 ns per lookup,
        # float(m[a, b]) on the numpy array ~145 ns, so the matrix is kept as Python sequences. Rows
        # are arrays of doubles, not lists of floats: the same values, but contiguous (8 MB for the
        # default matrix instead of a million float objects scattered over ~32 MB), which halves
        # a lookup's cost in a large run, where it is mostly cache misses (timeit over random pairs
        # of 10,000 nodes: ~420 against ~220 ns).
        rows = [array("d", row) for row in topology.matrix.tolist()]
        # Each node's row of the endpoint matrix, so latency() indexes one list fewer per message.
        self._row_of: list[array[float]] = [rows[e] for e in self.endpoint_of]
        # An upper bound, not the attained maximum: the two farthest endpoints need not host nodes,
        # nor the nodes with the largest access delays.
        self.diameter: float = topology.diameter + 2 * max(self.access)

    def row_of(self, i: int) -> array[float]:
        """Node i's row of the endpoint matrix: latency(i, j) is access[i] + access[j] +
        row_of(i)[endpoint_of[j]] for j != i (sim.network inlines it)."""
        return self._row_of[i]

    def latency(self, i: int, j: int) -> float:
        """One-way latency in seconds between overlay nodes i and j (indices are not checked)."""
        if i == j:
            return 0.0
        # Access delays summed first: a + b == b + a exactly, so latency(i, j) == latency(j, i) to the
        # bit, which a + m + b would not guarantee.
        return self.access[i] + self.access[j] + self._row_of[i][self.endpoint_of[j]]
