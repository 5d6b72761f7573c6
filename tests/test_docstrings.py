"""Public definitions carry a docstring (issue 13, item 5): every public class, and every function
a driver calls, so that a newcomer reads what a thing is for without reading its body.

Read from the source with `ast`, so nothing is imported. Public means a name without a leading
underscore, at module level or inside a public class (methods of private classes, and functions
nested in functions, are not checked). Which packages each check covers is a constant below, so
that packages join as they are brought up to it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PRODUCT_PACKAGES = ("common", "poolD", "faultD", "llic", "sim")

# Packages whose public classes must have a docstring. llic is not in yet: it is being
# refactored (issue 13, items 2 and 3); add it once that work is merged.
CLASS_PACKAGES = ("common", "poolD", "faultD", "sim")

# Packages whose public functions and methods must all have a docstring. llic: as above.
FUNCTION_PACKAGES = ("common", "poolD", "faultD", "sim")

# The protocol cores and their drivers: their public methods are what drivers and applications
# call. Found by name wherever they are defined in CORE_PACKAGES, since modules move.
CORES_AND_DRIVERS = frozenset(
    {"OverlayNode", "RoleMachine", "PoolCore", "UdpOverlay", "PoolDaemon", "FaultDaemon", "Gateway"}
)
# llic's core and chef, checked the same way once llic is in CORE_PACKAGES. llic's refactoring
# may rename them, so unlike the above they need not exist.
LLIC_CORES = frozenset({"MasterCore", "Chef"})
# llic is not in yet (being refactored; MasterCore's and Chef's methods lack docstrings today):
# add it once that work is merged.
CORE_PACKAGES = ("common", "poolD", "faultD", "sim")

# Files (or directories, ending in "/") left out of every check while others edit them for issue
# 13: remove each entry once that work is merged (test_excluded_paths_exist fails for an entry
# whose file has left).
EXCLUDED_PATHS = ()


@dataclass(frozen=True)
class Definition:
    """One public class, function or method, where it is defined."""

    path: str  # relative to the repository root
    line: int
    qualname: str  # "Class.method" for a method
    node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    owner: str | None  # the class a method belongs to

    @property
    def has_docstring(self) -> bool:
        return ast.get_docstring(self.node) is not None

    def __str__(self) -> str:
        kind = "class" if isinstance(self.node, ast.ClassDef) else "def"
        return f"{self.path}:{self.line}: {kind} {self.qualname}"


def _excluded(path: str) -> bool:
    return any(path == e or (e.endswith("/") and path.startswith(e)) for e in EXCLUDED_PATHS)


def _public(body: list[ast.stmt], path: str, prefix: str, owner: str | None) -> Iterator[Definition]:
    for node in body:
        if isinstance(node, ast.If | ast.Try):  # definitions under `if TYPE_CHECKING:` and the like
            for block in (node.body, node.orelse, getattr(node, "finalbody", [])):
                yield from _public(block, path, prefix, owner)
            continue
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name.startswith("_"):
            continue
        yield Definition(path, node.lineno, prefix + node.name, node, owner)
        if isinstance(node, ast.ClassDef):
            yield from _public(node.body, path, f"{prefix}{node.name}.", node.name)


def public_definitions(packages: tuple[str, ...]) -> list[Definition]:
    """Every public class, function and method in the packages' modules, excluded paths aside."""
    found = []
    for package in packages:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            if not _excluded(path):
                found += _public(ast.parse(file.read_text(), filename=path).body, path, "", None)
    return found


def _fail_on(missing: list[Definition], what: str) -> None:
    if missing:
        listing = "\n".join(f"  {d}" for d in missing)
        pytest.fail(f"{len(missing)} {what} without a docstring:\n{listing}", pytrace=False)


def test_the_checked_packages_are_product_packages() -> None:
    """A misspelt package would be checked as empty, and pass."""
    for package in PRODUCT_PACKAGES:
        assert any((ROOT / package).glob("*.py")), f"{package}: no modules"
    for constant in (CLASS_PACKAGES, FUNCTION_PACKAGES, CORE_PACKAGES):
        assert set(constant) <= set(PRODUCT_PACKAGES), constant


def test_excluded_paths_exist() -> None:
    """An exclusion outliving its file would hide whatever later takes its name."""
    stale = [e for e in EXCLUDED_PATHS if not (ROOT / e).exists()]
    assert not stale, f"no longer there, remove from EXCLUDED_PATHS: {stale}"


def test_public_classes_have_docstrings() -> None:
    classes = [d for d in public_definitions(CLASS_PACKAGES) if isinstance(d.node, ast.ClassDef)]
    assert classes
    missing = [d for d in classes if not d.has_docstring]
    _fail_on(missing, "public classes")


def test_public_functions_and_methods_have_docstrings() -> None:
    functions = [d for d in public_definitions(FUNCTION_PACKAGES) if not isinstance(d.node, ast.ClassDef)]
    assert functions
    missing = [d for d in functions if not d.has_docstring]
    _fail_on(missing, "public functions and methods")


def test_cores_and_drivers_are_found() -> None:
    """A renamed core must be renamed here too, or its methods would silently go unchecked."""
    defined = {d.node.name for d in public_definitions(CORE_PACKAGES) if isinstance(d.node, ast.ClassDef)}
    assert not CORES_AND_DRIVERS - defined, f"not found in {CORE_PACKAGES}: {CORES_AND_DRIVERS - defined}"


def test_methods_of_cores_and_drivers_have_docstrings() -> None:
    cores = CORES_AND_DRIVERS | LLIC_CORES
    methods = [
        d
        for d in public_definitions(CORE_PACKAGES)
        if d.owner in cores and not isinstance(d.node, ast.ClassDef)
    ]
    assert methods
    missing = [d for d in methods if not d.has_docstring]
    _fail_on(missing, "public methods of protocol cores and drivers")
