"""The gateway against real HTCondor daemons from deploy/sandbox (checked with HTCondor's tools)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from common.condor import CondorError, DaemonKind, DaemonNotFound, DaemonRef, Gateway
from common.condor.knobs import KnobRefused
from deploy.harness.sandbox import Sandbox, SandboxPool, netns_pids, poll_until_async, sandbox_cli

pytestmark = pytest.mark.htcondor


@pytest.fixture(scope="module")
def pool_a(sandbox: Sandbox) -> SandboxPool:
    return sandbox.up("gwa", slots=3)


@pytest.fixture(scope="module")
def pool_b(sandbox: Sandbox) -> SandboxPool:
    return sandbox.up("gwb", slots=1, hosts=2)


async def wait_until_done(gw: Gateway, cluster: int, count: int, deadline: float = 120) -> list[dict]:
    """Poll the history until `count` jobs of the cluster have left the queue."""

    async def done() -> list[dict]:
        jobs = await gw.job_history(f"ClusterId == {cluster}", ["ProcId", "ExitCode", "JobStatus"])
        return sorted(jobs, key=lambda j: j["ProcId"]) if len(jobs) >= count else []

    return await poll_until_async(
        f"{count} jobs of cluster {cluster} in the history", done, timeout=deadline, poll=1
    )


async def test_submitted_jobs_run_and_write_their_files(sandbox: Sandbox, pool_a: SandboxPool) -> None:
    out = sandbox.shared_dir()
    async with pool_a.gateway() as gw:
        load = await gw.pool_load()
        assert load.total_slots == 3 and len(load.schedds) == 1
        result = await gw.submit(
            {
                "executable": "/bin/sh",
                "arguments": "\"-c 'echo job $(Process) of $(Cluster) > result.$(Process)'\"",
                "initialdir": str(out),
                "output": "stdout.$(Process)",
                "error": "stderr.$(Process)",
                "log": "jobs.log",
                "should_transfer_files": "NO",
            },
            count=3,
        )
        assert result.num_procs == 3
        # The jobs still queued (some may have run already) are the three just submitted, the
        # sandbox user's (the client claims to be it).
        queued = await gw.query_jobs(f"ClusterId == {result.cluster}", ["ProcId", "Owner"])
        assert {j["ProcId"] for j in queued} <= {0, 1, 2} and len(queued) == len(
            {j["ProcId"] for j in queued}
        )
        assert all(j["Owner"] == "condor-sandbox" for j in queued)
        await gw.reschedule()
        done = await wait_until_done(gw, result.cluster, 3)
    assert [(j["ProcId"], j["ExitCode"], j["JobStatus"]) for j in done] == [(0, 0, 4), (1, 0, 4), (2, 0, 4)]
    for proc in range(3):
        assert (out / f"result.{proc}").read_text() == f"job {proc} of {result.cluster}\n"
    # HTCondor's own record agrees.
    history = pool_a.exec(
        "condor_history",
        "-constraint",
        f"ClusterId == {result.cluster}",
        "-af",
        "ProcId",
        "ExitCode",
        "Owner",
    ).stdout.split("\n")
    rows = sorted(line.split() for line in history if line.strip())
    assert rows == [[str(p), "0", "condor-sandbox"] for p in range(3)]


def config_val(pool: SandboxPool, daemon: str, knob: str) -> str:
    """A daemon's value of a knob as condor_config_val prints it ('Not defined: KNOB' when it has
    none; that still exits 0, so a failing query raises instead of reading as 'not set')."""
    return pool.exec("condor_config_val", f"-{daemon}", knob).stdout.strip()


async def test_flock_to_set_through_gateway_is_seen_by_condor_config_val(pool_a: SandboxPool) -> None:
    async with pool_a.gateway("poold") as gw:  # poold's identity in a secure pool: FLOCK_TO is its
        (schedd,) = await gw.list_schedds()
        configured = config_val(pool_a, "schedd", "FLOCK_TO")
        flock_to = "10.213.200.10:9618, 10.213.201.10:9618"
        await gw.set_config(schedd, {"FLOCK_TO": flock_to})
        assert await gw.get_config(schedd, "FLOCK_TO") == flock_to
        assert config_val(pool_a, "schedd", "FLOCK_TO") == flock_to
        await gw.set_config(schedd, {"FLOCK_TO": None})
        assert config_val(pool_a, "schedd", "FLOCK_TO") == configured  # the runtime value is gone


async def test_runtime_config_on_a_startd_from_the_collector(pool_a: SandboxPool) -> None:
    """Startd ads say MyType "Machine", which htcondor2's send_command cannot handle by itself."""
    async with pool_a.gateway("poold") as gw:  # FLOCK_FROM on startds is poold's too
        startd = (await gw.list_daemons(DaemonKind.STARTD))[0]
        configured = config_val(pool_a, "startd", "FLOCK_FROM")
        await gw.set_config(startd, {"FLOCK_FROM": "10.213.99.1, 10.213.99.2"})
        assert config_val(pool_a, "startd", "FLOCK_FROM") == "10.213.99.1, 10.213.99.2"
        await gw.set_config(startd, {"FLOCK_FROM": None})
        assert config_val(pool_a, "startd", "FLOCK_FROM") == configured


