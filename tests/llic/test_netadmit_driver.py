"""Network admission and accounting in the master's trio driver (issue 8), on loopback with the
real agent zipapp as local processes (LocalAgents): every local agent is on 127.0.0.0/8, which
gets a low limit, so each private-input transfer is paced at its reservation and the measured
rate of the subnet stays under the limit; the figures land in the state file and master_q."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from llic import master as m
from llic import master_q
from llic.master_core import MasterStatus
from llic.state import load_state

from .test_master_driver import make_state

SUB = """\
executable = job.sh
arguments = $(Process)
should_transfer_files = YES
transfer_input_files = in.$(Process)
output = out.$(Process)
+LlicMinMbps = 1
queue {n}
"""
JOB_SH = """#!/bin/sh
wc -c < "in.$1"
"""
SIZE = 100_000  # bytes per private input: 0.8 Mbit
LIMIT_MBPS = 4


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_limited_subnet_is_paced_and_accounted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 8
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(JOB_SH)
    (work / "job.sh").chmod(0o755)
    for i in range(n):
        (work / f"in.{i}").write_bytes(os.urandom(SIZE))
    state_path = make_state(
        tmp_path,
        SUB.format(n=n),
        network_capacity=f"127.0.0.0/8:{LIMIT_MBPS}Mbps",
        network_transfers_per_subnet=2,
        window_size=3,
    )
    state, plan = m.load_plan(state_path)
    assert plan.min_bps == 1e6
    runner = m.LocalAgents(tmp_path / "scratch", slots=3)
    master = m.Master(plan, state, runner, host="127.0.0.1")
    started = trio.current_time()
    with trio.fail_after(60):
        rc = await master.run()
    elapsed = trio.current_time() - started
    await runner.aclose()
    assert rc == m.EXIT_DONE
    for i in range(n):
        assert (work / f"out.{i}").read_text().strip() == str(SIZE)
    final = load_state(state_path)
    assert final.status is MasterStatus.DONE and final.counts().done == n
    net = final.extra["net"]
    subnet = net["subnets"]["127.0.0.0/8"]
    limit = LIMIT_MBPS * 1e6
    assert subnet["limit_bps"] == limit
    assert subnet["bytes_in"] >= n * SIZE  # blobs (the message frames are not counted)
    assert subnet["bytes_out"] > 0 and net["master"]["transfers"] >= 2 * n
    assert subnet["max_reserved_bps"] <= limit
    assert subnet["peak_bps"] <= limit * 1.02  # paced: the 10 s window never saw more than the limit
    assert net["held"] > 0  # 2 transfers at a time, 3 agents: some waited
    # each agent took transfers (one at a time each: its connection carries one paced transfer)
    assert len(net["agents"]) == 3 and all(row["bytes_in"] > 0 for row in net["agents"].values())
    assert elapsed >= 8 * n * SIZE / limit * 0.9  # it really took the time the limit implies
    assert sum(row["transfers"] for row in net["agents"].values()) == net["master"]["transfers"]

    assert master_q.main([str(state_path), "-net"]) == 0
    text = capsys.readouterr().out
    assert "127.0.0.0/8" in text and "4Mbps" in text
    assert master_q.main([str(state_path), "-json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["net"]["subnets"]["127.0.0.0/8"]["bytes_in"] == subnet["bytes_in"]
    if os.environ.get("LLIC_NET_REPORT"):  # the figures docs/bench/network-loopback.json records
        Path(os.environ["LLIC_NET_REPORT"]).write_text(
            json.dumps({"elapsed_s": elapsed, "tasks": n, "input_bytes": SIZE, "net": net}, indent=2) + "\n"
        )
        print(text)


BULK_SUB = """\
executable = job.sh
arguments = $(Process)
should_transfer_files = YES
output = out.$(Process)
queue {n}
"""
BULK_SH = """#!/bin/sh
# processes 0 and 1 write a large file, the others a small one
if [ "$1" -lt 2 ]; then head -c {big} /dev/zero > res.$1; else echo small > res.$1; fi
echo done $1
"""
BIG = 12 << 20
THRESHOLD = 1 << 20


@pytest.mark.skipif(not os.path.exists(m.AGENT_PYTHON), reason="needs a system python3 for the agent")
async def test_two_large_outputs_on_one_subnet_do_not_overlap(tmp_path: Path) -> None:
    """Two agents on 127.0.0.0/8 finish a large output each at about the same moment: with
    BULK_OUTPUT_THRESHOLD under their size the master lets one return at a time (the second
    agent announces its result and waits), so the two return transfers, as the master timed
    them, do not overlap; the small results go at once; every file arrives whole."""
    n = 6
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(BULK_SH.replace("{big}", str(BIG)))
    (work / "job.sh").chmod(0o755)
    state_path = make_state(tmp_path, BULK_SUB.format(n=n), bulk_output_threshold=THRESHOLD, window_size=1)
    state, plan = m.load_plan(state_path)
    runner = m.LocalAgents(tmp_path / "scratch", slots=2)
    master = m.Master(plan, state, runner, host="127.0.0.1")
    with trio.fail_after(60):
        rc = await master.run()
    await runner.aclose()
    assert rc == m.EXIT_DONE
    for i in range(n):
        assert (work / f"out.{i}").read_text() == f"done {i}\n"
        assert (work / f"res.{i}").stat().st_size == (BIG if i < 2 else 6)
    final = load_state(state_path)
    net = final.extra["net"]
    assert final.extra["counters"]["bulk_requests"] == 2
    assert net["bulk"]["grants"] == 2 and net["bulk"]["threshold"] == THRESHOLD
    assert net["bulk"]["waiting"] == {} and net["bulk"]["active"] == {}  # nothing left behind
    large = sorted(
        (start, end)
        for _agent, _subnet, direction, nbytes, start, end in net["log"]
        if direction == "out"
        if nbytes > THRESHOLD
    )
    assert len(large) == 2
    assert large[0][1] <= large[1][0], f"large returns overlapped: {large}"
