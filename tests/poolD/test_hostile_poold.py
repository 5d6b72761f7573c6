"""Issue 14, row 1, against a real poold on a real sandbox pool: a nemesis that holds the ring
key sends FlockIntents. Hostile schedd hosts never reach FLOCK_FROM (condor_config_val on the
collector and the startd says so) and the drop is counted in `poold status`; what an intent
is granted is taken back when its grant expires."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from common.overlay.auth import Sealer, load_ring_key
from common.overlay.messages import Direct, Peer, overlay_codec
from deploy.harness.federation import Federation
from deploy.harness.sandbox import Sandbox
from poolD.messages import FlockIntent

pytestmark = [pytest.mark.htcondor, pytest.mark.hostile]

POOL = "hp"
REAUTHORIZE_AFTER = 5.0  # a grant lasts twice this


@pytest.fixture(scope="module")
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    fed = Federation(sandbox, sandbox.shared_dir(), [POOL])
    fed.flocking[POOL] = f"reauthorize_after = {REAUTHORIZE_AFTER}\n"
    try:
        fed.start_all()
        yield fed
    finally:
        fed.stop_all()


def flock_from(fed: Federation, daemon: str) -> str:
    """FLOCK_FROM as the pool's collector or startd sees it ('' when not defined)."""
    value = fed.pools[POOL].exec("condor_config_val", f"-{daemon}", "FLOCK_FROM").stdout.strip()
    return "" if value.startswith("Not defined") else value


def send_intent(fed: Federation, schedd_hosts: list[str], pool: str = "physics") -> None:
    """One FlockIntent, sealed with the ring key, from this machine's end of the sandbox bridge
    (a node that holds the key and lies about its schedds)."""
    me = Peer(id=0xBAD, addr="10.213.0.1:7999")
    intent = FlockIntent(pool=pool, origin=me, schedd_hosts=schedd_hosts)
    payload = overlay_codec().encode_datagram(Direct(sender=me, payload=intent))
    datagram = Sealer(load_ring_key(fed.key)).seal(payload, time.time(), os.urandom(16))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(datagram, (fed.address(POOL), 7640))


def test_hostile_schedd_hosts_never_reach_flock_from_and_are_counted(federation: Federation) -> None:
    """On main, FLOCK_FROM became `*, */*, x` + a line of its own: ALLOW_ADMINISTRATOR = *."""
    before = {d: flock_from(federation, d) for d in ("collector", "startd")}
    counted = federation.status(POOL)["counters"].get("flock_intents_refused_hosts", 0)
    for hosts in (["*", "*/*", "x\nALLOW_ADMINISTRATOR = *"], ["ok.example.org", "$(FULL_HOSTNAME)"]):
        send_intent(federation, hosts)

    def refused() -> dict | None:
        s = federation.status(POOL)
        return s if s["counters"].get("flock_intents_refused_hosts", 0) >= counted + 2 else None

    status = federation.wait("both intents refused and counted", refused, timeout=30)
    assert any("flock intent from physics: refused (schedd host refused" in d for d in status["decisions"])
    assert status["flock_from"] == [] and status["flock_from_grants"] == {}
    assert {d: flock_from(federation, d) for d in ("collector", "startd")} == before
    admin = federation.pools[POOL].exec("condor_config_val", "-collector", "ALLOW_ADMINISTRATOR").stdout
    assert admin.strip() == "*"  # the sandbox's own value, nothing appended


def test_a_grant_is_written_checked_and_taken_back_when_it_expires(federation: Federation) -> None:
    send_intent(federation, ["10.213.250.7", "s1.physics.example"])
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
