"""poold's state file (issue 16, Deliver 1): the core exports its durable state and resumes from
it, the file round-trips, restarts resume (grants still expire, FLOCK_TO is not set again), and a
corrupt, hostile or future file is refused naming the file and field, bounded, and set aside;
what poold writes is what faultD replicates and restores."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from common.overlay.messages import Peer
from faultD.condor_role import CondorRole
from faultD.config import CondorSection
from faultD.messages import PoolState
from poolD.config import DiscoverySection, FlockingSection
from poolD.core import (
    CoreSettings,
    FlockFromApplied,
    FlockToApplied,
    PoolCore,
    SetFlockFrom,
    SetFlockTo,
)
from poolD.flock_trust import Asked
from poolD.messages import FlockIntent, FlockReply
from poolD.policy import Policy
from poolD.state import (
    MAX_POOLS,
    MAX_STATE_BYTES,
    StateFileError,
    decode_state,
    encode_state,
    load_state,
    save_state,
    set_aside,
)
from tests.faultD.test_bulk_and_condor_role import ReconfigRecorder
from tests.poolD.test_core import INTERVAL, load, of, round_at, willing
from tests.poolD.test_discovery import node_with_rows

WALL = 1_800_000_000.0  # the wall clock when the first core's clock read 0


def core(collector: str = "home.example.org:9618", trust: bool = False) -> PoolCore:
    settings = CoreSettings(
        pool="home",
        collector=collector,
        discovery=DiscoverySection(interval=INTERVAL, valid_for=600.0),
        flocking=FlockingSection(interval=INTERVAL, authorize_timeout=5.0, reauthorize_after=600.0),
        trust_domain="home.example" if trust else None,
    )
    return PoolCore(settings, node_with_rows(), Policy.allow_all(), random.Random(1))


def grant(c: PoolCore, pool: str, now: float, hosts: list[str]) -> None:
    """`pool` asks to flock to us; FLOCK_FROM takes its hosts."""
    intent = FlockIntent(pool=pool, origin=Peer(id=40, addr="10.0.0.40:7640"), schedd_hosts=hosts)
    out = c.on_message(intent, now)
    for action in of(out, SetFlockFrom):
        c.on_flock_from_applied(FlockFromApplied(action, None), now)


def flocking_core() -> PoolCore:
    """A core that flocks to 'near', lets 'visitor' in, and blacklisted 'liar'."""
    c = core()
    c.start(0.0)
    willing(c, 1.0, "near", "far")
    round_at(c, 60.0, load(free=0, idle=5))
    c.on_message(FlockReply(pool="near", accepted=True, reason="ok"), 61.0)
    (action,) = of(c.on_message(FlockReply(pool="far", accepted=True, reason="ok"), 61.0), SetFlockTo)
    c.on_flock_to_applied(FlockToApplied(action, True, {"schedd@cm": list(action.collectors)}), 65.0)
    grant(c, "visitor", 70.0, ["v1.example.org"])
    c.policy.add_to_blacklist("liar", 3000.0, "offered slots, flocked jobs stayed idle")
    return c


def test_the_document_round_trips_through_the_file(tmp_path: Path) -> None:
    c = flocking_core()
    state = c.export_state(80.0, WALL)
    assert state.flock_to == c.flocking.active and state.flock_to
    assert [g.pool for g in state.grants] == ["visitor"] and state.flock_from == ["v1.example.org"]
    assert {o.pool for o in state.offers} == {"near", "far"} and [b.pool for b in state.blacklist] == ["liar"]
    assert state.saved_at == WALL + 80.0  # wall-clock times
    path = tmp_path / "state.json"
    save_state(path, state)
    assert load_state(path) == state
    assert path.stat().st_mode & 0o777 == 0o640
    assert load_state(tmp_path / "none.json") is None  # a first start: no file, no error


def test_a_restored_core_exports_the_same_state() -> None:
    c = flocking_core()
    state = c.export_state(80.0, WALL)
    again = core()
    again.restore_state(state, 5.0, WALL + 75.0)  # a new process: its clock reads 5 at the same moment
    copy = again.export_state(5.0, WALL + 75.0)
    assert copy.model_copy(update={"seq": state.seq}) == state
    assert copy.seq > state.seq  # our offers go on from ahead of the saved sequence


def test_grants_are_still_revoked_on_expiry_after_a_restart() -> None:
    c = flocking_core()
    until = c.grants["visitor"].until  # 70 + 2 * 600
    state = c.export_state(200.0, WALL)
    offset = WALL + 190.0  # the new process's clock reads 10 at wall WALL + 200
    again = core()
    out = again.restore_state(state, 10.0, offset)
    assert of(out, SetFlockFrom) == []  # the same collector: FLOCK_FROM is still set
    assert again.flock_from == {"v1.example.org"}
    expiry = until - 190.0
    assert again.grants["visitor"].until == pytest.approx(expiry)
    assert of(again.on_timer(expiry - 1.0), SetFlockFrom) == []
    out = again.on_timer(expiry)
    assert "visitor" not in again.grants
    assert [a.hosts for a in of(out, SetFlockFrom)] == [()]


def test_flock_to_is_not_set_again_after_a_restart() -> None:
    c = flocking_core()
    state = c.export_state(100.0, WALL)
    again = core()
    offset = WALL + 100.0
    out = again.restore_state(state, 0.0, offset)
    assert of(out, SetFlockTo) == []
    actions = list(again.start(0.0).actions)
    for t in (60.0, 120.0, 180.0):  # still needy, the same pools willing: FLOCK_TO stays as it is
        again.on_load(load(free=0, idle=5), t)
        actions += again.on_timer(t).actions
    assert [a for a in actions if isinstance(a, SetFlockTo)] == []
    assert again.flocking.active == state.flock_to


def test_a_restore_on_another_collector_sets_flock_from_there_and_announces_the_move() -> None:
    state = flocking_core().export_state(100.0, WALL)
    replacement = core(collector="cm2.home.example.org:9618")
    out = replacement.restore_state(state, 0.0, WALL + 100.0)
    assert [a.hosts for a in of(out, SetFlockFrom)] == [("v1.example.org",)]
    notices = [a for a in out.actions if type(a.__dict__.get("message")).__name__ == "CollectorMoved"]
    assert "10.0.0.40:7640" in {a.addr for a in notices}  # the pool that flocks to us hears it first


def test_an_expired_document_leaves_nothing_to_resume() -> None:
    state = flocking_core().export_state(100.0, WALL)
    again = core()
    out = again.restore_state(state, 0.0, WALL + 100_000.0)  # restored a day later
    assert again.grants == {} and again.willing.entries == {} and again.policy.blacklist == {}
    assert [a.hosts for a in of(out, SetFlockFrom)] == [()]  # the stale grant is taken back


# ----------------------------------------------------------------------------- bad files


def write(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "state.json"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def good_doc() -> dict:
    return json.loads(encode_state(flocking_core().export_state(80.0, WALL)))


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x00\xffgarbage", "not JSON"),
        (b'{"format": "poold-state", "version": 1, "pool": ', "not JSON"),
        (b"[1, 2, 3]", "not a poold state file"),
        (b'{"format": "llic-master-state"}', "not a poold state file"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),  # was a RecursionError
    ],
)
def test_a_corrupt_file_is_refused_naming_the_file(tmp_path: Path, data: bytes, says: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(StateFileError, match=says) as e:
        load_state(path)
    assert str(path) in str(e.value)


def test_a_future_version_is_refused_naming_the_version(tmp_path: Path) -> None:
    doc = good_doc() | {"version": 2, "new_field": 1}
    with pytest.raises(StateFileError, match=r"version: 2; this poold reads state file version 1"):
        load_state(write(tmp_path, json.dumps(doc)))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["offers"][0].update(collector="evil\nhost:1"), "offers.0.collector"),
        (lambda d: d["grants"][0].update(until=float("nan")), None),
        (lambda d: d.update(pool="../etc"), "pool"),
        (lambda d: d["offers"][0].update(free_slots=-1), "offers.0.free_slots"),
        (lambda d: d.update(unknown=1), "unknown"),
        (lambda d: d.update(seq=1 << 63), "seq"),
    ],
)
def test_a_wrong_field_is_named(tmp_path: Path, change, field: str | None) -> None:
    doc = good_doc()
    change(doc)
    with pytest.raises(StateFileError) as e:
        load_state(write(tmp_path, json.dumps(doc)))
    assert str(tmp_path) in str(e.value)
    if field is not None:
        assert f": {field}:" in str(e.value)


def test_huge_lists_are_refused_before_anything_is_kept(tmp_path: Path) -> None:
    doc = good_doc()
    offer = doc["offers"][0]
    doc["offers"] = [offer | {"pool": f"p{i}"} for i in range(MAX_POOLS + 1)]
    with pytest.raises(StateFileError, match=r"offers: List should have at most 4096 items"):
        load_state(write(tmp_path, json.dumps(doc)))
    path = write(tmp_path, b"{" + b" " * MAX_STATE_BYTES + b"}")
    with pytest.raises(StateFileError, match=r"more than the \d+ allowed, not a state file"):
        load_state(path)


def test_a_hostile_document_cannot_open_flock_from_or_outlast_the_cores_bounds() -> None:
    doc = good_doc()
    grant_ = doc["grants"][0]
    doc["grants"] = [
        grant_ | {"pool": "sneaky", "hosts": ["ok.example.org", "bad host\nALLOW_WRITE = *"]},
        grant_ | {"pool": "glob", "hosts": ["*"]},
        grant_ | {"pool": "forever", "hosts": ["f.example.org"], "until": 9e11},
    ]
    doc["flock_from"] = ["*", "bad host", "f.example.org"]
    doc["blacklist"][0]["until"] = 9e11
    doc["offers"][0]["expires_at"] = 9e11
    state = decode_state(json.dumps(doc).encode(), "test")
    c = core()
    out = c.restore_state(state, 0.0, WALL)
    assert set(c.grants) == {"forever"}  # the junk host and the bare '*' are refused whole
    assert c.counters["state_entries_refused"] == 2
    assert c.grants["forever"].until <= 2 * 600.0  # no longer than the core grants itself
    assert c.flock_from == {"f.example.org"}
    assert c.policy.blacklist["liar"][0] <= FlockingSection().blacklist_for
    assert max(e.expires_at for e in c.willing.entries.values()) <= DiscoverySection().max_valid_for
    for action in of(out, SetFlockFrom):
        assert set(action.hosts) <= {"f.example.org"}


def test_another_pools_document_is_refused() -> None:
    state = flocking_core().export_state(80.0, WALL).model_copy(update={"pool": "other"})
    with pytest.raises(ValueError, match="pool: the state is pool 'other'"):
        core().restore_state(state, 0.0, WALL)


def test_a_file_set_aside_keeps_its_content(tmp_path: Path) -> None:
    path = write(tmp_path, b"not json")
    aside = set_aside(path, wall=WALL)
    assert aside is not None and aside.read_bytes() == b"not json" and not path.exists()
    assert aside.name == "state.json.rejected-20270115T080000Z"


def test_a_directory_or_fifo_named_as_the_state_file_is_refused_and_never_moved(tmp_path: Path) -> None:
    """A state_file naming a directory (a typo for /var/lib/poold) was set aside: renamed with
    everything in it. A FIFO hung the start. Both are refused and left where they are; a second
    file set aside in the same second does not replace the first."""
    here = tmp_path / "poold"
    (here / "token-requests").mkdir(parents=True)
    with pytest.raises(StateFileError, match=f"^{here}: is a directory, not a state file"):
        load_state(here)
    assert set_aside(here, wall=WALL) is None and (here / "token-requests").is_dir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(StateFileError, match="not a regular file"):
        load_state(fifo)  # returns at once
    assert set_aside(fifo, wall=WALL) is None and fifo.exists()
    first, second = (set_aside(write(tmp_path, text), wall=WALL) for text in (b"one", b"two"))
    assert first is not None and second is not None and first != second
    assert (first.read_bytes(), second.read_bytes()) == (b"one", b"two")


def test_trust_bookkeeping_survives_a_restart() -> None:
    c = core(trust=True)
    assert c.trust is not None
    c.trust.held[("near", "schedd")] = 500.0
    c.trust.issued[("visitor", "negotiator")] = 900.0
    state = c.export_state(100.0, WALL)
    again = core(trust=True)
    again.restore_state(state, 0.0, WALL + 100.0)
    assert again.trust is not None
    assert again.trust.held == {("near", "schedd"): 400.0}
    assert again.trust.issued == {("visitor", "negotiator"): 800.0}


def test_a_replacement_asks_again_for_the_tokens_the_old_manager_held() -> None:
    """The tokens held are files on the old manager (its negotiator's and schedd's token
    directories) and its tool was waiting for the approvals: a replacement holds none of them,
    so it asks again when next needed; what we approved for others stays approved."""
    c = core(trust=True)
    assert c.trust is not None
    c.trust.held[("visitor", "negotiator")] = 500.0
    c.trust.asked[("near", "schedd")] = Asked("1234567", "10.0.0.41:7640", 150.0)
    c.trust.issued[("visitor", "schedd")] = 900.0
    state = c.export_state(100.0, WALL)
    replacement = core(collector="cm2.home.example.org:9618", trust=True)
    replacement.restore_state(state, 0.0, WALL + 100.0)
    assert replacement.trust is not None
    assert replacement.trust.held == {} and replacement.trust.asked == {}
    assert replacement.trust.issued == {("visitor", "schedd"): 800.0}
    assert replacement.counters["tokens_left_on_the_old_manager"] == 1
    out = replacement.trust.want(
        "visitor", "negotiator", "v.example.org:9618", "10.0.0.40:7640", "v.example", 1.0
    )
    assert [type(a).__name__ for a in out.actions] == ["RequestToken"]


# ----------------------------------------------------------------------------- faultD replicates it


def test_the_file_poold_writes_is_what_faultd_replicates_and_restores(tmp_path: Path) -> None:
    """poold on the manager writes its state file; faultD there reads it into the pool state it
    replicates; faultD on the replacement restores it where that machine's poold reads it."""
    state = flocking_core().export_state(100.0, WALL)
    manager, replacement = tmp_path / "manager", tmp_path / "replacement"
    roles = []
    for machine in (manager, replacement):
        for d in ("config.d", "log", "spool", "poold"):
            (machine / d).mkdir(parents=True)
        section = CondorSection(
            config_dir=machine / "config.d",
            log_dir=machine / "log",
            spool_dir=machine / "spool",
            poold_state=machine / "poold" / "state.json",
        )
        roles.append(CondorRole(section, ReconfigRecorder()))
    save_state(manager / "poold" / "state.json", state)
    files = roles[0].read_state()
    assert [f.name for f in files] == ["poold"]
    replica = PoolState(
        manager=1, epoch=1, version=1, taken_at=0.0, files=files, checksum=PoolState.digest(files)
    )
    roles[1].restore(replica)
    restored = load_state(replacement / "poold" / "state.json")
    assert restored == state
    poold = core(collector="cm2.home.example.org:9618")
    poold.restore_state(restored, 0.0, WALL + 100.0)
    assert poold.flocking.active == state.flock_to and set(poold.grants) == {"visitor"}


