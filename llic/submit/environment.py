"""Job environments as condor reads them (env.cpp).

New syntax: the value is in double quotes, entries `NAME=value` separated by white space and
grouped by single quotes as arguments are (arguments.py). Old syntax: entries separated by `;`
(or by the value's first character when it is one of condor's delimiter characters) or a
newline. `environment2` takes the new syntax only. `getenv = true` adds the submitter's
variables the job does not set itself, `getenv = LIST` those LIST names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from llic.submit.arguments import split_args, v2_quoted_to_raw
from llic.submit.values import WHITESPACE, split_list


def _env_entry(entry: str, env: dict[str, str]) -> None:
    name, eq, val = entry.partition("=")
    if not eq:
        if "$$" in entry:
            raise ValueError(
                f"environment entry '{entry}' without '=' (a $$() entry) is not supported by llic"
            )
        raise ValueError(f"Missing '=' after environment variable '{entry}'.")
    if not name:
        raise ValueError(f"missing variable in '{entry}'.")
    env[name] = val


def parse_v2_environment(raw: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """New-syntax environment (already without its double quotes) merged into env."""
    env = {} if env is None else env
    for entry in split_args(raw):
        _env_entry(entry, env)
    return env


def parse_v1_environment(raw: str, delim: str = ";", env: dict[str, str] | None = None) -> dict[str, str]:
    """Old-syntax environment: entries split at `delim` or a newline, leading blanks dropped."""
    env = {} if env is None else env
    for entry in re.split("[" + re.escape(delim) + "\n]", raw):
        entry = entry.lstrip(" \t\n\r")
        if entry:
            _env_entry(entry, env)
    return env


def parse_environment(
    value: str, env: dict[str, str] | None = None, *, v2_only: bool = False
) -> dict[str, str]:
    """An `environment` value as condor reads it (new syntax if it starts with a double quote)."""
    env = {} if env is None else env
    if value.lstrip(WHITESPACE).startswith('"'):
        return parse_v2_environment(v2_quoted_to_raw(value), env)
    if v2_only:
        raise ValueError("Expecting a double-quoted environment string (V2 format).")
    delim = ";"
    if value and value[0] in "!#$%&*+,-/:;<>?@^`|~\x1f":
        delim, value = value[0], value[1:]
    return parse_v1_environment(value, delim, env)


def import_environment(
    env: dict[str, str], environ: Mapping[str, str], *, old_syntax: bool, names: str | None = None
) -> None:
    """`getenv = true` (names None) or `getenv = LIST`: add to env each variable of environ it
    does not set, never one whose value holds a newline, and, when the job's environment is in
    the old syntax only, not one whose value holds a `;` (condor's SubmitHashEnvFilter). LIST
    (separated by `,`, `;` or blanks) names the variables to take, `*` standing for any text,
    any case; a name after `!` is never taken (WhiteBlackEnvFilter)."""
    white: list[str] = []
    black: list[str] = []
    if names is not None:
        for item in split_list(names, ",; \t\r\n"):
            if item.startswith("!"):
                if item[1:].strip(WHITESPACE):
                    black.append(item[1:].strip(WHITESPACE))
            else:
                white.append(item)
    for k, v in environ.items():
        if k in env or "\n" in v or (old_syntax and ";" in v):
            continue
        if black and any(matches_wildcard(pattern, k) for pattern in black):
            continue
        if white and not any(matches_wildcard(pattern, k) for pattern in white):
            continue
        env[k] = v


def matches_wildcard(pattern: str, name: str) -> bool:
    """condor's matches_anycase_withwildcard: no `*`: equal (any case); `A*`: starts with A;
    `*B`, `A*B`: starts with A and holds B after it (23.9 does not check that B ends it)."""
    p, n = pattern.lower(), name.lower()
    star = p.find("*")
    if star < 0:
        return p == n
    start, end = p[:star], p[star + 1 :]
    if end.endswith("*"):
        end = end[:-1]
    if not n.startswith(start):
        return False
    return not end or end in n[len(start) :]