async def test_count_slots_evaluates_a_jobs_requirements_against_each_slot(pool_b: SandboxPool) -> None:
    execute = pool_b.hosts[1]["name"]
    async with pool_b.gateway() as gw:
        assert await gw.count_slots("true") == 2
        assert await gw.count_slots(f'TARGET.Machine == "{execute}"') == 1
        assert await gw.count_slots(f'Machine != "{execute}" && OpSys == "LINUX"') == 1
        assert await gw.count_slots("TARGET.Memory >= RequestMemory", {"RequestMemory": 200}) == 2
        assert await gw.count_slots("Memory >= RequestMemory", {"RequestMemory": 100_000}) == 0


async def test_daemon_errors_carry_htcondor_message(pool_a: SandboxPool) -> None:
    async with pool_a.gateway() as gw:
        (schedd,) = await gw.list_schedds()
        # The gateway's allow-list stops a knob no writer may set before HTCondor sees it ...
        with pytest.raises(KnobRefused, match="NOT_A_SETTABLE_KNOB: not a knob this writer may set"):
            await gw.set_config(schedd, {"NOT_A_SETTABLE_KNOB": "1"})
        # ... and the worker's own op, asked directly, carries HTCondor's refusal.
        with pytest.raises(CondorError) as info:
            args = {"NOT_A_SETTABLE_KNOB": "1"}
            await gw.call(
                "set_config",
                daemon=schedd.model_dump(mode="json"),
                values=args,
                reconfig=True,
                collector=None,
            )
        message = info.value.condor_message
        assert info.value.kind == "ConfigRefused" and schedd.name in message
        assert "refused NOT_A_SETTABLE_KNOB: Failed to set remote daemon parameter" in message
        # Whatever a caller of the raw op sends, the worker sends no value that could break out.
        before = config_val(pool_a, "schedd", "FLOCK_TO")
        with pytest.raises(CondorError, match="character '\\\\n' is not allowed") as info:
            evil = {"FLOCK_TO": "x\nALLOW_WRITE = *"}
            await gw.call(
                "set_config",
                daemon=schedd.model_dump(mode="json"),
                values=evil,
                reconfig=True,
                collector=None,
            )
        assert info.value.kind == "ConfigRefused" and config_val(pool_a, "schedd", "FLOCK_TO") == before
        with pytest.raises(DaemonNotFound):
            await gw.get_config(DaemonRef(kind=DaemonKind.SCHEDD, name="nobody@nowhere"), "FLOCK_TO")
        with pytest.raises(CondorError) as info:
            await gw.query_jobs("this is not ) a constraint")
        # The schedd refuses the constraint; the bindings say no more than that (errmsg is empty).
        assert info.value.kind == "HTCondorException"
        assert "Failed to fetch ads from schedd" in info.value.condor_message
        assert await gw.version()  # still usable


async def test_two_pools_on_separate_hosts_see_each_other(pool_a: SandboxPool, pool_b: SandboxPool) -> None:
    assert pool_a.hosts[0]["address"] != pool_b.hosts[0]["address"]
    a_sees_b = pool_a.exec("condor_status", "-pool", pool_b.collector, "-collector", "-af", "MyAddress")
    b_sees_a = pool_b.exec("condor_status", "-pool", pool_a.collector, "-collector", "-af", "MyAddress")
    assert pool_b.hosts[0]["address"] in a_sees_b.stdout
    assert pool_a.hosts[0]["address"] in b_sees_a.stdout
    async with Gateway(condor_config=pool_a.client_config) as gw:  # one gateway, two pools by address
        load_a = await gw.pool_load(pool_a.collector)
        load_b = await gw.pool_load(pool_b.collector)
    assert (load_a.total_slots, load_b.total_slots) == (3, 2)
    assert {s.address.split(":")[0].lstrip("<") for s in load_b.schedds} == {
        h["address"] for h in pool_b.hosts
    }


