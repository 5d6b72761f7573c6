"""Macros: the table of a submit file's commands and built-in values, and `$(...)` expansion
(condor's config.cpp: next_config_macro, expand_macro, expand_self_macro).

Expansion is lazy, as in condor_submit: a command's value is stored raw and expanded when a job
uses it, against a lookup that sees that job's queue variables and built-in macros first, then
the commands, then the built-ins shared by every job. `$(X)`, `$(X:default)` (the default when X
is undefined or empty), `$(DOLLAR)`; `$$(X)` is left for HTCondor. A self reference
(`X = $(X) more`) is expanded when the line is read (`Expander.expand(..., self_name=...)`).
The functions (`$ENV()`, `$F...()`, `$INT()`, ...) are in macro_functions.py.
"""

from __future__ import annotations

import platform
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from llic.submit.errors import ExpandError
from llic.submit.macro_functions import FUNCTIONS

Lookup = Callable[[str], str | None]
"""A macro's raw value by name (any case), None when undefined."""

_MAX_EXPANSIONS = 100_000

# the functions condor recognises, by how they are written; one missing from FUNCTIONS is refused
_FUNCTION_KINDS = {
    "$ENV": "ENV",
    "$RANDOM_CHOICE": "RANDOM_CHOICE",
    "$RANDOM_INTEGER": "RANDOM_INTEGER",
    "$CHOICE": "CHOICE",
    "$SUBSTR": "SUBSTR",
    "$INT": "INT",
    "$REAL": "REAL",
    "$STRING": "STRING",
    "$EVAL": "EVAL",
    "$BASENAME": "BASENAME",
    "$DIRNAME": "DIRNAME",
}
_COLON_EXTRA = "$ ,\\:"
_PREFIX_RE = re.compile(r"\$\$?[A-Za-z0-9_]*")  # "$" or "$$", then what may name a function
_SIMPLE_BODY_RE = re.compile(r"[A-Za-z0-9_./]*(?=\))")
_DOLLAR_RE = re.compile(r"\$\(DOLLAR\)", re.IGNORECASE)


@dataclass(frozen=True)
class Macro:
    """One submit command as the table holds it."""

    name: str  # as first written
    value: str  # raw, self references already expanded
    line: int  # where it was last set (0: by llic)


@dataclass
class MacroReference:
    """One `$...(...)` found in a text: `kind` is NORMAL for `$(X)`, FILENAME for `$F...()`, else
    the function's name in capitals."""

    kind: str
    func: str  # the prefix without "$"
    start: int  # index of "$"
    body: str
    end: int  # index after ")"


def is_identifier_char(c: str) -> bool:
    """Whether c may stand in a macro name (condor's ISIDCHAR)."""
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c in "_./"


def _classify_prefix(prefix: str) -> tuple[str | None, bool]:
    """(kind, body is identifier-with-default) for the text between `$` and `(`; kind None: no macro."""
    if prefix == "$":
        return "NORMAL", True
    if len(prefix) > 1 and prefix[1] == "$":
        return None, False
    if prefix[1] == "F" and all(c.lower() in "pnxdqabfwu" for c in prefix[2:]):
        return "FILENAME", False
    kind = _FUNCTION_KINDS.get(prefix)
    return kind, kind == "ENV"


def _default_body_end(text: str, body_start: int) -> int | None:
    """Where the body of a `$(NAME:default)` or `$ENV(NAME:default)` ends (at its `)`, or the end
    of text); None when the name holds a character a name cannot. The default may hold
    `$ ,\\:` and parenthesised text."""
    n = len(text)
    q = body_start
    after_colon = False
    while q < n and text[q] != ")":
        c = text[q]
        q += 1
        if c == ":" and not after_colon:
            after_colon = True
            continue
        if after_colon:
            if c == "(":
                close = text.find(")", q)
                if close >= 0:
                    q = close + 1
                    continue
            elif c in _COLON_EXTRA:
                continue
        if not is_identifier_char(c):
            return None
    return q


def next_reference(text: str, pos: int, skip: Callable[[str, str], bool]) -> MacroReference | None:
    """The next macro reference at or after pos that `skip(kind, body)` does not reject."""
    n = len(text)
    while True:
        d = text.find("$", pos)
        if d < 0:
            return None
        p = _PREFIX_RE.match(text, d).end()
        kind, idcolon = _classify_prefix(text[d:p]) if p < n and text[p] == "(" else (None, False)
        if kind is None:  # no "$prefix(" with a prefix condor knows
            pos = p
            continue
        body_start = p + 1
        if not idcolon:
            q = text.find(")", body_start)
            q = n if q < 0 else q
        elif (simple := _SIMPLE_BODY_RE.match(text, body_start)) is not None:
            q = simple.end()  # the common case, $(NAME): no default to scan
        else:
            found_end = _default_body_end(text, body_start)
            if found_end is None:
                pos = body_start
                continue
            q = found_end
        if q < n and text[q] == ")":
            body = text[body_start:q]
            if skip(kind, body):
                pos = q
                continue
            return MacroReference(kind, text[d + 1 : p], d, body, q + 1)
        pos = body_start


