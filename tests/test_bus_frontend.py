"""The broker's Event BUS front end (``zeps broker --bus PORT:STREAM``) with real clients: raw
ZeroMQ sockets speaking the protocol (tests/frontends.py) in both dialects, and ZEPS peers on
the same stream.

Every command byte for byte (the RFC's output, the reference's with ``--bus-dialect
reference``, both forms accepted on input); a late joiner with several subtrees and a sequence
gets every event above it, then broadcasts with no gap; one journal with ZEPS clients; a broker
restart; hostile clients (SYNCSTART floods, huge subtree lists, PUB floods, malformed commands
on every socket) beside calm ones."""
from __future__ import annotations

import struct
import threading

import pytest
import zmq

from zeps.frontends import bus_codec as bc
from zeps.protocol import commands as c

from .frontends import (BusClient, counters, never_reading, recv, restart, start_frontend,
                        wait_counter, wait_position)
from .pair import Pair
from .test_cli import zeps
from .test_chp_frontend import zeps_messages, zeps_publisher, zeps_reader

U64 = struct.Struct(">Q")
TS = "2016-11-18T14:36:49.007Z"
UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def warm(client: BusClient, topic: str = "~warm") -> None:
    """PUB until a BROADCAST comes back: the client's SUB subscription reached the publisher."""
    for _ in range(100):
        client.pub(topic, b"w")
        ev = client.broadcast(0.2)
        while ev is not None and ev.topic != topic:
            ev = client.broadcast(0.2)
        if ev is not None:
            return
    raise AssertionError("no BROADCAST came back")


@pytest.fixture
def bus(start_broker):
    b = start_frontend(start_broker, "--bus", "ev")
    b.name = f"bus:{b.port}"
    return b


def raw_socket(kind: int, port: int):
    s = zmq.Context.instance().socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    if kind == zmq.SUB:
        s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(f"tcp://127.0.0.1:{port}")
    return s


# --------------------------------------------------------------------------- the bytes

def test_every_bus_command_byte_for_byte_as_the_rfc_frames_it(bus):
    reader = zeps_reader(bus.endpoint, "ev")
    client = BusClient(bus.port)
    warm(client)
    producer = raw_socket(zmq.DEALER, bus.port + 2)
    sub = raw_socket(zmq.SUB, bus.port + 1)
    warm(client, "~warm2")                                # ... which sub also waited for
    # PUB topic | sequence (ignored) | producer | timestamp | UUID | data -> BROADCAST, the
    # ZEPS sequence in 8 bytes, producer id, timestamp and UUID kept
    producer.send_multipart([b"/t/1", b"\0" * 8, b"prod-1", TS.encode(), UUID.encode(),
                             b"\x81\xa1a\x01"])
    producer.send_multipart([b"/u/2", b"null", b"prod-2", TS.encode(), b"", b"d2"])   # Node's
    producer.send_multipart([b"/v/3", b"17", b"prod-3", TS.encode(), b"", b"d3"])     # forms
    got = []
    while len(got) < 3:
        got += [m for m in zeps_messages(reader, 1) if m.key.startswith("/")]
    s1, s2, s3 = (m.sequence for m in got)
    assert (s2, s3) == (s1 + 1, s1 + 2)
    assert got[0].headers == (("producer", b"prod-1"), ("timestamp", TS.encode()),
                              ("uuid", UUID.encode()))
    frames = recv(sub)
    while frames[0] != b"/t/1":
        frames = recv(sub)
    assert frames == [b"/t/1", U64.pack(s1), b"prod-1", TS.encode(), UUID.encode(),
                      b"\x81\xa1a\x01"]
    assert recv(sub) == [b"/u/2", U64.pack(s2), b"prod-2", TS.encode(), b"", b"d2"]
    assert recv(sub) == [b"/v/3", U64.pack(s3), b"prod-3", TS.encode(), b"", b"d3"]
    # SYNCSTART subtrees (';') | sequence (8 bytes) -> SYNC... SYNCEND subtrees | sequence
    snap = raw_socket(zmq.DEALER, bus.port)
    snap.send_multipart([b"SYNCSTART", b"/t/;/v/", U64.pack(0)])
    assert recv(snap) == [b"SYNC", b"/t/1", U64.pack(s1), b"prod-1", TS.encode(), UUID.encode(),
                          b"\x81\xa1a\x01"]
    assert recv(snap) == [b"SYNC", b"/v/3", U64.pack(s3), b"prod-3", TS.encode(), b"", b"d3"]
    assert recv(snap) == [b"SYNCEND", b"/t/;/v/", U64.pack(s3)]
    # the reference's input form: ',' and a decimal sequence; output stays the RFC's
    snap.send_multipart([b"SYNCSTART", b"/u/,/v/", str(s2).encode()])
    assert recv(snap) == [b"SYNC", b"/v/3", U64.pack(s3), b"prod-3", TS.encode(), b"", b"d3"]
    assert recv(snap) == [b"SYNCEND", b"/u/;/v/", U64.pack(s3)]
    # a ZEPS publish is an event: no producer, no UUID, its journal timestamp
    zeps_publisher(bus.endpoint, "ev").send(c.Publish("/z/plain", b"zz"))
    plain = zeps_messages(reader, 1)[0]
    frames = recv(sub)
    assert frames == [b"/z/plain", U64.pack(plain.sequence), b"",
                      bc.iso8601(plain.timestamp).encode(), b"", b"zz"]
    for s in (producer, sub, snap):
        s.close(0)
    client.close()


