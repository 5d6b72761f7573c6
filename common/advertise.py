"""A daemon's ClassAd in its pool's collector, so that HTCondor's own tools show it:

    condor_status -any -constraint 'MyType == "PoolD"' -af Name FlockTo FreeSlots

Every `interval` seconds the daemon's figures (the same ones its Prometheus endpoint serves) go
to the collector as a generic ad (UPDATE_AD_GENERIC) with MyType and Name; the ad carries
ClassAdLifetime, so a daemon that died leaves the collector's list by itself, and a clean stop
takes it out at once (INVALIDATE_ADS_GENERIC). The collector authorizes both at the DAEMON level:
with host-based security the daemon's host must be in the collector's ALLOW_DAEMON; with IDTOKENS,
the identity of the daemon's token.

The ads go through a gateway of their own (its own worker process), so that an update waiting on
a dead collector never holds up the daemon's HTCondor actions (faultD's takeover above all).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import structlog
import trio

from common.cli import version
from common.condor import Gateway, GatewayError

log = structlog.get_logger("advertise")

Figures = dict[str, bool | int | float | str | None]


class Advertiser:
    """Keeps one generic ad (MyType, Name) up to date in the collector `collector()` names."""

    def __init__(
        self,
        gateway: Gateway,
        my_type: str,
        name: str,
        figures: Callable[[], Figures],
        collector: Callable[[], str | None],
        interval: float,
    ) -> None:
        self.gateway = gateway
        self.my_type = my_type
        self.name = name
        self.figures = figures
        self.collector = collector
        self.interval = interval
        self.started = int(time.time())
        self.sequence = 0
        self.advertised_to: str | None = None
        self.error: str | None = None

    def ad(self) -> dict[str, Any]:
        """The ad as sent: identity, lifetime, then the daemon's figures."""
        self.sequence += 1
        return {
            "MyType": self.my_type,
            "Name": self.name,
            "Machine": socket.getfqdn(),
            "DaemonPid": os.getpid(),
            "DaemonStartTime": self.started,
            "UpdateSequenceNumber": self.sequence,
            "ClassAdLifetime": int(3 * self.interval + 30),
            "SelforgVersion": version(),
        } | self.figures()

    async def advertise_now(self) -> None:
        """One update; a failure is logged once (and again when it is over), never raised."""
        collector = self.collector()
        if collector is None:
            return  # no collector known yet (faultd before it has heard of a manager)
        try:
            await self.gateway.advertise(self.ad(), collector=collector)
        except GatewayError as e:
            if self.error is None:
                log.warning("ad not accepted by the collector", collector=collector, error=str(e))
            self.error = str(e)
            return
        if self.error is not None:
            log.info("ad accepted by the collector again", collector=collector)
        self.error = None
        self.advertised_to = collector

    async def run(self) -> None:
        """Advertise every `interval` seconds until cancelled (an interval of 0: not now; a
        reload may change it)."""
        while True:
            if self.interval > 0:
                await self.advertise_now()
            await trio.sleep(self.interval or 5.0)

    async def withdraw(self, timeout: float = 5.0) -> None:
        """Take the ad out of the collector it last went to (a clean stop); shielded, bounded."""
        if self.advertised_to is None and self.collector() is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(timeout):
            try:
                await self.gateway.invalidate(
                    self.my_type, self.name, collector=self.advertised_to or self.collector()
                )
            except GatewayError as e:
                log.warning("ad not withdrawn (it expires by itself)", error=str(e))
