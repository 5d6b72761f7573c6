"""deploy.harness.sandbox's helpers for tests: polling with a deadline, and stopping a daemon gracefully."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deploy.harness.sandbox import (
    GracefulStopFailed,
    poll_until,
    poll_until_async,
    stop_process,
    stop_processes,
)


def test_poll_until_returns_the_first_truthy_value_and_treats_oserror_as_not_yet() -> None:
    answers = iter([OSError("no socket yet"), 0, [], {"joined": True}])

    def predicate() -> object:
        answer = next(answers)
        if isinstance(answer, OSError):
            raise answer
        return answer

    assert poll_until("joined", predicate, poll=0) == {"joined": True}


def test_poll_until_fails_naming_what_it_waited_for_and_the_last_value(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    log.write_text("the daemon's last words\n")
    with pytest.raises(TimeoutError) as info:
        poll_until("the pool to drain", lambda: [], timeout=0.1, poll=0.01, logs=[log])
    assert "timed out waiting for the pool to drain; last=[]" in str(info.value)
    assert "the daemon's last words" in str(info.value)


async def test_poll_until_async_takes_plain_and_async_predicates() -> None:
    calls: list[int] = []

    async def third_call() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert await poll_until_async("three calls", third_call, poll=0) == 3
    assert await poll_until_async("a plain value", lambda: "yes") == "yes"
    with pytest.raises(TimeoutError, match="timed out waiting for nothing; last=None"):
        await poll_until_async("nothing", lambda: None, timeout=0.1, poll=0.01)


def child(code: str) -> subprocess.Popen[bytes]:
    """A Python child that prints 'ready' once `code` (e.g. its signal handling) is in place."""
    proc = subprocess.Popen([sys.executable, "-c", f"{code}\nprint('ready', flush=True)\nimport time\n"
                             "while True: time.sleep(1)"], stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_stop_process_returns_quietly_after_a_graceful_stop() -> None:
    proc = child("import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))")
    stop_process(proc, timeout=60, name="graceful")
    assert proc.returncode == 0


def test_a_stop_that_hangs_is_killed_and_reported_with_the_name_and_timeout() -> None:
    proc = child("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)")
    with pytest.raises(
        GracefulStopFailed, match=r"stubborn \(pid \d+\) still ran 0.5 s after SIGTERM: killed"
    ):
        stop_process(proc, timeout=0.5, name="stubborn")
    assert proc.returncode == -9  # killed, not left running


def test_a_stop_that_fails_is_reported_with_the_exit_status() -> None:
    proc = child("import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(3))")
    with pytest.raises(GracefulStopFailed, match=r"failing \(pid \d+\) exited with status 3"):
        stop_process(proc, timeout=60, name="failing")


def test_stop_processes_stops_every_one_before_reporting_the_hung_one() -> None:
    procs = {
        "hung": child("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)"),
        "fine": child("import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))"),
    }
    started = dict(procs)
    with pytest.raises(GracefulStopFailed) as info:
        stop_processes(procs, timeout=0.5)
    assert "hung (pid" in str(info.value) and "fine" not in str(info.value)
    assert procs == {} and started["hung"].returncode == -9 and started["fine"].returncode == 0
