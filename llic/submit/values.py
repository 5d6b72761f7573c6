"""How condor_submit reads a plain value: a boolean, an integer expression, a list of names.

condor's string_is_boolean_param, string_is_long_param and StringTokenIterator, shared by the
macro functions, the queue statement and job resolution. Where condor evaluates a ClassAd
expression (a queue count, `$INT()`), llic evaluates integer arithmetic only.
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


_INT_OPS: dict[type[ast.AST], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: int(a / b),
    ast.Mod: lambda a, b: a - b * int(a / b),
}


def parse_integer(text: str) -> int | None:
    """An integer from condor's string_is_long_param, limited to integer arithmetic; None if not one."""
    text = text.strip(WHITESPACE)
    if not text or len(text) > 200:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
            return _INT_OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(text)

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError):
        return None
