"""The daemons' async door to HTCondor.

`Gateway` runs `common.condor.worker` as a child process and sends it one request at a time.
Every call has a deadline: when it passes, the child (stuck in a blocking HTCondor call that
cannot be interrupted) is killed and `GatewayTimeout` is raised; when the child dies mid-call,
`GatewayCrashed` is raised. Either way the next call starts a fresh child, so a hung collector
costs one call, never the daemon's event loop.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
import trio

from common.condor import knobs
from common.condor.errors import (
    CondorError,
    DaemonNotFound,
    GatewayCrashed,
    GatewayTimeout,
    ProtocolViolation,
)
from common.condor.knobs import CheckedConfig, KnobScope
from common.condor.types import (
    AuthorizationCheck,
    DaemonKind,
    DaemonRef,
    PoolLoad,
    ShutOut,
    SubmitResult,
    TokenInfo,
    TokenRequest,
)
from common.framing import FrameDecoder, FrameTooLarge, frame, pack, unpack

log = structlog.get_logger("condor.gateway")

DEFAULT_TIMEOUT = 30.0


def token_environment(token_dir: str | Path | None) -> dict[str, str]:
    """The environment that makes an HTCondor client (the bindings, or a tool) authenticate with
    the tokens in `token_dir` and nothing else; empty for None. Each knob is set twice: with the
    TOOL. prefix too, since a subsystem-prefixed knob in the configuration files wins over the
    plain one from the environment (checked with 23.9: TOOL.SEC_CLIENT_AUTHENTICATION_METHODS = FS
    in a file beat _CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS)."""
    if not token_dir:
        return {}
    knobs = {"SEC_TOKEN_DIRECTORY": str(token_dir), "SEC_CLIENT_AUTHENTICATION_METHODS": "IDTOKENS"}
    env = {f"_CONDOR_{knob}": value for knob, value in knobs.items()}
    return env | {f"_CONDOR_TOOL.{knob}": value for knob, value in knobs.items()}


def _ref(daemon: DaemonRef | None) -> dict[str, Any] | None:
    return daemon.model_dump(mode="json", exclude_none=True) if daemon else None


def _job_constraint(jobs: str | Iterable[str]) -> str:
    """A constraint from a constraint text, or from job ids like '12' or '12.3'."""
    if isinstance(jobs, str):
        return jobs
    terms = []
    for job in jobs:
        cluster, _, proc = job.partition(".")
        if not cluster.isdigit() or (proc and not proc.isdigit()):
            raise ValueError(f"not a job id: {job!r}")
        terms.append(f"(ClusterId == {cluster} && ProcId == {proc})" if proc else f"ClusterId == {cluster}")
    if not terms:
        raise ValueError("no job ids given")
    return " || ".join(terms)


class Gateway:
    """One worker process, one request at a time.

    `condor_config` becomes the worker's CONDOR_CONFIG (without one, HTCondor's default search
    applies). `collector` is the pool to talk to when a call names none. `token_dir`, when given,
    is the only place the worker looks for IDTOKENS, and IDTOKENS the only way it authenticates:
    a daemon then acts as its token's identity (e.g. poold@<trust domain>), with what the pool
    grants that identity, not as the Unix user it runs as (root's FS identity is an HTCondor
    administrator under the packaged security default). `tools` is how the worker runs HTCondor's
    command-line tools, for what the bindings lack (tokens): a command prefix, empty when they
    are on PATH as on any machine with HTCondor installed.
    """

    def __init__(
        self,
        *,
        condor_config: str | Path | None = None,
        collector: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        token_dir: str | Path | None = None,
        tools: Sequence[str] = (),
    ) -> None:
        self.condor_config = str(condor_config) if condor_config else None
        self.token_dir = str(token_dir) if token_dir else None
        self.tools = list(tools)
        self.collector = collector
        self.timeout = timeout
        self._process: trio.Process | None = None
        self._decoder = FrameDecoder()
        self._lock = trio.Lock()
        self._ids = itertools.count(1)
        self.restarts = 0

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def child_pid(self) -> int | None:
        """The live worker's process id, or None when none runs (the next call starts one)."""
        return self._process.pid if self._process and self._process.returncode is None else None

    async def aclose(self) -> None:
        """Stop the worker: EOF on its stdin, a kill after 2 s; shielded from cancellation."""
        with trio.CancelScope(shield=True):
            await self._discard_child(graceful=True)

    async def start(self) -> None:
        """Start the worker now rather than at the first call, so that its start-up (a Python
        loading HTCondor's bindings) overlaps whatever the caller does before that call."""
        async with self._lock:
            if self._process is None or self._process.returncode is not None:
                if self._process is not None:
                    self.restarts += 1
                self._process = await self._start_child()

    # ------------------------------------------------------------------ the child process

    async def _start_child(self) -> trio.Process:
        env = dict(os.environ)
        if self.condor_config:
            env["CONDOR_CONFIG"] = self.condor_config
        env.update(token_environment(self.token_dir))
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "common.condor.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._decoder = FrameDecoder()
        log.debug("gateway worker started", pid=process.pid)
        return process

    async def _discard_child(self, *, graceful: bool = False) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if graceful and process.stdin is not None:
            await process.stdin.aclose()  # EOF: the worker exits on its own
            with trio.move_on_after(2):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                await stream.aclose()

    async def _exchange(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._process is None or self._process.returncode is not None:
            if self._process is not None:
                self.restarts += 1
            self._process = await self._start_child()
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        try:
            await process.stdin.send_all(frame(pack(request)))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise EOFError from None
        while True:
            payload = self._decoder.next_frame()
            if payload is not None:
                response = unpack(payload)
                if isinstance(response, dict) and response.get("id") == request["id"]:
                    return response
                raise ProtocolViolation(request["op"], f"unexpected response {response!r:.200}")
            data = await process.stdout.receive_some(65536)
            if not data:
                raise EOFError
            self._decoder.feed(data)

    async def call(self, op: str, *, timeout: float | None = None, **args: Any) -> Any:
        """Run one worker operation; raises a GatewayError subclass on any failure."""
        timeout = self.timeout if timeout is None else timeout
        request = {"id": next(self._ids), "op": op, "args": args}
        async with self._lock:
            try:
                with trio.fail_after(timeout):
                    response = await self._exchange(request)
            except trio.TooSlowError:
                await self._discard_child()
                log.warning("gateway call timed out; worker killed", op=op, timeout=timeout)
                raise GatewayTimeout(op, f"no answer within {timeout:g} s (worker restarted)") from None
            except (EOFError, FrameTooLarge, ValueError, ProtocolViolation) as e:
                rc = self._process.returncode if self._process else None
                await self._discard_child()
                if isinstance(e, EOFError):
                    raise GatewayCrashed(
                        op, f"worker process died during the call (exit status {rc})"
                    ) from None
                raise ProtocolViolation(op, f"bad response from worker: {e}") from None
            except BaseException:
                # Cancelled from outside: the worker may still be busy with this request.
                with trio.CancelScope(shield=True):
                    await self._discard_child()
                raise
        if response.get("ok"):
            return response.get("result")
        error = response.get("error") or {}
        kind, message = str(error.get("kind", "Error")), str(error.get("message", ""))
        if kind == "DaemonNotFound":
            raise DaemonNotFound(op, kind, message)
        raise CondorError(op, kind, message)

    # ------------------------------------------------------------------ the API in project terms

    def _pool(self, collector: str | None) -> str | None:
        return collector or self.collector

    async def version(self) -> str:
        """The HTCondor version string of the bindings the worker loaded."""
        result = await self.call("version")
        return result["htcondor"]

    async def pool_load(self, collector: str | None = None, *, timeout: float | None = None) -> PoolLoad:
        """Slots of the pool, and the job counts of its own schedds (not of schedds flocking in)."""
        result = await self.call("pool_load", collector=self._pool(collector), timeout=timeout)
        return PoolLoad.model_validate(result)

    async def count_slots(
        self, requirements: str, job_attrs: Mapping[str, Any] | None = None, collector: str | None = None
    ) -> int:
        """How many slots satisfy a job's `requirements` (with its request_* as `job_attrs`, e.g.
        RequestMemory): what llic sizes its agents by (seed §3.7 step 4)."""
        return int(
            await self.call(
                "count_slots",
                requirements=requirements,
                job_attrs=dict(job_attrs or {}),
                collector=self._pool(collector),
            )
        )

    async def list_daemons(
        self, kind: DaemonKind, collector: str | None = None, *, home_only: bool = True
    ) -> list[DaemonRef]:
        """Daemons the collector knows. Schedds of other pools that flock here advertise to our
        collector too; `home_only` (the default) leaves them out."""
        result = await self.call(
            "list_daemons", kind=str(kind), collector=self._pool(collector), home_only=home_only
        )
        return [DaemonRef.model_validate(r) for r in result]

    async def list_schedds(self, collector: str | None = None, *, home_only: bool = True) -> list[DaemonRef]:
        """The schedds the collector knows; `home_only` as in list_daemons."""
        return await self.list_daemons(DaemonKind.SCHEDD, collector, home_only=home_only)

    async def get_config(self, daemon: DaemonRef, key: str, collector: str | None = None) -> str | None:
        """A configuration value as the running daemon sees it (None when not defined)."""
        return await self.call("get_config", daemon=_ref(daemon), key=key, collector=self._pool(collector))

    async def set_config(
        self,
        daemon: DaemonRef,
        values: Mapping[str, str | None] | CheckedConfig,
        *,
        scope: KnobScope = knobs.RUNTIME,
        reconfig: bool = True,
        collector: str | None = None,
    ) -> None:
        """Set runtime configuration (None removes a key's runtime value) and reconfig the daemon.

        The runtime sink of `common.condor.knobs`: `values` pass `knobs.check_config(scope, ...)`
        first (or come checked), so a knob outside the caller's allow-list, or a value outside its
        grammar, raises KnobRefused and never reaches the daemon. Needs ENABLE_RUNTIME_CONFIG and
        the keys in SETTABLE_ATTRS_CONFIG on that daemon.
        """
        checked = values if isinstance(values, CheckedConfig) else knobs.check_config(scope, values)
        await self.call(
            "set_config",
            daemon=_ref(daemon),
            values=checked.as_dict(),
            reconfig=reconfig,
            collector=self._pool(collector),
        )

    async def reconfig(self, daemon: DaemonRef, collector: str | None = None) -> None:
        """Send a daemon the reconfig command, so it rereads its configuration."""
        await self.call("reconfig", daemon=_ref(daemon), collector=self._pool(collector))

    async def ping(self, daemon: DaemonRef, authz: str, collector: str | None = None) -> AuthorizationCheck:
        """condor_ping: whether `daemon` authorizes this client (its identity: the token in
        token_dir, or what the client config makes of it) for `authz`, a level (READ, CONFIG,
        ADMINISTRATOR, ...) or a command (DC_RECONFIG_FULL, ...)."""
        result = await self.call("ping", daemon=_ref(daemon), authz=authz, collector=self._pool(collector))
        return AuthorizationCheck.model_validate(result)

    async def add_daemons(
        self, master: DaemonRef, names: Iterable[str], collector: str | None = None
    ) -> list[str]:
        """Add daemons (e.g. COLLECTOR, NEGOTIATOR) to a master's DAEMON_LIST and reconfig it."""
        return await self._edit_daemon_list(master, add=names, remove=(), collector=collector)

    async def remove_daemons(
        self, master: DaemonRef, names: Iterable[str], collector: str | None = None
    ) -> list[str]:
        """Take daemons off a master's DAEMON_LIST (never MASTER), reconfig it; returns the new list."""
        return await self._edit_daemon_list(master, add=(), remove=names, collector=collector)

    async def _edit_daemon_list(
        self, master: DaemonRef, *, add: Iterable[str], remove: Iterable[str], collector: str | None
    ) -> list[str]:
        if master.kind != DaemonKind.MASTER:
            raise ValueError(f"DAEMON_LIST belongs to a master, not a {master.kind}")
        current = await self.get_config(master, "DAEMON_LIST", collector) or "MASTER"
        daemons = [d.strip().upper() for d in current.replace(",", " ").split() if d.strip()]
        drop = {d.upper() for d in remove}
        if "MASTER" in drop:
            raise ValueError("MASTER cannot be removed from DAEMON_LIST")
        new = [d for d in daemons if d not in drop]
        new += [d.upper() for d in add if d.upper() not in new]
        if new != daemons:
            await self.set_config(
                master, {"DAEMON_LIST": ", ".join(new)}, scope=knobs.MASTER_DAEMON_LIST, collector=collector
            )
        return new

    async def submit(
        self,
        description: Mapping[str, str],
        *,
        count: int = 1,
        itemdata: Iterable[Mapping[str, str]] | None = None,
        schedd: DaemonRef | None = None,
        collector: str | None = None,
    ) -> SubmitResult:
        """Submit one cluster: `count` jobs, or `count` per item of `itemdata`."""
        result = await self.call(
            "submit",
            description=dict(description),
            count=count,
            itemdata=[dict(i) for i in itemdata] if itemdata is not None else None,
            schedd=_ref(schedd),
            collector=self._pool(collector),
        )
        return SubmitResult.model_validate(result)

    async def query_jobs(
        self,
        constraint: str = "true",
        projection: Iterable[str] = (),
        *,
        schedd: DaemonRef | None = None,
        collector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Jobs in a schedd's queue, as plain dicts of the projected attributes."""
        return await self.call(
            "query_jobs",
            constraint=constraint,
            projection=list(projection),
            schedd=_ref(schedd),
            collector=self._pool(collector),
        )

    async def job_history(
        self,
        constraint: str = "true",
        projection: Iterable[str] = (),
        *,
        match: int = -1,
        schedd: DaemonRef | None = None,
        collector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Jobs that left the queue (condor_history)."""
        return await self.call(
            "job_history",
            constraint=constraint,
            projection=list(projection),
            match=match,
            schedd=_ref(schedd),
            collector=self._pool(collector),
        )

    async def remove_jobs(
        self,
        jobs: str | Iterable[str],
        reason: str,
        *,
        schedd: DaemonRef | None = None,
        collector: str | None = None,
    ) -> int:
        """Remove jobs given as a constraint or as ids ('12', '12.3'); returns how many."""
        result = await self.call(
            "act",
            action="remove",
            constraint=_job_constraint(jobs),
            reason=reason,
            schedd=_ref(schedd),
            collector=self._pool(collector),
        )
        return int(result.get("TotalSuccess", 0))

    async def reschedule(self, *, schedd: DaemonRef | None = None, collector: str | None = None) -> None:
        """Ask a schedd to request a negotiation cycle now."""
        await self.call("reschedule", schedd=_ref(schedd), collector=self._pool(collector))

    async def advertise(self, ad: Mapping[str, Any], *, collector: str | None = None) -> None:
        """Put a generic ad (MyType and Name set by the caller) into the collector, or refresh
        it; `condor_status -any` lists it. The collector authorizes this at the DAEMON level."""
        await self.call("advertise", ad=dict(ad), collector=self._pool(collector))

    async def invalidate(self, my_type: str, name: str, *, collector: str | None = None) -> None:
        """Take the generic ad of this MyType and Name out of the collector."""
        await self.call("invalidate", my_type=my_type, name=name, collector=self._pool(collector))

    async def shut_out_schedds(
        self, hosts: Iterable[str], *, collector: str | None = None, timeout: float | None = None
    ) -> ShutOut:
        """Shut another pool's schedds (on `hosts`: names, addresses, or globs a policy granted)
        out of our pool: their schedd and submitter ads leave our collector and the claims they
        hold on our startds are vacated, slot by slot. Our own schedds are never touched (the
        worker checks `hosts` against the schedds at home in the collector). Needs
        ADVERTISE_SCHEDD at the collector and ADMINISTRATOR at the startds."""
        result = await self.call(
            "shut_out_schedds", hosts=list(hosts), collector=self._pool(collector), timeout=timeout
        )
        return ShutOut.model_validate(result)

    async def local_config(self, keys: Iterable[str]) -> dict[str, str | None]:
        """This machine's HTCondor configuration (the gateway's CONDOR_CONFIG, as
        condor_config_val reads it): each key's value, None where it is not defined."""
        return await self.call("local_config", keys=list(keys))

    async def edit_jobs(
        self,
        constraint: str,
        attrs: Mapping[str, Any],
        *,
        schedd: DaemonRef | None = None,
        collector: str | None = None,
    ) -> int:
        """Set attributes on the jobs matching `constraint` (condor_qedit); returns how many."""
        return int(
            await self.call(
                "edit_jobs",
                constraint=constraint,
                attrs=dict(attrs),
                schedd=_ref(schedd),
                collector=self._pool(collector),
            )
        )

    async def match_ads(self, constraint: str, ads: Iterable[Mapping[str, Any]]) -> list[bool]:
        """For each ad (plain values), whether the ClassAd expression `constraint` is true in it.
        A constraint that does not parse raises CondorError of kind ValueError."""
        return await self.call("match_ads", constraint=constraint, ads=[dict(a) for a in ads])

    # ------------------------------------------------------------------ tokens (HTCondor's tools)

    async def create_token(
        self, identity: str, authz: Iterable[str] = (), *, lifetime: int | None = None, key: str | None = None
    ) -> str:
        """A token signed by this machine's pool signing key (`key`: another key of
        SEC_PASSWORD_DIRECTORY): `identity` at the pool's daemons, bounded to `authz` (all the
        identity is granted when empty) and `lifetime` seconds. Needs read access to the key."""
        return await self.call(
            "create_token",
            tools=self.tools,
            identity=identity,
            authz=list(authz),
            lifetime=lifetime,
            key=key,
        )

    async def fetch_token(
        self,
        authz: Iterable[str],
        *,
        lifetime: int | None = None,
        daemon: DaemonRef | None = None,
        collector: str | None = None,
    ) -> str:
        """A token for this client's own identity (what it authenticated as: FS for a user on the
        submit host, or its token), from `daemon` (default: the local schedd) and signed with
        that daemon's pool key: `condor_token_fetch`, bounded to `authz` and `lifetime` seconds.
        For a job that must act as its owner where the owner's own way in (FS) does not reach."""
        return await self.call(
            "fetch_token",
            tools=self.tools,
            authz=list(authz),
            lifetime=lifetime,
            pool=self._pool(collector),
            name=daemon.name if daemon else None,
            daemon_type=daemon.kind.value.upper() if daemon else None,
        )

    async def request_token(
        self,
        identity: str,
        authz: Iterable[str],
        token_file: str | Path,
        *,
        lifetime: int | None = None,
        pool: str | None = None,
        name: str | None = None,
        daemon_type: str | None = None,
        timeout: float = 20.0,
        ssl_ca_file: str | Path | None = None,
        ssl_skip_host_check: bool = False,
        give_up_after: float = 3600.0,
    ) -> TokenRequest:
        """Ask a daemon (default: the collector of `pool`, or of the configured pool) for a token
        of `identity` bounded to `authz` and `lifetime`; returns once it is queued there, with
        the request id its administrator must approve (an id that reached them out of band).
        HTCondor's tool goes on waiting by itself and writes the token to `token_file` once the
        request is approved. A pool where we hold no token is asked over SSL, trusting the CA
        certificates in `ssl_ca_file` (`ssl_skip_host_check`: when the collector is named by an
        address its certificate does not carry; the pinned CA still authenticates it). The tool
        is stopped after `give_up_after` seconds, approved or not: nothing waits for it then."""
        result = await self.call(
            "request_token",
            timeout=timeout + 10,
            tools=self.tools,
            identity=identity,
            authz=list(authz),
            lifetime=lifetime,
            token_file=str(token_file),
            pool=pool,
            name=name,
            daemon_type=daemon_type,
            wait=timeout,
            ssl_ca_file=str(ssl_ca_file) if ssl_ca_file else None,
            ssl_skip_host_check=ssl_skip_host_check,
            give_up_after=give_up_after,
        )
        return TokenRequest(request_id=str(result["request_id"]), token_file=str(token_file))

    async def token_requests(
        self, *, pool: str | None = None, name: str | None = None, daemon_type: str | None = None
    ) -> list[dict[str, Any]]:
        """The token requests queued at a daemon (default: the collector): every one for an
        ADMINISTRATOR there, else only the caller's own; each the request's attributes."""
        return await self.call(
            "token_requests", tools=self.tools, pool=pool, name=name, daemon_type=daemon_type
        )

    async def approve_token_request(
        self,
        request_id: str,
        *,
        pool: str | None = None,
        name: str | None = None,
        daemon_type: str | None = None,
    ) -> None:
        """Approve one queued request (check its contents with token_requests first): needs
        ADMINISTRATOR at that daemon, or to be the identity requested."""
        await self.call(
            "approve_token_request",
            tools=self.tools,
            request_id=request_id,
            pool=pool,
            name=name,
            daemon_type=daemon_type,
        )

    async def list_tokens(self) -> list[TokenInfo]:
        """The tokens this client holds (its token directory), decoded."""
        result = await self.call("list_tokens", tools=self.tools)
        return [TokenInfo.from_listing(t) for t in result]
