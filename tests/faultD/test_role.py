"""The role machine on its own: fed messages and times by hand, no network."""

from __future__ import annotations

import hashlib
import random

import pytest
from pydantic import ValidationError

from common.overlay.messages import Peer
from common.wire import pack
from faultD.messages import (
    COUNTER_LIMIT,
    MAX_EPOCH,
    STATE_BYTES_LIMIT,
    Alive,
    Handover,
    ManagerMissing,
    PoolState,
    PreemptReplacement,
    ReplicaPush,
    StateFile,
)
from faultD.role import (
    INTERVAL_SPREAD,
    JUMP_CEILING,
    PointTo,
    Role,
    RoleMachine,
    RoleParams,
    StartManager,
    StopManager,
)

A = Peer(id=10, addr="a:1")
B = Peer(id=20, addr="b:1")
C = Peer(id=30, addr="c:1")


def machine(me: Peer, *, original: bool = False) -> RoleMachine:
    """A machine of a pool whose configured original manager (`manager_name`) is A."""
    m = RoleMachine(
        me,
        f"{me.addr.split(':')[0]}:9618",
        RoleParams(),
        random.Random(1),
        original=original,
        manager_hint=A.id,
    )
    m.start(0.0)
    return m


def alive(mgr: Peer, epoch: int, seq: int, incarnation: int = 1, state_version: int = 0) -> Alive:
    return Alive(
        manager=mgr, collector=f"{mgr.addr.split(':')[0]}:9618", epoch=epoch, seq=seq, interval=1.0,
        incarnation=incarnation, state_version=state_version,
    )  # fmt: skip


def state(mgr: int, version: int, data: bytes = b"x") -> PoolState:
    files = [StateFile(name="accountant", data=data)]
    return PoolState(
        manager=mgr, epoch=1, version=version, taken_at=0.0, files=files, checksum=PoolState.digest(files)
    )


def test_listener_repoints_on_new_manager_only() -> None:
    m = machine(C)
    out = m.on_message(alive(A, 1, 1), 0.5)
    assert out.condor == [PointTo("a:9618")]
    assert m.on_message(alive(A, 1, 2), 1.5).condor == []
    assert m.on_message(alive(A, 1, 2), 1.6).condor == []  # duplicate
    assert m.manager == A


def test_lower_epoch_is_fenced() -> None:
    m = machine(C)
    m.on_message(alive(B, 2, 1), 0.5)
    out = m.on_message(alive(A, 1, 50), 0.6)
    assert out.condor == [] and m.manager == B and m.fenced == 1


def test_silence_sends_manager_missing_routed_to_the_manager_id_then_keeps_listening() -> None:
    m = machine(C)
    m.on_message(alive(A, 1, 1), 0.0)
    assert m.on_timer(2.9).routes == []
    out = m.on_timer(3.0)
    assert [(k, type(p)) for k, p in out.routes] == [(A.id, ManagerMissing)]
    assert m.role is Role.LISTENER
    assert out.wakeup == 6.0  # and again later, while the silence lasts


def test_manager_ignores_missing_but_answers_with_an_alive() -> None:
    m = machine(A, original=True)
    m.on_timer(3.0)  # nobody heard: the original becomes manager
    assert m.role is Role.MANAGER
    out = m.on_message(ManagerMissing(manager=A.id, epoch=1, sender=C), 4.0)
    assert m.role is Role.MANAGER
    assert [(addr, type(msg)) for addr, msg in out.directs] == [("c:1", Alive)]


def test_listener_that_still_hears_the_manager_does_not_take_over() -> None:
    m = machine(B)
    m.on_message(alive(A, 1, 1), 0.0)
    out = m.on_message(ManagerMissing(manager=A.id, epoch=1, sender=C), 1.0)
    assert m.role is Role.LISTENER and out.condor == []


def test_takeover_restores_the_replica_with_a_higher_epoch() -> None:
    m = machine(B)
    m.on_message(alive(A, 1, 1, state_version=4), 0.0)  # a replica is kept only up to what A announced
    m.on_message(ReplicaPush(sender=A, state=state(A.id, 4)), 0.1)
    out = m.on_message(ManagerMissing(manager=A.id, epoch=1, sender=C), 5.0)
    assert m.role is Role.MANAGER
    start = next(a for a in out.condor if isinstance(a, StartManager))
    assert start.epoch == 2 and start.state is not None and start.state.version == 4
    assert any(isinstance(b, Alive) and b.epoch == 2 for b in out.broadcasts)


