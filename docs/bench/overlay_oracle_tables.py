"""What limits the overlay's relative delay penalty: table quality or route choice?

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python docs/bench/overlay_oracle_tables.py NODES [SEED] [LOOKUPS]

Runs the benchmark's join (20 nodes a second, as `docs/bench/overlay.sh`) and 120 s settle on the
same seeded topology and placement, then, with the simulation stopped (a diagnostic: no node's
state is changed, the routes are walked offline through `OverlayNode.next_hop`):
1. compares every node's routing table with the oracle PNS table: for each slot, the live node
   with that prefix nearest by ground-truth latency; per row, the fraction of slots (that have
   any candidate) holding the nearest, one within 1.2x of it, or nothing;
2. walks the same lookups (random source, random key) with
   - `ours`: the nodes' own tables, leaf sets and held lookahead leaf sets, routed by the core's
     own next_hop (whatever lookahead the version under test does);
   - `ours_fresh_lookahead`: our tables, every entry's current leaf set held (no stale or
     missing lookahead);
   - `oracle`: the oracle tables, our route selection, every entry's current leaf set held;
   - `ours_any_lookahead` / `oracle_any_lookahead`: as ours / oracle, but a node that holds a
     table entry's leaf set spanning the key goes straight to that set's member closest to the
     key (the root, if the set is exact), whichever entry's set it is (this script's rule,
     without the core's bound on a set's arc: what such a lookahead could give);
   and reports, for each, rdp mean/p99, hops, the share of lookups delivered at the true root, and
   the path latency split by hop kind (leaf set, lookahead, table slot, proximity fallback).
Also: the held lookahead sets, how many equal the entry's current set, their age, and their arc
over the holder's own leaf set's arc (exact against stale ones). Prints one JSON object. The
script reads the core's private state (`_entry_leaves`, `table`, `leaf`) and works with the
core of main (49a7954) as well as with later ones.
"""

from __future__ import annotations

import bisect
import copy
import json
import random
import statistics
import sys
import time
from typing import Any

import numpy as np

from common.overlay.ids import ID_BITS, ID_MASK, closeness, shared_prefix_len
from common.overlay.messages import Peer
from common.overlay.node import OverlayNode, _reaches
from common.overlay.table import RoutingTable
from sim.overlay_experiment import ExperimentConfig, OverlayExperiment


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def _latency_to_all(exp: OverlayExperiment, i: int, order: np.ndarray) -> np.ndarray:
    """One-way latency from node i to every node, in `order` (Placement.latency, vectorised)."""
    pl = exp.placement
    access = np.asarray(pl.access)
    ends = np.asarray(pl.endpoint_of)
    row = pl.topology.matrix[pl.endpoint_of[i]]
    lat = pl.access[i] + access[order] + row[ends[order]]
    lat[order == i] = 0.0
    return lat


def oracle_tables(exp: OverlayExperiment) -> tuple[dict[int, RoutingTable], dict[str, Any]]:
    """The oracle PNS table of every live node, and how far each node's own table is from it."""
    net = exp.net
    alive = net.alive()
    b = net.params.b
    cols = 1 << b
    ids = sorted(n.node_id for n in alive)
    index_of = {n.node_id: n.index for n in alive}
    order = np.array([index_of[x] for x in ids])
    peers = {n.index: n.core.me for n in alive}
    per_row: dict[int, dict[str, int]] = {}
    tables: dict[int, RoutingTable] = {}
    for n in alive:
        core = n.core
        me = n.node_id
        lat = _latency_to_all(exp, n.index, order)
        oracle = RoutingTable(core.me, b)
        for r in range(oracle.rows):
            shift = ID_BITS - b * r
            base = (me >> shift) << shift if r else 0
            lo_all = bisect.bisect_left(ids, base)
            hi_all = bisect.bisect_left(ids, base + (1 << shift))
            if hi_all - lo_all <= 1:
                break
            mine = (me >> (shift - b)) & (cols - 1)
            stats = per_row.setdefault(r, {"slots": 0, "nearest": 0, "within_1_2": 0, "empty": 0, "wrong": 0})
            for c in range(cols):
                if c == mine:
                    continue
                lo_key = base + (c << (shift - b))
                lo = bisect.bisect_left(ids, lo_key, lo_all, hi_all)
                hi = bisect.bisect_left(ids, lo_key + (1 << (shift - b)), lo, hi_all)
                if hi == lo:
                    continue
                j = lo + int(np.argmin(lat[lo:hi]))
                best = int(order[j])
                oracle.set(r, c, peers[best])
                stats["slots"] += 1
                held = core.table.get(r, c)
                if held is None:
                    stats["empty"] += 1
                    continue
                held_index = index_of.get(held.id)
                if held_index is None:
                    stats["wrong"] += 1  # a dead node
                    continue
                held_lat = exp.placement.latency(n.index, held_index)
                best_lat = float(lat[j])
                if held_index == best:
                    stats["nearest"] += 1
                if held_lat <= 1.2 * best_lat + 1e-12:
                    stats["within_1_2"] += 1
        tables[n.index] = oracle
    rows = {
        str(r): {
            "slots": s["slots"],
            "nearest": round(s["nearest"] / s["slots"], 4),
            "within_1_2": round(s["within_1_2"] / s["slots"], 4),
            "empty": round(s["empty"] / s["slots"], 4),
            "dead": round(s["wrong"] / s["slots"], 4),
        }
        for r, s in sorted(per_row.items())
        if s["slots"]
    }
    return tables, rows


