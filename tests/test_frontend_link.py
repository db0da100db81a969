"""The front ends' pure parts beside the codecs: the ZEPS link (the peering a front end keeps with
its broker, frames in and out: the CHP link starts with a SNAPSHOT), the CHP front end's
snapshots from a source that waits for the broker, and the ``PORT:STREAM`` specs. The clock is
a number."""
import pytest

from zeps.frontends import chp
from zeps.frontends.snapshots import WAIT
from zeps.frontends.link import Delivered, Link, publish_frame, publish_size
from zeps.frontends.spec import FrontEndSpec, check_specs, hosts_of, parse_spec
from zeps.protocol import commands as c, decode, encode
from zeps.protocol.headers import encode_block

H = (("uuid", b"\x01" * 16), ("ttl", b"30"))


def sent(link):
    out, link.outbox[:] = [decode(f) for f in link.outbox], []
    return out


def attach(link, last=0, now=0.0, incarnation=7):
    """Walk ``link`` to LIVE with a stream whose last sequence is ``last``; what it sent."""
    link.tick(now)
    out = sent(link)
    link.on_frame(encode(c.AttachOk()), now)
    out += sent(link)
    link.on_frame(encode(c.StreamIdOk(incarnation)), now)
    link.on_frame(encode(c.StreamInfoOk(1 if last else 0, last, 0, 0, 0)), now)
    out += sent(link)
    link.on_frame(encode(c.SubscribeOk()), now)
    return out


def deliver_ts(seq, key="k", body=b"v", ts=5):
    return encode(c.DeliverTs(ts, seq, key, body))


def deliver_h(seq, key="k", body=b"v", ts=5, headers=H):
    return encode(c.DeliverHeaders(ts, seq, key, body, headers))


# --------------------------------------------------------------------------- the link

def snapshot_entry(seq, key="k", body=b"v", ts=5, headers=()):
    if headers:
        return encode(c.SnapshotEntryH(ts, seq, key, body, headers))
    return encode(c.SnapshotEntry(ts, seq, key, body))


def test_a_snapshot_link_reads_every_keys_latest_message_then_subscribes_from_the_end():
    """CHP: at start (no position) CREDIT and SNAPSHOT "" instead of a subscription; the entries
    come as ``snapshot`` deliveries (key order: not the position), SNAPSHOT-END subscribes from
    its sequence, and the link has caught up at once."""
    link = Link("kv", snapshot=True, window=1 << 20)
    link.tick(0.0)
    out = sent(link)
    link.on_frame(encode(c.AttachOk()), 0.0)
    out += sent(link)
    link.on_frame(encode(c.StreamInfoOk(1, 9, 0, 0, 0)), 0.0)
    out += sent(link)
    assert out == [c.HeadersSelect(), c.Attach("kv"), c.DeliverTimestamps(), c.StreamId(),
                   c.StreamInfo(), c.Credit(1 << 20), c.Snapshot(("",))]
    assert link.attached and not link.live and not link.caught_up
    assert link.on_frame(snapshot_entry(7, "a", headers=H), 0.0) == Delivered(
        7, "a", b"v", 5, H, snapshot=True)
    assert link.on_frame(snapshot_entry(3, "b"), 0.0) == Delivered(3, "b", b"v", 5,
                                                                   snapshot=True)
    assert link.position is None
    link.on_frame(encode(c.SnapshotEnd(9, 2)), 0.0)
    assert sent(link) == [c.Subscribe("", 9)]                 # the credit is the snapshot's
    assert link.position == link.head == 9 and link.counters["zeps.position"] == 9
    link.on_frame(encode(c.SubscribeOk()), 0.0)
    assert link.caught_up
    assert link.on_frame(deliver_ts(10), 0.0) == Delivered(10, "k", b"v", 5)
    # a detach resumes from the position, without a snapshot
    link.on_frame(encode(c.Detach()), 1.0)
    assert attach(link, last=12, now=1.0)[-2:] == [c.Subscribe("", 10), c.Credit(1 << 20)]


