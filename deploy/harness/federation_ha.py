"""A federation of pools that fail over (issue 16): for tests/poolD/test_federation_failover_condor.py
and bench/federation-failover.

Each pool is a FaultPool (several hosts, faultd on every one, host 0 the original central manager)
and every host, a manager candidate, runs a poold behind the active/standby gate: `[daemon]
faultd_socket` names its host's faultd, `[pool] collector` its host's own collector, `[daemon]
state_file` the file its faultd replicates (`[condor] poold_state`). Each candidate is its own
overlay node, its certificate bound to the pool and its own host (docs/architecture.md). The
pools run the sandbox's default security (HTCondor's recommended one) and their poolds `[trust]`
(Federation.trust_section), so the grants between the pools are negotiated by poold, before and
after each failover.

What an administrator of such a pool does once, and this harness does for the sandbox:
- the pool's collector CA on every candidate (`share_collector_ca`): a collector that starts on a
  replacement signs its host certificate with the pool's CA, which the other pools pinned
  (`[trust] peer_ca_file`); without it a token request to the new collector fails its SSL check.
- the schedds' token directory: every candidate's poold installs the tokens of the pool's
  schedds in the submit host's SEC_TOKEN_SYSTEM_DIRECTORY (`submit_host`), and its negotiator's
  tokens in its own host's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from common.service import query_control
from deploy.harness.fault_pool import FaultPool
from deploy.harness.federation import Federation
from deploy.harness.sandbox import Sandbox, poll_until, start_in_netns, stop_processes


class HAFederation(Federation):
    """Pools `names` of `hosts` hosts each, faultd on every host, a gated poold on every host."""

    def __init__(
        self,
        sandbox: Sandbox,
        workdir: Path,
        names: list[str],
        *,
        hosts: int = 3,
        slots: int = 2,
        submit_host: int = 1,
    ) -> None:
        self.submit_host = submit_host
        self.nhosts = hosts
        self.fault: dict[str, FaultPool] = {}
        for name in names:
            (workdir / name).mkdir(exist_ok=True)
            fp = FaultPool(sandbox, workdir / name, name, hosts=hosts, slots=slots)
            fp.poold_state = lambda j, name=name: self.state_file(name, j)
            self.fault[name] = fp
        super().__init__(sandbox, workdir, names, pools={n: fp.pool for n, fp in self.fault.items()})
        self.candidates: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        for name in names:
            for j in range(hosts):
                for token in self.flock_token_paths(name, j):
                    token.unlink()  # left by an earlier run on a pool kept up
                self.state_file(name, j).unlink(missing_ok=True)

    # ------------------------------------------------------------------ layout

    def node_name(self, name: str, j: int) -> str:
        return f"{name}-{j}"

    def host_address(self, name: str, j: int) -> str:
        return self.fault[name].address(j)

    def collector_of(self, name: str, j: int) -> str:
        return self.fault[name].collector(j)

    def state_file(self, name: str, j: int) -> Path:
        return self.workdir / name / f"poold-{j}.state.json"

    def candidate_socket(self, name: str, j: int) -> Path:
        return self.workdir / name / f"poold-{j}.sock"

    def candidate_log(self, name: str, j: int) -> Path:
        return self.workdir / name / f"poold-{j}.log"

    def candidate_config(self, name: str, j: int) -> Path:
        """poold's config on host j of the pool. Every candidate names the same seeds: each
        pool's original manager and its first standby, so that a candidate restarting while
        some are down (a manager killed, its machine back later) still gets in."""
        fp = self.fault[name]
        seeds = [self.host_address(n, k) for n in self.names for k in range(min(2, self.nhosts))]
        bootstrap = self.bootstrap_line(seeds)
        node = self.node_name(name, j)
        self.keys.node(node, hosts=[self.host_address(name, j)], pool=name)
        trust = self.trust_section(name, host=j, schedd_host=self.submit_host) if self.trusting(name) else ""
        daemon = (
            f'control_socket = "{self.candidate_socket(name, j)}"\n'
            f'faultd_socket = "{fp.socket(j)}"\n'
            f'state_file = "{self.state_file(name, j)}"'
        )
        return self.write_poold_config(
            self.workdir / name / f"poold-{j}.toml", name, node=node, bind=self.host_address(name, j),
            collector=self.collector_of(name, j), bootstrap=bootstrap, sections=trust, daemon=daemon,
        )  # fmt: skip

    # ------------------------------------------------------------------ processes

    def share_collector_ca(self, name: str) -> None:
        """The pool's collector CA (made by host 0's collector at its first start) on every other
        host, owned and moded as there, before any of them runs a collector."""
        fp = self.fault[name]
        ssl0 = fp.local_dir(0) / "ssl"
        fp.wait("the collector made the pool's CA", lambda: (ssl0 / "ca.key").exists())
        for j in range(1, self.nhosts):
            ssl = fp.local_dir(j) / "ssl"
            ssl.mkdir(exist_ok=True)
            for f in ("ca.pem", "ca.key"):
                src, dst = ssl0 / f, ssl / f
                shutil.copy2(src, dst)
                st = src.stat()
                os.chown(dst, st.st_uid, st.st_gid)

    def start_candidate(self, name: str, j: int) -> None:
        """poold on host j of the pool (unjailed, as Federation.start says why)."""
        netns = str(self.fault[name].host(j)["netns"])
        config = self.candidate_config(name, j)
        self.candidates[name, j] = start_in_netns(
            netns, "poolD", config, self.candidate_log(name, j), jail=False
        )

    def start_all(self) -> None:
        """faultd on every host of every pool, the CA shared, then poold on every host; returns
        once every poold joined the ring and each pool's host 0 poold is active."""
        for name in self.names:
            self.fault[name].start_all()
            if self.trusting(name):
                self.share_collector_ca(name)
        for name in self.names:
            for j in range(self.nhosts):
                self.start_candidate(name, j)
        self.wait(
            "every poold joined",
            lambda: all(self.candidate_status(n, j)["joined"] for n, j in self.candidates),
        )
        for name in self.names:
            self.wait(f"{name}'s original manager's poold active", lambda n=name: self.active(n) == [0])

    def kill_manager(self, name: str, j: int) -> float:
        """kill -9 of everything on host j (HTCondor daemons, faultd, poold); returns the time."""
        t = self.fault[name].kill_host(j)
        proc = self.candidates.pop((name, j), None)
        if proc is not None:
            proc.kill()  # ip netns exec's child was killed with the namespace's processes
            proc.wait()
        return t

    def restart_host(self, name: str, j: int) -> None:
        """The machine comes back: HTCondor, faultd, then poold."""
        self.fault[name].restart_host(j)
        self.start_candidate(name, j)

    def stop_all(self) -> None:
        """SIGTERM every poold, then every faultd; failures reported once all were stopped."""
        procs = {
            f"poold of {n} host {j} (log {self.candidate_log(n, j)})": p
            for (n, j), p in self.candidates.items()
        }
        self.candidates.clear()
        try:
            stop_processes(procs, timeout=30)
        finally:
            for fp in self.fault.values():
                fp.stop_all()

    # ------------------------------------------------------------------ observation

    def candidate_status(self, name: str, j: int) -> dict[str, Any]:
        return query_control(self.candidate_socket(name, j), {"cmd": "status"}, timeout=3)

    def active(self, name: str) -> list[int]:
        """The hosts whose poold is active for the pool now (those that answer)."""
        out = []
        for n, j in list(self.candidates):
            if n != name:
                continue
            try:
                role = self.candidate_status(n, j)["manager_role"]
            except OSError:
                continue
            if role and role["mode"] == "active":
                out.append(j)
        return out

    def wait_replicated(self, name: str, j: int, flock_to: list[str], timeout: float = 60.0) -> None:
        """Until every other candidate's faultd holds, as its replica, a state file that poold on
        host j (active) wrote naming `flock_to` as its FLOCK_TO: a failover from then on resumes
        with it. Read from the daemons' status (poold's "state_file", faultd's replica digests),
        what an operator can check too; a state newer still (it changes when offers come) counts
        only if poold's status showed it naming `flock_to`."""
        written: set[str] = set()

        def held() -> bool:
            state = self.candidate_status(name, j).get("state_file")
            if state and state["flock_to"] == flock_to:
                written.add(state["sha256"])
            statuses = self.fault[name].statuses()
            replicas = [
                ((s.get("replica") or {}).get("sha256") or {}).get("poold")
                for k, s in statuses.items()
                if k != j
            ]
            return len(replicas) == self.nhosts - 1 and all(r in written for r in replicas)

        self.wait(f"{name}'s replicas hold poold's state with FLOCK_TO {flock_to}", held, timeout, poll=0.2)

    def manager(self, name: str) -> int | None:
        """The host that holds the pool's manager role, if exactly one does."""
        managers = self.fault[name].managers()
        return managers[0] if len(managers) == 1 else None

    def flock_to(self, name: str) -> str:
        """FLOCK_TO as the pool's submit host's schedd sees it ('' if none)."""
        pool = self.pools[name]
        value = pool.exec("condor_config_val", "-schedd", "FLOCK_TO", host=self.submit_host).stdout.strip()
        return "" if value.startswith("Not defined") else value

    def logs(self) -> list[Path]:
        out = [self.candidate_log(n, j) for n in self.names for j in range(self.nhosts)]
        for fp in self.fault.values():
            out += [fp.log_file(j) for j in range(self.nhosts)]
        return out

    def wait(self, what: str, predicate: Any, timeout: float = 90.0, poll: float = 0.5) -> Any:
        """Poll until predicate() is truthy; on timeout, fail with the poolds' and faultds' logs."""
        return poll_until(what, predicate, timeout=timeout, poll=poll, logs=self.logs())

    def since(self, t: float) -> float:
        return round(time.time() - t, 3)
