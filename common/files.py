"""Reading a file an admin, a user or a peer gave, without letting its kind or size stop the
reader: a FIFO blocks a plain open until someone writes to it (a daemon's start, a command, a
loop that polls), a device or a huge file is read whole into memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def open_regular(path: str | Path, *, follow_symlinks: bool = True) -> tuple[int, os.stat_result]:
    """A descriptor of `path` opened without blocking, and its status, if it is a regular file
    (the caller closes it). OSError if it cannot be opened (FileNotFoundError if missing; a
    symbolic link too, without `follow_symlinks`); ValueError if it is not a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)  # the file opened, not whatever the path names afterwards
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | Path, limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of `path`, if it is a regular file of at most `limit` bytes. OSError if it
    cannot be opened or read (FileNotFoundError if missing; a symbolic link too, without
    `follow_symlinks`); ValueError naming the problem if it is not a regular file or is larger."""
    fd, st = open_regular(path, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes, more than the {limit} allowed")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"more than the {limit} bytes allowed")
    return data
