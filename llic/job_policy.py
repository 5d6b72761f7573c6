"""The submit file's job policy evaluated as HTCondor evaluates it: `ClassAdPolicy`, the
llic/task_policy.py TaskPolicy of a master whose tasks carry policy attributes.

Each task's ad is its policy attributes (Task.policy: OnExitRemove, PeriodicHold...), the
submit file's `+Attr`/`MY.Attr` attributes, and the facts the master knows (JobFacts: JobStatus,
NumJobStarts, NumJobCompletions, ExitCode, ExitBySignal, ExitSignal, QDate,
EnteredCurrentStatus, CurrentTime, JobCurrentStartDate, RemoteWallClockTime, HoldReasonCode
...); attributes llic cannot know (MemoryUsage, RemoteHost...) are undefined, so an
expression over them never fires, as an undefined one never fires in HTCondor. It is evaluated
with HTCondor's own ClassAd library (classad2, which the master may import; the agent may not).
`time()` in an expression reads the real clock, which is the master's clock, as `now` is.

Tasks with the same attributes share one ad (a 100,000-task master keeps a handful), into which
the facts are written before each evaluation; a master whose tasks carry no policy at all uses
DefaultPolicy and never loads classad2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import classad2

from llic.task import Task
from llic.task_policy import (
    DONE,
    EXPRESSIONS,
    HELD,
    HOLD_JOB_POLICY,
    HOLD_USER_REQUEST,
    RUNNING,
    Decision,
    DefaultPolicy,
    JobFacts,
    TaskPolicy,
    Verdict,
)

_PERIODIC = ("PeriodicHold", "PeriodicRelease", "PeriodicRemove")


class _Ad:
    """One shared ad: a set of policy attributes and the submit file's job attributes."""

    def __init__(self, attributes: Mapping[str, str]) -> None:
        self.texts = dict(attributes)
        self.ad = classad2.ClassAd()
        for name, text in attributes.items():
            self.ad[name] = classad2.ExprTree(text)

    def fill(self, facts: JobFacts) -> None:
        ad = self.ad
        ad["ClusterId"] = facts.cluster
        ad["ProcId"] = facts.process
        ad["JobStatus"] = facts.status
        ad["JobUniverse"] = 5
        ad["NumJobStarts"] = facts.starts
        ad["JobRunCount"] = facts.starts
        ad["NumJobCompletions"] = facts.completions
        ad["QDate"] = int(facts.qdate)
        ad["EnteredCurrentStatus"] = int(facts.entered)
        ad["CurrentTime"] = int(facts.now)
        ad["ServerTime"] = int(facts.now)
        ad["RemoteWallClockTime"] = float(facts.wall_clock)
        ad["HoldReasonCode"] = facts.hold_code
        ad["HoldReasonSubCode"] = facts.hold_subcode
        for name in ("JobCurrentStartDate", "ExitCode", "ExitSignal", "ExitBySignal"):
            if name in ad:
                del ad[name]
        if facts.run_started is not None:
            ad["JobCurrentStartDate"] = int(facts.run_started)
        if facts.exit_code is not None:
            ad["ExitCode"] = facts.exit_code
            ad["ExitBySignal"] = False
        if facts.exit_signal is not None:
            ad["ExitSignal"] = facts.exit_signal
            ad["ExitBySignal"] = True

    def fires(self, name: str) -> bool:
        """condor's AnalyzeSinglePeriodicPolicy: a number (or boolean) other than 0."""
        if name not in self.texts:
            return False
        value = self._eval(name)
        return type(value) in (bool, int, float) and value != 0

    def is_false(self, name: str) -> bool:
        """OnExitRemove's test: it evaluates to a number (or boolean) equal to 0."""
        if name not in self.texts:
            return False
        value = self._eval(name)
        return type(value) in (bool, int, float) and value == 0

    def decision(self, verdict: Verdict, name: str, code: int = HOLD_JOB_POLICY) -> Decision:
        """condor's FiringReason: `<name>Reason` and `<name>SubCode` when they evaluate to a
        string and a number, else the expression that fired."""
        reason = self._eval(name + "Reason") if name + "Reason" in self.texts else None
        if type(reason) is not str or not reason:
            reason = f"The job attribute {name} expression '{self.texts[name]}' evaluated to TRUE"
        subcode = self._eval(name + "SubCode") if name + "SubCode" in self.texts else 0
        return Decision(verdict, reason, code, int(subcode) if type(subcode) in (int, float, bool) else 0)

    def _eval(self, name: str) -> Any:
        try:
            return self.ad.eval(name)
        except (KeyError, classad2.ClassAdException, ValueError, RuntimeError):
            return None


