"""Carrying out FLOCK_TO and FLOCK_FROM changes through the gateway, against a gateway double
that keeps each daemon's runtime config and fails where told. What a real schedd does with them
is tested against real HTCondor in test_poold_sandbox.py."""

from __future__ import annotations

from collections.abc import Mapping, Set

from common.condor import DaemonKind, DaemonRef, GatewayError
from common.condor.knobs import CheckedConfig
from poolD.condor_flock import apply_flock_from, apply_flock_to
from poolD.core import SetFlockFrom, SetFlockTo


class GatewayDouble:
    """Runtime config per daemon name. A daemon in `refuse` raises on set; one in `ignore`
    accepts the set but keeps its value (what a read-back must catch)."""

    def __init__(
        self, values: dict[str, str | None], *, refuse: Set[str] = frozenset(), ignore: Set[str] = frozenset()
    ) -> None:
        self.values = dict(values)
        self.refuse, self.ignore = refuse, ignore
        self.sets: list[tuple[str, str | None]] = []

    async def list_schedds(self) -> list[DaemonRef]:
        return [DaemonRef(kind=DaemonKind.SCHEDD, name=n) for n in self.values if n.startswith("schedd")]

    async def list_daemons(self, kind: DaemonKind) -> list[DaemonRef]:
        names = [n for n in self.values if n.startswith(kind.value)]
        return [DaemonRef(kind=kind, name=n, address=f"<{n}:9618>") for n in names]

    async def get_config(self, daemon: DaemonRef, key: str) -> str | None:
        return self.values[daemon.name or ""]

    async def set_config(self, daemon: DaemonRef, values: Mapping[str, str | None] | CheckedConfig) -> None:
        name = daemon.name or ""
        checked = values.as_dict() if isinstance(values, CheckedConfig) else values
        ((_, value),) = checked.items()
        self.sets.append((name, value))
        if name in self.refuse and value not in (None, "old.pool:9618"):
            raise GatewayError("set_config", f"{name} refused")
        if name not in self.ignore:
            self.values[name] = value


NEW = SetFlockTo(("near.pool:9618", "far.pool:9618"), "jobs wait")


async def test_flock_to_is_set_and_read_back_on_every_schedd() -> None:
    gw = GatewayDouble({"schedd1": None, "schedd2": "old.pool:9618"})
    result = await apply_flock_to(gw, NEW)  # type: ignore[arg-type]
    assert result.applied
    assert gw.values == {
        "schedd1": "near.pool:9618, far.pool:9618",
        "schedd2": "near.pool:9618, far.pool:9618",
    }
    assert result.seen == {
        "schedd1": ["near.pool:9618", "far.pool:9618"],
        "schedd2": ["near.pool:9618", "far.pool:9618"],
    }


async def test_a_schedd_that_refuses_gets_its_previous_flock_to_back() -> None:
    gw = GatewayDouble({"schedd1": None, "schedd2": "old.pool:9618"}, refuse={"schedd2"})
    result = await apply_flock_to(gw, NEW)  # type: ignore[arg-type]
    assert not result.applied
    assert gw.values["schedd2"] == "old.pool:9618" and ("schedd2", "old.pool:9618") in gw.sets
    assert result.seen["schedd2"] == ["old.pool:9618"]


async def test_a_schedd_that_reads_back_something_else_is_restored() -> None:
    gw = GatewayDouble({"schedd1": "old.pool:9618"}, ignore={"schedd1"})
    result = await apply_flock_to(gw, NEW)  # type: ignore[arg-type]
    assert not result.applied
    assert gw.sets == [("schedd1", "near.pool:9618, far.pool:9618"), ("schedd1", "old.pool:9618")]
    assert result.seen == {"schedd1": ["old.pool:9618"]}


async def test_an_empty_list_removes_the_runtime_value() -> None:
    gw = GatewayDouble({"schedd1": "near.pool:9618"})
    result = await apply_flock_to(gw, SetFlockTo((), "quiet"))  # type: ignore[arg-type]
    assert result.applied and gw.sets == [("schedd1", None)] and result.seen == {"schedd1": []}


async def test_flock_from_goes_to_the_collector_and_every_startd_or_reports_the_error() -> None:
    action = SetFlockFrom(("s1.other.org",), "10.0.0.7:7640", "other", "default allow")
    gw = GatewayDouble({"collector": None, "startd1": None, "startd2": None, "schedd1": None})
    assert (await apply_flock_from(gw, action)).error is None  # type: ignore[arg-type]
    assert sorted(gw.sets) == [
        ("collector", "s1.other.org"),
        ("startd1", "s1.other.org"),
        ("startd2", "s1.other.org"),
    ]
    gw = GatewayDouble({"collector": None, "startd1": None}, refuse={"startd1"})
    assert (await apply_flock_from(gw, action)).error == "set_config: startd1 refused"  # type: ignore[arg-type]
