"""llic's configuration: the seed's `llic_config` file (§5), read the way HTCondor reads its own.

The file is `KEY = VALUE` lines; `#` starts a comment line, blank lines are skipped, keys are
case-insensitive (as in HTCondor), a later line overrides an earlier one (as in HTCondor), an
empty value means "the default" (as `param()` treats an empty macro), a value may be wrapped in
double quotes (the seed writes its defaults that way), and `$ENV(NAME)` / `$(KEY)` are expanded
(`$(KEY)` from lines above). Anything else is a user error reported in one line,
`file:line: KEY: why`, so `run_main` can print it without a traceback.

Which file: the command-line argument, else the file named by `LLIC_CONFIG_FILENAME`, else no
file at all (every default), which is what the seed's `master_submitter job.sub` does.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from common.condor.knobs import check_host
from common.config import ConfigError, StrictModel, read_config_text
from llic.netadmit import format_capacity, parse_capacity

CONFIG_ENV = "LLIC_CONFIG_FILENAME"
SITE_CONFIG = Path("/etc/llic/llic_config")  # the submit host's own (condor-selforg install llic)
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_SIZE = 1 << 50  # a pebibyte: beyond any result's files, and far inside what int64 and msgpack carry


def parse_size(text: str) -> int:
    """Bytes from '16MB', '512k', '1GiB' or '4096' (K, M, G: powers of 1024, B optional)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text.strip()!r} is not a size like 16MB (a number of bytes, or K, M, G)")
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]  # inf if absurdly long
    if not size <= MAX_SIZE:
        raise ValueError(f"more than {MAX_SIZE >> 30}GB, the most a size may be")
    return int(size)


class FilesStyle(StrEnum):
    """How returned output files are placed (seed §3.9.2, "Files transformation modes")."""

    CONDOR = "condor"  # as HTCondor does: into the job's working directory
    IMPROVED = "improved"  # output/error where the submit file says; subdirectories kept


