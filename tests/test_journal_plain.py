"""The journal encoder's shortcut for plain records (a ``(key, body)`` pair without a producer,
one call of ``encode_plain``; issue 20) against its definition, the encoder's general code,
which encodes the triple ``(key, body, None)`` (no headers block): the same bytes, the same
records, the same errors, for any batch of keys and bodies, with the C loop ``plain_record``
and with its Python definition (``plain_record_py``); and the two against each other. Pure: no
files."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from zeps.journal.errors import InvalidRecordError, KeyTooLongError, RecordTooLargeError
from zeps.journal.record import encode_batch
from zeps.journal.record import encoder

from . import compiled

MAX_RECORD = 600

keys = st.text(max_size=90) | st.text(min_size=250, max_size=300)          # around MAX_KEY
bodies = st.binary(max_size=700)                                             # around MAX_RECORD
items = st.tuples(keys | st.none(), bodies | st.builds(bytearray, bodies)) | st.tuples(
    keys, bodies, st.none()) | st.lists(keys, min_size=2, max_size=2)


@pytest.fixture(scope="module", params=["in use", "python"])
def plain_record(request):
    """The shortcut's record builder: the one zeps uses (C where built), then the Python one."""
    used = encoder._plain_record
    if request.param == "python":
        encoder._plain_record = encoder.plain_record_py
    yield encoder._plain_record
    encoder._plain_record = used


def _as_triple(item):
    """The same item for the encoder's general code: a pair as ``(key, body, None)``."""
    return (*item, None) if type(item) is tuple and len(item) == 2 else item


@given(batch=st.lists(items, min_size=1, max_size=4), seq=st.integers(1, (1 << 64) - 1),
       ts=st.integers(0, (1 << 64) - 1), with_producers=st.booleans())
def test_plain_records_are_encoded_as_the_general_code_encodes_them(plain_record, batch, seq,
                                                                     ts, with_producers):
    producers = [None] * len(batch) if with_producers else None
    general = [_as_triple(item) for item in batch]
    try:
        parts, records = encode_batch(general, seq, ts, MAX_RECORD, producers=producers)
    except (KeyTooLongError, RecordTooLargeError, InvalidRecordError) as exc:
        with pytest.raises(type(exc)) as got:
            encode_batch(batch, seq, ts, MAX_RECORD, producers=producers)
        assert str(got.value) == str(exc)
        return
    got_parts, got_records = encode_batch(batch, seq, ts, MAX_RECORD, producers=producers)
    assert b"".join(got_parts) == b"".join(parts)
    assert got_records == records
    assert [(r.key, r.body, type(r)) for r in got_records] == [
        (r.key, r.body, type(r)) for r in records]


@given(key=st.binary(max_size=255), body=st.binary(max_size=2000),
       seq=st.integers(0, (1 << 64) - 1), ts=st.integers(0, (1 << 64) - 1))
def test_plain_record_in_c_is_its_python_definition(key, body, seq, ts):
    journalc = compiled.c_module("zeps.journal._journalc", "Python record encoder")
    assert journalc.plain_record(seq, ts, key, body) == encoder.plain_record_py(seq, ts, key, body)


def test_plain_record_in_c_refuses_what_it_cannot_encode():
    journalc = compiled.c_module("zeps.journal._journalc", "Python record encoder")
    with pytest.raises(ValueError):
        journalc.plain_record(1, 1, b"k" * 256, b"")
    with pytest.raises(TypeError):
        journalc.plain_record(1, 1, "k", b"")
    with pytest.raises(OverflowError):
        journalc.plain_record(1 << 64, 1, b"k", b"")
    with pytest.raises(OverflowError):
        journalc.plain_record(1, -1, b"k", b"")
