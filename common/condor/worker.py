"""The gateway's child process: the only code in the suite that imports the HTCondor bindings.

htcondor2 calls hold Python's GIL while they wait on the network, so a daemon that called them
directly would freeze its whole event loop behind a hung collector. This process does the
blocking calls one at a time; the daemon talks to it over stdin/stdout with length-prefixed
msgpack frames (common.wire) and kills it when a call overruns.

Request: {"id": int, "op": str, "args": {...}}. Response: {"id": int, "ok": true, "result": ...}
or {"id": int, "ok": false, "error": {"kind": str, "message": str}}.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import classad2
import htcondor2 as htcondor

from common.classad_text import literal
from common.condor.knobs import check_knob_name, check_value_text
from common.condor.shut_out import SCHEDD_ATTRS, SLOT_ATTRS, SUBMITTER_ATTRS, plan_shut_out
from common.framing import FrameDecoder, frame, pack, unpack

MY_TYPES = {
    "master": "DaemonMaster",
    "collector": "Collector",
    "negotiator": "Negotiator",
    "schedd": "Scheduler",
    "startd": "Machine",
}
AD_TYPES = {
    "master": htcondor.AdType.Master,
    "collector": htcondor.AdType.Collector,
    "negotiator": htcondor.AdType.Negotiator,
    "schedd": htcondor.AdType.Schedd,
    "startd": htcondor.AdType.Startd,
}
JOB_ACTIONS = {
    "remove": htcondor.JobAction.Remove,
    "hold": htcondor.JobAction.Hold,
    "release": htcondor.JobAction.Release,
}


class NotFound(Exception):
    """Reported to the client as kind 'DaemonNotFound'."""


class ConfigRefused(Exception):
    """A daemon refused a runtime setting; the bindings' own message names neither key nor daemon."""


class ToolFailed(Exception):
    """One of HTCondor's command-line tools failed; the message carries its last line of stderr."""


def plain(value: Any) -> Any:
    """A ClassAd value as msgpack-able plain data; unevaluated expressions become their text."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, classad2.ClassAd):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, classad2.Value):  # Undefined, Error
        return None
    return str(value)


def collector_for(address: str | None) -> htcondor.Collector:
    """The collector at `address`, or the one the worker's HTCondor configuration names."""
    return htcondor.Collector(address) if address else htcondor.Collector()


def _endpoint(text: str) -> str:
    """'host[:port]' or a sinful string, normalized to 'host:port' (HTCondor's default port 9618)."""
    text = text.strip().strip("<>").split("?", 1)[0].lower()
    return text if ":" in text else f"{text}:9618"


def home_schedd_filter(coll: htcondor.Collector, address: str | None) -> Callable[[classad2.ClassAd], bool]:
    """Which schedd ads belong to this collector's own pool. A schedd that flocks to a pool also
    advertises to that pool's collector; its ad's CollectorHost (its own COLLECTOR_HOST) tells
    where it is at home. Ads without it are taken as local."""
    names = {_endpoint(address)} if address else set()
    for ad in coll.query(htcondor.AdType.Collector, projection=["Machine", "MyAddress", "Name"]):
        names |= {_endpoint(str(ad[k])) for k in ("Machine", "MyAddress", "Name") if ad.get(k)}

    def at_home(ad: classad2.ClassAd) -> bool:
        home = ad.get("CollectorHost")
        if not isinstance(home, str) or not home.strip():
            return True
        return any(_endpoint(h) in names for h in home.replace(",", " ").split())

    return at_home


def locate(ref: dict[str, Any], collector: str | None) -> classad2.ClassAd:
    """A location ad for a daemon: built from its address, or found in the collector."""
    kind = ref["kind"]
    if ref.get("address"):
        ad = classad2.ClassAd()
        ad["MyType"] = MY_TYPES[kind]
        ad["MyAddress"] = ref["address"]
        ad["Name"] = ref.get("name") or ref["address"]
        ad["Machine"] = ref.get("machine") or ""
        ad["CondorVersion"] = ""
        return ad
    name = ref.get("name")
    constraint = f'Name == "{name}"' if name else "true"
    ads = collector_for(collector).query(AD_TYPES[kind], constraint)
    if not ads:
        where = collector or "the configured collector"
        raise NotFound(f"no {kind} named {name!r} in {where}" if name else f"no {kind} in {where}")
    return ads[0]


