# ruff: noqa: UP007, UP042, N815  (runs on Python 3.9: typing.Union, no enum.StrEnum; ast names)
"""Evaluation only: lets Debian 12's PyPy (7.3.11, Python 3.9) import the overlay simulator, to
time it against CPython (docs/results.md, ninth round). Not for the daemons, which need 3.11.

On PYTHONPATH (with SHIM_ROOT set to the tree) it supplies what 3.9 lacks: typing.Self and
friends from typing_extensions, enum.StrEnum, tomllib (tomli), dataclasses' slots=True (dropped:
only memory differs), `A | B` of types at module and class level (rewritten, for modules under
SHIM_ROOT, into a call that falls back to typing.Union), and scipy (a stub: the transit-stub
matrix is made by CPython, see run_cpu.py). gc.disable is made a no-op: on PyPy it stops major
collections and the heap grows."""

import ast
import builtins
import dataclasses
import enum
import gc
import importlib.abc
import importlib.machinery
import os
import sys
import typing

import tomli
import typing_extensions

_NEW_IN_TYPING = (
    "Self assert_never Never LiteralString Required NotRequired TypeAlias ParamSpec Concatenate".split()
)
_NEW_IN_TYPING += "TypeGuard dataclass_transform Unpack override".split()
for _name in _NEW_IN_TYPING:
    if not hasattr(typing, _name) and hasattr(typing_extensions, _name):
        setattr(typing, _name, getattr(typing_extensions, _name))

if not hasattr(enum, "StrEnum"):

    class StrEnum(str, enum.Enum):
        def __str__(self) -> str:
            return str(self.value)

    enum.StrEnum = StrEnum  # type: ignore[misc]

_dataclass = dataclasses.dataclass


def _dataclass_39(cls=None, /, **kw):  # type: ignore[no-untyped-def]
    for key in ("slots", "kw_only", "match_args"):
        kw.pop(key, None)
    return _dataclass(cls, **kw) if cls is not None else _dataclass(**kw)


dataclasses.dataclass = _dataclass_39  # type: ignore[assignment]


def _or(self, other):  # type: ignore[no-untyped-def]
    return typing.Union[self, other]


def _ror(self, other):  # type: ignore[no-untyped-def]
    return typing.Union[other, self]


for _cls in (typing._GenericAlias, typing._SpecialForm, typing.TypeVar):  # type: ignore[attr-defined]
    _cls.__or__ = _or
    _cls.__ror__ = _ror

sys.modules.setdefault("tomllib", tomli)


def _union_or(a, b):  # type: ignore[no-untyped-def]
    try:
        return a | b
    except TypeError:
        return typing.Union[a, b]


builtins.__union_or__ = _union_or  # type: ignore[attr-defined]


class _UnionsAtTopLevel(ast.NodeTransformer):
    """`a | b` outside function bodies -> __union_or__(a, b) (function bodies keep their `|`)."""

    def visit_FunctionDef(self, node: ast.AST) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.BitOr):
            call = ast.Call(
                func=ast.Name("__union_or__", ast.Load()), args=[node.left, node.right], keywords=[]
            )
            return ast.copy_location(call, node)
        return node


_ROOT = os.environ.get("SHIM_ROOT", "")


class _Loader(importlib.machinery.SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):  # type: ignore[no-untyped-def,override]
        tree = ast.fix_missing_locations(_UnionsAtTopLevel().visit(ast.parse(data, path)))
        return compile(tree, path, "exec", dont_inherit=True, optimize=_optimize)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec and spec.origin and _ROOT and spec.origin.startswith(_ROOT) and spec.origin.endswith(".py"):
            spec.loader = _Loader(name, spec.origin)
        return spec


sys.meta_path.insert(0, _Finder())
gc.disable = lambda: None
