"""Where the overlay's relative delay penalty goes under loss and after churn (issue 18).

Runs `poold simulate overlay` (sim.overlay_experiment) with extra counting, outside the daemons'
imports. For every lookup phase it reports:
- rdp as the benchmark computes it (every delivered Route message of a lookup summed, copies
  included) and rdp of the copy first delivered at the root (its own path's latency);
- lookups with a copy (delivered more than once), with a Route message that never arrived
  (lost or sent to a dead node), and rdp over the lookups with neither;
- routing-table quality against ground truth: for every live node's occupied slot, the holder's
  latency over the nearest live node that fits the slot (mean, p90 of that ratio; the share of
  slots not held by the nearest), slots held by dead nodes, empty slots a live node could fill;
  and the held leaf sets of table entries (lookahead): how many differ from the entry's actual
  set, how many list a dead node.
`--leaves truth|clear` (an experiment, not a fix): before the lookups after churn, every node's
held sets become the entries' actual ones, or none, to see what stale ones cost.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python docs/bench/overlay_rdp_breakdown.py \
        --nodes 1000 --seed 1 --loss 0.01 [--churn 0.2] [--leaves kept] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from common.overlay.ids import ID_BITS
from common.overlay.messages import Route
from common.overlay.node import Delivered, Event, _reaches
from sim.overlay_experiment import ExperimentConfig, LookupProbe, OverlayExperiment, _p99


class BreakdownExperiment(OverlayExperiment):
    """The benchmark, counting copies, silent hops and table quality per lookup phase."""

    def __init__(self, config: ExperimentConfig) -> None:
        super().__init__(config)
        self.phases: list[dict[str, Any]] = []
        self._arrive: dict[tuple[int, int], float] = {}  # (lookup, node) -> first copy's latency there
        self._first: dict[int, tuple[int, float]] = {}  # lookup -> (node, path latency) of first delivery
        self._deliveries: dict[int, int] = {}
        self._sent_routes: dict[int, int] = {}
        self._arrived_routes: dict[int, int] = {}
        self._sources: dict[int, int] = {}  # lookup -> its source node
        counting = self.net.hop_latency

        def on_hop(src: int, dst: int, msg: Any, t: float) -> None:
            counting(src, dst, msg, t)
            n = msg.payload.n if isinstance(msg.payload, LookupProbe) else None
            if n is None:
                return
            self._arrived_routes[n] = self._arrived_routes.get(n, 0) + 1
            here = self._arrive.get((n, src), 0.0) + self.net.latency(src, dst)
            if (n, dst) not in self._arrive:
                self._arrive[(n, dst)] = here

        self.net.hop_latency = on_hop
        apply = self.net._apply

        def counting_apply(node: Any, out: Any) -> None:
            for _, msg in out.sends:
                if type(msg) is Route and isinstance(msg.payload, LookupProbe):
                    n = msg.payload.n
                    self._sent_routes[n] = self._sent_routes.get(n, 0) + 1
            apply(node, out)

        self.net._apply = counting_apply  # type: ignore[method-assign]
        route = self.net.route

        def recording_route(src: int, key: int, payload: Any) -> None:
            if isinstance(payload, LookupProbe):
                self._sources[payload.n] = src
            route(src, key, payload)

        self.net.route = recording_route  # type: ignore[method-assign]

    def _on_event(self, index: int, event: Event, now: float) -> None:
        if isinstance(event, Delivered) and isinstance(event.payload, LookupProbe):
            n = event.payload.n
            self._deliveries[n] = self._deliveries.get(n, 0) + 1
            if n not in self._first:
                self._first[n] = (index, self._arrive.get((n, index), 0.0))
        super()._on_event(index, event, now)

    def _lookups(self) -> dict[str, float]:
        table = self._table_quality()
        if self.leaves_mode != "kept" and self._lookup_base > 0:
            self._replace_entry_leaves()
        base = self._lookup_base
        result = super()._lookups()
        cfg = self.config
        rows: dict[str, list[float]] = {
            name: [] for name in ("bench", "first_copy", "clean", "copied", "silent")
        }
        copies = silent = 0
        for n in range(base, base + cfg.lookups):
            first = self._first.get(n)
            if first is None:
                continue
            root_index, first_lat = first
            src = self._source(n)
            direct = self.placement.latency(src, root_index) if src is not None else 0.0
            if src == root_index or direct <= 0:
                continue
            bench = self.path_latency.get(n, 0.0) / direct
            rows["bench"].append(bench)
            rows["first_copy"].append(first_lat / direct)
            copied = self._deliveries.get(n, 0) > 1
            lost = self._sent_routes.get(n, 0) > self._arrived_routes.get(n, 0)
            copies += copied
            silent += lost
            if copied:
                rows["copied"].append(bench)
            if lost:
                rows["silent"].append(bench)
            if not copied and not lost:
                rows["clean"].append(bench)
        phase = {
            "bench_rdp_mean": result["rdp_mean"],
            "bench_rdp_p99": result["rdp_p99"],
            "hops_mean": result["hops_mean"],
            "lookup_success": result["lookup_success"],
            "lookups_with_copy": copies,
            "lookups_with_silent_hop": silent,
        }
        for name, values in rows.items():
            phase[f"rdp_{name}_mean"] = statistics.fmean(values) if values else None
            phase[f"rdp_{name}_p99"] = _p99(values) if values else None
            phase[f"rdp_{name}_count"] = len(values)
        phase["table"] = table
        self.phases.append(phase)
        return result

    leaves_mode = "kept"

    def _replace_entry_leaves(self) -> None:
        """An experiment, not a fix: before the lookups after churn, each node's held leaf sets
        of its table entries (lookahead) become the entries' actual ones ("truth") or none
        ("clear"), to see what stale ones cost."""
        by_id = {n.node_id: n for n in self.net.alive()}
        for node in self.net.alive():
            core = node.core
            if self.leaves_mode == "clear":
                core._entry_leaves.clear()
                continue
            held = {}
            for entry in core.table.entries():
                other = by_id.get(entry.id)
                if other is not None:
                    members = list(other.core.leaf.members())
                    cw, ccw = _reaches(entry.id, members)
                    held[entry.id] = (self.net.now, members, core._own_arc(), cw, ccw)
            core._entry_leaves = held

    def _source(self, n: int) -> int | None:
        return self._sources.get(n)

    def _table_quality(self) -> dict[str, float]:
        """Each live node's table against ground truth (the nearest live node per slot)."""
        net = self.net
        alive = net.alive()
        live_ids = {n.node_id: n.index for n in alive}
        dead_held = empty_fillable = held = not_nearest = 0
        entries = with_leaves = stale_leaves = leaves_with_dead = 0
        ratios: list[float] = []
        lat = self.placement.latency
        for node in alive:
            core = node.core
            b = core.params.b
            me = core.me.id
            for entry in core.table.entries():
                entries += 1
                got = core._entry_leaves.get(entry.id)
                other = self.net.nodes[live_ids[entry.id]].core if entry.id in live_ids else None
                if got is None:
                    continue
                with_leaves += 1
                members = {p.id for p in got[1]}
                if any(m not in live_ids for m in members):
                    leaves_with_dead += 1
                if other is None or members != {p.id for p in other.leaf.members()}:
                    stale_leaves += 1
            best: dict[tuple[int, int], float] = {}
            for pid, index in live_ids.items():
                if pid == me:
                    continue
                r = (ID_BITS - (me ^ pid).bit_length()) // b
                col = (pid >> (ID_BITS - b * (r + 1))) & ((1 << b) - 1)
                d = lat(node.index, index)
                if d < best.get((r, col), float("inf")):
                    best[(r, col)] = d
            for (r, col), d_best in best.items():
                entry = core.table.get(r, col)
                if entry is None:
                    empty_fillable += 1
                    continue
                index = live_ids.get(entry.id)
                if index is None:
                    dead_held += 1
                    continue
                held += 1
                d = lat(node.index, index)
                if d > d_best:
                    not_nearest += 1
                ratios.append(d / d_best if d_best > 0 else 1.0)
        return {
            "entries": entries,
            "entries_with_leaves": with_leaves,
            "entries_leaves_stale": stale_leaves,
            "entries_leaves_with_dead": leaves_with_dead,
            "slots_live_held": held,
            "slots_dead_held": dead_held,
            "slots_empty_fillable": empty_fillable,
            "slots_not_nearest": not_nearest,
            "holder_over_nearest_mean": statistics.fmean(ratios) if ratios else 0.0,
            "holder_over_nearest_p90": sorted(ratios)[int(0.9 * len(ratios))] if ratios else 0.0,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--churn", type=float, default=0.0)
    parser.add_argument("--leaves", choices=["kept", "truth", "clear"], default="kept")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    cfg = ExperimentConfig(nodes=args.nodes, seed=args.seed, loss=args.loss, churn=args.churn)
    exp = BreakdownExperiment(cfg)
    exp.leaves_mode = args.leaves
    result = exp.run()
    out = {"config": vars(args), "phases": exp.phases, "run": result}
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(json.dumps(exp.phases, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
