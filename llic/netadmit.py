"""Network accounting and per-subnet admission control for llic's transfers (issue 8), pure.

Basney and Livny's "Managing Network Resources in Condor" (the seed): measure what is sent, keep
each subnet under a limit the administrator sets, and keep bulk transfers from fighting. Here the
bulk mover is llic's TRANSFER mode, so this module decides, for the master's core, whether a task
whose private inputs must travel may be handed to an agent now, and keeps the transfer figures
master_q shows. Nothing here reads a clock or touches a socket: the core feeds it (event, now),
so every interleaving can be tested with synthetic transfers.

- Capacity: `NETWORK_CAPACITY = 10.1.0.0/16:200Mbps, default:1Gbps`. An agent's subnet is the
  first listed network holding its address, else its /24 (IPv6: /64), which gets the `default`
  rate (unlimited when there is no default).
- Reservation: a transfer reserves `max(the task's minimum rate, limit / NETWORK_TRANSFERS_PER_SUBNET)`
  (at most the limit) on its agent's subnet from admission until it ends; the driver paces the
  send at that rate, so the sum of reservations, which never exceeds the limit, bounds what is
  measured on the link.
- Order: per subnet, the oldest transfer task that did not fit is at the head; no later transfer
  task is admitted on that subnet before it (so a big one is not starved by small ones), while
  tasks without transfers are never held back and agents on other subnets keep working.
- One at a time per agent on a limited subnet: the driver sends an agent's tasks one after
  another over its one connection, so a second reservation for the same agent would sit idle,
  counted against the subnet, until the first transfer ended (the subnet then ran at a fraction
  of its limit, and whichever agent answered first kept taking every freed place).
- Bulk returns (`BulkReturns`): a result whose files exceed BULK_OUTPUT_THRESHOLD is announced by
  its agent and sent only when granted; at most one such return per subnet at a time, first come
  first served, so large outputs finish one after the other instead of sharing the link. Smaller
  results never ask, so they never wait for a grant.
"""

from __future__ import annotations

import heapq
import ipaddress
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from llic.protocol import MAX_RESULT_BYTES

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

