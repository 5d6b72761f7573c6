"""msgpack for the agent: the types llic's protocol uses, in pure Python, faster than msgpack's fallback.

The agent ships without compiled code, so msgpack runs as its pure-Python fallback there, which
pays for generality on every object (extension types, hooks, streaming buffers): decoding a task
took ~25 µs, against the ~0.5 ms a short task's whole run costs. This module encodes and decodes
exactly what the protocol sends (maps with string keys, lists, strings, bytes, integers, floats,
booleans, None), byte for byte as `msgpack.packb(obj, use_bin_type=True)` does and reading what
`msgpack.unpackb(data, raw=False, strict_map_key=True)` reads; anything else (extension types,
other map keys, trailing or missing bytes, nesting deeper than MAX_DEPTH) is a ValueError, as it is
a msgpack error there. llic/protocol.py uses it only where msgpack is its fallback (the agent).

Stdlib only, Python 3.9+.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 128  # nested maps and lists, at most (the protocol nests 4 deep; two frames each)

_U16, _U32, _U64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")


class MsgpackError(ValueError):
    """Not a msgpack object of the protocol's kind."""


# ---------------------------------------------------------------------------------------------
# decoding


def unpackb(data: bytes) -> Any:
    """The one object `data` holds; MsgpackError (or UnicodeDecodeError) if it holds anything else."""
    data = bytes(data)
    obj, pos = _decode(data, 0, 0)
    if pos != len(data):
        raise MsgpackError(f"{len(data) - pos} bytes after the object")
    return obj


