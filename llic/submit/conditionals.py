"""`if` / `elif` / `else` / `endif` in a submit file (condor's config.cpp: ConfigIfStack,
Test_config_if_expression, Evaluate_config_if, Characterize_config_if_expression).

A condition is read as condor_submit reads it: macros in it are expanded first (an expansion
that leaves nothing is false), a leading `!` inverts it, and what remains must be one of
- a number (true unless zero) or `true`/`false` (any case), or `yes`/`no`/`t`/`f`;
- `defined NAME`: NAME is a command, a queue variable or a built-in macro whose (raw, unexpanded)
  value is not empty; `defined` of a number or a boolean is true; a bare `defined` is false;
- `version OP X.Y[.Z]` with OP one of `==`, `=`, `!=`, `<`, `<=`, `>`, `>=` (a `v` before the
  version allowed, X at least 6, Z defaulting to the running version's): compared with the
  HTCondor version llic reproduces, CONDOR_VERSION.
- `defined use CATEGORY[:NAME]`: HTCondor 23.9 has that configuration template (the names in
  its param_info.in, METAKNOBS here).
Anything else (`$(X) == 3`, a word that is no boolean) is an error, as it is to condor_submit
23.9, whose submit files have no ClassAd context for "complex conditionals".

Each source of lines (the file, each included file or command) has its own stack: an `if` left
open at the end of a source ends with it (condor_submit does not complain), an `endif` or
`else` without a matching `if` in the same source is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from llic.submit.values import WHITESPACE

CONDOR_VERSION = (23, 9, 6)  # the condor_submit whose reading of submit files llic reproduces
MAX_DEPTH = 63  # condor's stack is a 64-bit mask, bit 0 being the base level

# the configuration templates (`use CATEGORY : NAME`) of HTCondor 23.9.6's param_info.in
METAKNOBS = {
    "role": "Personal Execute Submit CentralManager get_htcondor_central_manager get_htcondor_submit "
    "get_htcondor_execute",
    "feature": "POLICY_EXPR_FRAGMENTS TESTINGMODE_POLICY_VALUES UWCS_DESKTOP_POLICY_VALUES "
    "AssignAccountingGroup SetJobAttrFromUsermap ScheddUsermapFile REMOTE_RUNTIME_CONFIG REMOTE_CONFIG "
    "GPUs Monitor GPUsMonitor PelicanCache PartitionableSlot StaticSlots OneShotCronHook "
    "PeriodicCronHook ContinuousCronHook StartdCronPeriodic ScheddCronPeriodic StartdCronOneShot "
    "ScheddCronOneShot StartdCronContinuous ScheddCronContinuous ChildCollector KRB OAUTH ADSTASH "
    "CommonCloudAttributesGoogle JobsHaveInstanceIDs CommonCloudAttributesAWS HPC_ANNEX GANGLIA",
    "security": "HOST_BASED WITH_AUTHENTICATION STRONG USER_BASED get_htcondor_idtokens "
    "recommended_v9_0 FIPS",
    "policy": "DESKTOP ALWAYS_RUN_JOBS UWCS_DESKTOP LIMIT_JOB_RUNTIMES PREEMPT_IF_RUNTIME_EXCEEDS "
    "HOLD_IF_RUNTIME_EXCEEDS STARTD_PUBLISH_CpusUsage PREEMPT_IF_CPUS_EXCEEDED HOLD_IF_CPUS_EXCEEDED "
    "PREEMPT_IF_DISK_EXCEEDED HOLD_IF_DISK_EXCEEDED PREEMPT_IF_MEMORY_EXCEEDED HOLD_IF_MEMORY_EXCEEDED "
    "PREEMPT_IF WANT_HOLD_IF OnlyRegisteredCheckpointDestinations",
    "upgrade": "DISCARD DISCARDX DISCARDIF DISCARDIFX DISCARD_VMWARE",
    "experimental": "CollectorNode HAD HADSharedPort HADFixedPort HADReplication",
}

_KEYWORD_RE = re.compile(r"(if|elif|else|endif)(?:[ \t\n\v\f\r]|$)", re.IGNORECASE)


class ConditionError(ValueError):
    """A conditional line condor_submit refuses; the message is condor's."""


def conditional_keyword(line: str) -> str | None:
    """`if`, `elif`, `else` or `endif` when the line is one of those (any case), else None."""
    m = _KEYWORD_RE.match(line)
    return m.group(1).lower() if m else None


# ---------------------------------------------------------------------------------------------
# one condition


_EMPTY, _NUMBER, _BOOL, _IDENTIFIER, _MACRO, _VERSION, _IFDEF, _COMPLEX = range(8)

_SPACE, _DIGIT, _ALPHA, _IDENT = 0x01, 0x02, 0x04, 0x08
_CMP, _SUM, _LOGIC, _GROUP = 0x10, 0x20, 0x40, 0x80
_MONEY, _COLON, _OTHER, _FLOAT, _MACRO_START = 0x100, 0x200, 0x400, 0x1000, 0x2000


