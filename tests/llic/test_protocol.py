"""llic's wire protocol: round trips, and everything malformed refused with ProtocolError."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import types
from typing import Any

import msgpack
import msgpack.fallback
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llic import protocol as p

SECRET = bytes(range(32))
NONCE = b"n" * 32


@pytest.fixture(params=["default", "fallback", "lean"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the installed msgpack, with its pure-Python fallback, and with the
    protocol's own codec the agent uses where msgpack is that fallback (llic/lean_msgpack.py)."""
    if request.param == "fallback":
        fallback = types.SimpleNamespace(
            packb=lambda obj, **kw: msgpack.fallback.Packer(**kw).pack(obj),
            unpackb=msgpack.fallback.unpackb,
        )
        monkeypatch.setattr(p, "msgpack", fallback)
    monkeypatch.setattr(p, "_LEAN", request.param == "lean")
    return request.param


def task(**over: Any) -> p.Task:
    values: dict[str, Any] = {"process": 3, "executable": "/bin/sh", "initialdir": "/data/run"}
    values.update(over)
    return p.Task(**values)


def result(**over: Any) -> p.TaskResult:
    values: dict[str, Any] = {"process": 3, "attempt": 0, "status": "ok", "exit_code": 0}
    values.update(over)
    return p.TaskResult(**values)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def raw(obj: Any) -> bytes:
    return frame(msgpack.packb(obj, use_bin_type=True))


def decode_all(data: bytes, allowed: Any = None) -> list[p.Message]:
    decoder = p.Decoder(allowed)
    decoder.feed(data)
    return list(decoder)


# ---------------------------------------------------------------------------------------------
# round trips


def test_every_message_type_round_trips(impl: str) -> None:
    msgs: list[tuple[dict[str, Any], list[bytes]]] = [
        ({"t": "hello", "agent": "a7", "master": "m1", "version": 1, "nonce_a": NONCE}, []),
        ({"t": "challenge", "nonce_m": NONCE, "mac_m": b"m" * 32}, []),
        ({"t": "auth", "mac_a": b"a" * 32}, []),
        ({"t": "welcome", "window": 6}, []),
        ({"t": "refused", "reason": "wrong secret"}, []),
        ({"t": "task", "task": task(arguments=["-c", "exit 3"], environment={"X": "1"})}, []),
        ({"t": "task", "task": task(), "files": [p.file_entry("in.3", b"abc")]}, [b"abc"]),
        ({"t": "no_more_tasks"}, []),
        (
            {
                "t": "result",
                "result": result(exit_code=None, signal=15, stdout_tail="hi\n"),
                "files": [
                    p.file_entry("sub/o.txt", b"x" * 70000),
                    p.file_entry("_condor_stdout", b"", kind="stdout"),
                ],
            },
            [b"x" * 70000, b""],
        ),
    ]
    stream = b"".join(p.encode(msg, blobs) for msg, blobs in msgs)
    decoded = decode_all(stream)
    assert [m.type for m in decoded] == [msg["t"] for msg, _ in msgs]
    assert decoded[0].body == {"agent": "a7", "master": "m1", "version": 1, "nonce_a": NONCE}
    assert decoded[5].task() == task(arguments=["-c", "exit 3"], environment={"X": "1"})
    assert decoded[6].file_pairs() == [({"path": "in.3", "size": 3, "mode": 0o644, "kind": "file"}, b"abc")]
    assert decoded[7].body == {} and decoded[7].blobs == []
    assert decoded[8].result() == result(exit_code=None, signal=15, stdout_tail="hi\n")
    assert decoded[8].blobs == [b"x" * 70000, b""]
    assert [f["kind"] for f in decoded[8].files] == ["file", "stdout"]


names = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00/"), min_size=1, max_size=12
)
relpaths = st.lists(names.filter(lambda s: s not in (".", "..")), min_size=1, max_size=4).map("/".join)
texts = st.text(max_size=30)
tasks = st.builds(
    p.Task,
    process=st.integers(0, 2**40),
    executable=texts.filter(bool),
    initialdir=texts.map(lambda s: "/" + s),
    attempt=st.integers(0, 100),
    arguments=st.lists(texts, max_size=5),
    environment=st.dictionaries(texts, texts, max_size=5),
    input=st.none() | texts,
    output=st.none() | texts,
    error=st.none() | texts,
    transfer_input_files=st.lists(texts, max_size=4),
    transfer_output_files=st.none() | st.lists(texts, max_size=4),
)
results = st.builds(
    p.TaskResult,
    process=st.integers(0, 2**40),
    attempt=st.integers(0, 100),
    status=st.sampled_from(["prepare_failed", "launch_failed"]),
    exit_code=st.none() | st.integers(-(2**31), 2**31),
    signal=st.none() | st.integers(1, 64),
    run_time=st.floats(0, 1e9),
    started=st.none() | st.floats(0, 2e9),
    host=texts,
    stdout_tail=st.text(max_size=200),
    error=st.none() | texts,
)


@settings(max_examples=60, deadline=None)
@given(
    tasks,
    results,
    st.lists(st.tuples(relpaths, st.binary(max_size=300)), max_size=4, unique_by=lambda f: f[0]),
    st.data(),
)
def test_stream_split_anywhere_decodes_the_same(
    t: p.Task, r: p.TaskResult, files: list[tuple[str, bytes]], data: st.DataObject
) -> None:
    entries = [p.file_entry(path, blob, mode=0o755) for path, blob in files]
    blobs = [blob for _, blob in files]
    stream = p.encode({"t": "task", "task": t, "files": entries}, blobs) + p.encode(
        {"t": "result", "result": r}
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = p.Decoder()
    got: list[p.Message] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):  # noqa: B905
        decoder.feed(stream[start:end])
        got.extend(decoder)
    decoder.eof()
    assert [m.type for m in got] == ["task", "result"]
    assert got[0].task() == t
    assert got[0].blobs == blobs
    assert [e["path"] for e in got[0].files] == [path for path, _ in files]
    assert got[1].result() == p.TaskResult.from_dict(r.to_dict())


def test_records_leave_their_default_fields_off_the_wire_and_come_back_whole(impl: str) -> None:
    """A task or result map on the wire omits the fields holding what `from_dict` takes for a
    missing one; values that only look alike (an empty output list against none, exit code 0
    against none, run time 0 against a tail) are kept, and every record decodes as it was sent."""
    plain, listed = task(), task(transfer_output_files=[], attempt=2, arguments=["0"])
    ok, killed = result(run_time=0.0, host=""), result(exit_code=None, signal=9, stderr_tail="x", error="")
    stream = p.encode({"t": "tasks", "tasks": [plain, listed]}) + p.encode(
        {"t": "results", "results": [ok, killed]}
    )
    tasks, results = decode_all(stream)
    assert tasks.tasks() == [plain, listed] and results.results() == [ok, killed]
    sent = msgpack.unpackb(p.encode({"t": "task", "task": plain})[4:], raw=False)["task"]
    assert sent == {"process": 3, "executable": "/bin/sh", "initialdir": "/data/run"}
    sent = msgpack.unpackb(p.encode({"t": "task", "task": listed})[4:], raw=False)["task"]
    assert sent["transfer_output_files"] == [] and sent["attempt"] == 2 and sent["arguments"] == ["0"]
    sent = msgpack.unpackb(p.encode({"t": "result", "result": ok})[4:], raw=False)["result"]
    assert sent == {"process": 3, "attempt": 0, "status": "ok", "exit_code": 0}
    sent = msgpack.unpackb(p.encode({"t": "result", "result": killed})[4:], raw=False)["result"]
    assert sent == {"process": 3, "attempt": 0, "status": "ok", "signal": 9, "stderr_tail": "x", "error": ""}


def _filtered(record: p.Task | p.TaskResult) -> dict[str, Any]:
    """The record's map less the fields holding `_WIRE_DEFAULTS` (what the short maps mean)."""
    defaults = p._WIRE_DEFAULTS[type(record)]
    return {
        k: v
        for k, v in record.to_dict().items()
        if k not in defaults or v != defaults[k] or type(v) is not type(defaults[k])
    }


