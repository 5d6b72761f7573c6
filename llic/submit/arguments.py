"""Job arguments as condor splits them (condor_arglist.cpp).

New syntax: the value is in double quotes (`""` inside is a `"`), white space separates
arguments, single quotes group (`''` inside is a `'`). Old syntax: no surrounding double quotes,
white space separates, `\\"` is a literal `"` and a bare `"` is an error. `arguments2` takes the
new syntax only.
"""

from __future__ import annotations

import re

from llic.submit.values import WHITESPACE


def v2_quoted_to_raw(text: str) -> str:
    """The inside of a double-quoted (new syntax) value; `""` is a literal `"`."""
    s = text.lstrip(WHITESPACE)
    assert s.startswith('"')
    close = s.find('"', 1)
    if close > 0 and not s[close + 1 :].strip(WHITESPACE):  # the common case: no "" inside
        return s[1:close]
    i, out = 1, []
    while i < len(s):
        c = s[i]
        if c == '"':
            if i + 1 < len(s) and s[i + 1] == '"':
                out.append('"')
                i += 2
                continue
            rest = s[i + 1 :]
            if rest.strip(WHITESPACE):
                raise ValueError(
                    "Unexpected characters following double-quote.  Did you forget to escape the "
                    f"double-quote by repeating it?  Here is the quote and trailing characters: {s[i:]}"
                )
            return "".join(out)
        out.append(c)
        i += 1
    raise ValueError("Unterminated double-quote.")


def split_args(raw: str) -> list[str]:
    """New-syntax argument splitting: white space separates, single quotes group, `''` is a quote."""
    if "'" not in raw:
        return _split_v1_args(raw)
    args: list[str] = []
    buf: list[str] = []
    token = False
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "'":
            start = i
            i += 1
            token = True
            while i < len(raw):
                if raw[i] == "'":
                    if i + 1 < len(raw) and raw[i + 1] == "'":
                        buf.append("'")
                        i += 2
                        continue
                    break
                buf.append(raw[i])
                i += 1
            if i >= len(raw):
                raise ValueError(f"Unbalanced quote starting here: {raw[start:]}")
            i += 1
        elif c in " \t\n\r":
            i += 1
            if token:
                args.append("".join(buf))
                buf, token = [], False
        else:
            token = True
            buf.append(c)
            i += 1
    if token:
        args.append("".join(buf))
    return args


_ARG_SEP_RE = re.compile("[ \t\n\r]+")


def _split_v1_args(raw: str) -> list[str]:
    return [a for a in _ARG_SEP_RE.split(raw) if a]


def parse_arguments(value: str, *, v2_only: bool = False) -> list[str]:
    """An `arguments` value as condor splits it (new syntax if it starts with a double quote)."""
    if value.lstrip(WHITESPACE).startswith('"'):
        return split_args(v2_quoted_to_raw(value))
    if v2_only:
        raise ValueError("Expecting double-quoted input string (V2 format).")
    out, i = [], 0
    while i < len(value):
        if value[i] == '"':
            raise ValueError(f"Found illegal unescaped double-quote: {value[i:]}")
        if value[i] == "\\" and i + 1 < len(value) and value[i + 1] == '"':
            out.append('"')
            i += 2
            continue
        out.append(value[i])
        i += 1
    return _split_v1_args("".join(out))
