"""The ZEPS/1 codec: golden vectors from the reference codec, errors, and properties."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from zeps.protocol import commands as c
from zeps.protocol import ProtocolError, decode, encode, encode_deliver, deliver_sequence
from .property_examples import examples

VECTORS = json.loads((Path(__file__).parent / "data" / "zeps-wire-vectors.json").read_text())


def _fields(case):
    fields = dict(case["fields"])
    if "body_hex" in fields:
        fields["body"] = bytes.fromhex(fields.pop("body_hex"))
    return fields


def test_vectors_file_is_the_shared_one_unchanged():
    shared = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "zeps-wire-vectors.json"
    if not shared.exists():
        pytest.skip("../shared is not beside this checkout; the copy in tests/data is used")
    assert shared.read_bytes() == (Path(__file__).parent / "data" / "zeps-wire-vectors.json").read_bytes()


@pytest.mark.parametrize("case", VECTORS["encode"], ids=lambda k: f"{k['command']}:{k['hex']}")
def test_golden_encode(case):
    cmd = c.BY_NAME[case["command"]](**_fields(case))
    assert encode(cmd).hex() == case["hex"]


@pytest.mark.parametrize("case", VECTORS["encode"], ids=lambda k: f"{k['command']}:{k['hex']}")
def test_golden_decode(case):
    cmd = decode(bytes.fromhex(case["hex"]))
    assert cmd == c.BY_NAME[case["command"]](**_fields(case))
    assert cmd.NAME == case["command"]


@pytest.mark.parametrize("case", VECTORS["decode"], ids=lambda k: k["case"])
def test_golden_decode_cases(case):
    frame = bytes.fromhex(case["hex"])
    if case["result"] == "rejected":
        with pytest.raises(ProtocolError):
            decode(frame)
    else:
        name = case["result"].removeprefix("accepted as ").strip()
        assert decode(frame).NAME == name


@pytest.mark.parametrize("hexframe, reason", [
    ("", "empty frame"),
    ("aa", "truncated frame"),
    ("aaa608", "bad signature"),
    ("aaa50d", "unknown command 13"),
    ("aaa5ff", "unknown command 255"),
    ("aaa5050000", "truncated CREDIT"),
    ("aaa501045a45505800010173", "ATTACH protocol must be ZEPS"),
    ("aaa501045a45505300020173", "ATTACH version 2 not supported"),
    ("aaa50603616263000000", "truncated PUBLISH"),
    ("aaa5060361626300000005aa", "truncated PUBLISH"),
    ("aaa50602ff fe00000000".replace(" ", ""), "PUBLISH key is not valid UTF-8"),
    ("aaa50705", "truncated DELIVER"),
    ("aaa5030365", "truncated SUBSCRIBE"),
])
def test_reasons_are_readable(hexframe, reason):
    with pytest.raises(ProtocolError) as err:
        decode(bytes.fromhex(hexframe))
    assert reason in str(err.value)


def test_encode_rejects_what_cannot_be_sent():
    with pytest.raises(ProtocolError, match="key longer than 255 bytes"):
        encode(c.Publish("k" * 256, b""))
    with pytest.raises(ProtocolError, match="key longer than 255 bytes"):
        encode(c.Deliver(1, "é" * 128, b""))          # 256 bytes of UTF-8
    with pytest.raises(ProtocolError, match="latest must be an integer"):
        encode(c.Subscribe("", 2**64))
    with pytest.raises(ProtocolError, match="credit must be an integer"):
        encode(c.Credit(-1))
    with pytest.raises(ProtocolError, match="ATTACH version"):
        encode(c.Attach("s", version=2))
    assert len(encode(c.Publish("k" * 255, b""))) == 3 + 1 + 255 + 4


def test_invalid_reasons_are_cut_to_fit():
    from zeps.protocol import encode_invalid
    assert decode(encode_invalid("bad")) == c.Invalid("bad")
    long = decode(encode_invalid("é" * 300)).reason      # 600 bytes of UTF-8
    assert long.endswith("...") and len(long.encode()) <= 255 and long.startswith("éé")


def test_deliver_fast_path_matches_generic_and_sequence_peek():
    frame = encode_deliver(2**64 - 2, "eu.fr".encode(), b"x" * 70000)
    assert decode(frame) == c.Deliver(2**64 - 2, "eu.fr", b"x" * 70000)
    assert deliver_sequence(frame) == 2**64 - 2


def test_extension_bytes_as_documented():
    # docs/protocol.md gives these bytes; keep the two in step.
    assert encode(c.SeqAtTime(1)).hex() == "aaa520" + "0000000000000001"
    assert encode(c.SeqAtTimeOk(7)).hex() == "aaa521" + "0000000000000007"
    assert encode(c.ConfirmSelect()).hex() == "aaa522"
    assert encode(c.ConfirmSelectOk(0)).hex() == "aaa523" + "00" * 8
    assert encode(c.Confirm(2, 9)).hex() == "aaa524" + "0000000000000002" + "0000000000000009"
    assert encode(c.StreamInfo()).hex() == "aaa525"
    assert encode(c.StreamInfoOk(1, 9, 4096, 5, 6)).hex().startswith("aaa526")
    assert encode(c.ListStreams()).hex() == "aaa527"
    assert encode(c.ListStreamsOk(("a",))).hex() == "aaa528" + "0001" + "01" + "61"
    assert encode(c.DeliverTimestamps()).hex() == "aaa529"
    assert encode(c.DeliverTimestampsOk()).hex() == "aaa52a"
    assert encode(c.DeliverTs(123, 7, "eu.fr", b"hello")).hex() == (
        "aaa52b" "000000000000007b" "0000000000000007" "05" "65752e6672" "00000005" "68656c6c6f")
    assert all(cls.ID <= 12 or cls.ID >= 32 for cls in c.ALL_COMMANDS)


def test_deliver_ts_is_built_from_the_deliver_bytes():
    from zeps.protocol import deliver_ts_from_deliver
    frame = encode_deliver(9, "eu.fr".encode(), b"x" * 300)
    assert decode(deliver_ts_from_deliver(frame, 2**63)) == c.DeliverTs(2**63, 9, "eu.fr", b"x" * 300)


# ------------------------------------------------------------------ properties

_text = st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)
_u64 = st.integers(0, 2**64 - 1)
_body = st.binary(max_size=300)

_commands = st.one_of(
    st.builds(c.Attach, stream=_text),
    st.builds(c.Subscribe, pattern=_text, latest=_u64),
    st.builds(c.Credit, credit=_u64),
    st.builds(c.Publish, key=_text, body=_body),
    st.builds(c.Deliver, sequence=_u64, key=_text, body=_body),
    st.builds(c.Invalid, reason=_text),
    st.builds(c.SeqAtTime, timestamp=_u64),
    st.builds(c.SeqAtTimeOk, sequence=_u64),
    st.builds(c.ConfirmSelectOk, published=_u64),
    st.builds(c.Confirm, count=_u64, sequence=_u64),
    st.builds(c.StreamInfoOk, first=_u64, last=_u64, size=_u64, oldest=_u64, newest=_u64),
    st.builds(c.ListStreamsOk, streams=st.lists(_text, max_size=5).map(tuple)),
    st.builds(c.DeliverTs, timestamp=_u64, sequence=_u64, key=_text, body=_body),
    st.builds(c.Error, code=st.integers(0, 0xFFFF), fields=st.lists(st.text(max_size=400),
              max_size=4).map(tuple), text=st.text(max_size=600)),
    st.sampled_from([c.ReasonsSelect(), c.ReasonsSelectOk()]),
    st.sampled_from([c.AttachOk(), c.SubscribeOk(), c.Ping(), c.PingOk(), c.Detach(),
                     c.DetachOk(), c.ConfirmSelect(), c.StreamInfo(), c.ListStreams(),
                     c.DeliverTimestamps(), c.DeliverTimestampsOk()]),
)


@given(_commands)
def test_roundtrip(cmd):
    frame = encode(cmd)
    assert frame[:2] == b"\xaa\xa5" and frame[2] == cmd.ID
    assert decode(frame) == cmd


@given(_commands, st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_ignored_like_the_reference(cmd, tail):
    assert decode(encode(cmd) + tail) == cmd


@given(_commands, st.data())
def test_every_truncation_is_rejected_cleanly(cmd, data):
    frame = encode(cmd)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        decode(frame[:cut])


@settings(max_examples=examples(500))
@given(st.one_of(st.binary(max_size=64), st.binary(max_size=40).map(lambda b: b"\xaa\xa5" + b)))
def test_arbitrary_bytes_decode_or_raise_protocol_error(frame):
    try:
        cmd = decode(frame)
    except ProtocolError as err:
        assert str(err)
    else:
        assert isinstance(cmd, c.Command)


# --------------------------------------------------------------------------- batches (ids 56-59)

def test_batch_commands_have_the_bytes_docs_protocol_md_gives():
    from zeps.protocol.batch import encode_entries, encode_publish_batch
    two = [("eu.fr", b"hello"), ("", b"")]
    entries = "0565752e66720000000568656c6c6f0000000000"
    assert encode(c.BatchSelect()).hex() == "aaa538"
    assert encode(c.BatchSelectOk(1 << 20)).hex() == "aaa5390000000000100000"
    assert encode_publish_batch(two).hex() == "aaa53a00000002" + entries
    frame = encode(c.DeliverBatch(5, 7, 2, encode_entries(two)))
    assert frame.hex() == "aaa53b" + "0000000000000005" + "0000000000000007" + "00000002" + entries
    got = decode(frame)
    assert (got.timestamp, got.sequence, got.count, got.offsets) == (5, 7, 2, (0, 15, 20))
    assert decode(encode_publish_batch(two)) == c.PublishBatch(2, encode_entries(two))


@pytest.mark.parametrize("frame, why", [
    ("aaa53a00000000", "at least one message"),
    ("aaa53a0000", "truncated PUBLISH-BATCH"),
    ("aaa53a000000010100", "1 entries cannot fit in 2 bytes"),
    ("aaa53a00000001056162000000", "entry 0 of 1 runs past the end"),
    ("aaa53a00000001000000000000", "1 bytes after the last of 1 entries"),
    ("aaa53a00000002000000000141" + "00000000", "entry 1 of 2 runs past the end"),
    ("aaa53a0000000101ff00000000", "not valid UTF-8"),
])
def test_a_malformed_batch_is_refused_with_the_reason(frame, why):
    with pytest.raises(ProtocolError, match=why):
        decode(bytes.fromhex(frame))


@given(st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=50)), min_size=1, max_size=20))
def test_any_publish_batch_round_trips(items):
    from zeps.protocol.batch import encode_publish_batch, entry_body, entry_key
    got = decode(encode_publish_batch(items))
    assert [(entry_key(got.entries, o), entry_body(got.entries, o)) for o in got.offsets[:-1]] \
        == items


def test_a_forged_batch_count_is_refused_without_allocating_for_it():
    import tracemalloc
    frame = bytes.fromhex("aaa53a") + (2**32 - 1).to_bytes(4, "big") + b"\x00" * 10
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="cannot fit"):
            decode(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated for a 17-byte frame"
