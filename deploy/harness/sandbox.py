"""deploy/sandbox from Python: real HTCondor pools for tests, demos and benchmarks."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from common.condor import DaemonKind, DaemonRef, Gateway
from common.install import FILES as DEPLOY_FILES

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "deploy" / "sandbox"
SECURITY_MODES = ("open", "recommended")
# Which security the pools of a test session, benchmark or demo run with (deploy/sandbox up
# --security): unset, deploy/sandbox's default, HTCondor's recommended security;
# `SANDBOX_SECURITY=open make test` runs the old open pools, for comparison.
SECURITY_ENV = "SANDBOX_SECURITY"


def poll_until(
    what: str,
    predicate: Callable[[], T],
    *,
    timeout: float = 90.0,
    poll: float = 0.5,
    logs: Iterable[Path] = (),
) -> T:
    """Poll until predicate() is truthy and return its value (an OSError, e.g. a control socket not
    there yet, counts as not yet); on timeout, fail with the tails of the daemons' logs.

    The one way tests wait for a condition: never a fixed sleep followed by an assert, which fails
    on a loaded machine and wastes time on an idle one. The default deadline is meant for a loaded
    2-core machine; it is a bound on a failure, not a measurement."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except OSError:
            pass
        time.sleep(poll)
    raise _poll_timeout(what, last, logs)


async def poll_until_async(
    what: str,
    predicate: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = 90.0,
    poll: float = 0.05,
    logs: Iterable[Path] = (),
) -> T:
    """poll_until for trio code: `predicate` may be a plain or an async function, and the event
    loop runs between polls (on trio's clock, so it works under a MockClock too)."""
    deadline = trio.current_time() + timeout
    last: Any = None
    while trio.current_time() < deadline:
        try:
            value = predicate()
            last = await value if inspect.isawaitable(value) else value
            if last:
                return last  # type: ignore[no-any-return]
        except OSError:
            pass
        await trio.sleep(poll)
    raise _poll_timeout(what, last, logs)


def _poll_timeout(what: str, last: Any, logs: Iterable[Path]) -> TimeoutError:
    tails = {str(f): f.read_text(errors="replace")[-2500:] for f in logs if f.exists()}
    return TimeoutError(f"timed out waiting for {what}; last={last!r}\n" + json.dumps(tails, indent=1))


# The units as the package carries them (what `condor-selforg install` puts in /etc/systemd/system).
UNITS = {"poolD": DEPLOY_FILES / "systemd/poold.service", "faultD": DEPLOY_FILES / "systemd/faultd.service"}


def start_in_netns(
    netns: str, module: str, config: Path, log_file: Path, *, jail: bool = True
) -> subprocess.Popen[bytes]:
    """One of our daemons (`python -m MODULE run --config CONFIG`) on a sandbox host's network,
    as a program of this machine, logging to `log_file`, under the restrictions of its systemd
    unit (deploy/harness/unit_jail.py; SELFORG_UNIT_JAIL=0 turns that off). The pid is the
    jail's, which forwards signals to the daemon and exits with its status (without the jail,
    `ip netns exec` execs the daemon in place and the pid is its own). `jail=False`: for a
    caller that says why the unit's restrictions cannot hold in the sandbox."""
    command = [sys.executable, "-m", module, "run", "--config", str(config)]
    unit = UNITS.get(module)
    if jail and unit is not None and os.environ.get("SELFORG_UNIT_JAIL", "1") != "0":
        command = [sys.executable, "-m", "deploy.harness.unit_jail", str(unit), "--", *command]
    with open(log_file, "ab") as log:
        return subprocess.Popen(["ip", "netns", "exec", netns, *command], stdout=log, stderr=log, cwd=REPO)


class GracefulStopFailed(RuntimeError):
    """A process did not stop gracefully on SIGTERM: it still ran after its timeout (and was
    killed), or it exited with an error status."""


