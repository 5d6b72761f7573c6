"""What may reach HTCondor's configuration, and in what form: a grammar and one gate.

poolD and faultD change HTCondor with values that came, one way or another, from other machines:
a FlockIntent's schedd hosts become FLOCK_FROM, an offer's collector becomes FLOCK_TO, a manager's
alive names COLLECTOR_HOST, a replica's files become config files on a replacement. HTCondor's
config language has macros (`$(...)`), several assignments per file, includes, `use` of
templates and multi-line `@=` values, so a value that carries a newline, a `$(`, or an `=` can
change any knob, ALLOW_ADMINISTRATOR included. Nothing here trusts the sender.

- Every value has a grammar of its own: host names (RFC 1123), IP addresses, `host:port`,
  sinful strings, CIDR blocks, pool names, daemon names, numbers, booleans. Each grammar is a
  whitelist of characters and shapes; none admits a control character, `$`, `=`, `\\`, `#`, `@`,
  quotes or a backquote.
- A `KnobScope` is the allow-list of one writer (poolD's FLOCK_TO, faultD's role file, a central
  manager's replicated config...): which knobs it may set, each with its value grammar.
- `check_config(scope, values)` is the gate: it returns a `CheckedConfig`, the only thing the two
  sinks accept (`Gateway.set_config` for runtime values, `config_files.write_config_file` for
  files in LOCAL_CONFIG_DIR). A refused value raises `KnobRefused`, naming the writer, the knob
  and why.
- `parse_config_text(scope, text)` reads a config file that came from another machine (a
  replica) strictly: blank lines, comment lines and `KNOB = value` lines whose knob is in the
  scope and whose value passes its grammar; anything else (include, use, if, `@=`, line
  continuations, unknown knobs) refuses the whole file.

Pure string work, standard library only: the gateway's worker process imports it too.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

MAX_VALUE = 32_768  # longest value any writer needs (FLOCK_FROM of MAX_LIST hosts)
MAX_LIST = 512  # entries in a list-valued knob
MAX_FILE = 65_536  # bytes of a replicated config file
MAX_HOSTNAME = 253

Grammar = Callable[[str], None]  # raises ValueError naming what is wrong


class KnobRefused(ValueError):
    """A knob or value that must not reach HTCondor's configuration; names who tried and why."""

    def __init__(self, scope: str, knob: str, why: str, value: str | None = None) -> None:
        shown = "" if value is None else f" = {value[:80]!r}{'...' if len(value) > 80 else ''}"
        super().__init__(f"{scope}: {knob}{shown}: {why}")
        self.scope = scope
        self.knob = knob
        self.why = why


# ----------------------------------------------------------------------------- single tokens

_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_KNOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,126}[A-Za-z0-9_]$|^[A-Za-z]$")
_DAEMON = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
_POOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_NUMBER = re.compile(r"^-?[0-9]{1,15}(?:\.[0-9]{1,15})?(?:[eE][-+]?[0-9]{1,3})?$")
_BOOL = re.compile(r"^(?:true|false|yes|no|t|f)$", re.IGNORECASE)
_GROUP = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.]{0,127}$")
_DEBUG_FLAG = re.compile(r"^D_[A-Z_]{1,32}(?::[0-9])?$")
_TEXT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,127}$")
# A sinful string's parameters: printable ASCII without blanks, quotes, '<', '>', '$' or '\\'.
_SINFUL_PARAMS = re.compile(r"[^\x00-\x20\x7f-\U0010ffff<>\"'`$\\]{0,1024}")
# What no value may hold, whatever its grammar: the characters that end a value, start a macro,
# an assignment, a comment, a heredoc or a quoted string in HTCondor's config language.
_FORBIDDEN = re.compile(r"[^\x20-\x7e]|[$=\\#@\"'`;{}]")


def check_hostname(text: str) -> str:
    """An RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens; the
    last label is not all digits (that would be a mistyped IPv4 address)."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_HOSTNAME:
        raise ValueError(f"{text!r:.80} is not a host name (1 to {MAX_HOSTNAME} characters)")
    labels = text.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{text!r:.80} is not a host name (letters, digits, '-' and '.')")
    if labels[-1].isdigit():
        raise ValueError(f"{text!r:.80} is neither a host name nor an IP address")
    return text


def check_ip(text: str) -> str:
    """An IPv4 or IPv6 address, as written (IPv6 without brackets)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r:.80} is not an IP address") from None
    if "%" in text:
        raise ValueError(f"{text!r:.80}: scoped IPv6 addresses are not accepted")
    return text


