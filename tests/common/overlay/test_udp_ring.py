"""Overlay nodes over real UDP sockets on loopback, with sealed datagrams."""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

import trio

from common.overlay.auth import load_ring_key
from common.overlay.driver import RingConfig, UdpOverlay, parse_address
from common.overlay.envelope import SignedSealer
from common.overlay.ids import closeness, node_id_from_name
from common.overlay.messages import AppMessage, JoinRequest, Peer, Ping, app_message, overlay_codec
from common.overlay.node import Delivered, Event, OverlayNode, OverlayParams
from common.wire import pack
from deploy.harness.ring_keys import RingKeys
from deploy.harness.sandbox import poll_until_async

# Fast joins and maintenance, but no deadline a loaded machine could miss: nothing here tests failure
# detection, so a node stalled for seconds must not be declared dead (leaf_timeout) nor routed
# around (hop_timeout), which would deliver a message at a node that is not the closest.
FAST = OverlayParams(keepalive_interval=0.5, leaf_timeout=600.0, probe_timeout=0.5, hop_timeout=600.0,
                     table_probe_interval=2.0, row_maintenance_interval=2.0, leaf_exchange_interval=2.0,
                     join_retry=0.5)  # fmt: skip


@app_message
class Probe(AppMessage):
    TYPE = "test.udp.probe"
    n: int


class Ring:
    def __init__(self, keys: RingKeys) -> None:
        self.keys = keys
        self.key_file = keys.key_file
        self.nodes: list[UdpOverlay] = []
        self.delivered: dict[int, str] = {}

    async def add(
        self, nursery: trio.Nursery, name: str, *, port: int = 0, seeds: list[str] | None = None
    ) -> UdpOverlay:
        """A node bound to 127.0.0.1 (certified for it and for localhost), joining through
        `seeds` (default: the first node)."""
        if seeds is None:
            seeds = [self.nodes[0].address] if self.nodes else None
        self.keys.node(name, hosts=["127.0.0.1", "localhost"], pool="test")
        cfg = RingConfig(node_name=name, bind="127.0.0.1", port=port, bootstrap=seeds,
                         overlay=FAST, **self.keys.ring_fields(name))  # fmt: skip
        node: UdpOverlay

        def on_event(event: Event) -> None:
            if isinstance(event, Delivered) and isinstance(event.payload, Probe):
                self.delivered[event.payload.n] = node.address

        node = UdpOverlay(cfg, on_event=on_event)
        await nursery.start(node.run)
        self.nodes.append(node)
        return node

    async def converge(self) -> None:
        await poll_until_async(
            "every node to know every other in its leaf set",
            lambda: all(
                n.core and n.core.joined and len(n.core.leaf) == len(self.nodes) - 1 for n in self.nodes
            ),
        )


def ring_keys(tmp_path: Path) -> RingKeys:
    return RingKeys(tmp_path)


async def test_five_nodes_form_a_ring_and_route_to_the_closest(tmp_path: Path) -> None:
    ring = Ring(ring_keys(tmp_path))
    async with trio.open_nursery() as nursery:
        for i in range(5):
            await ring.add(nursery, f"udp-node-{i}")
        await ring.converge()
        by_id = {n.core.me.id: n.address for n in ring.nodes if n.core}
        keys = [node_id_from_name(f"key-{k}") for k in range(40)]
        for k, key in enumerate(keys):
            await ring.nodes[k % 5].route(key, Probe(n=k))
        await poll_until_async("every probe delivered", lambda: len(ring.delivered) >= len(keys))
        for k, key in enumerate(keys):
            assert ring.delivered[k] == by_id[min(by_id, key=lambda i: closeness(key, i))]
        assert all(n.core and n.core.rtt for n in ring.nodes)  # RTTs measured from real probes
        assert not any(n.drops for n in ring.nodes)
        nursery.cancel_scope.cancel()


def free_udp_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


async def test_nodes_given_the_same_seeds_under_another_name_make_one_ring(tmp_path: Path) -> None:
    """Every node's file names the same two seeds as localhost:PORT, while nodes advertise
    127.0.0.1:PORT. The first seed, up alone, sends its join request to itself: the driver sees
    its own datagram come back, so it is a seed (OverlayNode.seed_is_self) and founds the ring
    instead of waiting; a plain node gets in through it although the other seed is down; the
    other seed, up last, joins their ring."""
    ports = free_udp_ports(2)
    seeds = [f"localhost:{port}" for port in ports]
    ring = Ring(ring_keys(tmp_path))
    async with trio.open_nursery() as nursery:
        first = await ring.add(nursery, "seed-0", port=ports[0], seeds=seeds)
        plain = await ring.add(nursery, "plain", seeds=seeds)
        await ring.converge()
        assert first.core is not None and first.core.seeds == (seeds[1],)
        last = await ring.add(nursery, "seed-1", port=ports[1], seeds=seeds)
        await ring.converge()
        assert not any(n.drops for n in ring.nodes)
        # Each seed is known by the address it advertises too (its certificate lists localhost:
        # _match_seed), so its answer counts and the plain node does not ask the seeds again.
        assert plain.core is not None
        assert plain.core.is_seed(first.address) and plain.core.is_seed(last.address)
        assert plain.core.unheard_seeds() == [] and "seed_watch" not in plain.core._timers
        nursery.cancel_scope.cancel()