def stop_process(proc: subprocess.Popen[bytes], timeout: float, name: str | None = None) -> None:
    """SIGTERM (a graceful stop: daemons undo what they set), wait, and check the exit status.

    A process still running after `timeout` is killed, then reported with GracefulStopFailed naming
    it and the timeout: a graceful stop that hangs is a bug of the process (and what it should have
    undone on the way out is probably still set), which a silent SIGKILL would hide. So is a
    non-zero exit status, whether from the stop or from an earlier crash."""
    args = proc.args if isinstance(proc.args, list | tuple) else [proc.args]
    what = f"{name or ' '.join(str(a) for a in args)} (pid {proc.pid})"
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise GracefulStopFailed(f"{what} still ran {timeout:g} s after SIGTERM: killed") from None
    if proc.returncode != 0:
        raise GracefulStopFailed(f"{what} exited with status {proc.returncode}")


def stop_processes(procs: dict[str, subprocess.Popen[bytes]], timeout: float) -> None:
    """stop_process for each (name -> process), removing it from `procs`; every failure is reported
    in one GracefulStopFailed once all were stopped, so that one hung daemon leaves none running."""
    errors = []
    for name in list(procs):
        try:
            stop_process(procs.pop(name), timeout, name)
        except GracefulStopFailed as e:
            errors.append(str(e))
    if errors:
        raise GracefulStopFailed("; ".join(errors))


def netns_pids(netns: str) -> list[int]:
    """Every process on a sandbox host's network: its HTCondor daemons and our daemons there."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


class SandboxError(RuntimeError):
    """deploy/sandbox failed; the message carries its stderr."""


def sandbox_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(SANDBOX), *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise SandboxError(f"deploy/sandbox {' '.join(args)} failed ({res.returncode}):\n{res.stderr}")
    return res


@dataclass
class SandboxPool:
    """A running sandbox pool."""

    name: str
    collector: str
    client_config: str
    hosts: list[dict[str, Any]]
    security: str = "open"
    trust_domain: str = ""
    # Token directories of host-side identities (recommended mode): "client" (the sandbox user),
    # "poold", "faultd", "admin" (deploy/sandbox SERVICE_TOKENS).
    tokens: dict[str, str] = field(default_factory=dict)

    def exec(self, *argv: str, host: int = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run an HTCondor tool (or anything) on one of the pool's hosts, with its config."""
        return sandbox_cli("exec", self.name, "--host", str(host), "--", *argv, check=check)

    def token_dir(self, identity: str | None) -> str | None:
        """Where the tokens of `identity` ("poold", "faultd", "admin") are, for a Gateway's
        token_dir or a daemon's config; None in open mode (everyone is everyone there) or for
        None (the sandbox user, the client config's default)."""
        if identity is None or self.security != "recommended":
            return None
        if identity not in self.tokens:
            raise KeyError(f"pool {self.name} has no token for {identity!r} (has {sorted(self.tokens)})")
        return self.tokens[identity]

    def gateway(self, identity: str | None = None, **kwargs: Any) -> Gateway:
        """A gateway to the pool as the sandbox user, or as `identity` (see token_dir)."""
        kwargs.setdefault("tools", self.tools())
        return Gateway(
            condor_config=self.client_config,
            collector=self.collector,
            token_dir=self.token_dir(identity),
            **kwargs,
        )

    def tools(self, host: int = 0, *, as_user: bool = False) -> list[str]:
        """The command prefix a Gateway runs HTCondor's tools with (this machine has none): the
        root's, on one of the pool's hosts (`deploy/sandbox tool`). `as_user`: as the sandbox
        user authenticating by FS, as a user on a submit host does (that user also runs the
        daemons and can read the pool's key, with which IDTOKENS would make it condor@password)."""
        if not as_user:
            return [str(SANDBOX), "tool", self.name, "--host", str(host), "--"]
        fs_only = "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=FS"
        return ["env", fs_only, str(SANDBOX), "tool", self.name, "--host", str(host), "--user", "--"]

    def llic_env(self) -> dict[str, str]:
        """What master_submitter needs from the environment to submit here as the sandbox user
        does (added to the caller's): the client config, and HTCondor's tools run as that user
        (the master's token comes from `condor_token_fetch`, llic/master_token.py)."""
        from llic.submitter import TOOLS_ENV

        return {"CONDOR_CONFIG": self.client_config, TOOLS_ENV: shlex.join(self.tools(as_user=True))}

    def token(self, identity: str, *authz: str, lifetime: int | None = None) -> str:
        """A token from the pool's signing key (recommended mode): `identity` ("name" for
        name@<trust domain>, or "user@domain") bounded to `authz`."""
        args = ["token", self.name, "--identity", identity, *(a for z in authz for a in ("--authz", z))]
        args += ["--lifetime", str(lifetime)] if lifetime is not None else []
        return sandbox_cli(*args).stdout.strip()

    def local_dir(self, host: int = 0) -> Path:
        """A host's HTCondor LOCAL_DIR (log/, spool/, config.d/), as a path on this machine."""
        return Path(self._root) / str(self.hosts[host]["local_dir"]).lstrip("/")

    def log_tails(
        self, host: int = 0, logs: tuple[str, ...] = ("MasterLog", "CollectorLog"), chars: int = 3000
    ) -> str:
        """The ends of a host's HTCondor logs, for a test's failure message."""
        parts = []
        for name in logs:
            path = self.local_dir(host) / "log" / name
            text = path.read_text(errors="replace")[-chars:] if path.exists() else "(missing)"
            parts.append(f"--- {path}\n{text}")
        return "\n".join(parts)

    def master(self, host: int = 0) -> DaemonRef:
        """The master of a host, addressed directly (from its address file, no collector)."""
        address = (self.local_dir(host) / "log" / ".master_address").read_text().splitlines()[0]
        return DaemonRef(kind=DaemonKind.MASTER, address=address, machine=self.hosts[host]["name"])

    _root: str = field(default="", repr=False)