def command_target(ad: classad2.ClassAd) -> classad2.ClassAd:
    """An ad that send_command accepts. htcondor2 maps MyType "Machine" (and "StartD") to ad types
    it cannot turn into a daemon type, so no startd could be reconfigured; the command only needs
    the address, so startds are addressed as generic daemons."""
    if ad.get("MyType") not in ("Machine", "StartD"):
        return ad
    generic = classad2.ClassAd()
    generic["MyType"] = "Generic"
    generic["MyAddress"] = ad["MyAddress"]
    generic["Name"] = ad.get("Name") or ad["MyAddress"]
    return generic


def schedd_for(ref: dict[str, Any] | None, collector: str | None) -> htcondor.Schedd:
    """The schedd a request names, or the first one the collector lists."""
    return htcondor.Schedd(locate(ref or {"kind": "schedd"}, collector))


# --------------------------------------------------------------------------- operations


def op_version() -> dict[str, Any]:
    """The bindings' HTCondor version, and this worker's pid."""
    return {"htcondor": htcondor.version(), "pid": os.getpid()}


def op_pool_load(collector: str | None) -> dict[str, Any]:
    """Slot counts (a partitionable slot counts once per CPU) and the own schedds' job counts."""
    coll = collector_for(collector)
    slots = coll.query(
        htcondor.AdType.Startd,
        projection=["Name", "State", "Activity", "Cpus", "TotalSlotCpus", "PartitionableSlot", "DynamicSlot"],
    )
    total = free = claimed = 0
    for ad in slots:
        state = ad.get("State")
        if ad.get("PartitionableSlot") is True:
            # A partitionable slot counts as one slot per CPU; its claimed CPUs show up as
            # dynamic slots of their own, so only its unclaimed CPUs are counted here.
            total += int(ad.get("TotalSlotCpus", ad.get("Cpus", 0)))
            free += int(ad.get("Cpus", 0))
            continue
        if ad.get("DynamicSlot") is not True:
            total += 1
        if state == "Claimed":
            claimed += 1
        elif state == "Unclaimed" and ad.get("DynamicSlot") is not True:
            free += 1
    schedds = []
    at_home = home_schedd_filter(coll, collector)
    for ad in coll.query(
        htcondor.AdType.Schedd,
        projection=[
            "Name",
            "MyAddress",
            "Machine",
            "TotalIdleJobs",
            "TotalRunningJobs",
            "TotalHeldJobs",
            "TotalFlockedJobs",
            "CollectorHost",
        ],
    ):
        if not at_home(ad):
            continue  # a schedd of another pool, flocking here
        schedds.append(
            {
                "name": ad.get("Name"),
                "address": ad.get("MyAddress"),
                "machine": ad.get("Machine"),
                "idle": int(ad.get("TotalIdleJobs", 0)),
                "running": int(ad.get("TotalRunningJobs", 0)),
                "held": int(ad.get("TotalHeldJobs", 0)),
                "flocked": int(ad.get("TotalFlockedJobs", 0)),
            }
        )
    return {"total_slots": total, "free_slots": free, "claimed_slots": claimed, "schedds": schedds}


def op_list_daemons(kind: str, collector: str | None, home_only: bool) -> list[dict[str, Any]]:
    """Daemons of one kind in the collector; with `home_only`, no schedds flocking in from elsewhere."""
    coll = collector_for(collector)
    ads = coll.query(AD_TYPES[kind], projection=["Name", "MyAddress", "Machine", "CollectorHost"])
    if kind == "schedd" and home_only:
        at_home = home_schedd_filter(coll, collector)
        ads = [ad for ad in ads if at_home(ad)]
    return [
        {"kind": kind, "name": ad.get("Name"), "address": ad.get("MyAddress"), "machine": ad.get("Machine")}
        for ad in ads
    ]


