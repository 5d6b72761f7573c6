"""llic.config: the seed's llic_config read like HTCondor config; mistakes are one line naming
file, line and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.cli import run_main
from common.config import ConfigError
from llic.config import (
    CONFIG_ENV,
    FilesStyle,
    LlicConfig,
    load_llic_config,
    parse_llic_config,
    render_llic_config,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llic_config"
    path.write_text(text)
    return path


def error_of(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_llic_config(text, source="cfg", environ=environ or {})
    message = str(info.value)
    assert "\n" not in message
    return message


def test_seed_defaults() -> None:
    c = LlicConfig()
    assert (c.window_size, c.initial_jobs_number, c.files_style_mode, c.llic_debug) == (
        6,
        0,
        FilesStyle.CONDOR,
        False,
    )
    assert (c.num_agent_recoveries, c.max_chefs_number, c.initial_master_port_number) == (3, 50, 2853)
    assert c.master_executables_path == Path(".") and c.master_outputs_dir_prefix_path == "."
    assert c.condor_executables_path is None  # PATH: see the field's description


def test_no_argument_no_environment_gives_defaults() -> None:
    assert load_llic_config(None, environ={}) == LlicConfig()


def test_the_submit_hosts_site_file_comes_after_argument_and_environment(tmp_path: Path) -> None:
    site = write(tmp_path, "WINDOW_SIZE = 4\n")
    assert load_llic_config(None, environ={}, site=site).window_size == 4
    other = tmp_path / "other"
    other.write_text("WINDOW_SIZE = 9\n")
    assert load_llic_config(None, environ={CONFIG_ENV: str(other)}, site=site).window_size == 9
    assert load_llic_config(None, environ={}, site=tmp_path / "absent") == LlicConfig()


def test_the_packaged_example_names_every_key_with_its_default() -> None:
    """common/deploy_files/config/llic_config (condor-selforg install llic): every line, uncommented,
    is a valid key with its default value, and every key is there."""
    text = (Path(__file__).resolve().parents[2] / "common/deploy_files/config/llic_config").read_text()
    settings = [line[2:] for line in text.splitlines() if re.match(r"# [A-Z_]+ =", line)]
    keys = {line.split(" =")[0].lower() for line in settings}
    assert keys == set(LlicConfig.model_fields)
    defaults = [line for line in settings if not line.startswith(("NETWORK_CAPACITY", "CONDOR_EXECUTABLES"))]
    parsed = parse_llic_config("\n".join(defaults), source="example", environ={})
    assert parsed == LlicConfig()


def test_environment_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "WINDOW_SIZE = 9\n")
    assert load_llic_config(None, environ={CONFIG_ENV: str(path)}).window_size == 9


def test_argument_beats_environment(tmp_path: Path) -> None:
    arg = write(tmp_path, "WINDOW_SIZE = 2\n")
    other = tmp_path / "other"
    other.write_text("WINDOW_SIZE = 9\n")
    assert load_llic_config(arg, environ={CONFIG_ENV: str(other)}).window_size == 2


def test_missing_files(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    with pytest.raises(ConfigError, match=f"^{absent}: no such config file$"):
        load_llic_config(absent, environ={})
    with pytest.raises(ConfigError, match=f"^{absent}: no such config file \\(from {CONFIG_ENV}\\)$"):
        load_llic_config(None, environ={CONFIG_ENV: str(absent)})


def test_htcondor_style_lines() -> None:
    text = """
# a comment
   # an indented comment

