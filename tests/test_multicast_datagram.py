"""The multicast datagram format (zeps/multicast/datagram.py): bytes as docs/protocol.md gives
them, round trips, and every bad payload rejected with a reason -- never another exception."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zeps.multicast import datagram as dg


def data(entries, session=7, number=1, stream="s", pattern=""):
    raw = []
    for e in entries:
        raw.append(dg.encode_ref(e.sequence, e.after) if e.ref else
                   dg.encode_entry(e.sequence, e.after, e.timestamp, e.key.encode(), e.body))
    return dg.encode_data(dg.header(dg.DATA, session, number, stream, pattern), raw)


def test_bytes_of_a_data_datagram_as_documented():
    d = data([dg.Entry(7, 6, 123, "eu.fr", b"hello")], session=1, number=2, stream="s",
             pattern="eu.")
    assert d.hex() == ("aaa5" "30" "01" "0000000000000001" "0000000000000002" "0173" "0365752e"
                       "0001"
                       "00" "0000000000000007" "0000000000000006" "000000000000007b"
                       "05" "65752e6672" "00000005" "68656c6c6f")
    assert len(d) == dg.header_size("s", "eu.") + dg.entry_size(5, 5)


def test_bytes_of_head_and_ref():
    h = dg.encode_head(1, 3, "s", "", 9, 1000)
    assert h.hex() == ("aaa5" "31" "01" "0000000000000001" "0000000000000003" "0173" "00"
                       "0000000000000009" "000003e8")
    assert dg.decode(h) == dg.Head(1, 3, "s", "", 9, 1000)
    ref = dg.encode_ref(10, 9)
    assert ref.hex() == "01" "000000000000000a" "0000000000000009" and len(ref) == dg.REF_SIZE


def test_round_trip_with_ref_and_trailing_bytes_ignored():
    entries = (dg.Entry(5, 2, 11, "a", b"x"), dg.Entry(6, 5, ref=True),
               dg.Entry(9, 6, 12, "é", b""))
    d = data(entries, stream="orders", pattern="~^a")
    assert dg.decode(d) == dg.Data(7, 1, "orders", "~^a", entries)
    assert dg.decode(d + b"more") == dg.decode(d)       # like every ZEPS frame


@pytest.mark.parametrize("payload, why", [
    (b"", "no ZEPS signature"),
    (b"hello world, not zeps at all", "no ZEPS signature"),
    (b"\xaa\xa5\x07" + bytes(40), "not a datagram kind: 7"),          # a DELIVER frame
    (dg.encode_head(1, 1, "s", "", 1, 1)[:3] + b"\x02" + dg.encode_head(1, 1, "s", "", 1, 1)[4:],
     "datagram version 2, not 1"),
])
def test_foreign(payload, why):
    with pytest.raises(dg.ForeignDatagram, match=why):
        dg.decode(payload)


def entry_bytes(flags=0, seq=2, after=1, ts=0, key=b"k", body=b"b"):
    return (bytes((flags,)) + seq.to_bytes(8, "big") + after.to_bytes(8, "big") +
            ts.to_bytes(8, "big") + bytes((len(key),)) + key + len(body).to_bytes(4, "big") + body)


HEAD = dg.header(dg.DATA, 1, 1, "s", "")


@pytest.mark.parametrize("payload, why", [
    (b"\xaa\xa5\x30\x01", "truncated header"),
    (HEAD[:-1], "truncated pattern"),
    (HEAD, "truncated entry count"),
    (HEAD + b"\x00\x00", "DATA with no entry"),
    (HEAD + b"\x00\x01" + entry_bytes()[:-1], "entry 1: body runs past the datagram"),
    (HEAD + b"\x00\x02" + entry_bytes(), "truncated entry 2 of 2"),
    (HEAD + b"\x00\x01" + entry_bytes(flags=2), "entry 1: unknown flags 0x02"),
    (HEAD + b"\x00\x01" + entry_bytes(seq=3, after=3), "entry 1: after 3 is not below sequence 3"),
    (HEAD + b"\x00\x02" + entry_bytes(seq=5, after=4) + entry_bytes(seq=7, after=4),
     "entry 2: after 4 is below the previous entry's sequence 5"),
    (HEAD + b"\x00\x01" + entry_bytes(key=b"\xff"), "entry 1: key is not UTF-8"),
    (dg.encode_head(1, 1, "s", "", 1, 1)[:-1], "truncated HEAD"),
])
def test_malformed(payload, why):
    with pytest.raises(dg.MalformedDatagram, match=why):
        dg.decode(payload)


entries = st.lists(st.tuples(st.integers(1, 1000), st.booleans(), st.integers(0, 2**64 - 1),
                             st.text(max_size=20), st.binary(max_size=50)), min_size=1,
                   max_size=20)


def build(spec):
    out, seq = [], 0
    for step, ref, ts, key, body in spec:
        after = seq
        seq += step
        out.append(dg.Entry(seq, after, ref=True) if ref else dg.Entry(seq, after, ts, key, body))
    return tuple(out)


@given(entries, st.text(min_size=1, max_size=30), st.text(max_size=30),
       st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_round_trip_property(spec, stream, pattern, session, number):
    es = build(spec)
    d = data(es, session, number, stream, pattern)
    assert dg.decode(d) == dg.Data(session, number, stream, pattern, es)


@given(entries, st.data())
def test_every_truncation_is_malformed(spec, draw):
    d = data(build(spec))
    cut = draw.draw(st.integers(2, len(d) - 1))
    with pytest.raises(dg.MalformedDatagram):
        dg.decode(d[:cut])


@given(st.binary(max_size=300))
def test_random_bytes_raise_only_datagram_errors(payload):
    try:
        dg.decode(payload)
    except dg.DatagramError:
        pass


@given(entries, st.data())
def test_a_flipped_byte_never_raises_anything_else(spec, draw):
    d = bytearray(data(build(spec)))
    i = draw.draw(st.integers(0, len(d) - 1))
    d[i] ^= draw.draw(st.integers(1, 255))
    try:
        dg.decode(bytes(d))
    except dg.DatagramError:
        pass
