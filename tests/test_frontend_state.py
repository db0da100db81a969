"""The front ends' pure state: snapshot sessions under a bounded budget, the ttl schedule, HUGZ,
and the CHP and BUS front ends driven with frames and times only (the clock is a number)."""
import itertools

import pytest

from zeps.frontends import bus_codec as bc
from zeps.frontends import chp_codec as cc
from zeps.frontends.bus import BusFrontEnd
from zeps.frontends.chp import ChpFrontEnd, Heartbeat
from zeps.frontends.counters import Counters
from zeps.frontends.snapshots import Snapshots
from zeps.frontends.ttl import TtlSchedule


class Peer:
    """The shell's send for one test: records frames per identity; a peer whose pipe holds
    ``room`` messages (None: unbounded) until it reads; a gone peer."""

    def __init__(self):
        self.got = {}
        self.room = {}
        self.gone = set()
        self.refused = {}           # the sends refused per identity (its pipe full)

    def send(self, ident, frames):
        if ident in self.gone:
            return None
        room = self.room.get(ident)
        if room is not None:
            if room == 0:
                self.refused[ident] = self.refused.get(ident, 0) + 1
                return False
            self.room[ident] = room - 1
        self.got.setdefault(ident, []).append(frames)
        return True


def drain(front, peer, now=0.0, rounds=10_000):
    for _ in range(rounds):
        if not front.pump_snapshots(peer.send, now):
            return
    raise AssertionError("the snapshots never finished")


# --------------------------------------------------------------------------- snapshot sessions

def _opener(n, end=b"END"):
    """Entries 0..n-1 (None for odd ones: skipped), then the end."""
    def open_(request):
        return (([b"%d" % i] if i % 2 == 0 else None for i in range(n)), [end, request])
    return open_


def test_session_sends_entries_then_end_in_order():
    c = Counters()
    snaps = Snapshots(_opener(10), c, turn=3)
    peer = Peer()
    assert snaps.request(b"a", b"req")
    while snaps.pump(peer.send, 0.0):
        pass
    assert peer.got[b"a"] == [[b"0"], [b"2"], [b"4"], [b"6"], [b"8"], [b"END", b"req"]]
    assert c["snapshot.served"] == 1 and len(snaps) == 0


def test_a_reader_that_never_reads_costs_one_message_and_holds_no_slot():
    """An endless snapshot to a peer whose pipe is full: the session takes nothing more from its
    iterator than its head; meanwhile another client is served (a blocked session is not
    making progress, so it does not take one of the ``max_active`` slots); after stall_timeout
    the blocked one is dropped."""
    c = Counters()
    taken = itertools.count()

    def endless(request):
        if request == "endless":
            return ([b"x", str(next(taken)).encode()] for _ in itertools.count()), [b"END"]
        return iter([[b"small"]]), [b"END"]
    snaps = Snapshots(endless, c, max_active=1, stall_timeout=30.0)
    peer = Peer()
    peer.room[b"stuck"] = 100                       # its SNDHWM
    snaps.request(b"stuck", "endless")
    snaps.request(b"calm", "small")
    for t in range(1000):
        snaps.pump(peer.send, t * 0.01)
    assert len(peer.got[b"stuck"]) == 100
    assert next(taken) == 101                       # 100 sent, one head held, nothing more
    assert peer.got[b"calm"] == [[b"small"], [b"END"]]
    # retried, not spun on: 1 ms after its pipe was found full, doubling to 50 ms, so ~200
    # tries in 10 s of rounds every 10 ms, not 1,000
    assert 190 <= peer.refused[b"stuck"] <= 210
    assert 10.0 < snaps.next_deadline(10.0) <= 10.05
    snaps.pump(peer.send, 9.99 + 30.0)
    assert c["snapshot.abandoned"] == 1 and len(snaps) == 0


