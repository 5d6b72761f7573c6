"""common.logging: JSON lines off a terminal, each bound to daemon and node."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from common.logging import configure_logging, get_logger, set_level, stream_is_journal


def test_json_lines_carry_identity() -> None:
    stream = io.StringIO()
    log = configure_logging("poold", "poolA", stream=stream)
    log.info("announced", free_slots=3)
    get_logger(node="sim-17").warning("lost peer", peer="poolB")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["daemon"] == "poold" and first["node"] == "poolA"
    assert first["event"] == "announced" and first["free_slots"] == 3 and first["level"] == "info"
    assert second["node"] == "sim-17" and second["daemon"] == "poold" and second["level"] == "warning"


def test_console_format_when_asked() -> None:
    stream = io.StringIO()
    configure_logging("faultd", "cm", stream=stream, json=False)
    get_logger().info("takeover", epoch=4)
    line = stream.getvalue()
    assert "takeover" in line and "epoch=4" in line and "daemon=faultd" in line
    assert not line.lstrip().startswith("{")


def test_level_filters() -> None:
    stream = io.StringIO()
    configure_logging("llic", stream=stream, level="warning")
    get_logger().info("quiet")
    get_logger().error("loud")
    assert [json.loads(x)["event"] for x in stream.getvalue().splitlines()] == ["loud"]


def test_journal_lines_carry_a_priority_and_logfmt_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When stderr is the journal (JOURNAL_STREAM names its device and inode), each line starts
    with sd-daemon's <N> priority, so `journalctl -p warning` filters, and its fields are logfmt."""
    with open(tmp_path / "journal", "w") as stream:
        st = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        log = configure_logging("faultd", "ex1", stream=stream)
        log.info("takeover", epoch=7, manager="10.0.0.5:7641", took_s=3.1)
        log.warning("role change not applied yet", attempt=2)
        log.error("ad not accepted", error="connection refused")
        log.debug("dropped")
        configure_logging("test", stream=io.StringIO())  # nothing writes to the closed file later
    lines = (tmp_path / "journal").read_text().splitlines()
    assert lines == [
        "<6>event=takeover epoch=7 manager=10.0.0.5:7641 took_s=3.1 daemon=faultd node=ex1",
        '<4>event="role change not applied yet" attempt=2 daemon=faultd node=ex1',
        '<3>event="ad not accepted" error="connection refused" daemon=faultd node=ex1',
    ]


def test_a_redirected_stderr_is_not_taken_for_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "1:2")
    with open(tmp_path / "file", "w") as stream:
        assert not stream_is_journal(stream)
        configure_logging("poold", stream=stream).info("hello")
        configure_logging("test", stream=io.StringIO())
    assert json.loads((tmp_path / "file").read_text())["event"] == "hello"


def test_set_level_changes_the_level_and_keeps_the_form() -> None:
    stream = io.StringIO()
    configure_logging("poold", stream=stream, level="warning")
    get_logger().info("before")
    set_level("debug")
    get_logger().debug("after")
    assert [json.loads(x)["event"] for x in stream.getvalue().splitlines()] == ["after"]