RATE_UNITS = {"bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}
RATE_WINDOW = 10.0  # seconds of transfers that make up a "current" rate
LOG_SIZE = 400  # transfers kept in the snapshot's "log" (the newest), for checks and plots
DEFAULT_KEY = "default"
IN = "in"  # master -> agent (executable excepted: HTCondor sends it with the agent)
OUT = "out"  # agent -> master
UNKNOWN_SUBNET = "unknown"
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*$")


def parse_rate(text: str) -> float:
    """Bits per second from '200Mbps' (units bps, Kbps, Mbps, Gbps; decimal, case-insensitive)."""
    match = _RATE.match(text)
    if match is None or match.group(2).lower() not in RATE_UNITS:
        raise ValueError(f"{text.strip()!r} is not a rate like 200Mbps (units bps, Kbps, Mbps, Gbps)")
    value = float(match.group(1)) * RATE_UNITS[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"{text.strip()!r}: a rate must be more than 0")
    return value


@dataclass(frozen=True)
class SubnetLimit:
    """One NETWORK_CAPACITY item: a subnet (None for the default) and its rate in bits per second."""

    network: IPNetwork | None  # None: the default for subnets not listed
    bps: float


def parse_capacity(text: str) -> tuple[SubnetLimit, ...]:
    """`CIDR:rate, ..., default:rate` (empty: no limits); ValueError in one line naming the item."""
    limits: list[SubnetLimit] = []
    seen: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        where, sep, rate = item.rpartition(":")
        if not sep or not where:
            raise ValueError(f"{item!r} is not CIDR:rate or default:rate")
        try:
            bps = parse_rate(rate)
        except ValueError as e:
            raise ValueError(f"{item!r}: {e}") from None
        if where.strip().lower() == DEFAULT_KEY:
            network = None
        else:
            try:
                network = ipaddress.ip_network(where.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{item!r}: {where.strip()!r} is not a network like 10.1.0.0/16") from None
        key = DEFAULT_KEY if network is None else str(network)
        if key in seen:
            raise ValueError(f"{key} is given twice")
        seen.add(key)
        limits.append(SubnetLimit(network, bps))
    return tuple(limits)


def format_capacity(limits: Iterable[SubnetLimit]) -> str:
    """The canonical text of parsed limits (parse_capacity reads it back)."""
    return ", ".join(
        f"{DEFAULT_KEY if lim.network is None else lim.network}:{format_rate(lim.bps)}" for lim in limits
    )


def format_rate(bps: float) -> str:
    """A rate in bits per second as NETWORK_CAPACITY writes it (`200Mbps`)."""
    for unit, factor in (("Gbps", 1e9), ("Mbps", 1e6), ("Kbps", 1e3)):
        if bps >= factor:
            return f"{bps / factor:g}{unit}"
    return f"{bps:g}bps"


class Capacity:
    """Which subnet an address is in, and that subnet's limit."""

    def __init__(self, limits: Iterable[SubnetLimit] = ()) -> None:
        self.limits = tuple(limits)
        self.listed = [(lim.network, lim.bps) for lim in self.limits if lim.network is not None]
        defaults = [lim.bps for lim in self.limits if lim.network is None]
        self.default = defaults[0] if defaults else None

    @classmethod
    def parse(cls, text: str) -> Capacity:
        """The capacity of a NETWORK_CAPACITY value (ValueError naming the bad item)."""
        return cls(parse_capacity(text))

    def subnet_of(self, address: str) -> str:
        """The subnet an address is accounted to: a listed network, else its /24 (or /64)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return UNKNOWN_SUBNET
        for network, _ in self.listed:
            if ip.version == network.version and ip in network:
                return str(network)
        prefix = 24 if ip.version == 4 else 64
        return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))

    def limit_of(self, subnet: str) -> float | None:
        """Bits per second, or None: unlimited."""
        for network, bps in self.listed:
            if str(network) == subnet:
                return bps
        return None if subnet == UNKNOWN_SUBNET else self.default


# ----------------------------------------------------------------------------- accounting


@dataclass(frozen=True)
class Transfer:
    """One finished transfer (the files of one task message or one result message)."""

    agent: str
    subnet: str
    direction: str  # IN or OUT
    nbytes: int
    start: float
    end: float


@dataclass
class Totals:
    """Bytes in and out, transfers and their summed durations, of an agent, a subnet or the master."""

    bytes_in: int = 0
    bytes_out: int = 0
    transfers: int = 0
    seconds: float = 0.0  # summed transfer durations

    def add(self, t: Transfer) -> None:
        """Count one finished transfer."""
        if t.direction == IN:
            self.bytes_in += t.nbytes
        else:
            self.bytes_out += t.nbytes
        self.transfers += 1
        self.seconds += max(0.0, t.end - t.start)

    def to_json(self) -> dict[str, Any]:
        """The totals as the state file and `master_q -json` show them."""
        return {
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "transfers": self.transfers,
            "seconds": round(self.seconds, 6),
        }

    @classmethod
    def from_json(cls, data: Any) -> Totals:
        """Totals from a state file; a missing or malformed field counts as zero."""
        if not isinstance(data, dict):
            return cls()

        def num(key: str) -> float:
            value = data.get(key, 0)
            return value if isinstance(value, int | float) and not isinstance(value, bool) else 0

        return cls(int(num("bytes_in")), int(num("bytes_out")), int(num("transfers")), float(num("seconds")))


def overlap_bytes(t: Transfer, lo: float, hi: float) -> float:
    """The part of `t`'s bytes sent within [lo, hi], assuming an even rate over its duration."""
    if t.end <= t.start:
        return float(t.nbytes) if lo < t.end <= hi else 0.0
    inside = min(hi, t.end) - max(lo, t.start)
    return t.nbytes * inside / (t.end - t.start) if inside > 0 else 0.0


class _WindowRate:
    """One subnet's bytes over the window that ends at its latest transfer's end, kept as
    transfers are recorded in order of their ends: the sum of the transfers ending inside it,
    less the parts before the window of those that began before it (the few in progress at its
    start). What `NetStats.rate` computes at that moment, without reading the whole window at
    each of a flood of small transfers."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.inside: deque[Transfer] = deque()  # ending within the window, by end
        self.total = 0  # their bytes
        self.unstarted: list[tuple[float, int, Transfer]] = []  # of them: began in it (heap by start)
        self.straddling: dict[int, Transfer] = {}  # of them: began before it
        self.serial = 0
        self.end = -math.inf  # the latest end recorded

    def add(self, t: Transfer) -> float | None:
        """Record `t`; the window's rate (bps) at its end, or None when `t` ended before the
        latest one (the caller then reads the window itself)."""
        if t.end < self.end:
            return None
        self.end = t.end
        self.serial += 1
        self.inside.append(t)
        self.total += t.nbytes
        heapq.heappush(self.unstarted, (t.start, self.serial, t))
        lo = t.end - self.window
        while self.unstarted and self.unstarted[0][0] < lo:
            _, serial, began = heapq.heappop(self.unstarted)
            self.straddling[serial] = began
        while self.inside[0].end <= lo:  # `t` itself ends after lo
            self.total -= self.inside.popleft().nbytes
        for serial in [k for k, s in self.straddling.items() if s.end <= lo]:
            del self.straddling[serial]
        before = sum(s.nbytes * (lo - s.start) / (s.end - s.start) for s in self.straddling.values())
        return 8 * (self.total - before) / self.window


class NetStats:
    """Totals per agent, per subnet and for the master, and rates over the last RATE_WINDOW."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self.master = Totals()
        self.agents: dict[str, Totals] = {}
        self.subnets: dict[str, Totals] = {}
        self.agent_subnet: dict[str, str] = {}
        self.recent: deque[Transfer] = deque()
        self.peak: dict[str, float] = {}  # subnet -> highest rate seen at a record (bps)
        self._rates: dict[str, _WindowRate] = {}  # subnet -> its rate at its latest record

    def record(self, t: Transfer) -> None:
        """Account one finished transfer to its master, agent and subnet, and to the recent-rate window."""
        self.master.add(t)
        self.agents.setdefault(t.agent, Totals()).add(t)
        self.subnets.setdefault(t.subnet, Totals()).add(t)
        self.agent_subnet[t.agent] = t.subnet
        self._insert(t)
        self._trim(t.end)
        rates = self._rates.get(t.subnet)
        rate = rates.add(t) if rates is not None else None
        if rate is None:  # a new subnet, or `t` ended before the latest: read the window, start over
            rate = self.rate(t.end, subnet=t.subnet)
            rates = self._rates[t.subnet] = _WindowRate(self.window)
            for r in self.recent:  # by end: `t` among them
                if r.subnet == t.subnet:
                    rates.add(r)
        self.peak[t.subnet] = max(self.peak.get(t.subnet, 0.0), rate)

    def _insert(self, t: Transfer) -> None:
        """Into `recent`, which stays ordered by end, so that a rate reads only the transfers
        of its window (summing all of `recent` at each of a flood of small transfers made
        recording them quadratic). Transfers end in the order they are recorded but for clock
        steps: the rare one out of order goes back to its place."""
        recent = self.recent
        if not recent or recent[-1].end <= t.end:
            recent.append(t)
            return
        i = len(recent)
        while i > 0 and recent[i - 1].end > t.end:
            i -= 1
        recent.insert(i, t)

    def _trim(self, now: float) -> None:
        while self.recent and self.recent[0].end < now - 10 * self.window:
            self.recent.popleft()

    def rate(self, now: float, *, subnet: str | None = None, agent: str | None = None) -> float:
        """Bits per second over [now - window, now], both directions."""
        lo = now - self.window
        total = 0.0
        for t in reversed(self.recent):  # latest end first; one that ended before lo adds nothing
            if t.end < lo:
                break
            if (subnet is None or t.subnet == subnet) and (agent is None or t.agent == agent):
                total += overlap_bytes(t, lo, now)
        return 8 * total / self.window

    def snapshot(self, now: float, reserved: Mapping[str, float] | None = None) -> dict[str, Any]:
        """What the state file keeps (extra["net"]) and master_q shows."""
        reserved = reserved or {}
        subnets = {}
        for name in sorted(set(self.subnets) | set(reserved)):
            row = self.subnets.get(name, Totals()).to_json()
            row["rate_bps"] = self.rate(now, subnet=name)
            row["peak_bps"] = self.peak.get(name, 0.0)
            row["reserved_bps"] = reserved.get(name, 0.0)
            subnets[name] = row
        agents = {}
        for name in sorted(self.agents):
            row = self.agents[name].to_json()
            row["subnet"] = self.agent_subnet.get(name, UNKNOWN_SUBNET)
            row["rate_bps"] = self.rate(now, agent=name)
            agents[name] = row
        master = self.master.to_json()
        master["rate_bps"] = self.rate(now)
        log = [
            [t.agent, t.subnet, t.direction, t.nbytes, round(t.start, 6), round(t.end, 6)]
            for t in list(self.recent)[-LOG_SIZE:]
        ]
        return {"window": self.window, "master": master, "subnets": subnets, "agents": agents, "log": log}

    def restore(self, data: Any) -> None:
        """Totals from an earlier run's snapshot (rates start afresh: those transfers are old)."""
        if not isinstance(data, dict):
            return
        self.master = Totals.from_json(data.get("master"))
        for key, target in (("subnets", self.subnets), ("agents", self.agents)):
            rows = data.get(key)
            if isinstance(rows, dict):
                for name, row in rows.items():
                    target[str(name)] = Totals.from_json(row)
                    if key == "subnets" and isinstance(row, dict):
                        peak = row.get("peak_bps")
                        if isinstance(peak, int | float):
                            self.peak[str(name)] = float(peak)
                    if key == "agents" and isinstance(row, dict) and isinstance(row.get("subnet"), str):
                        self.agent_subnet[str(name)] = row["subnet"]


# ----------------------------------------------------------------------------- bulk returns


@dataclass(frozen=True)
class BulkRequest:
    """An agent's large result, announced (`bulk_ready`) and waiting to be sent."""

    agent: str
    process: int
    attempt: int
    nbytes: int
    subnet: str
    since: float
    bps: float = 0.0  # set when granted: the rate the agent sends at (0: unpaced, unlimited subnet)
    granted_at: float = math.nan  # set when granted
    due: float = math.inf  # set when granted: when the turn passes on if the result has not come

    @property
    def key(self) -> tuple[str, int, int]:
        """The run it is for: (agent, process, attempt)."""
        return (self.agent, self.process, self.attempt)


GRANT_GRACE = 60.0  # seconds a granted return may take beyond its expected time, whatever its size
GRANT_SLACK = 2.0  # times its expected time at the granted rate
GRANT_FLOOR_BPS = 10e6  # the rate an unpaced return (unlimited subnet) is expected to reach at least


def grant_due(nbytes: int, bps: float, now: float, ahead: float = 0.0) -> float:
    """When a return granted at `now` has had its time: twice what `nbytes` (at most what a
    result carries: the agent says how many) take at the granted rate (at GRANT_FLOOR_BPS if
    unpaced), plus GRANT_GRACE, after `ahead`: the seconds of paced input already queued on
    the agent's one connection, which the grant waits behind."""
    rate = bps if bps > 0 else GRANT_FLOOR_BPS
    return now + ahead + GRANT_GRACE + GRANT_SLACK * 8 * min(nbytes, MAX_RESULT_BYTES) / rate


@dataclass
class BulkReturns:
    """Large results one at a time per subnet, first come first served (issue 8 item 3).

    The seed's periodic checkpoints: serialized, they do not compete for the link and each one
    finishes sooner. A grant ends when its result arrives (`done`), its agent is gone (`forget`),
    or its time is up (`expire`, at `grant_due`): a crashed agent never keeps its subnet's turn,
    nor one that keeps the run and never sends (a hung or lying agent); such a run's result
    is still taken when it comes, but it gets no second turn. `fresh` collects the grants made
    since the last `take_grants`, which the core turns into messages to the agents.
    `rate_for_grant` (set by NetAdmit) says what rate a grant on a subnet gets now, or None when
    the subnet's limit has no room for it yet; `retry` is called when capacity frees.
    """

    waiting: dict[str, deque[BulkRequest]] = field(default_factory=dict)
    granted: dict[str, BulkRequest] = field(default_factory=dict)  # subnet -> the return under way
    fresh: list[BulkRequest] = field(default_factory=list)
    grants: int = 0
    duplicates: int = 0  # requests for a result already waiting or granted: ignored
    max_wait: float = 0.0  # longest time from request to grant (seconds)
    expired: int = 0  # grants whose time ran out before their result came
    overdue: set[tuple[str, int, int]] = field(default_factory=set)  # their runs, until done or forgotten
    rate_for_grant: Callable[[str], float | None] | None = None
    input_ahead: Callable[[str], float] | None = None  # seconds of paced input queued to an agent

    def _pending(self, agent: str, process: int, attempt: int) -> bool:
        key = (agent, process, attempt)
        queued = (r for q in self.waiting.values() for r in q)
        return key in self.overdue or any(r.key == key for r in (*queued, *self.granted.values()))

    def request(self, req: BulkRequest, now: float) -> None:
        """An agent has a large result ready: queue it behind its subnet's others and grant what
        fits. A run already waiting, granted or overdue is not queued again (`duplicates`)."""
        if self._pending(req.agent, req.process, req.attempt):
            self.duplicates += 1
            return
        self.waiting.setdefault(req.subnet, deque()).append(req)
        self._grant(req.subnet, now)

    def done(self, agent: str, process: int, now: float, attempt: int | None = None) -> None:
        """`agent`'s result for `process` (run `attempt`, if known) arrived (or will never come):
        its turn ends. With the attempt, a late copy of an earlier run's result does not end
        the turn of the process's next run on the same agent (whose return would wait for good)."""
        self._end(lambda r: r.agent == agent and r.process == process and attempt in (None, r.attempt), now)
        self.overdue = {
            k for k in self.overdue if not (k[:2] == (agent, process) and attempt in (None, k[2]))
        }

    def forget(self, agent: str, now: float) -> None:
        """The agent is gone: its requests are dropped and its grant, if any, passes on."""
        self._end(lambda r: r.agent == agent, now)
        self.fresh = [g for g in self.fresh if g.agent != agent]
        self.overdue = {k for k in self.overdue if k[0] != agent}

    def expire(self, now: float) -> list[BulkRequest]:
        """End the grants whose time is up (returned: their subnets' next ones go)."""
        late = [g for g in self.granted.values() if g.due <= now]
        for g in late:
            self.overdue.add(g.key)
            self.expired += 1
        keys = {g.key for g in late}
        if keys:
            self._end(lambda r: r.key in keys, now)
        return late

    def next_due(self) -> float | None:
        """When the earliest grant under way has had its time (None: no grant)."""
        return min((g.due for g in self.granted.values()), default=None)

    def _end(self, which: Callable[[BulkRequest], bool], now: float) -> None:
        """Drop the requests `which` picks; a grant it picks ends and its subnet's next one goes."""
        for subnet in list(self.waiting):
            kept = deque(r for r in self.waiting[subnet] if not which(r))
            if kept:
                self.waiting[subnet] = kept
            else:
                del self.waiting[subnet]
        for subnet, g in list(self.granted.items()):
            if which(g):
                del self.granted[subnet]
                self._grant(subnet, now)

    def blocked(self, subnet: str) -> bool:
        """A large return waits on `subnet` for capacity, not for another one's turn to end."""
        return subnet not in self.granted and bool(self.waiting.get(subnet))

    def retry(self, now: float) -> None:
        """Capacity may have freed: grant what waits for it."""
        for subnet in list(self.waiting):
            self._grant(subnet, now)

    def _grant(self, subnet: str, now: float) -> None:
        if subnet in self.granted or not self.waiting.get(subnet):
            return
        bps = 0.0 if self.rate_for_grant is None else self.rate_for_grant(subnet)
        if bps is None:
            return  # the subnet's limit has no room now; retry() grants it when some frees
        waiting = self.waiting[subnet].popleft()
        ahead = 0.0 if self.input_ahead is None else self.input_ahead(waiting.agent)
        req = replace(waiting, bps=bps, granted_at=now, due=grant_due(waiting.nbytes, bps, now, ahead))
        if not self.waiting[subnet]:
            del self.waiting[subnet]
        self.granted[subnet] = req
        self.fresh.append(req)
        self.grants += 1
        self.max_wait = max(self.max_wait, now - req.since)

    def take_grants(self) -> list[BulkRequest]:
        """The grants made since the last call, for the master to send."""
        out, self.fresh = self.fresh, []
        return out

    def snapshot(self) -> dict[str, Any]:
        """Grants, waits and what is under way, for the state file and `master_q -net`."""
        return {
            "grants": self.grants,
            "duplicates": self.duplicates,
            "expired": self.expired,
            "max_wait_s": round(self.max_wait, 6),
            "waiting": {s: len(q) for s, q in sorted(self.waiting.items())},
            "active": {s: f"{g.agent}:{g.process}" for s, g in sorted(self.granted.items())},
            "active_bps": {s: g.bps for s, g in sorted(self.granted.items())},
        }


# ----------------------------------------------------------------------------- admission


@dataclass(frozen=True)
class Reservation:
    """The rate an input transfer holds on its agent's subnet while it runs."""

    process: int
    agent: str
    subnet: str
    bps: float
    since: float


@dataclass
class Gate:
    """One agent's admission test for TaskBook.take; `waiting` tells the chef that a task was
    held for capacity (so it must not say no_more_tasks: it will get tasks when capacity frees)."""

    net: NetAdmit
    agent: str
    now: float
    waiting: bool = False

    def __call__(self, process: int) -> bool:
        verdict = self.net.admit(self.agent, process, self.now)
        if verdict is Verdict.HELD:
            self.waiting = True
        return verdict is Verdict.ADMITTED


class Verdict:
    """Whether a task's input transfer may start now, must wait, or should go to another subnet."""

    ADMITTED = "admitted"
    HELD = "held"  # does not fit now; will when capacity frees
    ELSEWHERE = "elsewhere"  # this agent's subnet cannot give the task's minimum rate


@dataclass
class NetAdmit:
    """The master's view of the network: agents' subnets, reservations, figures.

    `sizes`: bytes of each task's private inputs (0 or absent: nothing travels, never held);
    `min_bps`: the tasks' minimum rate (`+LlicMinMbps`), 0 for none.
    """

    capacity: Capacity = field(default_factory=Capacity)
    per_subnet: int = 4
    sizes: dict[int, int] = field(default_factory=dict)
    min_bps: float = 0.0
    stats: NetStats = field(default_factory=NetStats)
    agents: dict[str, str] = field(default_factory=dict)  # connected agent -> subnet
    reservations: dict[int, Reservation] = field(default_factory=dict)
    heads: dict[str, int] = field(default_factory=dict)  # subnet -> oldest held transfer task
    held: set[int] = field(default_factory=set)  # tasks ever held for capacity
    max_reserved: dict[str, float] = field(default_factory=dict)  # subnet -> highest sum reserved
    bulk_threshold: int = 0  # bytes of a result's files above which its return waits its turn (0: off)
    bulk: BulkReturns = field(default_factory=BulkReturns)

    def __post_init__(self) -> None:
        self.bulk.rate_for_grant = self._bulk_rate
        self.bulk.input_ahead = self._input_ahead

    def _input_ahead(self, agent: str) -> float:
        """The longest the paced inputs reserved for `agent` may still take (at their rates)."""
        mine = (r for r in self.reservations.values() if r.agent == agent and r.bps > 0)
        return sum(8 * self.sizes.get(r.process, 0) / r.bps for r in mine)

    def _bulk_rate(self, subnet: str) -> float | None:
        """A large return shares its subnet's limit with the inputs: on a limited subnet it gets
        one transfer's rate (`rate_for`), reserved while it lasts, once that fits."""
        rate = self.rate_for(subnet)
        if rate is None:
            return 0.0  # unlimited: unpaced
        total = self.reserved(subnet) + rate
        if total > self._limit_for_check(subnet) + 1e-6:
            return None
        self.max_reserved[subnet] = max(self.max_reserved.get(subnet, 0.0), total)
        return rate

    # ------------------------------------------------------------------ agents

    def connect(self, agent: str, address: str) -> str:
        """An agent connected from `address`: remember its subnet (returned)."""
        subnet = self.capacity.subnet_of(address)
        self.agents[agent] = subnet
        self.stats.agent_subnet[agent] = subnet
        return subnet

    def forget(self, agent: str, now: float = 0.0) -> None:
        """The agent is gone: its reservations end (its transfers cannot go on), and so do its
        bulk requests and grant."""
        self.agents.pop(agent, None)
        for process in [p for p, r in self.reservations.items() if r.agent == agent]:
            del self.reservations[process]
        self.bulk.forget(agent, now)

    def keep_only(self, agents: Iterable[str], now: float = 0.0) -> None:
        """Forget every agent not in `agents` (the core's running ones)."""
        keep = set(agents)
        for agent in [a for a in self.agents if a not in keep]:
            self.forget(agent, now)
        for agent in {r.agent for q in self.bulk.waiting.values() for r in q} - keep:
            self.bulk.forget(agent, now)
        for agent in {g.agent for g in self.bulk.granted.values()} - keep:
            self.bulk.forget(agent, now)
        for agent in {k[0] for k in self.bulk.overdue} - keep:
            self.bulk.forget(agent, now)

    # ------------------------------------------------------------------ bulk returns

    def bulk_ready(self, agent: str, process: int, attempt: int, nbytes: int, now: float) -> None:
        """`agent` has a large result for (process, attempt) and waits for its turn."""
        subnet = self.agents.get(agent) or self.stats.agent_subnet.get(agent, UNKNOWN_SUBNET)
        self.bulk.request(BulkRequest(agent, process, attempt, nbytes, subnet, now), now)

    def bulk_done(self, agent: str, process: int, now: float, attempt: int | None = None) -> None:
        """A large result has arrived (or its agent is gone): the next one on its subnet may go."""
        self.bulk.done(agent, process, now, attempt)

    # ------------------------------------------------------------------ figures

    @property
    def held_count(self) -> int:
        """How many tasks had to wait for capacity at least once."""
        return len(self.held)

    def limit(self, subnet: str) -> float | None:
        """The configured limit of a subnet in bits per second (None: unlimited)."""
        return self.capacity.limit_of(subnet)

    def reserved(self, subnet: str) -> float:
        """Inputs' reservations and the large return under way, if any."""
        inputs = sum(r.bps for r in self.reservations.values() if r.subnet == subnet)
        bulk = self.bulk.granted.get(subnet)
        return inputs + (bulk.bps if bulk is not None else 0.0)

    def reserved_by_subnet(self) -> dict[str, float]:
        """What inputs and large returns hold now, per subnet."""
        out: dict[str, float] = {}
        for r in self.reservations.values():
            out[r.subnet] = out.get(r.subnet, 0.0) + r.bps
        for subnet, g in self.bulk.granted.items():
            if g.bps > 0:
                out[subnet] = out.get(subnet, 0.0) + g.bps
        return out

    def spare(self, subnet: str) -> float:
        """What a subnet could still give (infinite when unlimited)."""
        limit = self.limit(subnet)
        return math.inf if limit is None else limit - self.reserved(subnet)

    def spare_of_agent(self, agent: str) -> float:
        """What the subnet of an agent could still give (infinite before it connected)."""
        subnet = self.agents.get(agent)
        return math.inf if subnet is None else self.spare(subnet)

    def rate_for(self, subnet: str) -> float | None:
        """What one transfer reserves on `subnet` (None: unlimited, not paced)."""
        limit = self.limit(subnet)
        if limit is None:
            return None
        return min(limit, max(self.min_bps, limit / self.per_subnet))

    def pace(self, process: int) -> float | None:
        """The rate the driver sends `process`'s inputs at (None: as fast as it goes)."""
        r = self.reservations.get(process)
        return None if r is None or r.bps <= 0 else r.bps

    def snapshot(self, now: float) -> dict[str, Any]:
        """Accounting, limits and reservations, for the state file and `master_q -net`."""
        out = self.stats.snapshot(now, self.reserved_by_subnet())
        for name, row in out["subnets"].items():
            row["limit_bps"] = self.limit(name)
            row["max_reserved_bps"] = self.max_reserved.get(name, 0.0)
        out["capacity"] = format_capacity(self.capacity.limits)
        out["held"] = self.held_count
        out["min_bps"] = self.min_bps
        out["bulk"] = self.bulk.snapshot() | {"threshold": self.bulk_threshold}
        return out

    # ------------------------------------------------------------------ decisions

    def _eligible(self, subnet: str) -> bool:
        limit = self.limit(subnet)
        return limit is None or limit >= self.min_bps

    def admit(self, agent: str, process: int, now: float) -> str:
        """May `process` go to `agent` now? ADMITTED reserves the rate until `release`."""
        if self.sizes.get(process, 0) <= 0:
            return Verdict.ADMITTED  # nothing travels: never held back
        subnet = self.agents.get(agent)
        if subnet is None:
            return Verdict.ADMITTED  # not connected (initial tasks travel with the agent job)
        if not self._eligible(subnet) and any(self._eligible(s) for s in self.agents.values()):
            return Verdict.ELSEWHERE  # another connected agent's subnet can give the minimum rate
        rate = self.rate_for(subnet)
        if rate is not None and any(
            r.agent == agent and r.process != process for r in self.reservations.values()
        ):
            return Verdict.HELD  # its one connection is busy with another paced transfer
        head = self.heads.get(subnet)
        if head is not None and head != process:
            return self._hold(subnet, process)
        if rate is not None and self.bulk.blocked(subnet):
            return self._hold(subnet, process)  # a finished task's large result waits for room: it goes first
        if rate is not None and self.reserved(subnet) + rate > self._limit_for_check(subnet) + 1e-6:
            return self._hold(subnet, process)
        self.release(process)
        self.reservations[process] = Reservation(process, agent, subnet, rate or 0.0, now)
        total = self.reserved(subnet)
        self.max_reserved[subnet] = max(self.max_reserved.get(subnet, 0.0), total)
        for s in [s for s, p in self.heads.items() if p == process]:
            del self.heads[s]
        return Verdict.ADMITTED

    def _limit_for_check(self, subnet: str) -> float:
        limit = self.limit(subnet)
        return math.inf if limit is None else limit

    def _hold(self, subnet: str, process: int) -> str:
        self.heads.setdefault(subnet, process)
        self.held.add(process)
        return Verdict.HELD

    def release(self, process: int, agent: str | None = None) -> None:
        """A task's input transfer is over: its reservation ends (only if `agent` holds it,
        when given: a result of another agent's says nothing of this transfer)."""
        held = self.reservations.get(process)
        if held is not None and (agent is None or held.agent == agent):
            del self.reservations[process]

    def settle(self, queued: Iterable[int]) -> None:
        """Drop heads that are no longer queued (taken elsewhere, failed for good)."""
        waiting = set(queued)
        for subnet in [s for s, p in self.heads.items() if p not in waiting]:
            del self.heads[subnet]

    def transfer_done(self, t: Transfer) -> None:
        """A transfer ended: record it (the master core ends an input's reservation with
        `release`, knowing which run it was for)."""
        self.stats.record(t)
