"""master_q: condor_q-like progress of llic masters from their state files (seed §6)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import classad2
import pytest

from llic import cli, master_q
from llic.chef import ChefRecord, ChefState
from llic.config import CONFIG_ENV, LlicConfig
from llic.master_core import MasterStatus
from llic.master_q import (
    build_parser,
    main,
    master_ad,
    masters_constraint,
    render_table,
    row_of_ad,
    summarize,
)
from llic.state import (
    MasterInfo,
    MasterState,
    initial_state,
    master_output_dir,
    save_state,
    state_file_name,
)
from llic.task import TaskResult
from llic.taskbook import TaskRecord, TaskState


def a_state(master_id: str = "12.0", status: MasterStatus = MasterStatus.RUNNING) -> MasterState:
    """100 tasks started at t=1000, saved at t=1100: 50 done (the last 30 in the last minute),
    5 failed, 6 running, the rest queued; 3 agents."""
    state = initial_state(
        MasterInfo(master_id, "alice", 12, "/home/alice/job.sub", 0), LlicConfig(), list(range(100)), 0.0
    )
    state.started, state.saved, state.status = 1000.0, 1100.0, status
    tasks = []
    for p in range(100):
        if p < 50:
            tasks.append(
                TaskRecord(
                    p,
                    TaskState.DONE,
                    1,
                    outcome=TaskResult(p, 1, "ok", exit_code=0, host="n"),
                    completed=1000.0 + (p + 1) * 2,
                )
            )
        elif p < 55:
            tasks.append(TaskRecord(p, TaskState.FAILED, 3, 3, outcome=TaskResult(p, 3, "launch_failed")))
        elif p < 61:
            tasks.append(TaskRecord(p, TaskState.RUNNING, 1, chef=p % 2))
        else:
            tasks.append(TaskRecord(p))
    state.tasks = tasks
    state.chefs = [
        ChefRecord(0, ChefState.RUNNING, 1, job_id="30.0", job_ids=["30.0"]),
        ChefRecord(1, ChefState.RUNNING, 2, 1, job_id="31.0", job_ids=["29.0", "31.0"]),
        ChefRecord(2, ChefState.UNRECOVERABLE, 4, 4, job_ids=["32.0", "33.0", "34.0", "35.0"]),
    ]
    return state


def test_summary_counts_rate_and_eta() -> None:
    row = summarize(a_state(), Path("/x/master.12.0.state"))
    assert (row["total"], row["done"], row["failed"], row["running"], row["queued"]) == (100, 50, 5, 6, 39)
    assert row["agents"] == {"created": 0, "launched": 0, "running": 2, "terminated": 0, "unrecoverable": 1}
    assert row["agent_jobs_submitted"] == 7
    # completions after t=1040 (the minute before the save): processes 20..49
    assert row["tasks_per_second"] == pytest.approx(30 / 60)
    assert row["eta_seconds"] == pytest.approx(45 / 0.5)
    assert row["status"] == "running" and row["master_id"] == "12.0" and row["owner"] == "alice"


def test_summary_of_ended_and_unstarted_masters() -> None:
    state = a_state(status=MasterStatus.GAVE_UP)
    row = summarize(state)
    assert row["tasks_per_second"] == pytest.approx(50 / 100)  # whole run: 50 done by t=1100
    fresh = initial_state(MasterInfo("1.0", "bob", 1, "s", 0), LlicConfig(), [0, 1], 5.0)
    row = summarize(fresh)
    assert row["tasks_per_second"] is None and row["eta_seconds"] is None and row["queued"] == 2
    state.tasks = [t for t in state.tasks if t.state in (TaskState.DONE, TaskState.FAILED)]
    state.status = MasterStatus.DONE
    assert summarize(state)["eta_seconds"] == 0.0


def test_table_looks_like_condor_q() -> None:
    rows = [summarize(a_state("12.0")), summarize(a_state("12.1"))]
    text = render_table(rows, "llic masters under /scratch")
    lines = text.splitlines()
    assert lines[0] == "-- llic masters under /scratch"
    assert lines[1].split() == [
        "ID", "OWNER", "SUBMITTED", "DONE", "RUN", "IDLE", "FAILED", "TOTAL",
        "AGENTS", "C/L/R/T/U", "TASKS/S", "ETA", "STATUS",
    ]  # fmt: skip
    fields = lines[2].split()
    assert fields[0] == "12.0" and fields[1] == "alice"
    assert fields[4:9] == ["50", "6", "39", "5", "100"] and fields[9] == "0/0/2/0/1"
    assert fields[10:] == ["0.5", "0+00:01:30", "running"]
    assert lines[-1] == (
        "Total for 2 masters: 200 tasks; 100 done, 12 running, 78 idle, 10 failed; "
        "agents: 4 running, 0 waiting for a slot"
    )
    assert render_table([], "t").splitlines()[-1].startswith("Total for 0 masters: 0 tasks;")


def test_a_master_listed_from_its_job_ad_shows_as_from_its_state_file() -> None:
    """master_q without a state file reads the masters' job ads: the same table, held tasks counted."""
    state = a_state("12.0")
    state.tasks[70] = TaskRecord(70, TaskState.HELD)
    row = summarize(state)
    ad = master_ad(row)
    assert ad["LlicHeld"] == 1 and ad["LlicRemoved"] == 0
    from_ad = row_of_ad(ad)
    assert render_table([from_ad], "t").splitlines()[2] == render_table([row], "t").splitlines()[2]
    assert "1 held, " in render_table([from_ad], "t")


