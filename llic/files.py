"""File handling shared by the llic master and agent: safe paths, directory snapshots, output placement.

Stdlib only, Python 3.9+: the agent ships this module to execute machines that have nothing but a
`python3`.

- `safe_join` is the one gate between a file name that arrived in a message and the file system: it
  refuses absolute paths, `..` and symlinks that lead out of the base directory.
- `DirInfo` is the seed's snapshot of an execution directory (path -> (size, mtime_ns)); comparing
  the snapshot taken before a task ran with the one taken after gives the files to send back.
- `select_outputs` decides which of those files travel, per files style (seed §3.9.2, §5):
  `condor` returns top-level files only, `improved` returns subdirectories too.
- `place_outputs` writes returned files on the master side: `condor` style flattens everything into
  the task's initialdir (output and error under their base names, as the seed describes condor),
  `improved` keeps the directory structure and creates missing directories, also for output/error.
  A file's mode is the agent's permission bits less the user's umask, never set-id, sticky or
  world-writable (`output_mode`): an agent may lie about modes.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tempfile
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

STYLE_CONDOR = "condor"
STYLE_IMPROVED = "improved"
STYLES = (STYLE_CONDOR, STYLE_IMPROVED)

KIND_FILE = "file"
KIND_STDOUT = "stdout"
KIND_STDERR = "stderr"
KINDS = (KIND_FILE, KIND_STDOUT, KIND_STDERR)

MAX_RELPATH = 4096  # PATH_MAX: longer names cannot be opened anyway
DEFAULT_FILE_MODE = 0o644

# Python 3.9 evaluates these aliases at import time, so no `X | Y` here.
StrPath = Union[str, "os.PathLike[str]"]
FileSig = tuple[int, int]


class UnsafePath(ValueError):
    """A path from a peer would leave its directory (absolute, `..`, symlink) or is not a usable name."""


class OutputPlacementError(OSError):
    """Some returned files could not be written; the others were. `errors` lists (path, reason)."""

    def __init__(self, placed: list[Path], errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in errors))
        self.placed = placed
        self.errors = errors


def _split_rel(rel: Any) -> list[str]:
    """The components of a relative path, `.` and empty ones dropped; anything that could escape refused."""
    if isinstance(rel, os.PathLike):
        rel = os.fspath(rel)
    if not isinstance(rel, str):
        raise UnsafePath(f"path must be a string, not {type(rel).__name__}")
    if "\x00" in rel:
        raise UnsafePath(f"NUL byte in path {rel!r}")
    if len(rel) > MAX_RELPATH:
        raise UnsafePath(f"path longer than {MAX_RELPATH} characters")
    if rel.startswith("/"):
        raise UnsafePath(f"absolute path {rel!r}")
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafePath(f"'..' in path {rel!r}")
    if not parts:
        raise UnsafePath(f"empty path {rel!r}")
    return parts


def normalize_relpath(rel: Any) -> str:
    """`rel` with `.` and empty parts dropped (`./a//b` -> `a/b`); UnsafePath if it could escape."""
    return "/".join(_split_rel(rel))


def check_relpath(rel: Any) -> str:
    """A wire path: relative, canonical (`a/b`, no `.`, `..` or empty parts), else UnsafePath.

    Stricter than `safe_join` so that two spellings of one file cannot both appear in a message.
    """
    parts = _split_rel(rel)
    if "/".join(parts) != rel:
        raise UnsafePath(f"path {rel!r} is not canonical")
    return rel


def _inside(base_real: str, real: str) -> bool:
    return real == base_real or os.path.commonpath([base_real, real]) == base_real


def safe_join(base: StrPath, rel: StrPath) -> Path:
    """`base/rel`, refusing any `rel` that would reach outside `base`, also through existing symlinks.

    The check resolves the symlinks that exist now; the directories below `base` belong to the task
    or the user, who cannot gain anything by racing against it.
    """
    parts = _split_rel(rel)
    target = os.path.join(os.fspath(base), *parts)
    if not _inside(os.path.realpath(base), os.path.realpath(target)):
        raise UnsafePath(f"path {os.fspath(rel)!r} leaves {os.fspath(base)!r} through a symlink")
    return Path(target)


@dataclass
class DirInfo:
    """A directory's regular files, relative POSIX path -> (size, mtime_ns); symlinks are not followed."""

    root: str
    files: dict[str, FileSig] = field(default_factory=dict)

    @classmethod
    def snapshot(cls, root: StrPath, recursive: bool = True) -> DirInfo:
        """The files under `root` now (names, sizes, times), to tell later what a task created or changed."""
        info = cls(os.fspath(root))
        info._scan(info.root, "", recursive)
        return info

    def _scan(self, directory: str, prefix: str, recursive: bool) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return  # gone, or made unreadable by the task: nothing in it can be sent anyway
        for entry in entries:
            rel = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                self.files[rel] = (st.st_size, st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode) and recursive:
                self._scan(entry.path, rel + "/", recursive)


