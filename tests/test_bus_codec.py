"""The Event BUS codec: every command byte for byte as the RFC frames it and as the Node reference
(micro-toolkit/event-bus-zeromq) sends it, malformed input, and round trips in both dialects."""
import pytest
from hypothesis import given, strategies as st

from zeps.frontends import bus_codec as bus
from zeps.frontends.wire import Limits, Malformed

SEQ7 = b"\x00\x00\x00\x00\x00\x00\x00\x07"
TS = "2016-11-18T14:36:49.007Z"
UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
EVENT = bus.Event("/test/1/topic", 7, "producer", TS, UUID, b"\x81\xa1a\x01")


# --------------------------------------------------------------------------- the RFC's frames

def test_syncstart_as_the_rfc_frames_it():
    # "SYNCSTART" | subtrees joined by ';' | sequence, 8 bytes in network order
    frames = [b"SYNCSTART", b"/topic/;/othertopic/", SEQ7]
    start = bus.SyncStart(("/topic/", "/othertopic/"), 7)
    assert bus.decode_syncstart(frames) == start
    assert bus.encode_syncstart(start) == frames


def test_sync_as_the_rfc_frames_it():
    # "SYNC" | topic | sequence | producer | timestamp (ISO-8601) | UUID (v4 text) | data
    assert bus.encode_sync(EVENT) == [b"SYNC", b"/test/1/topic", SEQ7, b"producer", TS.encode(),
                                      UUID.encode(), b"\x81\xa1a\x01"]


def test_syncend_as_the_rfc_frames_it():
    # "SYNCEND" | subtrees | sequence
    assert bus.encode_syncend(("/a/", "/b/"), 7) == [b"SYNCEND", b"/a/;/b/", SEQ7]


def test_broadcast_and_pub_as_the_rfc_frames_them():
    frames = [b"/test/1/topic", SEQ7, b"producer", TS.encode(), UUID.encode(), b"\x81\xa1a\x01"]
    assert bus.encode_broadcast(EVENT) == frames
    assert bus.decode_broadcast(frames) == EVENT
    # PUB: the server gives the sequence; whatever the producer sent is dropped
    assert bus.decode_pub(frames) == bus.Event("/test/1/topic", 0, "producer", TS, UUID,
                                               b"\x81\xa1a\x01")


# --------------------------------------------------------------------------- the reference's frames

def test_syncstart_as_the_reference_subscriber_sends_it():
    """subscriber.js: [ 'SYNCSTART', topics.join(','), sequence ] -> String(n) per frame."""
    assert bus.decode_syncstart([b"SYNCSTART", b"/test/1/topic,/test-other", b"0"]) == \
        bus.SyncStart(("/test/1/topic", "/test-other"), 0)
    assert bus.decode_syncstart([b"SYNCSTART", b"/test/1/topic", b"99"]) == \
        bus.SyncStart(("/test/1/topic",), 99)
    # an 8-digit decimal is decimal, not 8 bytes of network order
    assert bus.decode_syncstart([b"SYNCSTART", b"", b"12345678"]).sequence == 12345678


def test_pub_as_the_reference_publisher_sends_it():
    """publisher.js sends [topic, null, producer, toISOString(), uuid, data] -> 'null' is the
    sequence frame (String(null))."""
    frames = [b"/test/1/topic", b"null", b"producer", TS.encode(), b"uuid", b"event-data"]
    assert bus.decode_pub(frames) == bus.Event("/test/1/topic", 0, "producer", TS, "uuid",
                                               b"event-data")
    for seq in (b"1", b"", SEQ7):
        frames[1] = seq
        assert bus.decode_pub(frames).sequence == 0


def test_reference_dialect_output():
    """The reference sends sequences as String(n) and joins subtrees with ','."""
    r = bus.REFERENCE
    assert bus.encode_sync(EVENT, r)[2] == b"7"
    assert bus.encode_broadcast(EVENT, r)[1] == b"7"
    assert bus.encode_syncend(("/test/1/topic", "/test-other"), 1, r) == \
        [b"SYNCEND", b"/test/1/topic,/test-other", b"1"]
    assert bus.encode_syncstart(bus.SyncStart(("/a",), 0), r) == [b"SYNCSTART", b"/a", b"0"]


def test_subtree_separators():
    d = bus.decode_subtrees
    assert d(b"") == ("",)
    assert d(b"/a/;/b/") == ("/a/", "/b/")
    assert d(b"/a/,/b/") == ("/a/", "/b/")
    assert d(b"/a,b/;/c/") == ("/a,b/", "/c/")      # a ';' list: ',' is part of a subtree
    assert d(b"/a/;") == ("/a/", "")


