"""The macro functions of a submit file (config.cpp: evaluate_macro_func): `$ENV()`, `$F...()`,
`$BASENAME()`, `$DIRNAME()`, `$SUBSTR()`, `$CHOICE()`, `$INT()`, `$REAL()`, `$EVAL()`,
`$STRING()` (the last two with HTCondor's ClassAd library, classad_values.py).

Each takes the expander (whose lookup and environment its arguments are read from) and the
reference as found (`MacroReference`: kind, name as written, body). A function that macros.py
recognises but FUNCTIONS lacks (`$RANDOM_CHOICE()`, `$RANDOM_INTEGER()`: a master given its
block's text would draw other values than master_submitter did) is refused by the expander;
supporting one is a function here and an entry in FUNCTIONS.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llic.submit.classad_values import evaluate_to_string, evaluate_to_text, submit_integer
from llic.submit.errors import ExpandError
from llic.submit.values import WHITESPACE, parse_real, split_list

if TYPE_CHECKING:
    from llic.submit.macros import Expander, MacroReference


def _env(ex: Expander, ref: MacroReference) -> str:
    """`$ENV(X)`: the submitter's environment variable, `UNDEFINED` when unset, `$ENV(X:default)`."""
    name, colon, default = ref.body.partition(":")
    value = ex.environ.get(name)
    if value is None:
        return default if colon else "UNDEFINED"
    return value


def _file_name(ex: Expander, ref: MacroReference) -> str:
    """`$Fpdnxbqa(X)`, `$BASENAME(X)`, `$DIRNAME(X)`: parts of the file name macro X holds (or of
    X itself when it is no macro)."""
    mval = ex.lookup(ref.body)
    if mval is None:
        mval = ref.body
    if "$" in mval:
        mval = ex.expand(mval)
    return _filename_parts(_file_name_flags(ref.kind, ref.func), mval, ex.cwd)


@dataclass
class _FileNameFlags:
    """What a `$F...()` asks for (config.cpp, SPECIAL_MACRO_ID_FILENAME)."""

    parts: int = 0  # bits: 1 extension, 2 name, 4 path, 8 directories
    num_dirs: int = 0  # how many d's: directories to keep
    quote: str = ""  # the quote to put around the result ("" for none)
    bare: bool = False  # no "." before the extension, no "/" after the path
    to_path: str = ""  # the separator to convert the name's separators to
    full_path: bool = False  # made absolute first (relative to the job's initialdir)


def _file_name_flags(kind: str, func: str) -> _FileNameFlags:
    flags = _FileNameFlags()
    if kind == "BASENAME":
        flags.parts = 3
        return flags
    if kind == "DIRNAME":
        flags.parts = 4
        return flags
    quoted = arg_quote = False
    for ch in func[1:].lower():
        if ch == "x":
            flags.parts |= 1
        elif ch == "n":
            flags.parts |= 2
        elif ch == "p":
            flags.parts |= 4
        elif ch == "d":
            flags.parts |= 8
            flags.num_dirs += 1
        elif ch == "a":
            arg_quote = True
        elif ch == "b":
            flags.bare = True
        elif ch == "f":
            flags.full_path = True
        elif ch == "w":
            flags.to_path = "\\"
        elif ch == "u":
            flags.to_path = "/"
        elif ch == "q":
            quoted = True
    flags.quote = ("'" if arg_quote else '"') if quoted else ""
    return flags


