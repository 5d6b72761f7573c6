"""ClassAd literals as text with the standard library only.

llic's master_q prints ads as `condor_q -long` does and the gateway's worker writes config values
as ClassAd expressions; both need the text `classad2.quote` gives (octal escapes for control and
non-ASCII bytes, not JSON's), and master_q must not need the htcondor bindings to print it."""

from __future__ import annotations

import math
from typing import Any

_ESCAPES = {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    ord("\a"): "\\a",
    ord("\b"): "\\b",
    ord("\t"): "\\t",
    ord("\n"): "\\n",
    ord("\v"): "\\v",
    ord("\f"): "\\f",
    ord("\r"): "\\r",
}
_INT64 = range(-(2**63), 2**63)


def quote_string(text: str) -> str:
    """`text` as a quoted ClassAd string, byte for byte what classad2.quote returns."""
    if "\0" in text:
        raise ValueError("a ClassAd string cannot hold a NUL character")
    out = ['"']
    for byte in text.encode("utf-8"):
        if byte in _ESCAPES:
            out.append(_ESCAPES[byte])
        elif byte < 0x20 or byte >= 0x7F:
            out.append(f"\\{byte:03o}")
        else:
            out.append(chr(byte))
    out.append('"')
    return "".join(out)


def literal(value: Any) -> str:
    """A plain Python value as ClassAd expression text: None undefined, booleans true/false,
    numbers as ClassAd reads them, anything else as a quoted string of its str()."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value not in _INT64:
            raise ValueError(f"{value} does not fit a ClassAd integer (64 bits)")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'real("NaN")'
        if math.isinf(value):
            return 'real("INF")' if value > 0 else 'real("-INF")'
        return repr(value)
    return quote_string(str(value))
