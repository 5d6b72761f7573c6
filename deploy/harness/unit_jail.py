"""Run a command under what a systemd unit's [Service] section asks for, without systemd.

    python -m deploy.harness.unit_jail common/deploy_files/systemd/poold.service -- \\
        python -m poolD run --config ...

This machine (and CI) has no systemd to start units, yet the daemons must keep working under
their hardened units. The harness starts poold and faultd through this jail in the
real-HTCondor tests, so those tests run them under the unit's restrictions that change what a
process may do:

- SystemCallFilter (allow-list of groups, `~` removals, later additions, as systemd reads them;
  groups expanded by `systemd-analyze syscall-filter`), SystemCallErrorNumber, native arch only;
- RestrictAddressFamilies (socket() of another family fails with EAFNOSUPPORT, as in systemd);
- MemoryDenyWriteExecute (the kernel's PR_SET_MDWE, what systemd itself uses where it can);
- NoNewPrivileges, CapabilityBoundingSet (the command runs as root: its capabilities are then
  exactly the bounding set, as for a root service);
- LimitNOFILE, UMask;
- MemoryMax and TasksMax (a memory and a pids cgroup of their own, cgroup v1 or v2);
- ProcSubset=pid and ProtectProc=invisible (a private /proc in a mount namespace of its own).

Not emulated: User= (the harness runs the daemons as root; with an empty bounding set poold has
no privilege left), the file-system views (ProtectSystem, ReadWritePaths, PrivateTmp...: the
sandbox's paths are not the unit's), RestrictNamespaces, RestrictRealtime, LockPersonality,
RestrictSUIDSGID. The jail forks: it stays as a small supervisor that forwards signals, waits,
exits with the command's status and removes its cgroups.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import resource
import signal
import socket
import subprocess
import sys
from functools import cache
from pathlib import Path

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1
CLONE_NEWNS = 0x00020000
MS_REC, MS_SLAVE = 0x4000, 1 << 19
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_CMP_EQ = 4
AF_MAX = 46
JAIL_PREFIX = "selforg-jail-"


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def read_service(unit: Path) -> list[tuple[str, str]]:
    """The [Service] section's settings, in order (a key may come more than once)."""
    settings, section = [], ""
    for raw in unit.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            settings.append((key.strip(), value.strip()))
    return settings


@cache
def syscall_groups() -> dict[str, list[str]]:
    """systemd's syscall groups: name -> members (syscalls and nested @groups)."""
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True)
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def expand(items: list[str]) -> set[str]:
    """Syscall names from a SystemCallFilter= list of names and @groups."""
    names: set[str] = set()
    for item in items:
        if item.startswith("@"):
            names |= expand(syscall_groups()[item])
        else:
            names.add(item)
    return names


def allowed_syscalls(settings: list[tuple[str, str]]) -> set[str] | None:
    """The allow-list SystemCallFilter= lines make, as systemd reads them (None: no filter)."""
    allowed: set[str] | None = None
    for key, value in settings:
        if key != "SystemCallFilter" or not value:
            continue
        deny = value.startswith("~")
        items = value.lstrip("~").split()
        if allowed is None:
            if deny:
                raise ValueError("a deny-list SystemCallFilter is not emulated")
            allowed = set()
        allowed = allowed - expand(items) if deny else allowed | expand(items)
    return allowed


def _value(settings: list[tuple[str, str]], key: str) -> str | None:
    values = [v for k, v in settings if k == key]
    return values[-1] if values else None


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    match = re.fullmatch(r"([0-9]+)([KMGT]?)", text.strip())
    if match is None:
        raise ValueError(f"not a size: {text!r}")
    return int(match[1]) * units.get(match[2], 1)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


# --------------------------------------------------------------------------- cgroups


def _cgroup_dirs(name: str) -> list[tuple[Path, dict[str, str]]]:
    """Where this process's memory and pids cgroups are (v1 controllers, or the v2 tree), with
    the file names of each limit."""
    dirs = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            dirs.append(
                (Path("/sys/fs/cgroup/memory") / path.lstrip("/") / name, {"mem": "memory.limit_in_bytes"})
            )
        elif controllers == "pids":
            dirs.append((Path("/sys/fs/cgroup/pids") / path.lstrip("/") / name, {"tasks": "pids.max"}))
        elif controllers == "" and not dirs and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            dirs.append(
                (Path("/sys/fs/cgroup") / path.lstrip("/") / name, {"mem": "memory.max", "tasks": "pids.max"})
            )
    return dirs


def _mount_cgroups() -> None:
    """`ip netns exec` mounts a sysfs of the namespace's own over /sys, without the cgroup file
    systems; mount them again (in its private mount namespace: the host does not see them)."""
    root = Path("/sys/fs/cgroup")
    lines = [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()]
    v1 = [c for _, c, _ in lines if c in ("memory", "pids")]
    if all((root / c / "cgroup.procs").exists() for c in v1) and (v1 or (root / "cgroup.procs").exists()):
        return
    libc = _libc()
    if not v1:
        _check(libc.mount(b"cgroup2", str(root).encode(), b"cgroup2", 0, None), "mount cgroup2")
        return
    _check(libc.mount(b"tmpfs", str(root).encode(), b"tmpfs", 0, b"mode=0755"), "mount tmpfs on cgroup")
    for controller in v1:
        (root / controller).mkdir()
        target = str(root / controller).encode()
        _check(libc.mount(b"cgroup", target, b"cgroup", 0, controller.encode()), f"mount cgroup {controller}")


