"""Message headers on the wire (ids 70-73): the bytes docs/protocol.md gives, round trips, and
the limits checked in the block's head before a pair is read."""
import tracemalloc

import pytest
from hypothesis import given, strategies as st

from zeps.protocol import ProtocolError, decode, encode, encode_deliver
from zeps.protocol import commands as c
from zeps.protocol.headers import (MAX_HEADERS, MAX_HEADERS_BYTES, BadHeaders, Headers,
                                   check_head, decode_block, deliver_h_cost,
                                   deliver_h_from_deliver, deliver_h_sequence, encode_block,
                                   normalise, publish_h_frame)

ONE = (("a", b"b"),)
BLOCK_ONE = "00000005" "0001" "01" "61" "0001" "62"


def test_headers_commands_have_the_bytes_docs_protocol_md_gives():
    assert encode(c.HeadersSelect()).hex() == "aaa546"
    assert encode(c.HeadersSelectOk(255, 65536)).hex() == "aaa547" "00ff" "00010000"
    assert encode(c.PublishHeaders("eu.fr", b"hello", ONE)).hex() == (
        "aaa548" + BLOCK_ONE + "05" "65752e6672" "00000005" "68656c6c6f")
    assert encode(c.DeliverHeaders(123, 7, "eu.fr", b"hello", ONE)).hex() == (
        "aaa549" "000000000000007b" "0000000000000007" + BLOCK_ONE
        + "05" "65752e6672" "00000005" "68656c6c6f")
    # a CHP KVSET's UUID and properties as headers
    uuid = bytes(range(16))
    block = encode_block((("uuid", uuid), ("ttl", b"30")))
    assert block.hex() == ("0000001f" "0002" "04" "75756964" "0010" + uuid.hex()
                           + "03" "74746c" "0002" "3330")


def test_deliver_h_is_built_from_the_journal_deliver_bytes():
    frame = encode_deliver(9, b"eu.fr", b"x" * 300)
    block = encode_block((("trace", b"t1"), ("trace", b"t2")))
    got = deliver_h_from_deliver(frame, 2**63, block)
    want = c.DeliverHeaders(2**63, 9, "eu.fr", b"x" * 300, (("trace", b"t1"), ("trace", b"t2")))
    assert decode(got) == want and got == encode(want)
    assert deliver_h_sequence(got) == 9
    # credit: DELIVER's, plus the block (the timestamp is not charged)
    assert deliver_h_cost(got) == 8 + 1 + 5 + 300 + len(block)


_name = st.text(min_size=1, max_size=20).filter(lambda s: 1 <= len(s.encode()) <= 255)
_pairs = st.lists(st.tuples(_name, st.binary(max_size=40)), min_size=1, max_size=12).map(tuple)
_text = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
_u64 = st.integers(0, 2**64 - 1)
_cmds = st.one_of(
    st.builds(c.PublishHeaders, key=_text, body=st.binary(max_size=200), headers=_pairs),
    st.builds(c.DeliverHeaders, timestamp=_u64, sequence=_u64, key=_text,
              body=st.binary(max_size=200), headers=_pairs),
    st.builds(c.HeadersSelectOk, max_headers=st.integers(0, 0xFFFF),
              max_bytes=st.integers(0, 2**32 - 1)),
)


@given(_cmds)
def test_headers_commands_round_trip(cmd):
    frame = encode(cmd)
    got = decode(frame)
    assert got == cmd
    if isinstance(cmd, (c.PublishHeaders, c.DeliverHeaders)):
        assert got.block == encode_block(cmd.headers)
        assert decode_block(got.block) == cmd.headers


@given(_cmds, st.data())
def test_every_truncation_of_a_headers_command_is_refused(cmd, data):
    frame = encode(cmd)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        decode(frame[:cut])


@given(st.binary(max_size=80))
def test_arbitrary_bytes_after_the_ids_decode_or_raise(tail):
    for cid in (72, 73):
        try:
            decode(b"\xaa\xa5" + bytes((cid,)) + tail)
        except ProtocolError as err:
            assert str(err)


@given(_pairs, _text, st.binary(max_size=50))
def test_publish_h_frame_is_the_codec_frame(pairs, key, body):
    assert publish_h_frame(encode_block(pairs), key.encode(), body) == \
        encode(c.PublishHeaders(key, body, pairs))


@pytest.mark.parametrize("head, why", [
    ((5, 256), "256 headers, over the limit of 255"),
    ((MAX_HEADERS_BYTES + 1, 1), "over the limit of 65536"),
    ((2**32 - 1, 0xFFFF), "over the limit"),
    ((5, 0), "at least one header"),
    ((7, 2), "2 headers cannot fit in 7 bytes"),
    ((100, 1), "truncated headers"),
])
def test_a_block_head_over_the_limits_is_refused_before_any_pair(head, why):
    size, count = head
    frame = b"\xaa\xa5\x48" + size.to_bytes(4, "big") + count.to_bytes(2, "big") + b"\x01a\x00\x01b"
    with pytest.raises(ProtocolError, match=why):
        decode(frame)
    with pytest.raises(BadHeaders, match=why):
        check_head(frame, 3, len(frame))


def test_a_forged_headers_size_costs_nothing():
    frame = b"\xaa\xa5\x48" + (MAX_HEADERS_BYTES).to_bytes(4, "big") + (255).to_bytes(2, "big") \
        + b"\x00" * 20
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="truncated headers"):
            decode(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10


@pytest.mark.parametrize("block, why", [
    ("00000004" "0001" "00" "00" "0000", "empty name"),
    ("00000004" "0001" "01" "ff" "0000", "not valid UTF-8"),
    ("00000005" "0001" "01" "61" "0002" "62", "runs past the end"),
    ("00000006" "0001" "01" "61" "0000" "6262", "2 bytes after the last of 1 headers"),
])
def test_a_malformed_block_is_refused_with_the_reason(block, why):
    with pytest.raises(ProtocolError, match=why):
        decode(bytes.fromhex("aaa548" + block + "00" "00000000"))


def test_what_an_application_gives_is_normalised():
    assert normalise(None) == ()
    assert normalise({"a": "x", "b": [b"1", b"2"]}) == (("a", b"x"), ("b", b"1"), ("b", b"2"))
    assert normalise([("t", b"1"), ("t", bytearray(b"2"))]) == (("t", b"1"), ("t", b"2"))
    with pytest.raises(TypeError):
        normalise([(1, b"x")])
    with pytest.raises(TypeError):
        normalise({"a": 5})
    with pytest.raises(TypeError):
        normalise("a=b")
    with pytest.raises(BadHeaders, match="1 to 255"):
        normalise({"": b"x"})
    with pytest.raises(BadHeaders, match="over the limit of 255"):
        normalise([("n", b"")] * (MAX_HEADERS + 1))
    with pytest.raises(BadHeaders, match="over the limit of 65536"):
        normalise({"big": b"x" * MAX_HEADERS_BYTES})
    # the largest allowed
    assert len(encode_block(normalise({"b": b"x" * (MAX_HEADERS_BYTES - 4)}))) == 6 + MAX_HEADERS_BYTES


def test_headers_look_ups():
    h = Headers((("trace", b"1"), ("uuid", b"u"), ("trace", b"2")))
    assert h == (("trace", b"1"), ("uuid", b"u"), ("trace", b"2"))
    assert h.get("trace") == b"1" and h.last("trace") == b"2" and h.get("x", b"d") == b"d"
    assert h.getall("trace") == [b"1", b"2"] and h.getall("x") == []
    assert h.names() == ["trace", "uuid"]
    assert Headers() == () and not Headers()
