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

from llic.chef import ChefState
from llic.config import LlicConfig
from llic.events import (
    AgentConnected,
    AgentSubmitted,
    BulkReady,
    ConnectionBroken,
    GrantBulk,
    Output,
    ResultReceived,
    SendTasks,
    SubmitAgent,
    TransferDone,
)
from llic.master_core import MasterCore
from llic.netadmit import (
    IN,
    OUT,
    BulkRequest,
    BulkReturns,
    Capacity,
    NetAdmit,
    NetStats,
    Transfer,
    Verdict,
    format_capacity,
    overlap_bytes,
    parse_capacity,
    parse_rate,
)
from llic.task import TaskResult


def ok_result(process: int, attempt: int) -> TaskResult:
    return TaskResult(process, attempt, "ok", exit_code=0, host="n1")


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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.floats(0, 50), st.floats(0, 5), st.integers(0, 10**6)),
        max_size=40,
    ),
    st.floats(0, 80),
    st.booleans(),
)
def test_stats_rate_reads_only_its_window(
    records: list[tuple[str, float, float, int]], now: float, in_order: bool
) -> None:
    """Rates read `recent` from its latest end back to the window's start only (ordered by end,
    also when a clock step records a transfer out of order), and the peak at each record comes
    from a running sum (`_WindowRate`): the same as summing everything recorded."""
    if in_order:  # as transfers end on a steady clock
        records = sorted(records, key=lambda r: r[1] + r[2])
    stats = NetStats(window=10.0)
    done: list[Transfer] = []
    for agent, start, length, nbytes in records:
        t = Transfer(agent, "s", IN, nbytes, start, start + length)
        stats.record(t)
        done.append(t)
    assert [t.end for t in stats.recent] == sorted(t.end for t in stats.recent)
    for agent in (None, "a", "b"):  # (all ends within 10 windows: nothing trimmed)
        brute = sum(overlap_bytes(t, now - 10.0, now) for t in done if agent is None or t.agent == agent)
        assert stats.rate(now, agent=agent) == pytest.approx(8 * brute / 10.0)
    if done:  # the peak: the highest rate at a record, of what was recorded by then
        peaks = [
            sum(overlap_bytes(t, u.end - 10.0, u.end) for t in done[: j + 1]) for j, u in enumerate(done)
        ]
        assert stats.peak["s"] == pytest.approx(8 * max(peaks) / 10.0)


def test_admission_basics() -> None:
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), per_subnet=2, sizes={0: 10, 1: 10, 2: 10, 3: 0})
    net.connect("a", "10.1.0.5")
    net.connect("a2", "10.1.0.6")
    net.connect("b", "10.2.0.5")
    assert net.admit("a", 0, 0.0) == Verdict.ADMITTED and net.pace(0) == 50e6
    assert net.admit("a2", 1, 0.0) == Verdict.ADMITTED
    assert net.admit("a2", 2, 0.0) == Verdict.HELD
    assert net.admit("a", 3, 0.0) == Verdict.ADMITTED  # nothing travels: never held
    assert net.admit("b", 2, 0.0) == Verdict.ADMITTED and net.pace(2) is None  # other subnet: free
    assert net.reserved("10.1.0.0/16") == 100e6
    net.transfer_done(Transfer("a", "10.1.0.0/16", IN, 10, 0.0, 1.0))
    net.release(0, agent="a")
    assert net.reserved("10.1.0.0/16") == 50e6
    net.forget("a2")
    assert net.reserved("10.1.0.0/16") == 0