def _literal(text: str, literal: str, *, alone: bool = True) -> bool:
    """condor's matches_literal_ignore_case: text (leading blanks skipped) starts with literal;
    `alone`: nothing but blanks follows, else no letter or digit follows."""
    s = text.lstrip(WHITESPACE)
    if s[: len(literal)].lower() != literal:
        return False
    rest = s[len(literal) :]
    if alone:
        return not rest.strip(WHITESPACE)
    return not rest[:1].isalnum()


def _characterize(expr: str, keyword_check: bool) -> int:
    """What kind of condition expr is (Characterize_config_if_expression)."""
    s = expr.lstrip(WHITESPACE)
    if not s:
        return _EMPTY
    begin = s
    p = 1 if s[0] == "-" else 0
    kinds = 0
    n = len(s)
    while p < n:
        ch = s[p]
        nxt = s[p + 1] if p + 1 < n else ""
        p += 1
        if "0" <= ch <= "9":
            kinds |= _DIGIT
        elif ch == ".":
            kinds |= _FLOAT if kinds == _DIGIT or (not nxt or "0" <= nxt <= "9") else _IDENT
        elif ch in "eE":
            kinds |= _FLOAT if (kinds & ~_FLOAT) == _DIGIT else _ALPHA
        elif ch in "-+":
            if kinds != (_DIGIT | _FLOAT):
                kinds |= _SUM
        elif ch.isascii() and ch.isalpha():
            kinds |= _ALPHA
        elif ch in "_/":
            kinds |= _IDENT
        elif "<" <= ch <= ">" or (ch == "!" and nxt == "="):
            kinds |= _CMP
        elif ch == "$":
            kinds |= _MONEY | (_MACRO_START if nxt == "(" else 0)
        elif ch in WHITESPACE:
            if nxt and nxt not in WHITESPACE:
                kinds |= _SPACE
        elif ch in "&|":
            kinds |= _LOGIC
        elif ch in "{|}()[]":
            kinds |= _GROUP
        elif ch == ":":
            kinds |= _COLON
        else:
            kinds |= _OTHER
    if kinds == 0:
        return _EMPTY
    if kinds in (_DIGIT, _DIGIT | _FLOAT):
        return _NUMBER
    if kinds == _ALPHA:
        if _literal(expr, "false") or _literal(expr, "true"):
            return _BOOL
        if keyword_check and _literal(begin, "version"):
            return _VERSION
        if keyword_check and _literal(begin, "defined"):
            return _IFDEF
        return _IDENTIFIER
    if kinds in (
        _ALPHA | _DIGIT,
        _ALPHA | _DIGIT | _FLOAT,
        _ALPHA | _IDENT,
        _ALPHA | _IDENT | _DIGIT,
        _ALPHA | _IDENT | _DIGIT | _FLOAT,
    ):
        return _IDENTIFIER
    if kinds in (_ALPHA | _SPACE | _CMP | _DIGIT, _ALPHA | _SPACE | _CMP | _DIGIT | _FLOAT):
        return _VERSION if keyword_check and _literal(begin, "version", alone=False) else _COMPLEX
    if kinds in (
        _ALPHA | _SPACE,
        _ALPHA | _SPACE | _COLON,
        _ALPHA | _SPACE | _IDENT,
        _ALPHA | _SPACE | _IDENT | _COLON,
        _ALPHA | _SPACE | _DIGIT,
        _ALPHA | _SPACE | _DIGIT | _IDENT,
        _ALPHA | _SPACE | _DIGIT | _FLOAT,
        _ALPHA | _SPACE | _DIGIT | _IDENT | _FLOAT,
    ):
        return _IFDEF if keyword_check and _literal(begin, "defined", alone=False) else _COMPLEX
    if kinds & _MACRO_START and not kinds & ~(_MONEY | _IDENT | _ALPHA | _DIGIT | _MACRO_START | _COLON):
        return _MACRO
    return _COMPLEX


def _simple_bool(expr: str, kind: int) -> bool:
    if kind == _NUMBER:
        return _strtod(expr) != 0
    return _literal(expr, "true")


