"""A quick check that a text is a ClassAd expression of the common kinds, without HTCondor's
ClassAd library: `requirements = (OpSys == "LINUX") && (Memory >= 1024)`, `rank = Mips`,
`on_exit_remove = ExitCode =?= 0 || NumJobStarts > 3`, `periodic_hold = time() - QDate > 3600`.

Used as a fast path only: `is_simple_expression` says True for texts it fully parses (numbers,
strings, attribute references with scopes, function calls, lists and records, the unary, binary
and `?:` conditional operators); for anything else the caller asks classad2 (classad_values.py), so
a form this grammar lacks is never refused because of it.
"""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(
    r"""
    \s*(?:
      (?P<real>(?:\d+\.\d+|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    | (?P<int>\d+)
    | (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<quoted>'(?:[^'\\]|\\.)*')
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>=\?=|=!=|>>>|<<|>>|<=|>=|==|!=|&&|\|\||\?:|[-+*/%<>!~&|^?:.,;=()\[\]{}])
    )""",
    re.VERBOSE,
)
_BINARY = {
    "||": 1,
    "&&": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "=?=": 6,
    "=!=": 6,
    "is": 6,
    "isnt": 6,
    "<": 7,
    "<=": 7,
    ">": 7,
    ">=": 7,
    "<<": 8,
    ">>": 8,
    ">>>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "%": 10,
}


class _Unsure(Exception):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise _Unsure
        kind = m.lastgroup or ""
        value = m.group(kind)
        if kind == "name" and value.lower() in ("is", "isnt"):
            kind, value = "op", value.lower()
        out.append((kind, value))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self, value: str) -> None:
        if self.peek()[1] != value or self.peek()[0] not in ("op",):
            raise _Unsure
        self.i += 1

    def expression(self) -> None:
        self.binary(1)
        kind, value = self.peek()
        if kind == "op" and value == "?":
            self.i += 1
            self.expression()
            self.take(":")
            self.expression()

    def binary(self, level: int) -> None:
        self.unary()
        while True:
            kind, value = self.peek()
            prec = _BINARY.get(value) if kind == "op" else None
            if prec is None or prec < level:
                return
            self.i += 1
            self.binary(prec + 1)

    def unary(self) -> None:
        kind, value = self.peek()
        if kind == "op" and value in ("-", "+", "!", "~"):
            self.i += 1
            self.unary()
            return
        self.postfix()

    def postfix(self) -> None:
        first = self.peek()
        self.primary()
        selectable = first[0] in ("name", "quoted") or first == ("op", "(") or first == ("op", "[")
        while True:
            kind, value = self.peek()
            if kind == "op" and value == "." and selectable:
                self.i += 1
                if self.peek()[0] not in ("name", "quoted"):
                    raise _Unsure
                self.i += 1
            elif kind == "op" and value == "[":
                self.i += 1
                self.expression()
                self.take("]")
            else:
                return

    def primary(self) -> None:
        kind, value = self.peek()
        if kind == "int" and len(value) > 1 and value[0] == "0":
            raise _Unsure  # octal
        if kind in ("real", "int", "string", "quoted"):
            self.i += 1
        elif kind == "name":
            self.i += 1
            if self.peek() == ("op", "("):
                self.i += 1
                self.items(")")
        elif kind == "op" and value == "(":
            self.i += 1
            self.expression()
            self.take(")")
        elif kind == "op" and value == "{":
            self.i += 1
            self.items("}")
        elif kind == "op" and value == "[":
            self.i += 1
            self.record()
        elif kind == "op" and value == ".":  # .Attr: the enclosing ad's attribute
            self.i += 1
            if self.peek()[0] != "name":
                raise _Unsure
            self.i += 1
        else:
            raise _Unsure

    def items(self, close: str) -> None:
        if self.peek() == ("op", close):
            self.i += 1
            return
        while True:
            self.expression()
            if self.peek() == ("op", close):
                self.i += 1
                return
            self.take(",")

    def record(self) -> None:
        while self.peek() != ("op", "]"):
            if self.peek()[0] not in ("name", "quoted"):
                raise _Unsure
            self.i += 1
            self.take("=")
            self.expression()
            if self.peek() == ("op", ";"):
                self.i += 1
            elif self.peek() != ("op", "]"):
                raise _Unsure
        self.i += 1


def is_simple_expression(text: str) -> bool:
    """True when text is certainly a ClassAd expression; False: not one, or a form this
    grammar does not read (ask HTCondor's ClassAd library)."""
    try:
        tokens = _tokens(text)
        if not tokens:
            return False
        parser = _Parser(tokens)
        parser.expression()
        return parser.i == len(tokens)
    except (_Unsure, RecursionError):
        return False


def top_level_conditional(text: str) -> bool:
    """Whether text's top operator is the conditional `?:` (a `?` outside parentheses,
    brackets, braces and string literals)."""
    depth = 0
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "?" and depth == 0:
            return True
        i += 1
    return False
