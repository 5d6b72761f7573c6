"""What the single-node overlay tests share: one node (ME) between two leaf neighbours, with a
leaf set of two, and an application message to route. The tests feed ME messages and timers and
play its peers themselves."""

from __future__ import annotations

from common.overlay.messages import AppMessage, Peer, app_message
from common.overlay.node import OverlayParams


@app_message
class Note(AppMessage):
    TYPE = "test.overlay.note"
    n: int


PARAMS = OverlayParams(leaf_set_size=2)
ME = Peer(id=1000, addr="me")
LEFT = Peer(id=500, addr="left")
RIGHT = Peer(id=2000, addr="right")  # ME's larger neighbour: the one it watches
