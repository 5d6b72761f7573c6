"""Values condor_submit reads as ClassAd expressions: booleans (string_is_boolean_param), integers
(string_is_long_param) and expressions it only parses (on_exit_remove, requirements...).

The plain forms are read here without ClassAds (`true`, `1`, `0`, `false`, integer arithmetic),
as condor reads them first too; anything else goes to HTCondor's own ClassAd library (classad2,
from the htcondor wheel): `hold = $(Process) == 0`, `max_retries = 2.7` (2) or `true` (1). It is
imported only then, so that reading an ordinary submit file costs no more memory than the
standard library (classad2 alone holds about 20 MB). It evaluates expressions only: no network,
none of the blocking calls that keep the rest of the bindings in common/condor/worker.py.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from llic.submit.classad_syntax import is_simple_expression
from llic.submit.values import WHITESPACE, parse_integer, parse_real

_classad2: ModuleType | None = None


def _classads() -> ModuleType:
    global _classad2
    if _classad2 is None:
        import classad2

        _classad2 = classad2
    return _classad2


def _evaluate(text: str) -> Any:
    """text evaluated as a ClassAd expression on its own; None if it does not parse."""
    classad2 = _classads()
    try:
        return classad2.ExprTree(text).eval()
    except (classad2.ClassAdException, ValueError, RuntimeError):
        return None


def submit_bool(text: str) -> bool | None:
    """condor's string_is_boolean_param: `true`/`1`/`false`/`0` (any case, blanks after), else a
    ClassAd expression whose value is a boolean or a number (non-zero: true); None otherwise
    (`yes`, `t`: attribute references, undefined)."""
    for literal, value in (("true", True), ("1", True), ("false", False), ("0", False)):
        if text[: len(literal)].lower() == literal and not text[len(literal) :].strip(WHITESPACE):
            return value
    number = parse_real(text)
    if number is not None:
        return number != 0
    value = _evaluate(text)
    if type(value) is bool:
        return value
    if type(value) in (int, float):  # not classad2.Value (undefined, error): an IntEnum
        return value != 0
    return None


def submit_integer(text: str) -> int | None:
    """condor's string_is_long_param: an integer (integer arithmetic read here), else a ClassAd
    expression whose value is an integer, a real (truncated) or a boolean (1, 0); None otherwise."""
    value = parse_integer(text)
    if value is not None:
        return value
    if not text.strip(WHITESPACE):
        return None
    got = _evaluate(text)
    if type(got) in (bool, int):  # not classad2.Value (undefined, error): an IntEnum
        return int(got)
    if type(got) is float and got == got and abs(got) < 2**63:
        return int(got)
    return None


def expression_error(text: str) -> str | None:
    """Why text is not a ClassAd expression (None: it is one). The common forms are read by
    classad_syntax.py; only the others cost classad2's import."""
    if is_simple_expression(text):
        return None
    classad2 = _classads()
    try:
        classad2.ExprTree(text)
    except (classad2.ClassAdException, ValueError, RuntimeError):
        return "Parse error in expression"
    return None


def evaluate_to_text(text: str) -> str | None:
    """`$EVAL()`: text evaluated as a ClassAd expression on its own, a string as it is, any other
    value unparsed (`3`, `3.000000000000000E+00`, `true`, `undefined`, `{ 1,2 }`); None when it
    does not parse."""
    classad2 = _classads()
    try:
        tree = classad2.ExprTree(text)
        value = tree.eval()
    except (classad2.ClassAdException, ValueError, RuntimeError):
        return None
    if type(value) is str:
        return value
    unparsed = str(tree.simplify())
    if "\n" in unparsed:  # a list or record: condor unparses it on one line
        parts = [line.strip() for line in unparsed.strip().splitlines()]
        unparsed = f"{parts[0]} {''.join(parts[1:-1])} {parts[-1]}"
    return unparsed


def evaluate_to_string(text: str) -> str | None:
    """`$STRING()`: the string text evaluates to as a ClassAd expression; None if it is none."""
    value = _evaluate(text)
    return value if type(value) is str else None