def test_the_reference_dialect_writes_decimal_sequences_and_commas(start_broker):
    b = start_frontend(start_broker, "--bus", "ev", "--bus-dialect", "reference")
    port = b.port
    client = BusClient(port, dialect=bc.REFERENCE)
    warm(client)
    sub = raw_socket(zmq.SUB, port + 1)
    warm(client, "~warm2")
    client.pub("/t/1", b"d", producer="p", uuid=UUID)
    frames = recv(sub)
    while frames[0] != b"/t/1":
        frames = recv(sub)
    seq = int(frames[1])
    assert frames == [b"/t/1", str(seq).encode(), b"p", TS.encode(), UUID.encode(), b"d"]
    snap = raw_socket(zmq.DEALER, port)
    snap.send_multipart([b"SYNCSTART", b"/t/,/x/", b"0"])
    assert recv(snap) == [b"SYNC", b"/t/1", str(seq).encode(), b"p", TS.encode(),
                          UUID.encode(), b"d"]
    assert recv(snap) == [b"SYNCEND", b"/t/,/x/", str(seq).encode()]
    snap.send_multipart([b"SYNCSTART", b"/t/;/x/", U64.pack(0)])      # the RFC's form in
    assert recv(snap)[0] == b"SYNC"
    assert recv(snap) == [b"SYNCEND", b"/t/,/x/", str(seq).encode()]
    assert counters(b, f"bus:{port}")["collector.pub"] >= 3
    for s in (sub, snap):
        s.close(0)
    client.close()


# --------------------------------------------------------------------------- behaviour

def test_a_late_joiner_gets_every_event_above_its_sequence_then_broadcasts_with_no_gap(bus):
    """1500 events on three subtrees; a client of two of them joins at sequence 200 while 1500
    more are published: its SYNCs and then BROADCASTs are exactly the stream's events of those
    subtrees above 200, in order, each once (every event, not the last per topic)."""
    pub = zeps_publisher(bus.endpoint, "ev")
    topics = ["/a/x", "/b/y", "/c/z", "/a/w"]
    for i in range(1500):
        pub.send(c.Publish(topics[i % 4], b"e%d" % i))
    wait_position(bus, bus.name, 1500)
    joiner = BusClient(bus.port, subtrees=("/a/", "/b/"))
    warm(joiner, "/b/warm")                               # seq 1501 (and maybe more)
    done = threading.Event()

    def write():
        w = zeps_publisher(bus.endpoint, "ev")
        for i in range(1500, 3000):
            w.send(c.Publish(topics[i % 4], b"e%d" % i))
        w.send(c.Ping())
        w.expect(c.PingOk)
        done.set()
    t = threading.Thread(target=write)
    t.start()
    joiner.sequence = 0
    joiner.events = []
    syncs, end = joiner.sync(after=200)
    t.join()
    assert done.is_set()
    assert end.subtrees == ("/a/", "/b/") and all(e.sequence <= end.sequence for e in syncs)
    reader = zeps_reader(bus.endpoint, "ev", latest=200)
    stream = zeps_messages(reader, 3000 - 200 + 1)
    last = stream[-1].sequence
    while joiner.sequence < last:
        assert joiner.broadcast() is not None
    wanted = [(m.sequence, m.key, m.body) for m in stream
              if m.key.startswith(("/a/", "/b/"))]
    assert [(e.sequence, e.topic, e.data) for e in joiner.events] == wanted
    joiner.close()


