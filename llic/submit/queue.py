"""Queue statements: their forms and where their items come from (submit_utils.cpp:
SubmitForeachArgs::parse_queue_args, submit_expand_globs; submit.cpp: set_vars).

Every form: `queue`, `queue N`, `queue [N] [VARS] in|from|matching [files|dirs|any] [slice]
(items)`, items on the line, in a `( ... )` block over the lines that follow, or `from FILE`.
N is an integer expression. `matching` globs relative to the working directory (directories get
a trailing `/`, duplicates across patterns are dropped). An item with several variables is split
as condor_submit does (at the first `,`, space or tab; the last variable takes the rest; a
variable an item has no field for keeps its previous value).

`from CMD |` runs the command (sources.py); `from -` (standard input) is refused: a master could
not read it again.
"""

from __future__ import annotations

import enum
import glob as globmod
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llic.submit.classad_values import submit_integer
from llic.submit.lines import LogicalLines
from llic.submit.sources import SourceError, read_source
from llic.submit.values import WHITESPACE, split_list

QUEUE_ITEM_UNUSED = "<Queue_item>"  # what condor_submit leaves in the variables of a finished queue


class Foreach(enum.Enum):
    """Where a queue statement's items come from (condor's foreach mode)."""

    NOT = "not"
    IN = "in"
    FROM = "from"
    MATCHING = "matching"
    MATCHING_FILES = "matching files"
    MATCHING_DIRS = "matching dirs"
    MATCHING_ANY = "matching any"

    @property
    def is_matching(self) -> bool:
        """Whether the items are glob patterns (`matching`, with or without a qualifier)."""
        return self in (Foreach.MATCHING, Foreach.MATCHING_FILES, Foreach.MATCHING_DIRS, Foreach.MATCHING_ANY)


_FOREACH_KEYWORDS = {"in": Foreach.IN, "from": Foreach.FROM, "matching": Foreach.MATCHING}
_MATCHING_QUALIFIERS = {
    "files": Foreach.MATCHING_FILES,
    "dirs": Foreach.MATCHING_DIRS,
    "any": Foreach.MATCHING_ANY,
}


@dataclass(frozen=True)
class ItemSlice:
    """A python-style [start:end:step] over the items (condor's qslice)."""

    start: int | None = None
    end: int | None = None
    step: int | None = None
    text: str = ""

    def selected(self, ix: int, length: int) -> bool:
        """Whether item ix of length items is selected."""
        if not self.text:
            return 0 <= ix < length
        s = 0 if self.start is None else (self.start + length if self.start < 0 else self.start)
        e = length if self.end is None else (self.end + length if self.end < 0 else self.end)
        return s <= ix < e and (self.step is None or (ix - s) % self.step == 0)


@dataclass
class QueueArgs:
    """What a queue statement says: N, the item source, the variables, the items and the slice."""

    count: int = 1
    mode: Foreach = Foreach.NOT
    variables: list[str] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    items_source: str = ""  # "" (on the line), "<" (lines that follow), or a file name
    slice: ItemSlice = field(default_factory=ItemSlice)

    def selected_items(self) -> list[tuple[int, str | None]]:
        """(row, item) of each item the slice selects; one row (0, None) for a queue without items."""
        if self.mode is Foreach.NOT:
            return [(0, None)]
        length = len(self.items)
        return [(ix, it) for ix, it in enumerate(self.items) if self.slice.selected(ix, length)]


# ---------------------------------------------------------------------------------------------
# the statement


def parse_queue_args(s: str) -> QueueArgs:
    """The arguments of a queue statement, already macro-expanded. Raises ValueError."""
    qa = QueueArgs()
    s = s.lstrip(WHITESPACE)
    if not s:
        return qa
    p, ptok, mode = _token_scan(s, 0, _FOREACH_KEYWORDS, True)
    count_end = p
    if mode is not None:
        qa.mode = mode
        p = _parse_qualifiers(s, p, qa)
        _parse_items(s[p:], qa)
        assert ptok is not None
        count_end, vars_end = _variables_span(s, ptok)
        qa.variables = split_list(s[count_end:vars_end])
    count_text = s[:count_end].rstrip(WHITESPACE)
    if count_text:
        qa.count = _parse_count(count_text)
    if qa.mode is not Foreach.NOT and not qa.variables:
        qa.variables = ["Item"]
    return qa


