"""`poold status` on a terminal: what the README tells an administrator to look at."""

from __future__ import annotations

from typing import Any

from poolD.cli import render_status


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


def test_status_without_trust_shows_no_token_lines() -> None:
    assert "tokens" not in render_status(status({}))
    assert "tokens" not in render_status({k: v for k, v in status({}).items() if k != "tokens"})


def test_status_shows_the_seeds_not_heard_from() -> None:
    assert "seeds not heard from" not in render_status(status({}))
    text = render_status(status({}) | {"seeds_unheard": ["cm1.example:7640", "cm2.example:7640"]})
    assert "seeds not heard from: cm1.example:7640, cm2.example:7640" in text.splitlines()