@settings(max_examples=200, deadline=None)
@given(tasks, results, st.integers(0, 50))
def test_wire_maps_are_the_records_maps_less_their_defaults(t: p.Task, r: p.TaskResult, attempt: int) -> None:
    """The master sends a task as `task_map(spec, attempt)`, made from the task without copying
    it: the same map, in the same order, as run `attempt`'s `to_dict` less the default fields."""
    run = dataclasses.replace(t, attempt=attempt)
    assert list(p.task_map(t, attempt).items()) == list(_filtered(run).items())
    assert list(p._wire(r).items()) == list(_filtered(r).items())
    for kept in (p.Task(0, "x", "/", cluster=0, log="l", hold=True, policy={"A": "1"}, output_remaps="a=b"),):
        assert p.task_map(kept, 0) == _filtered(kept)


_odd_values = (
    st.none()
    | st.booleans()
    | st.integers(-3, 2**40)
    | st.floats()
    | st.text(max_size=5)
    | st.lists(st.text(max_size=3) | st.integers(), max_size=3)
    | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)
)
_task_keys = [f.name for f in dataclasses.fields(p.Task)]
_result_keys = [f.name for f in dataclasses.fields(p.TaskResult)]


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(tasks, results, results.map(lambda r: dataclasses.replace(r, status="ok", signal=None))),
    st.data(),
)
def test_from_dict_reads_every_map_as_the_field_by_field_check_does(record: Any, data: st.DataObject) -> None:
    """Task.from_dict and TaskResult.from_dict take the common maps at once and hand every
    other one to the field-by-field check: the same records, the same errors, for any map."""
    kind = type(record)
    keys = _task_keys if kind is p.Task else _result_keys
    m = dict(p._wire(record) if data.draw(st.booleans()) else record.to_dict())
    m.update(data.draw(st.dictionaries(st.sampled_from(keys), _odd_values, min_size=1, max_size=2)))
    for key in data.draw(st.lists(st.sampled_from(keys), max_size=2)):
        m.pop(key, None)
    outcomes = []
    for read in (kind._checked, kind.from_dict):
        try:
            outcomes.append(read(m))
        except p.ProtocolError as e:
            outcomes.append(str(e))
    slow, fast = outcomes
    assert fast == slow
    if not isinstance(slow, str):
        assert [type(getattr(fast, k)) for k in keys] == [type(getattr(slow, k)) for k in keys]


def test_unknown_fields_are_dropped_for_later_versions(impl: str) -> None:
    (msg,) = decode_all(raw({"t": "welcome", "window": 2, "compression": "zstd"}))
    assert msg.body == {"window": 2}


