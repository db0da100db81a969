"""The journal encoder's one-record shortcut (``encode_batch`` of one plain ``(key, body)``
without a producer; issue 20) against its definition, the encoder's loop (the same item with
``producers=[None]``, which the shortcut leaves to the loop): the same bytes, the same record,
the same errors, for any key and body. Pure: no files."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from zeps.journal.errors import InvalidRecordError, KeyTooLongError, RecordTooLargeError
from zeps.journal.record import encode_batch

MAX_RECORD = 600

keys = st.text(max_size=90) | st.text(min_size=250, max_size=300)          # around MAX_KEY
bodies = st.binary(max_size=700)                                             # around MAX_RECORD
items = st.tuples(keys | st.none(), bodies | st.builds(bytearray, bodies)) | st.tuples(
    keys, bodies, st.none()) | st.lists(keys, min_size=2, max_size=2)


@given(item=items, seq=st.integers(1, (1 << 64) - 1), ts=st.integers(0, (1 << 64) - 1))
def test_one_plain_record_is_encoded_as_the_loop_encodes_it(item, seq, ts):
    try:
        parts, records = encode_batch((item,), seq, ts, MAX_RECORD, producers=[None])
    except (KeyTooLongError, RecordTooLargeError, InvalidRecordError) as exc:
        with pytest.raises(type(exc)) as got:
            encode_batch((item,), seq, ts, MAX_RECORD)
        assert str(got.value) == str(exc)
        return
    got_parts, got_records = encode_batch((item,), seq, ts, MAX_RECORD)
    assert b"".join(got_parts) == b"".join(parts)
    assert got_records == records
    assert (got_records[0].key, got_records[0].body) == (records[0].key, records[0].body)
