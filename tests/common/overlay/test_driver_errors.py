"""The UDP driver survives its core: an exception while handling a message is caught, counted
and logged, and the node goes on serving (issue 14, row 2)."""

from __future__ import annotations

from pathlib import Path

import trio

from common.overlay.messages import Ping
from common.overlay.node import OverlayNode
from deploy.harness.sandbox import poll_until_async
from tests.common.overlay.test_udp_ring import Probe, Ring, ring_keys


async def test_an_exception_in_the_core_costs_one_message_not_the_node(tmp_path: Path) -> None:
    ring = Ring(ring_keys(tmp_path))
    async with trio.open_nursery() as nursery:
        a = await ring.add(nursery, "fragile-a")
        b = await ring.add(nursery, "fragile-b")
        await ring.converge()
        assert a.core is not None and b.core is not None
        handle = OverlayNode.on_message

        def broken_on_pings(self: OverlayNode, msg: object, now: float) -> object:
            if isinstance(msg, Ping):
                raise IndexError("a bug a message found")
            return handle(self, msg, now)  # type: ignore[arg-type]

        a.core.on_message = broken_on_pings.__get__(a.core)  # type: ignore[method-assign]
        await b.measure(b.core.me.model_copy(update={"id": a.core.me.id ^ 1, "addr": a.address}))
        await poll_until_async("the failing step counted", lambda: a.drops.get("handler_error", 0) >= 1)
        await b.route(a.core.me.id, Probe(n=7))
        await poll_until_async("a still delivers", lambda: 7 in ring.delivered)
        assert ring.delivered[7] == a.address
        nursery.cancel_scope.cancel()
