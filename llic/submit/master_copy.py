"""The master's copy of a queue block: a self-contained submit text with the block's commands and
one queue statement, the items written out (QueueBlock.submit_text).

Its first line, a `#llic:` directive (a comment to condor_submit), carries what the text alone
cannot say: the working directory, the first process number, the cluster's position, the
environment the block reads, and the values condor_submit's cluster ad gives jobs that leave a
command empty. parse_submit_text reads it back (read_directive) and yields the block's tasks again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llic.submit.errors import SubmitFileError
from llic.submit.queue import Foreach
from llic.submit.values import WHITESPACE
from llic.task import Task

if TYPE_CHECKING:
    from llic.submit.block import QueueBlock

DIRECTIVE = "#llic: "  # first line of QueueBlock.submit_text(): what the text alone cannot say
NOTHING = "$(_llic_nothing_)"  # an undefined macro: expands to nothing


def block_submit_text(block: QueueBlock) -> str:
    """A self-contained submit description of this block: its commands and one queue statement
    with the items written out. Its first line, a `#llic:` comment, carries what the text alone
    cannot (working directory, first process number, cluster position, the environment it
    reads, and the values condor_submit's cluster ad gives jobs that leave a command empty);
    `parse_submit_text` on it yields this block's tasks again."""
    base = block.cluster_ad(1 + block.cluster_offset)
    ctx = block.context
    directive = {
        "cwd": str(ctx.cwd),
        "submit_file": ctx.submit_file,
        "submit_time": ctx.submit_time,
        "first_process": block.first_process,
        "cluster_offset": block.cluster_offset,
        "starts_cluster": block.starts_cluster,
        "base": None if base is None else base.to_dict(),
        "environ": _environ_read_by(block),
    }
    lines = [DIRECTIVE + json.dumps(directive, sort_keys=True)]
    for low, m in block.macros.items():
        if low in ("cluster", "process"):
            continue
        value = m.value
        if "\n" in value:  # from `name @= TAG`: written the same way
            body = value.split("\n")
            tag = "LLIC_END"
            while any(line == "@" + tag for line in body):
                tag += "_"
            lines += [f"{m.name} @= {tag}", *body, "@" + tag]
            continue
        if value != value.strip(WHITESPACE):  # blanks a line would lose: keep them behind an empty macro
            value = f"{NOTHING}{value}{NOTHING}"
        lines.append(f"{m.name} = {value}")
    qa = block.queue_args
    if qa.mode is Foreach.NOT:
        lines.append(f"queue {qa.count}")
    else:
        lines.append(f"queue {qa.count} {','.join(qa.variables)} from {qa.slice.text} (".replace("  ", " "))
        if all(_inline_item(item) for item in qa.items):
            lines.extend(qa.items)
        else:  # a line a submit file cannot hold as an item (e.g. "#..." read from a file)
            directive["items"] = list(qa.items)
            lines[0] = DIRECTIVE + json.dumps(directive, sort_keys=True)
        lines.append(")")
    return "\n".join(lines) + "\n"


def _environ_read_by(block: QueueBlock) -> dict[str, str]:
    """The part of the submitter's environment the block reads: all of it with getenv, else the
    variables its `$ENV()` references name."""
    environ = block.context.environ
    commands = block.macros
    items = block.items
    if commands.get("getenv") or commands.get("get_env"):
        return dict(environ)
    texts = [m.value for m in commands.values()] + [it or "" for it in items]
    if not any("$ENV(" in text for text in texts):
        return {}
    names = set()
    for text in texts:
        names.update(re.findall(r"\$ENV\(([A-Za-z0-9_./]+)", text))
    return {k: v for k, v in environ.items() if k in names}


def _inline_item(item: str) -> bool:
    """Whether an item reads back the same as a line of an inline `from ( ... )` list."""
    return not item.startswith(("#", ")")) and not item.endswith("\\") and item == item.strip(WHITESPACE)


@dataclass(frozen=True)
class Directive:
    """What a `#llic:` line says (see block_submit_text)."""

    cwd: str | None
    submit_file: str | None
    submit_time: int
    first_process: int
    cluster_offset: int
    starts_cluster: bool
    base: Task | None
    environ: dict[str, str]
    items: list[str] | None  # the items, when the text cannot hold them


def read_directive(text: str, name: str) -> Directive | None:
    """The directive on the first line of text, None when there is none; a malformed one is a
    SubmitFileError at `name`:1."""
    first_line, _, _ = text.partition("\n")
    if not first_line.startswith(DIRECTIVE):
        return None
    try:
        d = json.loads(first_line[len(DIRECTIVE) :])
        return Directive(
            cwd=d["cwd"],
            submit_file=d["submit_file"],
            submit_time=int(d["submit_time"]),
            first_process=int(d["first_process"]),
            cluster_offset=int(d["cluster_offset"]),
            base=None if d["base"] is None else Task.from_dict(d["base"]),
            environ={str(k): str(v) for k, v in d["environ"].items()},
            items=None if d.get("items") is None else [str(i) for i in d["items"]],
            starts_cluster=bool(d["starts_cluster"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SubmitFileError(name, 1, f"malformed {DIRECTIVE.strip()} line: {e}") from None