def _decode(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    if pos >= len(data):
        raise MsgpackError("truncated")
    b = data[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if b >= 0xA0 and b <= 0xBF:
        return _str(data, pos, b & 0x1F)
    if b <= 0x8F:
        return _map(data, pos, b & 0x0F, depth)
    if b <= 0x9F:
        return _list(data, pos, b & 0x0F, depth)
    if b == 0xC0:
        return None, pos
    if b == 0xC2:
        return False, pos
    if b == 0xC3:
        return True, pos
    reader = _READERS.get(b)
    if reader is None:
        raise MsgpackError(f"type byte 0x{b:02x} (an extension or unused type) not allowed")
    try:
        return reader(data, pos, depth)
    except struct.error:
        raise MsgpackError("truncated") from None


def _str(data: bytes, pos: int, n: int) -> tuple[str, int]:
    end = pos + n
    if end > len(data):
        raise MsgpackError("truncated")
    return data[pos:end].decode("utf-8"), end


def _bin(data: bytes, pos: int, n: int) -> tuple[bytes, int]:
    end = pos + n
    if end > len(data):
        raise MsgpackError("truncated")
    return data[pos:end], end


def _list(data: bytes, pos: int, n: int, depth: int) -> tuple[list[Any], int]:
    if depth >= MAX_DEPTH:
        raise MsgpackError(f"nested more than {MAX_DEPTH} deep")
    if n > len(data) - pos:  # every item takes a byte at least
        raise MsgpackError("truncated")
    out = []
    depth += 1
    for _ in range(n):
        item, pos = _decode(data, pos, depth)
        out.append(item)
    return out, pos


def _map(data: bytes, pos: int, n: int, depth: int) -> tuple[dict[Any, Any], int]:
    if depth >= MAX_DEPTH:
        raise MsgpackError(f"nested more than {MAX_DEPTH} deep")
    if 2 * n > len(data) - pos:  # a key and a value, a byte each at least
        raise MsgpackError("truncated")
    out = {}
    depth += 1
    size = len(data)
    for _ in range(n):
        # a short string key, and a small integer or a short string value, read here: they are
        # most of a task's or result's objects (the agent decodes a task per task)
        b = data[pos] if pos < size else 0xC1
        if 0xA0 <= b <= 0xBF:
            end = pos + 1 + (b & 0x1F)
            if end > size:
                raise MsgpackError("truncated")
            key = data[pos + 1 : end].decode("utf-8")
            pos = end
        else:
            key, pos = _decode(data, pos, depth)
            if type(key) is not str and type(key) is not bytes:
                raise MsgpackError(f"a map key of type {type(key).__name__}")
        b = data[pos] if pos < size else 0xC1
        if b <= 0x7F:
            out[key] = b
            pos += 1
        elif 0xA0 <= b <= 0xBF:
            end = pos + 1 + (b & 0x1F)
            if end > size:
                raise MsgpackError("truncated")
            out[key] = data[pos + 1 : end].decode("utf-8")
            pos = end
        else:
            out[key], pos = _decode(data, pos, depth)
    return out, pos


def _sized(size: struct.Struct, then: Callable[[bytes, int, int], tuple[Any, int]]) -> Any:
    def read(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        (n,) = size.unpack_from(data, pos)
        return then(data, pos + size.size, n)

    return read


def _sized_nested(size: struct.Struct, then: Callable[[bytes, int, int, int], tuple[Any, int]]) -> Any:
    def read(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        (n,) = size.unpack_from(data, pos)
        return then(data, pos + size.size, n, depth)

    return read


def _number(kind: struct.Struct) -> Any:
    def read(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        return kind.unpack_from(data, pos)[0], pos + kind.size

    return read


_U8 = struct.Struct(">B")
_READERS: dict[int, Callable[[bytes, int, int], tuple[Any, int]]] = {
    0xC4: _sized(_U8, _bin),
    0xC5: _sized(_U16, _bin),
    0xC6: _sized(_U32, _bin),
    0xCA: _number(_F32),
    0xCB: _number(_F64),
    0xCC: _number(_U8),
    0xCD: _number(_U16),
    0xCE: _number(_U32),
    0xCF: _number(_U64),
    0xD0: _number(_I8),
    0xD1: _number(_I16),
    0xD2: _number(_I32),
    0xD3: _number(_I64),
    0xD9: _sized(_U8, _str),
    0xDA: _sized(_U16, _str),
    0xDB: _sized(_U32, _str),
    0xDC: _sized_nested(_U16, _list),
    0xDD: _sized_nested(_U32, _list),
    0xDE: _sized_nested(_U16, _map),
    0xDF: _sized_nested(_U32, _map),
}


# ---------------------------------------------------------------------------------------------
# encoding


def packb(obj: Any) -> bytes:
    """`obj` as msgpack (what msgpack.packb(obj, use_bin_type=True) gives); TypeError for a type
    the protocol does not use, OverflowError for an integer msgpack cannot hold."""
    out: list[bytes] = []
    _encode(obj, out.append, 0)
    return b"".join(out)


def _header(n: int, small: int, limit: int, codes: tuple[int, int, int]) -> bytes:
    if n < limit:
        return bytes((small | n,))
    if codes[0] and n < 0x100:
        return bytes((codes[0], n))
    if n < 0x10000:
        return bytes((codes[1],)) + _U16.pack(n)
    if n < 0x100000000:
        return bytes((codes[2],)) + _U32.pack(n)
    raise ValueError(f"{n} items or bytes: more than msgpack can hold")


def _int(value: int) -> bytes:
    if 0 <= value < 0x80:
        return bytes((value,))
    if -32 <= value < 0:
        return bytes((value + 0x100,))
    if value >= 0:
        for code, kind, limit in ((0xCC, _U8, 0x100), (0xCD, _U16, 0x10000), (0xCE, _U32, 1 << 32)):
            if value < limit:
                return bytes((code,)) + kind.pack(value)
        if value < 1 << 64:
            return b"\xcf" + _U64.pack(value)
    else:
        for code, kind, limit in ((0xD0, _I8, 0x80), (0xD1, _I16, 0x8000), (0xD2, _I32, 1 << 31)):
            if value >= -limit:
                return bytes((code,)) + kind.pack(value)
        if value >= -(1 << 63):
            return b"\xd3" + _I64.pack(value)
    raise OverflowError(f"integer {value} does not fit in msgpack")


_STR = (0xD9, 0xDA, 0xDB)
_BIN = (0xC4, 0xC5, 0xC6)
_LIST = (0, 0xDC, 0xDD)
_MAP = (0, 0xDE, 0xDF)


_SHORT = 64  # strings up to this many characters keep their encoding (map keys, statuses, hosts)
_CACHE_MOST = 4096  # ... at most this many of them (a bounded memo, not a leak)
_encoded_str: dict[str, bytes] = {}


def _str_bytes(text: str) -> bytes:
    """A str's header and UTF-8 bytes; short ones from the memo (the keys and most values of a
    result map repeat in every message: encoding them again was most of the agent's encoding)."""
    known = _encoded_str.get(text)
    if known is not None:
        return known
    raw = text.encode("utf-8")
    encoded = _header(len(raw), 0xA0, 32, _STR) + raw
    if len(text) <= _SHORT and len(_encoded_str) < _CACHE_MOST and type(text) is str:
        _encoded_str[text] = encoded
    return encoded


def _encode(obj: Any, put: Callable[[bytes], Any], depth: int) -> None:
    kind = type(obj)
    if kind is str:
        put(_str_bytes(obj))
    elif obj is None:
        put(b"\xc0")
    elif kind is bool:
        put(b"\xc3" if obj else b"\xc2")
    elif kind is int:
        put(_int(obj))
    elif kind is float:
        put(b"\xcb" + _F64.pack(obj))
    elif isinstance(obj, dict):
        if depth >= MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} deep")
        put(_header(len(obj), 0x80, 16, _MAP))
        depth += 1
        for key, value in obj.items():  # the usual keys and scalars here, without a call each
            if type(key) is str:
                put(_str_bytes(key))
            else:
                _encode(key, put, depth)
            kind = type(value)
            if kind is str:
                put(_str_bytes(value))
            elif kind is int and 0 <= value < 0x80:
                put(bytes((value,)))
            elif kind is float:
                put(b"\xcb" + _F64.pack(value))
            elif value is None:
                put(b"\xc0")
            else:
                _encode(value, put, depth)
    elif isinstance(obj, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} deep")
        put(_header(len(obj), 0x90, 16, _LIST))
        for item in obj:
            _encode(item, put, depth + 1)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        put(_header(len(raw), 0, 0, _BIN))
        put(raw)
    elif isinstance(obj, bool):
        put(b"\xc3" if obj else b"\xc2")
    elif isinstance(obj, int):
        put(_int(int(obj)))
    elif isinstance(obj, float):
        put(b"\xcb" + _F64.pack(obj))
    elif isinstance(obj, str):  # a str enum: its value
        _encode(str.__str__(obj), put, depth)
    else:
        raise TypeError(f"can not serialize {kind.__name__!r} object")
