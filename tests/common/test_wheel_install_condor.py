"""Issue 17's "done when", on real HTCondor: an administrator's path from a wheel to running daemons.

The wheel is built (`python -m build`), installed into a new venv inside the sandbox's Debian 13
root (`deploy/sandbox install-selforg --wheel`, with the versions constraints.txt pins), and
`condor-selforg install poold faultd` puts the units, example configs and HTCondor snippets in
place in that root (the snippets into the pool host's LOCAL_CONFIG_DIR, as HTCondor's own config
names it). poold (as the condor user) and faultd (as root) then run from there, chrooted, on the
pool's central manager, with a notification socket standing in for systemd's: both show in
`condor_status -any` and on their Prometheus endpoints with the same figures; with the pool's
collector turned off for longer than the watchdog interval, poold keeps pinging the watchdog and
says in STATUS= what it waits for; a clean stop takes the ads out of the collector.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.condor.gateway import token_environment
from common.overlay.auth import generate_key_file
from common.service import query_control
from deploy.harness.sandbox import Sandbox, SandboxPool, poll_until, sandbox_cli, stop_process
from tests.notify_socket import NotifySocket

pytestmark = pytest.mark.htcondor

REPO = Path(__file__).resolve().parents[2]
POOL = "whl"
WATCHDOG_S = 6.0  # WatchdogSec the daemons are told (WATCHDOG_USEC); they ping every 3 s
POOLD_METRICS, FAULTD_METRICS = 9751, 9752
INSTALLED = [  # what `condor-selforg install poold faultd` and the key steps put into the root
    "etc/poold",  # (the snippets go to the pool host's config directory)
    "etc/faultd",
    "etc/systemd/system/poold.service",
    "etc/systemd/system/faultd.service",
    "var/lib/condor-selforg",
    "root/poold-ca",
    "root/faultd-ca",
]


def remove_installed(root: Path) -> None:
    """The shared sandbox root as it was before this test (also after an interrupted earlier run)."""
    for rel in INSTALLED:
        target = root / rel
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """A directory under /tmp (the root sees the host's /tmp) that the condor user can enter."""
    path = Path(tempfile.mkdtemp(prefix="selforg-wheel-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(work: Path) -> Path:
    """The wheel an administrator builds: python -m build (sdist, then the wheel from it)."""
    dist = work / "dist"
    res = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (built,) = dist.glob("condor_selforg-*.whl")
    return built


@pytest.fixture(scope="module")
def pool(sandbox: Sandbox) -> Iterator[SandboxPool]:
    pool = sandbox.up(POOL, slots=1)
    root = Path(pool._root)
    remove_installed(root)
    yield pool
    sandbox.down(POOL)
    remove_installed(root)


class Root:
    """Commands inside the sandbox root as on a real central manager, with the pool host's
    HTCondor configuration."""

    def __init__(self, pool: SandboxPool, venv: str) -> None:
        self.pool = pool
        self.host = pool.hosts[0]
        self.path = Path(pool._root)
        self.venv = venv
        self.env = [
            "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "LANG=C.UTF-8",
            f"CONDOR_CONFIG={self.host['config_file']}",
        ]  # fmt: skip

    def argv(self, *argv: str, user: str | None = None, env: tuple[str, ...] = ()) -> list[str]:
        spec = [f"--userspec={user}:{user}"] if user else []
        return [
            "ip",
            "netns",
            "exec",
            self.host["netns"],
            "chroot",
            *spec,
            str(self.path),
            *self.env,
            *env,
            *argv,
        ]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{argv}: {res.stderr}"
        return res

    def as_admin(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A tool run by the pool's administrator: as root, and in a recommended pool with the
        administrator's token (the sandbox user, as whom `deploy/sandbox exec` runs, was refused
        condor_off there: DENIED for condor-sandbox@sandbox)."""
        admin = self.pool.token_dir("admin")
        inside = "/" + str(Path(admin).relative_to(self.path)) if admin else None
        env = tuple(f"{k}={v}" for k, v in token_environment(inside).items())
        res = subprocess.run(self.argv(*argv, env=env), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{argv}: {res.stderr}"
        return res

    def ids(self, user: str) -> tuple[int, int]:
        for line in (self.path / "etc/passwd").read_text().splitlines():
            parts = line.split(":")
            if parts[0] == user:
                return int(parts[2]), int(parts[3])
        raise AssertionError(f"no user {user} in the root")


def condor_status_any(pool: SandboxPool, my_type: str, *attrs: str) -> list[str]:
    res = pool.exec(
        "condor_status", "-any", "-constraint", f'MyType == "{my_type}"', "-af", *attrs, check=False
    )
    return res.stdout.split() if res.returncode == 0 else []


def scrape(address: str, port: int) -> dict[str, str]:
    """name{labels} -> value, from a Prometheus endpoint."""
    with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_poold_and_faultd_from_the_wheel(
    sandbox: Sandbox, pool: SandboxPool, work: Path, wheel: Path
) -> None:
    venv = f"{work}/venv"
    out = sandbox_cli("install-selforg", "--wheel", str(wheel), "--extras", "metrics", "--venv", venv).stdout
    assert out.strip().startswith(f"{venv} in ") and wheel.name in out
    root = Root(pool, venv)
    cm = root.host
    config_d = Path(cm["local_dir"]) / "config.d"

    # -- condor-selforg install: dry run, install, a second run that changes nothing
    dry = root.run(f"{venv}/bin/condor-selforg", "install", "poold", "faultd", "--dry-run").stdout
    assert "  create     /etc/poold/poold.toml  0640 condor:condor" in dry.splitlines()
    assert f"create     {config_d}/60-poold-pool.conf  0644 root:root" in dry  # HTCondor's LOCAL_CONFIG_DIR
    assert not (root.path / "etc/poold").exists()
    root.run(f"{venv}/bin/condor-selforg", "install", "poold", "faultd")
    unit = (root.path / "etc/systemd/system/poold.service").read_text()
    assert f"ExecStart={venv}/bin/poold run --config /etc/poold/poold.toml" in unit
    condor_uid, condor_gid = root.ids("condor")
    st = (root.path / "etc/poold/poold.toml").stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, condor_uid, condor_gid)
    again = root.run(f"{venv}/bin/condor-selforg", "install", "poold", "faultd").stdout
    steps = again.split("\nnext:")[0].splitlines()[1:]
    assert [line.split()[0] for line in steps] == ["unchanged"] * 7, (
        again
    )  # files; the directories as they were

    # -- the administrator's part: ring keys and the two config files (no HTCondor path in them:
    # poold's collector, faultd's LOG, SPOOL, config dir and collector come from HTCondor's config)
    # and each daemon's identity, made with its own `keys` command as docs/admin.md says (a CA per
    # ring, the node's key pair in /etc/<daemon>, its certificate, the CA's public key beside it)
    address = cm["address"]
    for daemon, (uid, gid), name in (
        ("poold", (condor_uid, condor_gid), POOL),
        ("faultd", (0, 0), cm["name"]),
    ):
        etc = f"/etc/{daemon}"
        key = root.path / f"etc/{daemon}/ring.key"
        generate_key_file(key)
        keys = (f"{venv}/bin/{daemon}", "keys")
        root.run(*keys, "init-ca", f"/root/{daemon}-ca")
        root.run(*keys, "new-node", etc)
        root.run(*keys, "sign", "--ca-key", f"/root/{daemon}-ca/ca.key", "--public-key", f"{etc}/node.pub",
                 "--name", name, "--pool", POOL, "--host", address, "--out", f"{etc}/node.cert")  # fmt: skip
        shutil.copy(root.path / f"root/{daemon}-ca/ca.pub", root.path / f"etc/{daemon}/ca.pub")
        for f in ("ring.key", "node.key", "node.pub", "node.cert", "ca.pub"):
            os.chown(root.path / f"etc/{daemon}/{f}", uid, gid)
    # -- in a pool under HTCondor's recommended security (the sandbox's default), each daemon's
    # HTCondor identity as the README's "Security model" says: a token from the pool's signing
    # key, bounded to what the daemon needs, alone in its token_dir (owner and mode as its keys)
    token_dirs = {"poold": "", "faultd": ""}
    if pool.security == "recommended":
        # poold's levels as the README's condor_token_create line: ADVERTISE_SCHEDD takes a revoked
        # pool's schedd and submitter ads out of the collector (issue 15)
        poold_authz = ("READ", "CONFIG", "ADMINISTRATOR", "DAEMON", "ADVERTISE_SCHEDD")
        for daemon, (uid, gid), authz in (
            ("poold", (condor_uid, condor_gid), poold_authz),
            ("faultd", (0, 0), ("READ", "ADMINISTRATOR", "DAEMON")),
        ):
            # condor_token_create -identity <daemon>@<trust domain> -authz ..., as the key's owner
            # (in the sandbox the daemons' unprivileged user, not root: deploy/sandbox token)
            token = pool.token(daemon, *authz)
            token_dir = root.path / f"etc/{daemon}/tokens.d"
            token_dir.mkdir(mode=0o700)
            (token_dir / daemon).write_text(token + "\n")
            (token_dir / daemon).chmod(0o600)
            for path in (token_dir, token_dir / daemon):
                os.chown(path, uid, gid)
            token_dirs[daemon] = f'token_dir = "/etc/{daemon}/tokens.d"'
    run_dir = work / "run"
    run_dir.mkdir()
    os.chown(run_dir, condor_uid, condor_gid)
    (root.path / "etc/poold/poold.toml").write_text(f"""
[pool]
name = "{POOL}"
condor_config = "{cm["config_file"]}"
{token_dirs["poold"]}
[ring]
node_name = "{POOL}"
bind = "{address}"
key_file = "/etc/poold/ring.key"
[discovery]
interval = 2.0
[flocking]
interval = 2.0
[daemon]
control_socket = "{run_dir}/poold.sock"
policy_file = "/etc/poold/policy.toml"
advertise_interval = 2.0
metrics_listen = "{address}:{POOLD_METRICS}"
""")
    (root.path / "etc/faultd/faultd.toml").write_text(f"""
[fault]
original_manager = true
manager_name = "{cm["name"]}"
state_interval = 1.0
[condor]
condor_config = "{cm["config_file"]}"
{token_dirs["faultd"]}
[ring]
node_name = "{cm["name"]}"
bind = "{address}"
port = 7641
key_file = "/etc/faultd/ring.key"
[daemon]
control_socket = "{run_dir}/faultd.sock"
advertise_interval = 2.0
metrics_listen = "{address}:{FAULTD_METRICS}"
""")
    check = root.run(f"{venv}/bin/faultd", "check-config", "/etc/faultd/faultd.toml").stdout
    assert f"collector {address}:9618" in check and f"LOG {cm['local_dir']}/log" in check
    kept = root.run(f"{venv}/bin/condor-selforg", "install", "poold").stdout
    assert (
        "keep       /etc/poold/poold.toml  (changed here); the new version goes in /etc/poold/poold.toml.new"
        in kept
    )

    # -- start both from the root, as their units would (poold as condor, faultd as root)
    notify = {d: NotifySocket(run_dir / f"{d}.notify") for d in ("poold", "faultd")}
    watchdog = (f"WATCHDOG_USEC={int(WATCHDOG_S * 1e6)}",)
    logs = {d: open(work / f"{d}.log", "ab") for d in ("poold", "faultd")}
    procs = {
        "faultd": subprocess.Popen(
            root.argv(f"{venv}/bin/faultd", "run", env=(f"NOTIFY_SOCKET={notify['faultd'].path}", *watchdog)),
            stdout=logs["faultd"], stderr=logs["faultd"],
        ),
        "poold": subprocess.Popen(
            root.argv(f"{venv}/bin/poold", "run", user="condor",
                      env=(f"NOTIFY_SOCKET={notify['poold'].path}", *watchdog)),
            stdout=logs["poold"], stderr=logs["poold"],
        ),
    }  # fmt: skip
    tails = [work / "poold.log", work / "faultd.log"]
    try:
        for d in ("poold", "faultd"):
            poll_until(f"{d} READY=1", lambda d=d: "READY=1" in notify[d].texts(), timeout=120, logs=tails)
        poll_until(
            "faultd manages the pool",
            lambda: query_control(run_dir / "faultd.sock", {"cmd": "status"}).get("role") == "manager",
            timeout=120,
            logs=tails,
        )

        # -- both in condor_status -any, and on their Prometheus endpoints with the same figures
        def poold_ad() -> list[str]:
            ad = condor_status_any(pool, "PoolD", "Name", "TotalSlots", "Joined")
            return ad if "undefined" not in ad else []

        def faultd_ad() -> list[str]:
            ad = condor_status_any(pool, "FaultD", "Name", "Role", "Epoch")
            return ad if ad[1:2] == ["manager"] else []

        assert poll_until("poold's ad with its load", poold_ad, timeout=120, logs=tails) == [
            f"poold@{POOL}", "1", "true",
        ]  # fmt: skip
        manager_ad = poll_until("faultd's ad as manager", faultd_ad, timeout=120, logs=tails)
        assert manager_ad[0] == f"faultd@{cm['name']}"
        poold_metrics = scrape(address, POOLD_METRICS)
        assert poold_metrics["poold_total_slots"] == "1.0" and poold_metrics["poold_joined"] == "1.0"
        assert f'pool="{POOL}"' in next(k for k in poold_metrics if k.startswith("poold_info{"))
        faultd_metrics = scrape(address, FAULTD_METRICS)
        assert float(faultd_metrics["faultd_epoch"]) == float(manager_ad[2])
        assert 'role="manager"' in next(k for k in faultd_metrics if k.startswith("faultd_info{"))

        # -- the collector off for longer than WatchdogSec: poold keeps pinging, and says why it waits
        master = (
            (Path(root.path) / cm["local_dir"].lstrip("/") / "log/.master_address").read_text().split()[0]
        )
        root.as_admin("condor_off", "-addr", master, "-daemon", "collector")
        off = time.monotonic()
        poll_until("the collector to stop answering", lambda: not condor_status_any(pool, "PoolD", "Name"),
                   timeout=120)  # fmt: skip
        waiting = poll_until(
            "poold's STATUS= to name the dead collector",
            lambda: [s for s in notify["poold"].texts("STATUS=") if "waiting for the pool's collector" in s],
            timeout=120, logs=tails,
        )  # fmt: skip
        assert waiting[0].startswith(f"STATUS=waiting for the pool's collector {address}:9618: ")
        while time.monotonic() - off < 3 * WATCHDOG_S:
            assert procs["poold"].poll() is None, "poold died while the collector was off"
            time.sleep(0.5)
        root.as_admin("condor_on", "-addr", master, "-daemon", "collector")
        on = time.monotonic()
        pings = [t for t in notify["poold"].times("WATCHDOG=1") if off <= t <= on]
        gaps = [b - a for a, b in zip([off, *pings], [*pings, on], strict=True)]
        # The old poold sent one WATCHDOG=1 and then nothing while the collector was down (systemd
        # restarts it after WatchdogSec); now the pings go on after the outage outlasted WatchdogSec.
        # No bound on the gaps: how fast a loaded machine runs the loop is no test's business.
        late = [t for t in pings if t > off + WATCHDOG_S]
        assert len(pings) >= 2 and late, (pings, gaps)
        assert procs["poold"].poll() is None
        poll_until(
            "poold's STATUS= back to the pool's load",
            lambda: "slots free" in (notify["poold"].texts("STATUS=") or [""])[-1],
            timeout=120, logs=tails,
        )  # fmt: skip

        # -- a clean stop takes each ad out of the collector at once
        poll_until("poold's ad back", lambda: condor_status_any(pool, "PoolD", "Name"), timeout=120)
        stop_process(procs.pop("poold"), timeout=30, name="poold")
        assert "STOPPING=1" in notify["poold"].texts()
        assert condor_status_any(pool, "PoolD", "Name") == []
        stop_process(procs.pop("faultd"), timeout=30, name="faultd")
        assert condor_status_any(pool, "FaultD", "Name") == []
        decisions = [json.loads(line) for line in (work / "faultd.log").read_text().splitlines()
                     if line.startswith("{")]  # fmt: skip
        takeover = next(d for d in decisions if d.get("event") == "takeover")
        assert takeover["manager"] == f"{address}:7641" and takeover["epoch"] >= 1
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        for n in notify.values():
            n.close()
        for f in logs.values():
            f.close()
