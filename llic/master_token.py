"""The master's own credential: a token for the submitting user, held by the master job only.

The master is a scheduler-universe job on the schedd's host, run as the submitting user, and
talks to that schedd (queries, submits and removes its agents, reschedules). A user on the
submit host authenticates by FS, but the master cannot always: the bindings llic ships
(htcondor 25.x) enforce FS channel binding (HTCONDOR-2026-0001), which schedds before 24.0.22 /
25.0.12 (Debian 13's 23.9 among them) do not offer, so FS fails with "Directory name doesn't
match server's network address" (docs/security-htcondor.md). So master_submitter, which runs as
the user with the pool's own tools, fetches a token for the user's own identity from the
master's schedd (`condor_token_fetch`: no new identity, no administrator), bounded to READ and
WRITE and MASTER_TOKEN_LIFETIME seconds, and puts it in the master's output directory: a 0700
directory with one 0600 file, owned by the user like the rest of that directory. The master's
gateway points SEC_TOKEN_DIRECTORY there (IDTOKENS only: `Gateway(token_dir=...)`), so the master
and nothing else presents it; the master deletes it when its run is done. Agents never see it (they talk
only to the master).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

# HTCondor's command-line tools (condor_token_fetch) as a command prefix, split like a shell
# would; unset: on PATH, as on a submit host. The sandbox's: `deploy/sandbox tool POOL --user --`.
TOOLS_ENV = "LLIC_CONDOR_TOOLS"
TOKEN_DIR = "tokens.d"  # in the master's output directory
TOKEN_FILE = "llic-master"
AUTHORIZATIONS = ("READ", "WRITE")  # query, submit, remove, edit and reschedule the user's jobs


def token_dir(outdir: Path) -> Path:
    """Where the master's token lives (SEC_TOKEN_DIRECTORY of the master job)."""
    return outdir / TOKEN_DIR


def write_token(outdir: Path, token: str) -> Path:
    """The token as HTCondor reads one: its directory 0700, the file 0600 and created afresh
    (HTCondor ignores token files others can read). Returns the directory."""
    if token.count(".") != 2 or any(c.isspace() for c in token):
        raise ValueError("not a token (three dot-separated parts, no white space)")
    directory = token_dir(outdir)
    directory.mkdir(mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return directory


def held_token_dir(outdir: Path) -> Path | None:
    """The master's token directory if master_submitter left a token there, else None (the
    master then authenticates the pool's own way): the master's Gateway(token_dir=...)."""
    directory = token_dir(outdir)
    return directory if (directory / TOKEN_FILE).is_file() else None


def remove_token(outdir: Path) -> None:
    """The run is over: the token goes (it would expire anyway). Missing is fine."""
    directory = token_dir(outdir)
    (directory / TOKEN_FILE).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:
        pass


def condor_tools() -> list[str]:
    """The command prefix HTCondor's tools run with ($LLIC_CONDOR_TOOLS; empty: on PATH)."""
    return shlex.split(os.environ.get(TOOLS_ENV, ""))