def test_one_paced_transfer_per_agent() -> None:
    """An agent's tasks share its one connection: a second reservation would sit idle behind the
    first (the cause of the loopback run's one agent taking all 8 transfers), so it waits, and
    another agent on the subnet takes the next transfer; on unlimited subnets nothing waits."""
    net = NetAdmit(Capacity.parse("10.1.0.0/16:100Mbps"), per_subnet=2, sizes=dict.fromkeys(range(5), 10))
    net.connect("a", "10.1.0.5")
    net.connect("c", "10.1.0.6")
    net.connect("free", "10.9.0.5")
    assert net.admit("a", 0, 0.0) == Verdict.ADMITTED
    assert net.admit("a", 1, 0.0) == Verdict.HELD  # busy, though 50 Mbps are spare
    assert 1 not in net.held  # not counted as held for capacity
    assert net.admit("c", 1, 0.0) == Verdict.ADMITTED
    assert net.admit("free", 2, 0.0) == Verdict.ADMITTED
    assert net.admit("free", 3, 0.0) == Verdict.ADMITTED  # unlimited: not paced, never held
    net.transfer_done(Transfer("a", "10.1.0.0/16", IN, 10, 0.0, 1.0))
    net.release(0, agent="a")
    assert net.admit("a", 4, 1.0) == Verdict.ADMITTED


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
        self.core = MasterCore.new(range(n_tasks), config, self.net)
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
        for action in out.actions:  # the rate the driver paces at is the one admission reserved
            if isinstance(action, SendTasks):
                assert all(action.rate_of(t.process) == self.net.pace(t.process) for t in action.tasks)
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
        # an agent's one connection carries one paced transfer at a time
        paced = [r.agent for r in self.net.reservations.values() if r.bps > 0]
        assert len(paced) == len(set(paced))
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
            arrived = TransferDone(agent, process, IN, self.sizes[process], start, when, attempt)
            out = self.core.handle(arrived, when)
            self.act(out)
            self.push(when + self.run_times[process % len(self.run_times)], "ran", agent, process, attempt)
        else:
            self.act(self.core.handle(ResultReceived(agent, ok_result(process, attempt)), when))
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
    sim = Sim(20, sizes, ["10.1.0.5", "10.1.0.6", "10.2.0.5"], "10.1.0.0/16:10Mbps", [0.1], per_subnet=1)
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
    core = MasterCore.new(range(4), LlicConfig(window_size=1, max_chefs_number=2), net)
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


# ----------------------------------------------------------------------------- bulk returns (item 3)


def test_bulk_returns_one_per_subnet_fifo_and_released_on_done_or_loss() -> None:
    bulk = BulkReturns()

    def req(agent: str, process: int, subnet: str, now: float) -> None:
        bulk.request(BulkRequest(agent, process, 0, 50_000_000, subnet, now), now)

    req("a", 1, "s1", 0.0)
    req("b", 2, "s1", 1.0)
    req("c", 3, "s1", 2.0)
    req("d", 4, "s2", 2.0)  # another subnet: its own turn at once
    assert [(g.agent, g.process) for g in bulk.take_grants()] == [("a", 1), ("d", 4)]
    req("a", 1, "s1", 3.0)  # asked again: not queued twice
    assert bulk.duplicates == 1
    bulk.done("a", 1, 5.0)
    assert [(g.agent, g.process) for g in bulk.take_grants()] == [("b", 2)]  # first come, first served
    assert bulk.max_wait == 4.0
    bulk.forget("b", 6.0)  # b crashed while sending: its turn passes on, nothing leaks
    assert [(g.agent, g.process) for g in bulk.take_grants()] == [("c", 3)]
    bulk.forget("c", 7.0)
    bulk.done("d", 4, 7.0, attempt=1)  # a late copy of another run's result: d's turn goes on
    assert bulk.granted["s2"].process == 4
    bulk.done("d", 4, 7.0, attempt=0)
    assert not bulk.granted and not bulk.waiting and not bulk.take_grants()
    snap = bulk.snapshot()
    assert snap["grants"] == 4 and snap["waiting"] == {} and snap["active"] == {}


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["ask", "done", "crash"]), st.integers(0, 5), st.integers(0, 3)),
        max_size=80,
    )
)
def test_bulk_at_most_one_per_subnet_and_every_request_granted(ops: list[tuple[str, int, int]]) -> None:
    """Random requests (agent i is on subnet i % 2), completions and agent crashes: at every step
    at most one return per subnet is under way and grants follow request order per subnet; at
    the end, finishing whatever is granted, again and again, grants every request whose agent
    did not crash."""
    bulk = BulkReturns()
    now = 0.0
    asked: dict[str, list[tuple[str, int]]] = {}  # subnet -> requests in order, still expected
    granted_order: dict[str, list[tuple[str, int]]] = {}
    crashed: set[str] = set()
    pending: set[tuple[str, int]] = set()

    def note_grants() -> None:
        for g in bulk.take_grants():
            assert g.agent not in crashed
            granted_order.setdefault(g.subnet, []).append((g.agent, g.process))

    def check() -> None:
        for subnet, g in bulk.granted.items():
            assert g.subnet == subnet
        assert len({g.subnet for g in bulk.granted.values()}) == len(bulk.granted)

    for kind, i, process in ops:
        now += 1.0
        agent, subnet = f"a{i}", f"s{i % 2}"
        if kind == "ask" and agent not in crashed:
            bulk.request(BulkRequest(agent, process, 0, 1, subnet, now), now)
            if (agent, process) not in pending:  # else a duplicate: ignored
                pending.add((agent, process))
                asked.setdefault(subnet, []).append((agent, process))
        elif kind == "done":
            g = bulk.granted.get(subnet)
            if g is not None:
                bulk.done(g.agent, g.process, now)
                pending.discard((g.agent, g.process))
        elif kind == "crash":
            crashed.add(agent)
            bulk.forget(agent, now)
        note_grants()
        check()
    for _ in range(200):
        if not bulk.granted:
            break
        for g in list(bulk.granted.values()):
            bulk.done(g.agent, g.process, now)
            pending.discard((g.agent, g.process))
        note_grants()
        check()
    assert not bulk.granted and not bulk.waiting, "a request was never granted"
    for subnet, requests in asked.items():
        expected = [r for r in requests if r[0] not in crashed]
        got = [r for r in granted_order.get(subnet, []) if r[0] not in crashed]
        assert got == expected  # FIFO, and every surviving request granted exactly once