def test_a_snapshot_link_counts_entries_against_its_credit():
    link = Link("kv", snapshot=True, window=1000)
    attach(link, last=5)
    sent(link)
    body = b"x" * 491                       # cost 8 + 1 + 1 + 491 = 501
    link.on_frame(snapshot_entry(1, body=body), 0.0)
    assert sent(link) == [c.Credit(501)]


def test_a_stream_without_a_key_index_is_retried_and_a_refused_publish_is_not_fatal():
    link = Link("kv", snapshot=True, retry=1.0)
    attach(link, last=5)
    link.on_frame(encode(c.Invalid("PUBLISH rejected: too large")), 0.0)
    assert link.state == "snapshotting" and link.counters["zeps.refused"] == 1
    link.on_frame(encode(c.Invalid("stream has no key index (create it with --key-index)")),
                  0.0)
    assert link.state == "idle" and link.counters["zeps.attach refused"] == 1
    assert "key index" in link.last_refusal and link.next_deadline() == 1.0


def test_a_live_link_starts_at_the_streams_end():
    """... and says so in its position gauge before any message comes (it was set only by a
    delivery: a BUS front end attached after the last publish showed no position at all, and
    a test waiting for it timed out about one run in ten)."""
    link = Link("ev")
    assert c.Subscribe("", 7) in attach(link, last=7)
    assert link.caught_up and link.position == 7
    assert link.counters["zeps.position"] == 7


def test_messages_with_and_without_headers_each_once_in_order():
    link = Link("kv")
    attach(link)
    assert link.on_frame(deliver_h(1), 0.0) == Delivered(1, "k", b"v", 5, H)
    assert link.on_frame(deliver_ts(2, body=b""), 0.0) == Delivered(2, "k", b"", 5)
    assert link.on_frame(encode(c.Deliver(3, "k", b"x")), 0.0) == Delivered(3, "k", b"x", 0)
    assert link.on_frame(deliver_ts(3), 0.0) is None            # a repeat is dropped
    assert link.on_frame(deliver_ts(2), 0.0) is None
    assert link.counters["zeps.repeated"] == 2
    assert link.position == 3


def test_credit_goes_back_as_it_is_used_half_a_window_at_a_time():
    link = Link("kv", window=1000)
    attach(link)
    body = b"x" * 91                       # cost 8 + 1 + 1 + 91 = 101
    for seq in range(1, 5):
        link.on_frame(deliver_ts(seq, body=body), 0.0)
    assert sent(link) == []
    link.on_frame(deliver_ts(5, body=body), 0.0)
    assert sent(link) == [c.Credit(505)]
    # DELIVER-H's cost counts its headers' block
    link.on_frame(deliver_h(6, body=b"y" * 500), 0.0)
    assert sent(link) == [c.Credit(8 + 1 + 1 + 500 + len(encode_block(H)))]


def test_pings_keep_the_peering_and_a_detach_resumes_where_it_stopped():
    link = Link("kv", ping_interval=10.0)
    attach(link, last=0)
    link.on_frame(deliver_ts(1), 0.0)
    link.on_frame(deliver_ts(2), 0.0)
    link.tick(9.9)
    assert sent(link) == []
    link.tick(10.0)
    assert sent(link) == [c.Ping()]
    link.on_frame(encode(c.Detach()), 11.0)          # the broker forgot us (expiry)
    assert not link.attached
    assert attach(link, last=4, now=11.0)[-2:] == [c.Subscribe("", 2), c.Credit(link.window)]
    assert link.head == 0                            # the head at start stays so
    assert link.on_frame(deliver_ts(3), 11.0).sequence == 3