def _token_scan(s: str, i: int, tokens: Mapping[str, Any], until_match: bool) -> tuple[int, int | None, Any]:
    """condor's queue_token_scan: (index where scanning stopped, token start, matched token id)."""
    p, tok_start, cch = i, None, 0
    while p < len(s):
        ch = s[p]
        if ch in WHITESPACE or ch == "(":
            if 1 <= cch <= 9 and tok_start is not None:
                tid = tokens.get(s[tok_start : tok_start + cch].lower())
                if tid is not None:
                    return p, tok_start, tid
            if not until_match:
                return p, tok_start, None
            cch = 0
        else:
            if not cch:
                tok_start = p
            cch += 1
        p += 1
    return p, None, None


def _parse_qualifiers(s: str, p: int, qa: QueueArgs) -> int:
    """`files`/`dirs`/`any` and a slice after the keyword at s[p]; the index where the items start."""
    while p < len(s) and s[p] in WHITESPACE:
        p += 1
    if p >= len(s) or s[p] == "(":
        return p
    while True:
        p2, ptmp, qual = _token_scan(s, p, _MATCHING_QUALIFIERS, False)
        if ptmp is not None and s[ptmp] == "[":
            sl, p2 = _parse_slice(s, ptmp)
            if sl is None:
                raise ValueError("invalid slice")
            qa.slice = sl
        elif qual is None:
            break
        elif qa.mode is Foreach.MATCHING:
            qa.mode = qual
        else:
            raise ValueError(f"unexpected keyword '{s[ptmp:p2]}'")
        if p2 == p:
            break
        p = p2
        while p < len(s) and s[p] in WHITESPACE:
            p += 1
    return p


def _parse_slice(s: str, i: int) -> tuple[ItemSlice | None, int]:
    """Parse `[x:y:z]` at s[i]; (None, i) if it is not one. Returns the index after the slice."""
    vals: list[int | None] = []
    p = i
    for k in range(3):
        val, end = _strtol(s, p + 1)
        if end >= len(s) or s[end] not in (":]" if k < 2 else "]"):
            return None, i
        vals.append(val)
        p = end
        if s[p] == "]":
            break
    vals += [None] * (3 - len(vals))
    if vals[2] is not None and vals[2] <= 0:
        raise ValueError("a slice step must be positive")
    return ItemSlice(vals[0], vals[1], vals[2], s[i : p + 1]), p + 1


def _strtol(s: str, i: int) -> tuple[int | None, int]:
    m = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)").match(s, i)
    if not m:
        return None, i
    return int(m.group(1)), m.end()


def _parse_items(rest: str, qa: QueueArgs) -> None:
    """The items on the statement's line, or where they are to be read from (qa.items_source)."""
    one_line = False
    if rest.startswith("(") and rest.endswith(")") and len(rest) > 1:
        rest, one_line = rest[1:-1], True
    if rest.startswith("("):
        first = rest[1:].lstrip(WHITESPACE)
        if first:
            qa.items = [first] if qa.mode is Foreach.FROM else split_list(first)
        qa.items_source = "<"
    elif qa.mode is Foreach.FROM:
        rest = rest.lstrip(WHITESPACE)
        if one_line:
            qa.items = [rest]
        else:
            qa.items_source = rest.strip(WHITESPACE)
    else:
        qa.items = split_list(rest)