class BulkSim:
    """MasterCore + NetAdmit with a bulk threshold; agents run tasks (no inputs), and return each
    result at once when small, or announce it and send it when granted, over `link_bps`. One
    agent may crash at a chosen time; its chef's new agent connects at the same address."""

    def __init__(
        self,
        out_sizes: list[int],
        addresses: list[str],
        run_times: list[float],
        crash_at: float | None,
        threshold: int = 10_000_000,
        link_bps: float = 100e6,
        capacity: str = "",
        in_sizes: list[int] | None = None,
        per_subnet: int = 2,
    ) -> None:
        config = LlicConfig(window_size=3, max_chefs_number=len(addresses), num_agent_recoveries=5)
        self.in_sizes = in_sizes or [0]
        sizes = {p: self.in_sizes[p % len(self.in_sizes)] for p in range(len(out_sizes))}
        self.net = NetAdmit(
            Capacity.parse(capacity), per_subnet=per_subnet, sizes=sizes, bulk_threshold=threshold
        )
        self.flows: list[tuple[str, str, float, float, float]] = []  # agent, subnet, bps, start, end
        self.in_starts: dict[int, float] = {}
        self.core = MasterCore.new(range(len(out_sizes)), config, self.net)
        self.out_sizes, self.run_times, self.threshold, self.link = out_sizes, run_times, threshold, link_bps
        self.now = 0.0
        self.events: list[tuple[float, int, str, str, int, int]] = []
        self.seq = 0
        self.address: dict[int, str] = {}  # chef -> its agents' address
        self.alive: set[str] = set()
        self.sending: dict[str, set[tuple[str, int]]] = {}  # subnet -> large returns on the wire
        self.asked: dict[tuple[str, int], float] = {}
        self.small_waits: list[float] = []
        self.max_overlap = 0
        self.crash_at = crash_at
        out = self.core.start(len(addresses), 0.0)
        for a, address in zip(
            [a for a in out.actions if isinstance(a, SubmitAgent)], addresses, strict=False
        ):
            self.address[a.chef] = address
        self.act(out)

    def push(self, delay: float, kind: str, agent: str, process: int = -1, attempt: int = -1) -> None:
        self.seq += 1
        heapq.heappush(self.events, (self.now + delay, self.seq, kind, agent, process, attempt))

    def act(self, out: Output) -> None:
        for action in out.actions:
            if isinstance(action, SubmitAgent):
                self.core.handle(AgentSubmitted(action.agent, f"{action.chef}.{action.launch}"), self.now)
                self.push(0.5, "connect", action.agent, action.chef)
            elif isinstance(action, SendTasks):
                for t in action.tasks:
                    size = self.net.sizes.get(t.process, 0)
                    if size and action.agent in self.net.agents:
                        pace = self.net.pace(t.process) or self.link
                        self.flow(action.agent, pace, 8 * size / pace)
                        self.in_starts[t.process] = self.now
                        self.push(8 * size / pace, "arrived", action.agent, t.process, t.attempt)
                        continue
                    self.push(
                        self.run_times[t.process % len(self.run_times)],
                        "ran",
                        action.agent,
                        t.process,
                        t.attempt,
                    )
            elif isinstance(action, GrantBulk) and action.agent in self.alive:
                subnet = self.net.agents[action.agent]
                self.sending.setdefault(subnet, set()).add((action.agent, action.process))
                self.max_overlap = max(self.max_overlap, len(self.sending[subnet]))
                size = self.out_sizes[action.process]
                rate = action.rate_bps or self.link  # the agent paces a granted return at its rate
                self.flow(action.agent, rate, 8 * size / rate)
                self.push(8 * size / rate, "returned", action.agent, action.process, action.attempt)

    def flow(self, agent: str, bps: float, duration: float) -> None:
        self.flows.append((agent, self.net.agents[agent], bps, self.now, self.now + duration))

    def rate_now(self, subnet: str) -> float:
        """What crosses `subnet`'s link at this instant, both directions (crashed agents' stop)."""
        return sum(
            bps
            for agent, s, bps, start, end in self.flows
            if s == subnet and agent in self.alive and start <= self.now < end
        )

    def step(self) -> bool:
        if not self.events:
            return False
        self.now, _, kind, agent, process, attempt = heapq.heappop(self.events)
        if self.crash_at is not None and self.now >= self.crash_at and self.alive:
            victim = sorted(self.alive)[0]
            self.crash_at = None
            self.alive.discard(victim)
            subnet = self.net.agents.get(victim)
            for sending in self.sending.values():
                sending -= {s for s in sending if s[0] == victim}
            self.act(self.core.handle(ConnectionBroken(victim, "crashed"), self.now))
            assert all(g.agent != victim for g in self.net.bulk.granted.values()), subnet
        if kind == "connect":
            self.alive.add(agent)
            self.act(self.core.handle(AgentConnected(agent, self.address[process]), self.now))
        elif agent not in self.alive:
            pass  # events of a crashed agent
        elif kind == "arrived":
            size = self.net.sizes[process]
            start = self.in_starts[process]
            arrived = TransferDone(agent, process, IN, size, start, self.now, attempt)
            self.act(self.core.handle(arrived, self.now))
            self.push(self.run_times[process % len(self.run_times)], "ran", agent, process, attempt)
        elif kind == "ran":
            size = self.out_sizes[process]
            if size > self.threshold:
                self.asked[(agent, process)] = self.now
                self.act(self.core.handle(BulkReady(agent, process, attempt, size), self.now))
            else:
                self.small_waits.append(0.0)  # the agent sends it at once; the core must take it
                self.finish(agent, process, attempt, size, self.now)
        elif kind == "returned":
            self.sending[self.net.agents[agent]].discard((agent, process))
            self.finish(agent, process, attempt, self.out_sizes[process], self.asked[(agent, process)])
        return True

    def finish(self, agent: str, process: int, attempt: int, size: int, start: float) -> None:
        if size:
            returned = TransferDone(agent, process, OUT, size, start, self.now, attempt)
            self.act(self.core.handle(returned, self.now))
        self.act(self.core.handle(ResultReceived(agent, ok_result(process, attempt)), self.now))


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1_000, 5_000_000, 20_000_000, 60_000_000]), min_size=1, max_size=25),
    subnets=st.lists(
        st.sampled_from(["10.1.0.5", "10.1.0.6", "10.1.0.7", "10.2.0.5"]), min_size=1, max_size=4
    ),
    run_times=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=4),
    crash_at=st.one_of(st.none(), st.floats(0.0, 20.0)),
)
def test_large_returns_never_overlap_on_a_subnet_and_all_tasks_finish(
    sizes: list[int], subnets: list[str], run_times: list[float], crash_at: float | None
) -> None:
    sim = BulkSim(sizes, subnets, run_times, crash_at)
    steps = 0
    while sim.step():
        steps += 1
        assert steps < 20_000
        for sending in sim.sending.values():
            assert len(sending) <= 1  # at most one large return per subnet at every instant
    assert sim.max_overlap <= 1
    assert sim.core.book.finished and sim.core.book.counts().done == len(sizes), "a result never got its turn"
    assert not sim.net.bulk.granted and not sim.net.bulk.waiting  # nothing leaked, crash or not
    large = sum(1 for s in sizes if s > sim.threshold)
    assert sim.net.bulk.grants >= large  # every large result went through a grant (again after a crash)