def test_readers_that_never_read_are_dropped_longest_blocked_first_when_room_is_needed():
    c = Counters()
    snaps = Snapshots(lambda r: (iter([[b"x"]] * 100), [b"END"]), c, max_active=2,
                      max_sessions=3)
    peer = Peer()
    for i in range(3):
        peer.room[b"stuck%d" % i] = 0                 # never read
        snaps.request(b"stuck%d" % i, i)
        snaps.pump(peer.send, float(i))               # blocked at i: 0, 1, 2
    assert len(snaps) == 3 and c["snapshot.abandoned"] == 0
    snaps.request(b"calm", 9)
    assert snaps.next_deadline(3.0) == 3.0
    while snaps.pump(peer.send, 3.0):
        pass
    assert len(peer.got[b"calm"]) == 101
    assert c["snapshot.abandoned"] == 1               # stuck0, blocked the longest
    assert sorted(s.ident for s in snaps.sessions()) == [b"stuck1", b"stuck2"]


def test_a_reader_that_keeps_up_is_tried_again_soon_after_its_pipe_fills():
    """A pipe of 2 messages (the snapshot socket's SNDHWM with 1 MiB values) that its reader
    empties within a millisecond: the session is tried again 1 ms after it found the pipe
    full, then 2, 4... while it stays full, never more than ``retry`` apart; progress starts
    the backoff again."""
    snaps = Snapshots(_opener(40), Counters(), retry=0.05)
    peer = Peer()
    peer.room[b"a"] = 2
    snaps.request(b"a", b"r")
    assert snaps.pump(peer.send, 0.0) is False                 # 2 sent, the pipe is full
    assert snaps.next_deadline(0.0) == pytest.approx(0.001)
    assert snaps.pump(peer.send, 0.0005) is False              # not due: not tried
    assert peer.refused[b"a"] == 1
    snaps.pump(peer.send, 0.001)                               # still full: 2 ms on
    assert snaps.next_deadline(0.001) == pytest.approx(0.003)
    snaps.pump(peer.send, 0.003)
    assert snaps.next_deadline(0.003) == pytest.approx(0.007)
    peer.room[b"a"] = 2                                        # the reader took two
    snaps.pump(peer.send, 0.007)
    assert snaps.next_deadline(0.007) == pytest.approx(0.008)  # from 1 ms again
    for _ in range(20):                                        # full for a long while
        snaps.pump(peer.send, snaps.next_deadline(0.0))
    t = snaps.next_deadline(0.0)
    snaps.pump(peer.send, t)
    assert snaps.next_deadline(t) == pytest.approx(t + 0.05)


def test_blocked_session_resumes_where_it_stopped():
    snaps = Snapshots(_opener(6), Counters())
    peer = Peer()
    peer.room[b"a"] = 1
    snaps.request(b"a", b"r")
    assert snaps.pump(peer.send, 0.0) is False      # blocked: nothing to do at once
    peer.room[b"a"] = None
    while snaps.pump(peer.send, 1.0):
        pass
    assert peer.got[b"a"] == [[b"0"], [b"2"], [b"4"], [b"END", b"r"]]


def test_gone_peer_ends_its_session():
    c = Counters()
    snaps = Snapshots(_opener(6), c)
    peer = Peer()
    peer.gone.add(b"a")
    snaps.request(b"a", b"r")
    snaps.pump(peer.send, 0.0)
    assert c["snapshot.gone"] == 1 and len(snaps) == 0


def test_request_flood_from_one_identity_and_from_many():
    c = Counters()
    snaps = Snapshots(_opener(2), c, max_active=2, max_waiting=3)
    for _ in range(1000):
        snaps.request(b"flooder", b"r")
    assert c["snapshot.busy"] == 999
    for i in range(10):
        snaps.request(b"id%d" % i, b"r")
    assert c["snapshot.refused"] == 8 and len(snaps) == 3
    peer = Peer()
    while snaps.pump(peer.send, 0.0):
        pass
    assert sorted(peer.got) == [b"flooder", b"id0", b"id1"]


def test_round_robin_every_session_progresses_each_round():
    snaps = Snapshots(_opener(10_000), Counters(), max_active=3, turn=10, round_budget=30)
    peer = Peer()
    for ident in (b"a", b"b", b"c"):
        snaps.request(ident, b"r")
    snaps.pump(peer.send, 0.0)
    assert [len(peer.got[i]) for i in (b"a", b"b", b"c")] == [5, 5, 5]


