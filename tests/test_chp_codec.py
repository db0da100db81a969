"""The CHP codec (RFC 12): every command byte for byte as the spec frames it, the Guide's kvmsg
frames, malformed input, and round trips."""
import struct
import uuid as uuidlib

import pytest
from hypothesis import given, strategies as st

from zeps.frontends import chp_codec as chp
from zeps.frontends.wire import Limits, Malformed

SEQ5 = b"\x00\x00\x00\x00\x00\x00\x00\x05"
UUID = bytes(range(16))


# --------------------------------------------------------------------------- the spec's frames

def test_icanhaz_as_the_rfc_frames_it():
    frames = [b"ICANHAZ?", b"/client/"]
    assert chp.decode_icanhaz(frames) == chp.IcanHaz("/client/")
    assert chp.encode_icanhaz("/client/") == frames
    assert chp.decode_icanhaz([b"ICANHAZ?", b""]) == chp.IcanHaz("")


def test_kvsync_as_the_rfc_frames_it():
    # key | sequence, 8 bytes in network order | <empty> | <empty> | value
    assert chp.encode_kvsync("/client/a", 5, b"v") == [b"/client/a", SEQ5, b"", b"", b"v"]


def test_kthxbai_as_the_rfc_frames_it():
    # "KTHXBAI" | sequence | <empty> | <empty> | subtree
    assert chp.encode_kthxbai(5, "/client/") == [b"KTHXBAI", SEQ5, b"", b"", b"/client/"]
    assert chp.encode_kthxbai(2**64 - 1, "") == [b"KTHXBAI", b"\xff" * 8, b"", b"", b""]


def test_kvpub_as_the_rfc_frames_it():
    # key | sequence | UUID, 16 bytes | properties "name=value<newline>"* | value
    msg = chp.KvMsg("/client/a", 5, UUID, (("ttl", "30"), ("owner", "x=y")), b"value")
    assert chp.encode_kvpub(msg) == [b"/client/a", SEQ5, UUID, b"ttl=30\nowner=x=y\n", b"value"]
    # the UUID MAY be empty; no properties is an empty frame; an empty value deletes
    assert chp.encode_kvpub(chp.KvMsg("k", 1)) == [b"k", b"\0" * 7 + b"\1", b"", b"", b""]


def test_hugz_as_the_rfc_frames_it():
    # "HUGZ" | 00000000 | <empty> | <empty> | <empty>
    assert chp.encode_hugz() == [b"HUGZ", b"\0" * 8, b"", b"", b""]


def test_kvset_as_the_guides_kvmsg_sends_it():
    """kvmsg.py: key | struct.pack('!q', seq) | uuid4().bytes | b"name=value\\n"... | body."""
    u = uuidlib.uuid4().bytes
    frames = [b"/client/7", struct.pack("!q", 0), u, b"ttl=5\n", b"hello"]
    msg = chp.decode_kvset(frames)
    assert msg == chp.KvMsg("/client/7", 0, u, (("ttl", "5"),), b"hello")
    assert msg.ttl == 5.0
    assert chp.encode_kvset(msg) == frames


def test_client_reads_every_server_command():
    kthxbai = chp.decode_kvmsg(chp.encode_kthxbai(9, "/a/"))
    assert (kthxbai.key, kthxbai.sequence, kthxbai.value) == ("KTHXBAI", 9, b"/a/")
    hugz = chp.decode_kvmsg(chp.encode_hugz())
    assert (hugz.key, hugz.sequence) == ("HUGZ", 0)
    sync = chp.decode_kvmsg(chp.encode_kvsync("/a/b", 3, b"x"))
    assert sync == chp.KvMsg("/a/b", 3, b"", (), b"x")


@pytest.mark.parametrize("props, ttl", [
    ((), None), ((("ttl", "0"),), None), ((("ttl", "30"),), 30.0), ((("ttl", "0.5"),), 0.5),
    ((("a", "b"), ("ttl", "2")), 2.0)])
def test_ttl(props, ttl):
    assert chp.ttl_seconds(props) == ttl


# --------------------------------------------------------------------------- malformed input

GOOD = [b"key", b"\0" * 8, UUID, b"", b"v"]


