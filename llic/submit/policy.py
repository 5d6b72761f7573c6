"""A job's policy attributes as condor_submit writes them into its ad (submit_utils.cpp:
SetJobRetries, SetPeriodicExpressions): what llic's master evaluates when a task exits and
periodically (llic/job_policy.py), so that `max_retries`, `success_exit_code`, `retry_until`,
`on_exit_remove`, `on_exit_hold` and the `periodic_*` commands mean what they mean to HTCondor.

- With none of `max_retries`, `success_exit_code`, `retry_until`: `OnExitRemove` and
  `OnExitHold` are the user's expressions, if any (HTCondor's defaults: remove, do not hold).
- With any of them: `JobMaxRetries` (default 2, as DEFAULT_JOB_MAX_RETRIES), `OnExitHold`
  (the user's, else false) and `OnExitRemove = NumJobCompletions > JobMaxRetries || ExitCode
  =?= <code> [|| retry_until] [|| on_exit_remove]`, where <code> is `JobSuccessExitCode` when
  `success_exit_code` is given (else 0), a `retry_until` that names no attribute and reads as an
  integer N (`7`, `1+2`, `true`) becomes `ExitCode =?= N`,
  and an expression whose top operator is `?:` is put in parentheses.
- `PeriodicHold`, `PeriodicHoldReason`, `PeriodicHoldSubCode`, `PeriodicRelease`,
  `PeriodicRemove`, `OnExitHoldReason`, `OnExitHoldSubCode`: the user's expressions, if any.
- `SubmitEventNotes`: the text the job event log's submit event carries.
Values are ClassAd expressions as written (condor_submit writes them unparsed, which changes
only white space); tests/llic/test_dryrun_condor.py compares them with condor_submit's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llic.submit.classad_syntax import top_level_conditional
from llic.submit.classad_values import submit_integer

if TYPE_CHECKING:
    from llic.submit.resolve import JobCommands

DEFAULT_JOB_MAX_RETRIES = 2

# (submit command, its alternate name, the job ad attribute): copied as they are
_COPIED = (
    ("periodic_hold", "PeriodicHold", "PeriodicHold"),
    ("periodic_hold_reason", "PeriodicHoldReason", "PeriodicHoldReason"),
    ("periodic_hold_subcode", "PeriodicHoldSubCode", "PeriodicHoldSubCode"),
    ("periodic_release", "PeriodicRelease", "PeriodicRelease"),
    ("periodic_remove", "PeriodicRemove", "PeriodicRemove"),
    ("on_exit_hold_reason", "OnExitHoldReason", "OnExitHoldReason"),
    ("on_exit_hold_subcode", "OnExitHoldSubCode", "OnExitHoldSubCode"),
    ("submit_event_notes", "SubmitEventNotes", "SubmitEventNotes"),
)


def job_policy(job: JobCommands) -> dict[str, str]:
    """The policy attributes of one job (see the module's doc), by attribute name."""
    out: dict[str, str] = {}
    for command, alt, attr in _COPIED:
        value, _ = job.param(command, alt)
        if value is not None:
            out[attr] = value
    remove, _ = job.param("on_exit_remove", "OnExitRemove")
    hold, _ = job.param("on_exit_hold", "OnExitHold")
    retries_text, _ = job.param("max_retries", "JobMaxRetries")
    success_text, _ = job.param("success_exit_code", "JobSuccessExitCode")
    retry_until, _ = job.param("retry_until")
    if retries_text is None and success_text is None and retry_until is None:
        if remove is not None:
            out["OnExitRemove"] = remove
        if hold is not None:
            out["OnExitHold"] = hold
        return out
    retries = submit_integer(retries_text) if retries_text is not None else DEFAULT_JOB_MAX_RETRIES
    out["JobMaxRetries"] = str(retries)
    out["OnExitHold"] = hold if hold is not None else "false"
    code = "0"
    if success_text is not None:
        out["JobSuccessExitCode"] = str(submit_integer(success_text))
        code = "JobSuccessExitCode"
    expr = f"NumJobCompletions > JobMaxRetries || ExitCode =?= {code}"
    if retry_until is not None:
        futility = submit_integer(retry_until) if not _references(retry_until) else None
        expr += f" || ExitCode =?= {futility}" if futility is not None else f" || {_or_operand(retry_until)}"
    if remove is not None:
        expr += f" || {_or_operand(remove)}"
    out["OnExitRemove"] = expr
    return out


def _references(expr: str) -> bool:
    """Whether expr names an attribute (a word outside string literals that is no literal)."""
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r'"(?:[^"\\]|\\.)*"', "", expr))
    return any(w.lower() not in ("true", "false", "undefined", "error") for w in words)


def _or_operand(expr: str) -> str:
    """expr as an operand of `||`: in parentheses when its top operator is `?:` (binds looser)."""
    return f"({expr})" if top_level_conditional(expr) else expr
