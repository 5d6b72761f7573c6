"""`poold status` on a terminal: what the README tells an administrator to look at."""

from __future__ import annotations

from typing import Any

from poolD.cli import render_status
from poolD.flock_trust import RequestToken
from poolD.messages import FlockReply, TokenVerdict
from tests.poolD.test_core import load, of, round_at, willing
from tests.poolD.test_trust_broker import trust_core


def status(tokens: dict[str, Any]) -> dict[str, Any]:
    return {
        "pool": "fa",
        "collector": "10.213.1.10:9618",
        "node": {"addr": "10.213.1.10:7640", "id": "0123456789abcdef"},
        "joined": True,
        "leaf_set": [],
        "routing_table": [],
        "willing_list": [],
        "flock_to": {"condor-sandbox@cm.fa.sandbox": ["10.213.2.10:9618"]},
        "blacklist": {},
        "offers": {"accepted": 3, "dropped": {}},
        "overlay_drops": {},
        "decisions": [],
        "tokens": tokens,
    }


def test_status_shows_the_cross_pool_tokens() -> None:
    text = render_status(
        status(
            {
                "held": {"fb/schedd": 599.5},
                "asked": {"fc/schedd": "0042"},
                "issued": {"fb/negotiator": 595.1},
                "counters": {},
            }
        )
    )
    assert "tokens held: fb/schedd (600s left)" in text.splitlines()
    assert "tokens asked for: fc/schedd (request 0042)" in text.splitlines()
    assert "tokens issued: fb/negotiator (595s left)" in text.splitlines()


def test_status_shows_the_token_requests_waiting_after_a_failure() -> None:
    """Review of the back-off: an admin saw one failed request in the log, then nothing."""
    tokens = {"held": {}, "asked": {}, "issued": {}, "backing_off": {"fc/schedd": 239.6}, "counters": {}}
    lines = render_status(status(tokens)).splitlines()
    assert "tokens waiting: fc/schedd (after a failure or refusal: next request in 240s)" in lines
    assert not any(
        line.startswith("tokens waiting") for line in render_status(status({"held": {}})).splitlines()
    )


def test_status_without_trust_shows_no_token_lines() -> None:
    assert "tokens" not in render_status(status({}))
    assert "tokens" not in render_status({k: v for k, v in status({}).items() if k != "tokens"})


def test_status_shows_the_seeds_not_heard_from() -> None:
    assert "seeds not heard from" not in render_status(status({}))
    text = render_status(status({}) | {"seeds_unheard": ["cm1.example:7640", "cm2.example:7640"]})
    assert "seeds not heard from: cm1.example:7640, cm2.example:7640" in text.splitlines()


EVIL = "\x1b[2J\x1b[H\nFLOCK_TO on schedd@cm: (none)\x1b]0;pwned\x07\u202e"


def test_a_peers_words_reach_the_status_with_no_control_character() -> None:
    """poolD review, finding 9: a refusing TokenVerdict's reason (escape sequences, a newline)
    reached the decisions and `poold status` raw: it could clear the terminal and forge lines.
    The broker's note escapes it, and the rendering escapes every decision again."""
    c = trust_core("home")
    c.start(0.0)
    willing(c, 1.0, "near")
    round_at(c, 60.0, load(free=0, idle=5))
    yes = FlockReply(pool="near", accepted=True, reason=EVIL, trust_domain="near.sandbox")
    (request,) = of(c.on_message(yes, 61.0), RequestToken)
    assert c.authorized["near"].reason.isprintable()
    c.on_token_requested(request, "0000042", None, 62.0)
    no = TokenVerdict(pool="near", role="schedd", request_id="0000042", approved=False, reason=EVIL)
    (refused,) = c.on_message(no, 63.0).notes
    assert refused.text.isprintable() and refused.fields["reason"].isprintable()
    assert "\\x1b[2J" in refused.text and "\\n" in refused.text
    text = render_status(
        status({}) | {"decisions": [str(refused), EVIL], "blacklist": {"x": {"reason": EVIL}}}
    )
    assert all(line.isprintable() for line in text.splitlines())
    assert [line for line in text.splitlines() if line.startswith("FLOCK_TO on ")] == [
        "FLOCK_TO on condor-sandbox@cm.fa.sandbox: 10.213.2.10:9618"
    ]
