"""A ring of mixed versions on the simulator: some nodes run the overlay as it was before
2026-11-27 (commit 3715ee6), the others the current one; and a rolling upgrade from the one to
the other, one node restarted at a time, as the README tells admins to upgrade.

An old node is the current core with no capabilities (`OverlayNode(capabilities=0)`: it sends
the base format only) behind the old node's decoding: every message delivered to it is encoded
as its sender's codec does and decoded by the frozen wire models of that version
(sim.legacy_overlay_wire, strict: an unknown field drops the message), and what they drop never
reaches its core (counted by type and reason in `MixedRing.counts`). Run on a core without
capabilities (the code of 41371ec..6fcd0b1, which sent its RTT fields to every peer), the old
node's own sends are stripped of those fields instead, as the old code never set them.

Failure detection is watched at every node: each time a core declares a node dead, that node's
state in the simulator tells whether it was down or just restarted (`true_deaths`) or up
(`false_deaths`).
"""

from __future__ import annotations

import inspect
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sim.legacy_overlay_wire as legacy
from common.overlay.messages import OVERLAY_MESSAGES, AppMessage, Peer, app_message, overlay_codec
from common.overlay.node import Delivered, Event, Output, OverlayNode, OverlayParams
from common.wire import Message, pack, unpack
from sim.network import SimNetwork, SimNode
from sim.overlay_experiment import leaf_set_is_exact
from sim.topology import Placement, transit_stub

RESTART_GRACE = 60.0
"""A node declared dead this soon after it restarted counts as a true death: the probes that
found it silent went out while it was down (suspicion takes leaf_timeout and two probe timeouts)."""
CORE_HAS_CAPABILITIES = "capabilities" in inspect.signature(OverlayNode.__init__).parameters


@app_message
class MixedLookup(AppMessage):
    """A lookup of the mixed-ring scenarios (numbered, to check where it was delivered)."""

    TYPE = "sim.mixed.lookup"
    n: int


legacy._APP_TYPES[MixedLookup.TYPE] = MixedLookup  # type: ignore[assignment]  # old nodes know it too


def _extension_fields() -> dict[str, dict[str, Any]]:
    """Per message type, the fields the current models have and the old ones do not, with their
    defaults (what an old sender's message holds there)."""
    old = {cls.TYPE: cls for cls in legacy.OVERLAY_MESSAGES}
    out: dict[str, dict[str, Any]] = {}
    for cls in OVERLAY_MESSAGES:
        before = old.get(cls.TYPE)
        if before is None:
            continue
        added = {n: f.get_default(call_default_factory=True) for n, f in cls.model_fields.items()
                 if n not in before.model_fields}  # fmt: skip
        if added:
            out[cls.TYPE] = added
    return out


EXTENSIONS = _extension_fields()


@dataclass
class Counts:
    """What the scenario saw."""

    legacy_drops: Counter[str] = field(default_factory=Counter)
    legacy_delivered: Counter[str] = field(default_factory=Counter)
    false_deaths: list[tuple[float, int, int]] = field(default_factory=list)  # (time, by, of)
    true_deaths: int = 0  # of a node that was down, or restarted within RESTART_GRACE