def check_host(text: str) -> str:
    """A host name or an IP address."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r:.80} is not a host")
    try:
        return check_ip(text)
    except ValueError:
        pass
    try:
        return check_hostname(text)
    except ValueError:
        raise ValueError(f"{text!r:.80} is not a host name or an IP address") from None


def _port(text: str, whole: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{whole!r:.80}: port must be 1-65535")
    return int(text)


def split_host_port(text: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' as (host, port), both checked."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r:.80} is not host:port")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"{text!r:.80} is not [address]:port")
        if ":" not in host:
            raise ValueError(f"{text!r:.80}: only IPv6 addresses go in brackets")
        return check_ip(host), _port(port, text)
    host, sep, port = text.rpartition(":")
    if not sep or ":" in host:
        raise ValueError(f"{text!r:.80} is not host:port")
    return check_host(host), _port(port, text)


def check_host_port(text: str) -> str:
    """'host:port' (IPv6 as '[address]:port')."""
    split_host_port(text)
    return text


def check_host_or_host_port(text: str) -> str:
    """'host' or 'host:port': how FLOCK_TO and COLLECTOR_HOST name a collector."""
    if isinstance(text, str) and (":" not in text or (text.count(":") > 1 and not text.startswith("["))):
        return check_host(text)
    return check_host_port(text)


def check_cidr(text: str) -> str:
    """A CIDR block 'address/prefix' (host bits may be set, as HTCondor allows)."""
    if not isinstance(text, str) or "/" not in text:
        raise ValueError(f"{text!r:.80} is not a CIDR block (address/prefix)")
    address, _, prefix = text.partition("/")
    check_ip(address)
    if not prefix.isascii() or not prefix.isdigit():
        raise ValueError(f"{text!r:.80}: prefix must be a number")
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError as e:
        raise ValueError(f"{text!r:.80} is not a CIDR block: {e}") from None
    return text


def check_sinful(text: str) -> str:
    """A sinful string as HTCondor daemons write them: '<host:port>' or '<host:port?params>'."""
    if not isinstance(text, str) or not (text.startswith("<") and text.endswith(">")):
        raise ValueError(f"{text!r:.80} is not a sinful string <host:port?...>")
    inner, _, params = text[1:-1].partition("?")
    split_host_port(inner)
    if not _SINFUL_PARAMS.fullmatch(params):
        raise ValueError(f"{text!r:.80}: unexpected characters after '?'")
    return text


def check_pool_name(text: str) -> str:
    """A pool's name in the federation (letters, digits, '.', '_', '-'; up to 128)."""
    if not isinstance(text, str) or not _POOL.fullmatch(text):
        raise ValueError(f"{text!r:.80} is not a pool name")
    return text


def check_knob_name(text: str) -> str:
    """An HTCondor configuration knob's name: a letter, then letters, digits, '_' and inner '.'
    (hierarchical group names: GROUP_QUOTA_group_physics.hep)."""
    if not isinstance(text, str) or not _KNOB_NAME.fullmatch(text):
        raise ValueError(f"{text!r:.80} is not a configuration knob name")
    return text


def check_daemon_name(text: str) -> str:
    """A DAEMON_LIST entry: MASTER, SCHEDD, COLLECTOR..."""
    if not isinstance(text, str) or not _DAEMON.fullmatch(text):
        raise ValueError(f"{text!r:.80} is not a daemon name (upper-case letters, digits, '_')")
    return text


def check_value_text(text: str) -> str:
    """What every value must be, whatever its grammar: printable ASCII without the characters
    that end a value or start a macro, an assignment, a comment or a quote, at most MAX_VALUE
    long. The gateway's worker applies this to anything it is asked to set."""
    if not isinstance(text, str):
        raise ValueError(f"a value must be text, not {type(text).__name__}")
    if len(text) > MAX_VALUE:
        raise ValueError(f"value longer than {MAX_VALUE} characters")
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        raise ValueError(f"character {bad.group()!r} is not allowed in a value")
    if text != text.strip():
        raise ValueError("leading or trailing blanks")
    return text


# ----------------------------------------------------------------------------- host globs (grants)