def op_get_config(daemon: dict[str, Any], key: str, collector: str | None) -> str | None:
    """One configuration value as the running daemon reports it (None when not defined)."""
    return htcondor.RemoteParam(locate(daemon, collector)).get(key)


def op_set_config(
    daemon: dict[str, Any], values: dict[str, str | None], reconfig: bool, collector: str | None
) -> None:
    """Set runtime configuration on a daemon (None removes a value), then reconfig it if asked.
    Whatever the caller checked, nothing that could break out of a value is sent (knobs'
    universal rules: a knob name, and printable ASCII without macro, assignment or comment
    characters)."""
    for key, value in values.items():
        try:
            check_knob_name(key)
            if value is not None:
                check_value_text(value)
        except ValueError as e:
            raise ConfigRefused(f"{key!r:.80} not set: {e}") from None
    ad = locate(daemon, collector)
    params = htcondor.RemoteParam(ad)
    for key, value in values.items():
        # An empty runtime value removes the runtime setting (condor_config_val -rset "KEY =").
        try:
            params[key] = "" if value is None else value
        except htcondor.HTCondorException as e:
            raise ConfigRefused(
                f"{ad.get('Name')} refused {key}: {e} (the daemon needs ENABLE_RUNTIME_CONFIG and "
                f"{key} in SETTABLE_ATTRS_CONFIG)"
            ) from None
    if reconfig:
        htcondor.send_command(command_target(ad), htcondor.DaemonCommand.Reconfig)


def op_reconfig(daemon: dict[str, Any], collector: str | None) -> None:
    """Send a daemon the Reconfig command."""
    htcondor.send_command(command_target(locate(daemon, collector)), htcondor.DaemonCommand.Reconfig)


def op_ping(daemon: dict[str, Any], authz: str, collector: str | None) -> dict[str, Any]:
    """condor_ping: what the daemon makes of this client for `authz` (a level such as CONFIG,
    or a command such as DC_RECONFIG_FULL). A refusal is an answer, not an error: htcondor2's ping
    raises both when authentication fails and when the command is not authorized (seen with 23.9:
    "Failed to start command"), so a refusal carries no identity."""
    ad = locate(daemon, collector)
    try:
        reply = htcondor.ping(ad, authz)
    except htcondor.HTCondorException as e:
        return {"authz": authz, "authorized": False, "error": str(e) or "authentication failed"}
    return {
        "authz": authz,
        "authorized": reply.get("AuthorizationSucceeded") is True,
        "identity": reply.get("MyRemoteUserName"),
        "method": reply.get("AuthMethods"),
        "encryption": str(reply.get("Encryption", "")).upper() == "YES",
        "integrity": str(reply.get("Integrity", "")).upper() == "YES",
    }


def op_submit(
    description: dict[str, str],
    count: int,
    itemdata: list[dict[str, str]] | None,
    schedd: dict[str, Any] | None,
    collector: str | None,
) -> dict[str, int]:
    """Submit one cluster to a schedd; returns its cluster id and proc range."""
    sub = htcondor.Submit(description)
    kwargs: dict[str, Any] = {"count": count}
    if itemdata is not None:
        kwargs["itemdata"] = iter(itemdata)
    result = schedd_for(schedd, collector).submit(sub, **kwargs)
    return {"cluster": result.cluster(), "first_proc": result.first_proc(), "num_procs": result.num_procs()}


def op_query_jobs(
    constraint: str, projection: list[str], schedd: dict[str, Any] | None, collector: str | None
) -> list[dict[str, Any]]:
    """A schedd's queued jobs matching a constraint, as plain dicts."""
    ads = schedd_for(schedd, collector).query(constraint=constraint, projection=projection)
    return [plain(ad) for ad in ads]


