"""llic.netadmit: rates and capacity parsing, accounting, and admission control (issue 8).

The property test runs MasterCore with a NetAdmit through a discrete-event simulation: agents on
random subnets with random limits, tasks with and without inputs, each admitted input transfer
paced at its reservation (as the driver does) and each task running a random time. It checks at
every event that no subnet's reservations exceed its limit, that a task without inputs never
waits while an agent has room, that the measured rate of every subnet stays under its limit, and
that every task finishes (no starvation)."""

from __future__ import annotations

import heapq
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llic.chef import (
    AgentConnected,
    AgentSubmitted,
    ChefState,
    MasterCore,
    Output,
    ResultReceived,
    SendTasks,
    SubmitAgent,
    TransferDone,
)
from llic.config import LlicConfig
from llic.netadmit import (
    IN,
    OUT,
    Capacity,
    NetAdmit,
    NetStats,
    Transfer,
    Verdict,
    format_capacity,
    parse_capacity,
    parse_rate,
)
from llic.taskbook import TaskOutcome

OK = TaskOutcome("ok", exit_code=0, host="n1")
MBPS = 1e6


def test_rates() -> None:
    assert parse_rate("200Mbps") == 200e6
    assert parse_rate("1gbps") == 1e9
    assert parse_rate(" 1.5 Kbps ") == 1500
    assert parse_rate("8bps") == 8
    for bad in ("200", "Mbps", "200MB", "-1Mbps", "0Mbps", "1e3Mbps"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_capacity_parse_and_subnets() -> None:
    limits = parse_capacity("10.1.0.0/16:200Mbps, default:1Gbps")
    assert format_capacity(limits) == "10.1.0.0/16:200Mbps, default:1Gbps"
    cap = Capacity(limits)
    assert cap.subnet_of("10.1.3.4") == "10.1.0.0/16"
    assert cap.subnet_of("10.2.3.4") == "10.2.3.0/24"
    assert cap.subnet_of("fe80::1") == "fe80::/64"
    assert cap.subnet_of("not an ip") == "unknown"
    assert cap.limit_of("10.1.0.0/16") == 200e6
    assert cap.limit_of("10.2.3.0/24") == 1e9
    assert Capacity.parse("10.1.0.0/16:1Mbps").limit_of("10.2.3.0/24") is None
    assert parse_capacity("") == ()
    for bad, words in (
        ("10.1.0.0/16", "not CIDR:rate"),
        ("10.1.0.0/33:1Mbps", "not a network"),
        ("default:1Mbps, default:2Mbps", "given twice"),
        ("10.1.0.0/16:fast", "not a rate"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_capacity(bad)


def test_stats_totals_and_rates() -> None:
    stats = NetStats(window=10.0)
    stats.record(Transfer("a", "s1", IN, 1_000_000, 0.0, 10.0))
    stats.record(Transfer("b", "s2", OUT, 500_000, 5.0, 5.0))
    snap = stats.snapshot(10.0)
    assert snap["master"]["bytes_in"] == 1_000_000 and snap["master"]["bytes_out"] == 500_000
    assert snap["subnets"]["s1"]["rate_bps"] == pytest.approx(8e5)
    assert snap["agents"]["b"]["subnet"] == "s2"
    assert stats.rate(25.0) == 0.0
    again = NetStats()
    again.restore(snap)
    assert again.master.transfers == 2 and again.subnets["s1"].bytes_in == 1_000_000


def test_admission_basics() -> None:
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), per_subnet=2, sizes={0: 10, 1: 10, 2: 10, 3: 0})
    net.connect("a", "10.1.0.5")
    net.connect("b", "10.2.0.5")
    assert net.admit("a", 0, 0.0) == Verdict.ADMITTED and net.pace(0) == 50e6
    assert net.admit("a", 1, 0.0) == Verdict.ADMITTED
    assert net.admit("a", 2, 0.0) == Verdict.HELD
    assert net.admit("a", 3, 0.0) == Verdict.ADMITTED  # nothing travels: never held
    assert net.admit("b", 2, 0.0) == Verdict.ADMITTED and net.pace(2) is None  # other subnet: free
    assert net.reserved("10.1.0.0/16") == 100e6
    net.transfer_done(Transfer("a", "10.1.0.0/16", IN, 10, 0.0, 1.0), 0)
    assert net.reserved("10.1.0.0/16") == 50e6
    net.forget("a")
    assert net.reserved("10.1.0.0/16") == 0


def test_held_head_is_not_overtaken() -> None:
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), per_subnet=1, sizes={0: 1, 1: 1, 2: 1})
    net.connect("a", "10.1.0.5")
    net.connect("c", "10.1.0.6")
    assert net.admit("a", 0, 0.0) == Verdict.ADMITTED
    assert net.admit("c", 1, 0.0) == Verdict.HELD  # 1 is now the head on this subnet
    net.release(0)
    assert net.admit("c", 2, 0.0) == Verdict.HELD  # 2 may not pass 1
    assert net.admit("c", 1, 0.0) == Verdict.ADMITTED


