"""Pastry's leaf set: the l/2 nodes closest on each side of us in the circular id space.

It guarantees delivery to the numerically closest node once a message is in our vicinity, and it
is what faultD replicates to. On a ring of at most l other nodes each side simply holds every node
(a node may then be on both sides), and the set covers the whole ring.
"""

from __future__ import annotations

from collections.abc import Collection

from common.overlay.ids import ID_MASK, closeness, cw_distance
from common.overlay.messages import Peer


class LeafSet:
    """Our nearest neighbours by id on each side, nearest first; see the module docstring."""

    def __init__(self, me: Peer, size: int) -> None:
        if size < 2 or size % 2:
            raise ValueError("leaf set size must be an even number >= 2")
        self.me = me
        self.half = size // 2
        self.larger: list[Peer] = []  # clockwise neighbours, nearest first
        self.smaller: list[Peer] = []  # counter-clockwise neighbours, nearest first
        self._by_id: dict[int, Peer] = {}  # looked up on every incoming message: keep it O(1)
        # could_hold's bounds, computed on every change (it runs for every node we hear of):
        # clockwise distance to the outermost larger member, counter-clockwise to the outermost
        # smaller one; None while a side has room (then any node could enter).
        self._reach: tuple[int, int] | None = None
        self.version = 0  # bumped on every change, so users can cache what they derive from the set

    def members(self) -> list[Peer]:
        """Every node of the set, each once, whichever side it is on."""
        return list(self._by_id.values())

    def __contains__(self, node_id: int) -> bool:
        return node_id in self._by_id

    def could_hold(self, node_id: int) -> bool:
        """Whether a node we do not hold yet would enter the set (cheap pre-check)."""
        reach = self._reach
        if reach is None:
            return True
        # cw_distance inlined: clockwise from us to the node within clockwise to the outermost
        # larger member, or counter-clockwise likewise.
        me = self.me.id
        return ((node_id - me) & ID_MASK) < reach[0] or ((me - node_id) & ID_MASK) < reach[1]

    def _changed(self) -> None:
        self.version += 1
        self._by_id = {p.id: p for side in (self.smaller, self.larger) for p in side}
        larger, smaller, me = self.larger, self.smaller, self.me.id
        if len(larger) < self.half or len(smaller) < self.half:
            self._reach = None
        else:
            self._reach = ((larger[-1].id - me) & ID_MASK, (me - smaller[-1].id) & ID_MASK)

    def get(self, node_id: int) -> Peer | None:
        """The member with this id, or None."""
        return self._by_id.get(node_id)

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def full(self) -> bool:
        """Whether both sides hold l/2 nodes (if not, we hold every node of the ring)."""
        return len(self.larger) >= self.half and len(self.smaller) >= self.half

    def _cw(self, p: Peer) -> int:
        return cw_distance(self.me.id, p.id)

    def _ccw(self, p: Peer) -> int:
        return cw_distance(p.id, self.me.id)

    def add(self, peer: Peer) -> bool:
        """Insert if the peer belongs on either side; True if the set changed."""
        me = self.me.id
        if peer.id == me:
            return False
        changed = self._insert(self.larger, peer, clockwise=True)
        changed = self._insert(self.smaller, peer, clockwise=False) or changed
        if changed:
            self._changed()
        return changed

    def _insert(self, side: list[Peer], peer: Peer, *, clockwise: bool) -> bool:
        """Put the peer on one side (larger: `clockwise`) if it is among its l/2 nearest; True
        if the side changed. Distances are computed inline (no key function): this runs for
        every node that could enter the set."""
        pid = peer.id
        if pid in self._by_id:  # (as before this add: a member of either side is in _by_id)
            for i, p in enumerate(side):
                if p.id == pid:
                    if p.addr != peer.addr:
                        side[i] = peer
                        return True
                    return False
        me = self.me.id
        sign = 1 if clockwise else -1
        distance = (sign * (pid - me)) & ID_MASK
        if len(side) >= self.half and distance >= (sign * (side[-1].id - me)) & ID_MASK:
            return False
        # Insert in order of distance (ids differ, so distances do: no ties), then drop the
        # farthest if the side overflows; the peer is always kept, being nearer than the last.
        at = len(side)
        while at > 0 and (sign * (side[at - 1].id - me)) & ID_MASK > distance:
            at -= 1
        side.insert(at, peer)
        del side[self.half :]
        return True

    def remove(self, node_id: int) -> bool:
        """Drop a node from both sides; True if it was a member."""
        if node_id not in self._by_id:
            return False
        self.larger = [p for p in self.larger if p.id != node_id]
        self.smaller = [p for p in self.smaller if p.id != node_id]
        self._changed()
        return True

    def covers(self, key: int) -> bool:
        """Whether the key falls within the arc our leaf set spans (then we know its root)."""
        if not self.full:
            return True  # we hold every node of a small ring
        return cw_distance(self.me.id, key) <= self._cw(self.larger[-1]) or cw_distance(
            key, self.me.id
        ) <= self._ccw(self.smaller[-1])

    def closest(self, key: int, exclude: Collection[int] = ()) -> Peer:
        """The node (us included) numerically closest to the key among us and the leaf set,
        skipping the nodes in `exclude`."""
        nodes = (p for p in [self.me, *self.larger, *self.smaller] if p.id not in exclude)
        return min(nodes, key=lambda p: closeness(key, p.id))

    def farthest(self, side: str) -> Peer | None:
        """The outermost member of one side ('larger' or 'smaller'), or None if that side is empty."""
        nodes = self.larger if side == "larger" else self.smaller
        return nodes[-1] if nodes else None