def op_job_history(
    constraint: str, projection: list[str], match: int, schedd: dict[str, Any] | None, collector: str | None
) -> list[dict[str, Any]]:
    """Jobs that left a schedd's queue (its history), as plain dicts."""
    ads = schedd_for(schedd, collector).history(constraint=constraint, projection=projection, match=match)
    return [plain(ad) for ad in ads]


def op_act(
    action: str, constraint: str, reason: str, schedd: dict[str, Any] | None, collector: str | None
) -> dict[str, Any]:
    """Remove, hold or release the jobs matching a constraint; returns the schedd's tallies."""
    # A plain string reason is silently ignored by htcondor2; a (text, code) tuple is honoured.
    result = schedd_for(schedd, collector).act(JOB_ACTIONS[action], constraint, (reason, 0))
    return plain(result) if result is not None else {}


def op_count_slots(requirements: str, job_attrs: dict[str, Any], collector: str | None) -> int:
    """Slots whose ad satisfies a job's requirements (with the job's request_* values). The
    expression is evaluated with the slot ad as scope, MY./TARGET. prefixes dropped: unqualified
    names then resolve as HTCondor resolves them, from the slot, or from the job's attributes."""
    expr = classad2.ExprTree(re.sub(r"\b(?:TARGET|MY)\.", "", requirements, flags=re.IGNORECASE))
    count = 0
    for ad in collector_for(collector).query(htcondor.AdType.Startd):
        if ad.get("DynamicSlot") is True:
            continue
        ad.update(job_attrs)
        try:
            ok = expr.eval(scope=ad)
        except Exception:
            ok = False
        if ok is True:
            count += int(ad.get("TotalSlotCpus", 1)) if ad.get("PartitionableSlot") is True else 1
    return count


def op_reschedule(schedd: dict[str, Any] | None, collector: str | None) -> None:
    """Ask a schedd to request a negotiation cycle now."""
    schedd_for(schedd, collector).reschedule()


def classad_of(attrs: dict[str, Any]) -> classad2.ClassAd:
    """A ClassAd from plain values (None: the attribute is left out, i.e. undefined)."""
    return classad2.ClassAd({k: v for k, v in attrs.items() if v is not None})


def op_advertise(ad: dict[str, Any], collector: str | None) -> None:
    """Put one generic ad (its MyType and Name set by the caller) into a collector:
    UPDATE_AD_GENERIC, which the collector authorizes at the DAEMON level."""
    collector_for(collector).advertise([classad_of(ad)], "UPDATE_AD_GENERIC")


def op_invalidate(my_type: str, name: str, collector: str | None) -> None:
    """Take a generic ad out of a collector (INVALIDATE_ADS_GENERIC, DAEMON level too)."""
    query = classad2.ClassAd({"MyType": "Query", "TargetType": my_type})
    query["Requirements"] = classad2.ExprTree(f"Name == {classad2.quote(name)}")
    collector_for(collector).advertise([query], "INVALIDATE_ADS_GENERIC")


