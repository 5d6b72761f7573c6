"""A federation of sandbox pools with poold on each central manager: for tests and `make demo`.

Each poold runs on its pool's central-manager host (inside that host's network namespace, as a
program of this machine), joins the ring through the seeds (the first two pools' poolds, the
same list in every pool's config, as docs/admin.md advises), and talks to its pool through
the gateway with the pool's client config. Intervals are seconds, not minutes, so that a demo
shows a whole cycle quickly.

Pools in HTCondor's recommended security (each its own signing key and TRUST_DOMAIN), two or more,
get poold's `[trust]` section (trust_section): poold negotiates the tokens that let jobs flock between them
by itself (docs/security-htcondor.md, "Cross-pool trust"); no token between pools is made here.
What the pool's HTCondor side needs for it, deploy/sandbox already writes in every recommended
pool: the shipped 60-poold-pool.conf (SSL for token requests at the collector, the request limits,
the negotiator identities at the schedds) and, per host, the collector's own CA and host
certificate and SEC_TOKEN_SYSTEM_DIRECTORY. Open pools get no `[trust]`: there host-based
FLOCK_FROM is all a pool needs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from common.service import query_control
from deploy.harness.ring_keys import RingKeys
from deploy.harness.sandbox import (
    Sandbox,
    SandboxPool,
    poll_until,
    start_in_netns,
    stop_process,
    stop_processes,
)

T = TypeVar("T")

POOLD_PORT = 7640  # every poold's overlay port (each pool's hosts have their own addresses)

FAST_SETTINGS = """
[ring.overlay]
keepalive_interval = 1.0
leaf_timeout = 4.0
probe_timeout = 1.0
table_probe_interval = 5.0
row_maintenance_interval = 5.0
leaf_exchange_interval = 5.0
join_retry = 1.0

[discovery]
interval = 2.0
valid_for = 15.0

