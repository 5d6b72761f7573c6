"""Standard Workload Format (Parallel Workloads Archive) traces for `poold simulate traces`.

Reads `.swf` or `.swf.gz` directly. Header comments (`; MaxProcs: 100`) give the machine size;
each job line has 18 numeric fields, of which we use submit time (2), run time (4), allocated (5)
and requested (8) processors, and requested time (9, the user's runtime estimate). As in the
job-exchange paper (§5.1) only the first `months` months are kept (from the first submission;
a month is 365.25/12 days), and jobs the simulation cannot run faithfully are dropped and counted
by reason: no run time, no runtime estimate (EASY needs it), no processor count, or more
processors than the site has.
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MONTH_SECONDS = 365.25 / 12 * 86_400


class SwfError(ValueError):
    """A trace that cannot be read; the message names file:line."""


@dataclass
class SwfTrace:
    """One site's jobs read from an SWF file, in submit order, and the count dropped by reason."""

    name: str  # file name without .swf/.gz
    max_procs: int | None
    max_nodes: int | None
    slots: int  # the site size used: given, else MaxProcs, else MaxNodes
    submit: list[int] = field(default_factory=list)  # seconds from the trace's first submission
    nodes: list[int] = field(default_factory=list)
    runtime: list[int] = field(default_factory=list)
    estimate: list[int] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def jobs(self) -> int:
        """How many jobs were kept."""
        return len(self.submit)


def trace_name(path: str | Path) -> str:
    """A trace's name: its file name without .gz and .swf."""
    name = Path(path).name
    for suffix in (".gz", ".swf"):
        name = name.removesuffix(suffix)
    return name


def _header_int(line: str, key: str) -> int | None:
    body = line.lstrip(";").strip()
    if not body.lower().startswith(key.lower() + ":"):
        return None
    try:
        return int(body.split(":", 1)[1].split()[0])
    except (ValueError, IndexError):
        return None


def read_swf(path: str | Path, *, slots: int | None = None, months: float | None = 11) -> SwfTrace:
    """Parse a trace; `months=None` keeps all of it. Jobs come out in submission order."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    header: dict[str, int | None] = {"MaxProcs": None, "MaxNodes": None}
    rows: list[tuple[int, int, int, int]] = []
    dropped: Counter[str] = Counter()
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if line.startswith(";"):
                    for key in header:
                        value = _header_int(line, key)
                        if value is not None and header[key] is None:
                            header[key] = value
                    continue
                fields = line.split()
                if not fields:
                    continue
                if len(fields) < 9:
                    raise SwfError(f"{path}:{lineno}: expected 18 fields, got {len(fields)}")
                try:
                    submit = int(float(fields[1]))
                    run = int(float(fields[3]))
                    allocated = int(float(fields[4]))
                    requested = int(float(fields[7]))
                    estimate = int(float(fields[8]))
                except ValueError:
                    raise SwfError(f"{path}:{lineno}: not a number in {line.strip()!r}") from None
                rows.append((submit, requested if requested > 0 else allocated, run, estimate))
    except OSError as e:
        raise SwfError(f"{path}: cannot read: {e.strerror or e}") from None
    size = slots or header["MaxProcs"] or header["MaxNodes"]
    if size is None or size < 1:
        raise SwfError(f"{path}: no MaxProcs/MaxNodes in the header: give the site size as FILE:SLOTS")
    trace = SwfTrace(trace_name(path), header["MaxProcs"], header["MaxNodes"], size)
    rows.sort(key=lambda r: r[0])  # stable: ties keep file order
    first = rows[0][0] if rows else 0
    limit = None if months is None else months * MONTH_SECONDS
    for submit, nodes, run, estimate in rows:
        t = submit - first
        if limit is not None and t >= limit:
            dropped["after_cutoff"] += 1
        elif run < 0:
            dropped["no_runtime"] += 1
        elif estimate <= 0:
            dropped["no_estimate"] += 1
        elif nodes <= 0:
            dropped["no_processors"] += 1
        elif nodes > size:
            dropped["too_wide"] += 1
        else:
            trace.submit.append(t)
            trace.nodes.append(nodes)
            trace.runtime.append(min(run, estimate))
            trace.estimate.append(estimate)
    trace.dropped = dropped
    return trace