@settings(max_examples=60, deadline=None)
@given(
    out_sizes=st.lists(st.sampled_from([0, 1_000, 2_000_000, 6_000_000]), min_size=1, max_size=20),
    in_sizes=st.lists(st.sampled_from([0, 500_000, 3_000_000]), min_size=1, max_size=5),
    subnets=st.lists(
        st.sampled_from(["10.1.0.5", "10.1.0.6", "10.1.0.7", "10.2.0.5"]), min_size=1, max_size=4
    ),
    limit_mbps=st.integers(1, 50),
    per_subnet=st.integers(1, 3),
    run_times=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=4),
    crash_at=st.one_of(st.none(), st.floats(0.0, 30.0)),
)
def test_inputs_and_large_returns_share_the_limit_at_every_instant(
    out_sizes: list[int],
    in_sizes: list[int],
    subnets: list[str],
    limit_mbps: int,
    per_subnet: int,
    run_times: list[float],
    crash_at: float | None,
) -> None:
    """Paced inputs and granted large returns on a limited subnet, agents crashing: what crosses
    the subnet's link (both directions) and what is reserved stay under the limit at every
    instant, large returns still go one at a time, small results never wait, every task ends."""
    limit = limit_mbps * MBPS
    sim = BulkSim(
        out_sizes,
        subnets,
        run_times,
        crash_at,
        threshold=1_000_000,
        capacity=f"10.1.0.0/16:{limit_mbps}Mbps",
        in_sizes=in_sizes,
        per_subnet=per_subnet,
    )
    steps = 0
    while sim.step():
        steps += 1
        assert steps < 50_000
        assert sim.rate_now("10.1.0.0/16") <= limit * (1 + 1e-6)
        assert sim.net.reserved("10.1.0.0/16") <= limit * (1 + 1e-6)
        assert all(len(sending) <= 1 for sending in sim.sending.values())
    assert sim.core.book.finished and sim.core.book.counts().done == len(out_sizes), "a task was starved"
    assert not sim.net.bulk.granted and not sim.net.bulk.waiting and not sim.net.reservations
    limited = [f for f in sim.flows if f[1] == "10.1.0.0/16"]
    assert all(bps <= limit * (1 + 1e-6) for _, _, bps, _, _ in limited)