def test_a_refused_attach_is_retried_and_a_refused_publish_counted():
    link = Link("kv", retry=1.0)
    link.tick(0.0)
    sent(link)
    link.on_frame(encode(c.Invalid("no such stream: kv")), 0.0)
    assert link.state == "idle" and link.counters["zeps.attach refused"] == 1
    link.tick(0.5)
    assert sent(link) == []
    assert link.next_deadline() == 1.0
    attach(link, now=1.0)
    assert link.live
    link.on_frame(encode(c.Invalid("PUBLISH rejected: too large")), 2.0)
    assert link.live and link.counters["zeps.refused"] == 1
    assert link.last_refusal == "PUBLISH rejected: too large"


@pytest.mark.parametrize("snapshot", [True, False])
def test_a_stream_made_again_with_more_messages_is_known_by_its_incarnation(snapshot):
    """Deleted and made again, with more messages than the link had taken by the time it
    attached again: the last sequence (9 > 5) did not tell, and the link read on from 5."""
    link = Link("kv", snapshot=snapshot)
    attach(link, last=0)
    if snapshot:
        link.on_frame(encode(c.SnapshotEnd(0, 0)), 0.0)
        link.on_frame(encode(c.SubscribeOk()), 0.0)
    for seq in range(1, 6):
        link.on_frame(deliver_ts(seq), 0.0)
    link.on_frame(encode(c.Detach()), 1.0)
    out = attach(link, last=9, now=1.0, incarnation=8)
    assert link.reset and link.counters["zeps.stream reset"] == 1
    assert c.StreamId() in out
    assert out[-1] == (c.Snapshot(("",)) if snapshot else c.Credit(link.window))
    if not snapshot:
        assert c.Subscribe("", 9) in out                  # as at start: from the new end
    link.reset = False
    link.on_frame(encode(c.Detach()), 2.0)
    attach(link, last=9, now=2.0, incarnation=8)           # the same stream: no reset
    assert not link.reset and link.counters["zeps.stream reset"] == 1


def test_a_stream_made_again_is_snapshotted_again():
    link = Link("kv", snapshot=True)
    attach(link, last=0)
    link.on_frame(encode(c.SnapshotEnd(0, 0)), 0.0)
    link.on_frame(encode(c.SubscribeOk()), 0.0)
    for seq in range(1, 6):
        link.on_frame(deliver_ts(seq), 0.0)
    assert link.counters["zeps.position"] == 5
    link.on_frame(encode(c.Detach()), 1.0)
    out = attach(link, last=2, now=1.0)              # deleted and made again: 2 < 5
    assert link.reset and out[-1] == c.Snapshot(("",))
    assert link.counters["zeps.position"] == 0       # not the old stream's 5 until its end
    assert link.on_frame(snapshot_entry(1), 1.0).snapshot
    assert link.counters["zeps.position"] == 0       # a snapshot's entries are not taken
    link.on_frame(encode(c.SnapshotEnd(2, 1)), 1.0)
    assert sent(link) == [c.Subscribe("", 2)] and link.head == 2
    assert link.counters["zeps.position"] == 2


def test_garbage_from_the_broker_is_counted_not_fatal():
    link = Link("kv")
    attach(link)
    assert link.on_frame(b"\x00\x01", 0.0) is None
    assert link.counters["zeps.bad frame"] == 1 and link.live


def test_publish_frames_are_what_the_broker_decodes_and_their_size_what_it_counts():
    assert decode(publish_frame("k", b"v")) == c.Publish("k", b"v")
    frame = publish_frame("k", b"v", H)
    assert decode(frame) == c.PublishHeaders("k", b"v", H)
    assert publish_size(b"v", H) == 1 + len(encode_block(H))
    link = Link("kv")
    assert link.publish("k" * 256, b"v", H) is None
    assert link.counters["zeps.unsendable"] == 1


# --------------------------------------------------------------------------- CHP snapshots

