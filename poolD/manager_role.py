"""The active/standby gate (issue 16, Deliver 2): poold runs on every machine that may take its
pool's manager role (faultD's candidates), and acts only while faultD says this machine holds it.

A pure machine fed readings of faultD's role on this machine (its control socket's `status`:
role, this node's id, the manager's id, the epoch, the manager's collector, and whether its
Condor Module runs the manager daemons, which it starts after restoring the replicated state
files, poold's among them), and timer firings,
each with `now`. It answers whether poold here must be active, and says when that changes:
- `Activate(epoch)`: this machine holds the pool's manager role with `epoch`: resume from the
  state file (faultD restored the replicated one before it started the manager daemons) and act;
- `Deactivate(reason)`: it no longer does (another machine manages, or faultD is silent): stop
  issuing HTCondor actions at once, and do not withdraw anything (the poold now active owns the
  pool's FLOCK_TO and FLOCK_FROM);
- `Raise(epoch)`: still active, with a higher epoch (a partition healed in our favour): our
  offers and CollectorMoved notices carry it.

Fencing: a reading whose epoch is lower than one already seen is ignored (counted), so a late
or replayed answer cannot make this poold active again after a newer manager took over. A
faultD that does not answer for `silence_limit` seconds counts as having lost the role: the
other candidates' faultDs take over after missing about as many alives, and two active poolds
for one pool must not outlast that. A reading whose manager collector is not this poold's
collector is refused (misconfiguration: it would announce a collector nobody runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from poolD.messages import EPOCH_LIMIT

NODE_ID_HEX = re.compile(r"^[0-9a-f]{1,32}$")


class Mode(StrEnum):
    """Whether poold on this machine acts for the pool."""

    STANDBY = "standby"
    ACTIVE = "active"


@dataclass(frozen=True)
class RoleReading:
    """faultD's answer about this machine: whether it manages the pool, with which epoch."""

    manages: bool  # faultD's role is manager, the manager it names is this node, HTCondor follows
    epoch: int
    manager_collector: str | None


def reading_from_status(status: Any) -> RoleReading:
    """A reading from faultD's `status` reply (faultD.role.RoleMachine.status); ValueError
    naming the field when the reply is not one."""
    if not isinstance(status, dict):
        raise ValueError("faultd status: not a JSON object")
    if "error" in status:
        raise ValueError(f"faultd status: error: {str(status['error'])[:200]}")
    role = status.get("role")
    if role not in ("manager", "listener", "joining"):
        raise ValueError(f"faultd status: role: {str(role)[:40]!r} is not manager, listener or joining")
    if role == "joining":
        return RoleReading(False, 0, None)
    epoch = status.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < EPOCH_LIMIT:
        raise ValueError(f"faultd status: epoch: {str(epoch)[:40]!r} is not an epoch")
    node, manager = status.get("node_id"), status.get("manager")
    for name, value in (("node_id", node), ("manager", manager)):
        if value is not None and not (isinstance(value, str) and NODE_ID_HEX.fullmatch(value)):
            raise ValueError(f"faultd status: {name}: {str(value)[:40]!r} is not a node id")
    collector = status.get("manager_collector")
    if collector is not None and not isinstance(collector, str):
        raise ValueError("faultd status: manager_collector: not a string")
    condor = status.get("condor")
    # faultD restores the replicated state (poold's file among it) before its Condor Module says
    # it manages: poold resumes only after that, from the restored file.
    restored = not isinstance(condor, dict) or condor.get("managing") is True
    manages = role == "manager" and node is not None and manager == node and restored
    return RoleReading(manages, epoch, collector[:300] if collector else None)


@dataclass(frozen=True)
class Activate:
    """This machine holds the pool's manager role with `epoch`: resume and act."""

    epoch: int


@dataclass(frozen=True)
class Deactivate:
    """This machine no longer holds the role: stop issuing HTCondor actions at once."""

    reason: str


@dataclass(frozen=True)
class Raise:
    """Still active, with a higher epoch."""

    epoch: int


GateAction = Activate | Deactivate | Raise


class ManagerGate:
    """Active or standby, from faultD's readings (see the module docstring)."""

    def __init__(self, collector: str, *, silence_limit: float = 3.0) -> None:
        self.collector = collector  # ours: the one faultD must name while this machine manages
        self.silence_limit = silence_limit
        self.mode = Mode.STANDBY
        self.epoch = 0  # the highest epoch seen
        self.active_epoch: int | None = None
        self.last_reading: float | None = None
        self.fenced = 0  # readings ignored for an epoch below one already seen
        self.refused = 0  # readings naming another collector while this machine manages
        self.problem: str | None = None  # why the last reading was not used

    @property
    def active(self) -> bool:
        """Whether poold here may act for the pool (issue HTCondor actions, write its state file)."""
        return self.mode is Mode.ACTIVE

    def on_reading(self, reading: RoleReading, now: float) -> list[GateAction]:
        """One answer of faultD's."""
        if reading.epoch < self.epoch:
            self.fenced += 1
            self.problem = f"epoch {reading.epoch} is below {self.epoch}, seen before: ignored"
            return []
        self.epoch = reading.epoch
        self.last_reading = now
        self.problem = None
        if reading.manages and reading.manager_collector not in (None, self.collector):
            self.refused += 1
            self.problem = (
                f"faultd says this machine manages with collector {reading.manager_collector}, "
                f"but poold's collector is {self.collector}"
            )
            return self._deactivate(self.problem)
        if not reading.manages:
            return self._deactivate(f"another machine manages the pool (epoch {reading.epoch})")
        if self.mode is Mode.STANDBY:
            self.mode, self.active_epoch = Mode.ACTIVE, reading.epoch
            return [Activate(reading.epoch)]
        if self.active_epoch is not None and reading.epoch > self.active_epoch:
            self.active_epoch = reading.epoch
            return [Raise(reading.epoch)]
        return []

    def on_silence(self, why: str, now: float) -> list[GateAction]:
        """faultD did not answer (`why`); after `silence_limit` without a reading, stand by."""
        self.problem = why
        return self.on_timer(now)

    def on_timer(self, now: float) -> list[GateAction]:
        """Stand by once faultD has been silent for `silence_limit`."""
        if self.mode is Mode.ACTIVE and (
            self.last_reading is None or now - self.last_reading >= self.silence_limit
        ):
            return self._deactivate(f"faultd silent for {self.silence_limit:g} s: {self.problem}")
        return []

    def _deactivate(self, reason: str) -> list[GateAction]:
        if self.mode is Mode.STANDBY:
            return []
        self.mode, self.active_epoch = Mode.STANDBY, None
        return [Deactivate(reason)]

    def status(self, now: float) -> dict[str, Any]:
        """What `poold status` shows of the gate."""
        return {
            "mode": self.mode.value,
            "epoch": self.epoch,
            "active_epoch": self.active_epoch,
            "reading_age": None if self.last_reading is None else round(now - self.last_reading, 1),
            "fenced": self.fenced,
            "refused": self.refused,
            "problem": self.problem,
        }