def test_round_budget_bounds_the_work_of_one_pump():
    """Entries skipped count too: a snapshot whose entries all fall outside the subtree cannot
    make one pump walk the whole stream."""
    walked = itertools.count()

    def nothing_matches(request):
        return (None for _ in iter(lambda: next(walked), -1)), [b"END"]
    snaps = Snapshots(nothing_matches, Counters(), turn=50, round_budget=200)
    snaps.request(b"a", b"r")
    snaps.pump(Peer().send, 0.0)
    assert next(walked) == 50


def test_failing_source_is_counted_and_others_go_on():
    c = Counters()

    def opener(request):
        if request == "bad":
            raise OSError("disk")
        return iter([[b"1"]]), [b"END"]
    snaps = Snapshots(opener, c)
    snaps.request(b"a", "bad")
    snaps.request(b"b", "good")
    peer = Peer()
    while snaps.pump(peer.send, 0.0):
        pass
    assert c["snapshot.failed"] == 1 and peer.got[b"b"] == [[b"1"], [b"END"]]


# --------------------------------------------------------------------------- ttl and HUGZ

def test_ttl_schedule():
    t = TtlSchedule()
    t.set("a", 5.0)
    t.set("b", 3.0)
    t.set("c", 4.0)
    t.cancel("c")
    t.set("a", 2.0)                         # set again: the new due time replaces the old
    assert t.next_deadline() == 2.0
    assert t.due(1.9) == []
    assert t.due(3.0) == ["a", "b"]
    assert t.due(100.0) == [] and t.next_deadline() is None and len(t) == 0


def test_ttl_updates_to_one_key_do_not_grow_the_heap():
    t = TtlSchedule()
    for i in range(100_000):
        t.set("k", float(i))
    assert len(t) == 1 and len(t._heap) <= 2 * 1 + 64 + 1
    assert t.due(1e9) == ["k"]


def test_ttl_schedule_is_bounded():
    t = TtlSchedule(max_keys=2)
    assert t.set("a", 1.0) and t.set("b", 1.0)
    assert not t.set("c", 1.0)
    assert t.set("a", 2.0)                  # a key already there can be set again


def test_heartbeat():
    h = Heartbeat(1.0, now=10.0)
    assert not h.due(10.5)
    h.activity(10.5)
    assert not h.due(11.4) and h.due(11.5) and h.next_deadline() == 11.5


# --------------------------------------------------------------------------- CHP front end

class Stream:
    """An in-memory stream (sequence, key, value, uuid, properties) and the snapshot source the
    shell would give: the last value of each key at the current head."""

    def __init__(self):
        self.messages = []

    def publish(self, msg):
        seq = len(self.messages) + 1
        self.messages.append(cc.KvMsg(msg.key, seq, msg.uuid, msg.properties, msg.value))
        return self.messages[-1]

    def source(self, subtree):
        last = {}
        for m in self.messages:
            last[m.key] = m
        return len(self.messages), [(m.key, m.sequence, m.value) for m in last.values()]


def _kvset(key, value, props=b"", uuid=b""):
    return [key, b"\0" * 8, uuid, props, value]


def test_chp_snapshot_of_a_subtree():
    s = Stream()
    for key, value in [("/a/1", b"x"), ("/b/1", b"y"), ("/a/2", b"z"), ("/a/1", b"x2"),
                       ("/a/2", b""), ("KTHXBAI", b"evil")]:
        s.publish(cc.KvMsg(key, value=value))
    front = ChpFrontEnd(s.source)
    peer = Peer()
    assert front.on_snapshot(b"c", [b"ICANHAZ?", b"/a/"], 0.0)
    drain(front, peer)
    assert peer.got[b"c"] == [cc.encode_kvsync("/a/1", 4, b"x2"), cc.encode_kthxbai(6, "/a/")]
    assert front.on_snapshot(b"d", [b"ICANHAZ?", b""], 0.0)
    drain(front, peer)
    assert [f[0] for f in peer.got[b"d"]] == [b"/a/1", b"/b/1", b"KTHXBAI"]
    assert front.counters["snapshot.reserved key"] == 1    # never a KVSYNC named KTHXBAI


