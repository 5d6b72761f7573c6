"""What a SIGHUP can change in a running daemon, and what needs a restart.

A daemon re-reads its config file and compares it with the one it runs by: each changed key
(dotted, e.g. `daemon.log_level`) is either one the daemon can take on the fly (`reloadable`,
a key or a whole section) or one that needs `systemctl restart`. The daemon applies the first
kind, keeps the old value of the second, and its log line names both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel


def changed_keys(old: BaseModel, new: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the leaf keys whose values differ between two configs of one model."""
    out = []
    for name in type(old).model_fields:
        a, b = getattr(old, name), getattr(new, name)
        key = f"{prefix}{name}"
        if isinstance(a, BaseModel) and isinstance(b, BaseModel) and type(a) is type(b):
            out += changed_keys(a, b, key + ".")
        elif a != b:
            out.append(key)
    return out


@dataclass(frozen=True)
class ReloadPlan:
    """The changed keys a reload takes on (`apply`), and those that wait for a restart."""

    apply: tuple[str, ...]
    restart: tuple[str, ...]


def plan_reload(old: BaseModel, new: BaseModel, reloadable: Iterable[str]) -> ReloadPlan:
    """Split the changes between `old` and `new` by `reloadable` (keys, or section prefixes)."""
    allowed = tuple(reloadable)

    def ok(key: str) -> bool:
        return any(key == r or key.startswith(r + ".") for r in allowed)

    keys = changed_keys(old, new)
    return ReloadPlan(tuple(k for k in keys if ok(k)), tuple(k for k in keys if not ok(k)))