window_size = 8
Files_Style_Mode = "IMPROVED"
LLIC_DEBUG = True
WINDOW_SIZE=10
MAX_CHEFS_NUMBER =
MASTER_OUTPUTS_DIR_PREFIX_PATH = $ENV(SCRATCH)/llic/
MASTER_EXECUTABLES_PATH = $(MASTER_OUTPUTS_DIR_PREFIX_PATH)bin
"""
    c = parse_llic_config(text, source="cfg", environ={"SCRATCH": "/scratch"})
    assert c.window_size == 10  # the later line wins, as in HTCondor
    assert c.files_style_mode is FilesStyle.IMPROVED and c.llic_debug is True
    assert c.max_chefs_number == 50  # empty: the default
    assert c.master_outputs_dir_prefix_path == "/scratch/llic/"
    assert c.master_executables_path == Path("/scratch/llic/bin")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("WINDOW_SIZE = 0", "cfg:2: WINDOW_SIZE: input should be greater than or equal to 1 (got '0')"),
        ("window_size = six", "cfg:2: WINDOW_SIZE: input should be a valid integer"),
        ("LLIC_DEBUG = maybe", "cfg:2: LLIC_DEBUG: input should be a valid boolean"),
        (
            "FILES_STYLE_MODE = nfs",
            "cfg:2: FILES_STYLE_MODE: input should be 'condor' or 'improved' (got 'nfs')",
        ),
        (
            "INITIAL_MASTER_PORT_NUMBER = 70000",
            "cfg:2: INITIAL_MASTER_PORT_NUMBER: input should be less than",
        ),
        ("MAX_CHEF_NUMBER = 3", "cfg:2: MAX_CHEF_NUMBER: unknown parameter; did you mean MAX_CHEFS_NUMBER?"),
        ("QUEUE = 3", "cfg:2: QUEUE: unknown parameter"),
        ("just words", "cfg:2: expected KEY = VALUE, got 'just words'"),
        ("MASTER_EXECUTABLES_PATH = $ENV(NOPE)/bin", "cfg:2: MASTER_EXECUTABLES_PATH: $ENV(NOPE) is not set"),
        ("WINDOW_SIZE = $(LATER)", "cfg:2: WINDOW_SIZE: $(LATER) is not defined above"),
        (  # float() of it is infinity, which int() refused with an OverflowError traceback
            f"BULK_OUTPUT_THRESHOLD = {'9' * 400}.5G",
            "cfg:2: BULK_OUTPUT_THRESHOLD: value error, more than 1048576GB, the most a size may be",
        ),
        ("BULK_OUTPUT_THRESHOLD = 1048577GB", "cfg:2: BULK_OUTPUT_THRESHOLD: value error, more than"),
    ],
)
def test_mistakes_name_file_line_and_key(line: str, expected: str) -> None:
    assert error_of(f"# header\n{line}\n").startswith(expected)


def test_error_through_run_main_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "WINDOW_SIZE = -1\n")
    assert run_main("master_q", lambda: load_llic_config(path, environ={}) and 0) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"master_q: error: {path}:1: WINDOW_SIZE: input should be greater than or equal to 1 (got '-1')\n"
    )


def test_snapshot_round_trip_and_errors() -> None:
    c = LlicConfig(
        window_size=3, files_style_mode=FilesStyle.IMPROVED, condor_executables_path=Path("/opt/c")
    )
    snap = c.snapshot()
    assert snap["WINDOW_SIZE"] == 3 and snap["CONDOR_EXECUTABLES_PATH"] == "/opt/c"
    assert LlicConfig.from_snapshot(snap) == c
    with pytest.raises(ConfigError, match=r"^snap: BOGUS: unknown parameter$"):
        LlicConfig.from_snapshot({**snap, "BOGUS": 1}, source="snap")
    with pytest.raises(ConfigError, match=r"^snap: WINDOW_SIZE: "):
        LlicConfig.from_snapshot({**snap, "WINDOW_SIZE": 0}, source="snap")
    with pytest.raises(ConfigError, match=r"^snap: BULK_OUTPUT_THRESHOLD: Input should be less than"):
        LlicConfig.from_snapshot({**snap, "BULK_OUTPUT_THRESHOLD": 10**400}, source="snap")


def test_resolved_makes_paths_absolute() -> None:
    c = LlicConfig(master_outputs_dir_prefix_path="out/run", condor_executables_path=Path("bin"))
    r = c.resolved(Path("/home/alice"))
    assert r.master_outputs_dir_prefix_path == "/home/alice/out/run"
    assert r.master_executables_path == Path("/home/alice")
    assert r.condor_executables_path == Path("/home/alice/bin")
    assert LlicConfig(master_outputs_dir_prefix_path="d/").resolved(
        Path("/x")
    ).master_outputs_dir_prefix_path == ("/x/d/")
    assert LlicConfig(master_outputs_dir_prefix_path="/abs").resolved(
        Path("/x")
    ).master_outputs_dir_prefix_path == ("/abs")


def test_condor_tool() -> None:
    assert LlicConfig(condor_executables_path=Path("/opt/condor/bin")).condor_tool("condor_submit") == (
        "/opt/condor/bin/condor_submit"
    )
    assert LlicConfig().condor_tool("no-such-tool-xyz") == "no-such-tool-xyz"


_paths = st.text(st.characters(codec="ascii", categories=["L", "N"], include_characters="/_.-"), min_size=1)


@given(
    window=st.integers(1, 1000),
    initial=st.integers(0, 1000),
    style=st.sampled_from(FilesStyle),
    debug=st.booleans(),
    port=st.integers(0, 65535),
    condor=st.none() | _paths.map(Path),
    prefix=_paths,
    interval=st.floats(0.001, 1e6),
)
def test_render_reads_back(
    window: int,
    initial: int,
    style: FilesStyle,
    debug: bool,
    port: int,
    condor: Path | None,
    prefix: str,
    interval: float,
) -> None:
    c = LlicConfig(
        window_size=window,
        initial_jobs_number=initial,
        files_style_mode=style,
        llic_debug=debug,
        initial_master_port_number=port,
        condor_executables_path=condor,
        master_outputs_dir_prefix_path=prefix,
        state_save_interval=interval,
    )
    assert parse_llic_config(render_llic_config(c), source="r", environ={}) == c