def test_a_large_return_waits_for_room_and_inputs_wait_behind_it() -> None:
    net = NetAdmit(Capacity.parse("10.1.0.0/16:8Mbps"), per_subnet=2, sizes={1: 1_000, 2: 1_000, 3: 1_000})
    net.connect("a", "10.1.0.5")
    net.connect("b", "10.1.0.6")
    net.connect("c", "10.2.0.5")  # another subnet, unlimited
    assert net.admit("a", 1, 0.0) == Verdict.ADMITTED and net.admit("b", 2, 0.0) == Verdict.ADMITTED
    assert net.reserved("10.1.0.0/16") == 8 * MBPS  # two inputs at limit / 2
    net.bulk_ready("c", 9, 0, 50_000_000, 0.0)  # unlimited subnet: granted at once, unpaced
    assert [(g.process, g.bps) for g in net.bulk.take_grants()] == [(9, 0.0)]
    net.bulk_ready("a", 7, 0, 50_000_000, 0.5)  # no room on 10.1/16: it waits, and inputs wait behind it
    assert not net.bulk.take_grants() and net.bulk.blocked("10.1.0.0/16")
    net.release(1)
    assert net.admit("b", 3, 1.0) == Verdict.HELD  # the return was first in line
    net.bulk.retry(1.0)
    assert [(g.process, g.bps) for g in net.bulk.take_grants()] == [(7, 4 * MBPS)]
    assert net.reserved("10.1.0.0/16") == 8 * MBPS
    net.release(2)
    assert net.admit("b", 3, 2.0) == Verdict.ADMITTED  # room again beside the return
    net.bulk_done("a", 7, 3.0)
    assert net.reserved("10.1.0.0/16") == 4 * MBPS  # only input 3 now
    assert net.snapshot(3.0)["subnets"]["10.1.0.0/16"]["max_reserved_bps"] == 8 * MBPS


def test_two_large_returns_on_one_subnet_go_one_after_the_other_and_small_ones_pass() -> None:
    # three agents on one /24: two large results and a small one, all made at the same moment
    sim = BulkSim([60_000_000, 60_000_000, 1_000], ["10.1.0.5", "10.1.0.6", "10.1.0.7"], [1.0], None)
    grants: list[float] = []
    small_done_at: float | None = None
    while sim.step():
        if sim.net.bulk.grants > len(grants):
            grants.append(sim.now)
        if small_done_at is None and sim.core.book[2].state.value == "done":
            small_done_at = sim.now
    assert sim.max_overlap == 1 and len(grants) == 2
    assert grants[1] - grants[0] == pytest.approx(8 * 60_000_000 / 100e6)  # the second waited its turn
    # agents connect at 0.5 s and every task runs 1 s: the small result is in when it is made, while
    # the large ones are just starting their turns
    assert grants[0] == pytest.approx(1.5) and small_done_at == pytest.approx(1.5)