def test_chp_kvset_keeps_uuid_and_properties_and_kvpub_carries_the_stream_sequence():
    s = Stream()
    front = ChpFrontEnd(s.source)
    u = bytes(range(16))
    msg = front.on_collect(_kvset(b"/a/1", b"v", b"owner=me\n", u), 0.0)
    assert msg == cc.KvMsg("/a/1", 0, u, (("owner", "me"),), b"v")
    for _ in range(4):
        s.publish(cc.KvMsg("/other", value=b"."))
    stored = s.publish(msg)
    assert front.on_live(stored, 0.0) == [b"/a/1", b"\0" * 7 + b"\5", u, b"owner=me\n", b"v"]


def test_chp_malformed_commands_are_counted_by_socket_and_reason():
    front = ChpFrontEnd(Stream().source)
    assert not front.on_snapshot(b"c", [b"ICANHAZ?"], 0.0)
    assert not front.on_snapshot(b"c", [b"GIMME"], 0.0)
    assert front.on_collect(_kvset(b"KTHXBAI", b"v"), 0.0) is None
    assert front.on_collect([b"k"], 0.0) is None
    assert front.counters.as_dict() == {
        "collector.malformed": 2, "collector.malformed.frame count": 1,
        "collector.malformed.reserved key": 1, "snapshot.malformed": 2,
        "snapshot.malformed.bad command": 1, "snapshot.malformed.frame count": 1}


def test_chp_ttl_deletes_the_key_when_due_and_an_update_without_ttl_cancels_it():
    s = Stream()
    front = ChpFrontEnd(s.source, now=0.0)
    front.on_live(s.publish(front.on_collect(_kvset(b"/e/1", b"v", b"ttl=5\n"), 0.0)), 0.0)
    front.on_live(s.publish(front.on_collect(_kvset(b"/e/2", b"v", b"ttl=5\n"), 0.0)), 1.0)
    front.on_live(s.publish(front.on_collect(_kvset(b"/e/2", b"w"), 0.0)), 2.0)     # no ttl
    assert front.next_deadline(2.0) == 1.0                   # the HUGZ (due) comes first
    assert front.expired(4.9) == []
    deletes = front.expired(5.0)
    assert deletes == [cc.KvMsg("/e/1")]
    kvpub = front.on_live(s.publish(deletes[0]), 5.0)
    assert kvpub == [b"/e/1", b"\0" * 7 + b"\4", b"", b"", b""]
    assert front.expired(100.0) == [] and front.counters["ttl.expired"] == 1


def test_chp_ttl_from_a_zeps_publisher_and_a_bad_one():
    front = ChpFrontEnd(Stream().source)
    front.on_live(cc.KvMsg("/k", 1, b"", (("ttl", "2"),), b"v"), 0.0)
    front.on_live(cc.KvMsg("/j", 2, b"", (("ttl", "never"),), b"v"), 0.0)
    assert front.counters["publisher.bad ttl"] == 1
    assert front.expired(2.0) == [cc.KvMsg("/k")]


def test_chp_reserved_keys_from_zeps_publishers_never_reach_chp_clients():
    front = ChpFrontEnd(Stream().source)
    assert front.on_live(cc.KvMsg("HUGZ", 1, value=b"x"), 0.0) is None
    assert front.on_live(cc.KvMsg("", 2, value=b"x"), 0.0) is None
    assert front.counters["publisher.reserved key"] == 2


def test_chp_hugz_every_second():
    front = ChpFrontEnd(Stream().source, now=0.0)
    assert front.hugz(0.5) is None
    assert front.hugz(1.0) == cc.encode_hugz()
    assert front.hugz(1.5) is None
    front.on_live(cc.KvMsg("/k", 1, value=b"v"), 1.75)      # an update does not put it off
    assert front.hugz(2.0) == cc.encode_hugz() and front.next_deadline(2.0) == 3.0


def test_chp_ttl_refused_when_the_schedule_is_full():
    front = ChpFrontEnd(Stream().source, max_ttl_keys=1)
    front.on_live(cc.KvMsg("/a", 1, b"", (("ttl", "9"),), b"v"), 0.0)
    assert front.on_collect(_kvset(b"/b", b"v", b"ttl=9\n"), 0.0) is None
    assert front.on_collect(_kvset(b"/a", b"v", b"ttl=9\n"), 0.0) is not None
    assert front.on_collect(_kvset(b"/b", b"v"), 0.0) is not None
    assert front.counters["collector.refused.ttl full"] == 1


