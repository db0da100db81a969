"""The journal's one-record path (``Journal.append``, :func:`encode_plain`; issue 20) against its
definition, ``append_batch`` of one item (:func:`encode_batch`): the same record, the same bytes on
disk, the same errors, for any key and body. Pure and in-process: real files in a temp dir, an
injected clock."""
from __future__ import annotations

import glob
import os
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from zeps.journal import Journal, JournalConfig
from zeps.journal.errors import InvalidRecordError, KeyTooLongError, RecordTooLargeError
from zeps.journal.record import encode_batch, encode_plain

MAX_RECORD = 600

keys = st.text(max_size=90) | st.text(min_size=250, max_size=300)          # around MAX_KEY
bodies = st.binary(max_size=700)                                             # around MAX_RECORD


@given(key=keys | st.none(), body=bodies | st.builds(bytearray, bodies),
       seq=st.integers(1, (1 << 64) - 1), ts=st.integers(0, (1 << 64) - 1))
def test_encode_plain_gives_what_encode_batch_gives_even_its_errors(key, body, seq, ts):
    try:
        parts, records = encode_batch(((key, body),), seq, ts, MAX_RECORD)
    except (KeyTooLongError, RecordTooLargeError, InvalidRecordError) as exc:
        with pytest.raises(type(exc)) as got:
            encode_plain(key, body, seq, ts, MAX_RECORD)
        assert str(got.value) == str(exc)
        return
    buf, rec = encode_plain(key, body, seq, ts, MAX_RECORD)
    assert buf == b"".join(parts)
    assert rec == records[0] and (rec.key, rec.body) == (key, bytes(body))


def _log_bytes(path: str) -> bytes:
    return b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(path, "*.log"))))


def _outcome(journal: Journal, one: bool, key, body):
    try:
        return journal.append(key, body) if one else journal.append_batch(((key, body),))[0]
    except Exception as exc:            # the same class and text either way
        return (type(exc), str(exc))


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.tuples(keys | st.just(b"k") | st.none(),
                                bodies | st.builds(bytearray, bodies) | st.just("text")),
                      min_size=1, max_size=40))
def test_append_of_one_record_writes_what_append_batch_writes(items):
    """Two journals, one appended with ``append`` and one with ``append_batch`` of one, the same
    clock readings: the same records or errors, and the same log files byte for byte (segments
    small enough to roll)."""
    config = JournalConfig(fsync="never", max_record_bytes=MAX_RECORD, segment_bytes=4096,
                           index_interval_bytes=512)
    with tempfile.TemporaryDirectory() as tmp:
        ticks = [iter(range(10**9, 10**12, 1000)) for _ in range(2)]
        a = Journal.open(os.path.join(tmp, "a"), config, clock=lambda: next(ticks[0]))
        b = Journal.open(os.path.join(tmp, "b"), config, clock=lambda: next(ticks[1]))
        try:
            for key, body in items:
                assert _outcome(a, True, key, body) == _outcome(b, False, key, body)
            assert (a.next_seq, a.info()) == (b.next_seq, b.info())
            assert _log_bytes(os.path.join(tmp, "a")) == _log_bytes(os.path.join(tmp, "b"))
            assert a.read_batch(1, max_records=100) == b.read_batch(1, max_records=100)
        finally:
            a.close()
            b.close()


def test_append_on_a_closed_journal_raises_as_append_batch_does(tmp_path):
    j = Journal.open(str(tmp_path / "j"), JournalConfig(fsync="never"))
    j.close()
    with pytest.raises(Exception) as one:
        j.append("k", b"x")
    with pytest.raises(Exception) as batch:
        j.append_batch((("k", b"x"),))
    assert (type(one.value), str(one.value)) == (type(batch.value), str(batch.value))