# ---------------------------------------------------------------------------------------------
# malformed frames


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(frame(b"\xc1"), id="never-used-byte"),
        pytest.param(frame(b"\x92\x01"), id="truncated-msgpack"),
        pytest.param(frame(msgpack.packb({"t": "no_more_tasks"}) + b"\x00"), id="trailing-bytes"),
        pytest.param(frame(b"\xc7\x01\x05x"), id="ext-type"),
        pytest.param(frame(b"\x91" * 100_000 + b"\x00"), id="deep-nesting"),
        pytest.param(raw(["t", "hello"]), id="array-not-map"),
        pytest.param(raw("hello"), id="string-not-map"),
        pytest.param(raw({1: "x"}), id="int-key"),
        pytest.param(raw({"t": "launch_rockets"}), id="unknown-type"),
        pytest.param(raw({"x": "hello"}), id="no-type"),
        pytest.param(raw({"t": 7}), id="type-not-str"),
        pytest.param(raw({"t": "welcome"}), id="missing-field"),
        pytest.param(raw({"t": "welcome", "window": "6"}), id="window-str"),
        pytest.param(raw({"t": "welcome", "window": 0}), id="window-zero"),
        pytest.param(raw({"t": "welcome", "window": True}), id="window-bool"),
        pytest.param(
            raw({"t": "hello", "agent": "a", "master": "m", "version": 1, "nonce_a": b"short"}), id="nonce"
        ),
        pytest.param(
            raw({"t": "hello", "agent": "a", "master": "m", "version": 1, "nonce_a": "n" * 32}),
            id="nonce-str",
        ),
        pytest.param(raw({"t": "auth", "mac_a": b"a" * 31}), id="mac-size"),
        pytest.param(raw({"t": "task", "task": []}), id="task-not-map"),
        pytest.param(raw({"t": "task", "task": {"process": 1, "executable": "x"}}), id="task-no-initialdir"),
        pytest.param(
            raw({"t": "task", "task": {"process": 1, "executable": "x", "initialdir": "rel"}}), id="rel-iwd"
        ),
        pytest.param(
            raw({"t": "task", "task": {"process": "1", "executable": "x", "initialdir": "/d"}}),
            id="process-str",
        ),
        pytest.param(
            raw({"t": "task", "task": {"process": -1, "executable": "x", "initialdir": "/d"}}),
            id="process-negative",
        ),
        pytest.param(
            raw(
                {
                    "t": "task",
                    "task": {"process": 1, "executable": "x", "initialdir": "/d", "arguments": "a b"},
                }
            ),
            id="arguments-str",
        ),
        pytest.param(
            raw(
                {
                    "t": "task",
                    "task": {"process": 1, "executable": "x", "initialdir": "/d", "environment": {"A": 1}},
                }
            ),
            id="environment-int",
        ),
        pytest.param(
            raw({"t": "result", "result": {"process": 1, "attempt": 0, "status": "great"}}), id="status"
        ),
        pytest.param(
            raw({"t": "result", "result": {"process": 1, "attempt": 0, "status": "ok"}}), id="ok-no-exit"
        ),
        pytest.param(
            raw(
                {
                    "t": "result",
                    "result": {"process": 1, "attempt": 0, "status": "ok", "exit_code": 0, "signal": 9},
                }
            ),
            id="ok-exit-and-signal",
        ),
        pytest.param(
            raw({"t": "result", "result": result(run_time=float("nan")).to_dict()}),
            id="run-time-nan",
        ),
        pytest.param(raw({"t": "welcome", "window": 1, "files": []}), id="files-on-welcome"),
        pytest.param(raw({"t": "task", "task": task().to_dict(), "files": {}}), id="files-not-list"),
        pytest.param(
            raw({"t": "task", "task": task().to_dict(), "files": [{"path": "a"}]}), id="file-no-size"
        ),
        pytest.param(
            raw(
                {"t": "task", "task": task().to_dict(), "files": [{"path": "a", "size": 1, "kind": "stdout"}]}
            ),
            id="stdout-kind-to-agent",
        ),
        pytest.param(
            raw(
                {"t": "task", "task": task().to_dict(), "files": [{"path": "a", "size": 1, "mode": 0o177777}]}
            ),
            id="file-mode",
        ),
        pytest.param(
            raw(
                {
                    "t": "task",
                    "task": task().to_dict(),
                    "files": [{"path": "a", "size": 1}, {"path": "a", "size": 1}],
                }
            ),
            id="duplicate-path",
        ),
        pytest.param(
            raw({"t": "task", "task": task().to_dict(), "files": [{"path": "a", "size": p.MAX_BLOB + 1}]}),
            id="blob-over-limit",
        ),
        pytest.param(
            raw({"t": "task", "task": task().to_dict(), "files": [{"path": "a", "size": 3}]})
            + frame(b"abcd"),
            id="blob-size-mismatch",
        ),
        pytest.param(struct.pack(">I", p.MAX_MESSAGE + 1), id="oversize-header"),
        pytest.param(struct.pack(">I", 0), id="empty-frame"),
    ],
)
def test_malformed_input_raises_protocol_error(impl: str, data: bytes) -> None:
    decoder = p.Decoder()
    decoder.feed(data)
    with pytest.raises(p.ProtocolError):
        decoder.next()
    # broken for good: the caller must drop the connection
    with pytest.raises(p.ProtocolError):
        decoder.feed(raw({"t": "no_more_tasks"}))
    with pytest.raises(p.ProtocolError):
        decoder.next()


def test_oversize_header_refused_before_the_body_arrives() -> None:
    decoder = p.Decoder()
    decoder.feed(struct.pack(">I", 2 * p.MAX_MESSAGE))  # no body at all: the header alone decides
    with pytest.raises(p.ProtocolError, match="limit"):
        decoder.next()