def _filename_parts(flags: _FileNameFlags, mval: str, cwd: str | None = None) -> str:
    """The parts of file name mval that flags select, quoted as they ask; with the f flag a
    relative name is first put under `cwd` (condor's strdup_full_path_quoted; no cwd: as is)."""
    s = mval
    if len(s) > 1 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1]
    if s and (s[0] == '"' or (flags.quote and s[0] == flags.quote)):
        q = s[0]
        s = s[1:]
        if s and s[-1] == q:
            s = s[:-1]
    if flags.full_path and cwd and not s.startswith("/"):
        base = cwd[:-1] if cwd.endswith("/") or (flags.to_path and cwd.endswith(flags.to_path)) else cwd
        if len(s) > 2 and s[0] == "." and (s[1] == "/" or (flags.to_path and s[1] == flags.to_path)):
            s = s[2:]
        s = f"{base}{flags.to_path or '/'}{s}"
    if flags.to_path:
        s = s.replace("/" if flags.to_path == "\\" else "\\", flags.to_path)
    start, end = _selected_span(s, flags.parts, flags.num_dirs, flags.bare)
    result = s[start:end] if end > start else ""
    return f"{flags.quote}{result}{flags.quote}"


def _selected_span(s: str, parts: int, num_dirs: int, bare: bool) -> tuple[int, int]:
    """(start, end) of the selected parts of file name s."""
    ixend = len(s)
    ixn = s.rfind("/") + 1
    ext = s.rfind(".", ixn + 1)
    ixx = ext if ext > ixn else ixend
    if ixn == 0 and parts & 3:
        parts &= ~(4 | 8)
    start = 0
    sel = parts & 0xF
    if sel == 1:
        start = ixx + 1 if bare and ixx < ixend else ixx
    elif sel in (2, 3):
        start = ixn
        if sel == 2:
            ixend = ixx
    elif sel == 4:
        ixend = ixn - 1 if bare and ixn > 0 else ixn
    elif sel == 6:
        ixend = ixx
    elif sel in (0, 5, 7):
        pass
    elif ixn > 0:
        seps = [i + 1 for i, c in enumerate(s) if c in "/\\"]
        seps = seps[: len(seps) - num_dirs] if num_dirs <= len(seps) else []
        start = seps[-1] if seps else 0
        if parts & 3 == 2:
            ixend = ixx
        elif parts & 3 == 0:
            ixend = ixn - 1 if bare and ixn > 0 else ixn
    else:
        start = ixend = 0
    return start, ixend


def _substr(ex: Expander, ref: MacroReference) -> str:
    """`$SUBSTR(X,start[,len])`: negative start and length count from the end, as in Python."""
    name, comma, rest = ref.body.partition(",")
    if not comma:
        raise ExpandError("$SUBSTR() macro: no length specified")
    start_arg, comma2, len_arg = rest.partition(",")
    start = submit_integer(ex.lookup_expanded(start_arg))
    if start is None:
        raise ExpandError(f"$SUBSTR() macro: {start_arg} is invalid start index")
    length = 2**30
    if comma2:
        got = submit_integer(ex.lookup_expanded(len_arg))
        if got is None:
            raise ExpandError(f"$SUBSTR() macro: {len_arg} is invalid length")
        length = got
    mval = ex.lookup(name)
    if mval is None:
        return ""
    if "$" in mval:
        mval = ex.expand(mval)
    cch = len(mval)
    if start < 0:
        start += cch
    start = min(max(start, 0), cch)
    cch -= start
    if length < 0:
        length += cch
    length = min(max(length, 0), cch)
    return mval[start : start + length]


def _choice(ex: Expander, ref: MacroReference) -> str:
    """`$CHOICE(i,a,b,...)` or `$CHOICE(i,LIST)` with LIST a macro holding a comma-separated list."""
    entries = [e.strip(WHITESPACE) for e in ref.body.split(",")]
    if len(entries) < 2:
        raise ExpandError("$CHOICE() macro: no index")
    index = submit_integer(ex.lookup_expanded(entries[0]))
    if index is None or index < 0:
        raise ExpandError(f"$CHOICE() macro: {entries[0]} is invalid index")
    items = entries[1:]
    if len(entries) == 2:
        lval = ex.lookup(entries[1])
        if lval is None:
            raise ExpandError(f'$CHOICE() macro: no list named "{entries[1]}"')
        if "$" in lval:
            lval = ex.expand(lval)
        items = split_list(lval, ",")
    if index >= len(items):
        raise ExpandError(f"$CHOICE() macro: index {index} is out of range")
    return items[index]