def make_cgroups(settings: list[tuple[str, str]]) -> list[Path]:
    """Cgroups holding MemoryMax and TasksMax for the command; those left by jails that were
    killed (named after a pid that is gone) are removed first."""
    limits = {"mem": _value(settings, "MemoryMax"), "tasks": _value(settings, "TasksMax")}
    if not any(limits.values()):
        return []
    _mount_cgroups()
    made = []
    for path, files in _cgroup_dirs(f"{JAIL_PREFIX}{os.getpid()}"):
        for stale in path.parent.glob(f"{JAIL_PREFIX}*"):
            owner = stale.name.removeprefix(JAIL_PREFIX)
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():  # its jail is gone
                try:
                    stale.rmdir()
                except OSError:
                    pass
        wanted = {files[k]: v for k, v in limits.items() if k in files and v}
        if not wanted:
            continue
        path.mkdir()
        made.append(path)
        for file, value in wanted.items():
            (path / file).write_text(str(_size(value)) if file.startswith("memory") else value)
    return made


# --------------------------------------------------------------------------- in the child


def _drop_capabilities(libc: ctypes.CDLL, keep: set[str], last: int) -> None:
    names = _capability_numbers()
    wanted = {names[k] for k in keep}
    for cap in range(last + 1):
        if cap not in wanted:
            _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")


def _capability_numbers() -> dict[str, int]:
    order = (
        "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
        "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO "
        "SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME "
        "SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG "
        "WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE"
    ).split()
    return {f"CAP_{name}": i for i, name in enumerate(order)}


def _private_proc(libc: ctypes.CDLL, settings: list[tuple[str, str]]) -> None:
    subset = _value(settings, "ProcSubset")
    hide = _value(settings, "ProtectProc")
    if subset != "pid" and hide in (None, "default"):
        return
    options = ",".join(
        o for o in ("subset=pid" if subset == "pid" else "", f"hidepid={hide}" if hide else "") if o
    )
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
    _check(libc.mount(b"proc", b"/proc", b"proc", 0, options.encode()), f"mount proc ({options})")


def _seccomp(settings: list[tuple[str, str]]) -> None:
    allowed = allowed_syscalls(settings)
    families = _value(settings, "RestrictAddressFamilies")
    if allowed is None and families is None:
        return
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"), use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)
    ]  # fmt: skip
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    error = _value(settings, "SystemCallErrorNumber")
    default = _errno_action(getattr(errno, error)) if error else SCMP_ACT_KILL_PROCESS
    ctx = lib.seccomp_init(default if allowed is not None else SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    names = set(allowed) if allowed is not None else set()
    if families is not None:
        names.discard("socket")
    for name in sorted(names):
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr >= 0:
            _check(lib.seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0), f"allow {name}")
    if families is not None:
        nr = lib.seccomp_syscall_resolve_name(b"socket")
        keep = {getattr(socket, f) for f in families.split()}
        for family in range(AF_MAX + 1):
            action = SCMP_ACT_ALLOW if family in keep else _errno_action(errno.EAFNOSUPPORT)
            if action == SCMP_ACT_ALLOW and allowed is None:
                continue
            cmp = _ArgCmp(0, SCMP_CMP_EQ, family, 0)
            _check(
                lib.seccomp_rule_add_array(ctx, action, nr, 1, ctypes.byref(cmp)), f"socket family {family}"
            )
    _check(lib.seccomp_load(ctx), "seccomp_load")


def confine(settings: list[tuple[str, str]], cgroups: list[Path]) -> None:
    """In the child, before exec: everything but the syscall filter, then the filter last."""
    libc = _libc()
    last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())  # before /proc goes private
    for path in cgroups:
        (path / "cgroup.procs").write_text(str(os.getpid()))
    if (umask := _value(settings, "UMask")) is not None:
        os.umask(int(umask, 8))
    if (nofile := _value(settings, "LimitNOFILE")) is not None:
        n = int(nofile)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    _private_proc(libc, settings)
    if (bounding := _value(settings, "CapabilityBoundingSet")) is not None:
        _drop_capabilities(libc, set(bounding.split()), last_cap)
    if _value(settings, "NoNewPrivileges") == "yes" or allowed_syscalls(settings) is not None:
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if _value(settings, "MemoryDenyWriteExecute") == "yes":
        _check(libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0), "PR_SET_MDWE")
    _seccomp(settings)


def main(argv: list[str]) -> int:
    """`unit_jail UNIT -- COMMAND...`: run COMMAND confined as UNIT says; its exit status."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m deploy.harness.unit_jail UNIT -- COMMAND...", file=sys.stderr)
        return 2
    settings = read_service(Path(argv[0]))
    cgroups = make_cgroups(settings)
    pid = os.fork()
    if pid == 0:
        try:
            confine(settings, cgroups)
            os.execvp(argv[2], argv[2:])
        except BaseException as e:
            print(f"unit_jail: {e}", file=sys.stderr)
        os._exit(126)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    for path in cgroups:
        try:
            path.rmdir()
        except OSError:
            pass
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