def test_chp_front_end_answers_from_a_source_that_waits_for_the_broker():
    """The source yields WAIT while the broker's next entry is on its way: the session keeps
    its slot, sends nothing, is not due at once (its shell polls the source's socket), and
    goes on when the entries come; KTHXBAI's sequence is the source's at the end."""
    feed = [WAIT, ("/x/a", 1, b"v1"), WAIT, WAIT, ("/x/b", 2, b"v2"), ("/x/c", 3, b"")]
    end = []

    def entries():
        while feed:
            yield feed.pop(0)

    front = chp.ChpFrontEnd(lambda subtree: (lambda: end[0], entries()))
    front.on_snapshot(b"id", [b"ICANHAZ?", b"/x/"], 0.0)
    got = []

    def send(ident, frames):
        got.append(frames)
        return True
    assert not front.pump_snapshots(send, 0.0)                # waiting: nothing due now
    assert got == [] and front.snapshots.active == 1
    assert front.next_deadline(0.0) == 1.0                    # the heartbeat, not a spin
    front.pump_snapshots(send, 0.1)
    assert got == [[b"/x/a", (1).to_bytes(8, "big"), b"", b"", b"v1"]]
    front.pump_snapshots(send, 0.2)
    end.append(7)
    front.pump_snapshots(send, 0.3)
    assert got[1:] == [[b"/x/b", (2).to_bytes(8, "big"), b"", b"", b"v2"],
                       [b"KTHXBAI", (7).to_bytes(8, "big"), b"", b"", b"/x/"]]
    assert front.counters["snapshot.served"] == 1 and front.snapshots.active == 0


def test_a_source_that_never_answers_gives_its_slot_back_after_the_stall_timeout():
    def entries():
        while True:
            yield WAIT
    front = chp.ChpFrontEnd(lambda subtree: (lambda: 0, entries()), stall_timeout=5.0)
    front.on_snapshot(b"id", [b"ICANHAZ?", b""], 0.0)
    front.pump_snapshots(lambda i, f: True, 0.0)
    assert front.snapshots.next_deadline(1.0) == 5.0
    front.pump_snapshots(lambda i, f: True, 5.0)
    assert front.counters["snapshot.abandoned"] == 1 and front.snapshots.active == 0


def test_replayed_messages_only_keep_the_ttl_schedule():
    front = chp.ChpFrontEnd(lambda s: (0, []))
    out = front.on_message(1, "k", b"v", [("ttl", b"5")], now=-3.0, replayed=True)
    assert out is None and front.counters["publisher.kvpub"] == 0
    assert front.ttl.next_deadline() == 2.0
    assert [m.key for m in front.expired(2.0)] == ["k"]


# --------------------------------------------------------------------------- the specs

def test_port_and_stream_specs():
    assert parse_spec("chp", "5556:kv") == FrontEndSpec("chp", 5556, "kv")
    assert parse_spec("bus", "7000:a:b") == FrontEndSpec("bus", 7000, "a:b")
    for bad in ["kv", "x:kv", "0:kv", "65534:kv", "5556:", "5556:" + "s" * 256, "5556:a\0b"]:
        with pytest.raises(ValueError):
            parse_spec("chp", bad)
    check_specs([FrontEndSpec("chp", 5556, "a"), FrontEndSpec("bus", 5559, "a")])
    with pytest.raises(ValueError, match="port 5558"):
        check_specs([FrontEndSpec("chp", 5556, "a"), FrontEndSpec("bus", 5558, "b")])


def test_where_front_ends_bind_and_connect():
    assert hosts_of("tcp://127.0.0.1:7470") == ("127.0.0.1", "tcp://127.0.0.1:7470")
    assert hosts_of("tcp://0.0.0.0:7470") == ("0.0.0.0", "tcp://127.0.0.1:7470")
    assert hosts_of("tcp://[::]:7470") == ("[::]", "tcp://[::1]:7470")
    assert hosts_of("ipc:///tmp/zeps") == ("127.0.0.1", "ipc:///tmp/zeps")
