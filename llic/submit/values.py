"""How condor_submit reads a plain value: a boolean, an integer expression, a list of names.

condor's string_is_boolean_param, string_is_long_param and StringTokenIterator, shared by the
macro functions, the queue statement and job resolution. Where condor evaluates a ClassAd
expression (a queue count, `$INT()`, `$REAL()`), llic evaluates arithmetic on literals only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

WHITESPACE = " \t\n\v\f\r"  # C isspace()


def split_list(text: str, delims: str = ", \t\r\n") -> list[str]:
    """condor's split()/StringTokenIterator: tokens between delimiters, trimmed, empty ones dropped."""
    out = []
    for piece in re.split("[" + re.escape(delims) + "]", text):
        piece = piece.strip(WHITESPACE)
        if piece:
            out.append(piece)
    return out


def parse_bool(value: str) -> bool | None:
    """condor's string_is_boolean_param (true/false/yes/no/t/f/1/0, any case)."""
    v = value.strip(WHITESPACE).lower()
    if v in ("true", "t", "yes", "y", "1"):
        return True
    if v in ("false", "f", "no", "n", "0"):
        return False
    return None


def _div(a: float, b: float) -> float:
    if isinstance(a, int) and isinstance(b, int):
        return int(a / b)  # a ClassAd truncates an integer division toward zero
    return a / b


def _mod(a: float, b: float) -> float:
    if isinstance(a, int) and isinstance(b, int):
        return a - b * int(a / b)
    raise ValueError("% of a real")


_OPS: dict[type[ast.AST], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: _div,
    ast.Mod: _mod,
}


def _evaluate(text: str, *, reals: bool) -> float | None:
    """Arithmetic on integer (and, with `reals`, real) literals: + - * / % and parentheses."""
    text = text.strip(WHITESPACE)
    if not text or len(text) > 200 or "_" in text or re.search(r"0[xXoObBjJ]|[jJ]", text):
        return None  # Python's literals that are no C or ClassAd literal: 0x10, 1_0, 1j
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in ((int, float) if reals else (int,)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(text)

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def parse_integer(text: str) -> int | None:
    """An integer from condor's string_is_long_param, limited to integer arithmetic; None if not one."""
    value = _evaluate(text, reals=False)
    return None if value is None else int(value)


# what C's strtod reads whole (leading white space skipped by strtod, trailing by condor)
_C_DOUBLE_RE = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)


def parse_real(text: str) -> float | None:
    """A number from condor's string_is_double_param: a C double literal, else arithmetic on
    integer and real literals as a ClassAd evaluates it (integer operands stay integer); None if
    not one."""
    stripped = text.strip(WHITESPACE)
    if _C_DOUBLE_RE.fullmatch(stripped):
        return float(stripped)
    value = _evaluate(stripped, reals=True)
    return None if value is None else float(value)
