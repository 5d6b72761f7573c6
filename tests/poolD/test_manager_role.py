"""The active/standby gate (issue 16, Deliver 2): poold acts only while faultD says this machine
holds the pool's manager role; a reading with a lower epoch than one seen is ignored (fencing);
losing the role, or faultD falling silent, stands poold by at once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from common.overlay.ids import id_hex
from common.overlay.messages import Peer
from faultD.role import RoleMachine, RoleParams
from poolD.manager_role import (
    Activate,
    Deactivate,
    ManagerGate,
    Mode,
    Raise,
    RoleReading,
    reading_from_status,
)

ME = "b2.example.org:9618"
NODE, OTHER = id_hex(7), id_hex(9)


def status(role: str = "manager", epoch: int = 1, manager: str | None = NODE, **extra: Any) -> dict[str, Any]:
    """faultD's status reply, as its control socket gives it (the fields the gate reads)."""
    return {
        "role": role,
        "node_id": NODE,
        "manager": manager,
        "manager_collector": ME if manager == NODE else "b1.example.org:9618",
        "epoch": epoch,
        "condor": {"managing": role == "manager"},
    } | extra


def gate() -> ManagerGate:
    return ManagerGate(ME, silence_limit=3.0)


def test_activates_when_this_machine_manages_and_stands_by_when_another_does() -> None:
    g = gate()
    assert g.on_reading(reading_from_status(status("listener", 0, OTHER)), 0.0) == []
    assert g.mode is Mode.STANDBY and not g.active
    assert g.on_reading(reading_from_status(status(epoch=1)), 1.0) == [Activate(1)]
    assert g.active and g.on_reading(reading_from_status(status(epoch=1)), 2.0) == []
    (off,) = g.on_reading(reading_from_status(status("listener", 2, OTHER)), 3.0)
    assert isinstance(off, Deactivate) and "another machine" in off.reason and not g.active
    assert g.on_reading(reading_from_status(status(epoch=3)), 4.0) == [Activate(3)]  # taken back


def test_a_lower_epoch_is_never_acted_on() -> None:
    g = gate()
    g.on_reading(reading_from_status(status("listener", 5, OTHER)), 0.0)
    assert g.on_reading(reading_from_status(status(epoch=4)), 1.0) == []  # a late, stale answer
    assert not g.active and g.fenced == 1 and "below 5" in (g.problem or "")
    assert g.on_reading(reading_from_status(status(epoch=6)), 2.0) == [Activate(6)]
    assert g.on_reading(reading_from_status(status("listener", 5, OTHER)), 3.0) == []  # old news
    assert g.active and g.fenced == 2
    assert g.on_reading(reading_from_status(status(epoch=7)), 4.0) == [Raise(7)]


def test_faultd_silent_stands_poold_by() -> None:
    g = gate()
    g.on_reading(reading_from_status(status(epoch=1)), 0.0)
    assert g.on_silence("connection refused", 2.0) == []
    (off,) = g.on_silence("connection refused", 3.0)
    assert isinstance(off, Deactivate) and "connection refused" in off.reason
    assert g.on_timer(10.0) == []  # once


def test_managing_before_the_condor_module_restored_the_state_is_not_yet_active() -> None:
    g = gate()
    early = status(epoch=1) | {"condor": {"managing": False}}
    assert reading_from_status(early).manages is False
    assert g.on_reading(reading_from_status(early), 0.0) == [] and not g.active


def test_a_reading_naming_another_collector_is_refused() -> None:
    g = gate()
    wrong = status(epoch=1) | {"manager_collector": "elsewhere.example.org:9618"}
    assert g.on_reading(reading_from_status(wrong), 0.0) == [] and not g.active
    assert g.refused == 1 and "elsewhere" in (g.problem or "")


@pytest.mark.parametrize(
    ("reply", "field"),
    [
        ([], "not a JSON object"),
        ({"error": "unknown command"}, "error"),
        ({"role": "king"}, "role"),
        (status(epoch=-1), "epoch"),
        (status(epoch=True), "epoch"),
        (status(epoch=1 << 70), "epoch"),
        (status() | {"node_id": "../x"}, "node_id"),
        (status() | {"manager_collector": 5}, "manager_collector"),
    ],
)
def test_a_bad_status_reply_names_the_field(reply: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        reading_from_status(reply)


def test_a_joining_faultd_means_standby() -> None:
    assert reading_from_status({"role": "joining"}) == RoleReading(False, 0, None)


def test_faultds_own_status_drives_the_gate() -> None:
    """The role machine's real status: a lone original manager takes the role, the gate follows."""
    me = Peer(id=7, addr="10.0.0.7:7641")
    machine = RoleMachine(me, ME, RoleParams(), random.Random(1), original=True)
    g = gate()
    machine.start(0.0)
    machine.on_timer(10.0)  # nobody's alive heard: the original manages
    reply = machine.status(10.0) | {"condor": {"managing": True}}  # faultD.service adds this
    assert g.on_reading(reading_from_status(reply), 10.0) == [Activate(reply["epoch"])]


def test_poold_status_shows_the_gate() -> None:
    from poolD.cli import render_status

    g = gate()
    g.on_reading(reading_from_status(status(epoch=2)), 0.0)
    base = {
        "pool": "b",
        "collector": ME,
        "node": {"addr": "b2:7640", "id": "07" * 16},
        "joined": True,
        "leaf_set": [],
        "routing_table": [],
        "willing_list": [],
        "flock_to": {},
        "blacklist": {},
        "offers": {"accepted": 0, "dropped": {}},
        "overlay_drops": {},
        "decisions": [],
    }
    assert "manager role: active (epoch 2)" in render_status(base | {"manager_role": g.status(1.0)})
    assert "manager role" not in render_status(base | {"manager_role": None})


def test_with_faultd_the_collector_must_be_this_machines_own(tmp_path: Path) -> None:
    from common.config import ConfigError
    from poolD.config import with_condor_values
    from tests.poolD.test_reload import daemon

    policy = tmp_path / "policy.toml"
    policy.write_text('default = "allow"\n')
    config = daemon(tmp_path, policy).config
    unset = config.model_copy(
        update={
            "pool": config.pool.model_copy(update={"collector": None}),
            "daemon": config.daemon.model_copy(update={"faultd_socket": tmp_path / "faultd.sock"}),
        }
    )
    with pytest.raises(ConfigError, match=r"pool\.collector is not set: with daemon\.faultd_socket"):
        with_condor_values(unset, {"COLLECTOR_HOST": "cm.example.org"}, "poold.toml")