def op_shut_out_schedds(hosts: list[str], collector: str | None) -> dict[str, Any]:
    """Shut another pool's schedds out of this pool (poold, when its policy revoked that pool):
    take their schedd ads (INVALIDATE_SCHEDD_ADS) and submitter ads (INVALIDATE_SUBMITTOR_ADS,
    both ADVERTISE_SCHEDD at the collector) out of the collector, then vacate, slot by slot
    (VACATE_CLAIM_FAST, ADMINISTRATOR at the startd), the claims they hold on our startds: a
    claim outlives FLOCK_FROM's change, the schedd would reuse it. The ads are invalidated
    first, so that the slots read afterwards include claims made until then. Our own schedds
    (those at home in the collector) are never touched: common.condor.shut_out."""
    coll = collector_for(collector)
    at_home = home_schedd_filter(coll, collector)
    schedds = [plain(ad) for ad in coll.query(htcondor.AdType.Schedd, projection=list(SCHEDD_ATTRS))]
    own = [ad for ad in schedds if at_home(ad)]
    foreign = [ad for ad in schedds if not at_home(ad)]
    submitters = [plain(ad) for ad in coll.query(htcondor.AdType.Submitter, projection=list(SUBMITTER_ATTRS))]
    plan = plan_shut_out(hosts, own, foreign, submitters, [])
    invalidated = 0
    for target, command, ads in (
        ("Scheduler", "INVALIDATE_SCHEDD_ADS", plan.schedd_ads),
        ("Submitter", "INVALIDATE_SUBMITTOR_ADS", plan.submitter_ads),
    ):
        if ads:
            invalidate_ads(coll, target, command, ads)
            invalidated += len(ads)
    slots, errors = current_slots(coll)
    plan = plan_shut_out(hosts, own, [], [], slots)
    vacated = []
    for slot in plan.slots:
        location = classad2.ClassAd({"MyAddress": slot["MyAddress"]})
        try:
            htcondor.Startd(location).vacateSlot(slot["Name"], htcondor.VacateType.Fast)
        except htcondor.HTCondorException as e:
            errors.append(f"{slot['Name']}: {e}")
            continue
        vacated.append(slot["Name"])
    return {
        "targets": plan.targets,
        "refused": plan.refused,
        "invalidated": invalidated,
        "vacated": vacated,
        "errors": errors,
    }


def current_slots(coll: htcondor.Collector) -> tuple[list[dict[str, Any]], list[str]]:
    """Every slot of the pool's startds with its claim as it is now: the collector's copy of a
    slot lags a new claim by up to the startd's next update (seen: a shut-out under load found
    no claim there while the revoked pool's jobs ran), so each startd is also asked directly
    (condor_status -direct, READ at the startd). Both views together, each slot once; a startd
    that does not answer is named in the errors and its collector copy stands (the core then
    notes the shut-out as not complete)."""
    claimed = "ClientMachine =!= undefined || RemoteScheddName =!= undefined"
    seen = [plain(ad) for ad in coll.query(htcondor.AdType.Startd, projection=list(SLOT_ATTRS))]
    slots = {ad.get("Name"): ad for ad in seen if ad.get("ClientMachine") or ad.get("RemoteScheddName")}
    errors = []
    for address in sorted({str(ad["MyAddress"]) for ad in seen if ad.get("MyAddress")}):
        try:
            direct = htcondor.Collector(address).query(htcondor.AdType.Startd, claimed, list(SLOT_ATTRS))
        except htcondor.HTCondorException as e:
            errors.append(f"startd {address} not asked directly: {e}")
            continue
        for ad in direct:
            slot = plain(ad)
            slot.setdefault("MyAddress", address)
            slots[slot.get("Name")] = slot  # a slot's name is unique in the pool (slotN@host)
    return list(slots.values()), errors


def invalidate_ads(
    coll: htcondor.Collector, target_type: str, command: str, ads: list[dict[str, str]]
) -> None:
    """Take exactly these ads out of a collector: one query ad whose Requirements match each
    ad's identifying attributes (no Name in the query ad itself, so the collector scans by the
    constraint instead of looking one ad up by its hash key)."""
    terms = [
        "(" + " && ".join(f"{attr} =?= {classad2.quote(value)}" for attr, value in ad.items()) + ")"
        for ad in ads
    ]
    query = classad2.ClassAd({"MyType": "Query", "TargetType": target_type})
    query["Requirements"] = classad2.ExprTree(" || ".join(terms))
    coll.advertise([query], command)


def op_local_config(keys: list[str]) -> dict[str, str | None]:
    """Values of this machine's HTCondor configuration (the worker's CONDOR_CONFIG), as
    condor_config_val prints them; None for a key that is not defined."""
    return {key: htcondor.param.get(key) for key in keys}