def test_a_broker_restart_keeps_the_events(bus):
    client = BusClient(bus.port, subtrees=("/r/",))
    for i in range(5):
        client.pub("/r/e", b"%d" % i, uuid=UUID)
    wait_position(bus, bus.name, 5)
    client.close()
    restart(bus)
    again = BusClient(bus.port, subtrees=("/r/",))
    syncs, end = again.sync(after=2)
    assert [(e.sequence, e.data, e.uuid, e.producer) for e in syncs] == \
        [(3, b"2", UUID, "p1"), (4, b"3", UUID, "p1"), (5, b"4", UUID, "p1")]
    assert end.sequence == 5
    warm(again, "/r/warm")
    assert again.events[-1].sequence >= 6
    again.close()


def test_a_late_joiner_gets_nothing_a_purge_dropped(bus):
    """``zeps stream purge ev --upto 3`` deleted no segment, so 1..3 are on disk still: a late
    joiner's SYNCs start at 4 (the front end read them from the journal, purged ones too)."""
    client = BusClient(bus.port, subtrees=("/p/",))
    for i in range(5):
        client.pub("/p/e", b"%d" % i)
    wait_position(bus, bus.name, 5)
    client.close()
    r = zeps("stream", "purge", "ev", "--upto", "3", "--endpoint", bus.endpoint)
    assert r.returncode == 0, r.stderr
    joiner = BusClient(bus.port, subtrees=("/p/",))
    syncs, end = joiner.sync(after=0)
    assert [(e.sequence, e.data) for e in syncs] == [(4, b"3"), (5, b"4")]
    assert end.sequence == 5
    joiner.close()


# --------------------------------------------------------------------------- hostile clients

def test_syncstart_floods_and_readers_that_never_read_do_not_delay_a_calm_client(bus):
    pub = zeps_publisher(bus.endpoint, "ev")
    for i in range(3000):
        pub.send(c.Publish(f"/f/{i % 7}", b"v" * 2000))
    wait_position(bus, bus.name, 3000)
    hostile = never_reading(bus.port, [b"SYNCSTART", b"", U64.pack(0)], 40, each=200)
    wait_counter(bus, bus.name, "snapshot.busy", 5000)
    calm = BusClient(bus.port, subtrees=("/f/",))
    syncs, end = calm.sync(timeout=10)
    assert len(syncs) == 3000 and end.sequence == 3000
    for s in hostile:
        s.close(0)
    calm.close()


def test_a_pub_flood_does_not_stop_a_calm_producer_or_zeps_clients(bus):
    pair = Pair(bus.endpoint, stream="calm")
    calm = BusClient(bus.port, subtrees=("/calm/",))
    warm(calm, "/calm/warm")
    flood = zmq.Context.instance().socket(zmq.DEALER)
    flood.setsockopt(zmq.LINGER, 0)
    flood.setsockopt(zmq.SNDTIMEO, 100)
    flood.connect(f"tcp://127.0.0.1:{bus.port + 2}")
    stop = threading.Event()
    frames = bc.encode_pub(bc.Event("/flood/x", 0, "f", TS, "", b"x" * 100))

    def flooding():
        n = 0
        while not stop.is_set() and n < 200_000:
            try:
                flood.send_multipart(frames)
                n += 1
            except zmq.Again:
                pass
    t = threading.Thread(target=flooding)
    t.start()
    try:
        wait_counter(bus, bus.name, "collector.pub", 5000)
        for i in range(20):
            calm.pub(f"/calm/{i}", b"c%d" % i)
        pair.publish(100)
        got = set()
        while len(got) < 20:
            ev = calm.broadcast(20)
            assert ev is not None, f"got {sorted(got)}"
            if ev.topic != "/calm/warm":
                got.add((ev.topic, ev.data))
        assert pair.wait_all(timeout=20)
    finally:
        stop.set()
        t.join()
    assert got == {(f"/calm/{i}", b"c%d" % i) for i in range(20)}
    assert pair.problems == []
    flood.close(0)
    pair.close()
    calm.close()