def test_a_takeover_is_one_structured_event() -> None:
    """The decision as a log event with fields (event=takeover epoch=2 manager=b:1 ...) and a
    sentence for faultd status; the core still does no I/O."""
    m = machine(B)
    m.on_message(alive(A, 1, 1, state_version=4), 0.0)  # a replica is kept only up to what A announced
    m.on_message(ReplicaPush(sender=A, state=state(A.id, 4)), 0.1)
    out = m.on_message(ManagerMissing(manager=A.id, epoch=1, sender=C), 5.0)
    (takeover,) = [n for n in out.notes if n.event == "takeover"]
    assert takeover.fields == {
        "epoch": 2, "manager": "b:1", "collector": "b:9618", "previous": "a:1", "silent_s": 5.0,
        "state_version": 4,
    }  # fmt: skip
    assert str(takeover) == "manager_missing from c:1: taking over as the closest live node (epoch 2)"


def test_corrupt_replica_is_dropped() -> None:
    m = machine(B)
    bad = state(A.id, 1).model_copy(update={"checksum": "0" * 64})
    m.on_message(ReplicaPush(sender=A, state=bad), 0.1)
    assert m.replica is None


def test_two_managers_the_lower_token_steps_down() -> None:
    b = machine(B)
    b.on_message(ManagerMissing(manager=A.id, epoch=0, sender=C), 5.0)  # B manages, epoch 1
    c = machine(C)
    c.on_message(ManagerMissing(manager=A.id, epoch=0, sender=A), 5.0)  # C manages, epoch 1
    out = b.on_message(alive(C, 1, 1), 5.1)  # (1, 30) > (1, 20): B steps down
    assert b.role is Role.LISTENER and StopManager() in out.condor and PointTo("c:9618") in out.condor
    c.on_message(alive(B, 1, 1), 5.1)
    assert c.role is Role.MANAGER


def test_original_preempts_and_resumes_with_the_handed_over_state() -> None:
    repl = machine(B)
    repl.on_message(ManagerMissing(manager=A.id, epoch=1, sender=C), 5.0)
    repl.on_local_state([StateFile(name="accountant", data=b"newer")], 5.5)
    orig = machine(A, original=True)
    out = orig.on_message(alive(B, 2, 7), 10.0)
    assert [(addr, type(msg)) for addr, msg in out.directs] == [("b:1", PreemptReplacement)]
    preempt = out.directs[0][1]
    out = repl.on_message(preempt, 10.1)
    assert repl.role is Role.LISTENER and StopManager() in out.condor
    handover = next(msg for _, msg in out.directs if isinstance(msg, Handover))
    out = orig.on_message(handover, 10.2)
    assert orig.role is Role.MANAGER
    start = next(a for a in out.condor if isinstance(a, StartManager))
    assert start.state is not None and start.state.files[0].data == b"newer"
    assert start.epoch == 3
    # The replacement follows the original, and fences itself below the original's epoch.
    new_alive = next(b for b in out.broadcasts if isinstance(b, Alive))
    repl.on_message(new_alive, 10.3)
    assert repl.manager == A and repl.best == (3, A.id)


E = Peer(id=40, addr="e:1")  # a ring member with a valid certificate, not a manager


def test_a_member_cannot_take_the_role_from_a_manager_that_is_still_heard() -> None:
    """Security review of issue 14: one signed Alive(manager=itself) with a high epoch took the pool."""
    real = machine(A, original=True)
    real.on_timer(3.0)  # nobody heard: the original manages
    listener = machine(C)
    listener.on_message(real._alive(), 3.5)
    forged = alive(E, 1 << 61, 1)
    out_real = real.on_message(forged, 4.0)
    out_listener = listener.on_message(forged, 4.0)
    assert real.role is Role.MANAGER and out_real.condor == [] and real.refused == {"alive": 1}
    assert [(addr, type(msg)) for addr, msg in out_real.directs] == [("e:1", PreemptReplacement)]
    assert out_listener.condor == [] and listener.manager == A and listener.refused == {"alive": 1}
    # nor can it plant a replica, and the real manager's next alive is still followed
    files = [StateFile(name="accountant", data=b"evil")]
    planted = PoolState(manager=E.id, epoch=1 << 61, version=1, taken_at=0.0, files=files,
                        checksum=PoolState.digest(files))  # fmt: skip
    listener.on_message(ReplicaPush(sender=E, state=planted), 4.5)
    assert listener.replica is None
    real.on_timer(5.0)
    listener.on_message(real._alive(), 5.0)
    assert listener.manager == A and listener.fenced == 0


