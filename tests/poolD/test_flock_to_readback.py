"""After an activation the core asks for FLOCK_TO as the schedds have it and takes it when they
agree on a value it does not have (poolD.flock_to_readback, issue 16): fed by hand with `now`."""

from __future__ import annotations

from poolD.core import FlockToApplied, SetFlockTo
from poolD.flock_to_readback import READ_BACK_EVERY, READ_BACK_TRIES, ReadFlockTo
from tests.poolD.test_core import core, of

B = "b.example.org:9618"
C = "c.example.org:9618"


def test_the_schedds_agreed_value_is_taken_as_applied() -> None:
    c = core()
    assert of(c.read_back_flock_to(0.0), ReadFlockTo) == [ReadFlockTo()]
    out = c.on_flock_to_read({"s1": [B], "s2": [B]}, 1.0)
    assert c.flocking.active == [B] and c.flocking_since == 1.0
    assert c.flock_to_seen == {"s1": [B], "s2": [B]}
    assert out.notes[0].event == "flock_to_read_back"
    assert c.flock_to_readback.wakeup() is None  # done: no further read


def test_no_schedd_yet_is_asked_again_every_interval_a_limited_number_of_times() -> None:
    c = core()
    c.read_back_flock_to(0.0)
    now, reads = 0.0, 1
    while True:
        c.on_flock_to_read(None, now)
        due = c.flock_to_readback.wakeup()
        if due is None:
            break
        assert due == now + READ_BACK_EVERY
        assert of(c.on_timer(due - 0.1), ReadFlockTo) == []  # not before it is due
        now = due
        assert of(c.on_timer(now), ReadFlockTo) == [ReadFlockTo()]
        reads += 1
    assert reads == READ_BACK_TRIES and c.flocking.active == []


def test_nothing_is_taken_when_the_schedds_disagree_or_agree_with_the_core() -> None:
    c = core()
    c.read_back_flock_to(0.0)
    out = c.on_flock_to_read({"s1": [B], "s2": []}, 1.0)
    assert c.flocking.active == [] and out.notes == []
    c.read_back_flock_to(2.0)
    assert c.on_flock_to_read({"s1": []}, 3.0).notes == []


def test_a_change_made_while_the_read_was_under_way_wins() -> None:
    """The core set FLOCK_TO itself between the ask and the answer: the answer may predate it."""
    c = core()
    c.read_back_flock_to(0.0)
    c.on_flock_to_applied(FlockToApplied(SetFlockTo((C,), "a round"), applied=True, seen={"s1": [C]}), 0.5)
    c.on_flock_to_read({"s1": [B]}, 1.0)
    assert c.flocking.active == [C]


def test_a_read_nobody_asked_for_changes_nothing() -> None:
    c = core()
    assert c.on_flock_to_read({"s1": [B]}, 1.0).actions == [] and c.flocking.active == []
    c.read_back_flock_to(2.0)
    c.on_flock_to_read({"s1": [B]}, 3.0)
    c.on_flock_to_applied(FlockToApplied(SetFlockTo((), "withdrawn"), applied=True, seen={"s1": []}), 4.0)
    c.on_flock_to_read({"s1": [B]}, 5.0)  # fed twice: the second is not an answer
    assert c.flocking.active == []


def test_an_entry_without_a_port_is_left_out_and_named_and_the_state_still_saves() -> None:
    """poolD review, finding 8: FLOCK_TO read back with an administrator's entry without a port
    (valid in HTCondor) went into flocking.active unchecked, and every export_state then failed
    the state file's validation. Such an entry is left out, and the note names it."""
    for seen, active in (({"s1": ["cm.other.org"]}, []), ({"s1": ["cm.other.org", B]}, [B])):
        c = core()
        c.read_back_flock_to(0.0)
        out = c.on_flock_to_read(seen, 1.0)
        assert c.flocking.active == active
        skipped = out.notes[0]
        assert skipped.event == "flock_to_read_back_skipped" and "'cm.other.org'" in skipped.text
        assert c.export_state(2.0, 0.0).flock_to == active
