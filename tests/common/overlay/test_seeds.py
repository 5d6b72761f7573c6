"""Several seeds per node (`[ring] bootstrap` as a list), on the pure core and virtual time:
a joiner gets in while its first seed is down, seeds started at once make one ring, a seed
alone founds it, and seeds that founded rings apart merge them."""

from __future__ import annotations

import random

from common.overlay.messages import CAPABILITIES, JoinInfo, JoinRequest, Peer
from common.overlay.node import JOINING_ROOT_AFTER, Output, OverlayNode, OverlayParams
from tests.common.overlay.test_join_acks import ring_of

PARAMS = OverlayParams()


def leaf_addrs(node: OverlayNode) -> set[str]:
    return {p.addr for p in node.leaf.members()}


def asked_to_join(out: Output) -> list[str]:
    """Where `out` sends join requests (not a joined node's refreshes of its rows)."""
    return sorted(addr for addr, m in out.sends if isinstance(m, JoinRequest) and not m.refresh)


def assert_one_ring(nodes: dict[str, OverlayNode]) -> None:
    for name, node in nodes.items():
        assert node.joined, name
        assert leaf_addrs(node) == set(nodes) - {name}, name  # l = 16 holds them all


def test_a_joiner_whose_first_seed_is_down_joins_through_the_next() -> None:
    nodes = ring_of({"a": None, "b": ["gone", "a"]}, gone=frozenset({"gone"}), until=PARAMS.join_retry + 1)
    assert_one_ring(nodes)
    assert nodes["b"]._seed_asks == {"gone": 1, "a": 1}  # one retry lost to the dead seed
    assert "seed_watch" not in nodes["b"]._timers  # a seed answered: its ring is ours


def test_seeds_started_at_once_make_one_ring_at_once() -> None:
    """Every machine given the same seeds, the seeds' own included (a whole federation
    restarted): the seeds answer each other while still joining, so no one waits for
    JOINING_ROOT_AFTER, and no seed founds a ring apart."""
    seeds = ["a", "b", "c"]
    bootstraps = dict.fromkeys(["a", "b", "c", "d", "e", "f"], seeds)
    first = ring_of(bootstraps, until=1.0)
    assert_one_ring({name: first[name] for name in seeds})
    # The others asked a seed still joining (silent): they get in at their next retry.
    assert_one_ring(ring_of(bootstraps, until=PARAMS.join_retry + 1.0))
    assert PARAMS.join_retry + 1.0 < JOINING_ROOT_AFTER


def test_a_seed_alone_founds_the_ring_after_asking_the_others_in_both_formats() -> None:
    node = OverlayNode(Peer(id=1, addr="a"), PARAMS, random.Random(1))
    out = node.start(0.0, bootstrap=["b", "A.", "c"])  # its own address, as spelled in a config
    assert node.seeds == ("b", "c") and not node.joined
    first = {addr: m.caps for addr, m in out.sends if isinstance(m, JoinRequest)}
    second = {
        addr: m.caps for addr, m in node.on_timer(PARAMS.join_retry).sends if isinstance(m, JoinRequest)
    }
    assert first == {"b": CAPABILITIES, "c": CAPABILITIES} and second == {"b": None, "c": None}
    assert not node.on_timer(2 * PARAMS.join_retry - 0.1).sends and not node.joined
    node.on_timer(2 * PARAMS.join_retry)
    assert node.joined
    # It goes on asking the other seeds, each every revive_interval, until each answers.
    t = 2 * PARAMS.join_retry + PARAMS.revive_interval
    assert asked_to_join(node.on_timer(t)) == ["b", "c"]
    node.on_message(JoinInfo(sender=Peer(id=2, addr="b"), candidates=[], root=True), t + 0.1)
    t += PARAMS.revive_interval
    assert asked_to_join(node.on_timer(t)) == ["c"]


def test_a_joiner_asks_its_seeds_in_turn_each_in_both_formats() -> None:
    node = OverlayNode(Peer(id=1, addr="x"), PARAMS, random.Random(1))
    asked = [(addr, m.caps is not None) for addr, m in node.start(0.0, bootstrap=["a", "b"]).sends]
    for k in range(1, 4):
        out = node.on_timer(k * PARAMS.join_retry)
        asked += [(addr, m.caps is not None) for addr, m in out.sends if isinstance(m, JoinRequest)]
    assert asked == [("a", True), ("b", True), ("a", False), ("b", False)]