class LlicConfig(StrictModel):
    """The seed's §5 parameters with its defaults, plus the few the master needs beyond them.

    Field names are the file's keys in lower case; `snapshot()` gives them back in upper case.
    """

    window_size: int = Field(
        6, ge=1, description="tasks an agent holds at once (§3.9.4); 1 = no overlap of I/O and runs"
    )
    max_window_size: int = Field(
        32,
        ge=1,
        description=(
            "tasks an agent may hold while the master's tasks are short (run times so short that"
            " this many hold at most 0.05 s of work, chef.SHORT_QUEUE_S): fewer messages per task;"
            " at or below WINDOW_SIZE: always WINDOW_SIZE"
        ),
    )
    initial_jobs_number: int = Field(
        0, ge=0, description="tasks written into an agent's input file, started before it connects"
    )
    files_style_mode: FilesStyle = Field(FilesStyle.CONDOR, description="condor or improved (§3.9.2)")
    llic_debug: bool = Field(False, description="debug logging in master_submitter, master and agents")
    num_agent_recoveries: int = Field(
        3, ge=0, description="times a chef resubmits its failed agent before it is unrecoverable"
    )
    max_chefs_number: int = Field(50, ge=1, description="agents (one chef each) per master, at most")
    initial_master_port_number: int = Field(
        2853, ge=0, le=65535, description="first port the master tries for agents; 0: any free port"
    )
    master_listen_address: str = Field(
        "",
        description=(
            "where the master listens for its agents: an IPv4 address or host name of this "
            "machine, or * for every address. Empty: the address agents are told to connect to "
            "(the schedd's, i.e. the submit host's pool-facing address), not every address"
        ),
    )
    condor_executables_path: Path | None = Field(
        None,
        description=(
            "directory of condor_submit, condor_q, ... Only the benchmark's plain-condor_submit "
            "comparison and the tests run these tools: master_submitter, the master and its chefs "
            "reach HTCondor through the python bindings (common.condor.Gateway). Unset: PATH. "
            "(The seed's default /usr/local/condor/bin/ is not where packaged HTCondor lives.)"
        ),
    )
    master_executables_path: Path = Field(
        Path("."),
        description="directory of the files llic ships with jobs: the agent zipapp (agent.pyz)",
    )
    master_outputs_dir_prefix_path: str = Field(
        ".",
        min_length=1,
        description=(
            "prefix of each master's output directory (state file, agent files, logs); a directory "
            "(existing, or written with a trailing /) holds one subdirectory per master, any other "
            "prefix is extended with the master's id; master_q ALL looks there"
        ),
    )
    master_token_lifetime: int = Field(
        86400,
        ge=0,
        description=(
            "seconds the master's token lasts: master_submitter fetches, for the submitting user, "
            "a token bounded to READ and WRITE at the master's schedd (condor_token_fetch) and "
            "gives it to the master only (its output directory, 0600), because a job cannot "
            "always authenticate as its owner by FS (docs/security-htcondor.md). A master that "
            "runs longer loses its schedd when it expires; 0: no token (the pool's own methods)"
        ),
    )
    # Beyond the seed: numbers it leaves open, and timers its master loop implies.
    max_task_failures: int = Field(
        3,
        ge=1,
        description=(
            "failed tasks (prepare or launch failures) one agent may report before its chef "
            "declares the agent failed and resubmits it elsewhere (§3.10: 'too many failed tasks', "
            "a number the seed leaves open)"
        ),
    )
    max_task_attempts: int = Field(
        3,
        ge=1,
        description=(
            "failed runs of one task (on different agents when possible) before the task is failed "
            "for good; runs lost with their agent do not count. The seed retries without bound, so "
            "one task no machine can start would keep the master alive forever"
        ),
    )
    reschedule_interval: float = Field(
        10.0, gt=0, description="seconds between condor_reschedule calls while agents wait (§3.7 step 7)"
    )
    queue_poll_interval: float = Field(
        15.0,
        gt=0,
        description="seconds between schedd queue reads that find agents gone from the queue (§3.7)",
    )
    periodic_expr_interval: float = Field(
        60.0,
        gt=0,
        description=(
            "seconds between evaluations of the tasks' periodic_hold, periodic_release and "
            "periodic_remove (HTCondor's PERIODIC_EXPR_INTERVAL)"
        ),
    )
    state_save_interval: float = Field(
        2.0,
        gt=0,
        description=(
            "longest time a change waits before the state file is rewritten; results newer than the "
            "last save are run again after a master crash (never recorded twice)"
        ),
    )

    network_capacity: str = Field(
        "",
        description=(
            "per-subnet limits on llic's transfers, 'CIDR:rate, ..., default:rate' (rate units bps, "
            "Kbps, Mbps, Gbps; 'default' is each unlisted /24); a task whose inputs travel is sent "
            "only while its agent's subnet stays under its limit (llic/netadmit.py). Empty: none"
        ),
    )
    network_transfers_per_subnet: int = Field(
        4,
        ge=1,
        description=(
            "input transfers at once per limited subnet: each reserves (and is paced at) the limit "
            "divided by this, or the job's +LlicMinMbps if higher"
        ),
    )

    bulk_output_threshold: int = Field(
        16 * 1024 * 1024,
        ge=0,
        le=MAX_SIZE,
        description=(
            "bytes of a result's files above which the agent asks before sending them, so that "
            "large outputs are returned one at a time per subnet (FIFO) and finish sooner instead "
            "of sharing the link; smaller results go at once. A number of bytes or 16MB, 512KB, "
            "1GB (K/M/G are powers of 1024), at most 1048576GB; 0: off (every result goes at once)"
        ),
    )

    @field_validator("bulk_output_threshold", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        """16MB as bytes, so the file can say it the way people do; a typo names the key."""
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("network_capacity", mode="before")
    @classmethod
    def _capacity(cls, value: Any) -> Any:
        """Parsed now so a typo is a one-line error naming the key, kept in canonical form."""
        if not isinstance(value, str):
            return value
        return format_capacity(parse_capacity(value))

    @field_validator("master_listen_address")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        value = value.strip()
        if value in ("", "*"):
            return value
        check_host(value)  # raises ValueError naming the bad text
        if ":" in value:
            raise ValueError(f"{value!r}: the master listens on IPv4 (an IPv4 address or a host name)")
        return value

    @field_validator("files_style_mode", mode="before")
    @classmethod
    def _style_any_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    def snapshot(self) -> dict[str, Any]:
        """KEY -> JSON value, for the master's state file and the config a master is handed."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump(mode="json").items():
            out[name.upper()] = value
        return out

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any], *, source: str = "config snapshot") -> LlicConfig:
        """The inverse of snapshot(); errors are ConfigError naming `source` and the key."""
        values: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key).lower()
            if name not in cls.model_fields:
                raise ConfigError(f"{source}: {str(key).upper()}: {_unknown(name)}")
            values[name] = value
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            err = e.errors()[0]
            key = str(err["loc"][0]).upper() if err["loc"] else "(config)"
            raise ConfigError(f"{source}: {key}: {err['msg']} (got {err.get('input')!r})") from None

    def resolved(self, base: Path) -> LlicConfig:
        """Relative paths made absolute against `base` (the directory master_submitter ran in),
        so that a master started by HTCondor elsewhere finds the same places."""
        prefix = self.master_outputs_dir_prefix_path
        trailing = prefix.endswith("/")
        prefix_abs = str(base / prefix) if not os.path.isabs(prefix) else prefix
        prefix_abs = os.path.normpath(prefix_abs) + ("/" if trailing else "")
        condor = self.condor_executables_path
        return self.model_copy(
            update={
                "master_executables_path": base / self.master_executables_path,
                "condor_executables_path": None if condor is None else base / condor,
                "master_outputs_dir_prefix_path": prefix_abs,
            }
        )

    def condor_tool(self, name: str) -> str:
        """Where the HTCondor command-line tool `name` is (only the benchmark runs them)."""
        if self.condor_executables_path is not None:
            return str(self.condor_executables_path / name)
        return shutil.which(name) or name


def render_llic_config(config: LlicConfig) -> str:
    """The file text that load_llic_config reads back as `config` (what a master is handed)."""
    lines = ["# llic configuration (KEY = VALUE, keys case-insensitive)"]
    for key, value in config.snapshot().items():
        if value is None:
            text = ""
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        lines.append(f"{key} = {text}" if text else f"{key} =")
    return "\n".join(lines) + "\n"


_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")
_MACRO = re.compile(r"\$(ENV)?\(([^()]*)\)")


def load_llic_config(
    path: Path | None = None, environ: Mapping[str, str] | None = None, *, site: Path = SITE_CONFIG
) -> LlicConfig:
    """The argument's file, else $LLIC_CONFIG_FILENAME's, else the submit host's `site` file
    (/etc/llic/llic_config) if there is one, else all defaults; ConfigError on any user mistake."""
    env = os.environ if environ is None else environ
    if path is None:
        named = env.get(CONFIG_ENV, "")
        if not named:
            if not site.exists():
                return LlicConfig()
            named = str(site)
        path = Path(named)
        origin = f" (from {CONFIG_ENV})" if named != str(site) else ""
    else:
        origin = ""
    text = read_config_text(path, missing="no such config file", origin=origin)
    return parse_llic_config(text, source=str(Path(path)), environ=env)


def parse_llic_config(text: str, *, source: str, environ: Mapping[str, str] | None = None) -> LlicConfig:
    """Validate `KEY = VALUE` text; `source` names it in errors."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}  # field name -> raw value (after expansion)
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(raw)
        if match is None:
            raise ConfigError(f"{source}:{number}: expected KEY = VALUE, got {stripped[:60]!r}")
        key, value = match.group(1), match.group(2)
        name = key.lower()
        if name not in LlicConfig.model_fields:
            raise ConfigError(f"{source}:{number}: {key.upper()}: {_unknown(name)}")
        value = _expand(value, values, env, where=f"{source}:{number}: {key.upper()}")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        values[name] = value
        lines[name] = number
    given = {name: value for name, value in values.items() if value != ""}
    for name, value in given.items():  # one field at a time: the error names its line
        try:
            LlicConfig.model_validate({name: value})
        except ValidationError as e:
            err = e.errors()[0]
            raise ConfigError(
                f"{source}:{lines[name]}: {name.upper()}: {_why(err['msg'])} (got {value!r})"
            ) from None
    try:
        return LlicConfig.model_validate(given)
    except ValidationError as e:  # a rule across fields (none today): no single line to name
        raise ConfigError(f"{source}: {e.errors()[0]['msg']}") from None


def _expand(value: str, earlier: Mapping[str, str], env: Mapping[str, str], *, where: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(2)
        if match.group(1):
            if name not in env:
                raise ConfigError(f"{where}: $ENV({name}) is not set")
            return env[name]
        if name.lower() not in earlier:
            raise ConfigError(f"{where}: $({name}) is not defined above")
        return earlier[name.lower()]

    return _MACRO.sub(one, value)


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, LlicConfig.model_fields, n=1)
    hint = f"; did you mean {close[0].upper()}?" if close else ""
    return f"unknown parameter{hint}"


def _why(message: str) -> str:
    return message[:1].lower() + message[1:]