class Expander:
    """Expands macro references against one set of macros (a lookup function) and an environment."""

    def __init__(self, lookup: Lookup, environ: Mapping[str, str], cwd: str | None = None) -> None:
        self.lookup = lookup
        self.environ = environ
        self.cwd = cwd  # what `$Ff()` makes relative names absolute with (condor's mctx.cwd)
        self._count = 0

    def expand(self, text: str, *, self_name: str | None = None) -> str:
        """condor's expand_macro (or expand_self_macro when self_name is given)."""
        if "$" not in text:
            return text
        if self_name is None:

            def skip(kind: str, body: str) -> bool:
                return kind == "NORMAL" and body.upper() == "DOLLAR"

        else:
            low = self_name.lower()

            def skip(kind: str, body: str) -> bool:
                if kind not in ("NORMAL", "FILENAME"):
                    return True
                return body.lower() != low and not body.lower().startswith(low + ":")

        while True:
            found = next_reference(text, 0, skip)
            if found is None:
                break
            self._count += 1
            if self._count > _MAX_EXPANSIONS or len(text) > 1_000_000:
                raise ExpandError("macro expansion does not end (a macro refers to itself?)")
            text = text[: found.start] + self._evaluate(found) + text[found.end :]
        if self_name is None and _DOLLAR_RE.search(text):
            while True:
                found = next_reference(
                    text, 0, lambda kind, body: not (kind == "NORMAL" and body.upper() == "DOLLAR")
                )
                if found is None:
                    break
                text = text[: found.start] + "$" + text[found.end :]
        return text

    def lookup_expanded(self, name: str) -> str:
        """The expanded value of macro `name`, or `name` itself (expanded) when it is no macro:
        how a macro function reads an argument."""
        mval = self.lookup(name)
        if mval is None:
            mval = name
        return self.expand(mval) if "$" in mval else mval

    def _evaluate(self, ref: MacroReference) -> str:
        if ref.kind == "NORMAL":
            name, colon, default = ref.body.partition(":")
            value = self.lookup(name)
            if colon and not value:
                return default
            return value or ""
        function = FUNCTIONS.get(ref.kind)
        if function is None:
            raise ExpandError(f"${ref.func}() is not supported by llic")
        return function(self, ref)


# ---------------------------------------------------------------------------------------------
# the table a job's values are looked up in

_ARCH = {"x86_64": "X86_64", "amd64": "X86_64", "i686": "INTEL", "i386": "INTEL", "aarch64": "aarch64"}
# built-in macros that come from the submit machine's HTCondor configuration
CONFIG_MACROS = {"opsysver", "opsysandver", "opsysmajorver", "spool"}


def macro_lookup(
    commands: Mapping[str, Macro],
    live: Mapping[str, str],
    *builtins: Mapping[str, str],
    refuse_config: bool,
) -> Lookup:
    """A lookup in the order condor_submit uses: the live values (queue variables, `$(Cluster)`,
    `$(Process)`), the commands, then each table of built-in macros. With `refuse_config`, a macro
    that comes from the submit machine's HTCondor configuration (`$(OPSYSVER)`...) is an error
    rather than undefined (tables keyed by lower-case names)."""

    def lookup(name: str) -> str | None:
        low = name.lower()
        if low in live:
            return live[low]
        m = commands.get(low)
        if m is not None:
            return m.value
        for table in builtins:
            value = table.get(low)
            if value is not None:
                return value
        if refuse_config and low in CONFIG_MACROS:
            raise ExpandError(
                f"$({name}) comes from the submit machine's HTCondor configuration; not supported"
            )
        return None

    return lookup


def job_builtins(cluster: int, process: int, row: int, step: int) -> dict[str, str]:
    """The built-in macros that change from job to job."""
    return {
        "clusterid": str(cluster),
        "procid": str(process),
        "itemindex": str(row),
        "row": str(row),
        "step": str(step),
    }


def shared_builtins(submit_file: str, submit_time: int) -> dict[str, str]:
    """The built-in macros that are the same for every job."""
    t = time.localtime(submit_time)
    return {
        "node": "",
        "jobid": "$(ClusterId).$(ProcId)",
        "arch": _ARCH.get(platform.machine().lower(), platform.machine()),
        "opsys": "LINUX",
        "islinux": "1",
        "iswindows": "0",
        "submit_file": submit_file,
        "submit_time": str(submit_time),
        "year": f"{t.tm_year:04d}",
        "month": f"{t.tm_mon:02d}",
        "day": f"{t.tm_mday:02d}",
        "request_cpus": "$(RequestCPUs)",
        "request_memory": "$(RequestMemory)",
        "vm_memory": "$(Request_Memory)",
        "vm_vcpus": "$(Request_CPUs)",
    }
