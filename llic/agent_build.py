"""Build the agent as one self-contained zipapp, for execute machines that have only a `python3`.

The archive holds `llic/agent/`, `llic/protocol.py`, `llic/task.py`, `llic/files.py`,
`llic/lean_msgpack.py` (what the protocol encodes and decodes with there), a stub
`llic/__init__.py` (the real one may import what the agent must not) and msgpack's pure-Python
modules: the compiled `_cmsgpack` is left out, and msgpack then falls back to `msgpack.fallback`
by itself.

Beside each module goes its bytecode for the Python that builds the archive (an unchecked
hash-based `.pyc`, which zipimport takes before the `.py`): an agent on the same Python (the usual
case: execute machines run the submit machine's distribution) starts without compiling its
modules, which cost it ~0.1 s of CPU per start (zipimport cannot cache what it compiles); any
other Python finds a magic number not its own, and zipimport falls back to the source.

Chefs transfer it with every agent, so it is built once per content: the file name carries a hash
of everything inside, and an archive already there is reused. master_submitter, which builds one
for every master it submits, keeps it in the user's cache (`agent_cache_dir`) and copies it from
there: the compile is a child Python, ~0.1-0.2 s on the way to the first task. The bytes are
reproducible: members in sorted order with fixed timestamps and permissions. That is why the zip
is written with `zipfile` and only then turned into an application by `zipapp.create_archive` (which adds the
`#!/usr/bin/env python3` line): `create_archive` on a directory stores members in directory order
with their mtimes.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipapp
import zipfile
from pathlib import Path

BUILD_FORMAT = "2"  # bump when the archive layout changes (2: bytecode beside the sources)
INTERPRETER = "/usr/bin/env python3"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)

_LLIC_STUB = (
    b'"""llic, as shipped inside the agent zipapp: only the agent and the modules it needs."""\n\n'
    b"# msgpack is its pure-Python fallback here: llic.protocol uses llic.lean_msgpack without\n"
    b"# importing msgpack (~10 ms of each agent's start-up)\n"
    b"AGENT_ZIPAPP = True\n"
)
_MAIN = (
    b'"""Entry point of the llic agent zipapp."""\n'
    b"import sys\n\n"
    b"from llic.agent.__main__ import main\n\n"
    b"sys.exit(main())\n"
)


def _python_files(root: Path, arc_prefix: str) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        members[f"{arc_prefix}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return members


_COMPILE = """
import importlib.util, marshal, os, sys
for name in sys.argv[2:]:
    path = os.path.join(sys.argv[1], name)
    with open(path, "rb") as fh:
        source = fh.read()
    code = compile(source, name, "exec", dont_inherit=True)
    flags = (1).to_bytes(4, "little")  # hash-based, unchecked: no times, no source read back
    header = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source)
    with open(path + "c", "wb") as fh:
        fh.write(header + marshal.dumps(code))
"""


def bytecode(members: dict[str, bytes]) -> dict[str, bytes]:
    """The `.pyc` of every module for this Python (name + "c" -> bytes). Compiled in a fresh
    interpreter: marshal marks objects by their reference counts, so bytecode dumped in a process
    that has imported the same modules differs, and the archive would not be reproducible."""
    names = sorted(n for n in members if n.endswith(".py"))
    with tempfile.TemporaryDirectory(prefix="llic-agent-pyc-") as tmp:
        for name in names:
            path = Path(tmp, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(members[name])
        subprocess.run([sys.executable, "-I", "-S", "-c", _COMPILE, tmp, *names], check=True)
        return {name + "c": Path(tmp, name + "c").read_bytes() for name in names}


def agent_members() -> dict[str, bytes]:
    """Archive name -> content of the agent zipapp's sources (`build_agent` adds their bytecode)."""
    llic_dir = Path(__file__).resolve().parent
    spec = importlib.util.find_spec("msgpack")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("msgpack is not installed: the agent bundles its pure-Python modules")
    msgpack_dir = Path(next(iter(spec.submodule_search_locations)))
    members = {
        "__main__.py": _MAIN,
        "llic/__init__.py": _LLIC_STUB,
        "llic/protocol.py": (llic_dir / "protocol.py").read_bytes(),
        "llic/files.py": (llic_dir / "files.py").read_bytes(),
        "llic/task.py": (llic_dir / "task.py").read_bytes(),
        "llic/lean_msgpack.py": (llic_dir / "lean_msgpack.py").read_bytes(),
    }
    members.update(_python_files(llic_dir / "agent", "llic/agent"))
    members.update(_python_files(msgpack_dir, "msgpack"))  # .py only: no compiled extension
    if "msgpack/fallback.py" not in members:
        raise RuntimeError(f"{msgpack_dir} has no fallback.py: cannot ship a pure-Python msgpack")
    return members


def content_hash(members: dict[str, bytes]) -> str:
    """A digest of the archive's sources, its build format and the bytecode's Python (its magic
    number): its file name."""
    digest = hashlib.sha256(BUILD_FORMAT.encode() + importlib.util.MAGIC_NUMBER)
    for name in sorted(members):
        data = members[name]
        digest.update(f"\0{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _write_zip(members: dict[str, bytes], target: Path) -> None:
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.create_system = 3  # unix, so the permissions below mean what they say
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, members[name], compresslevel=9)


def _build_into(members: dict[str, bytes], target: Path) -> None:
    """The archive of `members` (their bytecode added) at `target`, through a temporary file in its
    directory and a rename, so concurrent builders and readers never see half an archive."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".llic-agent-build-") as tmp:
        plain = Path(tmp) / "agent.zip"
        _write_zip({**members, **bytecode(members)}, plain)
        built = Path(tmp) / "agent.pyz"
        zipapp.create_archive(plain, built, interpreter=INTERPRETER)
        os.chmod(built, 0o755)
        os.replace(built, target)


def agent_cache_dir() -> Path | None:
    """Where master_submitter keeps the agent zipapps it built, for its next submissions:
    `$XDG_CACHE_HOME/llic` (default `~/.cache/llic`), made 0700. None when it cannot be made, or
    when it is not this user's alone (what is found there runs as the user's agents)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base, "llic")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return None
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return path


def cached_agent(cache: Path, members: dict[str, bytes] | None = None) -> Path:
    """The agent zipapp in `cache`, built there first if missing; one builder at a time (a lock
    file), so that a submission that comes while another builds waits for that archive."""
    members = agent_members() if members is None else members
    target = cache / f"llic-agent-{content_hash(members)[:16]}.pyz"
    if target.is_file():
        return target
    with open(cache / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            _build_into(members, target)
    return target


def build_agent(out: Path, *, cache: Path | None = None) -> Path:
    """The agent zipapp in directory `out` (created if needed): `out/llic-agent-<hash>.pyz`.

    Reused when already built from the same content; with `cache` (`agent_cache_dir()`), copied
    from there, where it is built once per content instead of once per submission (the bytecode
    compile is a child Python: ~0.1-0.2 s). Written to a temporary name and renamed, so
    concurrent builders and readers never see half an archive.
    """
    members = agent_members()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"llic-agent-{content_hash(members)[:16]}.pyz"
    if target.is_file():
        return target
    if cache is None:
        _build_into(members, target)
        return target
    source = cached_agent(cache, members)
    with tempfile.NamedTemporaryFile(dir=out, prefix=".llic-agent-copy-", delete=False) as tmp:
        try:
            with open(source, "rb") as fh:
                shutil.copyfileobj(fh, tmp)
            tmp.close()
            os.chmod(tmp.name, 0o755)
            os.replace(tmp.name, target)
        except BaseException:
            os.unlink(tmp.name)
            raise
    return target
