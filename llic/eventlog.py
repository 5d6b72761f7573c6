"""The job event log (the submit file's `log`) in HTCondor's text format, so that
`htcondor2.JobEventLog`, `condor_wait` and DAG-less scripts read llic's tasks as they read jobs
(condor_event.cpp, ULogEvent::formatHeader and each event's formatBody, 23.9).

Each event is `NNN (CLUSTER.PROC.000) YYYY-MM-DD HH:MM:SS <body>` and a line `...`; a task is
`cluster.process` with the master's cluster id and the task's process number, as condor_submit
would number the job. Events written:

- 000 submitted (master_submitter, once the master's cluster is known: `Job submitted from host`);
- 001 executing (handed to a running agent: `Job executing on host: <address>`);
- 004 evicted: a run that ended and runs again by the job's policy (`(0) Job terminated and was
  requeued`, with its exit code or signal), or a run lost with its agent or that could not start;
- 005 terminated (`(1) Normal termination (return value N)` or `(0) Abnormal termination (signal
  N)`): the task left the queue;
- 009 aborted (removed, or failed for good), 012 held (reason, code, subcode), 013 released.

`append_events` opens each log once per batch, appends and closes it (events of one master are
written by one process); llic does not lock the file, so two masters must not share a log (they
do not: one master per queue statement, and HTCondor's own locking is not available).

Every text an event carries (a reason, a host, the submit notes) passes `_one_line` (control
characters escaped, as common.events.printable does): a reader takes it as one line of the
event's body, and a line `...` ends an event, so an agent's error with newlines in it would
otherwise end the event and forge others (a `terminated, return value 0` for a task that never
ran, which condor_wait and DAGMan believe).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from common.events import printable
from llic.task import TaskResult
from llic.taskbook import EventKind, TaskEvent

SUBMIT = 0
EXECUTE = 1
EVICTED = 4
TERMINATED = 5
ABORTED = 9
HELD = 12
RELEASED = 13

_USAGE = "\t\tUsr 0 00:00:00, Sys 0 00:00:00"
TEXT_KEEP = 1000  # characters of one text (a reason, a host) an event keeps
NOTES_KEEP = 8191  # characters of the submit notes (submit_event_notes) the submitted event keeps


def _one_line(text: str, keep: int = TEXT_KEEP) -> str:
    """`text` as one printable line of at most `keep` characters (common.events.printable: a
    newline becomes `\\n`): it stays one line of its event, whoever wrote it (the agent's
    error, a policy's reason), and one event stays small."""
    return printable(text, keep)


def _header(number: int, cluster: int, process: int, when: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    return f"{number:03d} ({cluster:03d}.{process:03d}.000) {stamp} "


def _usage(*what: str) -> str:
    return "".join(f"{_USAGE}  -  {w}\n" for w in what)


def _termination(result: TaskResult | None) -> str:
    if result is not None and result.signal is not None:
        return f"\t(0) Abnormal termination (signal {result.signal})\n\t(0) No core file\n"
    code = result.exit_code if result is not None and result.exit_code is not None else 0
    return f"\t(1) Normal termination (return value {code})\n"


def submit_event(cluster: int, process: int, when: float, host: str, notes: str = "") -> str:
    """000: the job was submitted (by master_submitter)."""
    text = _header(SUBMIT, cluster, process, when) + f"Job submitted from host: {host}\n"
    if notes:
        text += f"    {_one_line(notes, NOTES_KEEP)}\n"
    return text + "...\n"


def format_event(cluster: int, event: TaskEvent) -> str:
    """One task event as HTCondor writes it."""
    p, when, kind = event.process, event.time, event.kind
    if kind is EventKind.EXECUTE:
        host = _one_line(event.reason) or "unknown"
        return _header(EXECUTE, cluster, p, when) + f"Job executing on host: <{host}:0>\n...\n"
    if kind is EventKind.TERMINATED:
        return (
            _header(TERMINATED, cluster, p, when)
            + "Job terminated.\n"
            + _termination(event.result)
            + _usage("Run Remote Usage", "Run Local Usage", "Total Remote Usage", "Total Local Usage")
            + "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
            + "\t0  -  Total Bytes Sent By Job\n\t0  -  Total Bytes Received By Job\n...\n"
        )
    if kind in (EventKind.REQUEUED, EventKind.EVICTED):
        requeued = kind is EventKind.REQUEUED
        text = _header(EVICTED, cluster, p, when) + "Job was evicted.\n"
        text += "\t(0) Job terminated and was requeued\n" if requeued else "\t(0) CPU times\n"
        text += _usage("Run Remote Usage", "Run Local Usage")
        text += "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n"
        if requeued:
            text += _termination(event.result)
        if event.reason:
            text += f"\t{_one_line(event.reason)}\n"
        return text + "...\n"
    if kind is EventKind.HELD:
        reason = _one_line(event.reason) or "Reason unspecified"
        return (
            _header(HELD, cluster, p, when)
            + f"Job was held.\n\t{reason}\n\tCode {event.code} Subcode {event.subcode}\n...\n"
        )
    if kind is EventKind.RELEASED:
        reason = f"\t{_one_line(event.reason)}\n" if event.reason else ""
        return _header(RELEASED, cluster, p, when) + f"Job was released.\n{reason}...\n"
    reason = f"\t{_one_line(event.reason)}\n" if event.reason else ""
    return _header(ABORTED, cluster, p, when) + f"Job was aborted.\n{reason}...\n"


def append_events(texts: Mapping[str, Iterable[str]]) -> list[str]:
    """Append each log's events (path -> event texts, in order); the logs that could not be
    written, with why (the tasks go on: a log is no reason to lose a result)."""
    problems = []
    for path, events in texts.items():
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as log:
                log.write("".join(events))
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
    return problems


def log_path(initialdir: str, log: str) -> str:
    """Where a task's log is: `log` as submitted, relative to its initialdir unless absolute."""
    return log if os.path.isabs(log) else os.path.join(initialdir, log)
