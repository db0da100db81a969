"""The journal's headers extension (issue 18 item 7): a record of a message published with
headers keeps them inside its CRC, every reader returns them (Journal, JournalReader, the
columnar reader), records without headers are byte-for-byte what they always were, and a
damaged headers extension is found as damage is elsewhere."""
from __future__ import annotations

import os
import struct

import google_crc32c
import pytest
from hypothesis import given, settings, strategies as st

from zeps.journal import InvalidRecordError, Journal, JournalConfig, JournalReader, RecordTooLargeError
from zeps.journal.record import (BAD, END, HEADER, HEADERS_FLAG, PRODUCER_FLAG, HeadersRecord,
                                 Record, encode_batch, parse_records)
from zeps.protocol import commands as c
from zeps.protocol.batch import encode_entries
from zeps.protocol.deliver import encode_deliver
from zeps.protocol.headers import decode_block, encode_block
from .property_examples import examples

CFG = JournalConfig(segment_bytes=1 << 16, index_interval_bytes=512, fsync="never",
                    producer_max_age_ms=None)
UUID = bytes(range(16))
BLOCK = encode_block((("uuid", UUID), ("ttl", b"30"), ("ttl", b"31")))


def _clock():
    it = iter(range(10**18, 2 * 10**18, 1000))
    return lambda: next(it)


def test_a_record_without_headers_is_the_record_it_always_was():
    parts, _ = encode_batch([("eu.fr", b"hello")], 7, 123, 1 << 20)
    frame = encode_deliver(7, b"eu.fr", b"hello")
    crc = google_crc32c.extend(google_crc32c.value(struct.pack(">Q", 123)), frame)
    assert b"".join(parts) == HEADER.pack(len(frame), crc, 123) + frame
    parts, recs = encode_batch([("eu.fr", b"hello", None)], 7, 123, 1 << 20)
    assert b"".join(parts) == HEADER.pack(len(frame), crc, 123) + frame
    assert type(recs[0]) is Record and recs[0].headers == ()


def test_the_headers_extension_layout():
    parts, recs = encode_batch([("eu.fr", b"hello", BLOCK)], 7, 123, 1 << 20)
    raw = b"".join(parts)
    frame = encode_deliver(7, b"eu.fr", b"hello")
    length, crc, ts = HEADER.unpack_from(raw)
    assert length == HEADERS_FLAG | (len(BLOCK) + len(frame)) and ts == 123
    assert raw[16:] == BLOCK + frame
    assert crc == google_crc32c.value(raw[8:])
    rec = recs[0]
    assert isinstance(rec, HeadersRecord) and rec.frame == frame and rec.size == len(raw)
    assert rec.headers == (("uuid", UUID), ("ttl", b"30"), ("ttl", b"31"))
    assert rec.headers.getall("ttl") == [b"30", b"31"]
    # with a producer: producer extension first, then the headers, both flagged and CRC-covered
    parts, recs = encode_batch([("k", b"", BLOCK)], 1, 5, 1 << 20, producers=[("p1", 9)])
    raw = b"".join(parts)
    length = HEADER.unpack_from(raw)[0]
    assert length & PRODUCER_FLAG and length & HEADERS_FLAG
    assert raw[16:16 + 1 + 2 + 8] == b"\x02p1" + (9).to_bytes(8, "big")
    assert raw[27:27 + len(BLOCK)] == BLOCK
    assert (recs[0].producer, recs[0].pseq, recs[0].header_block) == ("p1", 9, BLOCK)
    out = []
    assert parse_records(raw, 0, len(raw), 1, out).status == END
    assert out == recs and out[0].size == len(raw)


def test_every_reader_returns_the_headers_and_the_producer_state_survives(tmp_path):
    d = str(tmp_path / "s")
    items = [("a", b"1"), ("b", b"2", BLOCK), ("c", b"3", None),
             c.PublishBatch(2, encode_entries([("d", b"4"), ("e", b"5")])), ("f", b"6", BLOCK)]
    with Journal.open(d, CFG, clock=_clock()) as j:
        recs = j.append_batch(items, producers=[None, ("p", 1), None, None, ("p", 2)])
        assert [r.headers for r in recs[:3]] == [(), decode_block(BLOCK), ()]
        got = j.read_batch(1, max_records=100)
    want = [(1, "a", ()), (2, "b", recs[1].headers), (3, "c", ()), (4, "d", ()), (5, "e", ()),
            (6, "f", recs[1].headers)]
    assert [(r.sequence, r.key, r.headers) for r in got] == want
    with Journal.open(d, CFG) as j:                     # recovery reads them back too
        assert [(r.sequence, r.key, r.headers) for r in j.read_batch(1, max_records=100)] == want
        assert j.producer("p")[0] == 2
        j.append_batch([("g", b"7", BLOCK)])
    with JournalReader(d) as r:
        assert [(x.sequence, x.headers) for x in r.read_from(6)] == [(6, want[1][2]), (7, want[1][2])]
        chunks = r.read_chunks(1, max_records=100)
        assert [type(ch).__name__ for ch in chunks] == ["Record", "HeadersRecord", "Record",
                                                         "BatchRecord", "HeadersRecord",
                                                         "HeadersRecord"]