def _kvset(**changes):
    frames = list(GOOD)
    for i, v in changes.items():
        frames[int(i[1:])] = v
    return frames


@pytest.mark.parametrize("frames, reason", [
    ([], "frame count"),
    (GOOD[:4], "frame count"),
    (GOOD + [b"x"], "frame count"),
    (_kvset(f0=b""), "empty key"),
    (_kvset(f0=b"k" * 256), "key too large"),
    (_kvset(f0=b"\xff\xfe"), "key not UTF-8"),
    (_kvset(f0=b"KTHXBAI"), "reserved key"),
    (_kvset(f0=b"HUGZ"), "reserved key"),
    (_kvset(f0=b"ICANHAZ?"), "reserved key"),
    (_kvset(f1=b"\0" * 7), "bad sequence"),
    (_kvset(f1=b"0"), "bad sequence"),
    (_kvset(f2=b"\1" * 15), "bad uuid"),
    (_kvset(f2=b"\1" * 17), "bad uuid"),
    (_kvset(f3=b"ttl=5"), "bad properties"),
    (_kvset(f3=b"ttl\n"), "bad properties"),
    (_kvset(f3=b"=5\n"), "bad properties"),
    (_kvset(f3=b"a=1\na=2\n"), "bad properties"),
    (_kvset(f3=b"\n"), "bad properties"),
    (_kvset(f3=b"a=\xff\n"), "properties not UTF-8"),
    (_kvset(f3=b"a=1\n" * 65), "too many properties"),
    (_kvset(f3=b"a=" + b"x" * 4096 + b"\n"), "properties too large"),
    (_kvset(f3=b"ttl=soon\n"), "bad ttl"),
    (_kvset(f3=b"ttl=-1\n"), "bad ttl"),
    (_kvset(f3=b"ttl=1e9\n"), "bad ttl"),
    (_kvset(f3=b"ttl=99999999999\n"), "bad ttl"),
    (_kvset(f4=b"x" * ((1 << 20) + 1)), "value too large"),
])
def test_malformed_kvset(frames, reason):
    with pytest.raises(Malformed) as exc:
        chp.decode_kvset(frames)
    assert exc.value.reason == reason


@pytest.mark.parametrize("frames, reason", [
    ([], "bad command"),
    ([b"ICANHAZ"], "bad command"),
    ([b"ICANHAZ?!", b""], "bad command"),
    ([b"icanhaz?", b""], "bad command"),
    ([b"ICANHAZ?"], "frame count"),
    ([b"ICANHAZ?", b"", b""], "frame count"),
    ([b"ICANHAZ?", b"/" * 256], "subtree too large"),
    ([b"ICANHAZ?", b"/\xff/"], "subtree not UTF-8"),
])
def test_malformed_icanhaz(frames, reason):
    with pytest.raises(Malformed) as exc:
        chp.decode_icanhaz(frames)
    assert exc.value.reason == reason


def test_sizes_are_checked_before_decoding():
    """A huge frame is refused by its length: nothing of it is decoded (a value one byte over a
    small limit, a properties frame full of lines)."""
    small = Limits(max_value=10, max_properties_bytes=8)
    with pytest.raises(Malformed, match="value too large"):
        chp.decode_kvset(_kvset(f4=b"x" * 11), small)
    with pytest.raises(Malformed, match="properties too large"):
        chp.decode_kvset(_kvset(f3=b"a=1\n" * 3), small)
    assert chp.decode_kvset(_kvset(f4=b"x" * 10), small).value == b"x" * 10


# --------------------------------------------------------------------------- round trips

keys = st.text(min_size=1, max_size=60).filter(
    lambda k: len(k.encode()) <= 255 and k not in chp.RESERVED_KEYS)
names = st.text(min_size=1, max_size=12).filter(lambda s: "=" not in s and "\n" not in s)
values = st.text(max_size=20).filter(lambda s: "\n" not in s)
props = st.dictionaries(names.filter(lambda n: n not in ("ttl", "uuid")), values, max_size=5).map(
    lambda d: tuple(d.items()))
msgs = st.builds(chp.KvMsg, keys, st.integers(0, 2**64 - 1),
                 st.sampled_from([b"", UUID]), props, st.binary(max_size=100))


