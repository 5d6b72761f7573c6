"""HTCondor's own security in the sandbox's recommended mode (`deploy/sandbox up --security
recommended`), checked against the running daemons: authentication required everywhere, no weak
method, and each identity allowed exactly what its role needs (docs/security-htcondor.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from common.condor import CondorError, DaemonKind, DaemonRef, Gateway
from deploy.harness.sandbox import Sandbox, SandboxPool

pytestmark = pytest.mark.htcondor

DAEMONS = ("master", "collector", "negotiator", "schedd", "startd")
# Every authorization level a command can be registered at, and CLIENT (what a daemon requires
# when it connects out); SEC_<LEVEL>_* falls back to SEC_DEFAULT_* where it is not defined.
LEVELS = (
    "DEFAULT",
    "CLIENT",
    "READ",
    "WRITE",
    "ADMINISTRATOR",
    "CONFIG",
    "DAEMON",
    "NEGOTIATOR",
    "ADVERTISE_STARTD",
    "ADVERTISE_SCHEDD",
    "ADVERTISE_MASTER",
)
WEAK_METHODS = {"CLAIMTOBE", "ANONYMOUS"}
FLOCK_TO = "10.213.250.10:9618"


@pytest.fixture(scope="module")
def pool(sandbox: Sandbox) -> SandboxPool:
    """A recommended pool whatever SANDBOX_SECURITY says: these tests are about that mode."""
    return sandbox.up("secu", slots=1, hosts=2, security="recommended")


def daemon_value(pool: SandboxPool, daemon: str, knob: str, host: int = 0) -> str | None:
    """A knob as the running daemon has it (condor_config_val -DAEMON, as a user inside the
    root: FS); None when not defined. A failing query raises."""
    out = pool.exec("condor_config_val", f"-{daemon}", knob, host=host).stdout.strip()
    return None if out.startswith("Not defined") else out


def methods(value: str | None) -> set[str]:
    return {m.strip().upper() for m in (value or "").replace(",", " ").split()}


@pytest.mark.parametrize("host", [0, 1])
def test_every_daemon_requires_authentication_and_no_weak_method(pool: SandboxPool, host: int) -> None:
    daemons = DAEMONS if host == 0 else ("master", "schedd", "startd")
    for daemon in daemons:
        assert daemon_value(pool, daemon, "SECURITY_MODEL", host) == "9.0", daemon  # the package's
        default = daemon_value(pool, daemon, "SEC_DEFAULT_AUTHENTICATION", host)
        assert default is not None and default.upper() == "REQUIRED", (daemon, default)
        for level in LEVELS:
            required = daemon_value(pool, daemon, f"SEC_{level}_AUTHENTICATION", host)
            assert required is None or required.upper() == "REQUIRED", (daemon, level, required)
            for kind in ("ENCRYPTION", "INTEGRITY"):
                value = daemon_value(pool, daemon, f"SEC_{level}_{kind}", host)
                assert value is None or value.upper() == "REQUIRED", (daemon, level, kind, value)
            allowed = methods(daemon_value(pool, daemon, f"SEC_{level}_AUTHENTICATION_METHODS", host))
            assert not allowed & WEAK_METHODS, (daemon, level, allowed)
        for perm in ("READ", "WRITE", "NEGOTIATOR", "ADMINISTRATOR", "CONFIG", "DAEMON"):
            assert daemon_value(pool, daemon, f"ALLOW_{perm}", host) not in ("*", "*/*"), (daemon, perm)


async def test_users_and_daemons_authenticate_as_themselves(pool: SandboxPool) -> None:
    """Each client is the identity it holds, with encryption and integrity: the sandbox user on
    this machine (its token), poold and faultd (theirs); a user inside the root by FS."""
    schedd = await _schedd(pool)
    for identity, expected in (
        (None, "condor-sandbox@sandbox"),
        ("poold", f"poold@{pool.trust_domain}"),
        ("faultd", f"faultd@{pool.trust_domain}"),
    ):
        async with pool.gateway(identity) as gw:
            check = await gw.ping(schedd, "READ")
        assert (check.authorized, check.identity, check.method) == (True, expected, "IDTOKENS"), check
        assert check.encryption and check.integrity, check
    inside = pool.exec("condor_ping", "-type", "schedd", "-table", "READ").stdout
    assert "condor-sandbox@sandbox" in inside and "FS" in inside and "ALLOW" in inside, inside


async def test_an_unauthenticated_client_can_neither_read_nor_set_flock_to(pool: SandboxPool) -> None:
    schedd = await _schedd(pool)
    before = daemon_value(pool, "schedd", "FLOCK_TO")
    with tempfile.TemporaryDirectory() as nothing:  # no token at all: no method left
        async with Gateway(condor_config=pool.client_config, token_dir=Path(nothing), timeout=20) as gw:
            check = await gw.ping(schedd, "READ")
            assert not check.authorized and check.identity is None, check
            with pytest.raises(CondorError):
                await gw.pool_load(pool.collector)
            with pytest.raises(CondorError):
                await gw.set_config(schedd, {"FLOCK_TO": FLOCK_TO})
    assert daemon_value(pool, "schedd", "FLOCK_TO") == before


async def test_a_user_without_config_cannot_set_flock_to(pool: SandboxPool) -> None:
    schedd = await _schedd(pool)
    before = daemon_value(pool, "schedd", "FLOCK_TO")
    async with pool.gateway() as gw:  # the sandbox user: authenticated, READ and WRITE only
        check = await gw.ping(schedd, "READ")
        assert (check.authorized, check.identity) == (True, "condor-sandbox@sandbox"), check
        # Refused: htcondor2's ping raises then ("Failed to start command"), so no identity.
        assert not (await gw.ping(schedd, "CONFIG")).authorized
        with pytest.raises(CondorError, match="refused FLOCK_TO"):
            await gw.set_config(schedd, {"FLOCK_TO": FLOCK_TO})
    # condor_config_val -rset from inside the root (FS, the same user): refused too.
    res = pool.exec("condor_config_val", "-schedd", "-rset", f"FLOCK_TO = {FLOCK_TO}", check=False)
    assert res.returncode != 0, res
    assert daemon_value(pool, "schedd", "FLOCK_TO") == before


async def test_poold_sets_flock_to_and_faultd_reconfigs_its_master(pool: SandboxPool) -> None:
    schedd = await _schedd(pool)
    before = daemon_value(pool, "schedd", "FLOCK_TO")
    async with pool.gateway("poold") as gw:
        for authz in ("CONFIG", "DC_RECONFIG_FULL"):
            check = await gw.ping(schedd, authz)
            assert (check.authorized, check.identity) == (True, f"poold@{pool.trust_domain}"), check
        assert not (await gw.ping(pool.master(0), "DC_RECONFIG_FULL")).authorized  # not poold's
        await gw.set_config(schedd, {"FLOCK_TO": FLOCK_TO})
        assert daemon_value(pool, "schedd", "FLOCK_TO") == FLOCK_TO
        await gw.set_config(schedd, {"FLOCK_TO": None})
    assert daemon_value(pool, "schedd", "FLOCK_TO") == before
    async with pool.gateway("faultd") as gw:
        for host in (0, 1):
            check = await gw.ping(pool.master(host), "DC_RECONFIG_FULL")
            assert (check.authorized, check.identity) == (True, f"faultd@{pool.trust_domain}"), check
        assert not (await gw.ping(schedd, "DC_RECONFIG_FULL")).authorized  # not faultd's
        with pytest.raises(CondorError, match="refused FLOCK_TO"):
            await gw.set_config(schedd, {"FLOCK_TO": FLOCK_TO})
        await gw.reconfig(pool.master(1))  # what faultd does after writing its role file


async def _schedd(pool: SandboxPool) -> DaemonRef:
    """The central manager's schedd, by the address in its address file."""
    address = (pool.local_dir(0) / "spool" / ".schedd_address").read_text().splitlines()[0]
    return DaemonRef(kind=DaemonKind.SCHEDD, address=address)