def test_headers_count_against_max_record_bytes_and_are_checked(tmp_path):
    cfg = JournalConfig(max_record_bytes=100, fsync="never")
    with Journal.open(str(tmp_path / "s"), cfg) as j:
        block = encode_block((("n", b"x" * 80),))
        with pytest.raises(RecordTooLargeError, match="bytes of headers"):
            j.append_batch([("k", b"y" * 10, block)])
        for bad in (b"\x00\x00\x00\x04\x00\x01\x00\x00\x00\x00", BLOCK + b"x", "text", BLOCK[:-1]):
            with pytest.raises(InvalidRecordError):
                j.append_batch([("k", b"", bad)])
        assert j.next_seq == 1                           # all or nothing


def _record(ts: int, block: bytes, frame: bytes) -> bytes:
    """A record with a headers extension and a CRC that matches, whatever the bytes."""
    crc = google_crc32c.value(struct.pack(">Q", ts) + block + frame)
    return HEADER.pack((len(block) + len(frame)) | HEADERS_FLAG, crc, ts) + block + frame


@pytest.mark.parametrize("block, frame, why", [
    (b"\x00\x00\x00\x05\x01\x00" + b"\x01a\x00\x00x", encode_deliver(1, b"k", b""),
     "headers: 256 headers, over the limit"),
    (b"\x00\x00\x00\x04\x00\x01" + b"\x01a\x00\x01", encode_deliver(1, b"k", b""),
     "headers: header 0 of 1 runs past the end"),
    (BLOCK, b"\xaa\xa5\x3b" + struct.pack(">QQI", 5, 1, 1) + encode_entries([("k", b"")]),
     "headers on a batch record"),
    (BLOCK, b"", "below the minimum"),
])
def test_a_bad_headers_extension_under_a_good_crc_is_named(block, frame, why):
    raw = _record(5, block, frame)
    res = parse_records(raw, 0, len(raw), 1, [])
    assert res.status == BAD and why in res.info and res.pos == 0


def test_a_flipped_byte_in_the_headers_is_a_crc_mismatch_and_a_torn_one_is_short():
    parts, _ = encode_batch([("k", b"v", BLOCK)], 1, 5, 1 << 20)
    raw = bytearray(b"".join(parts))
    for cut in range(1, len(raw)):
        assert parse_records(bytes(raw[:cut]), 0, cut, 1, []).status == 2   # SHORT
    raw[20] ^= 1
    res = parse_records(bytes(raw), 0, len(raw), 1, [])
    assert res.status == BAD and res.info == "CRC-32C mismatch"


def test_a_torn_headers_record_is_truncated_by_recovery(tmp_path):
    d = str(tmp_path / "s")
    with Journal.open(d, CFG, clock=_clock()) as j:
        j.append_batch([("a", b"1", BLOCK)])
        j.append_batch([("b", b"2", BLOCK)])
        log = j._active.log_path
    size = os.path.getsize(log)
    with open(log, "r+b") as f:
        f.truncate(size - 3)
    with Journal.open(d, CFG) as j:
        assert [(r.sequence, r.headers.get("uuid")) for r in j.read_batch(1)] == [(1, UUID)]
        assert j.next_seq == 2


_names = st.sampled_from(["uuid", "ttl", "é" * 3, "x" * 255])
_blocks = st.one_of(st.none(), st.lists(st.tuples(_names, st.binary(max_size=30)),
                                        min_size=1, max_size=5).map(lambda p: encode_block(p)))


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=40), _blocks,
                          st.booleans()), min_size=1, max_size=30), st.randoms())
def test_any_mix_reads_back_through_every_reader(tmp_path_factory, items, rnd):
    pytest.importorskip("pyarrow")
    from zeps.journal.columnar import read_columns
    d = str(tmp_path_factory.mktemp("j") / "s")
    with Journal.open(d, JournalConfig(segment_bytes=1 << 12, index_interval_bytes=64,
                                       fsync="never"), clock=_clock()) as j:
        i = 0
        while i < len(items):
            n = rnd.randint(1, 4)
            chunk = items[i:i + n]
            j.append_batch([(k, b, h) for k, b, h, _p in chunk],
                           producers=[("p", i + k + 1) if p else None
                                      for k, (_k, _b, _h, p) in enumerate(chunk)])
            i += n
    want = [(k, b, h, ("p", n + 1) if p else (None, None))
            for n, (k, b, h, p) in enumerate(items)]
    with JournalReader(d) as r:
        got = [(x.key, x.body, x.header_block, (x.producer, x.pseq)) for x in r.read_from(1)]
        assert got == want
        first = rnd.randint(1, len(items))
        last = rnd.randint(first, len(items))
        rows = []
        for cols in read_columns(r, first, last, block_bytes=rnd.choice([256, 4096, 1 << 20])):
            rows += zip(cols.sequence.tolist(), cols.key.to_pylist(), cols.body.to_pylist(),
                        cols.producer.to_pylist(), cols.pseq.to_pylist(),
                        cols.headers.to_pylist())
    assert rows == [(s, k, b, p[0], p[1],
                     None if h is None else [{"key": n, "value": v} for n, v in decode_block(h)])
                    for s, (k, b, h, p) in enumerate(want, 1) if first <= s <= last]
