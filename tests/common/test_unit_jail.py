"""deploy/harness/unit_jail.py: a command run under a unit's restrictions meets them. The
real-HTCondor tests run poold and faultd in this jail, so that is where "the daemons still work
under their hardened units" is shown; here, that the jail does what the units say. Marked
htcondor with the sandbox's tests: it needs root (cgroups, capabilities, mounts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.install import FILES as DEPLOY_FILES
from deploy.harness.unit_jail import allowed_syscalls, read_service

pytestmark = pytest.mark.htcondor

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import ctypes, errno, json, os, resource, socket
out = {}
def child_setuid():
    pid = os.fork()
    if pid == 0:
        try:
            os.setuid(65534)
            os._exit(0)
        except OSError as e:
            os._exit(e.errno)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, "")
checks = {
    "setuid": child_setuid,
    "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, 0, 5),
    "netlink": lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close(),
    "packet": lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close(),
    "inet": lambda: socket.socket().close(),
    "unix": lambda: socket.socket(socket.AF_UNIX).close(),
    "meminfo": lambda: open("/proc/meminfo").read(1),
    "chown": lambda: os.chown(os.environ["PROBE_FILE"], 65534, 65534),
}
for name, check in checks.items():
    try:
        check()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
c = ctypes
libc.mmap.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_int, c.c_int, c.c_long]
address = libc.mmap(None, 4096, 7, 0x22, -1, 0)
out["write_exec"] = "ok" if address not in (None, 2**64 - 1) else errno.errorcode[ctypes.get_errno()]
out["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
out["capabilities"] = status["CapEff"].strip()
out["umask"] = oct(os.umask(0))
out["cgroups"] = sorted(line.split(":", 2)[2] for line in open("/proc/self/cgroup") if "jail" in line)
print(json.dumps(out))
"""


def probe(unit: str, tmp_path: Path) -> dict:
    if os.geteuid() != 0:
        pytest.fail("the unit jail needs root (cgroups, capabilities, mounts); the suite runs as root")
    target = tmp_path / "owned-by-root"
    target.write_text("x")
    jail = [sys.executable, "-m", "deploy.harness.unit_jail", str(DEPLOY_FILES / "systemd" / unit), "--"]
    env = os.environ | {"PROBE_FILE": str(target)}
    out = subprocess.run(
        [*jail, sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, env=env, check=True
    )
    return json.loads(out.stdout)


def test_poold_runs_without_privilege_filtered_and_bounded(tmp_path: Path) -> None:
    seen = probe("poold.service", tmp_path)
    assert seen["setuid"] == seen["setpriority"] == seen["chown"] == "EPERM"  # ~@privileged @resources
    assert seen["packet"] == "EAFNOSUPPORT"  # RestrictAddressFamilies
    assert seen["netlink"] == seen["inet"] == seen["unix"] == "ok"  # HTCondor's client needs netlink
    assert seen["meminfo"] == "ENOENT"  # ProcSubset=pid
    assert seen["write_exec"] == "EACCES"  # MemoryDenyWriteExecute
    assert seen["nofile"] == 1024 and seen["capabilities"] == "0000000000000000" and seen["umask"] == "0o77"
    assert len(seen["cgroups"]) == 2  # memory (MemoryMax) and pids (TasksMax)


def test_faultd_keeps_chown_and_dac_override_only(tmp_path: Path) -> None:
    seen = probe("faultd.service", tmp_path)
    assert seen["chown"] == "ok" and seen["capabilities"] == "0000000000000003"  # CAP_CHOWN, CAP_DAC_OVERRIDE
    assert seen["setuid"] == seen["setpriority"] == "EPERM" and seen["packet"] == "EAFNOSUPPORT"
    assert seen["write_exec"] == "EACCES" and seen["meminfo"] == "ENOENT" and seen["nofile"] == 1024


def test_syscall_filter_lines_read_as_systemd_reads_them() -> None:
    settings = read_service(DEPLOY_FILES / "systemd" / "faultd.service")
    allowed = allowed_syscalls(settings)
    assert allowed is not None
    assert {"chown", "fchown", "openat", "execve", "socket"} <= allowed  # @chown added back last
    assert not {"setuid", "setresuid", "setpriority", "setrlimit", "capset"} & allowed
    poold = allowed_syscalls(read_service(DEPLOY_FILES / "systemd" / "poold.service"))
    assert poold is not None and "chown" not in poold and "fchownat" not in poold