def test_chp_late_joiner_gets_the_snapshot_then_every_later_update():
    """A client joins while updates flow: it applies the snapshot, then the KVPUBs above
    KTHXBAI's sequence; it ends with the stream's map, and the KVPUBs it applied have strictly
    increasing sequences with no gap after the snapshot's."""
    s = Stream()
    front = ChpFrontEnd(s.source)
    pub = []                                                 # the PUB socket, in order
    for i in range(50):
        pub.append(front.on_live(s.publish(cc.KvMsg(f"/k/{i % 7}", value=b"%d" % i)), 0.0))
    peer = Peer()
    front.on_snapshot(b"late", [b"ICANHAZ?", b""], 0.0)
    front.pump_snapshots(peer.send, 0.0)                     # the snapshot is at sequence 50
    for i in range(50, 80):
        if i % 10 == 0:
            pub.append(front.on_live(s.publish(cc.KvMsg(f"/k/{i % 7}")), 0.0))   # deletes
        pub.append(front.on_live(s.publish(cc.KvMsg(f"/k/{i % 7}", value=b"%d" % i)), 0.0))
        front.pump_snapshots(peer.send, 0.0)
    *syncs, end = [cc.decode_kvmsg(f) for f in peer.got[b"late"]]
    assert end.key == "KTHXBAI" and end.sequence == 50
    state = {m.key: m.value for m in syncs}
    applied = []
    for frames in pub:
        m = cc.decode_kvmsg(frames)
        if m.sequence > end.sequence:
            applied.append(m.sequence)
            if m.value:
                state[m.key] = m.value
            else:
                state.pop(m.key, None)
    assert applied == list(range(51, 51 + len(applied)))
    _, entries = s.source("")
    assert state == {k: v for k, _, v in entries if v}


# --------------------------------------------------------------------------- BUS front end

class EventLog:
    def __init__(self):
        self.events = []

    def publish(self, event):
        seq = len(self.events) + 1
        e = bc.Event(event.topic, seq, event.producer, event.timestamp, event.uuid, event.data)
        self.events.append(e)
        return e

    def source(self, subtrees, after):
        return len(self.events), iter(self.events[after:])


TS = b"2016-11-18T14:36:49.007Z"


def test_bus_snapshot_every_event_above_the_sequence_under_any_subtree_in_order():
    log = EventLog()
    for topic in ["/a/1", "/b/1", "/a/1", "/c/1", "/b/2", "/a/2"]:
        log.publish(bc.Event(topic, producer="p", timestamp=TS.decode(), data=topic.encode()))
    front = BusFrontEnd(log.source)
    peer = Peer()
    assert front.on_snapshot(b"c", [b"SYNCSTART", b"/a/;/b/", b"\0" * 7 + b"\1"], 0.0)
    drain(front, peer)
    got = [bc.decode_snapshot_reply(f) for f in peer.got[b"c"]]
    assert [(e.topic, e.sequence) for e in got[:-1]] == [("/b/1", 2), ("/a/1", 3), ("/b/2", 5),
                                                          ("/a/2", 6)]
    assert got[-1] == bc.SyncEnd(("/a/", "/b/"), 6)
    assert peer.got[b"c"][-1] == [b"SYNCEND", b"/a/;/b/", b"\0" * 7 + b"\6"]


def test_bus_reference_dialect_and_its_syncstart():
    log = EventLog()
    log.publish(bc.Event("/test/1/topic", producer="p", timestamp=TS.decode(), data=b"d"))
    front = BusFrontEnd(log.source, dialect=bc.REFERENCE)
    peer = Peer()
    front.on_snapshot(b"c", [b"SYNCSTART", b"/test/1/topic,/test-other", b"0"], 0.0)
    drain(front, peer)
    assert peer.got[b"c"] == [[b"SYNC", b"/test/1/topic", b"1", b"p", TS, b"", b"d"],
                              [b"SYNCEND", b"/test/1/topic,/test-other", b"1"]]