def test_a_silent_manager_is_still_replaced_by_whoever_the_pool_elects() -> None:
    listener = machine(C)
    listener.on_message(alive(B, 1, 1), 0.0)
    out = listener.on_message(alive(E, 2, 1), 10.0)  # B silent for longer than 3 intervals
    assert listener.manager == E and out.condor == [PointTo("e:9618")]


def test_the_original_manager_cannot_jump_epochs_while_another_manager_is_heard() -> None:
    listener = machine(C)
    listener.on_message(alive(B, 2, 1), 0.0)
    out = listener.on_message(alive(A, 9, 1), 0.5)
    assert out.condor == [] and listener.manager == B and listener.refused == {"alive": 1}
    assert listener.on_message(alive(A, 3, 1), 0.6).condor == [PointTo("a:9618")]


def test_the_managing_original_reclaims_the_pool_from_a_replacement_it_hears() -> None:
    """After a partition heals, the original (still managing its side) preempts the other side's
    replacement instead of yielding, then rises above its epoch so the replacement's listeners follow."""
    orig = machine(A, original=True)
    orig.on_timer(3.0)
    repl = machine(B)
    repl.on_message(ManagerMissing(manager=A.id, epoch=0, sender=C), 5.0)  # epoch 1
    listener = machine(C)
    listener.on_message(repl._alive(), 5.5)
    out = orig.on_message(repl._alive(), 6.0)
    assert orig.role is Role.MANAGER
    preempt = next(msg for addr, msg in out.directs if addr == "b:1")
    out = repl.on_message(preempt, 6.1)
    assert repl.role is Role.LISTENER and StopManager() in out.condor
    handover = next(msg for _, msg in out.directs if isinstance(msg, Handover))
    out = orig.on_message(handover, 6.2)
    assert orig.role is Role.MANAGER and orig.epoch == handover.epoch == 2
    assert not any(isinstance(a, StartManager) for a in out.condor)
    new_alive = next(b for b in out.broadcasts if isinstance(b, Alive))
    assert listener.on_message(new_alive, 6.3).condor == [PointTo("a:9618")]


def test_the_managing_original_asks_again_when_the_handover_is_lost() -> None:
    """The replacement's handover is lost (CI: its bulk body refused while replicas were waiting):
    the replacement, stepped down, sends no more alives, so only the original's timer can ask
    again; asked again, the replacement sends its handover again and its listeners follow us."""
    orig = machine(A, original=True)
    orig.on_timer(3.0)
    repl = machine(B)
    repl.on_message(ManagerMissing(manager=A.id, epoch=0, sender=C), 5.0)  # epoch 1
    listener = machine(C)
    listener.on_message(repl._alive(), 5.5)
    out = orig.on_message(repl._alive(), 6.0)
    preempt = next(msg for addr, msg in out.directs if addr == "b:1")
    out = repl.on_message(preempt, 6.1)
    assert repl.role is Role.LISTENER and any(isinstance(msg, Handover) for _, msg in out.directs)
    # ... and that handover never arrives. Our alives stay below the listener's fence meanwhile.
    assert orig.epoch == 1 and orig.preempt_at is not None
    retry_at = orig.preempt_at
    out = orig.on_timer(retry_at - 0.01)
    assert not any(isinstance(msg, PreemptReplacement) for _, msg in out.directs)
    assert out.wakeup is not None and out.wakeup <= retry_at
    out = orig.on_timer(retry_at)
    again = next(msg for addr, msg in out.directs if addr == "b:1" and isinstance(msg, PreemptReplacement))
    out = repl.on_message(again, retry_at + 0.1)
    handover = next(msg for _, msg in out.directs if isinstance(msg, Handover))
    out = orig.on_message(handover, retry_at + 0.2)
    assert orig.role is Role.MANAGER and orig.epoch == handover.epoch == 2 and orig.challenged is None
    new_alive = next(b for b in out.broadcasts if isinstance(b, Alive))
    assert listener.on_message(new_alive, retry_at + 0.3).condor == [PointTo("a:9618")]
    # Handed over: no more preempts.
    later = orig.on_timer(retry_at + 10 * RoleParams().preempt_retry)
    assert not any(isinstance(msg, PreemptReplacement) for _, msg in later.directs)


