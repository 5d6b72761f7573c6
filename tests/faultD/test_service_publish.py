"""faultd's config from HTCondor's, its reload, its status line and figures (no HTCondor needed)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from common.config import ConfigError, parse_config
from common.overlay.auth import generate_key_file
from common.overlay.messages import Peer
from deploy.harness.ring_keys import RingKeys
from faultD.config import FaultdConfig, with_condor_values
from faultD.messages import PoolState, ReplicaPush, StateFile
from faultD.role import Role, RoleMachine, RoleParams, StartManager
from faultD.service import FaultDaemon
from poolD.config import PooldConfig
from poolD.config import with_condor_values as poold_with_condor_values

VALUES = {
    "LOCAL_CONFIG_DIR": "/etc/condor/config.d, /etc/condor/more.d",
    "LOG": "/var/log/condor",
    "SPOOL": "/var/lib/condor/spool",
    "COLLECTOR_HOST": "cm.pool-a.example.edu:9620",
    "FULL_HOSTNAME": "ex1.pool-a.example.edu",
}


def faultd_config(tmp_path: Path, extra: str = "", bind: str = "10.0.0.21") -> FaultdConfig:
    keys = RingKeys(tmp_path / "keys", ring="faultd:pool-a")
    keys.node("ex1", hosts=["0.0.0.0/0"], pool="pool-a")
    text = f"""
