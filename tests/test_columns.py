"""The columnar batch layout (zeps/protocol/columns.py, docs/columns.md) against today's row
batches: the same messages, the same credit, one exact encoding; every bad frame refused with
BadColumns (never another exception, never a wrong message); the numpy checks and the
pure-Python fallback agree."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from zeps.protocol import batch as rows
from zeps.protocol import columns as C
from zeps.protocol import commands as c
from zeps.protocol import ProtocolError, decode, encode
from .property_examples import examples

np = pytest.importorskip("numpy", reason="the numpy path is compared with the fallback")
pa = pytest.importorskip("pyarrow", reason="to_arrow needs pyarrow")

# The example of docs/columns.md, byte by byte.
EXAMPLE_HEX = ("aaa55e01 02000000 0500000000000000 0700000000000000 05000000 05000000"
               " 00000000 05000000 05000000 00000000"
               " 00000000 05000000 05000000 00000000"
               " 65752e66 72000000 68656c6c 6f000000")

keys_st = st.text(max_size=40).filter(lambda k: len(k.encode()) <= 255) | st.sampled_from(
    ["", "eu.fr.paris", "é" * 127, "a" * 255, "\U0001f600"])
messages_st = st.lists(st.tuples(keys_st, st.binary(max_size=60)), min_size=1, max_size=40)


def decoded(frame, use_numpy):
    """``(header, [(key, body)])`` of a frame, or the BadColumns message."""
    try:
        d = C.decode_columns(frame, use_numpy=use_numpy)
    except C.BadColumns as exc:
        return "BadColumns: " + str(exc)
    ko, bo = list(map(int, d.key_offsets)), list(map(int, d.body_offsets))
    msgs = [(bytes(d.keys[ko[i]:ko[i + 1]]).decode("utf-8"), bytes(d.bodies[bo[i]:bo[i + 1]]))
            for i in range(d.header.count)]
    return d.header, msgs


def both(frame):
    """The numpy path's answer, after checking the fallback gives the same one."""
    got = decoded(frame, True)
    assert decoded(frame, False) == got
    return got


def reencoded(header, msgs):
    keys, bodies = zip(*msgs)
    return C.encode_columns(list(keys), list(bodies), sequence=header.sequence,
                            timestamp=header.timestamp)


def test_the_documented_example_byte_by_byte():
    frame = C.encode_columns(["eu.fr", ""], [b"hello", b""], sequence=7, timestamp=5)
    assert frame.hex() == EXAMPLE_HEX.replace(" ", "")
    header, msgs = both(frame)
    assert header == C.ColumnsHeader(C.DELIVER_COLUMNS_ID, 2, 5, 7, 5, 5)
    assert msgs == [("eu.fr", b"hello"), ("", b"")]
    # the same messages as the DELIVER-BATCH example of docs/protocol.md
    assert C.rows_from_columns(frame).hex() == (
        "aaa53b0000000000000005000000000000000700000002"
        "0565752e66720000000568656c6c6f0000000000")


@settings(max_examples=examples(150), deadline=None)
@given(messages_st, st.integers(0, 2**64 - 1), st.integers(1, 2**40))
def test_columns_and_rows_hold_the_same_messages(msgs, ts, seq):
    keys = [k for k, _ in msgs]
    bodies = [b for _, b in msgs]
    # PUBLISH: today's row codec and the columns convert into each other exactly
    pub_rows = rows.encode_publish_batch(msgs)
    pub_cols = C.encode_columns(keys, bodies)
    assert C.columns_from_rows(pub_rows) == pub_cols
    assert C.rows_from_columns(pub_cols) == pub_rows
    assert C.rows_from_columns(pub_cols, use_numpy=False) == pub_rows
    assert both(pub_cols) == (C.ColumnsHeader(C.PUBLISH_COLUMNS_ID, len(msgs), 0, 0,
                                              sum(len(k.encode()) for k in keys),
                                              sum(map(len, bodies))), msgs)
    # DELIVER: through the codec's own DeliverBatch
    del_rows = encode(c.DeliverBatch(ts, seq, len(msgs), rows.encode_entries(msgs)))
    del_cols = C.encode_columns(keys, bodies, sequence=seq, timestamp=ts)
    assert C.columns_from_rows(del_rows) == del_cols
    assert C.rows_from_columns(del_cols) == del_rows
    back = decode(C.rows_from_columns(del_cols))
    assert (back.timestamp, back.sequence, back.count) == (ts, seq, len(msgs))
    assert [rows.entry_key(back.entries, o) for o in back.offsets[:-1]] == keys
    assert [rows.entry_body(back.entries, o) for o in back.offsets[:-1]] == bodies
    # the same credit as the DELIVER-BATCH (and as one DELIVER per message)
    header = C.decode_columns(del_cols).header
    assert C.columns_cost(header) == rows.batch_cost(del_rows) == sum(
        c.deliver_cost(len(k.encode()), len(b)) for k, b in msgs)


