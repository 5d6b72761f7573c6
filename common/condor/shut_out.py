"""Which ads in our collector and which claims on our startds belong to another pool's schedds,
when poold shuts that pool out (issue 15: a revoked pool must stop running jobs here at once).

FLOCK_FROM decides only who may advertise and be let in from now on: a schedd that already
holds a claim on one of our startds reuses it for its next job, and its submitter ads stay in
our collector until they expire. The gateway's worker therefore takes the pool's schedd and
submitter ads out of the collector and vacates, slot by slot, the claims its schedds hold. This
module is the pure part: from the ads the worker read, which to invalidate and which slots to
vacate. Our own schedds are never touched, whatever host list arrives: the core leaves them out,
and this module checks again against the schedds at home in our collector.

Pure string work on plain ads (dicts of attribute values), no bindings: unit-tested alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.condor.address import sinful_host
from common.condor.knobs import grant_covers

MAX_TARGETS = 10_000  # ads or slots acted on in one call: bounded whatever the collector holds

# What the worker reads of each ad (and the identifying part it invalidates by).
SCHEDD_ATTRS = ("Name", "MyAddress", "Machine", "ScheddIpAddr", "CollectorHost")
SUBMITTER_ATTRS = ("Name", "ScheddName", "MyAddress", "Machine", "ScheddIpAddr")
SLOT_ATTRS = ("Name", "MyAddress", "Machine", "ClientMachine", "RemoteScheddName", "State")
SCHEDD_KEY = ("Name", "MyAddress")
SUBMITTER_KEY = ("Name", "ScheddName", "MyAddress")

Ad = Mapping[str, Any]


def name_host(name: Any) -> str | None:
    """The host in a daemon name: 'schedd@host' -> 'host', 'host' -> 'host'."""
    if not isinstance(name, str) or not name.strip():
        return None
    return name.strip().rpartition("@")[2] or None


def _hosts(*values: Any) -> set[str]:
    return {v.strip().lower() for v in values if isinstance(v, str) and v.strip()}


def schedd_hosts(ad: Ad) -> set[str]:
    """Every host a schedd (or submitter) ad names: its Machine, the host of its addresses and of
    its schedd's name."""
    return _hosts(
        ad.get("Machine"),
        sinful_host(ad.get("MyAddress")),
        sinful_host(ad.get("ScheddIpAddr")),
        name_host(ad.get("ScheddName")),
    )


def claim_hosts(slot: Ad) -> set[str]:
    """The hosts of the schedd that holds a slot's claim (ClientMachine, RemoteScheddName)."""
    return _hosts(slot.get("ClientMachine"), name_host(slot.get("RemoteScheddName")))


def _covered(hosts: set[str], targets: Iterable[str]) -> bool:
    return any(grant_covers(t, h) for t in targets for h in hosts)


@dataclass
class ShutOutPlan:
    """What to do: the host entries acted on, those refused (our own schedds' hosts), the
    identifying attributes of the ads to invalidate, and the slots to vacate (Name, MyAddress)."""

    targets: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    schedd_ads: list[dict[str, str]] = field(default_factory=list)
    submitter_ads: list[dict[str, str]] = field(default_factory=list)
    slots: list[dict[str, str]] = field(default_factory=list)


def plan_shut_out(
    hosts: Iterable[str],
    own_schedds: Iterable[Ad],
    foreign_schedds: Iterable[Ad],
    submitters: Iterable[Ad],
    slots: Iterable[Ad],
) -> ShutOutPlan:
    """The ads and claims of the schedds on `hosts` (host names, addresses, or globs/blocks a
    policy granted), never of our own schedds (`own_schedds`: the schedd ads at home in our
    collector): a host entry naming one of them is refused, and an ad or claim naming one of
    their hosts is left alone even when another entry covers it."""
    own: set[str] = set()
    for ad in own_schedds:
        own |= schedd_hosts(ad) | _hosts(name_host(ad.get("Name")))
    plan = ShutOutPlan()
    for entry in dict.fromkeys(h.strip().lower() for h in hosts if isinstance(h, str) and h.strip()):
        (plan.refused if entry in own else plan.targets).append(entry)
    if not plan.targets:
        return plan

    def foreign(found: set[str]) -> bool:
        return bool(found) and found.isdisjoint(own) and _covered(found, plan.targets)

    for ad in foreign_schedds:
        if foreign(schedd_hosts(ad)) and _has(ad, ("Name",)):
            plan.schedd_ads.append(_key(ad, SCHEDD_KEY))
    for ad in submitters:
        if foreign(schedd_hosts(ad)) and _has(ad, ("Name",)):
            plan.submitter_ads.append(_key(ad, SUBMITTER_KEY))
    for slot in slots:
        if foreign(claim_hosts(slot)) and _has(slot, ("Name", "MyAddress")):
            plan.slots.append(_key(slot, ("Name", "MyAddress")))
    plan.schedd_ads = plan.schedd_ads[:MAX_TARGETS]
    plan.submitter_ads = plan.submitter_ads[:MAX_TARGETS]
    plan.slots = plan.slots[:MAX_TARGETS]
    return plan


def _has(ad: Ad, attrs: tuple[str, ...]) -> bool:
    """Whether the ad has these attributes, as non-empty strings (what names it to act on it)."""
    return all(isinstance(ad.get(a), str) and ad.get(a) for a in attrs)


def _key(ad: Ad, attrs: tuple[str, ...]) -> dict[str, str]:
    """The identifying attributes the ad has: an invalidation matches exactly those values."""
    return {a: str(ad[a]) for a in attrs if isinstance(ad.get(a), str) and ad.get(a)}