def _clone(
    core: OverlayNode,
    table: RoutingTable | None,
    leaves: dict[int, tuple[float, list[Peer], int, int, int]] | None,
) -> OverlayNode:
    """A shallow copy of a node for offline routing: another table and/or lookahead sets."""
    twin = copy.copy(core)
    if table is not None:
        twin.table = table
    if leaves is not None:
        twin._entry_leaves = leaves
    twin._known_cache = ((-1, -1), [])
    return twin


def _fresh_leaves(
    exp: OverlayExperiment, table: RoutingTable
) -> dict[int, tuple[float, list[Peer], int, int, int]]:
    nodes = exp.net.nodes
    out = {}
    for p in table.cached_entries():
        target = nodes[int(p.addr[1:])]
        if target.alive:
            members = target.core.leaf.members()
            cw, ccw = _reaches(p.id, members)
            out[p.id] = (exp.net.now, members, 0, cw, ccw)  # (when, set, arc then, reaches)
    return out


def _spans(center: int, members: list[Peer], key: int) -> bool:
    """Whether `key` lies within the arc a node's leaf set spans (each member counts on the side
    it is nearer to), as the core's lookahead decides it."""
    reach_cw, reach_ccw = _reaches(center, members)
    return (key - center) & ID_MASK <= reach_cw or (center - key) & ID_MASK <= reach_ccw


def _any_lookahead(node: OverlayNode, key: int) -> Peer | None:
    """The member closest to `key` of any held leaf set (a table entry's, or our own) that spans
    the key, if it makes progress (as long a prefix as ours and closer than us)."""
    b = node.params.b
    mine = closeness(key, node.me.id)
    r = shared_prefix_len(key, node.me.id, b)
    best, best_c = None, mine
    for entry, got in node._entry_leaves.items():
        members = got[1]
        if not _spans(entry, members, key):
            continue
        where = node.table.slot(entry)
        holder = None if where is None else node.table.get(*where)
        own = [holder] if holder is not None and holder.id == entry else []
        for p in (*members, *own):
            c = closeness(key, p.id)
            if c < best_c and shared_prefix_len(p.id, key, b) >= r:
                best, best_c = p, c
    return best


def walk(
    exp: OverlayExperiment,
    routers: dict[int, OverlayNode],
    lookups: list[tuple[int, int]],
    *,
    any_lookahead: bool,
) -> dict[str, Any]:
    """Route each (source, key) offline through `routers`; rdp, hops, correctness, latency by hop kind."""
    oracle = exp.net.root_oracle()
    latency = exp.placement.latency
    rdp, hops_all, ok = [], [], 0
    by_kind = {"leaf": 0.0, "lookahead": 0.0, "table": 0.0, "proximity": 0.0, "any_lookahead": 0.0}
    for src, key in lookups:
        root = oracle.root(key)
        cur, path, hops = src, 0.0, 0
        while hops < 64:
            node = routers[cur]
            kind = None
            nxt = None
            if node.leaf.covers(key):
                nxt = node.next_hop(key)
                kind = "leaf"
            elif any_lookahead:
                nxt = _any_lookahead(node, key)
                kind = "any_lookahead"
            if nxt is None and kind != "leaf":
                nxt = node.next_hop(key)
                r = shared_prefix_len(key, node.me.id, node.params.b)
                slot = node.table.get(
                    r, (key >> (ID_BITS - node.params.b * (r + 1))) & ((1 << node.params.b) - 1)
                )
                if nxt is None:
                    kind = None
                elif slot is not None and nxt.id == slot.id:
                    kind = "table"
                elif any(nxt.id == m.id for got in node._entry_leaves.values() for m in got[1]):
                    kind = "lookahead"
                else:
                    kind = "proximity"
            if nxt is None:
                break
            step = latency(cur, int(nxt.addr[1:]))
            path += step
            by_kind[kind] += step
            cur = int(nxt.addr[1:])
            hops += 1
        if cur != root:
            continue
        ok += 1
        hops_all.append(hops)
        direct = latency(src, root)
        if src != root and direct > 0:
            rdp.append(path / direct)
    total = sum(by_kind.values()) or 1.0
    return {
        "rdp_mean": round(statistics.fmean(rdp), 4) if rdp else 0.0,
        "rdp_p99": round(_p99(rdp), 4),
        "hops_mean": round(statistics.fmean(hops_all), 3) if hops_all else 0.0,
        "correct": round(ok / len(lookups), 4),
        "latency_share_by_hop_kind": {k: round(v / total, 4) for k, v in by_kind.items() if v},
    }


