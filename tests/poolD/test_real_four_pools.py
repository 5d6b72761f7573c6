"""bench/four-pools' pure parts: the submit schedule, the history -> wait conversion, the tables.
The experiment itself needs minutes of real HTCondor and is not run here."""

from __future__ import annotations

import pytest

from deploy.harness.four_pools import (
    JobResult,
    PlannedJob,
    fifo_starts,
    ideal_fifo,
    job_result,
    main,
    plan_jobs,
    ran_at_matrix,
    render,
    submit_points,
    tables,
    wait_stats,
)
from sim.flock_paper import run_four_pools


def test_plan_scales_the_simulations_sequences() -> None:
    jobs = plan_jobs(1, 3, 3.0)
    assert len(jobs) == 36
    assert [sum(1 for j in jobs if j.site == s) for s in "ABCD"] == [6, 6, 9, 15]
    # The first submits of seed 1 (make_sequences' first column), minutes x 3 s.
    assert jobs[:3] == [
        PlannedJob(site="D", sequence=8, index=0, arrival=1, length=11, submit_at=3.0, sleep=33.0),
        PlannedJob(site="A", sequence=1, index=0, arrival=2, length=1, submit_at=6.0, sleep=3.0),
        PlannedJob(site="B", sequence=3, index=0, arrival=2, length=3, submit_at=6.0, sleep=9.0),
    ]
    assert [j.submit_at for j in jobs] == sorted(j.submit_at for j in jobs)
    assert all(j.submit_at == j.arrival * 3.0 and j.sleep == j.length * 3.0 for j in jobs)
    # Sequences 0-1 are A's, 2-3 B's, 4-6 C's, 7-11 D's, as in `poold simulate four-pools`.
    assert {j.sequence for j in jobs if j.site == "C"} == {4, 5, 6}
    # A cut sequence is the start of the full one.
    full = {(j.sequence, j.index): j for j in plan_jobs(1, 100, 3.0)}
    assert all(full[j.sequence, j.index] == j for j in jobs)


@pytest.mark.parametrize(
    ("seed", "n", "scale", "fault"),
    [(1, 0, 3.0, "--jobs-per-sequence"), (1, 101, 3.0, "--jobs-per-sequence"), (1, 5, 0.0, "--scale"),
     (-1, 5, 3.0, "--seed")],
)  # fmt: skip
def test_plan_rejects_bad_input(seed: int, n: int, scale: float, fault: str) -> None:
    with pytest.raises(ValueError, match=fault):
        plan_jobs(seed, n, scale)


def test_bad_option_is_named_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs-per-sequence", "0"]) == 2
    assert "--jobs-per-sequence must be 1..100, got 0" in capsys.readouterr().err


def test_submit_points() -> None:
    jobs = plan_jobs(2, 4, 1.0)
    split = submit_points("II", jobs)
    assert list(split) == ["A", "B", "C", "D"] and sum(len(v) for v in split.values()) == 48
    assert all(j.site == site for site, mine in split.items() for j in mine)
    assert submit_points("III", jobs) == {"all": jobs}
    with pytest.raises(ValueError, match="unknown configuration 'IV'"):
        submit_points("IV", jobs)


def test_fifo_starts_by_hand() -> None:
    # Two slots: 0 and 1 start at once, 2 waits for 1's slot (free at 3), 3 for 0's (free at 5).
    assert fifo_starts([0, 0, 0, 1], [5, 3, 2, 1], 2) == [0, 0, 3, 5]


def test_ideal_fifo_on_full_sequences_is_the_simulations_i_and_iii() -> None:
    """With all 100 jobs the zero-overhead reference is exactly `poold simulate four-pools`'s
    Configurations I and III (FifoPool, no poolD)."""
    sim = run_four_pools(1)
    ideal = ideal_fifo(plan_jobs(1, 100, 1.0))
    assert ideal["I"] == sim["I"] and ideal["III"] == sim["III"]
    assert ideal["I"]["D"]["mean"] == 311.79 and ideal["III"]["overall"]["max"] == 29