def test_blob_over_the_decoders_limit_refused_from_the_file_list() -> None:
    entry = {"path": "big", "size": 5000}
    decoder = p.Decoder(max_blob=4096)
    decoder.feed(raw({"t": "task", "task": task().to_dict(), "files": [entry]}))
    with pytest.raises(p.ProtocolError, match="limit"):
        decoder.next()


@pytest.mark.hostile
def test_a_results_files_over_the_total_limit_are_refused_from_the_file_list() -> None:
    """A result announcing 20,000 files of 1 GiB (each within the blob limit) is refused before
    any blob arrives, the master's decoder holding nothing; a task's inputs (the user's own
    files, sent by the master) are not capped in all."""
    result = p.TaskResult(0, 1, "ok", exit_code=0)
    files = [{"path": f"f{i}", "size": p.MAX_BLOB} for i in range(20_000)]
    decoder = p.Decoder({p.RESULT, p.RESULTS, p.BULK_READY})
    decoder.feed(raw({"t": "result", "result": result.to_dict(), "files": files}))
    with pytest.raises(p.ProtocolError, match=f"{p.MAX_RESULT_BYTES}-byte limit of one result's files"):
        decoder.next()
    decoder = p.Decoder(max_files=8192)
    decoder.feed(raw({"t": "result", "result": result.to_dict(), "files": files[:2]}))
    with pytest.raises(p.ProtocolError, match="8192-byte limit"):
        decoder.next()
    decoder = p.Decoder(max_files=8192)
    decoder.feed(raw({"t": "task", "task": task().to_dict(), "files": files[:2]}))
    assert decoder.next() is None and decoder._pending is not None  # waits for its blobs


@pytest.mark.parametrize(
    "path",
    ["../x", "a/../../x", "/etc/passwd", "//etc/passwd", "a/../b", "./a", "a//b", "a/", "", ".", "a\x00b"],
)
def test_traversal_and_non_canonical_paths_refused(impl: str, path: str) -> None:
    data = raw({"t": "task", "task": task().to_dict(), "files": [{"path": path, "size": 1}]}) + frame(b"x")
    with pytest.raises(p.ProtocolError, match="path"):
        decode_all(data)
    with pytest.raises(p.ProtocolError):
        p.encode({"t": "task", "task": task(), "files": [{"path": path, "size": 1}]}, [b"x"])


def test_truncated_stream_is_an_error_only_at_eof() -> None:
    data = p.encode({"t": "task", "task": task(), "files": [p.file_entry("a", b"abc")]}, [b"abc"])
    for cut in range(1, len(data)):
        decoder = p.Decoder()
        decoder.feed(data[:cut])
        assert decoder.next() is None
        with pytest.raises(p.ProtocolError, match="middle"):
            decoder.eof()
    decoder = p.Decoder()
    decoder.feed(data)
    msg = decoder.next()
    assert msg is not None and (msg.type, msg.body["task"], msg.blobs) == ("task", task(), [b"abc"])
    decoder.eof()


def test_allowed_types_per_direction() -> None:
    from_master = p.encode({"t": "task", "task": task()})
    assert decode_all(from_master, p.FROM_MASTER)[0].type == "task"
    with pytest.raises(p.ProtocolError, match="not expected"):
        decode_all(from_master, p.FROM_AGENT)
    with pytest.raises(p.ProtocolError, match="not expected"):
        decode_all(p.encode({"t": "result", "result": result()}), {p.HELLO})


def test_encode_refuses_what_the_decoder_would() -> None:
    with pytest.raises(p.ProtocolError, match="blobs"):
        p.encode({"t": "task", "task": task(), "files": [p.file_entry("a", b"x")]}, [])
    with pytest.raises(p.ProtocolError, match="bytes"):
        p.encode({"t": "task", "task": task(), "files": [p.file_entry("a", b"x")]}, [b"xy"])
    with pytest.raises(p.ProtocolError, match="message limit"):
        p.encode({"t": "task", "task": task(arguments=["x" * p.MAX_MESSAGE])})
    with pytest.raises(p.ProtocolError):
        p.encode({"t": "welcome", "window": -1})


