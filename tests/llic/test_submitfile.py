"""llic.submit without HTCondor: parsing, macro expansion, queue forms, errors naming file:line.

The behaviours pinned here were seen in condor_submit 23.9 (see test_dryrun_condor.py for the
comparison against the real tool).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llic.cli import master_submitter
from llic.submit import (
    Mode,
    SubmitFile,
    SubmitFileError,
    TaskSpec,
    parse_arguments,
    parse_environment,
    parse_submit_file,
    parse_submit_text,
)

ENV = {"HOME": "/home/u", "EMPTY": ""}


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


# -- lines and commands


def test_comments_continuations_and_case_insensitive_commands(tmp_path: Path) -> None:
    got = tasks(
        tmp_path,
        "# a comment\n"
        "EXECUTABLE = /bin/echo\n"
        "\n"
        "Arguments = one \\\n"
        "     two \\\n"
        "# commented out \\\n"
        "     three\n"
        "# a comment ending in a backslash does not continue \\\n"
        "OUTPUT = out\n"
        "QUEUE\n",
    )
    assert got[0].arguments == ("one", "two", "three")
    assert got[0].executable == "/bin/echo" and got[0].output == "out"


def test_plus_attributes_and_names_made_of_macros(tmp_path: Path) -> None:
    sub = parse(
        tmp_path,
        "executable = /bin/echo\nkind = out\n$(kind)_file = result\noutput = $(out_file)\n"
        '+Project = "x"\nMY.Other = 3\n-Gone =\nqueue\n',
    )
    block = sub.blocks[0]
    assert block.tasks(1)[0].output == "result"
    assert block.agent_attributes() == {"MY.Project": '"x"', "MY.Other": "3"}


# -- macros


def test_macros_expand_lazily_with_defaults_and_self_reference(tmp_path: Path) -> None:
    got = args(
        tmp_path,
        "executable = /bin/echo\n"
        "a = $(b)\n"  # b is defined later: expansion happens when the value is used
        "b = late\n"
        "flags = -x\n"
        "flags = $(flags) -y\n"  # a self reference is expanded when the line is read
        "empty =\n"
        "arguments = $(a) $(flags) [$(empty:dflt)] [$(nothing)] $$(Kept) $(DOLLAR)(x) $(A)\n"
        "queue\n",
    )
    assert args and got[0] == ["late", "-x", "-y", "[dflt]", "[]", "$$(Kept)", "$(x)", "late"]


def test_env_and_filename_and_other_macro_functions(tmp_path: Path) -> None:
    got = args(
        tmp_path,
        "executable = /bin/echo\n"
        "f = some/dir/file.tar.gz\n"
        "arguments = $ENV(HOME) $ENV(NOT_SET) $ENV(NOT_SET:d) [$ENV(EMPTY:d)] "
        "$Fn(f) $Fx(f) $Fbx(f) $Fp(f) $Fd(f) $Fdd(f) $BASENAME(f) $DIRNAME(f) $Fn(plain.txt) "
        "$SUBSTR(f,5) $SUBSTR(f,-6,3) $CHOICE(1,a,b,c) $INT(Process,%03d)\n"
        "queue\n",
    )
    assert got[0] == [
        "/home/u",
        "UNDEFINED",
        "d",
        "[]",  # set but empty: the default is not used (condor 23.9)
        "file.tar",
        ".gz",
        "gz",
        "some/dir/",
        "dir/",
        "some/dir/",
        "file.tar.gz",
        "some/dir/",
        "plain",
        "dir/file.tar.gz",
        "tar",
        "b",
        "000",
    ]


def test_unsupported_macro_functions_are_refused_with_their_line(tmp_path: Path) -> None:
    e = error(tmp_path, "executable = /bin/echo\narguments = $RANDOM_CHOICE(a,b)\nqueue\n")
    assert str(e).startswith("job.sub:2: arguments:") and "RANDOM_CHOICE" in str(e)
    e = error(tmp_path, "executable = /bin/echo\nx = $(y)\ny = $(x)\narguments = $(x)\nqueue\n")
    assert e.line == 4 and "does not end" in str(e)


# -- queue forms


def test_queue_n_counts_steps_and_processes(tmp_path: Path) -> None:
    got = args(
        tmp_path,
        "executable = /bin/echo\narguments = $(Process) $(Step) $(Row) $(ItemIndex) $(Cluster)\nqueue 3\n",
    )
    assert got == [["0", "0", "0", "0", "1"], ["1", "1", "0", "0", "1"], ["2", "2", "0", "0", "1"]]


def test_queue_n_var_in_list(tmp_path: Path) -> None:
    got = args(
        tmp_path, "executable = /bin/echo\narguments = $(v) $(ItemIndex) $(Step)\nqueue 2 v in (a, b  c)\n"
    )
    assert got == [
        ["a", "0", "0"],
        ["a", "0", "1"],
        ["b", "1", "0"],
        ["b", "1", "1"],
        ["c", "2", "0"],
        ["c", "2", "1"],
    ]


def test_queue_in_without_parentheses_and_on_several_lines(tmp_path: Path) -> None:
    assert args(tmp_path, "executable = /bin/echo\narguments = $(Item)\nqueue in x y\n") == [["x"], ["y"]]
    got = args(tmp_path, "executable = /bin/echo\narguments = $(Item)\nqueue in (\n a b,\n# c\n d\n)\n")
    assert got == [["a"], ["b"], ["d"]]


def test_several_variables_split_like_condor_submit(tmp_path: Path) -> None:
    got = args(
        tmp_path,
        "executable = /bin/echo\narguments = \"'[$(a)]' '[$(b)]' '[$(c)]'\"\n"
        "queue a,b c from (\n  1 2 3 4\n  5,6\n\n  7\t, 8\n)\n",
    )
    assert got == [
        ["[1]", "[2]", "[3 4]"],  # the last variable takes the rest
        ["[5]", "[6]", "[3 4]"],  # a missing field keeps its previous value
        ["[]", "[6]", "[3 4]"],  # a blank line is an item
        ["[7]", "[]", "[8]"],  # each field ends at the next separator; only blanks are skipped after one
    ]


def test_queue_from_file_reads_every_line(tmp_path: Path) -> None:
    (tmp_path / "items.txt").write_text("x 1\n# y 2\n\nlong \\\n  line\n")
    got = args(tmp_path, "executable = /bin/echo\narguments = \"'$(n)/$(v)'\"\nqueue n v from items.txt\n")
    assert got == [["x/1"], ["#/y 2"], ["/y 2"], ["long/line"]]


def test_slices_select_items_but_item_index_counts_all(tmp_path: Path) -> None:
    got = args(
        tmp_path, "executable = /bin/echo\narguments = $(Item) $(ItemIndex)\nqueue in [1::2] (a b c d e)\n"
    )
    assert got == [["b", "1"], ["d", "3"]]


def test_matching_globs_relative_to_the_working_directory(tmp_path: Path) -> None:
    for name in ("data/b.dat", "data/a.dat", "data/c.txt", "data/sub/keep", "data/.hidden"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    text = "executable = /bin/echo\narguments = $(Item)\nqueue matching {} data/*\n"
    assert args(tmp_path, text.format("files")) == [["data/a.dat"], ["data/b.dat"], ["data/c.txt"]]
    assert args(tmp_path, text.format("dirs")) == [["data/sub/"]]
    assert args(tmp_path, text.format("")) == [["data/a.dat"], ["data/b.dat"], ["data/c.txt"], ["data/sub/"]]
    got = args(tmp_path, "executable = /bin/echo\narguments = $(Item)\nqueue matching data/b* data/*.dat\n")
    assert got == [["data/b.dat"], ["data/a.dat"]]  # sorted per pattern, duplicates dropped
    assert parse(tmp_path, "executable = /bin/echo\nqueue matching none/*\n").blocks == []


def test_queue_counts_are_integer_expressions_and_empty_queues_make_no_block(tmp_path: Path) -> None:
    sub = parse(
        tmp_path, "executable = /bin/echo\nN = 2\nqueue $(N)\nqueue 0\nqueue in ()\nqueue 2 * 3 - 1\n"
    )
    assert [b.num_tasks for b in sub.blocks] == [2, 5]
    assert [b.first_process for b in sub.blocks] == [0, 2]


def test_later_queue_statements_inherit_and_continue_the_cluster(tmp_path: Path) -> None:
    sub = parse(
        tmp_path,
        "executable = /bin/echo\narguments = a $(Item)\ninput = in.0\nqueue in (x)\n"
        "arguments = b $(Item)\nqueue\n"
        "input =\narguments =\nqueue\n"
        "executable = /bin/cat\nqueue 2\n",
    )
    got = [(t.cluster, t.process, t.executable, t.arguments, t.input) for t in sub.tasks(1)]
    assert got == [
        (1, 0, "/bin/echo", ("a", "x"), "in.0"),
        (1, 1, "/bin/echo", ("b", "<Queue_item>"), "in.0"),  # the variable of a finished queue
        (1, 2, "/bin/echo", ("a", "x"), "in.0"),  # emptied: the first job's values
        (2, 0, "/bin/cat", ("a", "x"), "in.0"),  # a new executable starts a new cluster
        (2, 1, "/bin/cat", ("a", "x"), "in.0"),
    ]
    assert [b.starts_cluster for b in sub.blocks] == [True, False, False, True]


# -- arguments, environment, files


def test_argument_syntaxes() -> None:
    assert parse_arguments("\"a 'b c' 'it''s' \"\"q\"\" ''\"") == ["a", "b c", "it's", '"q"', ""]
    assert parse_arguments('old \\"x\\"   y') == ["old", '"x"', "y"]
    for bad, why in (
        ('"a', "Unterminated"),
        ('"a" b', "Unexpected"),
        ('"\'a"', "Unbalanced"),
        ('a"b', "illegal"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_arguments(bad)


def test_environment_syntaxes() -> None:
    assert parse_environment('"A=1 B=\'x y\' C=""q"" D="') == {"A": "1", "B": "x y", "C": '"q"', "D": ""}
    assert parse_environment("A=1; B=two words ;C=") == {"A": "1", "B": "two words ", "C": ""}
    assert parse_environment("|A=1|B=2;3") == {"A": "1", "B": "2;3"}
    with pytest.raises(ValueError, match="Missing '='"):
        parse_environment('"A=1 B"')


def test_environment_merges_over_the_first_job_and_getenv(tmp_path: Path) -> None:
    got = tasks(
        tmp_path,
        'executable = /bin/echo\nenvironment = "A=$(Process) K=k"\nqueue 2\n'
        'environment = "B=2"\ngetenv = true\nqueue\n',
    )
    assert [dict(t.environment) for t in got] == [
        {"A": "0", "K": "k"},
        {"A": "1", "K": "k"},
        {"A": "0", "K": "k", "B": "2", "HOME": "/home/u", "EMPTY": ""},
    ]


def test_initialdir_executable_and_streams(tmp_path: Path) -> None:
    (tmp_path / "run" / "a").mkdir(parents=True)
    (tmp_path / "prog").write_text("#!/bin/sh\n")
    got = tasks(
        tmp_path,
        "executable = ./prog\ninitialdir = run//$(Item)/\ninput = in\noutput = /dev/null\nqueue in (a)\n",
    )[0]
    assert got.executable == f"{tmp_path}/./prog"  # as condor_submit writes it: absolute, not normalized
    assert got.initialdir == f"{tmp_path}/run/a/"
    assert (got.input, got.output, got.error) == ("in", None, None)


def test_transfer_files_and_modes(tmp_path: Path) -> None:
    sub = parse(
        tmp_path,
        "executable = /bin/echo\nshould_transfer_files = YES\n"
        "transfer_input_files = common.txt, in.$(Process)\ninput = stdin.txt\n"
        "transfer_output_files = out.$(Process)\nqueue 2\n",
    )
    block = sub.blocks[0]
    t0, t1 = block.tasks(1)
    assert t1.transfer_input_files == ("common.txt", "in.1") and t1.transfer_output_files == ("out.1",)
    assert block.mode is Mode.TRANSFER
    assert block.common_input_files(1) == ["common.txt", "stdin.txt"]
    assert block.private_input_files(t0) == ["in.0"]
    modes = {
        "should_transfer_files = NO\n": Mode.NFS,
        "should_transfer_files = NO\ninitialdir = .\n": Mode.NFS_INITIALDIR,
        "": Mode.TRANSFER,  # condor's default is IF_NEEDED
        "initialdir = .\n": Mode.TRANSFER_INITIALDIR,
    }
    for extra, mode in modes.items():
        assert parse(tmp_path, f"executable = /bin/echo\n{extra}queue\n").blocks[0].mode is mode
    assert (
        parse(tmp_path, "executable = /bin/echo\ninitialdir = .\ninput = x\nqueue\n")
        .blocks[0]
        .common_input_files(1)
        == []
    )


def test_agent_attributes_must_be_the_same_for_every_task(tmp_path: Path) -> None:
    sub = parse(
        tmp_path,
        'executable = /bin/echo\nrequest_memory = 2 * 1024\nrequirements = Arch == "X86_64"\n'
        '+Group = "g"\nqueue 2\nrequest_cpus = $(Process)\nqueue 2\n',
    )
    assert sub.blocks[0].agent_attributes() == {
        "request_memory": "2 * 1024",
        "requirements": 'Arch == "X86_64"',
        "MY.Group": '"g"',
    }
    with pytest.raises(SubmitFileError, match=r"^job.sub:6: request_cpus differs"):
        sub.blocks[1].agent_attributes()


# -- errors name file and line


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('executable = /bin/echo\nqueue\narguments = "a \'b"\nqueue\n', 3, "Unbalanced quote"),
        ("executable = /bin/echo\nuniverse = scheduler\nqueue\n", 2, "vanilla"),
        ("include : other.sub\n", 1, "include other.sub: can't open file other.sub"),
        ("if true\nelse\nelse\nendif\n", 3, "else is not allowed after else"),
        ("if $(x) == 3\nendif\n", 1, "complex conditionals are not supported"),
        ("executable = /bin/echo\nqueue from (\n a\n", 2, "closing ')'"),
        ("executable = /bin/echo\n\nqueue x y\n", 3, "invalid Queue statement"),
        ("executable /bin/echo\n", 1, "cannot parse"),
        ("exe-cutable = /bin/echo\n", 1, "Illegal Identifier"),
        ("arguments = x\nqueue\n", 2, "No 'executable'"),
        ("executable = /bin/echo\ninitialdir = nowhere\nqueue\n", 2, "No such directory"),
        ("executable = ./missing\nqueue\n", 1, "does not exist"),
        ("executable = /bin/echo\nshould_transfer_files = NO\ntransfer_input_files = a\nqueue\n", 3, "is NO"),
        ("executable = /bin/echo\nshould_transfer_files = MAYBE\nqueue\n", 2, "invalid value"),
        ("executable = /bin/echo\nvalue @= END\nx\nqueue\n", 2, "looking for '@END'"),
        ("executable = /bin/echo\nqueue from no-such-llic-command |\n", 2, "not a valid command"),
        ("executable = /bin/echo\nqueue from nofile.txt\n", 2, "cannot read queue items"),
        ('executable = /bin/echo\nenv = "A=1"\nenvironment2 = "B=2"\nqueue\n', 3, "allow_environment"),
        ('executable = /bin/echo\nenvironment = "A=1 $$(B)"\nqueue\n', 2, "without '='"),
        ("executable = /bin/echo\narguments = $(OPSYSVER)\nqueue\n", 2, "configuration"),
    ],
)
def test_errors_name_the_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    e = error(tmp_path, text)
    assert e.line == line, str(e)
    assert str(e).startswith(f"job.sub:{line}: ") and words in str(e)


# -- what a master is given


def test_submit_text_round_trips_each_block(tmp_path: Path) -> None:
    (tmp_path / "items.txt").write_text("a 1\n#b 2\n")
    sub = parse(
        tmp_path,
        'executable = /bin/echo\narguments = "$(x) $(y) $(Process) $ENV(HOME)"\n'
        'environment = "E=$(Process)"\n'
        "queue x y from items.txt\ninput =\nqueue 2 x in [1:] (p q r)\nexecutable = /bin/cat\nqueue\n",
    )
    assert len(sub.blocks) == 3
    for block in sub.blocks:
        text = block.submit_text()
        again = parse_submit_text(text, name="master.sub", cwd="/elsewhere", environ={})
        cluster = 1 + block.cluster_offset
        assert again.blocks[0].tasks(cluster) == block.tasks(cluster), text
        assert again.blocks[0].first_process == block.first_process


def test_submit_text_keeps_blanks_that_self_references_leave(tmp_path: Path) -> None:
    sub = parse(tmp_path, "executable = /bin/echo\nx = $(x) b\nenvironment = A=1;B=$(x)\nqueue\n")
    assert sub.blocks[0].commands()["x"] == " b"
    again = parse_submit_text(sub.blocks[0].submit_text(), environ={})
    assert again.tasks() == sub.tasks() and sub.tasks()[0].environment == {"A": "1", "B": " b"}


# -- master_submitter --dry-run


def test_master_submitter_dry_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sub").write_text("executable = /bin/echo\narguments = $(Item)\nqueue in (a b)\n")
    assert master_submitter(["--dry-run", "job.sub"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["process"], p["arguments"], p["initialdir"]) for p in printed] == [
        (0, ["a"], str(tmp_path)),
        (1, ["b"], str(tmp_path)),
    ]
    assert set(printed[0]) >= {
        "executable", "arguments", "environment", "input", "output", "error", "initialdir",
        "transfer_input_files", "process",
    }  # fmt: skip

    (tmp_path / "bad.sub").write_text("executable = /bin/echo\nqueue in (\n")
    assert master_submitter(["--dry-run", "bad.sub"]) == 2
    assert "bad.sub:2:" in capsys.readouterr().err


def test_submission_reports_a_bad_file_while_the_pool_is_looked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """master_submitter reads the file while its gateway looks for the schedd (at once, not one
    after the other): a bad file is still one line naming file and line, exit status 2, and a
    pool that cannot be reached is one line too (exit status 1), not a traceback."""
    config = tmp_path / "condor_config"
    config.write_text("COLLECTOR_HOST = 127.0.0.1:1\n")
    monkeypatch.setenv("CONDOR_CONFIG", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.sub").write_text("executable = /bin/echo\nqueue in (\n")
    assert master_submitter(["bad.sub"]) == 2
    assert "bad.sub:2:" in capsys.readouterr().err
    (tmp_path / "good.sub").write_text("executable = /bin/echo\nqueue\n")
    for named in ([], ["-name", "schedd@nowhere"]):  # named: its token is asked for at once, beside
        assert master_submitter(["good.sub", *named]) == 1
        err = capsys.readouterr().err  # (a warning that no token came may come first)
        assert err.splitlines()[-1].startswith("master_submitter: error: ") and "Traceback" not in err, err