def op_edit_jobs(
    constraint: str, attrs: dict[str, Any], schedd: dict[str, Any] | None, collector: str | None
) -> int:
    """Set attributes of the jobs matching a constraint (condor_qedit); returns how many jobs."""
    target = schedd_for(schedd, collector)
    edited = 0
    for key, value in attrs.items():
        edited = max(edited, int(target.edit(constraint, key, literal(value))))
    return edited


def op_match_ads(constraint: str, ads: list[dict[str, Any]]) -> list[bool]:
    """Which ads a ClassAd expression holds for (true, not false or undefined): condor_q's
    -constraint, evaluated here so that only this process loads the bindings."""
    try:
        expr = classad2.ExprTree(constraint)
    except classad2.ClassAdException:
        raise ValueError(f"not a ClassAd expression: {constraint!r}") from None
    return [expr.eval(scope=classad_of(ad)) is True for ad in ads]


# --------------------------------------------------------------------------- tokens

# The bindings (htcondor2 25.x) have no token requests, approvals or token creation: their
# migration guide lists TokenRequest and Token as not implemented. These operations run HTCondor's
# own command-line tools, which come with the daemons, through `tools`: a command prefix ([] when
# the tools are on PATH; `deploy/sandbox tool POOL --` in the sandbox). The tools inherit this
# worker's environment: CONDOR_CONFIG, and the token directory it authenticates with.


