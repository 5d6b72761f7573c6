"""What a daemon publishes: its ClassAd (common.advertise), its Prometheus endpoint
(common.metrics), and the reload plan (common.reload)."""

from __future__ import annotations

from pydantic import BaseModel

from common.advertise import Advertiser
from common.condor import Gateway
from common.metrics import render, serve_metrics, snake
from common.reload import plan_reload

FIGURES = {
    "Pool": "physics",
    "Joined": True,
    "FreeSlots": 3,
    "LoadError": None,
    "OffersAcceptedTotal": 12,
    "FlockTo": "cm.chem:9618,cm.bio:9618",
}


def test_the_ad_has_identity_lifetime_and_the_figures() -> None:
    ad = Advertiser(Gateway(), "PoolD", "poold@physics", lambda: FIGURES, lambda: "cm:9618", 60).ad()
    assert ad["MyType"] == "PoolD" and ad["Name"] == "poold@physics"
    assert ad["ClassAdLifetime"] == 210 and ad["UpdateSequenceNumber"] == 1
    assert {k: ad[k] for k in FIGURES} == FIGURES


def test_prometheus_text_shows_the_same_figures() -> None:
    text = render("poold", lambda: FIGURES)[0].decode()
    lines = [x for x in text.splitlines() if not x.startswith("#")]
    assert "poold_joined 1.0" in lines and "poold_free_slots 3.0" in lines
    assert "poold_offers_accepted_total 12.0" in lines  # a counter
    assert "# TYPE poold_offers_accepted_total counter" in text
    info = next(x for x in lines if x.startswith("poold_info{"))
    assert 'pool="physics"' in info and 'flock_to="cm.chem:9618,cm.bio:9618"' in info
    assert not any(x.startswith("poold_load_error") for x in lines)  # undefined: left out
    assert snake("LastAliveAgeSeconds") == "last_alive_age_seconds"


async def test_the_endpoint_answers_get_metrics(nursery) -> None:  # type: ignore[no-untyped-def]
    import trio

    port = await nursery.start(
        serve_metrics, "127.0.0.1:0", "faultd", lambda: {"Epoch": 7, "Role": "manager"}
    )

    async def get(path: str) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        return data

    metrics = await get("/metrics")
    assert metrics.startswith(b"HTTP/1.0 200 OK\r\n") and b"\nfaultd_epoch 7.0\n" in metrics
    assert b'faultd_info{role="manager"} 1.0' in metrics
    assert (await get("/nothing")).startswith(b"HTTP/1.0 404")


class Inner(BaseModel):
    log_level: str = "info"
    socket: str = "/run/x.sock"


class Outer(BaseModel):
    daemon: Inner = Inner()
    name: str = "a"


def test_reload_plan_splits_what_a_sighup_takes_from_what_needs_a_restart() -> None:
    old = Outer()
    new = Outer(daemon=Inner(log_level="debug", socket="/run/y.sock"), name="b")
    plan = plan_reload(old, new, ["daemon.log_level"])
    assert plan.apply == ("daemon.log_level",) and plan.restart == ("daemon.socket", "name")
    assert plan_reload(old, new, ["daemon"]).restart == ("name",)
    assert plan_reload(old, old, ["daemon"]) == plan_reload(old, old, [])
