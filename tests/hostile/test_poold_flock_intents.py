"""Issue 14, row 1, against a real poold on a real sandbox pool: a nemesis that holds the ring
key and a valid certificate for pool "physics" (a compromised central manager) sends
FlockIntents, sealed and signed, so they pass every identity check and meet the grammar. Hostile
schedd hosts never reach FLOCK_FROM (condor_config_val on the collector and the startd says so),
the drop is counted in `poold status` and poold's memory stays within MEMORY_BOUND_MB of where
it was; what an intent is granted is taken back when its grant expires."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.overlay.messages import Direct
from deploy.harness.federation import Federation
from deploy.harness.sandbox import Sandbox
from poolD.messages import FlockIntent
from tests.hostile.nemesis import Nemesis, sandbox_insider

pytestmark = [pytest.mark.htcondor, pytest.mark.hostile]

POOL = "hp"
REAUTHORIZE_AFTER = 5.0  # a grant lasts twice this
MEMORY_BOUND_MB = 40.0  # what the attack may add to poold's resident memory (as in test_hostile_peers)


@pytest.fixture(scope="module")
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    fed = Federation(sandbox, sandbox.shared_dir(), [POOL])
    fed.flocking[POOL] = f"reauthorize_after = {REAUTHORIZE_AFTER}\n"
    try:
        fed.start_all()
        yield fed
    finally:
        fed.stop_all()


@pytest.fixture(scope="module")
def insider(federation: Federation) -> Iterator[Nemesis]:
    """Speaks from this machine's end of the sandbox bridge, certified for pool "physics"."""
    with sandbox_insider(federation.keys, "physics-nemesis") as nemesis:
        yield nemesis


def flock_from(fed: Federation, daemon: str) -> str:
    """FLOCK_FROM as the pool's collector or startd sees it ('' when not defined)."""
    value = fed.pools[POOL].exec("condor_config_val", f"-{daemon}", "FLOCK_FROM").stdout.strip()
    return "" if value.startswith("Not defined") else value


def poold_rss_mb(fed: Federation) -> float:
    """VmRSS of the poold process itself (not the unit jail or `ip netns exec` around it): the
    process whose command line is `python -m poolD run --config <its config file>`."""
    config = str(fed.workdir / f"{POOL}.toml")
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            if b"deploy.harness.unit_jail" in args or args[0].endswith(b"ip"):
                continue
            if b"poolD" in args and b"run" in args and config.encode() in args:
                for line in (proc / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    raise AssertionError(f"no poold process with --config {config}")


def collector_admins(fed: Federation) -> str:
    """The collector's ALLOW_ADMINISTRATOR as it runs."""
    return fed.pools[POOL].exec("condor_config_val", "-collector", "ALLOW_ADMINISTRATOR").stdout.strip()


def send_intent(fed: Federation, insider: Nemesis, schedd_hosts: list[str]) -> None:
    """One FlockIntent for pool "physics", sealed, signed and endorsed by the insider (a node
    that holds valid keys and lies about its schedds)."""
    to = f"{fed.address(POOL)}:7640"
    intent = insider.endorse(FlockIntent(pool="physics", origin=insider.me, schedd_hosts=schedd_hosts))
    insider.send(to, insider.datagram(Direct(sender=insider.me, payload=intent), to))


def test_hostile_schedd_hosts_never_reach_flock_from_and_are_counted(
    federation: Federation, insider: Nemesis
) -> None:
    """On main, FLOCK_FROM became `*, */*, x` + a line of its own: ALLOW_ADMINISTRATOR = *."""
    before = {d: flock_from(federation, d) for d in ("collector", "startd")}
    admin_before = collector_admins(federation)
    rss_start = poold_rss_mb(federation)
    counted = federation.status(POOL)["counters"].get("flock_intents_refused_hosts", 0)
    for hosts in (["*", "*/*", "x\nALLOW_ADMINISTRATOR = *"], ["ok.example.org", "$(FULL_HOSTNAME)"]):
        send_intent(federation, insider, hosts)

    def refused() -> dict | None:
        s = federation.status(POOL)
        return s if s["counters"].get("flock_intents_refused_hosts", 0) >= counted + 2 else None

    status = federation.wait("both intents refused and counted", refused, timeout=30)
    assert any("flock intent from physics: refused (schedd host refused" in d for d in status["decisions"])
    assert status["flock_from"] == [] and status["flock_from_grants"] == {}
    assert {d: flock_from(federation, d) for d in ("collector", "startd")} == before
    # The pool's own value, nothing appended (in a recommended pool it names identities, so an
    # injected `ALLOW_ADMINISTRATOR = *` would show here).
    assert collector_admins(federation) == admin_before
    assert poold_rss_mb(federation) < rss_start + MEMORY_BOUND_MB


def test_a_grant_is_written_checked_and_taken_back_when_it_expires(
    federation: Federation, insider: Nemesis
) -> None:
    send_intent(federation, insider, ["10.213.250.7", "s1.physics.example"])
    want = "10.213.250.7, s1.physics.example"
    federation.wait(
        "FLOCK_FROM on collector and startd",
        lambda: flock_from(federation, "collector") == want and flock_from(federation, "startd") == want,
        timeout=30,
    )
    grants = federation.status(POOL)["flock_from_grants"]
    assert grants["physics"]["hosts"] == ["10.213.250.7", "s1.physics.example"]
    # Not renewed: after 2 * reauthorize_after the grant goes and FLOCK_FROM shrinks to nothing.
    federation.wait(
        "FLOCK_FROM revoked",
        lambda: not flock_from(federation, "collector") and not flock_from(federation, "startd"),
        timeout=60,
    )
    status = federation.status(POOL)
    assert status["flock_from"] == [] and status["counters"]["flock_from_revoked"] >= 1
    assert any("grant expired" in d for d in status["decisions"])