def run_tool(tools: list[str], argv: list[str], *, stdin: str | None = None, timeout: float = 20.0) -> str:
    """Run one tool to its end; its stdout. ToolFailed (with its last line of stderr) on a non-zero
    exit or when it runs longer than `timeout`."""
    try:
        res = subprocess.run([*tools, *argv], input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{argv[0]} gave no answer within {timeout:g} s") from None
    except OSError as e:
        raise ToolFailed(f"{argv[0]}: cannot run {[*tools, argv[0]][0]}: {e.strerror}") from None
    if res.returncode != 0:
        lines = (res.stderr or res.stdout).strip().splitlines()
        raise ToolFailed(f"{argv[0]} exited {res.returncode}: {lines[-1] if lines else '(no message)'}")
    return res.stdout


def target_args(pool: str | None, name: str | None, daemon_type: str | None) -> list[str]:
    """The tools' -pool/-name/-type options (default: the configured collector)."""
    args = ["-pool", pool] if pool else []
    args += ["-name", name] if name else []
    return args + (["-type", daemon_type] if daemon_type else [])


def authz_args(identity: str | None, authz: list[str], lifetime: int | None) -> list[str]:
    """The token tools' -identity/-authz/-lifetime options."""
    args = ["-identity", identity] if identity else []
    args += [arg for level in authz for arg in ("-authz", level)]
    return args + (["-lifetime", str(lifetime)] if lifetime is not None else [])


def op_create_token(
    tools: list[str], identity: str, authz: list[str], lifetime: int | None, key: str | None
) -> str:
    """condor_token_create: a token signed with this machine's pool key (or the named key of
    SEC_PASSWORD_DIRECTORY): needs read access to the key, so root on a central manager."""
    argv = ["condor_token_create", *authz_args(identity, authz, lifetime)] + (["-key", key] if key else [])
    token = run_tool(tools, argv).strip()
    if token.count(".") != 2:
        raise ToolFailed("condor_token_create printed no token")
    return token


def op_fetch_token(
    tools: list[str],
    authz: list[str],
    lifetime: int | None,
    pool: str | None,
    name: str | None,
    daemon_type: str | None,
) -> str:
    """condor_token_fetch: a token for the identity this client authenticated as, signed by the
    daemon asked (default: the local schedd) with its pool key, bounded to `authz` and `lifetime`
    seconds (the daemon caps both at what the client's own session carries). Any authenticated
    client may ask, for itself only (DC_GET_SESSION_TOKEN)."""
    argv = ["condor_token_fetch", *authz_args(None, authz, lifetime), *target_args(pool, name, daemon_type)]
    token = run_tool(tools, argv).strip()
    if token.count(".") != 2 or any(c.isspace() for c in token):
        raise ToolFailed("condor_token_fetch printed no token")
    return token


def op_request_token(
    tools: list[str],
    identity: str,
    authz: list[str],
    lifetime: int | None,
    token_file: str,
    pool: str | None,
    name: str | None,
    daemon_type: str | None,
    wait: float,
    ssl_ca_file: str | None = None,
    ssl_skip_host_check: bool = False,
    give_up_after: float | None = None,
) -> dict[str, Any]:
    """condor_token_request: ask a daemon (by default a collector, of another pool too) for a
    token; returns the request id once the daemon queued it. The tool keeps running on its own
    (no pipe to this worker: it must outlive a restart), polls until an administrator there
    approves, and then writes the token to `token_file` (`token_file`.log holds its errors).
    With `give_up_after`, coreutils' timeout stops it (and whatever `tools` started, its
    process group) after that many seconds: left alone, it waits up to an hour for approval.

    A client of another pool holds no token there: the request goes over SSL without a client
    certificate (HTCondor refuses requests made without encryption or with ANONYMOUS), trusting
    the CA certificates in `ssl_ca_file` (that pool's collector CA). The tool prints the request
    id on stdout, which the C library buffers unless it is a terminal: stdout is a pty here."""
    log_path = f"{token_file}.log"
    argv = ["condor_token_request", *authz_args(identity, authz, lifetime), "-file", token_file]
    argv += target_args(pool, name, daemon_type)
    env = dict(os.environ)
    knobs = {"SEC_CLIENT_AUTHENTICATION_METHODS": "SSL"}
    if ssl_ca_file:
        knobs["AUTH_SSL_CLIENT_CAFILE"] = ssl_ca_file
    if ssl_skip_host_check:
        knobs["SSL_SKIP_HOST_CHECK"] = "true"
    for knob, value in knobs.items():
        env[f"_CONDOR_{knob}"] = env[f"_CONDOR_TOOL.{knob}"] = value
    bounded = ["timeout", "--kill-after=10", f"{give_up_after:g}"] if give_up_after else []
    master, slave = os.openpty()
    try:
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(
                [*bounded, *tools, *argv],
                stdin=subprocess.DEVNULL,
                stdout=slave,
                stderr=log_file,
                start_new_session=True,
                env=env,
            )
        os.close(slave)
        slave = -1
        text = ""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    text += os.read(master, 4096).decode(errors="replace")
                except OSError:  # the tool closed its end (it exited)
                    ready = []
            if match := re.search(r"approve request ([0-9]+)", text):
                return {"request_id": match[1], "pid": proc.pid}
            if not ready and proc.poll() is not None:
                with open(log_path) as log_file:
                    lines = (log_file.read() + text).strip().splitlines()
                raise ToolFailed(
                    f"condor_token_request exited {proc.returncode}: {lines[-1] if lines else '(no message)'}"
                )
        raise ToolFailed(f"condor_token_request queued no request within {wait:g} s (still running)")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def op_token_requests(
    tools: list[str], pool: str | None, name: str | None, daemon_type: str | None
) -> list[dict[str, Any]]:
    """condor_token_request_list -json: the requests queued at a daemon (all of them for an
    ADMINISTRATOR there, else the caller's own), each a dict of the request's ClassAd."""
    argv = ["condor_token_request_list", "-json", *target_args(pool, name, daemon_type)]
    try:
        out = run_tool(tools, argv)
    except ToolFailed as e:
        if "no requests pending" in str(e):
            return []
        raise
    return parse_json_documents(out)


def parse_json_documents(text: str) -> list[dict[str, Any]]:
    """The ads of a tool's -json output: one JSON list spread over many lines (what 23.9's
    condor_token_request_list prints), or several documents one after the other; a list's items
    count one by one."""
    decoder, items, at = json.JSONDecoder(), [], 0
    text = text.replace("\x1e", " ")
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return items
        parsed, at = decoder.raw_decode(text, at)
        items += parsed if isinstance(parsed, list) else [parsed]


def op_approve_token_request(
    tools: list[str], request_id: str, pool: str | None, name: str | None, daemon_type: str | None
) -> None:
    """condor_token_request_approve -reqid: approve one request (ADMINISTRATOR at that daemon, or
    the identity requested). The tool shows the request and asks; the caller has checked it."""
    argv = ["condor_token_request_approve", "-reqid", request_id, *target_args(pool, name, daemon_type)]
    out = run_tool(tools, argv, stdin="yes\n")
    if "approved successfully" not in out:
        raise ToolFailed(f"condor_token_request_approve did not approve request {request_id}")


def op_list_tokens(tools: list[str]) -> list[dict[str, Any]]:
    """condor_token_list: the tokens in the client's token directory, header and payload decoded
    (identity `sub`, issuer `iss`, `jti`, `exp`, `scope`) and the file each is in."""
    tokens = []
    for line in run_tool(tools, ["condor_token_list"]).splitlines():
        match = re.match(r"Header: (\{.*?\}) Payload: (\{.*\}) File: (.*)$", line.strip())
        if match:
            tokens.append({"header": json.loads(match[1]), "payload": json.loads(match[2]), "file": match[3]})
    return tokens


OPS: dict[str, Callable[..., Any]] = {
    "version": op_version,
    "pool_load": op_pool_load,
    "list_daemons": op_list_daemons,
    "get_config": op_get_config,
    "set_config": op_set_config,
    "reconfig": op_reconfig,
    "ping": op_ping,
    "submit": op_submit,
    "query_jobs": op_query_jobs,
    "job_history": op_job_history,
    "act": op_act,
    "reschedule": op_reschedule,
    "count_slots": op_count_slots,
    "advertise": op_advertise,
    "invalidate": op_invalidate,
    "local_config": op_local_config,
    "shut_out_schedds": op_shut_out_schedds,
    "edit_jobs": op_edit_jobs,
    "match_ads": op_match_ads,
    "create_token": op_create_token,
    "fetch_token": op_fetch_token,
    "request_token": op_request_token,
    "token_requests": op_token_requests,
    "approve_token_request": op_approve_token_request,
    "list_tokens": op_list_tokens,
}


def handle(request: Any) -> dict[str, Any]:
    """The response to one request; every failure becomes an error response, never an exception."""
    if not isinstance(request, dict) or not isinstance(request.get("args"), dict):
        return {"id": None, "ok": False, "error": {"kind": "BadRequest", "message": "malformed request"}}
    req_id, op = request.get("id"), request.get("op")
    fn = OPS.get(op) if isinstance(op, str) else None
    if fn is None:
        return {"id": req_id, "ok": False, "error": {"kind": "BadRequest", "message": f"unknown op {op!r}"}}
    try:
        return {"id": req_id, "ok": True, "result": fn(**request["args"])}
    except NotFound as e:
        return {"id": req_id, "ok": False, "error": {"kind": "DaemonNotFound", "message": str(e)}}
    except Exception as e:  # every failure goes back to the caller, typed by its class name
        return {"id": req_id, "ok": False, "error": {"kind": type(e).__name__, "message": str(e)}}


def main() -> int:
    """Answer framed requests from stdin until EOF; the bindings' own prints go to stderr."""
    # Responses go to a private copy of stdout; anything the bindings print lands on stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    decoder = FrameDecoder()
    while True:
        data = os.read(0, 65536)
        if not data:
            return 0
        decoder.feed(data)
        while (payload := decoder.next_frame()) is not None:
            try:
                request = unpack(payload)
            except Exception as e:
                response = {"id": None, "ok": False, "error": {"kind": "BadRequest", "message": str(e)}}
            else:
                response = handle(request)
            data = frame(pack(response))
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]


if __name__ == "__main__":
    sys.exit(main())