def _files_of(info: DirInfo | Mapping[str, FileSig]) -> Mapping[str, FileSig]:
    return info.files if isinstance(info, DirInfo) else info


def changed_files(
    before: DirInfo | Mapping[str, FileSig], after: DirInfo | Mapping[str, FileSig]
) -> list[str]:
    """Files that are new in `after` or whose size or mtime changed, sorted."""
    old, new = _files_of(before), _files_of(after)
    return sorted(path for path, sig in new.items() if old.get(path) != sig)


def select_outputs(
    before: DirInfo | Mapping[str, FileSig],
    after: DirInfo | Mapping[str, FileSig],
    style: str,
    transfer_output_files: Sequence[str] | None = None,
    exclude: Iterable[str] = (),
) -> list[str]:
    """The files of an execution directory that go back to the master.

    Without `transfer_output_files`: the changed files, top-level only in `condor` style (condor
    does not return new subdirectories), all of them in `improved` style. With it: the listed files
    and everything under listed directories, changed or not, as condor transfers what is listed.
    """
    check_style(style)
    skip = set(exclude)
    if transfer_output_files is None:
        chosen = changed_files(before, after)
        if style == STYLE_CONDOR:
            chosen = [path for path in chosen if "/" not in path]
    else:
        wanted = _listed_names(transfer_output_files)
        chosen = sorted(path for path in _files_of(after) if _is_listed(path, wanted))
    return [path for path in chosen if path not in skip]


def _listed_names(transfer_output_files: Sequence[str]) -> list[str]:
    """The names of transfer_output_files as relative paths; absolute or escaping ones name
    nothing in the execution directory."""
    wanted = []
    for name in transfer_output_files:
        try:
            wanted.append(normalize_relpath(name))
        except UnsafePath:
            continue
    return wanted


def _is_listed(path: str, wanted: Sequence[str]) -> bool:
    """`path` (relative, normalized) is a listed file or under a listed directory."""
    return any(path == want or path.startswith(want + "/") for want in wanted)


def input_paths(task: Any) -> Iterator[str]:
    """The task's executable and input files (transfer_input_files, input) as normalized
    absolute paths on the submit side (URLs name no file there)."""
    root = os.fspath(_task_field(task, "initialdir") or "")
    names = [_task_field(task, "executable"), _task_field(task, "input")]
    for name in (*names, *(_task_field(task, "transfer_input_files") or ())):
        if name and "://" not in name:
            yield os.path.normpath(os.path.join(root, name))


def _overwrites(dest: Path, root: StrPath, kept: Container[str]) -> bool:
    """`dest` is one of the `kept` paths or lies under one (an input directory)."""
    path, top = os.path.normpath(dest), os.path.normpath(root)
    while path != top and len(path) > len(top):
        if path in kept:
            return True
        path = os.path.dirname(path)
    return False


def check_style(style: str) -> str:
    """`style` if it is a known FILES_STYLE_MODE; ValueError naming the allowed ones otherwise."""
    if style not in STYLES:
        raise ValueError(f"files style must be one of {', '.join(STYLES)}, not {style!r}")
    return style


def _task_field(task: Any, name: str) -> Any:
    if isinstance(task, Mapping):
        return task.get(name)
    return getattr(task, name, None)


def stream_destination(iwd: StrPath, name: str, style: str) -> Path:
    """Where a task's stdout/stderr file (`output`/`error` as submitted) lands on the submit side.

    Absolute names are kept (condor does too); relative ones go to `iwd`, flattened to their base
    name in `condor` style, at their full relative path in `improved` style.
    """
    check_style(style)
    if os.path.isabs(name):
        return Path(os.path.normpath(name))
    if style == STYLE_CONDOR:
        return Path(iwd) / posixpath.basename(name.rstrip("/"))
    return Path(os.path.normpath(os.path.join(os.fspath(iwd), name)))