def test_one_state_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "master.12.0.state"
    save_state(path, a_state())
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"-- llic master {path}\n") and "\n12.0 " in out
    assert main([str(path), "-json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["path"] == str(path) and row["done"] == 50 and row["eta_seconds"] == pytest.approx(90)


def test_missing_or_corrupt_state_file_is_one_line_and_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "master.9.state"
    assert main([str(missing)]) == 2
    assert capsys.readouterr().err == f"master_q: error: {missing}: no such state file\n"
    assert not missing.exists()
    corrupt = tmp_path / "master.12.0.state"
    save_state(corrupt, a_state())
    damaged = corrupt.read_bytes().replace(b'"owner":"alice"', b'"owner":"mallory"')
    corrupt.write_bytes(damaged)
    assert main([str(corrupt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"master_q: error: {corrupt}: checksum mismatch") and err.count("\n") == 1
    assert corrupt.read_bytes() == damaged and sorted(tmp_path.iterdir()) == [corrupt]


def test_all_reads_every_master_under_the_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    config = tmp_path / "llic_config"
    config.write_text(f"MASTER_OUTPUTS_DIR_PREFIX_PATH = {outputs}\n")
    paths = []
    for mid in ("12.0", "12.1", "13.0"):
        d = master_output_dir(str(outputs), mid)
        d.mkdir()
        paths.append(d / state_file_name(mid))
        save_state(paths[-1], a_state(mid))
    paths[2].write_bytes(paths[2].read_bytes()[:-10])  # a torn file
    torn = paths[2].read_bytes()
    assert main(["ALL", str(config)]) == 1  # shown what it could, said what it skipped
    captured = capsys.readouterr()
    assert captured.out.startswith(f"-- llic masters under {outputs}\n")
    assert "\n12.0 " in captured.out and "\n12.1 " in captured.out and "13.0" not in captured.out
    assert "Total for 2 masters: 200 tasks" in captured.out
    assert (
        captured.err
        == f"master_q: skipped: {paths[2]}: checksum mismatch: the file is damaged (torn write or edited)\n"
    )
    assert paths[2].read_bytes() == torn
    # the config through LLIC_CONFIG_FILENAME, JSON out, through the installed entry point
    monkeypatch.setenv(CONFIG_ENV, str(config))
    assert cli.master_q(["ALL", "--json"]) == 1
    assert [r["master_id"] for r in json.loads(capsys.readouterr().out)] == ["12.0", "12.1"]


def test_all_with_nothing_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "llic_config"
    config.write_text(f"MASTER_OUTPUTS_DIR_PREFIX_PATH = {tmp_path}/none/\n")
    assert main(["ALL", str(config)]) == 0
    assert "Total for 0 masters: 0 tasks" in capsys.readouterr().out


def test_bad_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "llic_config"
    config.write_text("WINDOW_SIZE = many\n")
    assert main(["ALL", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"master_q: error: {config}:1: WINDOW_SIZE: ") and err.count("\n") == 1


def two_masters(tmp_path: Path) -> Path:
    """A config whose output prefix holds masters 12.0 (running) and 13.0 (done)."""
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    config = tmp_path / "llic_config"
    config.write_text(f"MASTER_OUTPUTS_DIR_PREFIX_PATH = {outputs}\n")
    for mid, status in (("12.0", MasterStatus.RUNNING), ("13.0", MasterStatus.DONE)):
        d = master_output_dir(str(outputs), mid)
        d.mkdir()
        save_state(d / state_file_name(mid), a_state(mid, status))
    return config


def test_constraint_and_autoformat_answer_as_condor_q_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(two_masters(tmp_path))
    assert (
        main(["ALL", config, "-constraint", 'LlicStatus == "running"', "-af", "LlicMasterId", "LlicDone"])
        == 0
    )
    assert capsys.readouterr().out == "12.0 50\n"
    assert (
        main(["ALL", config, "-constraint", 'LlicDone >= 50 && Owner == "alice"', "-af", "LlicMasterId"]) == 0
    )
    assert capsys.readouterr().out == "12.0\n13.0\n"
    assert main(["ALL", config, "-af", "LlicMasterId", "LlicAgentsRunning", "LlicNoSuchThing"]) == 0
    assert capsys.readouterr().out == "12.0 2 undefined\n13.0 2 undefined\n"
    assert main(["ALL", config, "-constraint", "LlicDone >>> (", "-af", "LlicMasterId"]) == 2
    assert (
        capsys.readouterr().err
        == "master_q: error: -constraint: not a ClassAd expression: 'LlicDone >>> ('\n"
    )


def test_long_totals_and_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(two_masters(tmp_path))
    assert main(["ALL", config, "-long", "-constraint", 'LlicMasterId == "13.0"']) == 0
    block = capsys.readouterr().out.splitlines()
    assert block[0] == 'LlicMasterId = "13.0"' and 'LlicStatus = "done"' in block and "LlicDone = 50" in block
    assert main(["ALL", config, "-totals"]) == 0
    assert capsys.readouterr().out.startswith("Total for 2 masters: 200 tasks; 100 done")
    assert main(["ALL", config, "-nobatch", "-constraint", "ProcId < 2 || ProcId == 52", "-af", "ProcId",
                 "LlicTaskState", "ExitCode"]) == 0  # fmt: skip
    assert capsys.readouterr().out == "0 done 0\n1 done 0\n52 failed undefined\n" * 2
    assert main(["ALL", config, "-nobatch", "-totals", "-constraint", 'LlicMasterId == "12.0"']) == 0
    assert capsys.readouterr().out == "Total for 100 tasks: 50 done, 6 running, 39 idle, 5 failed\n"
    assert main(["ALL", config, "-nobatch", "-constraint", "ProcId == 3 && ClusterId == 12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["12.3", "alice", "12.0", "done", "1", "0", "0+00:00:00", "n"]


def test_from_the_schedds_master_q_shows_the_users_own_masters_unless_allusers() -> None:
    """As condor_q: the user's own masters by default, every user's with -allusers or as root
    (a queue superuser); the constraint is evaluated by the schedd as it is written here."""
    assert masters_constraint(None) == "LlicMasterId =!= undefined && JobUniverse == 7"
    mine = masters_constraint("alice")
    assert mine == 'LlicMasterId =!= undefined && JobUniverse == 7 && Owner == "alice"'
    for owner, picked in (("alice", True), ("bob", False)):
        ad = classad2.ClassAd({"LlicMasterId": "m", "JobUniverse": 7, "Owner": owner})
        ad["Picked"] = classad2.ExprTree(mine)
        assert ad.eval("Picked") is picked
    assert "-allusers" in build_parser().format_help()


@pytest.mark.parametrize("value", [1e300, -1e300, math.inf, math.nan, "x"])
def test_a_time_or_duration_no_clock_shows_is_a_dash_not_a_traceback(value: object) -> None:
    """A master's job ad may hold anything in LlicSubmitted or LlicEtaSeconds."""
    assert master_q._when(value) == "-"  # type: ignore[arg-type]
    if not (isinstance(value, float) and math.isfinite(value)):
        assert master_q._duration(value) == "?"  # type: ignore[arg-type]