def test_preempt_is_refused_when_no_original_manager_is_configured() -> None:
    m = RoleMachine(B, "b:9618", RoleParams(), random.Random(1), original=False)  # no manager_name
    m.start(0.0)
    m.on_message(ManagerMissing(manager=A.id, epoch=0, sender=C), 5.0)
    assert m.role is Role.MANAGER
    out = m.on_message(PreemptReplacement(original=E, collector="e:9618"), 6.0)
    assert m.role is Role.MANAGER and out.condor == [] and out.directs == [] and m.refused == {"preempt": 1}


def test_epochs_near_the_encoding_limit_are_rejected_and_a_successor_still_encodes() -> None:
    with pytest.raises(ValidationError):
        alive(E, 2**63, 1)
    with pytest.raises(ValidationError):
        alive(E, 2**64 - 1, 1)
    m = machine(C)
    m.on_message(alive(E, COUNTER_LIMIT - 1, 1), 1.0)  # encodable, but no pool gets there
    assert m.manager is None and m.refused == {"alive": 1}
    m.on_message(alive(E, MAX_EPOCH - 1, 1), 1.0)
    m.on_message(ManagerMissing(manager=E.id, epoch=MAX_EPOCH - 1, sender=B), 1000.0)
    assert m.role is Role.MANAGER and m.epoch == MAX_EPOCH
    out = m.on_timer(1002.0)
    assert pack(out.broadcasts[0].model_dump(mode="python"))


def test_status_names_each_replicated_file_by_its_sha256() -> None:
    """So that one can check a given state file (poold's, issue 16) reached this replica holder."""
    m = machine(B)
    assert m.status(0.0)["replica"] is None
    m.on_message(alive(A, 1, 1, state_version=4), 0.0)
    m.on_message(ReplicaPush(sender=A, state=state(A.id, 4, data=b"poold's state")), 0.1)
    replica = m.status(0.2)["replica"]
    assert replica["sha256"] == {"accountant": hashlib.sha256(b"poold's state").hexdigest()}


# Security review of the role machine (2026-11-28): one ring member with a valid key.


def test_a_manager_missing_naming_any_manager_is_ignored_while_ours_is_heard() -> None:
    """It named another id than the manager we follow, and we took over a live pool."""
    m = machine(C)
    m.on_message(alive(B, 1, 1), 5.5)
    out = m.on_message(ManagerMissing(manager=123456789, epoch=1, sender=E), 5.6)
    assert m.role is Role.LISTENER and out.condor == [] and m.manager == B
    assert [(addr, type(msg)) for addr, msg in out.directs] == [("e:1", Alive)]  # told what we hear


def test_a_node_just_started_waits_for_the_alive_before_taking_over() -> None:
    m = machine(C)  # started at 0
    out = m.on_message(ManagerMissing(manager=A.id, epoch=1, sender=E), 1.0)
    assert m.role is Role.LISTENER and out.condor == [] and out.directs == []
    out = m.on_message(ManagerMissing(manager=A.id, epoch=1, sender=E), 3.0)  # nobody heard since start
    assert m.role is Role.MANAGER