def test_bus_collector_keeps_producer_timestamp_and_uuid():
    front = BusFrontEnd(EventLog().source)
    ev = front.on_collect([b"/t", b"null", b"prod-1", TS, b"uuid-1", b"data"], 0.0)
    assert ev == bc.Event("/t", 0, "prod-1", TS.decode(), "uuid-1", b"data")
    assert front.on_live(bc.Event("/t", 9, "prod-1", TS.decode(), "uuid-1", b"data")) == \
        [b"/t", b"\0" * 7 + b"\x09", b"prod-1", TS, b"uuid-1", b"data"]


def test_bus_huge_subtree_list_and_malformed_are_counted():
    front = BusFrontEnd(EventLog().source)
    assert not front.on_snapshot(b"c", [b"SYNCSTART", b";".join([b"/a/"] * 10_000), b"0"], 0.0)
    assert not front.on_snapshot(b"c", [b"SYNCSTART", b",".join([b"/a"] * 1000), b"0"], 0.0)
    assert not front.on_collect([b"/t"], 0.0)
    assert front.counters["snapshot.malformed.subtrees too large"] == 1
    assert front.counters["snapshot.malformed.too many subtrees"] == 1
    assert front.counters["collector.malformed.frame count"] == 1


def test_bus_snapshot_stops_at_its_sequence():
    """Events published while a snapshot is sent are not in it: SYNCEND's sequence is the head
    when the snapshot started, and the client takes the rest from BROADCAST."""
    log = EventLog()
    for _ in range(3):
        log.publish(bc.Event("/a", timestamp=TS.decode()))
    front = BusFrontEnd(log.source, turn=1, round_budget=1)
    peer = Peer()
    front.on_snapshot(b"c", [b"SYNCSTART", b"", b""], 0.0)
    front.pump_snapshots(peer.send, 0.0)
    for _ in range(3):
        log.publish(bc.Event("/a", timestamp=TS.decode()))
    drain(front, peer)
    got = [bc.decode_snapshot_reply(f) for f in peer.got[b"c"]]
    assert [e.sequence for e in got] == [1, 2, 3, 3]


def test_messages_as_zeps_delivers_them():
    chp_front = ChpFrontEnd(Stream().source)
    assert chp_front.on_message(4, "/k", b"v", [("ttl", b"3"), ("x\ny", b"1")], 0.0) == \
        [b"/k", b"\0" * 7 + b"\4", b"", b"ttl=3\n", b"v"]
    assert chp_front.counters["publisher.headers left out"] == 1
    assert chp_front.expired(3.0) == [cc.KvMsg("/k")]
    bus_front = BusFrontEnd(EventLog().source, dialect=bc.REFERENCE)
    assert bus_front.on_message(4, "/t", b"d", 1479479809007_000_000) == \
        [b"/t", b"4", b"", TS, b"", b"d"]


def test_chp_hugz_come_every_second_while_updates_flow():
    """A client of a subtree sees only its subtree's KVPUBs: HUGZ went out only after a second
    without any KVPUB, so while another subtree was busy a quiet subtree's client heard nothing
    and, as the Guide's clients do after 5 s, took the server for dead (found by review)."""
    s = Stream()
    front = ChpFrontEnd(s.source)
    hugz = 0
    for tick in range(1, 51):                       # 10 s of updates to /y/ every 0.2 s
        now = tick * 0.2
        assert front.on_live(s.publish(cc.KvMsg("/y/busy", value=b"v")), now) is not None
        if front.hugz(now) is not None:
            hugz += 1
    assert hugz == 10


class CountingLog(EventLog):
    """An EventLog whose source counts the events it yields and the iterators it has open (what
    a session holds of the journal: the shell's reads ahead)."""

    def __init__(self):
        super().__init__()
        self.yielded = 0
        self.open = 0
        self.most_open = 0

    def source(self, subtrees, after):
        def events():
            self.open += 1
            self.most_open = max(self.most_open, self.open)
            try:
                for e in self.events[after:]:
                    self.yielded += 1
                    yield e
            finally:
                self.open -= 1
        return len(self.events), events()