[flocking]
interval = 2.0
withdraw_after = 10.0
max_pools = 3
"""


class Federation:
    def __init__(
        self,
        sandbox: Sandbox,
        workdir: Path,
        names: list[str],
        *,
        slots: int = 3,
        security: str | None = None,
        pools: dict[str, SandboxPool] | None = None,
    ) -> None:
        """poold on pools `names` (`security`: their mode, default the sandbox's; in recommended
        pools poold negotiates the cross-pool trust flocking needs, see trust_section); `pools`:
        pools already up (of several hosts, say), instead of one-host pools started here."""
        self.workdir = workdir
        self.names = names
        self.keys = RingKeys(workdir / "poold-keys", ring="poold")
        self.key = self.keys.key_file
        self.pools: dict[str, SandboxPool] = pools or {
            name: sandbox.up(name, slots=slots, security=security) for name in names
        }
        self.policies: dict[str, str] = {}
        self.flocking: dict[str, str] = {}  # pool -> extra [flocking] lines for its poold
        self.sections: dict[str, str] = {}  # pool -> extra sections (e.g. [trust]) for its poold
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for name in names:
            for token in self.flock_token_paths(name):
                # Left by an earlier run on a pool kept up: every flocking token must come from
                # the poolds started here.
                token.unlink()

    def trusting(self, name: str) -> bool:
        """Whether the pool's poold negotiates cross-pool trust: in recommended security, with
        other pools to flock with (a federation of one keeps poold under its unit jail)."""
        return self.pools[name].security == "recommended" and len(self.names) > 1

    def token_dir(self, name: str, host: int = 0) -> Path:
        """The token directory of a host's daemons (host 0: the central manager's schedd and
        negotiator): its SEC_TOKEN_SYSTEM_DIRECTORY, owned by the daemons' user, mode 0700
        (deploy/sandbox). poold installs the tokens it negotiated there, owned like the directory."""
        return self.pools[name].local_dir(host) / "tokens.d"

    def flock_token_paths(self, name: str, host: int = 0) -> list[Path]:
        return sorted(self.token_dir(name, host).glob("flock-*"))

    def flock_tokens(self, name: str, host: int = 0) -> list[str]:
        """The tokens poold installed for the pool's daemons: `flock-schedd-<pool>` (our schedds
        at a pool we flock to), `flock-negotiator-<pool>` (that pool's negotiator at our schedds)."""
        return [p.name for p in self.flock_token_paths(name, host)]

    def collector_ca(self, name: str) -> Path:
        """The CA certificate the pool's collector made itself at start-up (TRUST_DOMAIN_CAFILE,
        COLLECTOR_BOOTSTRAP_SSL_CERTIFICATE): what its administrator hands the pools it flocks with."""
        return self.pools[name].local_dir(0) / "ssl" / "ca.pem"

    def peer_ca_file(self, name: str) -> Path:
        """Every other pool's collector CA in one file: the peer CA exchange, done here as an
        administrator would (by hand, once per peer), before any poold starts."""
        peers = [self.collector_ca(n) for n in self.names if n != name]
        self.wait("the peer collectors made their CA", lambda: all(p.exists() for p in peers))
        path = self.workdir / f"{name}-peer-collectors-ca.pem"
        path.write_text("".join(p.read_text() for p in peers))
        return path

    def trust_section(self, name: str, *, host: int = 0, schedd_host: int = 0) -> str:
        """poold's `[trust]` for a recommended pool, for a poold on `host` (its negotiator's
        tokens, its tools) whose pool submits at `schedd_host` (its schedds' tokens).

        - request_dir: in the workdir, under /tmp, which the sandbox root shares, so HTCondor's
          tool (run inside the root) writes the token it receives where poold reads it.
        - schedd_token_dir, negotiator_token_dir: the SEC_TOKEN_SYSTEM_DIRECTORY of the submit
          host and of poold's own host (both host 0, the central manager, by default), where the
          schedd and the negotiator read their tokens.
        - peer_ca_file: the other pools' collector CAs only (no system bundle), so a token request
          trusts nothing else.
        - ssl_skip_host_check: the peers' collectors are named by address (FLOCK_TO and the
          FlockReply carry `10.213.x.y:9618`), and the host certificate a collector makes itself
          names only its host name (seen: subject and subjectAltName `DNS:cm.<pool>.sandbox`, no
          IP entry): checking the host would refuse every peer. The pinned CA file still
          authenticates each collector as its pool's.
        - tools: HTCondor's token tools come from the sandbox root, run on the central manager's
          network with its config (`deploy/sandbox tool`)."""
        tools = ", ".join(f'"{part}"' for part in self.pools[name].tools(host))
        return f"""
[trust]
trust_domain = "{self.pools[name].trust_domain}"
token_lifetime = 600
request_dir = "{self.workdir / f"{name}-token-requests"}"
schedd_token_dir = "{self.token_dir(name, schedd_host)}"
negotiator_token_dir = "{self.token_dir(name, host)}"
peer_ca_file = "{self.peer_ca_file(name)}"
ssl_skip_host_check = true
tools = [{tools}]
"""

    def address(self, name: str) -> str:
        return str(self.pools[name].hosts[0]["address"])

    def socket(self, name: str) -> Path:
        return self.workdir / f"{name}.sock"

    def log_file(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def config_file(self, name: str) -> Path:
        pool = self.pools[name]
        bootstrap = self.bootstrap_line([self.address(n) for n in self.names[:2]])
        policy = ""
        if name in self.policies:
            policy_path = self.workdir / f"{name}-policy.toml"
            policy_path.write_text(self.policies[name])
            policy = f'policy_file = "{policy_path}"'
        hosts = sorted({self.address(name), pool.collector.rpartition(":")[0]})
        self.keys.node(name, hosts=hosts, pool=name)
        extra = self.sections.get(name, "")
        trust = self.trust_section(name) if self.trusting(name) and "[trust]" not in extra else ""
        daemon = f'control_socket = "{self.socket(name)}"\n{policy}'
        return self.write_poold_config(
            self.workdir / f"{name}.toml", name, node=name, bind=self.address(name), collector=pool.collector,
            bootstrap=bootstrap, sections=f"{extra}\n{trust}", daemon=daemon,
        )  # fmt: skip

    @staticmethod
    def bootstrap_line(seeds: list[str]) -> str:
        """`[ring] bootstrap`: the poolds at the addresses `seeds`, the same list for every poold
        (a poold among them is a seed: the first one up founds the ring)."""
        listed = ", ".join(f'"{address}:{POOLD_PORT}"' for address in seeds)
        return f"bootstrap = [{listed}]"

    def write_poold_config(
        self, path: Path, name: str, *, node: str, bind: str, collector: str, bootstrap: str, sections: str,
        daemon: str,
    ) -> Path:  # fmt: skip
        """One poold config of pool `name` at `path`: overlay node `node` on `bind`, its pool's
        `collector`, `bootstrap` (a `bootstrap = ...` line or ""), extra `sections` (trust,
        others) and the `[daemon]` table's lines."""
        pool = self.pools[name]
        token_dir = pool.token_dir("poold")
        path.write_text(f"""
[pool]
name = "{name}"
collector = "{collector}"
condor_config = "{pool.client_config}"
{f'token_dir = "{token_dir}"' if token_dir else ""}

[ring]
node_name = "{node}"
bind = "{bind}"
port = {POOLD_PORT}
{bootstrap}
{self.keys.toml(node)}
{FAST_SETTINGS}{self.flocking.get(name, "")}
{sections}
[daemon]
{daemon}
""")
        return path

    def start(self, name: str) -> None:
        """Start the pool's poold. Under its unit's jail, except where it negotiates trust: in the
        sandbox its token tools run through `deploy/sandbox tool` (a network namespace and a
        chroot: privileges the unit rightly takes away), and it installs tokens for daemons that
        run as another user (condor-sandbox; poold runs as root here, as `condor` in its unit,
        whose ReadWritePaths tests/common/test_systemd_units.py checks)."""
        netns = self.pools[name].hosts[0]["netns"]
        self.procs[name] = start_in_netns(
            netns, "poolD", self.config_file(name), self.log_file(name), jail=not self.trusting(name)
        )

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)
        self.wait("every poold joined", lambda: all(self.status(n)["joined"] for n in self.names))

    def stop(self, name: str) -> None:
        """SIGTERM one poold and wait for it: it withdraws the FLOCK_TO it set on the way out. A stop
        that hangs (killed after 30 s) or exits with an error raises GracefulStopFailed."""
        stop_process(self.procs.pop(name), timeout=30, name=self._describe(name))

    def stop_all(self) -> None:
        """Stop every poold still running; failures are reported once all were stopped."""
        procs = {self._describe(name): proc for name, proc in self.procs.items()}
        self.procs.clear()
        stop_processes(procs, timeout=30)

    def _describe(self, name: str) -> str:
        return f"poold of {name} (log {self.log_file(name)})"

    def status(self, name: str) -> dict[str, Any]:
        return query_control(self.socket(name), {"cmd": "status"})

    def wait(self, what: str, predicate: Callable[[], T], timeout: float = 90.0) -> T:
        """Poll until predicate() is truthy; on timeout, fail with the poolds' recent logs."""
        logs = [self.log_file(n) for n in self.names]
        return poll_until(what, predicate, timeout=timeout, logs=logs)

    def flock_to(self, name: str) -> str:
        """FLOCK_TO as the pool's schedd sees it, read with condor_config_val ('' if none). A
        query that fails raises SandboxError: it must not read as 'no FLOCK_TO'."""
        value = self.pools[name].exec("condor_config_val", "-schedd", "FLOCK_TO").stdout.strip()
        return "" if value.startswith("Not defined") else value