def test_tails_are_bounded() -> None:
    with pytest.raises(p.ProtocolError, match="stdout_tail"):
        p.TaskResult.from_dict(result(stdout_tail="x" * (p.TAIL_SIZE + 1)).to_dict())


@pytest.mark.parametrize("field", ["run_time", "started", "finished"])
def test_times_are_bounded_so_that_their_sums_stay_finite(field: str) -> None:
    """Two runs of 1e308 seconds added up to an infinite RemoteWallClockTime, which the state
    file held as Infinity and then could not be read back from (the master could not resume)."""
    for read in (p.TaskResult.from_dict, p.TaskResult._checked):
        with pytest.raises(p.ProtocolError, match=f"result.{field}"):
            read(result(**{field: 1.7e308}).to_dict())
        assert getattr(read(result(**{field: 1e12}).to_dict()), field) == 1e12


# ---------------------------------------------------------------------------------------------
# handshake


def test_macs_verify_with_the_right_secret_only() -> None:
    mac_m = p.master_mac(SECRET, NONCE, "agent-1")
    assert p.check_master_mac(SECRET, NONCE, "agent-1", mac_m)
    wrong = bytes(32)
    assert not p.check_master_mac(wrong, NONCE, "agent-1", mac_m)  # impostor master
    assert not p.check_master_mac(SECRET, NONCE, "agent-2", mac_m)  # bound to the agent id
    assert not p.check_master_mac(SECRET, b"o" * 32, "agent-1", mac_m)  # bound to the nonce
    mac_a = p.agent_mac(SECRET, NONCE, "agent-1")
    assert p.check_agent_mac(SECRET, NONCE, "agent-1", mac_a)
    assert not p.check_agent_mac(wrong, NONCE, "agent-1", mac_a)
    # a master's answer cannot be replayed as an agent's proof
    assert mac_a != mac_m and not p.check_agent_mac(SECRET, NONCE, "agent-1", mac_m)
    assert len(mac_m) == p.MAC_SIZE


def test_secrets_and_nonces() -> None:
    secret = p.make_secret()
    assert len(secret) == p.SECRET_SIZE and secret != p.make_secret()
    assert p.secret_from_hex(secret.hex()) == secret
    with pytest.raises(ValueError):
        p.secret_from_hex("abcd")
    with pytest.raises(ValueError):
        p.secret_from_hex("zz" * 32)
    assert len(p.make_nonce()) == p.NONCE_SIZE


def _serve_handshake(sock: socket.socket, secret: bytes, outcome: dict[str, Any]) -> None:
    """A master's side of the handshake, as the real master will do it."""
    decoder = p.Decoder({p.HELLO})
    hello = p.recv_message(sock, decoder)
    assert hello is not None
    nonce_m = p.make_nonce()
    mac_m = p.master_mac(secret, hello.body["nonce_a"], hello.body["agent"])
    p.send_message(sock, {"t": "challenge", "nonce_m": nonce_m, "mac_m": mac_m})
    decoder.allowed = frozenset({p.AUTH})
    auth = p.recv_message(sock, decoder)
    if auth is None:
        outcome["master"] = "agent hung up"
        return
    if p.check_agent_mac(secret, nonce_m, hello.body["agent"], auth.body["mac_a"]):
        outcome["master"] = "welcome"
        p.send_message(sock, {"t": "welcome", "window": 2})
    else:
        outcome["master"] = "refused"
        p.send_message(sock, {"t": "refused", "reason": "authentication failed"})


def _agent_handshake(sock: socket.socket, secret: bytes) -> str:
    decoder = p.Decoder(p.FROM_MASTER)
    nonce_a = p.make_nonce()
    p.send_message(sock, {"t": "hello", "agent": "a1", "master": "m1", "version": 1, "nonce_a": nonce_a})
    challenge = p.recv_message(sock, decoder)
    assert challenge is not None and challenge.type == "challenge"
    if not p.check_master_mac(secret, nonce_a, "a1", challenge.body["mac_m"]):
        sock.close()
        return "master not authenticated"
    p.send_message(sock, {"t": "auth", "mac_a": p.agent_mac(secret, challenge.body["nonce_m"], "a1")})
    answer = p.recv_message(sock, decoder)
    assert answer is not None
    return answer.type


