"""TOML configuration files validated by pydantic models.

Every daemon reads its settings through `load_config(path, Model)`. A user's mistake (missing
file, bad TOML, unknown key, wrong type) becomes a `ConfigError` whose text is one line naming the
file and the key, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from common.files import read_regular


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable once read, and
    no number is infinite or NaN (TOML has both; no setting means them, and arithmetic on them
    broke later, far from the file: `advertise_interval = inf` ended the daemon after its start)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


M = TypeVar("M", bound=BaseModel)


CONFIG_BYTES_LIMIT = 4 << 20  # a config or policy file; a policy naming 10,000 pools is ~1 MB


class ConfigError(Exception):
    """A configuration file the user must fix; str() is a single line naming file and key."""


def read_config_text(path: str | Path, *, missing: str = "file not found", origin: str = "") -> str:
    """A configuration file's text (UTF-8), whatever its syntax: the daemons' TOML here, llic's
    HTCondor-style `KEY = VALUE` (llic/config.py). A missing or unreadable file is a ConfigError
    of one line naming it; `missing` says what a missing one is called, `origin` where its name
    came from (" (from LLIC_CONFIG_FILENAME)")."""
    path = Path(path)
    try:
        return read_regular(path, CONFIG_BYTES_LIMIT).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {missing}{origin}") from None
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"{path}: cannot read: {reason}{origin}") from None


def load_config(path: str | Path, model: type[M]) -> M:
    """Read and validate a TOML file; raise ConfigError on any user error."""
    return parse_config(read_config_text(path), model, source=str(Path(path)))


def parse_config(text: str, model: type[M], *, source: str) -> M:
    """Validate TOML text; `source` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid TOML: arrays or tables nested too deep") from None
    return validate_config(data, model, source=source)


def validate_config(data: dict[str, Any], model: type[M], *, source: str) -> M:
    """Validate parsed data against `model`; ConfigError naming `source` and the key."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None


def format_validation_error(error: ValidationError, source: str) -> str:
    """One line: `source`, the first problem and its key, and how many more there are."""
    problems = [_describe(err) for err in error.errors()]
    line = f"{source}: {problems[0]}"
    if len(problems) > 1:
        line += f" (and {len(problems) - 1} more: " + "; ".join(problems[1:]) + ")"
    return line


def _describe(err: Any) -> str:
    key = ".".join(str(part) for part in err["loc"]) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown key '{key}'"
    if kind == "missing":
        return f"missing required key '{key}'"
    msg = err["msg"]
    if "input" in err and not isinstance(err["input"], dict):
        return f"key '{key}': {msg} (got {err['input']!r})"
    return f"key '{key}': {msg}"