@settings(max_examples=examples(15), deadline=None)
@given(st.lists(st.tuples(keys_st, st.binary(max_size=300)), min_size=C._ARROW_ROWS_MIN,
                max_size=C._ARROW_ROWS_MIN + 40), st.integers(0, 2**64 - 1),
       st.integers(0, 2**40))
def test_large_batches_convert_to_rows_through_arrow_as_through_python(msgs, ts, seq):
    keys, bodies = [k for k, _ in msgs], [b for _, b in msgs]
    frame = C.encode_columns(keys, bodies, sequence=seq, timestamp=ts if seq else 0)
    want = (rows.encode_publish_batch(msgs) if not seq else
            rows.deliver_batch_head(ts, seq, len(msgs)) + rows.encode_entries(msgs))
    assert C.rows_from_columns(frame) == C.rows_from_columns(frame, use_numpy=False) == want
    assert C.columns_from_rows(want) == frame


@settings(max_examples=examples(100), deadline=None)
@given(messages_st, st.integers(0, 2**63 - 1), st.integers(1, 2**40))
def test_to_arrow_wraps_the_frame_without_copying(msgs, ts, seq):
    keys = [k for k, _ in msgs]
    bodies = [b for _, b in msgs]
    frame = C.encode_columns(keys, bodies, sequence=seq, timestamp=ts)
    rb = C.to_arrow(frame)
    rb.validate(full=True)
    assert rb.column("key").to_pylist() == keys
    assert rb.column("body").to_pylist() == bodies
    assert rb.column("sequence").to_pylist() == list(range(seq, seq + len(msgs)))
    assert rb.column("timestamp").cast(pa.int64()).to_pylist() == [ts] * len(msgs)
    base = pa.py_buffer(frame)
    lo, hi = base.address, base.address + len(frame)
    for name in ("key", "body"):
        for b in rb.column(name).buffers()[1:]:
            assert b is None or b.size == 0 or lo <= b.address and b.address + b.size <= hi, name
    pub = C.to_arrow(C.encode_columns(keys, bodies))
    assert pub.schema.names == ["key", "body"] and pub.column("body").to_pylist() == bodies


@settings(max_examples=examples(60), deadline=None)
@given(messages_st, st.booleans())
def test_every_truncation_is_refused_the_same_way_by_both_paths(msgs, deliver):
    keys, bodies = [k for k, _ in msgs], [b for _, b in msgs]
    frame = C.encode_columns(keys, bodies, sequence=5 if deliver else 0)
    for cut in range(len(frame)):
        got = both(frame[:cut])
        assert isinstance(got, str) and got.startswith("BadColumns: "), cut
    with pytest.raises(C.BadColumns):
        C.to_arrow(frame[:-1])
    assert isinstance(both(frame + bytes(8)), str)


@settings(max_examples=examples(300), deadline=None)
@given(messages_st, st.booleans(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)),
                                            min_size=1, max_size=4))
def test_corruption_is_refused_or_read_as_exactly_what_the_bytes_say(msgs, deliver, flips):
    keys, bodies = [k for k, _ in msgs], [b for _, b in msgs]
    frame = bytearray(C.encode_columns(keys, bodies, sequence=9 if deliver else 0))
    for pos, xor in flips:
        frame[pos % len(frame)] ^= xor
    frame = bytes(frame)
    got = both(frame)
    if isinstance(got, str):
        with pytest.raises(C.BadColumns):
            C.to_arrow(frame)
        with pytest.raises(C.BadColumns):
            C.rows_from_columns(frame)
        return
    header, out = got           # accepted: only if the bytes are exactly these messages' frame
    assert reencoded(header, out) == frame
    if max(header.timestamp, header.sequence + header.count - 1) >= 2**63:
        with pytest.raises(C.BadColumns, match="beyond int64"):     # Arrow's int64 columns
            C.to_arrow(frame)
        return
    assert C.to_arrow(frame).column("key").to_pylist() == [k for k, _ in out]


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_with_badcolumns(data):
    got = both(data)
    assert isinstance(got, str) or reencoded(*got) == data


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([C.PUBLISH_COLUMNS_ID, C.DELIVER_COLUMNS_ID]), st.integers(0, 3),
       st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 300),
       st.integers(0, 300), st.binary(max_size=160))