def check_host_grant(text: str) -> str:
    """What a policy may grant beyond single hosts: a host, a CIDR block (not /0), a domain glob
    '*.example.org' (at least two labels after the '*'), or an address prefix glob '10.1.*'
    (at least two octets). Never '*' alone, and never a glob in the middle of a name."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r:.80} is not a host grant")
    if "/" in text:
        check_cidr(text)
        if ipaddress.ip_network(text, strict=False).prefixlen == 0:
            raise ValueError(f"{text!r:.80} grants every address")
        return text
    if text.startswith("*."):
        rest = text[2:]
        check_hostname(rest)
        if rest.count(".") < 1:
            raise ValueError(f"{text!r:.80}: a domain glob needs at least two labels after '*.'")
        return text
    if text.endswith(".*"):
        octets = text[:-2].split(".")
        if not (2 <= len(octets) <= 3 and all(o.isascii() and o.isdigit() and int(o) < 256 for o in octets)):
            raise ValueError(f"{text!r:.80}: an address glob is 2 or 3 octets followed by '.*'")
        return text
    if "*" in text or "?" in text or "[" in text:
        raise ValueError(f"{text!r:.80}: only '*.domain' and 'a.b.*' globs may be granted")
    return check_host(text)


def is_host_glob(text: str) -> bool:
    """Whether a grant covers more than one host (a glob or a CIDR block)."""
    return "*" in text or "/" in text


def grant_covers(grant: str, host: str) -> bool:
    """Whether a granted entry (host, glob or CIDR) covers one plain host (name or address)."""
    if grant == host:
        return True
    if "/" in grant:
        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(grant, strict=False)
        except ValueError:
            return False
    if "*" in grant:
        return fnmatch.fnmatchcase(host.lower(), grant.lower())
    return grant.lower() == host.lower()


# ----------------------------------------------------------------------------- value grammars


def _one(check: Callable[[str], object]) -> Grammar:
    def grammar(value: str) -> None:
        check(value)

    grammar.__doc__ = check.__doc__
    return grammar


def split_list(value: str) -> list[str]:
    """The entries of a list value, as HTCondor splits them (commas and blanks)."""
    return [part for part in re.split(r"[,\s]+", value) if part]


def list_of(
    check: Callable[[str], object], *, max_items: int = MAX_LIST, allow_empty: bool = False
) -> Grammar:
    """A comma- (or blank-) separated list whose every entry passes `check`."""

    def grammar(value: str) -> None:
        items = split_list(value)
        if not items and not allow_empty:
            raise ValueError("empty list")
        if len(items) > max_items:
            raise ValueError(f"{len(items)} entries, at most {max_items}")
        for item in items:
            check(item)

    return grammar


def _match(pattern: re.Pattern[str], what: str) -> Grammar:
    def grammar(value: str) -> None:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r:.80} is not {what}")

    return grammar


NUMBER = _match(_NUMBER, "a number")
BOOLEAN = _match(_BOOL, "a boolean (true/false)")
TEXT_NAME = _match(_TEXT_NAME, "a name (letters, digits, blanks, '.', '_', '-')")
HOST_OR_HOST_PORT = _one(check_host_or_host_port)
HOSTNAME = _one(check_hostname)
COLLECTOR_LIST = list_of(check_host_or_host_port, max_items=100)
HOST_LIST = list_of(check_host)
DAEMON_LIST = list_of(check_daemon_name, max_items=64)
GROUP_LIST = list_of(lambda g: _match(_GROUP, "a group name")(g), max_items=1000)
DEBUG_FLAGS = list_of(lambda f: _match(_DEBUG_FLAG, "a debug flag (D_...)")(f), max_items=64)


def host_list_with_grants(granted: Iterable[str]) -> Grammar:
    """A list of hosts, where an entry that is a glob or CIDR block passes only if it is one of
    `granted` exactly (what the policy rule that let a pool in allows)."""
    allowed = frozenset(granted)

    def entry(item: str) -> None:
        if item in allowed:
            return
        if is_host_glob(item):
            raise ValueError(f"{item!r:.80}: a glob or CIDR block no policy rule granted")
        check_host(item)

    return list_of(entry, allow_empty=True)


# ----------------------------------------------------------------------------- scopes


@dataclass(frozen=True)
class KnobScope:
    """One writer's allow-list: the knobs it may set (exact names, and name patterns such as
    GROUP_QUOTA_<group>), each with its value grammar; `removable`: None removes a runtime
    value (only the runtime sink understands that)."""

    name: str
    knobs: Mapping[str, Grammar]
    patterns: tuple[tuple[re.Pattern[str], Grammar], ...] = ()
    removable: bool = True

    def grammar(self, knob: str) -> Grammar | None:
        """The value grammar of `knob` in this scope (case-insensitive, as HTCondor's names), or None."""
        upper = knob.upper()
        found = self.knobs.get(upper)
        if found is not None:
            return found
        for pattern, grammar in self.patterns:
            if pattern.fullmatch(upper):
                return grammar
        return None


@dataclass(frozen=True)
class CheckedConfig:
    """Knob values that passed one scope's grammar: what the sinks accept. Make one with
    `check_config`; knobs as given (HTCondor's names are case-insensitive), in the order given."""

    scope: str
    values: tuple[tuple[str, str | None], ...]
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _GATE:
            raise TypeError("CheckedConfig comes from check_config(), not from its constructor")

    def as_dict(self) -> dict[str, str | None]:
        """The values as a mapping, knob -> value (None: remove the runtime value)."""
        return dict(self.values)

    def render(self, comments: Iterable[str] = ()) -> str:
        """The values as a config file: the `comments` (each one line, written as '# ...'), then
        one `KNOB = value` line per knob; knobs whose value is None are left out."""
        lines = []
        for comment in comments:
            if (
                not isinstance(comment, str)
                or not comment.isascii()
                or not comment.isprintable()
                or comment.endswith("\\")
            ):
                raise KnobRefused(
                    self.scope, "(comment)", "a comment is one line of printable ASCII", str(comment)
                )
            lines.append(comment if comment.startswith("#") else f"# {comment}")
        lines += [f"{knob} = {value}" for knob, value in self.values if value is not None]
        return "\n".join(lines) + "\n"


_GATE = object()


def check_config(scope: KnobScope, values: Mapping[str, str | None]) -> CheckedConfig:
    """The gate: every knob in `scope`'s allow-list, every value through the universal check and
    the knob's grammar; a KnobRefused names the first that is not."""
    checked: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for knob, value in values.items():
        try:
            check_knob_name(knob)
        except ValueError as e:
            raise KnobRefused(scope.name, repr(knob)[:80], str(e)) from None
        upper = knob.upper()
        if upper in seen:
            raise KnobRefused(scope.name, upper, "given twice")
        seen.add(upper)
        grammar = scope.grammar(upper)
        if grammar is None:
            raise KnobRefused(scope.name, upper, "not a knob this writer may set")
        if value is None:
            if not scope.removable:
                raise KnobRefused(scope.name, upper, "a value is required")
            checked.append((knob, None))
            continue
        try:
            check_value_text(value)
            grammar(value)
        except ValueError as e:
            raise KnobRefused(
                scope.name, upper, str(e), value if isinstance(value, str) else repr(value)
            ) from None
        checked.append((knob, value))
    return CheckedConfig(scope.name, tuple(checked), _GATE)


# ----------------------------------------------------------------------------- reading replicated files

_ASSIGNMENT = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")


def parse_config_text(scope: KnobScope, text: str | bytes, *, source: str) -> CheckedConfig:
    """A config file from another machine, read strictly (see the module docstring): the knobs it
    sets, checked. KnobRefused names `source`, the line and why for the first line refused."""
    if isinstance(text, bytes):
        if len(text) > MAX_FILE:
            raise KnobRefused(scope.name, source, f"larger than {MAX_FILE} bytes")
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise KnobRefused(scope.name, source, "not ASCII text") from None
    if len(text) > MAX_FILE:
        raise KnobRefused(scope.name, source, f"larger than {MAX_FILE} characters")
    values: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(text.split("\n"), 1):
        where = f"{source}:{number}"
        stripped = line.strip(" \t")
        if any(c in line for c in "\r\0") or not line.isascii():
            raise KnobRefused(scope.name, where, "control or non-ASCII characters")
        if stripped.endswith("\\"):
            raise KnobRefused(scope.name, where, "line continuations are not accepted")
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGNMENT.fullmatch(line)
        if match is None:
            word = stripped.split()[0].lower()
            why = (
                f"'{word}' lines are not accepted"
                if word in ("use", "include", "if", "elif", "else", "endif", "error", "warning")
                else "not a 'KNOB = value' line"
            )
            raise KnobRefused(scope.name, where, why, stripped)
        knob, value = match.group(1), match.group(2)
        values.pop(knob.upper(), None)  # as in HTCondor, a later line wins
        values[knob.upper()] = (knob, value)
    try:
        return check_config(scope, dict(values.values()))
    except KnobRefused as e:
        raise KnobRefused(scope.name, f"{source}: {e.knob}", e.why) from None


# ----------------------------------------------------------------------------- the allow-lists

POOLD_FLOCK_TO = KnobScope("poold FLOCK_TO", {"FLOCK_TO": COLLECTOR_LIST})


def poold_flock_from(granted: Iterable[str] = ()) -> KnobScope:
    """poolD's FLOCK_FROM: hosts, plus exactly the globs/CIDR blocks the policy granted."""
    return KnobScope("poold FLOCK_FROM", {"FLOCK_FROM": host_list_with_grants(granted)})


FAULTD_ROLE = KnobScope(
    "faultd role file",
    {"DAEMON_LIST": DAEMON_LIST, "COLLECTOR_HOST": HOST_OR_HOST_PORT},
    removable=True,
)

MASTER_DAEMON_LIST = KnobScope("gateway DAEMON_LIST", {"DAEMON_LIST": DAEMON_LIST})

# Every knob the suite sets at run time: Gateway.set_config's default allow-list.
RUNTIME = KnobScope(
    "runtime config",
    {
        "FLOCK_TO": COLLECTOR_LIST,
        "FLOCK_FROM": HOST_LIST,
        "DAEMON_LIST": DAEMON_LIST,
        "COLLECTOR_HOST": HOST_OR_HOST_PORT,
    },
)

# What a central manager's own config files may carry to a replacement (faultD's
# manager_config_files, replicated by the manager and installed on takeover). Negotiator and
# collector tuning whose values are numbers, booleans, names or group lists. Left out on
# purpose: DAEMON_LIST, every *_HOST, ALLOW_*/DENY_*/SEC_*, SETTABLE_ATTRS_*, ENABLE_*_CONFIG,
# daemon executables and their *_ARGS/*_ENVIRONMENT, LOCAL_CONFIG_*, and every ClassAd expression
# (PREEMPTION_REQUIREMENTS, NEGOTIATOR_PRE_JOB_RANK, ...): an expression decides who gets the
# pool's machines, and cannot be told from an attack by its characters. Such knobs belong in
# configuration every machine of the pool already has.
_CM_NUMBERS = (
    "NEGOTIATOR_INTERVAL",
    "NEGOTIATOR_CYCLE_DELAY",
    "NEGOTIATOR_UPDATE_INTERVAL",
    "NEGOTIATOR_TIMEOUT",
    "NEGOTIATOR_MAX_TIME_PER_CYCLE",
    "NEGOTIATOR_MAX_TIME_PER_SUBMITTER",
    "NEGOTIATOR_MAX_TIME_PER_SCHEDD",
    "NEGOTIATOR_MAX_TIME_PER_PIESPIN",
    "NEGOTIATOR_SOCKET_CACHE_SIZE",
    "NEGOTIATOR_RESOURCE_REQUEST_LIST_SIZE",
    "PRIORITY_HALFLIFE",
    "DEFAULT_PRIO_FACTOR",
    "REMOTE_PRIO_FACTOR",
    "NICE_USER_PRIO_FACTOR",
    "MAX_ACCOUNTANT_DATABASE_SIZE",
    "COLLECTOR_UPDATE_INTERVAL",
    "CLASSAD_LIFETIME",
    "MAX_NEGOTIATOR_LOG",
    "MAX_COLLECTOR_LOG",
)
_CM_BOOLEANS = (
    "NEGOTIATOR_CONSIDER_PREEMPTION",
    "NEGOTIATOR_CONSIDER_EARLY_PREEMPTION",
    "NEGOTIATOR_USE_SLOT_WEIGHTS",
    "NEGOTIATOR_INFORM_STARTD",
    "NEGOTIATOR_ALLOW_QUOTA_OVERSUBSCRIPTION",
    "GROUP_ACCEPT_SURPLUS",
    "GROUP_AUTOREGROUP",
)
CENTRAL_MANAGER = KnobScope(
    "central-manager config",
    {k: NUMBER for k in _CM_NUMBERS}
    | {k: BOOLEAN for k in _CM_BOOLEANS}
    | {
        "GROUP_NAMES": GROUP_LIST,
        "NEGOTIATOR_DEBUG": DEBUG_FLAGS,
        "COLLECTOR_DEBUG": DEBUG_FLAGS,
        "COLLECTOR_NAME": TEXT_NAME,
        "ACCOUNTANT_LOCAL_DOMAIN": HOSTNAME,
    },
    patterns=(
        (re.compile(r"^GROUP_(?:QUOTA|QUOTA_DYNAMIC|PRIO_FACTOR)_[A-Z0-9_.]{1,128}$"), NUMBER),
        (re.compile(r"^GROUP_(?:ACCEPT_SURPLUS|AUTOREGROUP)_[A-Z0-9_.]{1,128}$"), BOOLEAN),
    ),
    removable=False,
)