def test_min_rate_prefers_subnets_that_can_give_it() -> None:
    net = NetAdmit(Capacity.parse("10.1.0.0/16:4Mbps, default:1Gbps"), sizes={0: 1}, min_bps=8 * MBPS)
    net.connect("slow", "10.1.0.5")
    assert net.admit("slow", 0, 0.0) == Verdict.ADMITTED  # nothing better connected: capped at the limit
    assert net.pace(0) == 4 * MBPS
    net.release(0)
    net.connect("fast", "10.2.0.5")
    assert net.admit("slow", 0, 0.0) == Verdict.ELSEWHERE
    assert net.admit("fast", 0, 0.0) == Verdict.ADMITTED and net.pace(0) == 250e6


# ----------------------------------------------------------------------------- the core, simulated


def _sent(out: Output) -> list[tuple[str, int, int]]:
    return [(a.agent, t.process, t.attempt) for a in out.actions if isinstance(a, SendTasks) for t in a.tasks]


class Sim:
    """MasterCore + NetAdmit with agents that receive paced inputs and run tasks."""

    def __init__(
        self,
        n_tasks: int,
        sizes: dict[int, int],
        addresses: list[str],
        capacity: str,
        run_times: list[float],
        per_subnet: int = 2,
        window: int = 3,
    ) -> None:
        config = LlicConfig(window_size=window, max_chefs_number=len(addresses))
        self.net = NetAdmit(Capacity.parse(capacity), per_subnet=per_subnet, sizes=dict(sizes))
        self.core = MasterCore.new(range(n_tasks), config)
        self.core.use_net(self.net)
        self.sizes = sizes
        self.run_times = run_times
        self.now = 0.0
        self.events: list[tuple[float, int, str, str, int, int]] = []
        self.seq = 0
        self.transfers: list[Transfer] = []
        self.starts: dict[int, float] = {}
        out = self.core.start(len(addresses), 0.0)
        subs = [a for a in out.actions if isinstance(a, SubmitAgent)]
        addresses = addresses[: len(subs)]  # never more agents than tasks
        for sub in subs:
            self.core.handle(AgentSubmitted(sub.agent, f"{sub.chef}.0"), 0.0)
        for sub, address in zip(subs, addresses, strict=True):
            self.act(self.core.handle(AgentConnected(sub.agent, address), 0.0))

    def push(self, when: float, kind: str, agent: str, process: int, attempt: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, agent, process, attempt))

    def act(self, out: Output) -> None:
        for agent, process, attempt in _sent(out):
            size = self.sizes.get(process, 0)
            if size:
                pace = self.net.pace(process)
                duration = 0.0 if pace is None else 8 * size / pace
                self.push(self.now + duration, "arrived", agent, process, attempt)
                self.starts[process] = self.now
                self.transfers.append(
                    Transfer(agent, self.net.agents[agent], IN, size, self.now, self.now + duration)
                )
            else:
                self.push(
                    self.now + self.run_times[process % len(self.run_times)], "ran", agent, process, attempt
                )
        self.check()

    def check(self) -> None:
        for subnet in set(self.net.agents.values()):
            limit = self.net.limit(subnet)
            if limit is not None:
                assert self.net.reserved(subnet) <= limit * (1 + 1e-6)
        # a task without inputs never waits while a running agent has room
        free = [
            c
            for c in self.core.chefs
            if c.state is ChefState.RUNNING and c.accepting and self.core.book.held(c.index) < 3
        ]
        if free:
            assert not [p for p in self.core.book.queue() if not self.sizes.get(p, 0)]

    def step(self) -> bool:
        if not self.events:
            return False
        when, _, kind, agent, process, attempt = heapq.heappop(self.events)
        self.now = when
        if kind == "arrived":
            start = self.starts[process]
            out = self.core.handle(TransferDone(agent, process, IN, self.sizes[process], start, when), when)
            self.act(out)
            self.push(when + self.run_times[process % len(self.run_times)], "ran", agent, process, attempt)
        else:
            self.act(self.core.handle(ResultReceived(agent, process, attempt, OK), when))
        return True