def test_a_forged_handover_cannot_lift_the_originals_epoch_out_of_reach() -> None:
    """An alive and a handover at MAX_EPOCH - 1 lifted the managing original there; its
    successor, at MAX_EPOCH, was then refused by every listener for good."""
    orig = machine(A, original=True)
    orig.on_timer(3.0)  # epoch 1
    listener = machine(C)
    listener.on_message(orig._alive(), 3.1)
    out = orig.on_message(alive(E, 5, 1), 4.0)  # refused; the original preempts the sender
    assert [(addr, type(msg)) for addr, msg in out.directs] == [("e:1", PreemptReplacement)]
    out = orig.on_message(Handover(sender=E, epoch=MAX_EPOCH - 1, state=None), 4.1)
    assert orig.epoch == 1 and orig.refused == {"alive": 1, "handover": 1} and out.broadcasts == []
    assert orig.challenged is None and not any(  # and it preempts that member no more
        isinstance(msg, PreemptReplacement) for _, msg in orig.on_timer(10.0).directs
    )
    # A successor after the original's death is still followed.
    successor = machine(B)
    successor.on_message(orig._alive(), 4.2)
    out = successor.on_message(ManagerMissing(manager=A.id, epoch=1, sender=C), 10.0)
    assert successor.role is Role.MANAGER and successor.epoch == 2
    assert listener.on_message(successor._alive(), 10.1).condor == [PointTo("b:9618")]


def test_no_alive_lifts_a_pool_into_the_last_epochs_in_one_step() -> None:
    """With the manager silent every listener took any epoch (up to MAX_EPOCH - 1) from any
    member, and the pool's next successor, at MAX_EPOCH, was refused by all."""
    listener = machine(C)
    listener.on_message(alive(A, 3, 1), 0.0)
    out = listener.on_message(alive(E, MAX_EPOCH - 1, 1), 10.0)  # A silent since 0
    assert out.condor == [] and listener.manager == A and listener.refused == {"alive": 1}
    assert listener.on_message(alive(E, JUMP_CEILING, 1), 10.1).condor == []
    # Below the ceiling any epoch is taken: machines rebooted together elect from 1, and meet
    # the pool's own epoch when their link heals.
    assert listener.on_message(alive(B, 1 << 40, 1), 10.5).condor == [PointTo("b:9618")]
    # Nor does a replacement manager step down for one in the last 2^60.
    repl = machine(B)
    repl.on_message(ManagerMissing(manager=A.id, epoch=0, sender=C), 5.0)
    out = repl.on_message(alive(E, JUMP_CEILING + 5, 1), 6.0)
    assert repl.role is Role.MANAGER and out.condor == []
    # A node that has seen no epoch (just started) takes the pool's, whatever it is.
    fresh = machine(Peer(id=50, addr="d:1"))
    assert fresh.on_message(alive(E, JUMP_CEILING + 5, 1), 0.5).condor == [PointTo("e:9618")]


def test_the_managers_announced_interval_is_taken_within_a_factor_of_ours() -> None:
    """A tiny one made listeners route manager_missing in a busy loop; a huge one delayed failover."""
    m = machine(C)
    tiny = alive(A, 1, 1).model_copy(update={"interval": 5e-324})
    m.on_message(tiny, 0.0)
    out = m.on_timer(0.0)
    assert out.routes == [] and out.wakeup is not None and out.wakeup >= 3 * 1.0 / INTERVAL_SPREAD
    m.on_message(alive(A, 1, 2).model_copy(update={"interval": 3600.0}), 1.0)
    assert m._silence_limit() == 3 * 1.0 * INTERVAL_SPREAD


def test_a_replica_near_the_counters_limit_or_beyond_the_state_limit_is_refused() -> None:
    """A version at COUNTER_LIMIT - 1 was kept; the holder, once manager, failed to build its next."""
    m = machine(B)
    m.on_message(alive(A, 1, 1, state_version=COUNTER_LIMIT - 2), 0.0)
    m.on_message(ReplicaPush(sender=A, state=state(A.id, COUNTER_LIMIT - 1)), 0.1)
    assert m.replica is None and m.refused == {"replica": 1}
    m.on_message(alive(A, 1, 2, state_version=1), 0.2)
    m.on_message(ReplicaPush(sender=A, state=state(A.id, 1, data=b"x" * (STATE_BYTES_LIMIT + 1))), 0.3)
    assert m.replica is None and m.refused == {"replica": 2}
    m.on_message(ReplicaPush(sender=A, state=state(A.id, 1)), 0.4)
    assert m.replica is not None  # an honest one still is