def test_simulation_runs_the_cut_sequences_the_real_run_uses() -> None:
    """`poold simulate four-pools --jobs-per-sequence 15` is the simulated twin of the default
    real run: its I and III are the zero-overhead reference of exactly those jobs."""
    sim = run_four_pools(1, 15)
    ideal = ideal_fifo(plan_jobs(1, 15, 1.0))
    assert sim["jobs_per_sequence"] == 15 and sim["I"]["overall"]["jobs"] == 12 * 15
    assert ideal["I"] == sim["I"] and ideal["III"] == sim["III"]
    assert sim["II"]["D"]["mean"] < sim["I"]["D"]["mean"]


def test_history_record_to_wait() -> None:
    record = {
        "FpConfig": "II", "FpSite": "D", "FpSeq": 9, "FpIdx": 4, "QDate": 1000, "JobCurrentStartDate": 1009,
        "CompletionDate": 1030, "LastRemoteHost": "slot2@cm.fpfb.sandbox", "ExitCode": 0, "NumJobStarts": 1,
    }  # fmt: skip
    r = job_result(record, 3.0)
    assert r == JobResult(
        "II", "D", 9, 4, wait_s=9, wait_min=3.0, run_s=21, ran_at="fpfb", exit_code=0, starts=1
    )
    assert job_result(record, 4.0).wait_min == 2.25
    with pytest.raises(ValueError, match="lacks JobCurrentStartDate"):
        job_result({k: v for k, v in record.items() if k != "JobCurrentStartDate"}, 3.0)
    with pytest.raises(ValueError, match="started before it was queued"):
        job_result(record | {"QDate": 1010}, 3.0)


def _result(config: str, site: str, wait_s: int, ran_at: str = "?") -> JobResult:
    return JobResult(config, site, 0, 0, wait_s, wait_s / 2, 10, ran_at, 0, 1)


def test_tables_and_where_jobs_ran() -> None:
    results = [_result(c, s, w) for c in ("I", "II") for s, w in zip("ABCD", (1, 2, 3, 6), strict=True)]
    results += [_result("III", "A", 4), _result("III", "D", 8)]
    minutes, seconds = tables(results, "min"), tables(results, "s")
    assert minutes["I"]["D"] == {"jobs": 1, "mean": 3.0, "min": 3.0, "max": 3.0, "stdev": 0.0}
    assert seconds["II"]["overall"] == {"jobs": 4, "mean": 3.0, "min": 1.0, "max": 6.0, "stdev": 2.16}
    assert set(minutes["III"]) == {"overall"} and minutes["III"]["overall"]["mean"] == 3.0
    with pytest.raises(ValueError, match="no finished jobs of configuration III"):
        tables([r for r in results if r.config != "III"], "min")
    ran = ran_at_matrix(
        [_result("II", "D", 1, "fpfa"), _result("II", "D", 1, "fpfd"), _result("I", "D", 1, "fpd")]
    )
    assert ran["D"] == {"A": 1, "B": 0, "C": 0, "D": 1} and ran["A"] == {"A": 0, "B": 0, "C": 0, "D": 0}


def test_wait_stats() -> None:
    assert wait_stats([1, 2, 3, 4]) == {"jobs": 4, "mean": 2.5, "min": 1, "max": 4, "stdev": 1.29}
    with pytest.raises(ValueError, match="no waits"):
        wait_stats([])


def test_render_has_the_papers_tables_without_all_load_at_d() -> None:
    results = [
        _result(c, s, w) for c in ("I", "II", "III") for s, w in zip("ABCD", (1, 2, 3, 6), strict=True)
    ]
    jobs = plan_jobs(1, 2, 2.0)
    result = {
        "seed": 1, "scale": 2.0, "jobs_per_sequence": 2, "seconds": tables(results, "s"),
        "ideal_fifo": ideal_fifo(jobs), "II_ran_at": ran_at_matrix(results),
    } | tables(results, "min")  # fmt: skip
    text = render(result)
    assert "Table 2: wait in queue (minutes), seed 1" in text
    assert "Table 2: wait in queue (seconds, as measured), seed 1" in text
    assert "single pool (III)" in text and "all load at D" not in text
    assert "D           5 |     3.00    3.0     3.0    0.00 |     3.00    3.0     3.0    0.00" in text