def _peak_rate(transfers: list[Transfer], subnet: str) -> float:
    """The highest instantaneous rate on `subnet`: sum of overlapping paced transfers."""
    mine = [t for t in transfers if t.subnet == subnet and t.end > t.start]
    points = sorted({t.start for t in mine})
    best = 0.0
    for p in points:
        best = max(best, sum(8 * t.nbytes / (t.end - t.start) for t in mine if t.start <= p < t.end))
    return best


@settings(max_examples=60, deadline=None)
@given(
    n_tasks=st.integers(1, 30),
    size_list=st.lists(st.integers(0, 5_000_000), min_size=1, max_size=30),
    subnets=st.lists(
        st.sampled_from(["10.1.0.5", "10.1.0.6", "10.2.0.5", "10.3.0.7"]), min_size=1, max_size=4
    ),
    limit_mbps=st.integers(1, 200),
    per_subnet=st.integers(1, 4),
    run_times=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=5),
)
def test_limits_held_at_every_instant_and_no_starvation(
    n_tasks: int,
    size_list: list[int],
    subnets: list[str],
    limit_mbps: int,
    per_subnet: int,
    run_times: list[float],
) -> None:
    sizes = {p: size_list[p % len(size_list)] for p in range(n_tasks)}
    sim = Sim(n_tasks, sizes, subnets, f"10.1.0.0/16:{limit_mbps}Mbps", run_times, per_subnet)
    steps = 0
    while sim.step():
        steps += 1
        assert steps < 10_000
    assert sim.core.book.finished, "a task was starved"
    assert sim.core.book.counts().done == n_tasks
    assert _peak_rate(sim.transfers, "10.1.0.0/16") <= limit_mbps * MBPS * (1 + 1e-6)
    snap = sim.net.snapshot(sim.now)
    if any(sizes.values()):
        assert snap["master"]["bytes_in"] == sum(
            sizes[p] for p in range(n_tasks)
        )  # every input travelled once (no failures here)
    for row in snap["subnets"].values():
        if row["limit_bps"] is not None:
            assert row["peak_bps"] <= row["limit_bps"] * (1 + 1e-6)
            assert row["max_reserved_bps"] <= row["limit_bps"] * (1 + 1e-6)


def test_limited_subnet_is_paced_while_the_other_runs_free() -> None:
    sizes = dict.fromkeys(range(20), 1_250_000)  # 10 Mbit each
    sim = Sim(20, sizes, ["10.1.0.5", "10.2.0.5"], "10.1.0.0/16:10Mbps", [0.1], per_subnet=2)
    while sim.step():
        pass
    assert sim.core.book.finished
    per_agent: dict[str, int] = {}
    for t in sim.transfers:
        per_agent[t.subnet] = per_agent.get(t.subnet, 0) + 1
    assert per_agent["10.2.0.0/24"] > per_agent["10.1.0.0/16"]  # the free subnet took more
    assert _peak_rate(sim.transfers, "10.1.0.0/16") <= 10 * MBPS
    assert sim.net.held_count > 0


def test_preference_for_most_spare_capacity() -> None:
    # two agents with room; the one on the subnet with more spare capacity chooses first
    net = NetAdmit(Capacity.parse("10.1.0.0/16:10Mbps, 10.2.0.0/16:100Mbps"), sizes={})
    core = MasterCore.new(range(4), LlicConfig(window_size=1, max_chefs_number=2))
    core.use_net(net)
    subs = [a for a in core.start(2, 0.0).actions if isinstance(a, SubmitAgent)]
    for s in subs:
        core.handle(AgentSubmitted(s.agent, f"{s.chef}.0"), 0.0)
    core.handle(AgentConnected(subs[0].agent, "10.1.0.5"), 0.0)
    core.handle(AgentConnected(subs[1].agent, "10.2.0.5"), 0.0)
    assert net.spare_of_agent(subs[1].agent) > net.spare_of_agent(subs[0].agent)
    # both got a task; then a result from the slow one frees room on both sides at once
    ordered = sorted(
        (c for c in core.chefs if c.state is ChefState.RUNNING), key=lambda c: -net.spare_of_agent(c.agent)
    )
    assert ordered[0].agent == subs[1].agent
    assert math.isinf(NetAdmit().spare_of_agent("nobody"))