class ClassAdPolicy:
    """TaskPolicy over each task's policy attributes (see the module's doc)."""

    def __init__(self, policies: Mapping[int, Mapping[str, str]], job_attributes: Mapping[str, str]) -> None:
        self._ads: dict[tuple[tuple[str, str], ...], _Ad] = {}
        self._of: dict[int, _Ad] = {}  # when the tasks' attributes differ
        self._all: _Ad | None = None  # when they are the same for every task
        extra = _parsable({name[3:]: text for name, text in job_attributes.items()})
        for process, attributes in policies.items():
            key = tuple(sorted(attributes.items()))
            ad = self._ads.get(key)
            if ad is None:
                ad = self._ads[key] = _Ad({**extra, **attributes})
            self._of[process] = ad
        if len(self._ads) == 1:
            self._all, self._of = next(iter(self._ads.values())), {}
        self._periodic = any(any(p in ad.texts for p in _PERIODIC) for ad in self._ads.values())

    def has_periodic(self) -> bool:
        """Whether some task has a PeriodicHold, PeriodicRelease or PeriodicRemove."""
        return self._periodic

    def may_requeue(self) -> bool:
        """Whether some task has an OnExitRemove (max_retries and the like)."""
        return any("OnExitRemove" in ad.texts for ad in self._ads.values())

    def _ad(self, process: int) -> _Ad | None:
        return self._all if self._all is not None else self._of.get(process)

    def on_exit(self, facts: JobFacts) -> Decision:
        """condor's AnalyzePolicy(PERIODIC_THEN_EXIT) for a run that ended."""
        ad = self._ad(facts.process)
        if ad is None:
            return DONE
        ad.fill(facts)
        periodic = self._periodic_of(ad, RUNNING, facts.hold_code)
        if periodic is not None and periodic.verdict is not Verdict.RELEASE:
            return periodic
        if ad.fires("OnExitHold"):
            return ad.decision(Verdict.HOLD, "OnExitHold")
        if ad.is_false("OnExitRemove"):
            return Decision(Verdict.REQUEUE)
        return DONE

    def periodic(self, facts: JobFacts) -> Decision | None:
        """condor's AnalyzePolicy(PERIODIC_ONLY)."""
        ad = self._ad(facts.process)
        if ad is None:
            return None
        ad.fill(facts)
        return self._periodic_of(ad, facts.status, facts.hold_code)

    @staticmethod
    def _periodic_of(ad: _Ad, status: int, hold_code: int) -> Decision | None:
        if status != HELD and ad.fires("PeriodicHold"):
            return ad.decision(Verdict.HOLD, "PeriodicHold")
        if status == HELD and hold_code != HOLD_USER_REQUEST and ad.fires("PeriodicRelease"):
            return ad.decision(Verdict.RELEASE, "PeriodicRelease", code=0)
        if ad.fires("PeriodicRemove"):
            return ad.decision(Verdict.REMOVE, "PeriodicRemove", code=0)
        return None


def _parsable(attributes: Mapping[str, str]) -> dict[str, str]:
    """The job attributes that are ClassAd expressions (the others cannot be referred to)."""
    out = {}
    for name, text in attributes.items():
        try:
            classad2.ExprTree(text)
        except (classad2.ClassAdException, ValueError, RuntimeError):
            continue
        out[name] = text
    return out


def task_policy(specs: Iterable[Task], job_attributes: Mapping[str, str]) -> TaskPolicy:
    """The policy of a master's tasks: DefaultPolicy when none carries policy attributes (every
    task must carry the same ones then, or a task without any would be judged by another's)."""
    policies = {}
    for spec in specs:
        attributes = {k: v for k, v in spec.policy.items() if k in EXPRESSIONS}
        policies[spec.process] = attributes
    if not any(policies.values()):
        return DefaultPolicy()
    my = {k: v for k, v in job_attributes.items() if k.lower().startswith("my.")}
    return ClassAdPolicy(policies, my)
