"""Gateway operations that need no HTCondor daemon: this machine's configuration, as the bindings
read it from CONDOR_CONFIG, and ClassAd constraints evaluated by the bindings."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.condor import CondorError, Gateway


async def test_local_config_reads_what_condor_config_val_would(tmp_path: Path) -> None:
    config = tmp_path / "condor_config"
    config.write_text(
        f"LOCAL_DIR = {tmp_path}/local\nLOG = $(LOCAL_DIR)/log\nSPOOL = $(LOCAL_DIR)/spool\n"
        f"LOCAL_CONFIG_DIR = {tmp_path}/config.d\nCOLLECTOR_HOST = cm.example.edu:9618\n"
    )
    async with Gateway(condor_config=config) as gw:
        values = await gw.local_config(["LOG", "SPOOL", "LOCAL_CONFIG_DIR", "COLLECTOR_HOST", "NOT_A_KNOB"])
    assert values == {
        "LOG": f"{tmp_path}/local/log",
        "SPOOL": f"{tmp_path}/local/spool",
        "LOCAL_CONFIG_DIR": f"{tmp_path}/config.d",
        "COLLECTOR_HOST": "cm.example.edu:9618",
        "NOT_A_KNOB": None,
    }


async def test_match_ads_evaluates_a_constraint_as_condor_q_does() -> None:
    ads = [
        {"LlicMasterId": "a", "LlicDone": 5, "Owner": "alice"},
        {"LlicMasterId": "b", "LlicDone": 1, "Owner": "bob"},
        {"LlicMasterId": "c", "Owner": "alice"},  # LlicDone undefined: not a match
    ]
    async with Gateway() as gw:
        assert await gw.match_ads('Owner == "alice" && LlicDone >= 2', ads) == [True, False, False]
        assert await gw.match_ads("LlicDone =?= undefined", ads) == [False, False, True]
        with pytest.raises(CondorError, match=r"not a ClassAd expression: 'LlicDone >>> \('"):
            await gw.match_ads("LlicDone >>> (", ads)


def test_token_request_list_json_as_23_9_prints_it() -> None:
    """condor_token_request_list -json prints one list over many lines (seen on 23.9)."""
    from common.condor.worker import parse_json_documents

    text = '[\n{\n  "RequestId": "1634618",\n  "TokenLifetime": 600\n}\n]\n'
    assert parse_json_documents(text) == [{"RequestId": "1634618", "TokenLifetime": 600}]
    assert parse_json_documents('{"a": 1}\n{"a": 2}\n') == [{"a": 1}, {"a": 2}]
    assert parse_json_documents("\n") == []


async def test_start_brings_the_worker_up_before_the_first_call() -> None:
    async with Gateway() as gw:
        assert gw.child_pid is None
        await gw.start()
        pid = gw.child_pid
        assert pid is not None
        await gw.start()  # already running: the same worker
        assert gw.child_pid == pid
        assert await gw.match_ads("true", [{}]) == [True]
        assert gw.child_pid == pid and gw.restarts == 0
