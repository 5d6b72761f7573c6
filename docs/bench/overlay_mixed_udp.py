"""A mixed-version ring for real: overlay nodes of two code bases in two processes, over UDP on
loopback, sealed and signed as the daemons run them (common.overlay.driver.UdpOverlay).

Run from each code base's tree (PYTHONPATH=<tree>), e.g. old = a worktree of 3715ee6:

    python overlay_mixed_udp.py keys DIR old-0 old-1 old-2 old-3 new-0 new-1 new-2 new-3
    PYTHONPATH=OLD python overlay_mixed_udp.py run DIR --names old-0,old-1,old-2,old-3 --port 17600 \
        --duration 90 --out old.json &
    sleep 3
    PYTHONPATH=NEW python overlay_mixed_udp.py run DIR --names new-0,new-1,new-2,new-3 --port 17700 \
        --bootstrap 127.0.0.1:17600 --duration 80 --out new.json
    python overlay_mixed_udp.py combine old.json new.json

Each process samples its nodes every second (joined, leaf set, every node ever held dead), routes
lookups of fixed keys at `--lookups-at` seconds and records where its nodes delivered any;
`combine` checks every lookup against the node numerically closest to its key and sums the drops.
Nothing here starts HTCondor; traffic goes to 127.0.0.1 only, and each run stops by itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import trio

from common.overlay.driver import RingConfig, UdpOverlay
from common.overlay.ids import closeness, node_id_from_name
from common.overlay.messages import AppMessage, app_message
from common.overlay.node import Delivered, Event, OverlayParams
from deploy.harness.ring_keys import RingKeys

PARAMS = OverlayParams(keepalive_interval=1.0, leaf_timeout=5.0, probe_timeout=1.0, hop_timeout=2.0,
                       table_probe_interval=5.0, row_maintenance_interval=5.0, leaf_exchange_interval=5.0,
                       join_retry=1.0)  # fmt: skip


@app_message
class MixedProbe(AppMessage):
    """A numbered lookup (`origin`: the process that routed it)."""

    TYPE = "bench.mixed.probe"
    origin: str
    n: int


def _keys(workdir: Path, names: list[str]) -> RingKeys:
    keys = RingKeys(workdir, ring="mixed")
    for name in names:
        keys.node(name, hosts=["127.0.0.1"], pool=name)
    return keys


def _key(origin: str, k: int) -> int:
    return node_id_from_name(f"mixed-key-{origin}-{k}")


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    names = args.names.split(",")
    keys = _keys(args.keys, names)
    delivered: dict[str, str] = {}
    nodes: list[UdpOverlay] = []
    ever_dead: dict[str, set[int]] = {n: set() for n in names}
    samples: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        for i, name in enumerate(names):
            bootstrap = args.bootstrap if i == 0 else (args.bootstrap or nodes[0].address)
            cfg = RingConfig(node_name=name, bind="127.0.0.1", port=args.port + i, bootstrap=bootstrap,
                             overlay=PARAMS, **keys.ring_fields(name))  # fmt: skip

            def on_event(event: Event, name: str = name) -> None:
                if isinstance(event, Delivered) and isinstance(event.payload, MixedProbe):
                    delivered[f"{event.payload.origin}:{event.payload.n}"] = name

            node = UdpOverlay(cfg, on_event=on_event)
            await nursery.start(node.run)
            nodes.append(node)
        start = trio.current_time()
        routed = False
        while trio.current_time() - start < args.duration:
            await trio.sleep(1.0)
            t = round(trio.current_time() - start, 1)
            row: dict[str, Any] = {"t": t}
            for name, node in zip(names, nodes, strict=True):
                core = node.core
                assert core is not None
                ever_dead[name] |= set(core.dead) | set(core._departed)
                row[name] = {"joined": core.joined, "leaf": sorted(p.addr for p in core.leaf.members())}
            samples.append(row)
            if not routed and t >= args.lookups_at:
                routed = True
                for k in range(args.lookups):
                    await nodes[k % len(nodes)].route(_key(args.names, k), MixedProbe(origin=args.names, n=k))
        nursery.cancel_scope.cancel()
    final = samples[-1] if samples else {}
    return {
        "names": names,
        "ids": {n: nodes[i].core.me.id for i, n in enumerate(names) if nodes[i].core},  # type: ignore[union-attr]
        "addrs": {n: nodes[i].address for i, n in enumerate(names)},
        "routed": {f"{args.names}:{k}": _key(args.names, k) for k in range(args.lookups)},
        "delivered": delivered,
        "drops": {n: {k: v for k, v in nodes[i].drops.items() if v} for i, n in enumerate(names)},
        "ever_dead": {n: sorted(v) for n, v in ever_dead.items()},
        "first_full_leaf_set": {
            n: next((s["t"] for s in samples if len(s[n]["leaf"]) == args.ring_size - 1), None) for n in names
        },
        "final": final,
    }  # fmt: skip


def _combine(paths: list[Path]) -> dict[str, Any]:
    runs = [json.loads(p.read_text()) for p in paths]
    ids: dict[str, int] = {}
    addr_of: dict[str, str] = {}
    for r in runs:
        ids |= r["ids"]
        addr_of |= r["addrs"]
    delivered: dict[str, str] = {}
    for r in runs:
        delivered |= r["delivered"]
    by_id = {v: k for k, v in ids.items()}
    ok = total = 0
    for r in runs:
        for lookup, key in r["routed"].items():
            total += 1
            root = by_id[min(ids.values(), key=lambda i: closeness(key, i))]
            ok += delivered.get(lookup) == root
    everyone = set(addr_of.values())
    return {
        "lookups_at_root": [ok, total],
        "full_leaf_sets_at_end": sum(
            1 for r in runs for n in r["names"] if set(r["final"][n]["leaf"]) == everyone - {addr_of[n]}
        ),
        "nodes": len(ids),
        "first_full_leaf_set_s": {n: t for r in runs for n, t in r["first_full_leaf_set"].items()},
        "declared_dead_ever": {
            n: [by_id.get(i, hex(i)) for i in v] for r in runs for n, v in r["ever_dead"].items() if v
        },
        "drops": {n: d for r in runs for n, d in r["drops"].items() if d},
    }  # fmt: skip


def main() -> None:
    """keys, run or combine (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("keys")
    k.add_argument("keys", type=Path)
    k.add_argument("names", nargs="+")
    r = sub.add_parser("run")
    r.add_argument("keys", type=Path)
    r.add_argument("--names", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--bootstrap")
    r.add_argument("--duration", type=float, default=60.0)
    r.add_argument("--lookups-at", type=float, default=40.0)
    r.add_argument("--lookups", type=int, default=100)
    r.add_argument("--ring-size", type=int, default=8)
    r.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("combine")
    c.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "keys":
        _keys(args.keys, args.names)
    elif args.command == "run":
        args.out.write_text(json.dumps(trio.run(_run, args), indent=1))
    else:
        json.dump(_combine(args.runs), sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