async def test_bad_datagrams_are_dropped_and_counted_and_routing_goes_on(tmp_path: Path) -> None:
    keys = ring_keys(tmp_path)
    path = keys.key_file
    ring = Ring(keys)
    async with trio.open_nursery() as nursery:
        a = await ring.add(nursery, "victim-a")
        b = await ring.add(nursery, "victim-b")
        await ring.converge()
        target = parse_address(a.address)
        good = SignedSealer(load_ring_key(path), b.identity, context="datagram")  # b's key and certificate
        to = a.address
        codec = overlay_codec()
        ping = codec.encode_datagram(Ping(sender=b.core.me, nonce=99, sent=0.0))  # type: ignore[union-attr]
        sealed = good.seal(ping, to, time.time(), os.urandom(16))
        wrong_key = SignedSealer(bytes(32), b.identity, context="datagram").seal(
            ping, to, time.time(), os.urandom(16)
        )
        unknown_type = good.seal(pack([1, "gossip", {}]), to, time.time(), os.urandom(16))
        stale = good.seal(ping, to, time.time() - 3600, os.urandom(16))
        attacker = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        with attacker:
            for datagram in [
                sealed,
                sealed,
                sealed[:-5],
                b"\x00" * 70000,
                wrong_key,
                unknown_type,
                stale,
                b"junk",
            ]:
                try:
                    await attacker.sendto(datagram, target)
                except OSError:
                    pass  # the kernel refuses datagrams over 64 KiB itself: also never reaches the node
            await poll_until_async("six drops counted", lambda: sum(a.drops.values()) >= 6)
        drops = a.drops
        assert drops.get("replayed") == 1 and drops.get("bad_mac") == 1 and drops.get("stale") == 1
        assert drops.get("unknown_type") == 1 and drops.get("malformed", 0) >= 2
        await b.route(a.core.me.id, Probe(n=1))  # type: ignore[union-attr]
        await poll_until_async("the probe delivered", lambda: 1 in ring.delivered)
        assert ring.delivered[1] == a.address
        nursery.cancel_scope.cancel()


async def test_a_message_that_cannot_be_encoded_costs_only_itself(tmp_path: Path) -> None:
    """Security review of issue 14: an integer beyond 64 bits raised OverflowError out of _send."""
    ring = Ring(ring_keys(tmp_path))
    async with trio.open_nursery() as nursery:
        node = await ring.add(nursery, "udp-node-0")
        sent = node.sent
        assert node.core is not None
        unencodable = Ping.model_construct(sender=node.core.me, nonce=2**64, sent=0.0)
        await node._send(node.address, unencodable)
        assert node.errors["unencodable"] == 1 and node.sent == sent
        await node._send(node.address, Ping(sender=node.core.me, nonce=1, sent=0.0))
        assert node.sent == sent + 1
        nursery.cancel_scope.cancel()


def test_a_seed_is_matched_to_its_node_only_by_what_the_node_itself_signed(tmp_path: Path) -> None:
    """_match_seed: a seed written as a name is the node whose certificate lists that name, from
    the seed's port, by its own word (a message's sender, a join request straight from its
    joiner); a forwarded join request's joiner is nobody's word (claims do not check it)."""
    keys = ring_keys(tmp_path)
    keys.node("seed", hosts=["127.0.0.1", "seed.example"], pool="test")
    keys.node("me", hosts=["127.0.0.1"], pool="test")
    seed_cert = keys.node("seed", hosts=[], pool="test").certificate
    cfg = RingConfig(node_name="me", bind="127.0.0.1", port=0, bootstrap=["seed.example:7641"],
                     overlay=FAST, **keys.ring_fields("me"))  # fmt: skip
    node = UdpOverlay(cfg)
    node.core = OverlayNode(Peer(id=1, addr="127.0.0.1:7000"), FAST, random.Random(1))
    node.core.start(0.0, cfg.seeds())
    node._unmatched_seeds = {"seed.example:7641": ("seed.example", 7641, False)}
    forwarded = JoinRequest(joiner=Peer(id=seed_cert.node_id, addr="127.0.0.9:1"), hops=2)
    node._match_seed(forwarded, seed_cert, "127.0.0.1", 7641)
    other_port = Ping(sender=Peer(id=seed_cert.node_id, addr="127.0.0.1:7641"), nonce=1, sent=0.0)
    node._match_seed(other_port, seed_cert, "127.0.0.1", 7642)
    assert node._unmatched_seeds and not node.core.is_seed("127.0.0.9:1")
    node._match_seed(
        JoinRequest(joiner=Peer(id=seed_cert.node_id, addr="127.0.0.1:7641")), seed_cert, "127.0.0.1", 7641
    )
    assert not node._unmatched_seeds and node.core.is_seed("127.0.0.1:7641")
