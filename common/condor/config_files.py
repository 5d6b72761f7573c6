"""The file sink of `common.condor.knobs`: config files in HTCondor's LOCAL_CONFIG_DIR.

A daemon that writes HTCondor configuration into files (faultD's role file, the central-manager
files a takeover installs) writes them here and nowhere else: only names the caller owns, as
plain file names inside the directory, with contents rendered from a `CheckedConfig` (so every
line is a comment the writer chose or a `KNOB = value` that passed the writer's allow-list).
Writes are atomic (fsync, rename), so HTCondor reads the old file or the new one, never half.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from common.condor.knobs import CheckedConfig, KnobRefused

# What HTCondor reads from LOCAL_CONFIG_DIR by default skips names starting with '.' or ending
# in '~', '.rpmsave' and the like; ours are plain names it does read.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_config_file_name(name: str) -> str:
    """A file name for LOCAL_CONFIG_DIR: no directory part, no leading dot, letters, digits,
    '.', '_' and '-' only."""
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name) or name.endswith("~"):
        raise ValueError(f"{name!r:.80} is not a config file name (letters, digits, '.', '_', '-')")
    return name


def write_atomically(path: Path, data: bytes, *, like: Path | None = None, mode: int = 0o644) -> None:
    """Write, fsync, rename: a reader (HTCondor) sees the old file or the new one, never half.
    With `like`, the file gets that path's owner and group."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # before the owner changes: no CAP_FOWNER needed (faultd.service)
        if like is not None and like.exists():
            st = like.stat()
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_config_file(
    directory: Path,
    name: str,
    config: CheckedConfig,
    *,
    owned: Iterable[str],
    comments: Iterable[str] = (),
) -> Path:
    """Write `config` as the file `name` in `directory`, if `name` is one of the `owned` file
    names; returns the path. Unchanged contents are not rewritten (HTCondor's reconfig is the
    caller's). KnobRefused when the name is not owned or not a plain file name."""
    try:
        check_config_file_name(name)
    except ValueError as e:
        raise KnobRefused(config.scope, "(file name)", str(e)) from None
    if name not in set(owned):
        raise KnobRefused(config.scope, "(file name)", f"{name!r:.80} is not a file this writer owns")
    path = directory / name
    data = config.render(comments).encode("ascii")
    try:
        if path.read_bytes() == data:
            return path
    except FileNotFoundError:
        pass
    write_atomically(path, data)
    return path