@given(msgs)
def test_kvmsg_round_trip(msg):
    frames = chp.encode_kvmsg(msg)
    assert chp.decode_kvset(frames) == msg
    assert chp.decode_kvmsg(frames) == msg
    assert chp.encode_kvmsg(chp.decode_kvset(frames)) == frames


@given(st.text(max_size=80).filter(lambda s: len(s.encode()) <= 255))
def test_icanhaz_round_trip(subtree):
    assert chp.decode_icanhaz(chp.encode_icanhaz(subtree)) == chp.IcanHaz(subtree)


@given(st.lists(st.binary(max_size=40), max_size=7))
def test_any_frames_parse_or_raise_malformed(frames):
    for decode in (chp.decode_kvset, chp.decode_icanhaz, chp.decode_kvmsg):
        try:
            decode(frames)
        except Malformed:
            pass


# --------------------------------------------------------------------------- on the stream

@given(msgs)
def test_headers_keep_uuid_and_properties(msg):
    """KVSET -> ZEPS headers -> KVPUB: the UUID and the properties come back unchanged."""
    back, dropped = chp.from_message(msg.sequence, msg.key, msg.value, chp.to_headers(msg))
    assert back == msg and dropped == 0


def test_headers_of_a_kvset_as_a_zeps_subscriber_sees_them():
    msg = chp.KvMsg("/k", 0, UUID, (("ttl", "30"), ("owner", "me")), b"v")
    assert chp.to_headers(msg) == (("uuid", UUID), ("ttl", b"30"), ("owner", b"me"))
    assert chp.to_headers(chp.KvMsg("/k", value=b"v")) == ()


def test_headers_chp_cannot_carry_are_left_out():
    text_uuid = b"0f8fad5b-d9cb-469f-a165-70867728950e"
    msg, dropped = chp.from_message(7, "/k", b"v", [
        ("uuid", text_uuid), ("a=b", b"1"), ("c", b"x\ny"), ("d", b"\xff"), ("e", b"ok"),
        ("uuid", UUID)])
    assert msg == chp.KvMsg("/k", 7, uuidlib.UUID(text_uuid.decode()).bytes, (("e", "ok"),), b"v")
    assert dropped == 4


def test_property_named_uuid_is_refused():
    with pytest.raises(Malformed, match="reserved property"):
        chp.decode_kvset([b"k", b"\0" * 8, b"", b"uuid=1\n", b"v"])
    with pytest.raises(Malformed, match="bad properties"):
        chp.decode_kvset([b"k", b"\0" * 8, b"", b"n" * 256 + b"=1\n", b"v"])


def test_a_zeps_messages_headers_make_properties_a_client_accepts():
    """Headers that repeat a name, or more of them than a KVSET may carry, made a KVPUB the
    codec's own reading refuses ("a name given twice", "too many properties"; found by review):
    the first of each name is kept, up to the limits, the rest counted as left out."""
    msg, dropped = chp.from_message(5, "/k", b"v", [("tag", b"1"), ("tag", b"2"), ("a", b"x")])
    assert msg.properties == (("tag", "1"), ("a", "x")) and dropped == 1
    assert chp.decode_kvmsg(chp.encode_kvpub(msg)) == msg
    many = [(f"h{i}", b"v") for i in range(100)]
    msg, dropped = chp.from_message(6, "/k", b"v", many)
    assert len(msg.properties) == 64 and dropped == 36
    assert chp.decode_kvmsg(chp.encode_kvpub(msg)) == msg
    for bad in (b"abc", b"-1", b"nan"):                   # a ttl a KVSET could not carry
        msg, dropped = chp.from_message(8, "/k", b"v", [("ttl", bad), ("a", b"x")])
        assert msg.properties == (("a", "x"),) and dropped == 1
        assert chp.decode_kvmsg(chp.encode_kvpub(msg)) == msg
    big = [(f"h{i}", b"v" * 1000) for i in range(10)]
    msg, dropped = chp.from_message(7, "/k", b"v", big)
    assert len(msg.properties) == 4 and dropped == 6
    assert chp.decode_kvmsg(chp.encode_kvpub(msg)) == msg