def wrong_leaf_sets(nodes: dict[str, OverlayNode]) -> int:
    """Nodes whose leaf set is not the l/2 nearest on each side of the ring of all of `nodes`."""
    ring = sorted(nodes, key=lambda name: nodes[name].me.id)
    half, n = PARAMS.leaf_set_size // 2, len(ring)
    wrong = 0
    for k, name in enumerate(ring):
        true = {ring[(k + d) % n] for d in range(-half, half + 1) if d}
        wrong += leaf_addrs(nodes[name]) != true
    return wrong


def test_seeds_that_founded_rings_apart_merge_them() -> None:
    """Seeds a and b cut off from each other at their start (a partition, a firewall opened
    late): each founds a ring, and 15 nodes join a's and 15 b's; once the two sides reach each
    other, the seeds' requests to each other (every revive_interval) make the two rings one:
    every leaf set the true one of all 32 nodes."""
    seeds = ["a", "b"]
    bootstraps: dict[str, list[str]] = {"a": seeds, "b": seeds}
    bootstraps |= {f"x{i}": ["a"] for i in range(15)} | {f"y{i}": ["b"] for i in range(15)}
    apart = (frozenset({"b"} | {f"y{i}" for i in range(15)}), 60.0)
    early = ring_of(bootstraps, apart=apart, until=50.0)
    assert all(node.joined for node in early.values())
    assert leaf_addrs(early["a"]) == {f"x{i}" for i in range(15)}
    assert leaf_addrs(early["b"]) == {f"y{i}" for i in range(15)}
    late = ring_of(bootstraps, apart=apart, until=60.0 + 2 * PARAMS.revive_interval)
    assert all(node.joined for node in late.values()) and wrong_leaf_sets(late) == 0


def test_one_seed_named_by_the_node_at_another_spelling_is_the_node_itself() -> None:
    """As one bootstrap: a node named among its seeds with another case or a trailing dot is a
    seed; the driver gives the core an address that resolves to this machine at our port as our
    own (tests/common/overlay/test_udp_ring.py)."""
    node = OverlayNode(Peer(id=1, addr="cm.example:7640"), PARAMS, random.Random(1))
    node.start(0.0, bootstrap=["CM.example.:7640"])
    assert node.joined and node.seeds == ()


def test_a_seed_listed_twice_is_asked_once_and_does_not_make_us_a_seed() -> None:
    node = OverlayNode(Peer(id=1, addr="x:1"), PARAMS, random.Random(1))
    out = node.start(0.0, bootstrap=["cm1:7640", "cm2:7640", "CM1.:7640"])
    assert node.seeds == ("cm1:7640", "cm2:7640") and not node._named_self
    assert asked_to_join(out) == ["cm1:7640"]
    for k in range(1, 5):  # the seeds are down: it waits for them, it does not found a ring
        node.on_timer(k * PARAMS.join_retry)
    assert not node.joined


def test_a_seed_found_to_be_ourselves_makes_us_a_seed() -> None:
    """The driver saw our own datagram, sent to the seed at "alias", come back: "alias" is us."""
    node = OverlayNode(Peer(id=1, addr="10.0.0.1:7641"), PARAMS, random.Random(1))
    node.start(0.0, bootstrap=["alias:7641", "b:7641"])
    assert not node._named_self
    assert not node.seed_is_self("other:7641", 0.1).sends  # not a seed of ours: nothing
    out = node.seed_is_self("ALIAS.:7641", 0.1)
    assert node.seeds == ("b:7641",) and node._named_self and not node.joined
    assert asked_to_join(out) == ["b:7641"]
    assert asked_to_join(node.on_timer(0.1 + PARAMS.join_retry)) == ["b:7641"]  # the other format
    node.on_timer(0.1 + 2 * PARAMS.join_retry)
    assert node.joined  # none answered: it founds the ring, and watches b (and alias: below)
    watched = asked_to_join(node.on_timer(0.1 + 2 * PARAMS.join_retry + PARAMS.revive_interval))
    assert watched == ["alias:7641", "b:7641"]
    alone = OverlayNode(Peer(id=1, addr="10.0.0.1:7641"), PARAMS, random.Random(1))
    alone.start(0.0, bootstrap="alias:7641")
    alone.seed_is_self("alias:7641", 0.1)
    assert alone.joined and alone.seeds == ()  # its only seed: it founds the ring at once