def _strtod(text: str) -> float:
    """C's atof: the longest number at the start of text (0 if none)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", text)
    return float(m.group(1)) if m else 0.0


def _crufty_bool(expr: str) -> bool | None:
    """`yes`/`t` true, `no`/`f` false (words condor takes for booleans), else None."""
    if _literal(expr, "yes") or _literal(expr, "t"):
        return True
    if _literal(expr, "no") or _literal(expr, "f"):
        return False
    return None


def _version(expr: str) -> bool:
    ptr = expr.lstrip(WHITESPACE)[len("version") :].lstrip(WHITESPACE)
    negated = ptr.startswith("!")
    if negated:
        ptr = ptr[1:]
    op = 0
    if ptr[:1] and "<" <= ptr[0] <= ">":
        op = ord(ptr[0]) - ord("=")
        ptr = ptr[1:]
    or_equal = ptr.startswith("=")
    if or_equal:
        ptr = ptr[1:]
    ptr = ptr.lstrip(WHITESPACE)
    if ptr[:1] in ("v", "V"):
        ptr = ptr[1:]
    m = re.match(r"([+-]?\d+)\.([+-]?\d+)(?:\.([+-]?\d+))?", ptr)
    if not m or int(m.group(1)) < 6:
        raise ConditionError("the version literal is invalid")
    sub = int(m.group(3)) if m.group(3) is not None else CONDOR_VERSION[2]
    given = (int(m.group(1)), int(m.group(2)), sub)
    diff = (CONDOR_VERSION > given) - (CONDOR_VERSION < given)
    result = diff == op or (or_equal and diff == 0)
    return not result if negated else result


def _defined(expr: str, lookup: Callable[[str], str | None]) -> bool:
    ptr = expr.lstrip(WHITESPACE)[len("defined") :].lstrip(WHITESPACE)
    if not ptr:
        return False
    kind = _characterize(ptr, False)
    if kind == _IDENTIFIER:
        value = lookup(ptr.rstrip(WHITESPACE))
        if value is None and _crufty_bool(ptr) is not None:
            value = "true"
        return bool(value)
    if kind in (_NUMBER, _BOOL):
        return True
    if ptr[:4].lower() == "use ":
        meta = ptr[4:].lstrip(WHITESPACE)
        category, colon, name = meta.partition(":")
        names = METAKNOBS.get(category.lower())
        found = names is not None and (not colon or not name or name.lower() in names.lower().split())
        if any(c in meta for c in " \t\r"):
            raise ConditionError("defined use meta argument with internal spaces will never match")
        return found
    raise ConditionError("defined argument must be param name, boolean, or number")


def evaluate_condition(expr: str, expand: Callable[[str], str], lookup: Callable[[str], str | None]) -> bool:
    """The truth of an `if`/`elif` condition (Test_config_if_expression). `expand` expands macros
    as at this line of the file; `lookup` is a macro's raw value (None: undefined). Raises
    ConditionError with condor's reason when it is not a condition condor_submit accepts."""
    expanded = "$" in expr
    if expanded:
        expr = expand(expr).rstrip(WHITESPACE)
    expr = expr.lstrip(WHITESPACE)
    inverted = expr.startswith("!")
    if inverted:
        expr = expr[1:].lstrip(WHITESPACE)
    if expanded and not expr:
        value = False  # $(UNDEFINED) is false
    else:
        value = _evaluate(expr, lookup)
    return not value if inverted else value


def _evaluate(expr: str, lookup: Callable[[str], str | None]) -> bool:
    kind = _characterize(expr, True)
    if kind in (_NUMBER, _BOOL):
        return _simple_bool(expr, kind)
    if kind == _IDENTIFIER:
        crufty = _crufty_bool(expr)
        if crufty is not None:
            return crufty
    if kind == _VERSION:
        return _version(expr)
    if kind == _IFDEF:
        return _defined(expr, lookup)
    if kind == _COMPLEX:
        raise ConditionError("complex conditionals are not supported")
    raise ConditionError("expression is not a conditional")


# ---------------------------------------------------------------------------------------------
# the stack


class IfStack:
    """Which lines of one source are read (condor's ConfigIfStack, as plain lists)."""

    def __init__(self) -> None:
        self._taken: list[bool] = []  # per open if: the branch being read is the one taken
        self._any: list[bool] = []  # per open if: some branch was taken already
        self._in_else: list[bool] = []

    @property
    def enabled(self) -> bool:
        """Whether the lines here are read (every enclosing branch taken)."""
        return all(self._taken)

    @property
    def inside(self) -> bool:
        """Whether an `if` is open."""
        return bool(self._taken)

    def line(self, keyword: str, condition: str, test: Callable[[str], bool]) -> None:
        """Take a conditional line (`keyword` from conditional_keyword, `condition` what follows
        it); `test` evaluates a condition. Raises ConditionError with condor's message."""
        if keyword == "if":
            taken = self.enabled
            if taken:
                taken = self._test(test, condition, "if")
            if len(self._taken) >= MAX_DEPTH:
                raise ConditionError("if nesting too deep!")
            self._taken.append(taken)
            self._any.append(taken)
            self._in_else.append(False)
        elif keyword == "elif":
            outer = all(self._taken[:-1])
            taken = bool(self._taken) and not self._any[-1] and outer
            if taken:
                taken = self._test(test, condition, "elif")
            if not self._taken:
                raise ConditionError("elif without matching if")
            if self._in_else[-1]:
                raise ConditionError("elif is not allowed after else")
            self._taken[-1] = taken
            self._any[-1] = self._any[-1] or taken
        elif keyword == "else":
            if not self._taken:
                raise ConditionError("else without matching if")
            if self._in_else[-1]:
                raise ConditionError("else is not allowed after else")
            self._in_else[-1] = True
            self._taken[-1] = not self._any[-1]
        else:
            if not self._taken:
                raise ConditionError("endif without matching if")
            self._taken.pop()
            self._any.pop()
            self._in_else.pop()

    @staticmethod
    def _test(test: Callable[[str], bool], condition: str, keyword: str) -> bool:
        try:
            return test(condition)
        except ConditionError as e:
            raise ConditionError(f"{condition} is not a valid {keyword} condition because {e}") from None