def test_what_htcondor_read_back_cannot_stop_the_state_from_being_saved(tmp_path: Path) -> None:
    c = flocking_core()
    c.flock_to_seen["s" * 500] = ["c" * 500] * 300  # an administrator's odd FLOCK_TO, read back
    state = c.export_state(80.0, WALL)
    save_state(tmp_path / "state.json", state)
    assert load_state(tmp_path / "state.json") == state


def test_a_replacement_keeps_flock_to_and_withdraws_it_when_the_queue_drains() -> None:
    """A's manager died; A's replacement resumes A's FLOCK_TO and takes it back once quiet."""
    state = flocking_core().export_state(100.0, WALL)
    replacement = core(collector="cm2.home.example.org:9618")
    replacement.restore_state(state, 0.0, WALL + 100.0)
    replacement.start(0.0)
    assert replacement.flocking.active == state.flock_to
    withdrawn = []
    t = 0.0
    while t < 60.0 + FlockingSection().withdraw_after + 2 * INTERVAL:
        t += INTERVAL
        replacement.on_load(load(free=3, idle=0), t)  # the queue drained
        out = replacement.on_timer(t)
        for action in of(out, SetFlockTo):
            withdrawn.append(action)
            replacement.on_flock_to_applied(FlockToApplied(action, True, {}), t)
    assert [a.collectors for a in withdrawn] == [()]
    assert replacement.flocking.active == []