class MixedRing:
    """N nodes on the transit-stub topology, joining one by one; `old` nodes run the old version."""

    def __init__(
        self,
        n: int,
        seed: int,
        old: set[int],
        *,
        join_every: float = 0.5,
        params: OverlayParams | None = None,
        loss: float = 0.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.params = params or OverlayParams()
        self.placement = Placement(transit_stub(seed), n, seed)
        self.delivered: dict[int, int] = {}
        self.counts = Counts()
        self.old: set[int] = set()
        self.started_at: dict[int, float] = {}
        self.codec = overlay_codec()
        self.legacy_codec = legacy.overlay_codec()
        self.legacy_codec.drop_log.drop = lambda *args: None  # type: ignore[method-assign]  # counted instead
        self.net = SimNetwork(
            self.placement.latency, seed=seed, params=self.params, loss=loss, on_event=self._on_event
        )
        self.ids = [self.rng.getrandbits(128) for _ in range(n)]
        for i in range(n):
            bootstrap = None if i == 0 else self.rng.randrange(i)
            self.start(i, old=i in old, bootstrap=bootstrap, at=i * join_every)

    # ------------------------------------------------------------------ nodes

    def start(self, index: int, *, old: bool, bootstrap: int | None, at: float) -> None:
        """Start (or restart, with the same id) node `index` as an old or a current node."""
        net = self.net
        if index in net.nodes:
            net.restart(index, bootstrap=bootstrap, at=at)
        else:
            net.add_node(index, self.ids[index], bootstrap=bootstrap, at=at)
        node = net.nodes[index]
        self.started_at[index] = at
        if old and CORE_HAS_CAPABILITIES:
            rng = random.Random(f"node-{self.seed}-{index}-{node.node_id}")
            node.core = OverlayNode(node.core.me, self.params, rng, capabilities=0)  # type: ignore[call-arg]
        if old:
            self.old.add(index)
            self._behind_old_decoding(node)
        else:
            self.old.discard(index)
        self._watch_deaths(node)

    def _behind_old_decoding(self, node: SimNode) -> None:
        core = node.core
        handle = core.on_message

        def on_message(msg: Message, now: float) -> Output:
            reason = self.old_node_drops(msg)
            if reason is not None:
                self.counts.legacy_drops[f"{msg.TYPE}: {reason}"] += 1
                return Output()
            self.counts.legacy_delivered[msg.TYPE] += 1
            return handle(msg, now)

        core.on_message = on_message  # type: ignore[method-assign]
        if not CORE_HAS_CAPABILITIES:
            for name in ("start", "on_message", "on_timer", "route"):
                setattr(core, name, _stripping(getattr(core, name)))

    def old_node_drops(self, msg: Message) -> str | None:
        """Why an old node's decoding drops `msg` as its sender encodes it (None: it accepts it)."""
        wire = unpack(self.codec.encode(msg))
        sender = getattr(msg, "sender", None)
        if not CORE_HAS_CAPABILITIES and isinstance(sender, Peer) and int(sender.addr[1:]) in self.old:
            # An old sender (stripped: see _stripping) never put these fields on the wire.
            body = wire[2]
            for name, default in EXTENSIONS.get(msg.TYPE, {}).items():
                if body.get(name) == default:
                    del body[name]
        before = Counter(self.legacy_codec.drops)
        if self.legacy_codec.decode(pack(wire), "sim") is not None:
            return None
        return next(iter((self.legacy_codec.drops - before).keys()), "dropped")

    def _watch_deaths(self, node: SimNode) -> None:
        core, nodes = node.core, self.net.nodes
        declare = core._declare_dead
        by = node.index

        def declare_dead(peer: Peer, now: float) -> None:
            target = nodes.get(int(peer.addr[1:]))
            if target is not None and target.alive and now - self.started_at[target.index] > RESTART_GRACE:
                self.counts.false_deaths.append((now, by, target.index))
            else:
                self.counts.true_deaths += 1
            declare(peer, now)

        core._declare_dead = declare_dead  # type: ignore[method-assign]

    def stale_slots(
        self, *, dead_old: bool | None = None, bootstrap_old: bool = False
    ) -> list[tuple[int, int, int]]:
        """Every (joiner, bootstrap, hop): a live bootstrap (of this version, or old) whose next
        hop towards the joiner's id is a routing-table entry outside its leaf set (old or not,
        as asked; None: either): crash the hop and the joiner, and restart the joiner through
        the bootstrap, to see a join meet a dead table entry."""
        found = []
        for bootstrap, node in sorted(self.net.nodes.items()):
            if not node.alive or (bootstrap in self.old) != bootstrap_old:
                continue
            core = node.core
            for joiner, key in enumerate(self.ids):
                hop = core.next_hop(key, exclude=(key,))
                if (
                    hop is None
                    or joiner == bootstrap
                    or hop.id in core.leaf
                    or not core.table.contains(hop.id)
                ):
                    continue
                dead = int(hop.addr[1:])
                if dead != joiner and (dead_old is None or (dead in self.old) == dead_old):
                    found.append((joiner, bootstrap, dead))
        return found

    # ------------------------------------------------------------------ checks

    def _on_event(self, index: int, event: Event, now: float) -> None:
        if isinstance(event, Delivered) and isinstance(event.payload, MixedLookup):
            self.delivered[event.payload.n] = index

    def lookups(self, count: int, *, wait: float = 30.0) -> tuple[int, int]:
        """Route `count` random keys from random live nodes; (delivered at the true root, total)."""
        net = self.net
        oracle = net.root_oracle()
        alive = [n.index for n in net.alive()]
        base = len(self.delivered) + 10**9 * self.rng.randrange(1, 1000)
        expected = {}
        for k in range(base, base + count):
            key = self.rng.getrandbits(128)
            expected[k] = oracle.root(key)
            net.route(self.rng.choice(alive), key, MixedLookup(n=k))
        net.run_until(net.now + wait)
        return sum(1 for k, root in expected.items() if self.delivered.get(k) == root), count

    def wrong_leaf_sets(self) -> int:
        """Live joined nodes whose leaf set is not the l/2 nearest live nodes on each side."""
        ids = sorted(n.node_id for n in self.net.alive())
        return sum(1 for n in self.net.alive() if not leaf_set_is_exact(n.core, ids, n.core.leaf.half))

    def table_stretch(self) -> float:
        """Mean over live nodes and occupied table slots of the entry's latency over the nearest
        live node's that fits the slot (1.0: every slot holds its nearest candidate)."""
        alive = self.net.alive()
        ratios = []
        for node in alive:
            best: dict[tuple[int, int], float] = {}
            for other in alive:
                if other is node:
                    continue
                slot = node.core.table.slot(other.node_id)
                if slot is None:
                    continue
                lat = self.placement.latency(node.index, other.index)
                if lat < best.get(slot, float("inf")):
                    best[slot] = lat
            for r in range(node.core.table.rows):
                for p in node.core.table.row(r):
                    slot = node.core.table.slot(p.id)
                    held = self.placement.latency(node.index, int(p.addr[1:]))
                    if slot in best and best[slot] > 0:
                        ratios.append(held / best[slot])
        return sum(ratios) / len(ratios) if ratios else 1.0


def _stripping(entry: Callable[..., Output]) -> Callable[..., Output]:
    """An old node's entry point on a core without capabilities: its sends lose the fields the
    old version did not have (set back to their defaults)."""

    def wrapped(*args: Any, **kwargs: Any) -> Output:
        out = entry(*args, **kwargs)
        out.sends = [
            (addr, msg.model_copy(update=EXTENSIONS[msg.TYPE]) if msg.TYPE in EXTENSIONS else msg)
            for addr, msg in out.sends
        ]
        return out

    return wrapped


def rolling_upgrade(
    ring: MixedRing,
    *,
    every: float = 20.0,
    down: float = 5.0,
    lookups: int = 200,
    nodes: list[int] | None = None,
    to_old: bool = False,
) -> dict[str, Any]:
    """Restart the old nodes (or `nodes`) one at a time as current ones (or, `to_old`, as old
    ones: a rollback), each down `down` seconds, the next `every` seconds later, through a random
    live bootstrap, routing `lookups` lookups after each restart; returns what was measured."""
    net = ring.net
    during: list[tuple[int, int]] = []
    for index in sorted(ring.old) if nodes is None else nodes:
        net.crash(index)
        net.run_until(net.now + down)
        alive = [n.index for n in net.alive()]
        ring.start(index, old=to_old, bootstrap=ring.rng.choice(alive), at=net.now)
        net.run_until(net.now + every - down)
        during.append(ring.lookups(lookups, wait=10.0))
    return {
        "lookups_during": [sum(c for c, _ in during), sum(t for _, t in during)],
    }


def _summary(ring: MixedRing) -> dict[str, Any]:
    c = ring.counts
    return {
        "joined": len(ring.net.alive()),
        "wrong_leaf_sets": ring.wrong_leaf_sets(),
        "lookups": list(ring.lookups(1000)),
        "table_stretch": round(ring.table_stretch(), 4),
        "false_deaths": len(c.false_deaths),
        "false_deaths_sample": c.false_deaths[:5],
        "true_deaths": c.true_deaths,
        "old_nodes_dropped": dict(sorted(c.legacy_drops.items())),
        "old_nodes_accepted": dict(sorted(c.legacy_delivered.items())),
    }


def run(nodes: int, seed: int, old_fraction: float, *, settle: float = 300.0) -> dict[str, Any]:
    """A static mixed ring (a random `old_fraction` of old nodes joining among current ones); then
    a ring of old nodes only, upgraded node by node (rolling_upgrade). The figures, as a dict."""
    pick = random.Random(f"old-{seed}")
    ring = MixedRing(nodes, seed, {i for i in range(nodes) if pick.random() < old_fraction})
    ring.net.run_until(nodes * 0.5 + settle)
    mixed = {"old_nodes": len(ring.old)} | _summary(ring)
    ring = MixedRing(nodes, seed, set(range(nodes)))
    ring.net.run_until(nodes * 0.5 + settle)
    before = _summary(ring)
    ring.counts = Counts()
    upgrade = rolling_upgrade(ring)
    ring.net.run_until(ring.net.now + settle)
    return {
        "nodes": nodes, "seed": seed, "old_fraction": old_fraction,
        "core_has_capabilities": CORE_HAS_CAPABILITIES, "mixed": mixed,
        "all_old": before, "rolling_upgrade": upgrade | _summary(ring),
    }  # fmt: skip


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--old-fraction", type=float, default=0.5)
    args = parser.parse_args()
    print(json.dumps(run(args.nodes, args.seed, args.old_fraction), indent=2))
