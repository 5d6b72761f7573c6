"""Issue 15's test of cross-pool trust, against real HTCondor: two recommended pools, each with its
own signing key and TRUST_DOMAIN, poold on each. A burst at "tta" flocks to "ttb" with every grant
made by poolD: the tokens (tta's schedd at ttb, ttb's negotiator at tta) come from token requests
that poold announces over the signed overlay and the other poold approves; no token is made by
hand. Jobs run in ttb and finish. Then ttb's policy revokes tta: FLOCK_FROM at ttb loses tta's
hosts, ttb's collector refuses tta's schedd ad, and new jobs of tta do not run in ttb.

poold runs here without its unit jail (SELFORG_UNIT_JAIL=0): the token tools run through the
sandbox's `tool` command (a network namespace and a chroot), which the unit's restrictions forbid;
on a real central manager the tools are on PATH (README, "Security model")."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import trio

from deploy.harness.federation import Federation
from deploy.harness.sandbox import SANDBOX, Sandbox

pytestmark = pytest.mark.htcondor

POOLS = ["tta", "ttb"]
DENY_TTA = """
default = "allow"
[[rule]]
action = "deny"
pools = ["tta"]
comment = "ttb no longer trusts tta"
"""


def trust_section(fed: Federation, name: str, ca_file: str) -> str:
    pool = fed.pools[name]
    tokens = pool.local_dir(0) / "tokens.d"
    return f"""
[trust]
trust_domain = "{pool.trust_domain}"
token_lifetime = 600
request_dir = "{fed.workdir / f"{name}-token-requests"}"
schedd_token_dir = "{tokens}"
negotiator_token_dir = "{tokens}"
peer_ca_file = "{ca_file}"
ssl_skip_host_check = true
tools = {[str(SANDBOX), "tool", name, "--"]!r}
""".replace("'", '"')


@pytest.fixture(scope="module")
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    os.environ["SELFORG_UNIT_JAIL"] = "0"
    fed = Federation(sandbox, sandbox.shared_dir(), POOLS, slots=2, security="recommended")
    # The peers' collector CAs (each collector makes its own at start-up): what an administrator
    # hands the pools it flocks with (README, "Security model").
    cas = [fed.pools[n].local_dir(0) / "ssl" / "ca.pem" for n in POOLS]
    fed.wait("both collectors made their CA", lambda: all(p.exists() for p in cas))
    ca_file = fed.workdir / "peer-collectors-ca.pem"
    ca_file.write_text("".join(p.read_text() for p in cas))
    fed.policies["ttb"] = 'default = "allow"\n'  # a policy file to reload later
    for name in POOLS:
        fed.sections[name] = trust_section(fed, name, str(ca_file))
        for token in (fed.pools[name].local_dir(0) / "tokens.d").glob("flock-*"):
            token.unlink()  # left by an earlier run: every flocking token must come from poold
    try:
        fed.start_all()
        yield fed
    finally:
        fed.stop_all()
        os.environ.pop("SELFORG_UNIT_JAIL", None)


def flock_tokens(fed: Federation, name: str) -> list[str]:
    return sorted(p.name for p in (fed.pools[name].local_dir(0) / "tokens.d").glob("flock-*"))


def jobs(fed: Federation, name: str, cluster: int) -> list[dict]:
    async def read() -> list[dict]:
        async with fed.pools[name].gateway() as gw:
            attrs = ["ProcId", "JobStatus", "ExitCode", "RemoteHost", "LastRemoteHost"]
            now = await gw.query_jobs(f"ClusterId == {cluster}", attrs)
            done = await gw.job_history(f"ClusterId == {cluster}", attrs)
            return [dict(j) for j in now] + [dict(j) for j in done]

    return trio.run(read)


def submit(fed: Federation, name: str, count: int, seconds: int) -> int:
    async def go() -> int:
        async with fed.pools[name].gateway() as gw:
            result = await gw.submit(
                {
                    "executable": "/bin/sleep",
                    "arguments": str(seconds),
                    "should_transfer_files": "NO",
                    "initialdir": "/tmp",
                },
                count=count,
            )
            return result.cluster

    return trio.run(go)


def ran_in(job: dict, pool: str) -> bool:
    host = str(job.get("RemoteHost") or job.get("LastRemoteHost") or "")
    return f".{pool}." in host


def test_poold_grants_both_tokens_jobs_flock_and_a_revocation_shuts_the_pool_out(
    federation: Federation,
) -> None:
    fed = federation
    cluster = submit(fed, "tta", 12, 15)
    # The burst: tta's poold flocks to ttb; each poold asks the other's collector and approves.
    fed.wait(
        "poold installed tta's schedd token of ttb and ttb's negotiator token of tta",
        lambda: (
            flock_tokens(fed, "tta") == ["flock-schedd-ttb"]
            and flock_tokens(fed, "ttb") == ["flock-negotiator-tta"]
        ),
        timeout=240,
    )
    status_a, status_b = fed.status("tta"), fed.status("ttb")
    assert "ttb/negotiator" in status_a["tokens"]["issued"], status_a["tokens"]
    assert "tta/schedd" in status_b["tokens"]["issued"], status_b["tokens"]
    fed.wait(
        "all 8 jobs of tta finished, some in ttb",
        lambda: (
            (js := jobs(fed, "tta", cluster))
            and len([j for j in js if j.get("JobStatus") == 4]) == 8
            and any(ran_in(j, "ttb") for j in js)
        ),
        timeout=300,
    )
    assert all(j.get("ExitCode") == 0 for j in jobs(fed, "tta", cluster) if j.get("JobStatus") == 4)

    # ttb's policy revokes tta (a reloaded policy file).
    (fed.workdir / "ttb-policy.toml").write_text(DENY_TTA)
    fed.policies["ttb"] = DENY_TTA
    fed.procs["ttb"].send_signal(signal.SIGHUP)
    ttb = fed.pools["ttb"]

    def flock_from() -> str:
        value = ttb.exec("condor_config_val", "-collector", "FLOCK_FROM").stdout.strip()
        return "" if value.startswith("Not defined") else value

    fed.wait(
        "ttb's FLOCK_FROM without tta's hosts", lambda: fed.address("tta") not in flock_from(), timeout=60
    )
    revoked_at = time.monotonic()
    second = submit(fed, "tta", 6, 5)
    log = ttb.local_dir(0) / "log" / "CollectorLog"
    fed.wait(
        "ttb's collector refuses tta's schedd ad",
        lambda: any(
            "PERMISSION DENIED to schedd-tta@" in line and "ADVERTISE_SCHEDD" in line
            for line in log.read_text(errors="replace").splitlines()
        ),
        timeout=60,
    )
    # New jobs of tta do not run in ttb: they run at home, one slot after the other.
    fed.wait(
        "all 6 new jobs of tta finished",
        lambda: len([j for j in jobs(fed, "tta", second) if j.get("JobStatus") == 4]) == 6,
        timeout=300,
    )
    late = [j for j in jobs(fed, "tta", second) if ran_in(j, "ttb")]
    assert late == [], (
        f"jobs of tta ran in ttb after the revocation ({time.monotonic() - revoked_at:.0f} s): {late}"
    )
