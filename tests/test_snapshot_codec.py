"""The bytes of the snapshot extension (ids 74-77, docs/protocol.md "Snapshots"): each command's
frame, the entries the broker builds from a stored DELIVER frame equal the codec's, and the
headers' limits are checked in SNAPSHOT-ENTRY-H's block head as in DELIVER-H's."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from zeps.protocol import ProtocolError, decode, encode
from zeps.protocol import commands as c
from zeps.protocol.deliver import encode_deliver
from zeps.protocol.headers import encode_block
from zeps.protocol.snapshot import entry_from_deliver, entry_h_from_deliver, parse_entry

VECTORS = [
    (c.Snapshot(("a.", "")), "aaa54a" "0002" "02612e" "00"),
    (c.SnapshotEntry(5, 7, "k", b"v"),
     "aaa54b" "0000000000000005" "0000000000000007" "016b" "00000001" "76"),
    (c.SnapshotEntryH(5, 7, "k", b"v", (("t", b"1"),)),
     "aaa54c" "0000000000000005" "0000000000000007" "00000005" "0001" "0174" "0001" "31"
     "016b" "00000001" "76"),
    (c.SnapshotEnd(9, 2), "aaa54d" "0000000000000009" "0000000000000002"),
]


@pytest.mark.parametrize("cmd,hexed", VECTORS, ids=[v[0].NAME for v in VECTORS])
def test_bytes(cmd, hexed):
    assert encode(cmd).hex() == hexed
    assert decode(bytes.fromhex(hexed)) == cmd


def test_the_brokers_entries_are_the_codecs():
    frame = encode_deliver(7, b"k", b"v")
    assert entry_from_deliver(frame, 5) == encode(c.SnapshotEntry(5, 7, "k", b"v"))
    h = (("t", b"1"),)
    assert entry_h_from_deliver(frame, 5, encode_block(h)) == \
        encode(c.SnapshotEntryH(5, 7, "k", b"v", h))


def test_an_entry_h_with_a_forged_header_count_is_refused_from_its_head():
    bad = bytes.fromhex("aaa54c" + "00" * 16 + "00000005" + "ffff" + "0174000131016b0000000176")
    with pytest.raises(ProtocolError, match="SNAPSHOT-ENTRY-H"):
        decode(bad)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.text(max_size=60),
       st.binary(max_size=300))
def test_the_readers_fast_path_reads_what_the_codec_reads(ts, seq, key, body):
    key = key.encode("utf-8")[:255].decode("utf-8", "ignore")
    frame = encode(c.SnapshotEntry(ts, seq, key, body))
    assert parse_entry(frame) == (ts, seq, key, body)
    padded = decode(frame + b"x")                       # the codec ignores what follows
    assert parse_entry(frame + b"x") == (padded.timestamp, padded.sequence, padded.key,
                                          padded.body)
    for bad in (frame[:-1], frame[:20]):                # cut: left to the codec, which refuses
        assert parse_entry(bad) is None
        with pytest.raises(ProtocolError):
            decode(bad)


def test_the_fast_path_leaves_other_frames_and_bad_keys_to_the_codec():
    assert parse_entry(encode(c.SnapshotEnd(9, 2))) is None
    bad_key = bytes.fromhex("aaa54b" + "00" * 16 + "01ff" + "00000000")
    assert parse_entry(bad_key) is None
    with pytest.raises(ProtocolError):
        decode(bad_key)
