"""poold on four real HTCondor pools (sandbox hosts), each poold on its pool's central manager.

Pool fd gets more jobs than slots while fa-fc are idle: its poold must point FLOCK_TO at the
others (except fc, which fd's policy refuses), the jobs must run on other pools' machines, and
FLOCK_TO must be withdrawn once fd's queue has drained.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from common.overlay.auth import Sealer, generate_key_file, load_ring_key
from common.overlay.driver import parse_address
from common.overlay.messages import Direct, Peer, overlay_codec
from common.service import query_control
from poolD.messages import Announcement
from tests.conftest import SANDBOX, Sandbox, SandboxPool

pytestmark = pytest.mark.htcondor

POOLS = ["fa", "fb", "fc", "fd"]
FAST_OVERLAY = """
[ring.overlay]
keepalive_interval = 1.0
leaf_timeout = 4.0
probe_timeout = 1.0
table_probe_interval = 5.0
row_maintenance_interval = 5.0
leaf_exchange_interval = 5.0
join_retry = 1.0
"""


class Federation:
    def __init__(self, sandbox: Sandbox, workdir: Path) -> None:
        self.workdir = workdir
        self.key = workdir / "ring.key"
        generate_key_file(self.key)
        self.pools: dict[str, SandboxPool] = {name: sandbox.up(name, slots=3) for name in POOLS}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        (workdir / "fd-policy.toml").write_text(
            'default = "allow"\n[[rule]]\naction = "deny"\npools = ["fc"]\ncomment = "not with fc"\n'
        )

    def config_file(self, name: str) -> Path:
        pool = self.pools[name]
        address = pool.hosts[0]["address"]
        bootstrap = "" if name == "fa" else f'bootstrap = "{self.pools["fa"].hosts[0]["address"]}:7640"'
        policy = f'policy_file = "{self.workdir / "fd-policy.toml"}"' if name == "fd" else ""
        path = self.workdir / f"{name}.toml"
        path.write_text(f"""
[pool]
name = "{name}"
collector = "{pool.collector}"
condor_config = "{pool.client_config}"

[ring]
node_name = "{name}"
bind = "{address}"
port = 7640
{bootstrap}
key_file = "{self.key}"
{FAST_OVERLAY}
[discovery]
interval = 2.0
valid_for = 15.0

[flocking]
interval = 2.0
withdraw_after = 10.0
max_pools = 3

[daemon]
control_socket = "{self.socket(name)}"
{policy}
""")
        return path

    def socket(self, name: str) -> Path:
        return self.workdir / f"{name}.sock"

    def start(self, name: str) -> None:
        config = self.config_file(name)
        log = open(self.workdir / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.pools[name].hosts[0]["netns"],
                sys.executable,
                "-m",
                "poolD",
                "run",
                "--config",
                str(config),
            ],
            stdout=log,
            stderr=log,
            cwd=Path(__file__).resolve().parents[2],
        )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        # `ip netns exec` execs the command, so the pid is poold's own
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    def status(self, name: str) -> dict:
        return query_control(self.socket(name), {"cmd": "status"})

    def wait(self, what: str, predicate, timeout: float = 90.0):
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except OSError:
                pass
            time.sleep(0.5)
        logs = {n: (self.workdir / f"{n}.log").read_text()[-3000:] for n in POOLS}
        raise AssertionError(f"timed out waiting for {what}; last={last!r}\n" + json.dumps(logs, indent=1))


@pytest.fixture(scope="module")
def federation(sandbox: Sandbox) -> Iterator[Federation]:
    workdir = sandbox.shared_dir()
    fed = Federation(sandbox, workdir)
    for name in POOLS:
        fed.start(name)
    try:
        fed.wait("all poolds joined", lambda: all(fed.status(n)["joined"] for n in POOLS))
        yield fed
    finally:
        for name in list(fed.procs):
            fed.stop(name)


def flock_to_of(pool: SandboxPool) -> str:
    res = pool.exec("condor_config_val", "-schedd", "FLOCK_TO", check=False)
    value = res.stdout.strip()
    return "" if res.returncode != 0 or value.startswith("Not defined") else value


def test_overloaded_pool_flocks_to_willing_pools_and_withdraws(federation: Federation) -> None:
    fd = federation.pools["fd"]

    # fd's willing list fills with the idle pools, except fc, refused by fd's policy.
    def fd_ready() -> bool:
        status = federation.status("fd")
        pools = {e["pool"] for e in status["willing_list"]}
        return pools == {"fa", "fb"} and status["offers"]["dropped"].get("policy", 0) > 0

    federation.wait("fd's willing list without fc, whose offers it refuses", fd_ready)

    async def submit() -> int:
        async with fd.gateway() as gw:
            result = await gw.submit(
                {
                    "executable": "/bin/sleep",
                    "arguments": "8",
                    "should_transfer_files": "NO",
                    "initialdir": "/tmp",
                },
                count=12,
            )
            return result.cluster

    cluster = trio.run(submit)
    flock_to = federation.wait("FLOCK_TO on fd's schedd", lambda: flock_to_of(fd))
    collectors = {federation.pools[n].collector for n in ("fa", "fb")}
    assert set(flock_to.replace(",", " ").split()) == collectors
    assert federation.pools["fc"].collector not in flock_to

    def finished() -> list[str]:
        out = fd.exec(
            "condor_history", "-constraint", f"ClusterId == {cluster}", "-af", "LastRemoteHost", "ExitCode"
        )
        rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
        return [r[0] for r in rows if r[1] == "0"] if len(rows) == 12 else []

    hosts = federation.wait("fd's 12 jobs to finish", finished, timeout=240)
    elsewhere = [h for h in hosts if not h.endswith(".fd.sandbox")]
    assert elsewhere, f"every job ran at home: {hosts}"
    assert {h.split("@")[1].split(".")[1] for h in elsewhere} <= {"fa", "fb"}
    # Quiet again: the runtime FLOCK_TO is withdrawn.
    federation.wait("FLOCK_TO withdrawn", lambda: not flock_to_of(fd), timeout=60)
    assert any("flock intent from fd: accepted" in d for d in federation.status("fa")["decisions"])
    assert federation.status("fa")["flock_from"]  # fa authorized fd's schedd


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
    codec, sealer = overlay_codec(), Sealer(load_ring_key(federation.key))
    payload = codec.encode_datagram(Direct(sender=me, payload=absurd))
    datagrams = [
        sealer.seal(payload, time.time(), os.urandom(16)),  # sealed, but absurd
        Sealer(bytes(32)).seal(payload, time.time(), os.urandom(16)),  # forged: wrong key
        b"\x93\x01garbage",
    ]
    sealed = sealer.seal(payload, time.time(), os.urandom(16))
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
