"""A master submitted not held (llic/submitter.py, step 3) starts only on a state file that names
its own cluster: it waits, bounded, while master_submitter is still writing it."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from llic import master as m
from llic import submitter
from llic.state import load_state, save_state
from tests.llic.test_master_driver import NFS_SUB, make_state

S = m.StartCheck


@pytest.mark.parametrize(
    ("file_cluster", "own", "waited", "expected"),
    [
        (9, None, 0.0, S.READY),  # held until complete, or run again: used as it is
        (0, None, 99.0, S.READY),
        (9, 9, 0.0, S.READY),
        (9, 9, 99.0, S.READY),
        (0, 9, 0.0, S.WAIT),
        (0, 9, 29.9, S.WAIT),
        (0, 9, 30.0, S.TIMED_OUT),
        (8, 9, 0.0, S.OTHER_CLUSTER),
    ],
)
def test_start_check(file_cluster: int, own: int | None, waited: float, expected: m.StartCheck) -> None:
    assert m.start_check(file_cluster, own, waited, 30.0) is expected


def test_the_master_waits_until_master_submitter_names_its_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=2), cluster=0)
    done = threading.Event()

    def master_submitter_finishes() -> None:
        done.wait()
        state = load_state(state_path)
        save_state(state_path, replace(state, info=replace(state.info, cluster=42)))

    writer = threading.Thread(target=master_submitter_finishes)
    writer.start()
    looks = 0
    real_sleep = m.time.sleep

    def sleep(seconds: float) -> None:  # the writer finishes after the master's third look
        nonlocal looks
        looks += 1
        if looks == 3:
            done.set()
            writer.join()
        real_sleep(seconds)

    monkeypatch.setattr(m.time, "sleep", sleep)
    try:
        state, plan = m.wait_for_state(state_path, 42, bound=60.0, poll=0.01)
    finally:
        done.set()
        writer.join()
    assert looks == 3 and state.info.cluster == 42 and plan.info.cluster == 42


def test_a_state_file_never_completed_holds_the_master(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=2), cluster=0)
    before = state_path.read_bytes()
    monkeypatch.setattr(m, "START_WAIT", 0.2)
    assert m.main([str(state_path), "--cluster", "42"]) == m.EXIT_NOT_READY == submitter.EXIT_NOT_READY
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "names no cluster after 0.2 s" in err and str(state_path) in err
    assert state_path.read_bytes() == before


def test_a_state_file_of_another_cluster_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_path = make_state(tmp_path, NFS_SUB.format(n=2), cluster=9)
    assert m.main([str(state_path), "--cluster", "42"]) == m.EXIT_UNUSABLE
    assert "names cluster 9, not 42" in capsys.readouterr().err


def test_the_master_not_held_is_told_its_cluster_and_held_when_never_ready(tmp_path: Path) -> None:
    state = tmp_path / "master.20261123.7.0.state"
    held = submitter.master_job(state, master="/x/llic-master", condor_config=None, batch_name="b")
    free = submitter.master_job(
        state, master="/x/llic-master", condor_config=None, batch_name="b", held=False
    )
    assert held["hold"] == "true" and "--cluster" not in held["arguments"]
    assert "hold" not in free
    assert free["arguments"] == f"\"'{state}' '--cluster' '$(ClusterId)'\""
    assert f"ExitCode =?= {m.EXIT_NOT_READY}" in free["on_exit_hold"]
    assert "never completed its state file" in free["on_exit_hold_reason"]
    assert json.loads(free["MY.OtherJobRemoveRequirements"]) == 'LlicMaster =?= "20261123.7.0"'
