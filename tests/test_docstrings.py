"""Public definitions carry a docstring (issue 13, item 5): every public class, and every function
a driver calls, so that a newcomer reads what a thing is for without reading its body.

Read from the source with `ast`, so nothing is imported. Public means a name without a leading
underscore, at module level or inside a public class (methods of private classes, and functions
nested in functions, are not checked).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every package installed with the project: each public class, function and method in them.
PRODUCT_PACKAGES = ("common", "poolD", "faultD", "llic", "sim")


@dataclass(frozen=True)
class Definition:
    """One public class, function or method, where it is defined."""

    path: str  # relative to the repository root
    line: int
    qualname: str  # "Class.method" for a method
    node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef

    @property
    def has_docstring(self) -> bool:
        return ast.get_docstring(self.node) is not None

    def __str__(self) -> str:
        kind = "class" if isinstance(self.node, ast.ClassDef) else "def"
        return f"{self.path}:{self.line}: {kind} {self.qualname}"


def _public(body: list[ast.stmt], path: str, prefix: str) -> Iterator[Definition]:
    for node in body:
        if isinstance(node, ast.If | ast.Try):  # definitions under `if TYPE_CHECKING:` and the like
            for block in (node.body, node.orelse, getattr(node, "finalbody", [])):
                yield from _public(block, path, prefix)
            continue
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name.startswith("_"):
            continue
        yield Definition(path, node.lineno, prefix + node.name, node)
        if isinstance(node, ast.ClassDef):
            yield from _public(node.body, path, f"{prefix}{node.name}.")


def public_definitions(packages: tuple[str, ...]) -> list[Definition]:
    """Every public class, function and method in the packages' modules."""
    found = []
    for package in packages:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            found += _public(ast.parse(file.read_text(), filename=path).body, path, "")
    return found


def _fail_on(missing: list[Definition], what: str) -> None:
    if missing:
        listing = "\n".join(f"  {d}" for d in missing)
        pytest.fail(f"{len(missing)} {what} without a docstring:\n{listing}", pytrace=False)


def test_the_checked_packages_exist() -> None:
    """A misspelt or moved package would be checked as empty, and pass."""
    for package in PRODUCT_PACKAGES:
        assert any((ROOT / package).glob("*.py")), f"{package}: no modules"


def test_public_classes_have_docstrings() -> None:
    classes = [d for d in public_definitions(PRODUCT_PACKAGES) if isinstance(d.node, ast.ClassDef)]
    assert classes
    _fail_on([d for d in classes if not d.has_docstring], "public classes")


def test_public_functions_and_methods_have_docstrings() -> None:
    """Every function a driver calls among them: the cores' and drivers' public methods."""
    functions = [d for d in public_definitions(PRODUCT_PACKAGES) if not isinstance(d.node, ast.ClassDef)]
    assert functions
    _fail_on([d for d in functions if not d.has_docstring], "public functions and methods")