class Sandbox:
    def __init__(self, security: str | None = None) -> None:
        """Pools in `security` mode (SECURITY_MODES), else as SANDBOX_SECURITY says, else
        deploy/sandbox's default."""
        self.security = security or os.environ.get(SECURITY_ENV) or None
        if self.security is not None and self.security not in SECURITY_MODES:
            raise ValueError(f"{SECURITY_ENV}={self.security!r}: not one of {', '.join(SECURITY_MODES)}")
        self.started: list[str] = []  # up now
        self.used: list[str] = []  # ever started by this Sandbox, down or not: what it must not leave
        self.dirs: list[str] = []

    def up(
        self,
        name: str,
        *,
        slots: int = 2,
        hosts: int = 1,
        subnet_per_host: bool = False,
        security: str | None = None,
    ) -> SandboxPool:
        """Start (or keep) a pool; more `hosts` for a running pool adds execute hosts to it (machines
        joining it); `subnet_per_host` puts each execute host in a /24 of its own; `security`
        overrides this Sandbox's mode for this pool."""
        security = security or self.security
        extra = ["--subnet-per-host"] if subnet_per_host else []
        extra += ["--security", security] if security else []
        res = sandbox_cli("up", name, "--slots", str(slots), "--hosts", str(hosts), *extra, "--json")
        data = json.loads(res.stdout)
        if name not in self.started:
            self.started.append(name)
        if name not in self.used:
            self.used.append(name)
        return SandboxPool(
            name=name,
            collector=data["collector"],
            client_config=data["client_config"],
            hosts=data["hosts"],
            security=data.get("security", "open"),
            trust_domain=data.get("trust_domain", ""),
            tokens=data.get("tokens", {}),
            _root=data["root"],
        )

    def down(self, name: str) -> None:
        sandbox_cli("down", name)
        if name in self.started:
            self.started.remove(name)

    def shared_dir(self) -> Path:
        """A directory that jobs (run as the sandbox user, inside the root) can write to."""
        path = tempfile.mkdtemp(prefix="sandbox-jobs-", dir="/tmp")
        os.chmod(path, 0o1777)
        self.dirs.append(path)
        return Path(path)