def test_a_seed_known_by_the_address_its_node_advertises_is_answered_and_counts() -> None:
    """The list says cm1.example; cm1 advertises 10.0.0.1 (the driver matched them: seed_alias).
    Still joining, a seed answers the other as its root, and a seed's answer ends the watch."""
    node = OverlayNode(Peer(id=1, addr="10.0.0.2:7641"), PARAMS, random.Random(1))
    node.start(0.0, bootstrap=["cm1.example:7641", "10.0.0.2:7641"])
    cm1 = Peer(id=2, addr="10.0.0.1:7641")
    assert not node.is_seed(cm1.addr)
    node.seed_alias("cm1.example:7641", cm1.addr)
    node.seed_alias("other:7641", "10.0.0.9:7641")  # not a seed: nothing
    assert node.is_seed(cm1.addr) and not node.is_seed("10.0.0.9:7641")
    [info] = [m for a, m in node.on_message(JoinRequest(joiner=cm1), 1.0).sends if isinstance(m, JoinInfo)]
    assert info.root  # a seed's straight request, answered while still joining
    node.on_message(JoinInfo(sender=cm1, candidates=[], root=True), 1.1)
    assert node.joined and node.unheard_seeds() == [] and "seed_watch" not in node._timers


def test_a_seed_taken_for_ourselves_wrongly_is_still_watched() -> None:
    """A copy of our own request to seed b, sent back to us by someone else, passes for the loop
    (a certificate listing a block of addresses lets it through): we found a ring alone, but we
    go on asking b every revive_interval, so its ring and ours merge; its answer ends that."""
    node = OverlayNode(Peer(id=1, addr="10.0.0.2:7641"), PARAMS, random.Random(1))
    node.start(0.0, bootstrap="10.0.0.1:7641")
    node.seed_is_self("10.0.0.1:7641", 0.5)
    assert node.joined and node.seeds == ()
    assert asked_to_join(node.on_timer(0.5 + PARAMS.revive_interval)) == ["10.0.0.1:7641"]
    b = Peer(id=2, addr="10.0.0.1:7641")
    node.on_message(JoinInfo(sender=b, candidates=[], root=True, leaf_set=[]), 31.0)
    assert node.unheard_seeds() == [] and not asked_to_join(node.on_timer(0.5 + 2 * PARAMS.revive_interval))


def test_one_node_listed_under_two_spellings_answers_for_both() -> None:
    """cm1 is listed by name and by address, and advertises its address: its answer counts
    for both entries, so a seed does not go on asking the name (second review of the aliases)."""
    node = OverlayNode(Peer(id=1, addr="10.0.0.2:7641"), PARAMS, random.Random(1))
    node.start(0.0, bootstrap=["cm1.example:7641", "10.0.0.1:7641", "10.0.0.2:7641"])
    cm1 = Peer(id=2, addr="10.0.0.1:7641")
    node.seed_alias("cm1.example:7641", cm1.addr)
    node.seed_alias("10.0.0.1:7641", cm1.addr)
    node.on_message(JoinInfo(sender=cm1, candidates=[], root=True), 1.0)
    assert node.joined and node.unheard_seeds() == []


def test_a_seed_wrongly_taken_for_ourselves_counts_its_answer_under_its_advertised_address() -> None:
    """Seed 10.0.0.1, whose node advertises cm1.example, is taken for us by an echo: the watch
    asks it on, and cm1's answer (under the address it advertises) ends that."""
    node = OverlayNode(Peer(id=1, addr="10.0.0.2:7641"), PARAMS, random.Random(1))
    node.start(0.0, bootstrap=["10.0.0.1:7641", "10.0.0.3:7641"])
    cm1 = Peer(id=2, addr="cm1.example:7641")
    node.seed_alias("10.0.0.1:7641", cm1.addr)
    node.seed_is_self("10.0.0.1:7641", 0.5)
    assert node.seeds == ("10.0.0.3:7641",) and not node.is_seed(cm1.addr)
    node.on_message(JoinInfo(sender=cm1, candidates=[], root=True), 1.0)
    assert node.joined and node.unheard_seeds() == ["10.0.0.3:7641"]
