"""Where text comes from besides the submit file: a file or a command's output, for `include`
and `queue ... from` (condor's config.cpp: Open_macro_source, fixup_pipe_source,
Copy_macro_source_into).

A source that holds `|` is a command and must end with it (`seq 1 9 |`); its words are split as
HTCondor splits arguments (quoted in double quotes: the new syntax; else at white space, quotes
taken literally), and it runs in condor_submit's working directory with condor_submit's
environment, found along that environment's PATH, without a shell, its standard error left
to the user, its exit status not looked at (condor_submit 23.9 does not either). Any other
source is a file, relative to the working directory.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from common.files import read_regular
from llic.submit.arguments import split_args, v2_quoted_to_raw
from llic.submit.values import WHITESPACE

# A submit file, an included one or a `queue from` file is read whole: at most this (a real one is
# some KiB; a FIFO would block master_submitter, a huge file fill its memory).
MAX_SOURCE_BYTES = 64 << 20


class SourceError(Exception):
    """A file that cannot be read or a command that cannot be run; condor's wording."""


def is_command(source: str) -> bool:
    """Whether condor reads `source` as a command (it holds a `|`)."""
    return "|" in source


def command_words(source: str) -> list[str]:
    """The command's words: the trailing `|` (and blanks before it) dropped, then split as
    condor's AppendArgsV1RawOrV2Quoted splits (new syntax when it starts with a double quote)."""
    cmd = source.rstrip("| ")
    if cmd.lstrip(WHITESPACE).startswith('"'):
        try:
            return split_args(v2_quoted_to_raw(cmd))
        except ValueError as e:
            raise SourceError(f"Can't append args, {e}") from None
    return cmd.split()


def read_source(source: str, cwd: Path, environ: Mapping[str, str], *, command: bool = False) -> str:
    """The text of `source`: a command's output when it is one (or `command` says so), else the
    file's contents. Raises SourceError."""
    if command or is_command(source):
        if not command and not source.rstrip(WHITESPACE).endswith("|"):
            raise SourceError("not a valid command, | must be at the end")
        return run_command(command_words(source), cwd, environ)
    path = Path(source) if source.startswith("/") else cwd / source
    try:
        return read_regular(path, MAX_SOURCE_BYTES).decode("utf-8", errors="surrogateescape")
    except OSError as e:
        raise SourceError(f"can't open file {source}: {e.strerror}") from None
    except ValueError as e:
        raise SourceError(f"can't read file {source}: {e}") from None


def run_command(words: list[str], cwd: Path, environ: Mapping[str, str]) -> str:
    """Run a command as condor's my_popen does and return what it wrote to standard output."""
    if not words:
        raise SourceError("not a valid command, errno=2 : No such file or directory")
    try:
        done = subprocess.run(
            words,
            cwd=cwd,
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            check=False,
        )
    except OSError as e:
        raise SourceError(f"not a valid command, errno={e.errno} : {os.strerror(e.errno or 0)}") from None
    return done.stdout.decode("utf-8", errors="surrogateescape")


def write_into(path: str, text: str, cwd: Path) -> None:
    """`include command into FILE`: keep the command's output in FILE for the next submission."""
    target = Path(path) if path.startswith("/") else cwd / path
    try:
        target.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    except OSError as e:
        raise SourceError(f"cannot write {path}: {e.strerror}") from None