def test_iso8601_as_javascript_writes_it():
    assert bus.iso8601(1479479809007_000_000) == TS
    assert bus.iso8601(0) == "1970-01-01T00:00:00.000Z"


# --------------------------------------------------------------------------- malformed input

@pytest.mark.parametrize("frames, reason", [
    ([], "bad command"),
    ([b"SYNC", b"", b"0"], "bad command"),
    ([b"syncstart", b"", b"0"], "bad command"),
    ([b"SYNCSTART", b""], "frame count"),
    ([b"SYNCSTART", b"", b"0", b""], "frame count"),
    ([b"SYNCSTART", b"", b"abc"], "bad sequence"),
    ([b"SYNCSTART", b"", b"\0" * 7], "bad sequence"),
    ([b"SYNCSTART", b"", b"-1"], "bad sequence"),
    ([b"SYNCSTART", b"", b"18446744073709551616"], "bad sequence"),
    ([b"SYNCSTART", b"", b"1" * 21], "bad sequence"),
    ([b"SYNCSTART", b"/a;" * 64, bytes(8)], "too many subtrees"),
    ([b"SYNCSTART", b"," * 64, b"0"], "too many subtrees"),
    ([b"SYNCSTART", b"/" * 16385, b"0"], "subtrees too large"),
    ([b"SYNCSTART", b"/" * 256, b"0"], "subtree too large"),
    ([b"SYNCSTART", b"/\xff/", b"0"], "subtree not UTF-8"),
])
def test_malformed_syncstart(frames, reason):
    with pytest.raises(Malformed) as exc:
        bus.decode_syncstart(frames)
    assert exc.value.reason == reason


PUB = [b"/t", b"null", b"p", TS.encode(), b"u", b"d"]


def _pub(i, value):
    frames = list(PUB)
    frames[i] = value
    return frames


@pytest.mark.parametrize("frames, reason", [
    (PUB[:5], "frame count"),
    (PUB + [b""], "frame count"),
    (_pub(0, b""), "empty topic"),
    (_pub(0, b"t" * 256), "topic too large"),
    (_pub(0, b"\xc3"), "topic not UTF-8"),
    (_pub(1, b"nil"), "bad sequence"),
    (_pub(2, b"p" * 256), "producer too large"),
    (_pub(2, b"\xff"), "producer not UTF-8"),
    (_pub(3, b""), "bad timestamp"),
    (_pub(3, b"yesterday"), "bad timestamp"),
    (_pub(3, b"2016-11-18 14:36"), "bad timestamp"),
    (_pub(3, b"2" * 65), "timestamp too large"),
    (_pub(4, b"u" * 65), "uuid too large"),
    (_pub(4, b"0f8fad5b\nd9cb"), "bad uuid"),
    (_pub(5, b"d" * ((1 << 20) + 1)), "data too large"),
])
def test_malformed_pub(frames, reason):
    with pytest.raises(Malformed) as exc:
        bus.decode_pub(frames)
    assert exc.value.reason == reason


@pytest.mark.parametrize("ts", ["2016-11-18", "2016-11-18T14:36", "2016-11-18T14:36:49Z",
                                "2016-11-18T14:36:49.007+01:00", "2016-11-18T14:36:49.123456789Z"])
def test_timestamps_accepted(ts):
    assert bus.decode_pub(_pub(3, ts.encode())).timestamp == ts


def test_subtree_list_counted_before_split():
    limits = Limits(max_subtrees=3)
    assert bus.decode_subtrees(b"a;b;c", limits) == ("a", "b", "c")
    with pytest.raises(Malformed, match="too many subtrees"):
        bus.decode_subtrees(b"a;b;c;d", limits)


# --------------------------------------------------------------------------- round trips

topics = st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 255)
subtree = st.text(max_size=20).filter(lambda t: ";" not in t and "," not in t)
events = st.builds(bus.Event, topics, st.integers(0, 2**64 - 1), st.text(max_size=30),
                   st.sampled_from([TS, "2020-01-01T00:00:00Z", "2020-01-01"]),
                   st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=36)
                   .filter(lambda u: len(u.encode()) <= 64),      # the uuid limit is in bytes
                   st.binary(max_size=64))
dialects = st.sampled_from([bus.RFC, bus.REFERENCE])