def _int(ex: Expander, ref: MacroReference) -> str:
    """`$INT(X[,fmt])`: X's integer value, printf-formatted when a format is given."""
    name, comma, fmt = ref.body.partition(",")
    mval = ex.lookup_expanded(name)
    value = submit_integer(mval)
    if value is None:
        raise ExpandError(f"$INT() macro: {mval} does not evaluate to an integer")
    return _c_int_format(fmt, value) if comma else str(value)


def _real(ex: Expander, ref: MacroReference) -> str:
    """`$REAL(X[,fmt])`: X's value as a real, `%.16G` or printf-formatted (then always with a `.`)."""
    name, comma, fmt = ref.body.partition(",")
    mval = ex.lookup_expanded(name)
    value = parse_real(mval)
    if value is None:
        raise ExpandError(f"$REAL() macro: {mval} does not evaluate to an real")
    if not comma:
        return _c_float_format("%.16G", value)
    out = _c_float_format(fmt, value)
    return out if "." in out else out + ".0"


def _eval(ex: Expander, ref: MacroReference) -> str:
    """`$EVAL(X)`: X (a macro, else the text itself), expanded, evaluated as a ClassAd expression
    with no ad (attributes are undefined); the expansion itself when it does not parse."""
    mval = ex.lookup(ref.body)
    expanded = False
    if mval is None:
        mval = ref.body
    if "$" in mval:
        mval = ex.expand(mval)
        expanded = True
    value = evaluate_to_text(mval)
    if value is not None:
        return value
    return mval if expanded else ""


def _string(ex: Expander, ref: MacroReference) -> str:
    """`$STRING(X[,fmt])`: the string X evaluates to (X itself when it is no string expression),
    printf-formatted with a %s format when one is given."""
    name, comma, fmt = ref.body.partition(",")
    mval = ex.lookup_expanded(name)
    value = evaluate_to_string(mval)
    text = mval if value is None else value
    if not comma:
        return text
    if len(re.findall(r"%[-+ #0]*\d*(?:\.\d+)?s", fmt)) != 1 or len(re.findall(r"%[^%]", fmt)) != 1:
        raise ExpandError(f"$STRING macro: '{fmt}' is not a valid format specifier")
    return fmt % text


def _c_float_format(fmt: str, value: float) -> str:
    """printf a double with a C format (one conversion, of a floating-point kind)."""
    conversions = re.findall(r"%[-+ #0]*\d*(?:\.\d+)?(?:L|l)?([a-zA-Z%])", fmt)
    kinds = [c for c in conversions if c != "%"]
    if len(kinds) != 1 or kinds[0] not in "eEfFgG":
        raise ExpandError(f"$REAL() macro: '{fmt}' is not a valid format specifier")
    py = re.sub(r"%([-+ #0]*\d*(?:\.\d+)?)(?:L|l)?([eEfFgG])", r"%\1\2", fmt)
    return py % value


def _c_int_format(fmt: str, value: int) -> str:
    """printf an integer with a C format (length modifiers dropped)."""
    py = re.sub(r"%([-+ #0]*\d*(?:\.\d+)?)(?:hh|h|ll|l|j|z|t)?([diouxXc])", r"%\1\2", fmt)
    py = py.replace("%i", "%d").replace("%u", "%d")
    try:
        return py % value
    except (TypeError, ValueError) as e:
        raise ExpandError(f"$INT() macro: '{fmt}' is not a valid format specifier") from e


FUNCTIONS: dict[str, Callable[[Expander, MacroReference], str]] = {
    "ENV": _env,
    "FILENAME": _file_name,
    "BASENAME": _file_name,
    "DIRNAME": _file_name,
    "SUBSTR": _substr,
    "CHOICE": _choice,
    "INT": _int,
    "REAL": _real,
    "EVAL": _eval,
    "STRING": _string,
}
"""The macro functions llic evaluates, by MacroReference.kind."""
