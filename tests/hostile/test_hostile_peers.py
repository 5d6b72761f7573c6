"""Hostile peers against live daemons (issue 14, rows 2, 3, 4, 5, 7 and 8, and more): real poold
and faultd processes on loopback, attacked over real sockets by a nemesis that holds nothing and
by one that holds the ring key and a valid node certificate of its own.

For every case: the daemon is still running and answers `status`, its resident memory (VmRSS of
the daemon's own process, from /proc) stays under its start-up value plus MEMORY_BOUND_MB, and the
drop is counted in `status` under its reason. No timing is asserted: deadlines are generous.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.keys import issue_node
from common.overlay.ids import node_id_from_name
from common.overlay.messages import Broadcast, Direct, JoinRequest, LeafSetPush, Peer, Ping
from common.wire import HEADER, MessageCodec, pack
from deploy.harness.ring_keys import RingKeys
from faultD.messages import Alive, PoolState, ReplicaPush, StateFile
from faultD.service import BULK_TYPES
from poolD.messages import FlockIntent, FlockReply
from tests.hostile.live import LiveDaemon, faultd_config, free_port, poold_config
from tests.hostile.nemesis import Nemesis

pytestmark = pytest.mark.hostile

MEMORY_BOUND_MB = 40.0  # what an attack may add to a daemon's resident memory
POOLD = "home"


def grows(daemon: LiveDaemon, reason: str, before: dict[str, int], by: int = 1) -> bool:
    return daemon.drops().get(reason, 0) >= before.get(reason, 0) + by


def unharmed(daemon: LiveDaemon, rss_start: float) -> None:
    """Still running, still answering, memory within its bound."""
    assert daemon.alive(), daemon.tail()
    assert daemon.status() is not None, daemon.tail()
    rss = daemon.rss_mb()
    assert rss < rss_start + MEMORY_BOUND_MB, (
        f"{daemon.name}: RSS {rss:.0f} MB, started at {rss_start:.0f} MB"
    )


# ----------------------------------------------------------------------------- poold


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def poold_keys(workdir: Path) -> RingKeys:
    return RingKeys(workdir / "poold-ring", ring="poold")


@pytest.fixture(scope="module")
def poold(workdir: Path, poold_keys: RingKeys) -> Iterator[LiveDaemon]:
    revoked = workdir / "revoked.txt"
    revoked.write_text("# none yet\n")
    config = poold_config(poold_keys, POOLD, free_port(), workdir) + ""
    config = config.replace("[ring.overlay]", f'revoked_file = "{revoked}"\n[ring.overlay]')
    daemon = LiveDaemon(workdir, "poold", POOLD, config)
    daemon.start()
    daemon.rss_start = daemon.rss_mb()  # type: ignore[attr-defined]
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def insider(poold_keys: RingKeys) -> Iterator[Nemesis]:
    """A compromised central manager: ring key and a valid certificate for pool 'evil'."""
    n = Nemesis(poold_keys, name="mallory", pool="evil")
    yield n
    n.close()


@pytest.fixture(scope="module")
def outsider() -> Iterator[Nemesis]:
    """An attacker who holds nothing."""
    n = Nemesis()
    yield n
    n.close()


def address(daemon: LiveDaemon) -> str:
    s = daemon.status()
    assert s is not None
    return str(s["node"]["addr"])


def test_row2_broadcast_with_absurd_level_is_dropped_not_fatal(poold: LiveDaemon, insider: Nemesis) -> None:
    to = address(poold)
    before = poold.drops()
    reply = insider.endorse(FlockReply(pool="evil", accepted=True, reason="x"))
    for level in (-1000, -1, 10**6):
        bad = Broadcast.model_construct(origin=insider.me, seq=level & 0xFFFF, level=level, payload=reply)
        insider.send(to, insider.datagram(bad, to))
    poold.wait("three invalid broadcasts counted", lambda: grows(poold, "invalid", before, 3))
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_row5_datagram_for_another_node_is_refused(poold: LiveDaemon, insider: Nemesis) -> None:
    to = address(poold)
    other = f"127.0.0.1:{free_port()}"  # B: what was captured on its way from A to B
    before = poold.drops()
    ping = Ping(sender=insider.me, nonce=1, sent=time.time())
    insider.send(to, insider.datagram(ping, to, recipient=other))
    poold.wait("the datagram for B refused by C", lambda: grows(poold, "wrong_recipient", before))
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_replayed_and_stale_datagrams_are_refused(poold: LiveDaemon, insider: Nemesis) -> None:
    """A datagram replayed to the node it was sealed for, and one sealed long ago (a capture kept
    past the replay window), are refused before anything in them is believed."""
    to = address(poold)
    before = poold.drops()
    datagram = insider.datagram(Ping(sender=insider.me, nonce=2, sent=time.time()), to)
    insider.send(to, datagram)
    insider.send(to, datagram)
    poold.wait("the copy refused as replayed", lambda: grows(poold, "replayed", before))
    old = time.time() - 600
    insider.send(to, insider.datagram(Ping(sender=insider.me, nonce=3, sent=old), to, at=old))
    poold.wait("the old datagram refused as stale", lambda: grows(poold, "stale", before))
    assert poold.drops().get("replayed", 0) == before.get("replayed", 0) + 1
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_row7_control_socket_survives_garbage(poold: LiveDaemon) -> None:
    for line in [b"[" * 200_000 + b"\n", b'{"a":' * 5000 + b"\n", b"\xff\xfe\x00\n", b"x" * 100_000, b"[]\n"]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(15)
            s.connect(str(poold.socket))
            try:
                s.sendall(line)
            except OSError:
                pass  # the daemon may stop reading at its limit and answer at once
            reply = s.makefile("rb").readline()
        assert json.loads(reply)["error"].startswith("bad request"), reply[:200]
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def kernel_drops(port: int) -> int:
    """Datagrams the kernel dropped for a full receive buffer on a UDP port (/proc/net/udp)."""
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port:
            return int(fields[-1])
    return 0


def test_row8_a_flood_of_junk_is_counted_exactly_and_logged_in_summary(
    poold: LiveDaemon, outsider: Nemesis
) -> None:
    to = address(poold)
    port = int(to.rsplit(":", 1)[1])
    before, lines_before, lost_before = poold.drops(), len(poold.log_lines()), kernel_drops(port)
    sent = 9500
    for i in range(sent):
        outsider.send(to, b"junk %d" % i)
        if i % 50 == 49:
            time.sleep(0.002)
    time.sleep(1.0)

    def all_accounted() -> bool:
        counted = poold.drops().get("malformed", 0) - before.get("malformed", 0)
        return counted + kernel_drops(port) - lost_before >= sent

    poold.wait("every junk datagram counted (or lost by the kernel)", all_accounted)
    counted = poold.drops()["malformed"] - before.get("malformed", 0)
    assert counted + kernel_drops(port) - lost_before == sent  # exact: nothing counted twice
    assert counted > sent // 2
    new_lines = [line for line in poold.log_lines()[lines_before:] if "dropped" in line]
    assert len(new_lines) <= 20, f"{len(new_lines)} log lines for {counted} junk datagrams"
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_insider_cannot_claim_another_node_or_pool(poold: LiveDaemon, insider: Nemesis) -> None:
    to = address(poold)
    before = poold.drops()
    someone = Peer(id=node_id_from_name(POOLD) ^ 1, addr=insider.addr)
    insider.send(to, insider.datagram(Ping(sender=someone, nonce=7, sent=time.time()), to))
    insider.send(to, insider.datagram(JoinRequest(joiner=someone), to))
    intent = insider.endorse(FlockIntent(pool="physics", origin=insider.me, schedd_hosts=["127.0.0.1"]))
    insider.send(to, insider.datagram(Direct(sender=insider.me, payload=intent), to))
    unsigned = FlockReply(pool="evil", accepted=True, reason="no proof")
    insider.send(to, insider.datagram(Direct(sender=insider.me, payload=unsigned), to))
    poold.wait("impersonations counted", lambda: grows(poold, "unbound_claim", before, 2))
    poold.wait("the foreign pool name counted", lambda: grows(poold, "pool_mismatch", before))
    poold.wait("the unsigned payload counted", lambda: grows(poold, "bad_proof", before))
    s = poold.status()
    assert s is not None and not s["flock_from"] and not s["authorized"]
    assert all("flock intent" not in d for d in s["decisions"])
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_insider_oversized_fields_and_wrong_types_are_invalid(poold: LiveDaemon, insider: Nemesis) -> None:
    to = address(poold)
    before = poold.drops()
    long_addr = Peer.model_construct(id=insider.me.id, addr="h" * 5000 + ":1")
    insider.send(to, insider.datagram(Ping.model_construct(sender=long_addr, nonce=1, sent=1.0), to))
    many = [Peer(id=i + 1, addr="127.0.0.1:9") for i in range(300)]
    insider.send(to, insider.datagram(LeafSetPush.model_construct(sender=insider.me, leaf_set=many), to))
    me = insider.me.model_dump(mode="python")
    wrong = [
        {"sender": me, "nonce": "x", "sent": 1.0},
        {"sender": 5, "nonce": 1, "sent": 1.0},
        {"sender": me, "nonce": 1, "sent": float("nan")},
        {"sender": me, "nonce": -1, "sent": 1.0},
    ]
    for body in wrong:
        insider.send(to, insider.seal(pack([1, "ping", body]), to))
    poold.wait("six invalid messages counted", lambda: grows(poold, "invalid", before, 6))
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_insider_flood_is_rate_limited(poold: LiveDaemon, insider: Nemesis) -> None:
    to = address(poold)
    before = poold.drops()
    ping = insider.codec.encode(Ping(sender=insider.me, nonce=1, sent=time.time()))
    for i in range(6000):  # about 2,000 a second, which the daemon reads as fast as they come
        insider.send(to, insider.seal(ping, to))
        if i % 100 == 99:
            time.sleep(0.05)
    poold.wait("the flood rate-limited", lambda: grows(poold, "rate_limited", before))
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_revoked_and_expired_certificates_are_refused(
    poold: LiveDaemon, poold_keys: RingKeys, workdir: Path
) -> None:
    to = address(poold)
    before = poold.drops()
    revoked = Nemesis(poold_keys, name="stolen", pool="stolen")
    expired_files = issue_node(poold_keys.ca, workdir / "old", ring="poold", name="old", pool="old",
                               hosts=["127.0.0.1"], days=1, now=time.time() - 10 * 86_400)  # fmt: skip
    assert revoked.identity is not None
    (workdir / "revoked.txt").write_text(f"{revoked.identity.cert.serial}\n")
    assert poold.proc is not None
    os.kill(poold.proc.pid, signal.SIGHUP)
    nonces = iter(range(1, 1_000_000))

    def refused_once_reloaded() -> bool:
        """A ping from the revoked certificate, again until the reload has taken effect."""
        ping = Ping(sender=revoked.me, nonce=next(nonces), sent=time.time())
        revoked.send(to, revoked.datagram(ping, to))
        return grows(poold, "revoked", before)

    poold.wait("the revoked certificate refused after SIGHUP", refused_once_reloaded)
    from common.overlay.identity import IdentityFiles, load_identity

    old = load_identity(IdentityFiles(expired_files.key, expired_files.cert, poold_keys.ca_file, None))
    revoked.sealer.identity = old  # type: ignore[union-attr]
    revoked.send(to, revoked.datagram(Ping(sender=revoked.me, nonce=next(nonces), sent=time.time()), to))
    poold.wait("the expired certificate refused", lambda: grows(poold, "expired_certificate", before))
    revoked.close()
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


def test_outsider_and_other_rings_are_stopped_at_the_mac(
    poold: LiveDaemon, outsider: Nemesis, workdir: Path
) -> None:
    to = address(poold)
    before = poold.drops()
    stranger = Nemesis(RingKeys(workdir / "other-ring", ring="poold"), name="mallory", pool="evil")
    stranger.send(to, stranger.datagram(Ping(sender=stranger.me, nonce=1, sent=time.time()), to))
    outsider.send(to, b"\x94" + os.urandom(200), b"\x00" * 70_000)
    poold.wait("a datagram of another ring refused", lambda: grows(poold, "bad_mac", before))
    poold.wait("garbage refused", lambda: grows(poold, "malformed", before))
    stranger.close()
    unharmed(poold, poold.rss_start)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- faultd


@pytest.fixture(scope="module")
def faultd_keys(workdir: Path) -> RingKeys:
    return RingKeys(workdir / "faultd-ring", ring="faultd:pool")


@pytest.fixture(scope="module")
def faultd(workdir: Path, faultd_keys: RingKeys) -> Iterator[LiveDaemon]:
    config = faultd_config(faultd_keys, "ex1", "pool", free_port(), workdir, manager="cm")
    daemon = LiveDaemon(workdir, "faultd", "ex1", config)
    daemon.start()
    daemon.rss_start = daemon.rss_mb()  # type: ignore[attr-defined]
    yield daemon
    daemon.stop()


def overlay_address(daemon: LiveDaemon) -> str:
    s = daemon.status()
    assert s is not None and s["overlay"], s
    return str(s["overlay"])


def test_row3_bulk_channel_buffers_nothing_before_authentication(faultd: LiveDaemon) -> None:
    host, port = overlay_address(faultd).rsplit(":", 1)
    before = faultd.drops()
    junk = os.urandom(1 << 20)
    floods = []
    for _ in range(6):  # each announces a 60 MiB frame and sends 30 MiB of it
        s = socket.create_connection((host, int(port)), timeout=10)
        floods.append(s)
        try:
            s.sendall(HEADER.pack(60 << 20))
            for _ in range(30):
                s.sendall(junk)
        except OSError:
            pass  # refused after the header: what should happen

    # Idle connections: six from one address (four are held, two refused at once), then 40 more
    # from ten others, round-robin, past the cap of 16 awaiting authentication.
    def connect(source: str) -> socket.socket:
        return socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))

    idle = [connect("127.0.0.12") for _ in range(6)]
    faultd.wait(
        "connections over one address's share refused",
        lambda: grows(faultd, "bulk_too_many_from_peer", before, 2),
    )
    idle += [connect(f"127.0.0.{2 + i % 10}") for i in range(40)]
    faultd.wait("the announced frames refused", lambda: grows(faultd, "bulk_oversized", before, 6))
    faultd.wait(
        "connections over the cap refused", lambda: grows(faultd, "bulk_too_many_connections", before)
    )
    unharmed(faultd, faultd.rss_start)  # type: ignore[attr-defined]
    for s in floods + idle:
        s.close()


def test_row4_replica_from_a_ring_member_that_is_not_the_manager(
    workdir: Path, faultd_keys: RingKeys
) -> None:
    """A machine of the pool (valid certificate) pushes a replica with a huge version and a config
    file adding a daemon, to a listener whose manager ('cm') never started: the listener takes
    over (it is the closest live node to cm's id) and must not write that file."""
    port = free_port()
    config = faultd_config(faultd_keys, "ex2", "pool", port, workdir, manager="cm", missed_alives=8)
    victim = LiveDaemon(workdir, "faultd", "ex2", config)
    victim.start()
    rss_start = victim.rss_mb()
    insider = Nemesis(faultd_keys, name="ex9", pool="pool")
    try:
        to = overlay_address(victim)
        victim.wait("the role machine runs", lambda: (s := victim.status()) and s.get("role") == "listener")
        files = [StateFile(name="config/evil.conf", data=b"DAEMON_LIST = $(DAEMON_LIST) EVIL\n")]
        state = PoolState(manager=insider.me.id, epoch=99, version=10**9, taken_at=time.time(), files=files,
                          checksum=PoolState.digest(files))  # fmt: skip
        insider.bulk(
            to, ReplicaPush(sender=insider.me, state=state), MessageCodec(list(BULK_TYPES), name="x")
        )
        alive = Alive(manager=insider.me, collector="127.0.0.1:9618", epoch=1, seq=1, interval=1.0,
                      incarnation=1, state_version=10**9)  # fmt: skip
        fake_cm = Peer(id=node_id_from_name("cm"), addr=insider.addr)
        forged = Alive(
            manager=fake_cm, collector="127.0.0.1:9618", epoch=1, seq=1, interval=1.0, incarnation=1
        )
        insider.send(to, insider.datagram(Direct(sender=insider.me, payload=insider.endorse(forged)), to))
        victim.wait("the forged alive counted", lambda: victim.drops().get("unbound_claim", 0) >= 1)
        del alive
        status = victim.wait(
            "the listener took over", lambda: (s := victim.status()) and s["role"] == "manager" and s
        )
        assert status["replica"] is None or status["replica"]["version"] != 10**9
        assert status["refused"].get("replica", 0) >= 1
        config_dir = workdir / "ex2-condor" / "config.d"
        victim.wait("the role file written", lambda: any(config_dir.glob("99-faultd-role.conf")))
        time.sleep(2.0)  # what a takeover restores is written before the role file
        for f in config_dir.iterdir():
            assert "EVIL" not in f.read_text(), f"{f.name}: {f.read_text()}"
        assert not list(config_dir.glob("98-faultd-manager-*"))
        unharmed(victim, rss_start)
    finally:
        insider.close()
        victim.stop()


def test_faultd_refuses_poold_ring_and_unsigned_senders(faultd: LiveDaemon, poold_keys: RingKeys) -> None:
    to = overlay_address(faultd)
    before = faultd.drops()
    pool_manager = Nemesis(poold_keys, name="mallory", pool="evil")  # a poold key on faultd's ring
    pool_manager.send(to, pool_manager.datagram(Ping(sender=pool_manager.me, nonce=1, sent=time.time()), to))
    faultd.wait("a datagram of poold's ring refused", lambda: grows(faultd, "bad_mac", before))
    pool_manager.close()
    unharmed(faultd, faultd.rss_start)  # type: ignore[attr-defined]
