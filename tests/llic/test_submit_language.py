"""The parts of the submit language issue 20 added to llic.submit, one test per class of the
issue's table; every expectation was seen with condor_submit -dry-run 23.9.6 (test_dryrun_condor.py
compares the corpus files that carry these forms with the real tool)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llic.submit import (
    Mode,
    SubmitFile,
    SubmitFileError,
    TaskSpec,
    parse_submit_file,
    parse_submit_text,
    parser,
    sources,
)
from llic.submit.conditionals import CONDOR_VERSION

ENV = {"HOME": "/home/u", "PATH": "/usr/bin:/bin", "PAGER": "less", "MULTI": "a\nb", "SEMI": "x;y"}


def parse(tmp_path: Path, text: str, name: str = "job.sub") -> SubmitFile:
    (tmp_path / name).write_text(text)
    return parse_submit_file(name, cwd=tmp_path, environ=ENV)


def tasks(tmp_path: Path, text: str) -> list[TaskSpec]:
    return parse(tmp_path, text).tasks(1)


def args(tmp_path: Path, text: str) -> list[list[str]]:
    return [list(t.arguments) for t in tasks(tmp_path, text)]


def error(tmp_path: Path, text: str) -> SubmitFileError:
    with pytest.raises(SubmitFileError) as info:
        parse(tmp_path, text).tasks(1)
    return info.value


# -- should_transfer_files / when_to_transfer_output: condor's tables


@pytest.mark.parametrize(
    ("should", "mode"),
    [
        ("true", Mode.TRANSFER),
        ("ALWAYS", Mode.TRANSFER),
        ("Yes", Mode.TRANSFER),
        ("auto", Mode.TRANSFER),
        ("false", Mode.NFS),
        ("never", Mode.NFS),
    ],
)
def test_should_transfer_files_reads_condors_words(tmp_path: Path, should: str, mode: Mode) -> None:
    sub = parse(tmp_path, f"executable = /bin/echo\nshould_transfer_files = {should}\nqueue\n")
    assert sub.blocks[0].mode is mode


def test_should_transfer_files_refuses_what_condor_refuses(tmp_path: Path) -> None:
    for value in ("1", "t", "maybe"):
        e = error(tmp_path, f"executable = /bin/echo\nshould_transfer_files = {value}\nqueue\n")
        assert e.line == 2 and f"invalid value ({value}) for ShouldTransferFiles" in str(e)
    # condor_submit 23.9 reads `never` for when_to_transfer_output as ON_EXIT (past its table's
    # end): with should_transfer_files = NO that is a contradiction it refuses
    no = "executable = /bin/echo\nshould_transfer_files = NO\n"
    e = error(tmp_path, no + "when_to_transfer_output = never\nqueue\n")
    assert e.line == 3 and "specified as never yet ShouldTransferFiles defined as NO" in str(e)
    assert parse(tmp_path, no + "when_to_transfer_output = NONE\nqueue\n").blocks[0].mode is Mode.NFS


# -- a queue variable named after a submit command is that command


def test_queue_variables_named_after_commands(tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    (tmp_path / "lines.txt").write_text("a b\nc d\n")
    got = tasks(tmp_path, "executable = /bin/echo\ninput = x\nqueue input in (A, B, C)\n")
    assert [t.input for t in got] == ["A", "B", "C"]
    got = tasks(tmp_path, "executable = /bin/echo\nqueue arguments from lines.txt\n")
    assert [t.arguments for t in got] == [("a", "b"), ("c", "d")]
    sub = parse(tmp_path, "executable = /bin/echo\nqueue InitialDir in (d1, d2)\n")
    assert [t.initialdir for t in sub.tasks(1)] == [f"{tmp_path}/d1", f"{tmp_path}/d2"]
    assert sub.blocks[0].mode is Mode.TRANSFER_INITIALDIR
    got = tasks(
        tmp_path,
        "executable = /bin/echo\nshould_transfer_files = YES\nqueue transfer_input_files in (in.0, in.1)\n",
    )
    assert [t.transfer_input_files for t in got] == [("in.0",), ("in.1",)]
    # after the statement the variable is <Queue_item>, for the command too
    got = tasks(tmp_path, "executable = /bin/echo\nqueue input in (A)\nqueue\n")
    assert [t.input for t in got] == ["A", "<Queue_item>"]


# -- $F with f, $REAL


def test_full_path_flag_is_relative_to_the_initialdir(tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    got = args(
        tmp_path,
        "executable = /bin/echo\nf = sub/file.txt\ng = ./x.dat\ninitialdir = d1\n"
        "arguments = $Ff(f) $Ffp(f) $Ffn(f) $Ffd(f) $Ff(g) $Ff(/abs/p) $Fnf(g)\nqueue\n",
    )
    iwd = f"{tmp_path}/d1"
    assert got[0] == [
        f"{iwd}/sub/file.txt",
        f"{iwd}/sub/",
        "file",
        "sub/",
        f"{iwd}/x.dat",
        "/abs/p",
        "x",
    ]


def test_real_macro(tmp_path: Path) -> None:
    got = args(
        tmp_path,
        "executable = /bin/echo\na = 3\nb = 2.5e3\nc = 7/2\nd = 7.0/2\n"
        "arguments = $REAL(a) $REAL(b) $REAL(c) $REAL(d) $REAL(0.1) $REAL(a,%.3f) $REAL(b,%g) "
        "$REAL(1e20) $REAL(-0.5,%e)\nqueue\n",
    )
    assert got[0] == ["3", "2500", "3", "3.5", "0.1", "3.000", "2500.0", "1E+20", "-5.000000e-01"]
    e = error(tmp_path, "executable = /bin/echo\narguments = $REAL(x)\nqueue\n")
    assert e.line == 2 and "does not evaluate to an real" in str(e)
    e = error(tmp_path, "executable = /bin/echo\narguments = $REAL(1,%d)\nqueue\n")
    assert "not a valid format specifier" in str(e)


def test_eval_and_string_macros(tmp_path: Path) -> None:
    got = args(
        tmp_path,
        'executable = /bin/echo\nX = 4\nS = "hello"\n'
        "arguments = $EVAL(1 + 2) $EVAL(X) $EVAL($(X) * 2) $EVAL(ProcId + 1) $EVAL(1.5*2) $EVAL(true) "
        "$EVAL({1,2}) $STRING(S) $STRING(nope) $STRING(1+2)\nqueue\n",
    )
    # `$EVAL($(X) * 2)` ends at the first ')', as in condor_submit; ProcId is no attribute there
    evaluated = ["3", "4", "$(X", "*", "2)", "undefined", "3.000000000000000E+00", "true", "{", "1,2", "}"]
    assert got[0] == [*evaluated, "hello", "nope", "1+2"]


# -- if / elif / else / endif


@pytest.mark.parametrize(
    ("lines", "taken"),
    [
        ("if defined Process", True),
        ("if defined OPSYSVER", True),  # a configuration macro: defined, though llic cannot expand it
        ("FOO =\nif defined FOO", False),  # defined but empty
        ("X = $(Y)\nif defined X", True),  # the raw value counts
        ("if defined 3", True),
        ("if defined use ROLE:Personal", True),
        ("if defined use ROLE:Nope", False),
        ("if version >= 8.1.6", True),
        (f"if version > {'.'.join(map(str, CONDOR_VERSION))}", False),
        ("if version == 23.9", True),  # the sub-minor version defaults to the running one
        ("if version < v24.0.0", True),
        ("if $(UNDEFINED)", False),
        ("X = yes\nif $(X)", True),
        ("X = 0.0\nif $(X)", False),
        ("if ! defined FOO", True),
        ("if -1", True),
        ("if TRUE", True),
    ],
)
def test_conditions(tmp_path: Path, lines: str, taken: bool) -> None:
    text = f"executable = /bin/echo\n{lines}\nR = yes\nelse\nR = no\nendif\narguments = $(R)\nqueue\n"
    got = args(tmp_path, text)
    assert got == [["yes" if taken else "no"]]


def test_elif_nesting_colons_and_skipped_queues(tmp_path: Path) -> None:
    text = "executable = /bin/echo\nif 0\nR = a\nelif 1\nR = b\nelif 1\nR = c\nelse\nR = d\nendif\n"
    assert args(tmp_path, text + "arguments = $(R)\nqueue\n") == [["b"]]
    text = "executable = /bin/echo\nif 0\nif 1\nR = a\nelse\nR = b\nendif\nelse\n:R = c\nendif\n"
    assert args(tmp_path, text + "arguments = $(R)\nqueue\n") == [["c"]]
    text = "executable = /bin/echo\n:if true\nR = a\nendif\nif 0\nqueue 5\nendif\narguments = $(R)\nqueue\n"
    assert args(tmp_path, text) == [["a"]]
    assert args(tmp_path, "executable = /bin/echo\nif 1\narguments = open\nqueue\n") == [["open"]]


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        ("X = 3\nif $(X) == 3", 3, "complex conditionals are not supported"),
        ("X = abc\nif $(X)", 3, "expression is not a conditional"),
        ("if version >= 5.1", 2, "the version literal is invalid"),
        ("if defined X Y", 2, "defined argument must be param name"),
        ("if 0\nelse\nelse", 4, "else is not allowed after else"),
        ("endif", 2, "endif without matching if"),
        ("elif 1", 2, "elif without matching if"),
        (":R = colon", 2, "cannot parse"),
        ("error : stop $(Process)", 2, "stop 0"),
    ],
)
def test_conditions_condor_refuses(tmp_path: Path, lines: str, line: int, words: str) -> None:
    e = error(tmp_path, f"executable = /bin/echo\n{lines}\nqueue\n")
    assert e.line == line and words in str(e), str(e)


def test_warning_and_multi_line_values(tmp_path: Path) -> None:
    sub = parse(
        tmp_path,
        "executable = /bin/echo\nwarning : careful\nR @= END\nline one\n# a comment\nline two \\\n  cont\n"
        "@END\narguments = $(R)\nqueue\n",
    )
    assert sub.warnings == ["job.sub:2: careful"]
    assert sub.tasks(1)[0].arguments == ("line", "one", "line", "two", "cont")
    again = parse_submit_text(sub.blocks[0].submit_text(), environ={})
    assert again.tasks(1) == sub.tasks(1)


# -- include


def test_include_files_and_commands(tmp_path: Path) -> None:
    (tmp_path / "inc.part").write_text("arguments = from_inc $(Process)\nX = inc\n")
    gen = tmp_path / "gen.sh"
    gen.write_text('#!/bin/sh\necho "arguments = gen $1"\necho "output = o.$2"\n')
    gen.chmod(0o755)
    assert args(tmp_path, "executable = /bin/echo\ninclude : inc.part\nqueue\n") == [["from_inc", "0"]]
    got = args(tmp_path, "executable = /bin/echo\nF = inc.part\n@include : $(F)\nqueue\n")
    assert got == [["from_inc", "0"]]
    assert args(tmp_path, "executable = /bin/echo\ninclude ifexist : missing.part\nqueue\n") == [[]]
    got = tasks(tmp_path, "executable = /bin/echo\ninclude : ./gen.sh A B |\nqueue\n")
    assert (got[0].arguments, got[0].output) == (("gen", "A"), "o.B")
    got = tasks(tmp_path, "executable = /bin/echo\ninclude command : ./gen.sh C D\nqueue\n")
    assert got[0].arguments == ("gen", "C")
    got = tasks(tmp_path, "executable = /bin/echo\ninclude output into cache.out : ./gen.sh E F\nqueue\n")
    assert got[0].arguments == ("gen", "E")
    assert (tmp_path / "cache.out").read_text() == "arguments = gen E\noutput = o.F\n"
    got = tasks(tmp_path, "executable = /bin/echo\ninclude command into cache.out : ./gen.sh G H\nqueue\n")
    assert got[0].arguments == ("gen", "E")  # the file exists: the command does not run again


@pytest.mark.parametrize(
    ("lines", "where", "words"),
    [
        ("include : missing.part", "job.sub:2", "can't open file missing.part"),
        ("include : no-such-llic-command x |", "job.sub:2", "not a valid command, errno=2"),
        ("include : ./queue.sh |", "./queue.sh |:1", "Queue statement not allowed in include file"),
        ("include foo : inc.part", "job.sub:2", "unexpected keyword(s) 'foo' after include"),
        ("include : a | b", "job.sub:2", "| must be at the end"),
        ("include : bad.part", "bad.part:2", "Illegal Identifier"),
        ("include : fifo.part", "job.sub:2", "can't read file fifo.part: not a regular file"),
        ("queue from fifo.part", "job.sub:2", "can't read file fifo.part: not a regular file"),
    ],
)
def test_include_errors_name_the_source_and_line(tmp_path: Path, lines: str, where: str, words: str) -> None:
    os.mkfifo(tmp_path / "fifo.part")  # a plain open blocks until a writer comes
    script = tmp_path / "queue.sh"
    script.write_text("#!/bin/sh\necho queue\n")
    script.chmod(0o755)
    (tmp_path / "bad.part").write_text("x = 1\nbad-name = 2\n")
    e = error(tmp_path, f"executable = /bin/echo\n{lines}\nqueue\n")
    assert str(e).startswith(f"{where}: ") and words in str(e), str(e)


def test_a_submit_file_that_is_a_fifo_or_too_large_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(tmp_path / "job.sub")
    with pytest.raises(SubmitFileError, match=r"^job.sub: cannot read the submit file: not a regular file$"):
        parse_submit_file("job.sub", cwd=tmp_path, environ={})
    (tmp_path / "big.sub").write_text("executable = /bin/echo\nqueue\n")
    (tmp_path / "big.part").write_text("arguments = x\n")
    monkeypatch.setattr(sources, "MAX_SOURCE_BYTES", 10)
    monkeypatch.setattr(parser, "MAX_SOURCE_BYTES", 10)
    with pytest.raises(SubmitFileError, match=r"^big.sub: cannot read the submit file: 29 bytes, more than"):
        parse_submit_file("big.sub", cwd=tmp_path, environ={})
    with pytest.raises(SubmitFileError, match=r"^job.sub:1: include big.part: can.t read file big.part: 14 "):
        parse_submit_text("include : big.part\n", name="job.sub", cwd=tmp_path, environ={})


# -- queue ... from CMD |


def test_queue_from_a_command(tmp_path: Path) -> None:
    assert args(tmp_path, "executable = /bin/echo\narguments = $(Item)\nqueue from seq 7 9 |\n") == [
        ["7"],
        ["8"],
        ["9"],
    ]
    got = args(tmp_path, "executable = /bin/echo\narguments = $(Item)\nqueue 2 from [1:] seq 1 3 |\n")
    assert got == [["2"], ["2"], ["3"], ["3"]]
    assert parse(tmp_path, "executable = /bin/echo\nqueue from /bin/false |\n").blocks == []
    sub = parse(tmp_path, "executable = /bin/echo\narguments = $(Item)\nqueue from seq 1 2 |\n")
    again = parse_submit_text(sub.blocks[0].submit_text(), cwd="/nonexistent", environ={})
    assert again.tasks(1) == sub.tasks(1)  # the master gets the items, it does not run the command
    e = error(tmp_path, "executable = /bin/echo\nqueue from no-such-llic-command |\n")
    assert e.line == 2 and "not a valid command" in str(e)


# -- getenv with a list of names


def test_getenv_lists(tmp_path: Path) -> None:
    got = tasks(
        tmp_path,
        "executable = /bin/echo\ngetenv = PA*, !PATH, HO*E, MULTI\nqueue\n"
        "getenv = yes\nenvironment = A=1;B=2\nqueue\n"  # `yes` is no boolean to condor: a name
        "getenv = *A*\nqueue\n"
        "getenv = true\nqueue\n",
    )
    assert [dict(t.environment) for t in got] == [
        {"PAGER": "less", "HOME": "/home/u"},  # a value with a newline is never taken
        {"PAGER": "less", "HOME": "/home/u", "A": "1", "B": "2"},
        {"PAGER": "less", "HOME": "/home/u", "A": "1", "B": "2", "PATH": "/usr/bin:/bin"},
        # old syntax in the cluster: a value with `;` is not taken
        {"PAGER": "less", "HOME": "/home/u", "A": "1", "B": "2", "PATH": "/usr/bin:/bin"},
    ]


# -- memory: what a 100,000-task file costs


def test_tasks_stream_and_share_what_they_have_in_common(tmp_path: Path) -> None:
    (tmp_path / "items.txt").write_text("".join(f"i{n}\n" for n in range(50)))
    sub = parse(
        tmp_path,
        "executable = /bin/echo\narguments = $(Item)\ngetenv = true\nmax_retries = 2\n"
        "should_transfer_files = YES\ntransfer_input_files = common, in/$(Item)\nqueue from items.txt\n",
    )
    block = sub.blocks[0]
    streamed = list(block.iter_tasks(1))
    assert block._tasks == {}  # iter_tasks keeps nothing (master_submitter --dry-run, the submission)
    first, last = streamed[0], streamed[-1]
    assert first.environment == {k: v for k, v in ENV.items() if "\n" not in v}
    assert first.environment is last.environment
    assert first.policy is last.policy and first.initialdir is last.initialdir
    assert first.executable is last.executable
    assert block.tasks(1) == streamed


def test_selected_items_follow_the_slice_and_give_the_last_row() -> None:
    """The items a queue statement's slice selects are made as they are read (not listed: a
    100,000-line file would hold a tuple per line); length, truth and the last row as a list's."""
    from llic.submit.queue import parse_queue_args

    items = [f"i{n}" for n in range(10)]
    for text, rows in (("", list(range(10))), ("[2:8:3]", [2, 5]), ("[-3:]", [7, 8, 9]), ("[20:]", [])):
        qa = parse_queue_args(f"item in {text} ({' '.join(items)})")
        selected = qa.selected_items()
        assert [row for row, _ in selected] == rows
        assert [item for _, item in selected] == [items[r] for r in rows]
        assert len(selected) == len(rows) and bool(selected) is bool(rows)
        if rows:
            assert selected.last() == (rows[-1], items[rows[-1]])
        else:
            with pytest.raises(IndexError):
                selected.last()
    plain = parse_queue_args("3").selected_items()
    assert list(plain) == [(0, None)] and len(plain) == 1 and plain.last() == (0, None)
