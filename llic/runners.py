"""Where a master's agents run: `AgentRunner`, and its two kinds.

`GatewayAgents` submits agents as HTCondor jobs to the schedd the master runs next to, through
`common.condor.Gateway` (the only road to HTCondor); `LocalAgents` runs them as processes on this
machine, in scratch directories filled the way HTCondor would fill them, for tests and the
dispatch benchmark. The master's driver (llic/master.py) uses only the `AgentRunner` methods.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import trio

from common.condor import DaemonKind, DaemonRef, Gateway, GatewayError
from llic.agent_job import AGENT_PYTHON, CONDOR_STDOUT, MASTER_ATTR
from llic.plan import Plan
from llic.submit_target import agent_ip, usable_ip  # noqa: F401 (re-exported)


def request_attributes(attributes: dict[str, str]) -> dict[str, float]:
    """request_memory = 256 as the job ad has it (RequestMemory = 256), for evaluating the
    requirements against slots; values that are not plain numbers are left out."""
    out: dict[str, float] = {}
    for key, value in attributes.items():
        if key.lower().startswith("request_"):
            name = "Request" + "".join(part.capitalize() for part in key[len("request_") :].split("_"))
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


async def matching_slots(gw: Gateway, attributes: dict[str, str]) -> int:
    """The pool's slots an agent job with these attributes (the block's requirements and
    request_*) could run on; every slot of the pool when there are no requirements."""
    requirements = next((v for k, v in attributes.items() if k.lower() == "requirements"), None)
    if not requirements:
        return (await gw.pool_load()).total_slots
    return await gw.count_slots(requirements, request_attributes(attributes))


class AgentRunner(Protocol):
    """How the master gets agents run: HTCondor (GatewayAgents) or local processes (LocalAgents)."""

    async def slots(self, plan: Plan) -> int:
        """How many slots could run this block's agents (seed §3.7 step 4: matching machines)."""
        ...

    async def submit(self, description: dict[str, str]) -> str:
        """Submit one agent job; its job id. GatewayError when refused."""
        ...

    async def remove(self, job_ids: Sequence[str], reason: str) -> None:
        """Remove these agent jobs (ones already gone are no error)."""
        ...

    async def remove_all(self, master_id: str, reason: str) -> None:
        """Every agent job tagged with this master (also ones no state file knows)."""
        ...

    async def alive(self, master_id: str) -> set[str]:
        """Ids of this master's agent jobs that are idle or running."""
        ...

    async def reschedule(self) -> None:
        """Ask for a negotiation cycle, so that waiting agents get slots sooner."""
        ...

    async def agent_host(self) -> str | None:
        """The address agents reach this master at, if the runner knows it."""
        ...

    async def publish(self, master_id: str, cluster: int, attrs: dict[str, object]) -> None:
        """Put the master's progress into its own job ad (master_q and condor_q read it there)."""
        ...

    async def aclose(self) -> None:
        """Let go of what the runner holds (the gateway's worker, local processes)."""
        ...


class GatewayAgents:
    """Agents as HTCondor jobs at the schedd this master runs next to."""

    def __init__(self, gateway: Gateway, schedd_name: str | None = None) -> None:
        self.gw = gateway
        self.schedd_name = schedd_name

    def schedd(self) -> DaemonRef | None:
        """The local schedd, by the address file HTCondor names for scheduler-universe jobs (read
        every time: a restarted schedd has a new port), else by name through the collector."""
        path = os.environ.get("_condor_SCHEDD_ADDRESS_FILE")
        if path:
            try:
                with open(path) as fh:
                    address = fh.readline().strip()
                if address.startswith("<"):
                    return DaemonRef(kind=DaemonKind.SCHEDD, address=address)
            except OSError:
                pass
        if self.schedd_name:
            return DaemonRef(kind=DaemonKind.SCHEDD, name=self.schedd_name)
        return None

    async def slots(self, plan: Plan) -> int:
        """Slots matching the block's requirements (every slot of the pool when it has none)."""
        return await matching_slots(self.gw, plan.agent_attributes)

    async def submit(self, description: dict[str, str]) -> str:
        """Submit to the local schedd; the job id ("cluster.proc")."""
        result = await self.gw.submit(description, schedd=self.schedd())
        return f"{result.cluster}.{result.first_proc}"

    async def remove(self, job_ids: Sequence[str], reason: str) -> None:
        """condor_rm these jobs at the local schedd."""
        await self._remove(list(job_ids), reason)

    async def remove_all(self, master_id: str, reason: str) -> None:
        """condor_rm every job whose LlicMaster names this master."""
        await self._remove(f"{MASTER_ATTR} == {json.dumps(master_id)}", reason)

    async def _remove(self, jobs: str | list[str], reason: str) -> None:
        try:
            await self.gw.remove_jobs(jobs, reason, schedd=self.schedd())
        except GatewayError as e:
            # HTCondor answers "no such job" when everything named has left already: not an error.
            if "matched" not in str(e).lower() and "no such" not in str(e).lower():
                raise

    async def alive(self, master_id: str) -> set[str]:
        """This master's agent jobs that are idle or running (held, removed, completed: not alive)."""
        jobs = await self.gw.query_jobs(
            f"{MASTER_ATTR} == {json.dumps(master_id)}",
            ["ClusterId", "ProcId", "JobStatus"],
            schedd=self.schedd(),
        )
        return {f"{j['ClusterId']}.{j['ProcId']}" for j in jobs if j.get("JobStatus") in (1, 2)}

    async def reschedule(self) -> None:
        """condor_reschedule at the local schedd."""
        await self.gw.reschedule(schedd=self.schedd())

    async def agent_host(self) -> str | None:
        """The schedd's IPv4 address (where execute machines reach this host), if usable."""
        ref = self.schedd()
        ip = agent_ip(ref.address) if ref is not None else None
        if ip is None and self.schedd_name:
            for schedd in await self.gw.list_schedds():
                if schedd.name == self.schedd_name and (ip := agent_ip(schedd.address)):
                    break
        return ip

    async def publish(self, master_id: str, cluster: int, attrs: dict[str, object]) -> None:
        """condor_qedit of the master's own job (its owner may edit it): the attributes master_q
        lists masters by, without reading their state files."""
        constraint = f"ClusterId == {cluster} && LlicMasterId == {json.dumps(master_id)}"
        await self.gw.edit_jobs(constraint, attrs, schedd=self.schedd())

    async def aclose(self) -> None:
        """Stop the gateway's worker process."""
        await self.gw.aclose()


