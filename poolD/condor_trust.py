"""What poolD's cross-pool trust does in HTCondor (issue 15, Deliver 3), through the gateway and
the token directories: ask a peer pool's collector for a token (condor_token_request over SSL),
approve at ours only the queued request that is exactly what the core decided (the checks of
poolD.flock_trust), install a received token where our daemons read theirs, and remove it. The
core decides (poolD.flock_trust.TrustBroker); these carry it out and report back."""

from __future__ import annotations

import os
from pathlib import Path

import structlog
import trio

from common.condor import Gateway, GatewayError
from poolD.config import TrustSection
from poolD.flock_trust import (
    AnnouncedRequest,
    ApproveToken,
    InstallToken,
    RemoveToken,
    RequestToken,
    check_lifetime,
    check_queued_request,
)

log = structlog.get_logger("poold")

# condor_token_request is stopped after this long: the core gives a request up after
# TrustSettings.request_timeout (120 s) and an install waits 30 s more for the token.
TOOL_GIVES_UP_AFTER = 600.0


def _name(peer: str, role: str) -> str:
    """The file a token of `peer` for our `role` daemons has, in request_dir and token dirs."""
    return f"flock-{role}-{peer}"


def token_dir(trust: TrustSection, role: str) -> Path | None:
    """Where our daemons of `role` read their tokens (schedds: our schedd tokens of the pools we
    flock to; negotiator: its tokens of the pools that flock to us)."""
    return trust.schedd_token_dir if role == "schedd" else trust.negotiator_token_dir


async def request_token(
    gateway: Gateway, trust: TrustSection, action: RequestToken
) -> tuple[str | None, str | None]:
    """(request id, None) once the peer's collector queued our request, or (None, why not)."""
    trust.request_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = trust.request_dir / _name(action.peer, action.role)
    target.unlink(missing_ok=True)
    try:
        request = await gateway.request_token(
            action.identity,
            action.authz,
            target,
            lifetime=action.lifetime,
            pool=action.collector,
            ssl_ca_file=trust.peer_ca_file,
            ssl_skip_host_check=trust.ssl_skip_host_check,
            give_up_after=TOOL_GIVES_UP_AFTER,
        )
    except GatewayError as e:
        return None, str(e)
    log.info("token requested", pool=action.peer, role=action.role, request=request.request_id)
    return request.request_id, None


async def approve_token(gateway: Gateway, trust_domain: str, action: ApproveToken) -> str | None:
    """Approve the request at our collector if the queued request is exactly the announced one
    (id, identity, authorizations, lifetime); None when approved, else why not."""
    try:
        queued = await gateway.token_requests()
    except GatewayError as e:
        return f"cannot list our collector's token requests: {e}"
    ad = next((q for q in queued if str(q.get("RequestId", "")) == action.request_id), None)
    if ad is None:
        return f"no request {action.request_id} is queued here"
    announced = AnnouncedRequest(action.peer, action.role, action.request_id)
    problem = check_queued_request(ad, announced, trust_domain) or check_lifetime(ad, action.lifetime)
    if problem is not None:
        log.warning("token request refused", pool=action.peer, role=action.role, reason=problem)
        return problem
    try:
        await gateway.approve_token_request(action.request_id)
    except GatewayError as e:
        return f"approval failed: {e}"
    log.info("token request approved", pool=action.peer, role=action.role, request=action.request_id)
    return None


async def install_token(trust: TrustSection, action: InstallToken, wait: float = 30.0) -> str | None:
    """Put the token HTCondor's tool received into the token directory of our `role` daemons,
    owned like that directory, mode 0600, by an atomic rename; None when done, else why not.
    The tool polls every 5 s and writes the token after the approval: wait up to `wait` s."""
    received = trust.request_dir / _name(action.peer, action.role)
    directory = token_dir(trust, action.role)
    if directory is None:
        return f"no token directory configured for our {action.role}s ([trust] {action.role}_token_dir)"
    with trio.move_on_after(wait):
        while not received.exists():
            await trio.sleep(0.5)
    try:
        token = received.read_text().strip()
    except OSError as e:
        return f"no token received within {wait:g} s ({received}: {e.strerror})"
    if token.count(".") != 2:
        return f"{received} holds no token"
    target = directory / _name(action.peer, action.role)
    temporary = target.with_suffix(".new")
    owner = directory.stat()
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chown(temporary, owner.st_uid, owner.st_gid)
        os.replace(temporary, target)
        received.unlink(missing_ok=True)
    except OSError as e:
        return f"cannot install the token into {directory}: {e.strerror}"
    log.info("token installed", pool=action.peer, role=action.role, path=str(target))
    return None


def remove_token(trust: TrustSection, action: RemoveToken) -> None:
    """Take a token out of our daemons' token directory (and whatever the tool left)."""
    (trust.request_dir / _name(action.peer, action.role)).unlink(missing_ok=True)
    directory = token_dir(trust, action.role)
    if directory is not None:
        (directory / _name(action.peer, action.role)).unlink(missing_ok=True)
    log.info("token removed", pool=action.peer, role=action.role, reason=action.reason)
