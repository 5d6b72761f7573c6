"""poolD's core on every pool of a simulation: the simulation driver of `poolD.core.PoolCore`,
the counterpart of the trio driver in `poolD.service`.

The experiment owns the clock and the pools' schedulers; per pool it hands the core a reading
(`read`) and fires its timer (`fire`), and this driver carries out what the core asks for, on
virtual time:
- offers (Announcement) go through the experiment's `transport` (the overlay simulator, or an
  in-step delivery that skips the event heap);
- authorization (FlockIntent, FlockReply) is delivered at once, and FLOCK_FROM is set at once:
  every pool's policy answers within the round, as it would within a real round's
  `authorize_timeout`;
- FLOCK_TO is applied at once, and becomes `targets[pool]` (pool indices, in order), through
  which the experiment's schedulers flock;
- RTT probes (`Measure`) go to the experiment's `measure`;
- shutting a revoked pool out (`ShutOutSchedds`) has nothing to act on: the simulated schedulers
  hold no claims beyond the next step, and they follow FLOCK_FROM's grants at once; it is counted
  (`shut_outs`) and fed back as done with nothing to undo;
- load readings (`ReadLoad`) are not needed: the experiment hands one in whenever it steps a pool.
"""

from __future__ import annotations

from collections.abc import Callable

from common.condor.types import PoolLoad
from common.overlay.messages import Peer
from common.wire import Message
from poolD.core import (
    CoreOutput,
    FlockFromApplied,
    FlockToApplied,
    Measure,
    PoolCore,
    ReadLoad,
    Send,
    SetFlockFrom,
    SetFlockTo,
    ShutOutDone,
    ShutOutSchedds,
)
from poolD.messages import Announcement

Transport = Callable[[int, str, Message, float], None]  # (from pool, to address, offer, now)
Prober = Callable[[int, Peer, float], None]  # (pool, peer to measure, now)


class SimulatedPoolDs:
    """Drives one `PoolCore` per pool; pool p's overlay address is `addrs[p]`."""

    def __init__(
        self,
        cores: list[PoolCore],
        addrs: list[str],
        collectors: list[str],
        transport: Transport,
        measure: Prober,
    ) -> None:
        self.cores = cores
        self.index_of_addr = {a: p for p, a in enumerate(addrs)}
        self.index_of_collector = {c: p for p, c in enumerate(collectors)}
        self.transport = transport
        self.measure = measure
        self.targets: list[list[int]] = [[] for _ in cores]
        self.flock_changes = 0
        self.shut_outs = 0

    def start(self, now: float) -> None:
        """Start every core at `now` and carry out what they ask for."""
        for p, core in enumerate(self.cores):
            self.execute(p, core.start(now), now)

    def read(self, p: int, load: PoolLoad, now: float) -> None:
        """Pool p's load reading at `now`: its gatherer may offer free slots."""
        self.execute(p, self.cores[p].on_load(load, now), now)

    def fire(self, p: int, now: float) -> None:
        """Pool p's timer at `now`: a due flocking round decides on the latest reading."""
        self.execute(p, self.cores[p].on_timer(now), now)

    def deliver(self, p: int, message: Message, now: float) -> None:
        """A message for pool p's poolD."""
        self.execute(p, self.cores[p].on_message(message, now), now)

    def execute(self, p: int, out: CoreOutput, now: float) -> None:
        """Carry out pool p's actions at once and feed their outcomes back (a ReadLoad needs nothing)."""
        core = self.cores[p]
        for action in out.actions:
            if isinstance(action, Send):
                if isinstance(action.message, Announcement):
                    self.transport(p, action.addr, action.message, now)
                else:
                    self.deliver(self.index_of_addr[action.addr], action.message, now)
            elif isinstance(action, Measure):
                self.measure(p, action.peer, now)
            elif isinstance(action, SetFlockTo):
                self.targets[p] = [self.index_of_collector[c] for c in action.collectors]
                self.flock_changes += 1
                self.execute(p, core.on_flock_to_applied(FlockToApplied(action, True, {}), now), now)
            elif isinstance(action, SetFlockFrom):
                self.execute(p, core.on_flock_from_applied(FlockFromApplied(action, None), now), now)
            elif isinstance(action, ShutOutSchedds):
                self.shut_outs += 1
                self.execute(p, core.on_shut_out(ShutOutDone(action), now), now)
            else:
                assert isinstance(action, ReadLoad)