async def test_daemon_list_edit_starts_and_stops_a_collector(pool_b: SandboxPool) -> None:
    """What faultD's takeover does: start a collector on an execute host, then stop it."""
    master = pool_b.master(host=1)  # addressed from its address file, not via the collector
    # faultD itself now writes a role file instead; in a secure pool the gateway's raw DAEMON_LIST
    # edit needs CONFIG and ADMINISTRATOR on the master, the pool administrator's.
    async with pool_b.gateway("admin") as gw:
        new = await gw.add_daemons(master, ["COLLECTOR"])
        assert new[-1] == "COLLECTOR" and "STARTD" in new
        listed = pool_b.exec("condor_config_val", "-master", "DAEMON_LIST", host=1).stdout
        assert "COLLECTOR" in listed
        address = pool_b.hosts[1]["address"]

        def collector_answers() -> bool:
            probe = pool_b.exec(
                "condor_status", "-pool", f"{address}:9618", "-collector", "-af", "Name", host=1, check=False
            )
            return probe.returncode == 0 and bool(probe.stdout.strip())

        await poll_until_async("the new collector on host 1 to answer", collector_answers, poll=0.5)
        after = await gw.remove_daemons(master, ["COLLECTOR"])
        assert "COLLECTOR" not in after and "STARTD" in after
        listed = pool_b.exec("condor_config_val", "-master", "DAEMON_LIST", host=1).stdout
        assert "COLLECTOR" not in listed


def test_up_is_idempotent_and_down_leaves_nothing(sandbox: Sandbox) -> None:
    first = sandbox.up("gwc", slots=1)
    master_address = first.local_dir(0) / "log" / ".master_address"
    before = master_address.read_text()
    again = sandbox.up("gwc", slots=1)  # no restart: same master, same address
    assert again.collector == first.collector and master_address.read_text() == before
    # What is the pool's is named for it (how the session's leftover check tells its pools' from
    # other sessions'): its namespace, its interface, the processes on its host.
    mine = json.loads(sandbox_cli("status", "--json").stdout)["leftovers"]["by_pool"]["gwc"]
    assert mine["netns"] == ["sb-gwc-0"] and len(mine["interfaces"]) == 1
    master = [
        pid for pid in netns_pids("sb-gwc-0") if Path(f"/proc/{pid}/comm").read_text() == "condor_master\n"
    ]
    assert len(master) == 1 and master[0] in mine["processes"]
    sandbox.down("gwc")
    status = json.loads(sandbox_cli("status", "--json").stdout)
    assert "gwc" not in status["leftovers"]["by_pool"], status["leftovers"]["by_pool"]["gwc"]
    assert "gwc" not in [pool["name"] for pool in status["pools"]]


def neighbour(address: str, netns: str | None = None) -> str:
    """The ARP entry for `address` on this machine (or in a sandbox host's namespace)."""
    where = ["-n", netns] if netns else []
    return subprocess.run(
        ["ip", *where, "neigh", "show", "to", address], capture_output=True, text=True
    ).stdout


def plant_neighbour(address: str, mac: str, netns: str | None = None) -> None:
    where, dev = (["-n", netns], "eth0") if netns else ([], "sbbr0")
    cmd = ["ip", *where, "neigh", "replace", address, "lladdr", mac, "dev", dev, "nud", "reachable"]
    subprocess.run(cmd, check=True)


def test_a_pool_that_reuses_a_stopped_pools_address_is_reachable_at_once(
    sandbox: Sandbox, pool_a: SandboxPool
) -> None:
    """Pools reuse the addresses of stopped pools. An ARP entry that kept the old host's MAC
    (it came and went, probably with changes of the bridge's own MAC) made the new collector
    unreachable from this machine for up to a minute; `up` now drops such entries here and on
    every sandbox host."""
    old = sandbox.up("gwd", slots=1)
    address = old.hosts[0]["address"]
    sandbox.down("gwd")
    gone = "02:00:00:00:00:99"  # a MAC nobody has any more, planted as a cache would keep it
    other = str(pool_a.hosts[0]["netns"])
    plant_neighbour(address, gone)
    plant_neighbour(address, gone, other)
    new = sandbox.up("gwd", slots=1)
    try:
        assert new.hosts[0]["address"] == address
        assert gone not in neighbour(address) and gone not in neighbour(address, other)
        host, port = new.collector.split(":")
        socket.create_connection((host, int(port)), timeout=10).close()  # from this machine
    finally:
        sandbox.down("gwd")
