"""Pastry's routing table: row r holds, for each digit value, a node sharing r digits with us
and having that digit next, the nearest such node by measured round-trip time (proximity
neighbour selection), so that each routing step goes to a nearby node."""

from __future__ import annotations

from common.overlay.ids import ID_BITS
from common.overlay.messages import Peer


class RoutingTable:
    """Pastry's routing table for one node: rows by shared prefix; see the module docstring."""

    def __init__(self, me: Peer, b: int) -> None:
        if ID_BITS % b:
            raise ValueError("b must divide 128")
        self.me = me
        self.b = b
        self.rows = ID_BITS // b
        self.cols = 1 << b
        self._rows: list[list[Peer | None]] = [[None] * self.cols for _ in range(self.rows)]
        self.version = 0  # bumped on every change, so users can cache what they derive from rows
        self._used: tuple[int, int] = (-1, 0)  # (version, used_rows()) of the last count
        self._entries: tuple[int, list[Peer]] = (-1, [])  # (version, entries) of the last listing

    def slot(self, node_id: int) -> tuple[int, int] | None:
        """Where a node would sit in our table (None for ourselves)."""
        # shared_prefix_len and digit inlined: this runs for every node we hear of.
        x = self.me.id ^ node_id
        if x == 0:
            return None
        b = self.b
        r = (ID_BITS - x.bit_length()) // b
        return r, (node_id >> (ID_BITS - b * (r + 1))) & (self.cols - 1)

    def get(self, row: int, col: int) -> Peer | None:
        """The node at (row, col), or None."""
        return self._rows[row][col]

    def set(self, row: int, col: int, peer: Peer | None) -> None:
        """Put a node (or None) at (row, col)."""
        self._rows[row][col] = peer
        self.version += 1

    def row(self, row: int) -> list[Peer]:
        """The nodes present in one row."""
        return [p for p in self._rows[row] if p is not None]

    def entries(self) -> list[Peer]:
        """Every node in the table, row by row (a new list, the caller's to change)."""
        return list(self.cached_entries())

    def cached_entries(self) -> list[Peer]:
        """Every node in the table, row by row, listed again only after a change (the table has
        128 / b rows of 2^b slots to scan, and the core asks at every row request and maintenance
        round). The list is shared: do not change it."""
        version, listed = self._entries
        if version != self.version:
            listed = [p for row in self._rows for p in row if p is not None]
            self._entries = (self.version, listed)
        return listed

    def remove(self, node_id: int) -> tuple[int, int] | None:
        """Empty the node's slot if it holds that node; returns the slot, or None."""
        where = self.slot(node_id)
        if where is None:
            return None
        r, c = where
        current = self._rows[r][c]
        if current is not None and current.id == node_id:
            self._rows[r][c] = None
            self.version += 1
            return where
        return None

    def entry(self, node_id: int) -> Peer | None:
        """The node's entry, if it is in the table (it can only be in its own slot)."""
        where = self.slot(node_id)
        if where is None:
            return None
        current = self._rows[where[0]][where[1]]
        return current if current is not None and current.id == node_id else None

    def contains(self, node_id: int) -> bool:
        """Whether the node is in the table."""
        return self.entry(node_id) is not None

    def used_rows(self) -> int:
        """Index one past the deepest non-empty row (counted again only after a change: discovery
        asks at every announcement)."""
        version, used = self._used
        if version != self.version:
            used = next((r + 1 for r in range(self.rows - 1, -1, -1) if any(self._rows[r])), 0)
            self._used = (self.version, used)
        return used
