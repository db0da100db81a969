"""``MessageBatch.to_arrow()`` and the Spark reader's broker path build a MessageBatch's Arrow
columns from its DELIVER-BATCH frame with no Python work per message
(:func:`zeps.clients.columns.batch_columns`): the same
columns as the messages built one by one (:func:`~zeps.clients.columns.message_columns` over
``batch.messages``) for any entries - empty keys and bodies, keys that are not UTF-8 (replaced
as the client decodes them), any first sequence and timestamp, entries that start anywhere in
the frame - on the C loops and on the Python ones. A batch of messages received one by one keeps
its headers."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")

from zeps.clients.message import MessageBatch  # noqa: E402
from zeps.journal import ranges  # noqa: E402
from zeps.protocol import batch as B  # noqa: E402
from zeps.clients.columns import ARROW_SCHEMA, batch_columns, message_columns  # noqa: E402
from .property_examples import examples  # noqa: E402

keys_st = st.one_of(st.text(max_size=20).map(lambda t: t.encode()[:255]),
                    st.binary(max_size=12))           # binary keys: some are not UTF-8
entries_st = st.lists(st.tuples(keys_st, st.binary(max_size=60)), min_size=1, max_size=40)


def _frame(items, pad):
    body = b"".join(bytes((len(k),)) + k + len(b).to_bytes(4, "big") + b for k, b in items)
    frame = b"\x00" * pad + body
    return frame, B.walk(frame, pad, len(frame), len(items), False)


def _same(got, want):
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray) or w is None:
            assert (None if g is None else g.tolist()) == (None if w is None else w.tolist())
        else:
            assert g.equals(w), (g, w)


@settings(max_examples=examples(300), deadline=None)
@given(entries_st, st.integers(0, 40), st.integers(1, 1 << 62),
       st.one_of(st.none(), st.integers(0, 1 << 62)), st.booleans())
def test_frame_columns_are_the_messages_columns(items, pad, first, ts, pure):
    frame, offsets = _frame(items, pad)
    batch = MessageBatch.from_frame(frame, offsets, first, ts, "s")
    saved = ranges.journalc
    if pure:
        ranges.journalc = None            # the pyarrow compaction (ZEPS_PURE_PYTHON=1)
    try:
        got = batch_columns(batch)
    finally:
        ranges.journalc = saved
    fresh = MessageBatch.from_frame(frame, offsets, first, ts, "s")
    want = message_columns(fresh.messages)
    _same(got, want)
    assert got[2].type == pa.string() and got[3].type == pa.binary()
    assert got[0].tolist() == list(range(first, first + len(items)))


def test_messages_one_by_one_keep_their_headers():
    from zeps.clients.message import Message
    from zeps.protocol.headers import NO_HEADERS, encode_block, headers_of
    frame, offsets = _frame([(b"k1", b"a"), (b"k2", b"bb")], 0)
    msgs = MessageBatch.from_frame(frame, offsets, 7, 99, "s").messages
    h = headers_of(encode_block([("h", b"v")]))
    with_h = [Message(m.sequence, m.key, m.body, m.timestamp, m.stream, h if i else NO_HEADERS)
              for i, m in enumerate(msgs)]
    seq, ts, key, body, headers = batch_columns(MessageBatch(with_h))
    assert headers.to_pylist() == [None, [{"key": "h", "value": b"v"}]]
    assert (seq.tolist(), ts.tolist(), key.to_pylist(), body.to_pylist()) == \
        ([7, 8], [99, 99], ["k1", "k2"], [b"a", b"bb"])


@settings(max_examples=examples(200), deadline=None)
@given(entries_st, st.integers(0, 40), st.integers(1, 1 << 62),
       st.one_of(st.none(), st.integers(0, 1 << 62)))
def test_to_arrow_rows_are_the_messages(items, pad, first, ts):
    """What a user reads from ``to_arrow()`` is, row by row, the batch's ``Message``s, and a
    batch kept as its frame gives the same record batch as one built from its messages."""
    frame, offsets = _frame(items, pad)
    rb = MessageBatch.from_frame(frame, offsets, first, ts, "s").to_arrow()
    msgs = MessageBatch.from_frame(frame, offsets, first, ts, "s").messages
    assert rb.schema == ARROW_SCHEMA
    assert rb.equals(MessageBatch(msgs).to_arrow())
    rows = rb.to_pydict()
    assert rows["sequence"] == [m.sequence for m in msgs]
    assert rows["key"] == [m.key for m in msgs]
    assert rows["body"] == [m.body for m in msgs]
    assert rows["headers"] == [None] * len(msgs)
    stamps = rb.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [ts] * len(msgs)


def test_to_arrow_keeps_headers_and_has_one_schema():
    from zeps.clients.message import Message
    from zeps.protocol.headers import NO_HEADERS, encode_block, headers_of
    h = headers_of(encode_block([("h", b"v")]))
    one = MessageBatch([Message(3, "k", b"b", None, "s", h)]).to_arrow()
    assert one.schema == ARROW_SCHEMA
    assert one.to_pydict() == {"sequence": [3], "timestamp": [None], "key": ["k"],
                               "body": [b"b"], "headers": [[{"key": "h", "value": b"v"}]]}
    frame, offsets = _frame([(b"a", b"1")], 0)
    other = MessageBatch.from_frame(frame, offsets, 4, 5, "s").to_arrow()
    table = pa.Table.from_batches([one, other])      # batches concatenate: one schema
    assert table.column("sequence").to_pylist() == [3, 4]
    assert MessageBatch([Message(1, "k", b"", 1, "s", NO_HEADERS)]).to_arrow().schema == \
        ARROW_SCHEMA


@pytest.mark.parametrize("first, ts", [((1 << 63) - 1, 0), (1, 1 << 63)])
def test_to_arrow_refuses_what_int64_cannot_hold(first, ts):
    frame, offsets = _frame([(b"a", b"1"), (b"b", b"2")], 0)
    with pytest.raises(ValueError, match="beyond int64"):
        MessageBatch.from_frame(frame, offsets, first, ts, "s").to_arrow()
    msgs = MessageBatch.from_frame(frame, offsets, first, ts, "s").messages
    with pytest.raises(ValueError, match="beyond int64"):
        MessageBatch(msgs).to_arrow()


def test_to_arrow_without_pyarrow_says_what_to_install(monkeypatch):
    import sys
    monkeypatch.delitem(sys.modules, "zeps.clients.columns", raising=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    frame, offsets = _frame([(b"a", b"1")], 0)
    with pytest.raises(ImportError, match=r"to_arrow needs pyarrow and numpy.*zeps\[spark\]"):
        MessageBatch.from_frame(frame, offsets, 1, 1, "s").to_arrow()