[fault]
{extra}
[ring]
node_name = "ex1"
bind = "{bind}"
port = 7641
{keys.toml("ex1")}[daemon]
control_socket = "{tmp_path / "faultd.sock"}"
"""
    return parse_config(text, FaultdConfig, source="faultd.toml")


def test_paths_and_collector_come_from_htcondor_unless_the_file_sets_them(tmp_path: Path) -> None:
    config = with_condor_values(faultd_config(tmp_path), VALUES, "faultd.toml")
    c = config.condor
    assert (c.config_dir, c.log_dir, c.spool_dir) == (
        Path("/etc/condor/config.d"),
        Path("/var/log/condor"),
        Path("/var/lib/condor/spool"),
    )
    assert config.fault.collector == "10.0.0.21:9620"  # [ring] bind, COLLECTOR_HOST's port
    wildcard = with_condor_values(faultd_config(tmp_path, bind="0.0.0.0"), VALUES, "faultd.toml")
    assert wildcard.fault.collector == "ex1.pool-a.example.edu:9620"
    own = with_condor_values(faultd_config(tmp_path, 'collector = "10.9.9.9:9618"'), VALUES, "x")
    assert own.fault.collector == "10.9.9.9:9618"


def test_a_path_neither_gives_is_one_line_naming_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        with_condor_values(faultd_config(tmp_path), VALUES | {"SPOOL": None}, "faultd.toml")
    assert str(e.value) == (
        "faultd.toml: condor.spool_dir is not set, and HTCondor's configuration does not define SPOOL "
        "either: set it in the file, or [condor] condor_config to HTCondor's config file"
    )


def test_poold_collector_comes_from_collector_host(tmp_path: Path) -> None:
    key = tmp_path / "ring.key"
    generate_key_file(key)
    text = f'[pool]\nname = "p"\n[ring]\nnode_name = "p"\nkey_file = "{key}"\n'
    config = poold_with_condor_values(parse_config(text, PooldConfig, source="x"), VALUES, "x")
    assert config.pool.collector == "cm.pool-a.example.edu:9620"
    sinful = {"COLLECTOR_HOST": "<10.0.0.5:9618?addrs=10.0.0.5-9618>"}
    assert poold_with_condor_values(
        parse_config(text, PooldConfig, source="x"), sinful, "x"
    ).pool.collector == ("10.0.0.5:9618")


async def test_reload_applies_what_it_can_and_names_the_rest(tmp_path: Path) -> None:
    config = with_condor_values(faultd_config(tmp_path), VALUES, "faultd.toml")
    d = FaultDaemon(config)
    changed = with_condor_values(
        faultd_config(tmp_path, "state_interval = 5.0\nreplicas = 5"),
        VALUES | {"LOG": "/srv/log"},
        "faultd.toml",
    )
    d.reread = lambda: changed
    await d.reload()
    assert d.config.fault.state_interval == 5.0 and d.config.fault.replicas == 3
    assert d.history[-1] == (
        "config reloaded: fault.state_interval; restart faultd for fault.replicas, condor.log_dir"
    )

    def broken() -> FaultdConfig:
        raise ConfigError("faultd.toml: invalid TOML: line 3")

    d.reread = broken
    await d.reload()
    assert d.history[-1] == "config reload failed, old config kept: faultd.toml: invalid TOML: line 3"


async def test_status_line_and_figures_before_the_ring_is_joined(tmp_path: Path) -> None:
    config = with_condor_values(faultd_config(tmp_path, extra=""), VALUES, "faultd.toml")
    config = config.model_copy(
        update={"ring": config.ring.model_copy(update={"bootstrap": ["10.0.0.20:7641"]})}
    )
    d = FaultDaemon(config)
    assert d.describe() == "joining the pool's ring via 10.0.0.20:7641"
    figures = d.figures()
    assert figures["Role"] == "joining" and figures["Epoch"] == 0 and figures["Manager"] is None
    assert figures["CollectorHere"] == "10.0.0.21:9620" and figures["OriginalManager"] is False
    assert d._current_collector() is None  # no ad before a manager is known


async def test_a_new_manager_replicates_its_local_state_only_once_the_takeover_restored_it(
    tmp_path: Path,
) -> None:
    """Between the role machine's takeover and the Condor Module's restore of the replica, this
    machine's own files are not the pool's state: read then, they would become the newest version
    (poold's state missing) and be pushed over the replica the holders keep (issue 16)."""
    config = with_condor_values(faultd_config(tmp_path), VALUES, "faultd.toml")
    d = FaultDaemon(config)
    me = Peer(id=7, addr="10.0.0.21:7641")
    role = RoleMachine(me, "10.0.0.21:9620", RoleParams(), random.Random(0), original=True)
    role.start(0.0)
    role.on_timer(10.0)  # nobody heard: the original takes its role (StartManager queued)
    assert role.role is Role.MANAGER
    d.role = role
    reads: list[int] = []

    def read_state() -> list[StateFile]:
        reads.append(1)
        return [StateFile(name="poold", data=b"{}")]

    d.condor.read_state = read_state  # type: ignore[method-assign]
    assert not d.condor.managing  # the takeover's restore has not run yet
    await d.replicate_local_state()
    assert reads == [] and role.local_state is None
    d.condor.managing = True  # restored, manager daemons started
    await d.replicate_local_state()
    assert reads == [1] and role.local_state is not None and role.local_state.version == 1


async def test_a_bulk_message_too_large_to_send_is_logged_not_fatal(tmp_path: Path) -> None:
    """Security review: a replica pushed just under the bulk limit grew past it when its holder,
    taking over, pushed it on (a longer address, a larger epoch); the ValueError ended faultd."""
    d = FaultDaemon(with_condor_values(faultd_config(tmp_path), VALUES, "faultd.toml"))

    async def oversize(addr: str, msg: object) -> bool:
        raise ValueError("faultd.replica message of 67108893 bytes exceeds 67108864")

    d.bulk.send = oversize  # type: ignore[method-assign]
    d._bulk_sends = 1
    files = [StateFile(name="accountant", data=b"x")]
    state = PoolState(
        manager=7, epoch=1, version=1, taken_at=0.0, files=files, checksum=PoolState.digest(files)
    )
    await d._bulk_send("10.0.0.22:7641", ReplicaPush(sender=Peer(id=7, addr="10.0.0.21:7641"), state=state))
    assert d._bulk_sends == 0 and d.counters["bulk_sends_refused"] == 1


async def test_a_restore_that_cannot_write_its_files_is_retried_and_named(
    tmp_path: Path, autojump_clock: object
) -> None:
    """Security review: an OSError of the restore (a missing directory, a full disk) ended faultd."""
    d = FaultDaemon(with_condor_values(faultd_config(tmp_path), VALUES, "faultd.toml"))

    async def start_manager(state: object, collector: str) -> None:
        raise FileNotFoundError(2, "No such file or directory", "/var/lib/poold/state.json")

    d.condor.start_manager = start_manager  # type: ignore[method-assign]
    await d._perform(StartManager(state=None, epoch=2))
    assert d.condor_error is not None and "/var/lib/poold/state.json" in d.condor_error
    assert any("gave up applying StartManager" in line for line in d.history)


def test_more_manager_config_files_than_a_replica_holds_or_two_of_one_name_are_refused(
    tmp_path: Path,
) -> None:
    """They were cut off, or installed over each other, silently (security review)."""
    many = ", ".join(f'"/etc/condor/cm/f{i}.conf"' for i in range(63))
    with pytest.raises(ConfigError, match="at most 62 files"):
        faultd_config(tmp_path, extra=f"[condor]\nmanager_config_files = [{many}]")
    with pytest.raises(ConfigError, match=r"share the base name 'x\.conf'"):
        faultd_config(tmp_path, extra='[condor]\nmanager_config_files = ["/a/x.conf", "/b/x.conf"]')
