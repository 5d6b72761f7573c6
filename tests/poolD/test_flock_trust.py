"""Whether a token request queued at our collector is exactly what a peer announced (issue 15,
Deliver 3's approval check; the protocol around it: tests/poolD/test_trust_broker.py)."""

from __future__ import annotations

import pytest

from poolD.flock_trust import (
    NEGOTIATOR_AT_SENDER,
    SCHEDD_AT_RECEIVER,
    AnnouncedRequest,
    check_lifetime,
    check_queued_request,
    flock_identity,
)

DOMAIN = "poolb.sandbox"


def queued(**overrides: object) -> dict[str, object]:
    ad = {
        "RequestId": "4711",
        "RequestedIdentity": "schedd-poolA@poolb.sandbox",
        "LimitAuthorization": "READ,ADVERTISE_SCHEDD",
        "AuthenticatedIdentity": "unauthenticated@unmapped",
        "PeerLocation": "10.213.1.10",
    }
    return ad | overrides


ANNOUNCED = AnnouncedRequest(peer_pool="poolA", role="schedd", request_id="4711")


def test_the_announced_request_passes() -> None:
    assert check_queued_request(queued(), ANNOUNCED, DOMAIN) is None
    narrower = queued(LimitAuthorization="ADVERTISE_SCHEDD")
    assert check_queued_request(narrower, ANNOUNCED, DOMAIN) is None
    negotiator = AnnouncedRequest(peer_pool="poolA", role="negotiator", request_id="9")
    ad = queued(
        RequestId=9, RequestedIdentity="negotiator-poolA@poolb.sandbox", LimitAuthorization="READ,NEGOTIATOR"
    )
    assert check_queued_request(ad, negotiator, DOMAIN) is None


@pytest.mark.parametrize(
    ("ad", "why"),
    [
        (queued(RequestId="4712"), "not the announced 4711"),
        (queued(RequestedIdentity="condor@poolb.sandbox"), "not 'schedd-poolA@poolb.sandbox'"),
        (queued(RequestedIdentity="schedd-poolA@poola.sandbox"), "not 'schedd-poolA@poolb.sandbox'"),
        (queued(LimitAuthorization=""), "not bounded to any authorization"),
        (queued(LimitAuthorization="READ,ADVERTISE_SCHEDD,ADMINISTRATOR"), "asks for ADMINISTRATOR"),
        (queued(LimitAuthorization="NEGOTIATOR"), "asks for NEGOTIATOR"),
    ],
)
def test_anything_else_is_refused_with_the_reason(ad: dict[str, object], why: str) -> None:
    reason = check_queued_request(ad, ANNOUNCED, DOMAIN)
    assert reason is not None and why in reason


def test_announcements_that_cannot_be_right() -> None:
    bad_id = AnnouncedRequest(peer_pool="poolA", role="schedd", request_id="1; rm")
    assert "not a number" in (check_queued_request(queued(RequestId="1; rm"), bad_id, DOMAIN) or "")
    bad_role = AnnouncedRequest(peer_pool="poolA", role="admin", request_id="4711")
    assert "not one of schedd, negotiator" in (check_queued_request(queued(), bad_role, DOMAIN) or "")
    bad_pool = AnnouncedRequest(peer_pool="*", role="schedd", request_id="4711")
    assert "not a valid pool name" in (check_queued_request(queued(), bad_pool, DOMAIN) or "")


def test_identities_and_scopes() -> None:
    assert flock_identity("negotiator", "poolB", "poola.sandbox") == "negotiator-poolB@poola.sandbox"
    assert "ADMINISTRATOR" not in SCHEDD_AT_RECEIVER + NEGOTIATOR_AT_SENDER
    assert "DAEMON" not in SCHEDD_AT_RECEIVER + NEGOTIATOR_AT_SENDER


def test_the_queued_lifetime_must_be_bounded_and_within_the_announced_one() -> None:
    assert check_lifetime(queued(TokenLifetime=600), 600) is None
    assert "more than 600 s" in (check_lifetime(queued(TokenLifetime=601), 600) or "")
    assert "never expires" in (check_lifetime(queued(TokenLifetime=-1), 600) or "")
    assert "never expires" in (check_lifetime(queued(), 600) or "")
    assert "no readable TokenLifetime" in (check_lifetime(queued(TokenLifetime="soon"), 600) or "")
