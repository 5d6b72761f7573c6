"""common.condor.knobs and config_files: the grammar of values that reach HTCondor's
configuration, the allow-lists, the one gate, and the file sink. Property-based: no string that
could break out of a value passes, and every value the project itself writes does."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from common.condor import knobs
from common.condor.config_files import write_config_file
from common.condor.knobs import (
    CENTRAL_MANAGER,
    FAULTD_ROLE,
    MASTER_DAEMON_LIST,
    POOLD_FLOCK_TO,
    RUNTIME,
    CheckedConfig,
    KnobRefused,
    check_config,
    check_host,
    check_host_grant,
    check_host_or_host_port,
    check_host_port,
    check_sinful,
    parse_config_text,
    poold_flock_from,
)

# Every value the project's own code and tests write into HTCondor's configuration.
LEGITIMATE: list[tuple[knobs.KnobScope, str, str]] = [
    (POOLD_FLOCK_TO, "FLOCK_TO", "10.213.200.10:9618, 10.213.201.10:9618"),
    (POOLD_FLOCK_TO, "FLOCK_TO", "near.pool:9618, far.pool:9618"),
    (POOLD_FLOCK_TO, "FLOCK_TO", "old.pool:9618"),
    (POOLD_FLOCK_TO, "FLOCK_TO", "busy.sim:9618"),
    (POOLD_FLOCK_TO, "FLOCK_TO", "n5:9618"),
    (poold_flock_from(), "FLOCK_FROM", "10.213.99.1, 10.213.99.2"),
    (poold_flock_from(), "FLOCK_FROM", "s1.other.org"),
    (poold_flock_from(), "FLOCK_FROM", "10.213.4.10, cm.fd.sandbox"),
    (poold_flock_from(), "FLOCK_FROM", "10.0.0.1, cm.home.org"),
    (poold_flock_from(), "FLOCK_FROM", "fd00::5, 2001:db8::1"),
    (poold_flock_from(["*.example.edu"]), "FLOCK_FROM", "*.example.edu, s1.example.edu"),
    (FAULTD_ROLE, "DAEMON_LIST", "MASTER, SCHEDD, STARTD"),
    (FAULTD_ROLE, "DAEMON_LIST", "MASTER, SCHEDD, STARTD, COLLECTOR, NEGOTIATOR"),
    (FAULTD_ROLE, "COLLECTOR_HOST", "10.0.0.7:9618"),
    (FAULTD_ROLE, "COLLECTOR_HOST", "127.0.0.1:9618"),
    (FAULTD_ROLE, "COLLECTOR_HOST", "10.213.7.11:9618"),
    (MASTER_DAEMON_LIST, "DAEMON_LIST", "MASTER, COLLECTOR, NEGOTIATOR, SCHEDD, STARTD"),
    (RUNTIME, "FLOCK_TO", "10.213.200.10:9618, 10.213.201.10:9618"),
    (RUNTIME, "FLOCK_FROM", "10.213.99.1, 10.213.99.2"),
    (CENTRAL_MANAGER, "NEGOTIATOR_CYCLE_DELAY", "5"),
    (CENTRAL_MANAGER, "NEGOTIATOR_INTERVAL", "20"),
    (CENTRAL_MANAGER, "PRIORITY_HALFLIFE", "86400.0"),
    (CENTRAL_MANAGER, "GROUP_NAMES", "group_physics, group_physics.hep, group_chem"),
    (CENTRAL_MANAGER, "GROUP_QUOTA_group_physics.hep", "10"),
    (CENTRAL_MANAGER, "GROUP_ACCEPT_SURPLUS", "True"),
    (CENTRAL_MANAGER, "NEGOTIATOR_DEBUG", "D_FULLDEBUG D_MATCH"),
    (CENTRAL_MANAGER, "COLLECTOR_NAME", "Pool A central manager"),
]

# What an attacker holding a ring key sent in issue 14 (row 1), and its relatives.
HOSTILE = [
    "*, */*, x\nALLOW_ADMINISTRATOR = *",
    "x\nALLOW_ADMINISTRATOR = *",
    "x\r\nDAEMON_LIST = MASTER",
    "$(FULL_HOSTNAME)",
    "$ENV(HOME)",
    "a = b",
    "host\\",
    "use SECURITY : HOST_BASED",
    "x @=end",
    "*",
    "*/*",
    "0.0.0.0/0",
    "evil.org # comment",
    '"quoted"',
    "a\x00b",
    "ünïcode.org",
    "a" * (knobs.MAX_VALUE + 1),
]

BREAKOUT = re.compile(r"[\r\n\x00$=\\#@\"'`]|[^\x20-\x7e]")


def reference_parse(text: str) -> dict[str, str]:
    """How HTCondor would read a file of `KNOB = value` lines, as far as this test cares: every
    line that is not blank or a comment is an assignment, split at its first '='."""
    out = {}
    for line in re.split(r"\r\n|\r|\n", text):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, line
        out[name.strip().upper()] = value.strip()
    return out


@pytest.mark.parametrize(("scope", "knob", "value"), LEGITIMATE)
def test_every_value_the_project_writes_passes(scope: knobs.KnobScope, knob: str, value: str) -> None:
    checked = check_config(scope, {knob: value})
    assert checked.as_dict() == {knob: value}
    assert reference_parse(checked.render(["a comment"])) == {knob.upper(): value}


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    ("scope", "knob"),
    [
        (POOLD_FLOCK_TO, "FLOCK_TO"),
        (poold_flock_from(), "FLOCK_FROM"),
        (FAULTD_ROLE, "DAEMON_LIST"),
        (FAULTD_ROLE, "COLLECTOR_HOST"),
        (RUNTIME, "FLOCK_FROM"),
        (CENTRAL_MANAGER, "COLLECTOR_NAME"),
        (CENTRAL_MANAGER, "NEGOTIATOR_INTERVAL"),
    ],
)
def test_hostile_values_are_refused_naming_writer_and_knob(
    scope: knobs.KnobScope, knob: str, value: str
) -> None:
    with pytest.raises(KnobRefused) as info:
        check_config(scope, {knob: value})
    assert info.value.scope == scope.name and info.value.knob == knob
    assert str(info.value).startswith(f"{scope.name}: {knob}")


def test_knobs_outside_the_allow_list_are_refused() -> None:
    for scope, knob in [
        (POOLD_FLOCK_TO, "FLOCK_FROM"),
        (poold_flock_from(), "ALLOW_ADMINISTRATOR"),
        (FAULTD_ROLE, "CONDOR_HOST"),
        (MASTER_DAEMON_LIST, "COLLECTOR_HOST"),
        (CENTRAL_MANAGER, "DAEMON_LIST"),
        (CENTRAL_MANAGER, "ALLOW_WRITE"),
        (CENTRAL_MANAGER, "SEC_DEFAULT_AUTHENTICATION"),
        (CENTRAL_MANAGER, "PREEMPTION_REQUIREMENTS"),
        (CENTRAL_MANAGER, "NEGOTIATOR"),
        (CENTRAL_MANAGER, "NEGOTIATOR.DAEMON_LIST"),
        (RUNTIME, "NOT_A_SETTABLE_KNOB"),
    ]:
        with pytest.raises(KnobRefused, match="not a knob this writer may set"):
            check_config(scope, {knob: "1"})
    with pytest.raises(KnobRefused, match="not a configuration knob name"):
        check_config(RUNTIME, {"FLOCK_TO\nALLOW_WRITE": "x"})
    with pytest.raises(KnobRefused, match="given twice"):
        check_config(RUNTIME, {"FLOCK_TO": "a:1", "flock_to": "b:1"})
    with pytest.raises(KnobRefused, match="a value is required"):
        check_config(CENTRAL_MANAGER, {"NEGOTIATOR_INTERVAL": None})
    assert check_config(RUNTIME, {"FLOCK_TO": None}).as_dict() == {"FLOCK_TO": None}


def test_only_check_config_makes_a_checked_config() -> None:
    with pytest.raises(TypeError):
        CheckedConfig("mine", (("ALLOW_WRITE", "*"),))


# --------------------------------------------------------------------------- properties

DANGEROUS = [*"abc09.-:*/,_ []", "=", "$", "(", ")", "\n", "\r", "\t", "#", "@", "\\", '"', "'", "`"]
DANGEROUS += ["\x00", "\x0b", "\x85", "\u2028", "\xe9", "\uff10", "\u0661"]
texts = st.one_of(st.text(), st.text(alphabet=st.sampled_from(DANGEROUS), max_size=40))
SCOPES = [
    (POOLD_FLOCK_TO, "FLOCK_TO"),
    (poold_flock_from(["*.example.edu", "10.1.0.0/16"]), "FLOCK_FROM"),
    (FAULTD_ROLE, "DAEMON_LIST"),
    (FAULTD_ROLE, "COLLECTOR_HOST"),
    (RUNTIME, "FLOCK_FROM"),
    (CENTRAL_MANAGER, "GROUP_NAMES"),
    (CENTRAL_MANAGER, "COLLECTOR_NAME"),
    (CENTRAL_MANAGER, "NEGOTIATOR_INTERVAL"),
    (CENTRAL_MANAGER, "ACCOUNTANT_LOCAL_DOMAIN"),
    (CENTRAL_MANAGER, "NEGOTIATOR_DEBUG"),
]


@settings(max_examples=400, deadline=None)
@given(value=texts, which=st.sampled_from(SCOPES))
def test_no_string_that_breaks_out_of_a_value_passes(value: str, which: tuple[knobs.KnobScope, str]) -> None:
    scope, knob = which
    try:
        checked = check_config(scope, {knob: value})
    except KnobRefused:
        return
    assert BREAKOUT.search(value) is None and "$(" not in value and len(value) <= knobs.MAX_VALUE
    # Written as a file, it is one assignment of exactly that knob to exactly that value.
    assert reference_parse(checked.render(["faultd"])) == {knob: value}
    again = parse_config_text(
        knobs.KnobScope("any", {knob: scope.grammar(knob)}), checked.render(), source="f"
    )  # type: ignore[dict-item]
    assert again.as_dict() == {knob: value}


@settings(max_examples=300, deadline=None)
@given(prefix=st.sampled_from(["cm.pool.org", "10.0.0.1", "s1.other.org:9618", "MASTER"]), evil=texts)
def test_a_legitimate_value_with_anything_dangerous_appended_is_refused(prefix: str, evil: str) -> None:
    assume(BREAKOUT.search(evil) is not None)
    for scope, knob in SCOPES:
        with pytest.raises(KnobRefused):
            check_config(scope, {knob: prefix + evil})


labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
hostnames = st.builds(
    lambda parts, tld: ".".join([*parts, tld]),
    st.lists(labels, min_size=0, max_size=4),
    st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]|[a-z]", fullmatch=True),
)
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(min_value=1, max_value=65535)


@settings(max_examples=300, deadline=None)
@given(hosts=st.lists(st.one_of(hostnames, ipv4, ipv6), min_size=1, max_size=20), port=ports)
def test_every_legitimate_host_and_collector_passes(hosts: list[str], port: int) -> None:
    value = ", ".join(hosts)
    assert check_config(poold_flock_from(), {"FLOCK_FROM": value}).as_dict() == {"FLOCK_FROM": value}
    for host in hosts:
        assert check_host(host) == host
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        assert check_host_port(address) == address
        assert check_host_or_host_port(address) == address
        assert check_host_or_host_port(host) == host
        assert check_sinful(f"<{address}?addrs={host}-{port}&alias=cm&noUDP>")
    collectors = ", ".join(f"{h}:{port}" for h in hosts if ":" not in h)
    if collectors:
        check_config(POOLD_FLOCK_TO, {"FLOCK_TO": collectors})


def test_hosts_and_addresses_that_are_not() -> None:
    for bad in [
        "",
        "-a.org",
        "a-.org",
        "a..b",
        "10.0.0",
        "1.2.3.999",
        "a_b.org",
        "x" * 64 + ".org",
        "fe80::1%eth0",
    ]:
        with pytest.raises(ValueError):
            check_host(bad)
    for text in ["0.0.0.0", "255.255.255.255", "::", "::ffff:10.0.0.1"]:
        assert check_host(text) == text
    for bad in [
        "a.org",
        "a.org:0",
        "a.org:65536",
        "a.org:9618:1",
        "[a.org]:1",
        "fd00::5:9618",
        "a.org:\u0661\u0662",
    ]:
        with pytest.raises(ValueError):
            check_host_port(bad)


def test_grants_a_policy_may_name() -> None:
    for good in [
        "*.example.edu",
        "10.1.*",
        "10.1.2.*",
        "10.0.0.0/8",
        "fd00::/16",
        "s1.example.edu",
        "10.0.0.1",
    ]:
        assert check_host_grant(good) == good
    for bad in [
        "*",
        "*/*",
        "*.org",
        "0.0.0.0/0",
        "::/0",
        "a*.example.edu",
        "*.*.edu",
        "10.*",
        "1.2.3.4.*",
        "?.x.org",
    ]:
        with pytest.raises(ValueError):
            check_host_grant(bad)
    assert knobs.grant_covers("*.example.edu", "s1.physics.example.edu")
    assert not knobs.grant_covers("*.example.edu", "example.edu.evil.org")
    assert knobs.grant_covers("10.1.0.0/16", "10.1.200.3") and not knobs.grant_covers(
        "10.1.0.0/16", "10.2.0.1"
    )
    assert knobs.grant_covers("10.1.*", "10.1.7.7") and not knobs.grant_covers("10.1.*", "10.10.7.7")
    # A glob in FLOCK_FROM only if granted exactly.
    with pytest.raises(KnobRefused, match="no policy rule granted"):
        check_config(poold_flock_from(["*.example.edu"]), {"FLOCK_FROM": "*.other.edu"})
    with pytest.raises(KnobRefused, match="no policy rule granted"):
        check_config(poold_flock_from(["10.1.0.0/16"]), {"FLOCK_FROM": "10.0.0.0/8"})


# --------------------------------------------------------------------------- replicated files


def test_a_central_manager_config_file_is_read_strictly() -> None:
    text = "# policy\n\nNEGOTIATOR_CYCLE_DELAY = 5\n  GROUP_QUOTA_group_a = 3  \nnegotiator_interval=20\n"
    checked = parse_config_text(CENTRAL_MANAGER, text.encode(), source="config/20-neg.conf")
    assert checked.as_dict() == {
        "NEGOTIATOR_CYCLE_DELAY": "5",
        "GROUP_QUOTA_group_a": "3",
        "negotiator_interval": "20",
    }
    assert (
        checked.render() == "NEGOTIATOR_CYCLE_DELAY = 5\nGROUP_QUOTA_group_a = 3\nnegotiator_interval = 20\n"
    )
    later = parse_config_text(
        CENTRAL_MANAGER, "NEGOTIATOR_INTERVAL = 1\nnegotiator_interval = 2\n", source="f"
    )
    assert later.as_dict() == {"negotiator_interval": "2"}  # as in HTCondor, the later line wins


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            "DAEMON_LIST = MASTER, STARTD, SCHEDD, COLLECTOR, NEGOTIATOR, SHADOW_EVIL\n",
            "not a knob this writer",
        ),
        ("use ROLE : CentralManager\n", "'use' lines are not accepted"),
        ("include : /etc/shadow\n", "'include' lines are not accepted"),
        ("include command : /bin/evil\n", "'include' lines are not accepted"),
        ("if true\nNEGOTIATOR_INTERVAL = 1\nendif\n", "'if' lines are not accepted"),
        ("ALLOW_ADMINISTRATOR @=end\n*\n@end\n", "not a 'KNOB = value' line"),
        ("NEGOTIATOR_INTERVAL = 5 \\\nALLOW_WRITE = *\n", "line continuations"),
        ("# a comment \\\nALLOW_WRITE = *\n", "line continuations"),
        ("NEGOTIATOR_INTERVAL = $(X)\n", "'$' is not allowed"),
        ("COLLECTOR_NAME = a = b\n", "'=' is not allowed"),
        ("NEGOTIATOR_INTERVAL = 5\r\nALLOW_WRITE = *\n", "control or non-ASCII"),
        ("ALLOW_WRITE = *\n", "not a knob this writer"),
        ("START = True\n", "not a knob this writer"),
        ('NEGOTIATOR_PRE_JOB_RANK = RemoteOwner =?= "x"\n', "not a knob this writer"),
        ("just words\n", "not a 'KNOB = value' line"),
    ],
)
def test_a_hostile_central_manager_config_file_is_refused_whole(text: str, why: str) -> None:
    with pytest.raises(KnobRefused, match=re.escape(why)) as info:
        parse_config_text(CENTRAL_MANAGER, text.encode(), source="config/20-neg.conf")
    assert "config/20-neg.conf" in str(info.value)


def test_oversized_or_binary_files_are_refused() -> None:
    with pytest.raises(KnobRefused, match="larger than"):
        parse_config_text(CENTRAL_MANAGER, b"# " + b"x" * knobs.MAX_FILE, source="f")
    with pytest.raises(KnobRefused, match="not ASCII"):
        parse_config_text(CENTRAL_MANAGER, "COLLECTOR_NAME = Zürich\n".encode(), source="f")


# --------------------------------------------------------------------------- the file sink


def test_the_file_sink_writes_only_owned_names_with_checked_contents(tmp_path: Path) -> None:
    config = check_config(FAULTD_ROLE, {"DAEMON_LIST": "MASTER, SCHEDD", "COLLECTOR_HOST": "10.0.0.7:9618"})
    owned = {"99-faultd-role.conf"}
    path = write_config_file(tmp_path, "99-faultd-role.conf", config, owned=owned, comments=["# by faultd"])
    assert path.read_text() == "# by faultd\nDAEMON_LIST = MASTER, SCHEDD\nCOLLECTOR_HOST = 10.0.0.7:9618\n"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    inode = path.stat().st_ino
    write_config_file(tmp_path, "99-faultd-role.conf", config, owned=owned, comments=["# by faultd"])
    assert path.stat().st_ino == inode  # unchanged: not rewritten
    for name in [
        "../99-faultd-role.conf",
        ".99-faultd-role.conf",
        "99-faultd-role.conf~",
        "a/b",
    ]:
        with pytest.raises(KnobRefused):
            write_config_file(tmp_path, name, config, owned=owned | {name})
    with pytest.raises(KnobRefused, match="not a file this writer owns"):
        write_config_file(tmp_path, "00-evil.conf", config, owned=owned)
    with pytest.raises(KnobRefused, match="one line"):
        write_config_file(
            tmp_path, "99-faultd-role.conf", config, owned=owned, comments=["x\nALLOW_WRITE = *"]
        )
    assert sorted(os.listdir(tmp_path)) == [
        "99-faultd-role.conf"
    ]  # and no temporary file left  # nothing else, no temporary files