def current_umask() -> int:
    """This process's umask, read without changing it (Linux's /proc/self/status; elsewhere by
    setting it and putting it back, which other threads might see for a moment)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_mode(claimed: Any, umask: int) -> int:
    """The mode a returned file is written with: the permission bits the agent claims (rwx only:
    no set-uid, set-gid or sticky bit), less `umask`, and never writable by others."""
    if not isinstance(claimed, int) or isinstance(claimed, bool):
        claimed = DEFAULT_FILE_MODE
    return claimed & 0o777 & ~umask & ~0o002


def atomic_write(dest: StrPath, data: bytes, mode: int = DEFAULT_FILE_MODE) -> None:
    """Write `dest` through a temporary file in its directory and a rename: readers never see half a file."""
    dest = os.fspath(dest)
    directory, name = os.path.split(dest)
    fd, tmp = tempfile.mkstemp(dir=directory or ".", prefix=f".{name}.", suffix=".llic-tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode & 0o777)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def parse_remaps(text: str | None) -> dict[str, str]:
    """`transfer_output_remaps` ("name = dest; name2 = dest2", `\\` escaping `;`, `=` and
    itself, as condor reads it): output file name -> where it goes instead."""
    if not text:
        return {}
    out: dict[str, str] = {}
    parts: list[str] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            buf.append(text[i + 1])
            i += 2
            continue
        if c in ";=":
            parts.append("".join(buf).strip())
            buf = []
            if c == ";":
                if len(parts) == 2 and parts[0]:
                    out[parts[0]] = parts[1]
                parts = []
        else:
            buf.append(c)
        i += 1
    parts.append("".join(buf).strip())
    if len(parts) == 2 and parts[0]:
        out[parts[0]] = parts[1]
    return out


def place_outputs(
    task: Any,
    files: Iterable[tuple[Mapping[str, Any], bytes]],
    style: str,
    dest_root: StrPath | None = None,
    umask: int | None = None,
    protected: Container[str] = frozenset(),
) -> list[Path]:
    """Write the files an agent returned for `task` (pairs of file entry and content); master side.

    Only the files HTCondor would return are written, as an agent may lie. When the task lists
    `transfer_output_files`: those files and what is under listed directories, nothing else.
    When it does not, HTCondor returns every new or changed top-level file of the sandbox, which
    the master cannot tell from a lie; so any name, except that the task's executable and input
    files (`input_paths`) and the `protected` paths (normalized, absolute: the master passes
    Plan.protected_paths: every task's inputs, executable, job event log, stdout and stderr, and
    its own directory and files) are never overwritten, nor is anything under them. HTCondor
    would return an input the job changed; here the task's directory also feeds other tasks
    (TRANSFER modes send these files to other agents), so a job that changes an input and
    wants it back lists it in transfer_output_files.

    Modes: `output_mode` of what the agent claims and `umask` (default: this process's, the
    user's: the master runs as the user who submitted).

    `dest_root` is the directory that stands for the task's working directory (default: the task's
    `initialdir`). Entry paths come from the agent and go through `safe_join`; the destination of
    stdout/stderr comes from the task itself (`output`/`error`), never from the agent; a file the
    task's `output_remaps` (transfer_output_remaps) names goes where that says (relative to the
    root unless absolute; its directory must exist, as HTCondor requires). A file that cannot be
    written does not stop the others: OutputPlacementError lists failures at the end.
    """
    check_style(style)
    root = dest_root if dest_root is not None else _task_field(task, "initialdir")
    if not root:
        raise ValueError("task has no initialdir and no dest_root was given")
    remaps = parse_remaps(_task_field(task, "output_remaps"))
    listed = _task_field(task, "transfer_output_files")
    wanted = None if listed is None else _listed_names(listed)
    own = frozenset() if listed is not None else frozenset(input_paths(task))
    placed: list[Path] = []
    errors: list[tuple[str, str]] = []
    mask = current_umask() if umask is None else umask
    for entry, data in files:
        path = entry.get("path", "?")
        try:
            kind = entry.get("kind", KIND_FILE)
            mode = output_mode(entry.get("mode", DEFAULT_FILE_MODE), mask)
            rel = normalize_relpath(path) if kind == KIND_FILE else ""
            if wanted is not None and kind == KIND_FILE and not _is_listed(rel, wanted):
                raise UnsafePath("not in the task's transfer_output_files")
            if kind == KIND_FILE and rel in remaps:
                target = remaps[rel]
                if "://" in target:
                    raise UnsafePath(f"remapped to a URL ({target}), which llic cannot write")
                dest = Path(target if os.path.isabs(target) else os.path.join(os.fspath(root), target))
            elif kind == KIND_FILE:
                dest = safe_join(root, posixpath.basename(rel) if style == STYLE_CONDOR else rel)
                if wanted is None and (_overwrites(dest, root, own) or _overwrites(dest, root, protected)):
                    raise UnsafePath(
                        f"{dest} is protected: an input, executable, log or stdout/stderr, or the master's"
                    )
                dest.parent.mkdir(parents=True, exist_ok=True)
            elif kind in (KIND_STDOUT, KIND_STDERR):
                name = _task_field(task, "output" if kind == KIND_STDOUT else "error")
                if not name:
                    raise UnsafePath(f"the task has no {'output' if kind == KIND_STDOUT else 'error'} file")
                dest = stream_destination(root, name, style)
                if style == STYLE_IMPROVED:
                    dest.parent.mkdir(parents=True, exist_ok=True)
            else:
                raise UnsafePath(f"unknown file kind {kind!r}")
            atomic_write(dest, data, mode)
            placed.append(dest)
        except (OSError, ValueError) as exc:
            errors.append((str(path), str(exc)))
    if errors:
        raise OutputPlacementError(placed, errors)
    return placed
