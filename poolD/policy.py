"""The Policy Manager: who may share with whom.

A policy file is TOML: an ordered list of rules, the first matching rule wins, `default` decides
when none matches. A rule matches when every criterion it names matches (pool name globs, host
name globs such as "*.example.org", CIDR networks of the central manager's address); a rule may
apply to what we announce, to what we accept, or both. Pools that announced free slots but left
our flocked jobs idle are blacklisted for a while, ahead of every rule. Each decision carries the
rule that made it, for the log and `poold status`.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from common.condor.knobs import check_host_grant
from common.config import StrictModel, load_config

MAX_REMEMBERED = 100_000  # rule decisions kept; far more than a federation has pools and hosts


class Direction(StrEnum):
    """What a decision is about: our offers to a pool, or accepting its offers (and jobs)."""

    ANNOUNCE = "announce"  # whom we announce our free slots to
    ACCEPT = "accept"  # whose announcements (and flocked jobs) we accept


class Rule(StrictModel):
    """One `[[rule]]` of a policy file: allow or deny subjects that match every criterion it names."""

    action: Literal["allow", "deny"]
    pools: list[str] = Field(default_factory=list, description="globs on pool names")
    hosts: list[str] = Field(default_factory=list, description="globs on central-manager host names")
    networks: list[str] = Field(default_factory=list, description="CIDR blocks")
    direction: Literal["both", "announce", "accept"] = "both"
    schedd_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "what FLOCK_FROM may let in for pools this rule accepts: hosts, CIDR blocks, '*.domain' "
            "or 'a.b.*' globs; a schedd host a pool names must fall under one (a glob or block "
            "itself only if named exactly). Empty: any single host (never a glob)"
        ),
    )
    comment: str = ""

    @field_validator("schedd_hosts")
    @classmethod
    def _grants(cls, value: list[str]) -> list[str]:
        for grant in value:
            check_host_grant(grant)  # raises ValueError naming the bad entry
        return value

    @field_validator("networks")
    @classmethod
    def _cidr(cls, value: list[str]) -> list[str]:
        for net in value:
            ipaddress.ip_network(net, strict=False)  # raises ValueError naming the bad block
        return value

    def describe(self, index: int) -> str:
        """The rule as decisions cite it: its 1-based position, action, criteria and comment."""
        parts = [
            f"{k}={','.join(v)}"
            for k, v in (("pools", self.pools), ("hosts", self.hosts), ("networks", self.networks))
            if v
        ]
        text = f"rule {index} ({self.action} {' '.join(parts) or 'all'}"
        return text + (f"; {self.comment})" if self.comment else ")")


class PolicyFile(StrictModel):
    """A policy file's contents (TOML): the rules in order and the default when none matches."""

    default: Literal["allow", "deny"] = "deny"
    rule: list[Rule] = Field(default_factory=list)


@dataclass(frozen=True)
class Subject:
    """Who a decision is about: a pool name (if known) and its central manager's host."""

    pool: str | None
    host: str


@dataclass(frozen=True)
class Decision:
    """A policy answer and what gave it (a rule, the default or the blacklist), for the log."""

    allowed: bool
    rule: str
    schedd_hosts: tuple[str, ...] = ()  # the rule's grants for FLOCK_FROM (empty: single hosts)


class Policy:
    """A loaded policy file plus the blacklist: answers whether a pool may share with us."""

    def __init__(self, spec: PolicyFile, source: str = "(built-in)") -> None:
        self.spec = spec
        self.source = source
        self._networks = [[ipaddress.ip_network(n, strict=False) for n in r.networks] for r in spec.rule]
        self.blacklist: dict[str, tuple[float, str]] = {}  # pool -> (until, reason)
        # The rules never change after loading (a reload builds a new Policy), so a rule decision
        # depends only on (pool, host, direction); remembered because discovery asks the same
        # questions every interval, and `poold simulate paper` millions of times.
        self._decided: dict[tuple[str | None, str, Direction], Decision] = {}

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """The policy in a TOML file; ConfigError names the file and key."""
        return cls(load_config(path, PolicyFile), str(path))

    @classmethod
    def allow_all(cls) -> Policy:
        """The policy without a file: every pool may share with us, both ways."""
        return cls(PolicyFile(default="allow"))

    def decide(self, subject: Subject, direction: Direction, now: float) -> Decision:
        """Whether `subject` is allowed in `direction`; a blacklisted pool is refused ahead of every rule."""
        if subject.pool is not None:
            listed = self.blacklist.get(subject.pool)
            if listed is not None:
                if listed[0] > now:
                    return Decision(False, f"blacklist ({listed[1]}) until t={listed[0]:.0f}")
                del self.blacklist[subject.pool]
        key = (subject.pool, subject.host, direction)
        decision = self._decided.get(key)
        if decision is None:
            if len(self._decided) >= MAX_REMEMBERED:
                self._decided.clear()
            decision = self._decided[key] = self._by_rules(subject, direction)
        return decision

    def _by_rules(self, subject: Subject, direction: Direction) -> Decision:
        for index, (rule, networks) in enumerate(zip(self.spec.rule, self._networks, strict=True), 1):
            if rule.direction not in ("both", direction.value):
                continue
            if self._matches(rule, networks, subject):
                allowed = rule.action == "allow"
                grants = tuple(rule.schedd_hosts) if allowed else ()
                return Decision(allowed, f"{self.source}: {rule.describe(index)}", grants)
        return Decision(self.spec.default == "allow", f"{self.source}: default {self.spec.default}")

    @staticmethod
    def _matches(rule: Rule, networks: list, subject: Subject) -> bool:
        if rule.pools and not (
            subject.pool and any(fnmatch.fnmatchcase(subject.pool, g) for g in rule.pools)
        ):
            return False
        host = subject.host.lower()
        if rule.hosts and not any(fnmatch.fnmatchcase(host, g.lower()) for g in rule.hosts):
            return False
        if networks:
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                return False  # a name, not an address: CIDR rules cannot match it
            if not any(address in net for net in networks):
                return False
        return True

    def add_to_blacklist(self, pool: str, until: float, reason: str) -> None:
        """Refuse `pool` in both directions until `until`, whatever the rules say."""
        self.blacklist[pool] = (until, reason)