def _is_alpha(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _variables_span(s: str, keyword_start: int) -> tuple[int, int]:
    """(start, end) of the variable names before the keyword: walk back from it over names, commas
    and blanks. What stands before the start is the count."""
    pvars = keyword_start
    while pvars > 0 and s[pvars - 1] in WHITESPACE:
        pvars -= 1
    end_vars = pvars
    if pvars > 0:
        pt = pvars
        while pt > 0:
            ch = s[pt - 1]
            if "0" <= ch <= "9":
                pt -= 1
                while pt > 0:
                    ch = s[pt - 1]
                    if _is_alpha(ch):
                        break
                    if not "0" <= ch <= "9":
                        ch = "!"
                        break
                    pt -= 1
            if ch in WHITESPACE or _is_alpha(ch) or ch in ",_.":
                pvars = pt - 1
            else:
                break
            pt -= 1
    return pvars, end_vars


def _parse_count(text: str) -> int:
    count = submit_integer(text)
    if count is None:
        raise ValueError(f"invalid queue count '{text}'")
    if count < 0 or count >= 2**31 - 1:
        raise ValueError(f"queue count {count} out of range")
    return count


# ---------------------------------------------------------------------------------------------
# the items


class QueueItemsError(Exception):
    """The items of a queue statement cannot be read; the parser adds the statement's file:line."""


def load_items(qa: QueueArgs, lines: LogicalLines, cwd: Path, environ: Mapping[str, str]) -> None:
    """Fill qa.items from where the statement says they are: the lines that follow (up to a
    line starting with `)`), a file or a command's output, and for `matching` the files the
    patterns match."""
    if qa.items_source == "<":
        _read_item_lines(qa, lines)
    elif qa.items_source:
        qa.items = _read_item_source(qa.items_source, cwd, environ)
    if qa.mode.is_matching:
        qa.items = _expand_globs(qa.items, qa.mode, cwd)


def _read_item_lines(qa: QueueArgs, lines: LogicalLines) -> None:
    while True:
        got = lines.next()
        if got is None:
            raise QueueItemsError(
                "reached the end of the file without the closing ')' of this queue statement"
            )
        text = got[1]
        if text.startswith("#"):
            continue
        if text.startswith(")"):
            break
        if qa.mode is Foreach.FROM:
            qa.items.append(text)
        else:
            qa.items.extend(split_list(text))


def _read_item_source(source: str, cwd: Path, environ: Mapping[str, str]) -> list[str]:
    """Items of `queue ... from SOURCE`: every logical line of the file or of the command's
    output (blank ones too), continuations joined."""
    if source == "-":
        raise QueueItemsError("queue from - (standard input) is not supported by llic")
    try:
        text = read_source(source, cwd, environ)
    except SourceError as e:
        raise QueueItemsError(f"cannot read queue items from {source}: {e}") from None
    lines = LogicalLines(text)
    items = []
    while (got := lines.next()) is not None:
        items.append(got[1])
    return items


def _expand_globs(patterns: list[str], mode: Foreach, cwd: Path) -> list[str]:
    """condor's submit_expand_globs: glob(3) with GLOB_MARK, each pattern sorted, duplicates dropped."""
    items: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        matches = globmod.glob(pattern, root_dir=cwd)
        found = []
        for m in matches:
            is_dir = (cwd / m).is_dir()
            if is_dir and not m.endswith("/"):
                m += "/"
            if mode is Foreach.MATCHING_FILES and is_dir:
                continue
            if mode is Foreach.MATCHING_DIRS and not is_dir:
                continue
            found.append(m)
        found.sort(key=lambda x: x.encode("utf-8", "surrogateescape"))
        for m in found:
            if m not in seen:
                items.append(m)
        seen.update(found)
    return items


def assign_item(values: dict[str, str], names: list[str], item: str) -> None:
    """condor_submit's set_vars: the first variable gets the item up to the first `,`, space or
    tab; each next one the rest after the separator and blanks; the last one all that remains;
    a variable left without a field keeps its value. `names` are lower case."""
    data = item
    values[names[0]] = data
    current = names[0]
    for name in names[1:]:
        m = re.search("[, \t]", data)
        if not m:
            break
        values[current] = data[: m.start()]
        data = data[m.end() :].lstrip(" \t")
        values[name] = data
        current = name
