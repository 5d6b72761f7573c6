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


def daemon_with_state(tmp_path: Path) -> tuple:
    """A daemon whose config names a state file, with its core (no overlay, no HTCondor)."""
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "allow"\n')
    d = daemon(tmp_path, policy)
    path = tmp_path / "state" / "state.json"
    d.config = d.config.model_copy(update={"daemon": d.config.daemon.model_copy(update={"state_file": path})})
    cfg = d.config
    settings = CoreSettings(
        pool=cfg.pool.name, collector=cfg.pool.collector, discovery=cfg.discovery, flocking=cfg.flocking
    )
    node = OverlayNode(Peer(id=1, addr="127.0.0.1:7640"), OverlayParams(), random.Random(0))
    d.core = PoolCore(settings, node, d.policy, random.Random(0))
    return d, path


async def test_the_driver_writes_the_state_file_when_it_changed_and_resumes_from_it(tmp_path: Path) -> None:
    d, path = daemon_with_state(tmp_path)
    d.core.policy.add_to_blacklist("liar", trio.current_time() + 600.0, "stayed idle")
    await d._save_state(path)
    await d._save_state(path)  # unchanged: not written again
    assert d.counters["state_saves"] == 1 and path.exists()
    again, _ = daemon_with_state(tmp_path)
    await again._resume()
    assert "liar" in again.core.policy.blacklist and again.counters["state_file_rejected"] == 0


async def test_the_driver_sets_a_bad_state_file_aside_and_starts_fresh(tmp_path: Path) -> None:
    d, path = daemon_with_state(tmp_path)
    path.parent.mkdir()
    path.write_text('{"format": "poold-state", "version": 99}')
    await d._resume()
    assert d.counters["state_file_rejected"] == 1 and not path.exists()
    (aside,) = path.parent.glob("state.json.rejected-*")
    assert "99" in aside.read_text()  # kept for a person to look at
    assert any("version: 99" in line for line in d.decisions)
