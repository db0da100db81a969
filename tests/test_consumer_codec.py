"""The bytes of the consumer extension (ids 80-92, docs/consumers.md) and ACK's ranges."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from zeps.protocol import decode, encode
from zeps.protocol import commands as c
from zeps.protocol.consumer import (MAX_ACK_RANGES, bad_consumer_name, pack_ranges, ranges_of,
                                    unpack_ranges)

VECTORS = [
    (c.ConsumerAdd("g", ("a.",), c.START_SEQUENCE, 7, c.ACK_ALL, 1000, 5, 10, "dlq",
                   c.CONSUMER_KEY_ORDER),
     "aaa550" "0167" "0001" "02612e" "0001" "0000000000000007" "0001" "00000000000003e8"
     "00000005" "0000000a" "03646c71" "0001"),
    (c.ConsumerAddOk(5), "aaa551" "0000000000000005"),
    (c.Consume("g"), "aaa552" "0167"),
    (c.ConsumeOk(1, 2, 3), "aaa553" "0000000000000001" "0000000000000002" "0000000000000003"),
    (c.Ack(pack_ranges([(1, 3)])), "aaa554" "00000010" "0000000000000001" "0000000000000003"),
    (c.Nak(4, 250), "aaa555" "0000000000000004" "00000000000000fa"),
    (c.Progress(3), "aaa556" "0000000000000003"),
    (c.ConsumerInfo("g"), "aaa557" "0167"),
    (c.ConsumerInfoOk("{}"), "aaa558" "00000002" "7b7d"),
    (c.ConsumerList(), "aaa559"),
    (c.ConsumerListOk(("a", "b")), "aaa55a" "0002" "0161" "0162"),
    (c.ConsumerDelete("g"), "aaa55b" "0167"),
    (c.ConsumerDeleteOk(), "aaa55c"),
]


@pytest.mark.parametrize("cmd,hexed", VECTORS, ids=[v[0].NAME for v in VECTORS])
def test_bytes(cmd, hexed):
    assert encode(cmd).hex() == hexed
    assert decode(bytes.fromhex(hexed)) == cmd


@given(st.sets(st.integers(1, 2**64 - 1), max_size=200))
def test_ranges_round_trip_and_cover_exactly_the_sequences(seqs):
    runs = ranges_of(seqs)
    assert sum(last - first + 1 for first, last in runs) == len(seqs)
    assert all(a[1] + 1 < b[0] for a, b in zip(runs, runs[1:]))        # merged, sorted
    if runs:
        assert unpack_ranges(pack_ranges(runs)) == runs


@pytest.mark.parametrize("raw,why", [
    (b"", "1 or more pairs"), (b"\0" * 15, "1 or more pairs"),
    (bytes(16), "bad ACK range 0..0"),
    (pack_ranges([(1, 1)])[:8] + (0).to_bytes(8, "big"), "bad ACK range 1..0"),
    (pack_ranges([(1, 1)]) * (MAX_ACK_RANGES + 1), "at most 1024"),
])
def test_bad_ranges_say_why(raw, why):
    with pytest.raises(ValueError, match=why):
        unpack_ranges(raw)


def test_consumer_names():
    assert bad_consumer_name("orders-2.v1_x") == ""
    for bad in ("", "x" * 65, "a b", ".hidden", "é", "a/b"):
        assert bad_consumer_name(bad), bad