@pytest.mark.parametrize(
    ("master_secret", "agent_secret", "agent_sees", "master_sees"),
    [
        (SECRET, SECRET, "welcome", "welcome"),
        (SECRET, bytes(32), "master not authenticated", "agent hung up"),  # the agent refuses first
    ],
)
def test_handshake_over_sockets(
    master_secret: bytes, agent_secret: bytes, agent_sees: str, master_sees: str
) -> None:
    master_sock, agent_sock = socket.socketpair()
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=_serve_handshake, args=(master_sock, master_secret, outcome))
    thread.start()
    assert _agent_handshake(agent_sock, agent_secret) == agent_sees
    thread.join(5)
    assert outcome["master"] == master_sees
    master_sock.close()
    agent_sock.close()


def test_master_refuses_an_agent_with_the_wrong_secret() -> None:
    """An impostor agent that skips checking the master still cannot get past auth."""
    master_sock, agent_sock = socket.socketpair()
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=_serve_handshake, args=(master_sock, SECRET, outcome))
    thread.start()
    decoder = p.Decoder(p.FROM_MASTER)
    p.send_message(agent_sock, {"t": "hello", "agent": "a1", "master": "m1", "version": 1, "nonce_a": NONCE})
    challenge = p.recv_message(agent_sock, decoder)
    assert challenge is not None
    p.send_message(
        agent_sock, {"t": "auth", "mac_a": p.agent_mac(bytes(32), challenge.body["nonce_m"], "a1")}
    )
    answer = p.recv_message(agent_sock, decoder)
    thread.join(5)
    assert answer is not None and answer.type == "refused"
    assert outcome["master"] == "refused"
    master_sock.close()
    agent_sock.close()


def test_socket_helpers_carry_large_blobs_and_report_eof() -> None:
    left, right = socket.socketpair()
    big = bytes(range(256)) * 12_000  # ~3 MiB, many recv calls
    thread = threading.Thread(
        target=lambda: (
            p.send_message(
                left, {"t": "result", "result": result(), "files": [p.file_entry("o", big)]}, [big]
            ),
            left.close(),
        )
    )
    thread.start()
    decoder = p.Decoder(p.FROM_AGENT)
    msg = p.recv_message(right, decoder)
    assert msg is not None and msg.blobs == [big]
    assert p.recv_message(right, decoder) is None  # clean EOF between messages
    thread.join(5)
    right.close()


def test_eof_in_the_middle_of_a_message_is_an_error() -> None:
    left, right = socket.socketpair()
    left.sendall(p.encode({"t": "welcome", "window": 3})[:-1])
    left.close()
    with pytest.raises(p.ProtocolError):
        p.recv_message(right, p.Decoder())
    right.close()


# ---------------------------------------------------------------------------------------------
# bulk returns (issue 8 item 3): an optional addition, compatible both ways


def test_bulk_messages_round_trip_and_the_welcome_threshold_is_optional(impl: str) -> None:
    stream = b"".join(
        p.encode(msg)
        for msg in (
            {"t": "welcome", "window": 6, "bulk_threshold": 16 << 20},
            {"t": "welcome", "window": 6},  # an older master: no threshold, agents never ask
            {"t": "welcome", "window": 6, "bulk_threshold": None},
            {"t": "bulk_ready", "process": 4, "attempt": 1, "size": 50_000_000},
            {"t": "bulk_go", "process": 4, "attempt": 1},
            {"t": "bulk_go", "process": 4, "attempt": 1, "rate_bps": 4_000_000},  # paced on a limited subnet
        )
    )
    a, b, c, ready, go, paced = decode_all(stream)
    assert a.body == {"window": 6, "bulk_threshold": 16 << 20}
    assert b.body == {"window": 6} and c.body == {"window": 6}
    assert ready.body == {"process": 4, "attempt": 1, "size": 50_000_000}
    assert go.body == {"process": 4, "attempt": 1}
    assert paced.body == {"process": 4, "attempt": 1, "rate_bps": 4_000_000}
    assert p.BULK_READY in p.FROM_AGENT and p.BULK_GO in p.FROM_MASTER