def test_malformed_commands_and_huge_subtree_lists_are_ignored_and_counted(start_broker):
    b = start_frontend(start_broker, "--bus", "ev", "--max-message", "64K")
    port = b.port
    name = f"bus:{port}"
    calm = BusClient(port, subtrees=("/c/",))
    warm(calm, "/c/warm")
    snap = raw_socket(zmq.DEALER, port)
    bad_requests = [
        [b"SYNCSTART", b""],                              # frame count
        [b"SYNCSTART", b"", b"", b""],                    # frame count
        [b"SYNCSTART"] + [b""] * 3000,                    # frame count
        [b"SYNC", b"", b""],                              # bad command
        [b"SYNCSTART", b"", b"1234x"],                    # bad sequence (5 bytes, not digits)
        [b"SYNCSTART", b"", b"99999999999999999999"],    # bad sequence (over 2^64-1)
        [b"SYNCSTART", b"\xff", b"0"],                    # subtree not UTF-8
        [b"SYNCSTART", b";".join([b"/s/"] * 1000), bytes(8)],    # too many subtrees
        [b"SYNCSTART", b"/" * 16500, b"0"],               # subtrees too large
        [b"SYNCSTART", b"/" * 300, b"0"],                 # subtree too large
    ]
    for frames in bad_requests:
        snap.send_multipart(frames)
    # a frame over the socket's limit: ZeroMQ drops that connection, before the broker holds it
    huge = raw_socket(zmq.DEALER, port)
    huge.send_multipart([b"SYNCSTART", b";".join([b"/s/"] * 100_000), b"0"])
    producer = raw_socket(zmq.DEALER, port + 2)
    ok = [b"/t", b"", b"p", TS.encode(), b"", b"d"]
    bad_pubs = [
        ok[:5],                                           # frame count
        ok + [b""],                                       # frame count
        [b""] + ok[1:],                                   # empty topic
        [b"\xff"] + ok[1:],                               # topic not UTF-8
        ok[:1] + [b"seven"] + ok[2:],                     # bad sequence
        ok[:3] + [b"yesterday"] + ok[4:],                 # bad timestamp
        ok[:4] + [b"a\nb"] + ok[5:],                      # bad uuid
        ok[:2] + [b"p" * 256] + ok[3:],                   # producer too large
        ok[:5] + [b"d" * ((64 << 10) + 1)],               # data too large
    ]
    for frames in bad_pubs:
        producer.send_multipart(frames)
    # the PUB socket takes no commands: a peer of the wrong kind is refused by ZeroMQ itself
    wrong = raw_socket(zmq.DEALER, port + 1)
    try:               # once ZeroMQ has refused the peer, the DEALER has none: a send would block
        wrong.send_multipart([b"SYNCSTART", b"", U64.pack(0)], zmq.NOBLOCK)
    except zmq.Again:  # (as in tests/test_chp_frontend.py, where it once did, for ever)
        pass
    seen = wait_counter(b, name, "collector.malformed", len(bad_pubs))
    seen = wait_counter(b, name, "snapshot.malformed", len(bad_requests))
    assert seen["snapshot.malformed"] == len(bad_requests)
    assert seen["collector.malformed"] == len(bad_pubs)
    assert seen["snapshot.malformed.too many subtrees"] == 1
    assert seen["snapshot.malformed.subtrees too large"] == 1
    assert seen["snapshot.malformed.frame count"] == 3
    assert seen["collector.malformed.bad uuid"] == 1
    # none of it reached the stream; everyone is still served
    calm.pub("/c/after", b"ok")
    ev = calm.broadcast()
    while ev.topic != "/c/after":
        ev = calm.broadcast()
    snap.send_multipart([b"SYNCSTART", b"/c/after", U64.pack(0)])
    assert recv(snap)[:2] == [b"SYNC", b"/c/after"]
    assert recv(snap)[0] == b"SYNCEND"
    reader = zeps_reader(b.endpoint, "ev")
    keys = {m.key for m in zeps_messages(reader, 2)}
    assert reader.nothing(0.3) and keys <= {"/c/warm", "/c/after"}
    for s in (snap, huge, producer, wrong):
        s.close(0)
    calm.close()
