"""poold's trio driver around its core: what it does when an HTCondor action fails in a way the
gateway did not foresee (no HTCondor needed: the gateway is replaced by one that raises)."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from common.overlay.messages import Peer
from common.overlay.node import OverlayNode, OverlayParams
from poolD.core import CoreSettings, PoolCore, ReadLoad, SetFlockTo
from tests.poolD.test_reload import daemon


class BrokenGateway:
    """Every call fails with an error that is not a GatewayError (a bug, or a surprise)."""

    async def list_schedds(self) -> list:
        raise RuntimeError("surprise")

    async def pool_load(self) -> None:
        raise RuntimeError("surprise")


async def test_an_unexpected_failure_of_an_action_is_counted_and_fed_back(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "allow"\n')
    d = daemon(tmp_path, policy)
    d.gateway = BrokenGateway()  # type: ignore[assignment]
    cfg = d.config
    settings = CoreSettings(
        pool=cfg.pool.name, collector=cfg.pool.collector, discovery=cfg.discovery, flocking=cfg.flocking
    )
    node = OverlayNode(Peer(id=1, addr="127.0.0.1:7640"), OverlayParams(), random.Random(0))
    d.core = core = PoolCore(settings, node, d.policy, random.Random(0))
    (withdraw,) = core.stop().actions  # a FLOCK_TO change in flight, as the core tracks it
    assert isinstance(withdraw, SetFlockTo) and core._applying == withdraw
    async with trio.open_nursery() as nursery:
        nursery.start_soon(d._condor_loop)
        d._condor_in.send_nowait(withdraw)
        d._condor_in.send_nowait(ReadLoad())
        with trio.fail_after(10):
            while d.counters["condor_action_errors"] < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert core._applying is None  # fed back as not applied: the core decides again
    assert core.load_error == "RuntimeError: surprise"  # and the reading as failed
