"""Issue 15, Deliver 3, against poolD's pure core: a peer that holds a valid overlay key (its
messages pass every signature and identity check) lies in its token requests. It asks for more
authorizations, another identity, a longer lifetime, replays a request id or floods requests.
Nothing raises, nothing but a refusal goes back, no approval reaches the driver beyond one per
pool and role at a time, what the core keeps stays bounded, and no action would change
HTCondor's configuration (no SetFlockFrom, no SetFlockTo)."""

from __future__ import annotations

import random

import pytest

from common.overlay.messages import Peer
from poolD.core import CoreOutput, PoolCore, SetFlockFrom, SetFlockTo
from poolD.flock_trust import MAX_APPROVALS, MAX_PEERS, SEEN_PER_PEER, ApproveToken, RequestToken
from poolD.messages import TokenRequestNotice, TokenVerdict
from tests.poolD.test_core import of, sends
from tests.poolD.test_trust_broker import trust_core, trusted_intent

pytestmark = pytest.mark.hostile

LIAR = Peer(id=8, addr="10.0.0.8:7640")


def request(rid: int, pool: str = "physics", **lie: object) -> TokenRequestNotice:
    fields: dict[str, object] = {
        "pool": pool,
        "origin": LIAR,
        "role": "schedd",
        "request_id": f"{rid:07d}",
        "identity": f"schedd-{pool}@home.sandbox",
        "authz": ["READ", "ADVERTISE_SCHEDD"],
        "lifetime": 600,
    }
    return TokenRequestNotice(**(fields | lie))


def granted_core() -> PoolCore:
    """Pool "home" after it let "physics" flock in (a grant the liar's pool really holds)."""
    c = trust_core("home")
    c.on_message(trusted_intent(), 0.5)
    return c


def changes_condor(out: CoreOutput) -> bool:
    return bool(of(out, SetFlockFrom) or of(out, SetFlockTo))


LIES = [
    {"authz": ["READ", "ADVERTISE_SCHEDD", "ADMINISTRATOR"]},
    {"authz": ["WRITE"]},
    {"authz": ["CONFIG", "DAEMON", "NEGOTIATOR", "READ"]},
    {"identity": "condor@home.sandbox"},
    {"identity": "admin@home.sandbox"},
    {"identity": "poold@home.sandbox"},
    {"identity": "schedd-other@home.sandbox"},
    {"identity": "schedd-physics@*"},
    {"role": "negotiator", "identity": "negotiator-physics@home.sandbox", "authz": ["READ", "NEGOTIATOR"]},
    {"lifetime": 7 * 86_400},
]


@pytest.mark.parametrize("lie", LIES)
def test_a_lie_is_refused_and_changes_nothing(lie: dict) -> None:
    c = granted_core()
    out = c.on_message(request(1, **lie), 1.0)
    assert of(out, ApproveToken) == [] and not changes_condor(out)
    (verdict,) = sends(out, TokenVerdict)
    assert verdict.addr == LIAR.addr and not verdict.message.approved


def test_a_replayed_request_id_gets_no_second_approval() -> None:
    c = granted_core()
    (approve,) = of(c.on_message(request(1), 1.0), ApproveToken)
    c.on_token_approved(approve, None, 1.5)
    for now in (2.0, 3.0, 4.0):
        out = c.on_message(request(1), now)
        assert out.actions == [] or not (of(out, ApproveToken) or changes_condor(out))
    assert c.trust is not None and c.trust.counters["token_requests_replayed"] == 3


def test_a_flood_of_requests_stays_bounded() -> None:
    c = granted_core()
    rng = random.Random(15)
    approvals = 0
    for i in range(20_000):
        lie = rng.choice([{}, *LIES])
        pool = "physics" if i % 2 else f"p{i}"
        fields = {"identity": f"schedd-{pool}@home.sandbox"} | lie
        out = c.on_message(request(i, pool=pool, **fields), 1.0 + i * 1e-4)
        approvals += len(of(out, ApproveToken))
        assert not changes_condor(out)
    # The driver never answers: at most one approval per pool and role is ever under way.
    assert approvals == 1
    t = c.trust
    assert t is not None
    assert len(t._approving) <= MAX_APPROVALS and len(t._seen) <= MAX_PEERS
    assert all(len(ids) <= SEEN_PER_PEER for ids in t._seen.values())
    assert t.counters["token_requests_refused_here"] > 10_000
    assert c.grants.keys() == {"physics"}  # the flood granted no pool anything


def test_verdicts_nobody_asked_for_are_ignored() -> None:
    c = granted_core()
    for i in range(1000):
        verdict = TokenVerdict(
            pool=f"p{i}", role="schedd", request_id=f"{i:07d}", approved=True, reason="yes"
        )
        out = c.on_message(verdict, 1.0)
        assert out.actions == []
    assert (
        c.trust is not None and c.trust.held == {} and c.trust.counters["token_verdicts_unexpected"] == 1000
    )


def test_a_pool_refusing_every_token_request_gets_no_request_per_intent() -> None:
    """poolD review, finding 1: an allowed pool sends FlockIntent after FlockIntent and refuses
    each negotiator token request we make at its collector. Each refusal cleared our record, so
    each intent started a new condor_token_request (500 intents in 1 s: 500 requests). Now a
    refusal backs the requests off: one in that second, and few in an hour of it."""
    c = trust_core("home")
    requests = 0
    second = [1.0 + i * 0.002 for i in range(500)]
    hour = [2.0 + i * 0.12 for i in range(30_000)]
    for i, now in enumerate(second + hour):
        out = c.on_message(trusted_intent(), now)
        assert not of(out, SetFlockTo)
        for req in of(out, RequestToken):
            requests += 1
            c.on_token_requested(req, f"{1000 + i}", None, now)
            no = TokenVerdict(
                pool="physics", role="negotiator", request_id=f"{1000 + i}", approved=False, reason="no"
            )
            c.on_message(no, now)
        if i == len(second) - 1:
            assert requests == 1
    assert requests <= 16  # waits of 30 s, doubled up to 5 min: 15 in the hour (not 30,500)
