"""poold on four real HTCondor pools (sandbox hosts), each poold on its pool's central manager.

Pool fd gets more jobs than slots while fa-fc are idle: its poold must point FLOCK_TO at the
others (except fc, which fd's policy refuses), the jobs must run on other pools' machines, and
FLOCK_TO must be withdrawn once fd's queue has drained.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import trio

from common.condor import PoolLoad
from common.overlay.auth import load_ring_key
from common.overlay.claims import endorse
from common.overlay.driver import parse_address
from common.overlay.envelope import SignedSealer
from common.overlay.identity import IdentityFiles, load_identity
from common.overlay.messages import Direct, Peer, overlay_codec
from deploy.harness.federation import Federation
from deploy.harness.sandbox import SANDBOX, Sandbox, SandboxPool
from poolD.messages import Announcement

pytestmark = pytest.mark.htcondor

POOLS = ["fa", "fb", "fc", "fd"]
FD_POLICY = """
default = "allow"
[[rule]]
action = "deny"
pools = ["fc"]
comment = "not with fc"
"""


@pytest.fixture(scope="module")
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    # The session's security (recommended unless SANDBOX_SECURITY=open): in recommended pools fd's
    # jobs run in fa and fb with the tokens the poolds negotiate (Federation.trust_section).
    fed = Federation(sandbox, sandbox.shared_dir(), POOLS)
    fed.policies["fd"] = FD_POLICY
    try:
        fed.start_all()
        yield fed
    finally:
        fed.stop_all()


def test_overloaded_pool_flocks_to_willing_pools_and_withdraws(federation: Federation) -> None:
    fd = federation.pools["fd"]

    # fd's willing list fills with the idle pools, except fc, refused by fd's policy.
    def fd_ready() -> bool:
        status = federation.status("fd")
        pools = {e["pool"] for e in status["willing_list"]}
        return pools == {"fa", "fb"} and status["offers"]["dropped"].get("policy", 0) > 0

    federation.wait("fd's willing list without fc, whose offers it refuses", fd_ready)

    # The jobs wait for a file the test writes once one of them runs on another pool's machine:
    # until then fd's 3 slots stay taken, so the other 9 can run only by flocking. (Plain
    # `sleep 8` jobs raced flocking: on a slow machine fd's own slots could work through all 12
    # before FLOCK_TO took effect.)
    release = federation.workdir / "fd-release"

    async def submit() -> int:
        async with fd.gateway() as gw:
            result = await gw.submit(
                {
                    "executable": "/bin/sh",
                    "arguments": f"\"-c 'while [ ! -e {release} ]; do sleep 1; done; sleep 2'\"",
                    "should_transfer_files": "NO",
                    "initialdir": "/tmp",
                },
                count=12,
            )
            return result.cluster

    try:
        cluster = trio.run(submit)
        flock_to = federation.wait("FLOCK_TO on fd's schedd", lambda: federation.flock_to("fd"))
        collectors = {federation.pools[n].collector for n in ("fa", "fb")}
        assert set(flock_to.replace(",", " ").split()) == collectors
        assert federation.pools["fc"].collector not in flock_to
        assert fd.collector not in flock_to

        # fd's schedd now advertises to fa's collector too, but fa counts and configures only its own.
        federation.wait(
            "fd's schedd seen at fa", lambda: "cm.fd.sandbox" in _schedds_at(federation.pools["fa"])
        )
        fa_load = trio.run(_pool_load, federation.pools["fa"])
        assert [s.name for s in fa_load.schedds] == ["condor-sandbox@cm.fa.sandbox"]
        assert fa_load.idle_jobs == 0

        def running_elsewhere() -> list[str]:
            out = fd.exec(
                "condor_q", "-constraint", f"ClusterId == {cluster} && JobStatus == 2", "-af", "RemoteHost"
            )
            return [h for h in out.stdout.split() if not h.endswith(".fd.sandbox")]

        hosts = federation.wait(
            "one of fd's jobs running on another pool's machine", running_elsewhere, timeout=180
        )
        if federation.trusting("fd"):
            # Recommended pools: every grant that let the job in came from poold (the harness makes
            # no token between pools): fd's schedd holds a token of each pool its jobs run in, and
            # that pool's negotiator one of fd.
            where = {host.split("@")[1].split(".")[1] for host in hosts}
            federation.wait(
                f"poold's tokens between fd and {sorted(where)}",
                lambda: all(
                    f"flock-schedd-{pool}" in federation.flock_tokens("fd")
                    and "flock-negotiator-fd" in federation.flock_tokens(pool)
                    for pool in where
                ),
            )
            held = federation.status("fd")["tokens"]["held"]
            assert {f"{pool}/schedd" for pool in where} <= set(held), held
    finally:
        release.touch()

    def finished() -> list[list[str]]:
        out = fd.exec(
            "condor_history", "-constraint", f"ClusterId == {cluster}", "-af", "LastRemoteHost", "ExitCode"
        )
        rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
        return rows if len(rows) == 12 else []

    rows = federation.wait("fd's 12 jobs to finish", finished, timeout=240)
    assert [code for _, code in rows] == ["0"] * 12, rows
    hosts = [host for host, _ in rows]
    elsewhere = [h for h in hosts if not h.endswith(".fd.sandbox")]
    assert elsewhere, f"every job ran at home: {hosts}"
    assert {h.split("@")[1].split(".")[1] for h in elsewhere} <= {"fa", "fb"}
    # Quiet again: the runtime FLOCK_TO is withdrawn.
    federation.wait("FLOCK_TO withdrawn", lambda: not federation.flock_to("fd"), timeout=60)
    for other in ("fa", "fb", "fc"):  # the pools fd flocked to never thought they had to flock
        assert not federation.flock_to(other)
        assert not [d for d in federation.status(other)["decisions"] if "flock to" in d]
    assert any("flock intent from fd: accepted" in d for d in federation.status("fa")["decisions"])
    assert federation.status("fa")["flock_from"] == sorted([federation.address("fd"), "cm.fd.sandbox"])


def _schedds_at(pool: SandboxPool) -> str:
    return pool.exec("condor_status", "-schedd", "-af", "Name").stdout


async def _pool_load(pool: SandboxPool) -> PoolLoad:
    async with pool.gateway() as gw:
        return await gw.pool_load()


def test_forged_and_absurd_offers_are_dropped_and_counted(federation: Federation) -> None:
    target = parse_address(f"{federation.pools['fb'].hosts[0]['address']}:7640")
    before = federation.status("fb")
    me = Peer(id=12345, addr="10.213.250.1:7640")
    absurd = Announcement(
        pool="liar",
        collector="10.213.250.1:9618",
        origin=me,
        seq=1,
        free_slots=500,
        total_slots=3,
        queue_length=0,
        utilization=0.0,
        valid_for=10.0,
        ttl=1,
        row=0,
    )
    # A ring member with a valid certificate (pool "liar", any sandbox address) that lies.
    files = federation.keys.node("liar", hosts=["10.213.0.0/16"], pool="liar", node_id=me.id)
    liar = load_identity(IdentityFiles(files.key, files.cert, federation.keys.ca_file, None))
    to = f"{target[0]}:{target[1]}"
    codec, sealer = overlay_codec(), SignedSealer(load_ring_key(federation.key), liar, context="datagram")
    payload = codec.encode_datagram(Direct(sender=me, payload=endorse(liar, absurd, time.time())))
    datagrams = [
        sealer.seal(payload, to, time.time(), os.urandom(16)),  # sealed, but absurd
        SignedSealer(bytes(32), liar, context="datagram").seal(payload, to, time.time(), os.urandom(16)),
        b"\x93\x01garbage",
    ]
    sealed = sealer.seal(payload, to, time.time(), os.urandom(16))
    datagrams += [sealed, sealed]  # the second is a replay
    subprocess.run(
        [
            str(SANDBOX),
            "netns",
            "fa",
            "--",
            sys.executable,
            "-c",
            (
                "import socket, sys, ast\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"for d in {datagrams!r}: s.sendto(d, {target!r})\n"
            ),
        ],
        check=True,
    )

    def counted() -> dict | None:
        s = federation.status("fb")
        drops, offers = s["overlay_drops"], s["offers"]["dropped"]
        ok = (
            drops.get("bad_mac", 0) > before["overlay_drops"].get("bad_mac", 0)
            and drops.get("replayed", 0) > before["overlay_drops"].get("replayed", 0)
            and offers.get("absurd", 0) >= before["offers"]["dropped"].get("absurd", 0) + 1
        )
        return s if ok else None

    status = federation.wait("drops counted at fb", counted, timeout=20)
    assert "liar" not in [e["pool"] for e in status["willing_list"]]
    assert status["joined"]  # and the daemon is still running


def test_restarted_poold_rejoins_and_its_willing_list_refills(federation: Federation) -> None:
    federation.stop("fb")
    federation.start("fb")
    status = federation.wait(
        "fb rejoined with offers",
        lambda: (
            (s := federation.status("fb"))["joined"]
            and {e["pool"] for e in s["willing_list"]} >= {"fa", "fc"}
            and s
        ),
    )
    assert status["leaf_set"]
    human = subprocess.run(
        [sys.executable, "-m", "poolD", "status", "--socket", str(federation.socket("fb"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "willing list:" in human and "fa" in human and "row 0:" in human