@pytest.mark.parametrize(
    "msg",
    [
        {"t": "welcome", "window": 6, "bulk_threshold": 0},
        {"t": "welcome", "window": 6, "bulk_threshold": "16MB"},
        {"t": "bulk_ready", "process": 4, "attempt": 1},
        {"t": "bulk_ready", "process": -1, "attempt": 1, "size": 5},
        {"t": "bulk_ready", "process": 4, "attempt": 1, "size": True},
        {"t": "bulk_go", "process": "4", "attempt": 1},
        {"t": "bulk_go", "process": 4, "attempt": 1, "rate_bps": 0},
        {"t": "bulk_go", "process": 4, "attempt": 1, "rate_bps": "8Mbps"},
        {"t": "bulk_go", "process": 4, "attempt": 1, "files": [{"path": "x", "size": 1}]},
    ],
)
def test_malformed_bulk_messages_are_protocol_errors(impl: str, msg: dict[str, Any]) -> None:
    decoder = p.Decoder()
    decoder.feed(raw(msg))
    with pytest.raises(p.ProtocolError):
        decoder.next()


def test_paced_chunks_never_let_a_byte_ahead_of_the_rate() -> None:
    """Shared by the master's inputs and the agent's granted returns: each chunk's due second is
    when the bytes up to its end may have left at the rate; the last is the whole transfer's time."""
    frames = [b"x" * 100_000, b"y" * 70_000]
    chunks = list(p.paced_chunks(frames, 8_000))
    assert b"".join(bytes(c) for c, _ in chunks) == b"".join(frames)
    assert all(len(c) <= p.PACE_CHUNK for c, _ in chunks)
    sent = 0
    for chunk, due in chunks:
        sent += len(chunk)
        assert due == 8 * sent / 8_000
    assert chunks[-1][1] == 170.0  # 170,000 bytes at 1,000 bytes per second


# ---------------------------------------------------------------------------------------------
# batches (version 2) and refusals that name another master: optional, compatible both ways


def test_batches_round_trip_and_are_read_as_their_single_messages(impl: str) -> None:
    tasks = [task(process=i, attempt=1, arguments=[str(i)]) for i in range(3)]
    results = [result(process=i, attempt=1, exit_code=i) for i in range(3)]
    stream = b"".join(
        p.encode(msg)
        for msg in (
            {"t": "welcome", "window": 6, "batch": True},
            {"t": "tasks", "tasks": tasks},
            {"t": "results", "results": results},
            {"t": "task", "task": tasks[0]},
            {"t": "result", "result": results[0]},
            {"t": "refused", "reason": "this is master m2", "master": "m2"},
        )
    )
    welcome, many, back, one, single, refused = decode_all(stream)
    assert welcome.body == {"window": 6, "batch": True}
    assert many.tasks() == tasks and back.results() == results
    assert one.tasks() == [tasks[0]] and single.results() == [results[0]]  # a single is a batch of one
    assert many.body["tasks"] == tasks  # the checked records, as for a single task
    assert refused.body == {"reason": "this is master m2", "master": "m2"}
    assert p.TASKS in p.FROM_MASTER and p.RESULTS in p.FROM_AGENT and p.PROTOCOL_VERSION >= 2


@pytest.mark.parametrize(
    "msg",
    [
        {"t": "tasks", "tasks": []},
        {"t": "tasks", "tasks": {"process": 1}},
        {"t": "tasks", "tasks": [{"process": 1, "executable": "x", "initialdir": "relative"}]},
        {"t": "tasks", "tasks": [{"process": i, "executable": "x", "initialdir": "/d"} for i in range(1025)]},
        {"t": "results", "results": [{"process": 1, "attempt": 1, "status": "ok"}]},
        {
            "t": "results",
            "results": [{"process": 1, "attempt": 1, "status": "ok", "exit_code": 0}],
            "files": [],
        },
        {"t": "welcome", "window": 6, "batch": 1},
        {"t": "refused", "reason": "no", "master": ""},
    ],
)
def test_malformed_batches_are_protocol_errors(impl: str, msg: dict[str, Any]) -> None:
    decoder = p.Decoder()
    decoder.feed(raw(msg))
    with pytest.raises(p.ProtocolError):
        decoder.next()