def _arc(center: int, members: list[Peer]) -> int:
    """The id-space arc a leaf set centred on `center` spans (both sides' reaches)."""
    cw = ccw = 0
    for p in members:
        a, b = (p.id - center) & ID_MASK, (center - p.id) & ID_MASK
        if a <= b:
            cw = max(cw, a)
        else:
            ccw = max(ccw, b)
    return cw + ccw


def held_sets(exp: OverlayExperiment) -> dict[str, Any]:
    """The lookahead leaf sets nodes hold: how many equal the entry's current set, how old they
    are, and their arc over the holder's own leaf set's arc (exact sets against stale ones)."""
    nodes, now = exp.net.nodes, exp.net.now
    exact_ratios, stale_ratios, ages_exact, ages_stale = [], [], [], []
    for n in exp.net.alive():
        core = n.core
        own = _arc(core.me.id, core.leaf.members()) or 1
        for entry, got in core._entry_leaves.items():
            when, members = got[0], got[1]
            where = core.table.slot(entry)
            holder = None if where is None else core.table.get(*where)
            if holder is None or holder.id != entry or not nodes[int(holder.addr[1:])].alive:
                continue
            truth = {p.id for p in nodes[int(holder.addr[1:])].core.leaf.members()}
            ratio = _arc(entry, members) / own
            if {p.id for p in members} == truth:
                exact_ratios.append(ratio)
                ages_exact.append(now - when)
            else:
                stale_ratios.append(ratio)
                ages_stale.append(now - when)

    def quantiles(v: list[float]) -> list[float]:
        if not v:
            return []
        o = sorted(v)
        return [round(o[int(q * (len(o) - 1))], 3) for q in (0.1, 0.5, 0.9)]

    total = len(exact_ratios) + len(stale_ratios)
    return {
        "held": total,
        "per_node": round(total / max(1, len(exp.net.alive())), 1),
        "exact": round(len(exact_ratios) / max(1, total), 4),
        "arc_ratio_q10_50_90_exact": quantiles(exact_ratios),
        "arc_ratio_q10_50_90_stale": quantiles(stale_ratios),
        "age_q10_50_90_exact": quantiles(ages_exact),
        "age_q10_50_90_stale": quantiles(ages_stale),
        "stale_with_ratio_over_1_5": round(sum(r > 1.5 for r in stale_ratios) / max(1, len(stale_ratios)), 4),
        "exact_with_ratio_over_1_5": round(sum(r > 1.5 for r in exact_ratios) / max(1, len(exact_ratios)), 4),
    }


def main() -> None:
    nodes = int(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    started = time.process_time()
    config = ExperimentConfig(nodes=nodes, seed=seed, join_interval=0.05, settle_seconds=120)
    exp = OverlayExperiment(config)
    net = exp.net
    for i in range(nodes):  # the join phase of OverlayExperiment._run, same draws
        bootstrap = None if i == 0 else exp.rng.randrange(i)
        net.add_node(i, exp.rng.getrandbits(128), bootstrap=bootstrap, at=i * config.join_interval)
    net.run_until(nodes * config.join_interval + 30)
    net.run_until(net.now + config.settle_seconds)
    sim_cpu = time.process_time() - started
    tables, rows = oracle_tables(exp)
    rng = random.Random(f"oracle-{seed}")
    alive = sorted(n.index for n in net.alive())
    lookups = [(rng.choice(alive), rng.getrandbits(128)) for _ in range(count)]
    own = {i: net.nodes[i].core for i in alive}
    fresh = {i: _clone(c, None, _fresh_leaves(exp, c.table)) for i, c in own.items()}
    oracle = {i: _clone(own[i], tables[i], _fresh_leaves(exp, tables[i])) for i in alive}
    result = {
        "nodes": nodes,
        "seed": seed,
        "lookups": count,
        "sim_seconds": net.now,
        "table_vs_oracle_by_row": rows,
        "lookahead_sets": held_sets(exp),
        "routes": {
            "ours": walk(exp, own, lookups, any_lookahead=False),
            "ours_fresh_lookahead": walk(exp, fresh, lookups, any_lookahead=False),
            "oracle": walk(exp, oracle, lookups, any_lookahead=False),
            "ours_any_lookahead": walk(exp, own, lookups, any_lookahead=True),
            "oracle_any_lookahead": walk(exp, oracle, lookups, any_lookahead=True),
        },
        "trace_digest": net.trace_digest,
        "cpu_seconds_sim": round(sim_cpu, 1),
        "cpu_seconds_total": round(time.process_time() - started, 1),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