def test_forged_headers_over_any_tail_are_refused_or_exact(cid, n, ts, seq, ksize, bsize, tail):
    frame = C.HEAD.pack(b"\xaa\xa5", cid, 1, n, ts, seq, ksize, bsize) + tail
    got = both(frame)
    assert isinstance(got, str) or reencoded(*got) == frame


def _forge(key_offsets, body_offsets, keys: bytes, bodies: bytes, count=None, **head):
    """A frame laid out by hand (sizes from the buffers unless given)."""
    n = len(key_offsets) - 1 if count is None else count
    fields = dict(cid=C.PUBLISH_COLUMNS_ID, version=1, ts=0, seq=0, ksize=len(keys),
                  bsize=len(bodies))
    fields.update(head)

    def pad(b):
        return b + bytes(-len(b) & 7)
    return b"".join((C.HEAD.pack(b"\xaa\xa5", fields["cid"], fields["version"], n, fields["ts"],
                                 fields["seq"], fields["ksize"], fields["bsize"]),
                     pad(struct.pack(f"<{len(key_offsets)}i", *key_offsets)),
                     pad(struct.pack(f"<{len(body_offsets)}i", *body_offsets)),
                     pad(keys), pad(bodies)))


@pytest.mark.parametrize("frame, reason", [
    (b"\xaa\xa5]", "truncated columnar frame: 3 bytes"),
    (_forge([0, 1], [0, 1], b"k", b"b", cid=58), "not a columnar frame"),
    (_forge([0, 1], [0, 1], b"k", b"b", version=2), "columnar version 2 is not known"),
    (_forge([0], [0], b"", b"", count=0), "count 0 is not from 1 to 4096"),
    (_forge([0, 1], [0, 1], b"k", b"b", count=4097), "count 4097 is not from 1 to 4096"),
    (_forge([0, 1], [0, 1], b"k", b"b", ksize=256), "256 bytes of keys cannot be 1 keys"),
    (_forge([0, 1], [0, 1], b"k", b"b", bsize=2**31), "over the int32 offsets"),
    (_forge([0, 1], [0, 1], b"k", b"b", seq=1), "a PUBLISH-COLUMNS has timestamp and sequence 0"),
    (_forge([0, 1], [0, 1], b"k", b"b", cid=C.DELIVER_COLUMNS_ID), "sequences 0..0+0"),
    (_forge([0, 1, 1], [0, 0, 1], b"k", b"b", cid=C.DELIVER_COLUMNS_ID, seq=2**64 - 1),
     "are not within 1..2^64-1"),
    (_forge([0, 1], [0, 1], b"k", b"b", bsize=9), "its header says"),
    (_forge([0, 1], [0, 1], b"k", b"b") + bytes(8), "its header says"),
    (_forge([0, 1], [0, 2], b"k", b"b"), "body offsets run from 0 to 2, not 0 to 1"),
    (_forge([1, 1], [0, 1], b"k", b"b"), "key offsets run from 1 to 1, not 0 to 1"),
    (_forge([0, 2, 1, 2], [0, 0, 0, 0], b"ab", b""), "key offsets go back at key 1"),
    (_forge([0, 2**31 - 1, -2**31, 2], [0, 0, 0, 0], b"ab", b""),
     "key offsets go back at key 1"),
    (_forge([0, 0, 1], [0, 5, 3], b"k", b"bbbbb"[:3]), "body offsets go back at body 1"),
    (_forge([0, 256, 256], [0, 0, 0], b"k" * 256, b"", ksize=256),
     "key 0 is longer than 255 bytes"),
    (_forge([0, 1, 2], [0, 0, 0], b"\xc3\xa9", b""), "key 0 is not valid UTF-8"),
    (_forge([0, 1, 2], [0, 0, 0], b"a\xff", b""), "key 1 is not valid UTF-8"),
    (_forge([0, 1], [0, 1], b"k", b"b")[:-1] + b"\x01", "the padding after the bodies is not zero"),
])
def test_each_bad_frame_is_refused_naming_what_is_wrong(frame, reason):
    got = both(frame)
    assert isinstance(got, str) and reason in got, got