def test_bus_scans_that_match_nothing_take_turns_with_a_calm_request():
    """40 SYNCSTARTs whose subtree matches nothing scan the whole stream without sending: they
    never block, so they held the 8 slots to their end and a client asking for the last ten
    events was answered after all 40 whole scans (400,010 events looked at; 111 s with 200,000
    events in the review). Now a scan gives its slot up after each turn while others wait: the
    calm request is answered after about a turn per request ahead of it (3,018 events), every
    scan still gets its SYNCEND, and a parked scan holds no iterator of the source."""
    log, n, turn = CountingLog(), 10_000, 64
    for i in range(n):
        log.publish(bc.Event("/f/%d" % (i % 7), timestamp=TS.decode(), data=b"d"))
    front = BusFrontEnd(log.source, turn=turn, max_active=8)
    peer = Peer()
    for i in range(40):
        assert front.on_snapshot(b"h%d" % i, [b"SYNCSTART", b"/none/", bytes(8)], 0.0)
    assert front.on_snapshot(b"calm", [b"SYNCSTART", b"/f/1", (n - 10).to_bytes(8, "big")],
                             0.0)
    for _ in range(100_000):
        if peer.got.get(b"calm") and peer.got[b"calm"][-1][0] == b"SYNCEND":
            break
        front.pump_snapshots(peer.send, 0.0)
    assert log.yielded <= (40 + 1) * (turn + 64) + 10     # a turn each, and what it read ahead
    got = [bc.decode_snapshot_reply(f) for f in peer.got[b"calm"]]
    assert [e.sequence for e in got] == [n - 9, n - 2, n]    # /f/1: sequences 2, 9, ...
    drain(front, peer)
    assert all(peer.got[b"h%d" % i] == [[b"SYNCEND", b"/none/", n.to_bytes(8, "big")]]
               for i in range(40))
    assert front.counters["snapshot.served"] == 41 and log.most_open <= 8 and log.open == 0


def test_bus_parked_scans_resume_where_they_stopped():
    """Scans parked after every turn of 3 events still send each event of their subtrees once,
    in order, and SYNCEND with the sequence of their start."""
    log = EventLog()
    topics = ["/a/1", "/b/1", "/c/1"]
    for i in range(100):
        log.publish(bc.Event(topics[i % 3], timestamp=TS.decode(), data=b"%d" % i))
    front = BusFrontEnd(log.source, turn=3, round_budget=7, max_active=2)
    peer = Peer()
    asks = {b"a": b"/a/", b"b": b"/b/;/c/", b"all": b"", b"late": b"/c/"}
    for ident, subtrees in asks.items():
        after = 90 if ident == b"late" else 5
        front.on_snapshot(ident, [b"SYNCSTART", subtrees, after.to_bytes(8, "big")], 0.0)
    drain(front, peer)
    for ident, subtrees in asks.items():
        after = 90 if ident == b"late" else 5
        wanted = tuple(subtrees.decode().split(";")) if subtrees else ("",)
        expect = [e.sequence for e in log.events if e.sequence > after
                  and e.topic.startswith(wanted)]
        got = [bc.decode_snapshot_reply(f) for f in peer.got[ident]]
        assert [e.sequence for e in got[:-1]] == expect and got[-1].sequence == 100


def test_chp_sequences_go_on_increasing_when_the_stream_is_made_again():
    """A stream deleted and made again starts its sequences from 1: connected clients, which
    take an update only above the last they applied (RFC 12), kept the deleted keys and missed
    every update (found by review). Its sequences are sent above every one sent before."""
    old = Stream()
    front = ChpFrontEnd(old.source)
    for i in range(11):
        assert front.on_live(old.publish(cc.KvMsg(f"/old/{i}", value=b"o")), 0.0) is not None
    new = Stream()
    front.source = new.source
    front.stream_made_again()
    pubs = [front.on_live(new.publish(cc.KvMsg(k, value=b"n")), 1.0) for k in ("/n/k", "/n/j")]
    assert [int.from_bytes(p[1], "big") for p in pubs] == [12, 13]
    peer = Peer()
    assert front.on_snapshot(b"c", [b"ICANHAZ?", b""], 1.0)
    drain(front, peer)
    assert [(f[0], int.from_bytes(f[1], "big")) for f in peer.got[b"c"]] == [
        (b"/n/k", 12), (b"/n/j", 13), (b"KTHXBAI", 13)]