class LocalAgents:
    """Agents as processes on this machine, each in a scratch directory filled the way HTCondor
    would fill it (transfer_input_files at their base names). For tests and the dispatch
    benchmark: no HTCondor, no negotiation; `slots` is what the caller says."""

    def __init__(self, scratch: Path, slots: int = 2, python: str = AGENT_PYTHON) -> None:
        self.scratch = Path(scratch)
        self._slots = slots
        self.python = python
        self.procs: dict[str, trio.Process] = {}
        self.submitted: list[dict[str, str]] = []
        self._n = 0
        self.published: dict[str, object] = {}  # the master's job ad, as far as it would be

    async def slots(self, plan: Plan) -> int:
        """What the caller said."""
        return self._slots

    async def submit(self, description: dict[str, str]) -> str:
        """Fill a scratch directory as HTCondor would and start the agent in it; a made-up job id."""
        self._n += 1
        job_id = f"{self._n}.0"
        home = self.scratch / f"job{self._n}"
        iwd = Path(description["initialdir"])
        await trio.to_thread.run_sync(self._transfer, description, home, iwd)
        argv = [self.python, *description["arguments"].split()]
        with open(iwd / CONDOR_STDOUT, "ab") as out, open(iwd / "agent.err", "ab") as err:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "_CONDOR_SCRATCH_DIR": str(home)}
            self.procs[job_id] = await trio.lowlevel.open_process(
                argv, cwd=home, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )
        self.submitted.append(description)
        return job_id

    @staticmethod
    def _transfer(description: dict[str, str], home: Path, iwd: Path) -> None:
        home.mkdir(parents=True)
        for name in (n.strip() for n in description.get("transfer_input_files", "").split(",")):
            if not name:
                continue
            src = Path(name) if os.path.isabs(name) else iwd / name
            if src.is_dir():
                if name.endswith("/"):
                    shutil.copytree(src, home, dirs_exist_ok=True)
                else:
                    shutil.copytree(src, home / src.name)
            else:
                shutil.copy2(src, home / src.name)

    async def remove(self, job_ids: Sequence[str], reason: str) -> None:
        """Kill these agents' processes."""
        for job in job_ids:
            proc = self.procs.get(job)
            if proc is not None and proc.returncode is None:
                proc.kill()

    async def remove_all(self, master_id: str, reason: str) -> None:
        """Kill every agent process started here."""
        await self.remove(list(self.procs), reason)

    async def alive(self, master_id: str) -> set[str]:
        """The agents whose processes still run."""
        return {job for job, proc in self.procs.items() if proc.poll() is None}

    async def reschedule(self) -> None:
        """Nothing to do: no negotiator."""
        return None

    async def agent_host(self) -> str | None:
        """Loopback: the agents run here."""
        return "127.0.0.1"

    async def publish(self, master_id: str, cluster: int, attrs: dict[str, object]) -> None:
        """No job ad here: kept in `published`, for tests."""
        self.published.update(attrs)

    async def aclose(self) -> None:
        """Kill the agents and wait for them."""
        await self.remove_all("", "closing")
        for proc in self.procs.values():
            with trio.move_on_after(5):
                await proc.wait()
