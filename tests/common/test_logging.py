"""common.logging: JSON lines off a terminal, each bound to daemon and node."""

from __future__ import annotations

import io
import json

from common.logging import configure_logging, get_logger


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