def test_the_fallback_runs_without_numpy(monkeypatch):
    frame = C.encode_columns(["eu.fr", "é", ""], [b"hello", b"", b"x" * 9], sequence=3,
                             timestamp=1)
    with_numpy = decoded(frame, None)
    monkeypatch.setattr(C, "np", None)
    d = C.decode_columns(frame)             # numpy "not installed": the fallback is chosen
    assert isinstance(d.key_offsets, memoryview) and d.key_offsets.tolist() == [0, 5, 7, 7]
    assert decoded(frame, None) == with_numpy
    assert C.columns_from_rows(C.rows_from_columns(frame)) == frame
    with pytest.raises(ImportError):
        C.decode_columns(frame, use_numpy=True)
    with pytest.raises(ImportError):
        C.to_arrow(frame)
    with pytest.raises(C.BadColumns, match="key 0 is not valid UTF-8"):
        C.decode_columns(_forge([0, 1, 2], [0, 0, 0], b"\xc3\xa9", b""))


def test_decode_is_a_view_of_the_frame():
    frame = C.encode_columns(["a", "bc"], [b"xyz", b"w"], sequence=1)
    d = C.decode_columns(frame)
    assert d.key_offsets.base is not None and not d.key_offsets.flags.owndata
    assert d.keys.obj is frame and d.bodies.obj is frame
    assert bytes(d.keys) == b"abc" and bytes(d.bodies) == b"xyzw"


@pytest.mark.parametrize("keys, bodies, kw, error", [
    ([], [], {}, r"from 1 to 2\^32-1 messages"),
    (["a"], [], {}, "1 keys but 0 bodies"),
    (["a" * 256], [b""], {}, "key 0 is longer than 255 bytes"),
    ([b"\xff"], [b""], {}, "key is not valid UTF-8"),
    (["a"], [b""], {"timestamp": 4}, "carries no timestamp"),
    (["a", "b"], [b"", b""], {"sequence": 2**64 - 1}, "out of range"),
])
def test_encode_refuses_what_cannot_be_sent(keys, bodies, kw, error):
    with pytest.raises(ValueError, match=error):
        C.encode_columns(keys, bodies, **kw)


def test_encode_takes_str_bodies_and_utf8_bytes_keys_and_refuses_others():
    frame = C.encode_columns([b"k\xc3\xa9", "x"], ["h\u00e9", bytearray(b"b")])
    assert both(frame)[1] == [("k\u00e9", "h\u00e9".encode()), ("x", b"b")]
    with pytest.raises(TypeError):
        C.encode_columns([1], [b""])
    with pytest.raises(TypeError):
        C.encode_columns(["a"], [3])
    with pytest.raises(TypeError):
        C.encode_columns(["a"], [memoryview(bytes(8)).cast("Q")])


@pytest.mark.parametrize("frame, error", [
    (b"", "not a batch frame"),
    (rows.encode_publish_batch([("a", b"b")])[:-1], "runs past the end"),
    (rows.deliver_batch_head(1, 0, 1) + rows.encode_entries([("a", b"")]), "not within"),
    (rows.publish_batch_head(1) + b"\x01\xff\x00\x00\x00\x00", "not valid UTF-8"),
    (bytes.fromhex("aaa507") + bytes(20), "not a PUBLISH-BATCH or DELIVER-BATCH"),
])
def test_columns_from_rows_refuses_bad_row_frames(frame, error):
    with pytest.raises(C.BadColumns, match=error):
        C.columns_from_rows(frame)


@pytest.mark.parametrize("cid", [C.PUBLISH_COLUMNS_ID, C.DELIVER_COLUMNS_ID, C.COLUMNS_SELECT_ID,
                                 C.COLUMNS_SELECT_OK_ID])
def test_the_codec_does_not_know_the_reserved_ids_yet(cid):
    """The design step puts nothing on the wire: ZEPS/1's codec answers as for any unknown id
    (and no command of commands.py has taken one of the ids docs/columns.md reserves)."""
    assert cid not in c.BY_ID
    frame = C.encode_columns(["a"], [b"b"], sequence=3 if cid == C.DELIVER_COLUMNS_ID else 0)
    with pytest.raises(ProtocolError, match=f"unknown command {cid}"):
        decode(frame[:2] + bytes((cid,)) + frame[3:])
