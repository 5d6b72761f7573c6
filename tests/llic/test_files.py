"""llic.files: safe joining, directory snapshots, choosing and placing output files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llic import files as f
from llic.protocol import Task, file_entry

# ---------------------------------------------------------------------------------------------
# safe_join


def test_safe_join_accepts_names_inside(tmp_path: Path) -> None:
    assert f.safe_join(tmp_path, "a") == tmp_path / "a"
    assert f.safe_join(tmp_path, "a/b/c.txt") == tmp_path / "a/b/c.txt"
    assert f.safe_join(tmp_path, "./a//b") == tmp_path / "a/b"
    assert f.safe_join(str(tmp_path), Path("x")) == tmp_path / "x"


@pytest.mark.parametrize(
    "rel", ["../x", "a/../../x", "a/..", "..", "/etc/passwd", "//etc/passwd", "", ".", "./", "a\x00b"]
)
def test_safe_join_refuses_escapes(tmp_path: Path, rel: str) -> None:
    with pytest.raises(f.UnsafePath):
        f.safe_join(tmp_path, rel)


def test_safe_join_refuses_non_strings(tmp_path: Path) -> None:
    with pytest.raises(f.UnsafePath):
        f.safe_join(tmp_path, b"a")  # type: ignore[arg-type]


def test_safe_join_refuses_symlink_escapes(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "etc").symlink_to("/etc")
    (base / "up").symlink_to("..")
    (base / "abs").symlink_to(tmp_path / "elsewhere")
    assert f.safe_join(base, "up/base/x") == base / "up/base/x"  # out and back in: harmless
    for rel in ["etc/passwd", "etc", "up/other", "up", "abs/file"]:
        with pytest.raises(f.UnsafePath, match="symlink"):
            f.safe_join(base, rel)


def test_safe_join_follows_symlinks_that_stay_inside(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "alias").symlink_to("sub")
    assert f.safe_join(real, "alias/x") == real / "alias/x"
    linked_base = tmp_path / "linked"
    linked_base.symlink_to(real)  # the base itself may be reached through a symlink
    assert f.safe_join(linked_base, "sub/x") == linked_base / "sub/x"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "/", "..", "\x00", "é"]), max_size=20).map("".join))
def test_safe_join_never_leaves_the_base(rel: str) -> None:
    base = "/srv/llic/base"
    try:
        joined = f.safe_join(base, rel)
    except f.UnsafePath:
        return
    assert os.path.commonpath([base, os.path.normpath(joined)]) == base
    assert os.path.normpath(joined) != base


@pytest.mark.parametrize("rel", ["a", "a/b", "é/ü.txt", "a b/c"])
def test_check_relpath_accepts_canonical(rel: str) -> None:
    assert f.check_relpath(rel) == rel


@pytest.mark.parametrize("rel", ["./a", "a//b", "a/", "a/./b", "../a", "/a", "", 7, "x" * 5000])
def test_check_relpath_refuses_the_rest(rel: object) -> None:
    with pytest.raises(f.UnsafePath):
        f.check_relpath(rel)


# ---------------------------------------------------------------------------------------------
# DirInfo and output selection


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_dirinfo_snapshot_lists_regular_files_only(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "aa")
    write(tmp_path / "sub/deep/b.txt", "b")
    (tmp_path / "link").symlink_to(tmp_path / "a.txt")
    (tmp_path / "dirlink").symlink_to(tmp_path / "sub")
    (tmp_path / "empty").mkdir()
    info = f.DirInfo.snapshot(tmp_path)
    assert sorted(info.files) == ["a.txt", "sub/deep/b.txt"]
    assert info.files["a.txt"][0] == 2
    assert sorted(f.DirInfo.snapshot(tmp_path, recursive=False).files) == ["a.txt"]
    assert f.DirInfo.snapshot(tmp_path / "missing").files == {}


def test_changed_files_new_and_modified(tmp_path: Path) -> None:
    write(tmp_path / "same", "x")
    write(tmp_path / "grows", "x")
    touched = write(tmp_path / "touched", "x")
    write(tmp_path / "gone", "x")
    before = f.DirInfo.snapshot(tmp_path)
    write(tmp_path / "grows", "xx")
    st_ = touched.stat()
    os.utime(touched, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))  # same size, new mtime
    (tmp_path / "gone").unlink()
    write(tmp_path / "new/inner.txt", "n")
    after = f.DirInfo.snapshot(tmp_path)
    assert f.changed_files(before, after) == ["grows", "new/inner.txt", "touched"]
    assert f.changed_files(before.files, after.files) == ["grows", "new/inner.txt", "touched"]


def test_select_outputs_per_style() -> None:
    before = {"input.txt": (1, 1), "sub/in": (1, 1)}
    after = {
        "input.txt": (1, 1),
        "sub/in": (1, 1),
        "out.txt": (2, 2),
        "sub/new.txt": (3, 3),
        "job.sh": (9, 9),
    }
    assert f.select_outputs(before, after, "condor") == ["job.sh", "out.txt"]
    assert f.select_outputs(before, after, "improved") == ["job.sh", "out.txt", "sub/new.txt"]
    assert f.select_outputs(before, after, "condor", exclude=["job.sh"]) == ["out.txt"]
    # a transfer_output_files list names what goes back, changed or not, directories included
    assert f.select_outputs(before, after, "condor", ["sub", "input.txt", "/etc/passwd", "../x"]) == [
        "input.txt",
        "sub/in",
        "sub/new.txt",
    ]
    assert f.select_outputs(before, after, "improved", ["sub/"]) == ["sub/in", "sub/new.txt"]
    with pytest.raises(ValueError, match="style"):
        f.select_outputs(before, after, "fancy")


# ---------------------------------------------------------------------------------------------
# place_outputs


def make_task(iwd: Path, output: str | None = "logs/job.out", error: str | None = "logs/job.err") -> Task:
    return Task(process=4, executable="/bin/sh", initialdir=str(iwd), output=output, error=error)


def pairs(*items: tuple[str, bytes, str]) -> list[tuple[dict[str, object], bytes]]:
    return [(file_entry(path, data, kind=kind), data) for path, data, kind in items]


RETURNED = (
    ("out.txt", b"top", "file"),
    ("sub/dir/nested.txt", b"nested", "file"),
    ("_condor_stdout", b"stdout text", "stdout"),
    ("_condor_stderr", b"stderr text", "stderr"),
)


def test_place_outputs_condor_style_flattens_into_iwd(tmp_path: Path) -> None:
    placed = f.place_outputs(make_task(tmp_path), pairs(*RETURNED), "condor")
    assert (tmp_path / "out.txt").read_bytes() == b"top"
    assert (tmp_path / "nested.txt").read_bytes() == b"nested"
    assert (tmp_path / "job.out").read_bytes() == b"stdout text"  # output's base name, in iwd
    assert (tmp_path / "job.err").read_bytes() == b"stderr text"
    assert not (tmp_path / "sub").exists() and not (tmp_path / "logs").exists()
    assert len(placed) == 4


def test_place_outputs_improved_style_keeps_directories(tmp_path: Path) -> None:
    f.place_outputs(make_task(tmp_path), pairs(*RETURNED), "improved")
    assert (tmp_path / "out.txt").read_bytes() == b"top"
    assert (tmp_path / "sub/dir/nested.txt").read_bytes() == b"nested"
    assert (tmp_path / "logs/job.out").read_bytes() == b"stdout text"  # directories created
    assert (tmp_path / "logs/job.err").read_bytes() == b"stderr text"


def test_place_outputs_dest_root_dict_task_and_absolute_output(tmp_path: Path) -> None:
    absolute = tmp_path / "abs" / "stdout.log"
    task = make_task(tmp_path / "nowhere", output=str(absolute)).to_dict()
    f.place_outputs(
        task, pairs(("a", b"1", "file"), ("o", b"2", "stdout")), "improved", dest_root=tmp_path / "r"
    )
    assert (tmp_path / "r/a").read_bytes() == b"1"
    assert absolute.read_bytes() == b"2"


def test_place_outputs_replaces_atomically_with_mode(tmp_path: Path) -> None:
    write(tmp_path / "out.txt", "old")
    entry = file_entry("out.txt", b"new", mode=0o750)
    f.place_outputs(make_task(tmp_path), [(entry, b"new")], "condor")
    assert (tmp_path / "out.txt").read_bytes() == b"new"
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left behind


@pytest.mark.hostile
def test_a_returned_file_never_gets_set_id_sticky_or_world_writable_bits(tmp_path: Path) -> None:
    """Row 9: main wrote an agent's mode 0o4777 as 0o777 in the user's initialdir."""
    task = Task(process=0, executable="/bin/sh", initialdir=str(tmp_path), output="job.out")
    for claimed, umask, expected in [
        (0o4777, 0o022, 0o755),
        (0o6777, 0o077, 0o700),
        (0o1777, 0o002, 0o775),
        (0o777, 0o000, 0o775),  # whatever the umask, never writable by others
        (0o640, 0o022, 0o640),
        ("0o777", 0o022, 0o644),  # not a number: the default mode
    ]:
        assert f.output_mode(claimed, umask) == expected
        name = f"f{claimed!s}-{umask:o}"
        entry = {"path": name, "size": 1, "mode": claimed, "kind": "file"}
        f.place_outputs(task, [(entry, b"x")], "condor", umask=umask)
        assert (tmp_path / name).stat().st_mode & 0o7777 == expected
    # The default umask is the process's (the master runs as the submitting user).
    assert f.current_umask() == (mask := os.umask(0o022)) and os.umask(mask) == 0o022
    f.place_outputs(task, [(file_entry("stdout", b"o", mode=0o4777, kind="stdout"), b"o")], "condor")
    assert (tmp_path / "job.out").stat().st_mode & 0o7777 == 0o777 & ~mask & ~0o002


def test_place_outputs_refuses_escapes_but_places_the_rest(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    outside = tmp_path / "outside"
    outside.mkdir()
    iwd.mkdir()
    (iwd / "trap").symlink_to(outside)
    files = [
        ({"path": "../escape", "size": 1}, b"x"),
        ({"path": "/etc/llic-test", "size": 1}, b"x"),
        ({"path": "trap/x", "size": 1}, b"x"),
        ({"path": "ok.txt", "size": 1}, b"k"),
        ({"path": "weird", "size": 1, "kind": "socket"}, b"x"),
    ]
    with pytest.raises(f.OutputPlacementError) as info:
        f.place_outputs(make_task(iwd), files, "improved")
    assert [path for path, _ in info.value.errors] == ["../escape", "/etc/llic-test", "trap/x", "weird"]
    assert info.value.placed == [iwd / "ok.txt"]
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "escape").exists() and not Path("/etc/llic-test").exists()


@pytest.mark.hostile
def test_place_outputs_writes_only_what_htcondor_would_return(tmp_path: Path) -> None:
    """An agent that returns more than the task's outputs: with transfer_output_files, only the
    listed files (and what is under a listed directory) are placed; without it, any new file,
    but never over the task's executable or inputs, nor the protected paths (other tasks'
    inputs, the submit description), nor under an input directory. Each refusal names the file."""
    for name in ("job.sub", "in.0", "in.1", "run.sh", "data/x"):
        write(tmp_path / name, "original")
    listed = Task(
        0,
        "run.sh",
        str(tmp_path),
        transfer_input_files=("in.0", "data"),
        transfer_output_files=("out.0", "res"),
    )
    returned = [
        ("out.0", b"ok", "file"),
        ("res/a", b"ok", "file"),
        ("x/job.sub", b"evil", "file"),
        ("in.1", b"evil", "file"),
        ("run.sh", b"evil", "file"),
        ("new.txt", b"evil", "file"),
    ]
    with pytest.raises(f.OutputPlacementError) as info:
        f.place_outputs(listed, pairs(*returned), "condor")
    assert info.value.placed == [tmp_path / "out.0", tmp_path / "a"]
    assert [p for p, _ in info.value.errors] == ["x/job.sub", "in.1", "run.sh", "new.txt"]
    assert all("transfer_output_files" in why for _, why in info.value.errors)

    unlisted = Task(0, "run.sh", str(tmp_path), input="in.0", transfer_input_files=("data",))
    protected = frozenset({str(tmp_path / "job.sub"), str(tmp_path / "in.1")})
    returned = [
        ("new.txt", b"ok", "file"),
        ("job.sub", b"evil", "file"),
        ("in.0", b"evil", "file"),
        ("in.1", b"evil", "file"),
        ("run.sh", b"evil", "file"),
        ("data/x", b"evil", "file"),
    ]
    with pytest.raises(f.OutputPlacementError) as info:
        f.place_outputs(unlisted, pairs(*returned), "improved", protected=protected)
    assert info.value.placed == [tmp_path / "new.txt"]
    assert [p for p, _ in info.value.errors] == ["job.sub", "in.0", "in.1", "run.sh", "data/x"]
    for name in ("job.sub", "in.0", "in.1", "run.sh", "data/x"):
        assert (tmp_path / name).read_text() == "original"


def test_place_outputs_stream_without_output_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(f.OutputPlacementError, match="no output"):
        f.place_outputs(make_task(tmp_path, output=None), pairs(("o", b"x", "stdout")), "condor")


def test_stream_destination() -> None:
    assert f.stream_destination("/iwd", "a/b.out", "condor") == Path("/iwd/b.out")
    assert f.stream_destination("/iwd", "a/b.out", "improved") == Path("/iwd/a/b.out")
    assert f.stream_destination("/iwd", "../logs/b.out", "improved") == Path("/logs/b.out")
    assert f.stream_destination("/iwd", "/var/log/x", "condor") == Path("/var/log/x")
