"""common.config: user mistakes become one line naming the file and the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.cli import run_main
from common.config import CONFIG_BYTES_LIMIT, ConfigError, StrictModel, load_config


class Overlay(StrictModel):
    port: int = 7000
    bootstrap: str | None = None


class Daemon(StrictModel):
    name: str
    overlay: Overlay = Overlay()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "poold.toml"
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, Daemon)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_file_loads(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, 'name = "poolA"\n[overlay]\nport = 7100\n'), Daemon)
    assert cfg.name == "poolA" and cfg.overlay.port == 7100 and cfg.overlay.bootstrap is None


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "poolA"\n[overlay]\nprot = 7100\n')
    assert error_of(path) == f"{path}: unknown key 'overlay.prot'"


def test_wrong_type_names_file_key_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "poolA"\n[overlay]\nport = "seven"\n')
    message = error_of(path)
    assert message.startswith(f"{path}: key 'overlay.port': ")
    assert "integer" in message and "'seven'" in message


def test_missing_required_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[overlay]\nport = 1\n")
    assert error_of(path) == f"{path}: missing required key 'name'"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    assert error_of(path) == f"{path}: file not found"


def test_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "name = \n")
    message = error_of(path)
    assert message.startswith(f"{path}: invalid TOML: ") and "line 1" in message


def test_several_errors_stay_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'bogus = 1\n[overlay]\nport = "x"\n')
    message = error_of(path)
    assert message.startswith(f"{path}: ") and "(and 2 more: " in message


def test_cli_prints_one_line_and_no_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'name = "a"\nextra = true\n')
    code = run_main("poold", lambda: bool(load_config(path, Daemon)) and 0)
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"poold: error: {path}: unknown key 'extra'\n"


def test_a_fifo_a_huge_file_or_deep_nesting_is_an_error_naming_the_file(tmp_path: Path) -> None:
    """A FIFO named as the config hung check-config and the daemon's start (a plain read waits
    for a writer); a huge file was read whole; a value nested 500 deep raised RecursionError (a
    traceback at check-config, at the start, and out of a reload, which ended the daemon)."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=f"^{fifo}: cannot read: not a regular file"):
        load_config(fifo, Daemon)
    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as f:
        f.truncate(CONFIG_BYTES_LIMIT + 1)
    with pytest.raises(ConfigError, match=f"^{huge}: cannot read: .* more than the {CONFIG_BYTES_LIMIT}"):
        load_config(huge, Daemon)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(ConfigError, match=f"^{deep}: invalid TOML: .*nested too deep"):
        load_config(deep, Daemon)