@given(events, dialects)
def test_event_round_trip(event, dialect):
    assert bus.decode_broadcast(bus.encode_broadcast(event, dialect)) == event
    assert bus.decode_snapshot_reply(bus.encode_sync(event, dialect)) == event


@given(st.lists(subtree, min_size=1, max_size=10), st.integers(0, 2**64 - 1), dialects)
def test_syncstart_and_syncend_round_trip(subtrees, sequence, dialect):
    start = bus.SyncStart(tuple(subtrees), sequence)
    assert bus.decode_syncstart(bus.encode_syncstart(start, dialect)) == start
    end = bus.decode_snapshot_reply(bus.encode_syncend(subtrees, sequence, dialect))
    assert end == bus.SyncEnd(tuple(subtrees), sequence)


@given(st.integers(0, 2**64 - 1))
def test_sequence_both_forms(n):
    assert bus.decode_sequence(bus.REFERENCE.sequence(n)) == n
    raw = bus.RFC.sequence(n)
    if raw.isdigit():          # 8 binary bytes that are all ASCII digits read as decimal ...
        assert n >= 0x3030303030303030          # ... only from about 3.5 * 10^18 on
    else:
        assert bus.decode_sequence(raw) == n


@given(st.lists(st.binary(max_size=30), max_size=8))
def test_any_frames_parse_or_raise_malformed(frames):
    for decode in (bus.decode_syncstart, bus.decode_pub, bus.decode_broadcast,
                   bus.decode_snapshot_reply):
        try:
            decode(frames)
        except Malformed:
            pass


# --------------------------------------------------------------------------- on the stream

@given(events)
def test_headers_keep_producer_timestamp_and_uuid(event):
    back = bus.from_message(event.sequence, event.topic, event.data, 0, bus.to_headers(event))
    assert back == event


def test_a_plain_zeps_message_as_an_event():
    assert bus.from_message(3, "/t", b"d", 1479479809007_000_000) == \
        bus.Event("/t", 3, "", TS, "", b"d")
    # CHP's 16-byte UUID in its text form; headers of other names ignored
    u = bytes(range(16))
    ev = bus.from_message(3, "/t", b"d", 0, [("uuid", u), ("ttl", b"5")])
    assert ev.uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    # 16 bytes of text are a PUB's own UUID, kept as it was
    assert bus.from_message(3, "/t", b"d", 0, [("uuid", b"0123456789abcdef")]).uuid == \
        "0123456789abcdef"
    assert bus.to_headers(EVENT) == (("producer", b"producer"), ("timestamp", TS.encode()),
                                     ("uuid", UUID.encode()))


def test_syncstart_splits_subtrees_by_its_senders_dialect():
    """The sequence's form tells the dialect: 8 bytes, the RFC's ``;``; decimal (or empty), the
    reference's ``,``. A subtree may hold the other separator: "/a,b/" from an RFC client was
    split into "/a" and "b/", and the client got events outside its subtree (found by review)."""
    rfc = bus.decode_syncstart([b"SYNCSTART", b"/a,b/", bytes(8)])
    assert rfc == bus.SyncStart(("/a,b/",), 0)
    assert bus.decode_syncstart([b"SYNCSTART", b"/a,b/;/c/", bytes(7) + b"\5"]).subtrees == (
        "/a,b/", "/c/")
    ref = bus.decode_syncstart([b"SYNCSTART", b"/a;b/,/c/", b"12"])
    assert ref == bus.SyncStart(("/a;b/", "/c/"), 12)
    assert bus.decode_syncstart([b"SYNCSTART", b"/a;b/", b""]).subtrees == ("/a;b/",)


def test_a_zeps_publishers_headers_a_pub_could_not_carry_are_not_passed_on():
    """A PUBLISH-H with ``timestamp=yesterday`` and a 20-byte UUID of control characters went
    out as a BROADCAST the front end's own decoder refuses (a client's ``new Date(ts)`` fails):
    the journal's timestamp, and no UUID, instead (found by review)."""
    ev = bus.from_message(3, "/h", b"x", 1479479809007_000_000,
                          [("timestamp", b"yesterday"), ("uuid", b"\x01" * 20)])
    assert (ev.timestamp, ev.uuid) == (TS, "")
    assert bus.decode_broadcast(bus.encode_broadcast(ev)) == ev
    ok = bus.from_message(3, "/h", b"x", 0, [("timestamp", TS.encode()), ("uuid", b"u-1")])
    assert (ok.timestamp, ok.uuid) == (TS, "u-1")
