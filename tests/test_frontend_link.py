"""The front ends' pure parts beside the codecs: the ZEPS link (the peering a front end keeps with
its broker, frames in and out), the interim CHP key index and its snapshots, and the
``PORT:STREAM`` specs. The clock is a number."""
import random

import pytest

from zeps.frontends import chp
from zeps.frontends.keyindex import KeyIndex
from zeps.frontends.link import Delivered, Link, publish_frame, publish_size
from zeps.frontends.spec import FrontEndSpec, check_specs, hosts_of, parse_spec
from zeps.protocol import commands as c, decode, encode
from zeps.protocol.headers import encode_block

H = (("uuid", b"\x01" * 16), ("ttl", b"30"))


def sent(link):
    out, link.outbox[:] = [decode(f) for f in link.outbox], []
    return out


def attach(link, last=0, now=0.0):
    """Walk ``link`` to LIVE with a stream whose last sequence is ``last``; what it sent."""
    link.tick(now)
    out = sent(link)
    link.on_frame(encode(c.AttachOk()), now)
    out += sent(link)
    link.on_frame(encode(c.StreamInfoOk(1 if last else 0, last, 0, 0, 0)), now)
    out += sent(link)
    link.on_frame(encode(c.SubscribeOk()), now)
    return out


def deliver_ts(seq, key="k", body=b"v", ts=5):
    return encode(c.DeliverTs(ts, seq, key, body))


def deliver_h(seq, key="k", body=b"v", ts=5, headers=H):
    return encode(c.DeliverHeaders(ts, seq, key, body, headers))


# --------------------------------------------------------------------------- the link

def test_a_replaying_link_attaches_then_reads_the_stream_from_its_start():
    link = Link("kv", replay=True, window=1 << 20)
    assert attach(link, last=7) == [
        c.HeadersSelect(), c.Attach("kv"), c.DeliverTimestamps(), c.StreamInfo(),
        c.Subscribe("", 0), c.Credit(1 << 20)]
    assert link.live and link.head == 7 and not link.caught_up
    for seq in range(1, 8):
        assert link.on_frame(deliver_ts(seq), 0.0) == Delivered(seq, "k", b"v", 5)
    assert link.caught_up


def test_a_live_link_starts_at_the_streams_end():
    link = Link("ev", replay=False)
    assert c.Subscribe("", 7) in attach(link, last=7)
    assert link.caught_up and link.position == 7


def test_messages_with_and_without_headers_each_once_in_order():
    link = Link("kv", replay=False)
    attach(link)
    assert link.on_frame(deliver_h(1), 0.0) == Delivered(1, "k", b"v", 5, H)
    assert link.on_frame(deliver_ts(2, body=b""), 0.0) == Delivered(2, "k", b"", 5)
    assert link.on_frame(encode(c.Deliver(3, "k", b"x")), 0.0) == Delivered(3, "k", b"x", 0)
    assert link.on_frame(deliver_ts(3), 0.0) is None            # a repeat is dropped
    assert link.on_frame(deliver_ts(2), 0.0) is None
    assert link.counters["zeps.repeated"] == 2
    assert link.position == 3


def test_credit_goes_back_as_it_is_used_half_a_window_at_a_time():
    link = Link("kv", replay=False, window=1000)
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
    link = Link("kv", replay=True, ping_interval=10.0)
    attach(link, last=2)
    link.on_frame(deliver_ts(1), 0.0)
    link.on_frame(deliver_ts(2), 0.0)
    link.tick(9.9)
    assert sent(link) == []
    link.tick(10.0)
    assert sent(link) == [c.Ping()]
    link.on_frame(encode(c.Detach()), 11.0)          # the broker forgot us (expiry)
    assert not link.attached
    assert attach(link, last=4, now=11.0)[-2:] == [c.Subscribe("", 2), c.Credit(link.window)]
    assert link.head == 2                            # what was replayed at start stays so
    assert link.on_frame(deliver_ts(3), 11.0).sequence == 3


def test_a_refused_attach_is_retried_and_a_refused_publish_counted():
    link = Link("kv", replay=False, retry=1.0)
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


def test_a_stream_made_again_is_read_from_its_start():
    link = Link("kv", replay=True)
    attach(link, last=5)
    for seq in range(1, 6):
        link.on_frame(deliver_ts(seq), 0.0)
    link.on_frame(encode(c.Detach()), 1.0)
    out = attach(link, last=2, now=1.0)              # deleted and made again: 2 < 5
    assert link.reset and c.Subscribe("", 0) in out and link.head == 2
    assert link.on_frame(deliver_ts(1), 1.0).sequence == 1


def test_garbage_from_the_broker_is_counted_not_fatal():
    link = Link("kv", replay=False)
    attach(link)
    assert link.on_frame(b"\x00\x01", 0.0) is None
    assert link.counters["zeps.bad frame"] == 1 and link.live


def test_publish_frames_are_what_the_broker_decodes_and_their_size_what_it_counts():
    assert decode(publish_frame("k", b"v")) == c.Publish("k", b"v")
    frame = publish_frame("k", b"v", H)
    assert decode(frame) == c.PublishHeaders("k", b"v", H)
    assert publish_size(b"v", H) == 1 + len(encode_block(H))
    link = Link("kv", replay=False)
    assert link.publish("k" * 256, b"v", H) is None
    assert link.counters["zeps.unsendable"] == 1


# --------------------------------------------------------------------------- the key index

def test_a_snapshot_is_consistent_at_its_sequence_through_later_updates():
    index = KeyIndex()
    rng = random.Random(7)
    names = [f"/a/{i:04d}" for i in range(300)] + [f"/b/{i}" for i in range(50)]
    model = {}
    seq = 0
    for name in names:
        seq += 1
        index.apply(seq, name, False)
        model[name] = seq
    seq += 1
    index.apply(seq, "/a/0005", True)                     # deleted before the snapshot
    del model["/a/0005"]
    at, entries = index.snapshot("/a/")
    assert at == seq
    then = {k: q for k, q in model.items() if k.startswith("/a/")}
    touched = set()                                       # keys changed after the snapshot
    got = {}
    for n, (key, kseq) in enumerate(entries):
        assert key not in got
        got[key] = kseq
        if n % 40 == 0:                                   # updates while the snapshot is sent
            for _ in range(5):
                seq += 1
                victim = rng.choice(names)
                index.apply(seq, victim, rng.random() < 0.3)
                touched.add(victim)
            seq += 1
            index.apply(seq, f"/a/new{seq}", False)
            touched.add(f"/a/new{seq}")
    assert list(got) == sorted(got) and all(k.startswith("/a/") for k in got)
    for key, kseq in got.items():
        if kseq is not None:                              # as it was at the snapshot
            assert then[key] == kseq
        else:                                             # skipped: it changed after
            assert key in touched
    for key in then:                                      # every key of then is there,
        assert key in got or key in touched               # unless deleted since
    assert "/a/0005" not in got
    assert sum(q is not None for q in got.values()) >= 299 - len(touched)


def test_the_index_holds_at_most_max_keys_and_forgets_deleted_ones():
    index = KeyIndex(max_keys=2)
    assert index.apply(1, "a", False) and index.apply(2, "b", False)
    assert not index.apply(3, "c", False)
    assert index.apply(4, "a", False) and index.get("a") == 4     # an update always fits
    assert index.apply(5, "b", True) and index.apply(6, "c", False)
    assert [k for k, _ in index.snapshot("")[1]] == ["a", "c"]
    index.clear()
    assert len(index) == 0 and index.position == 0


def test_chp_front_end_answers_from_the_index():
    index = KeyIndex()
    for seq, key in enumerate(["/x/a", "/x/b", "/y/c"], 1):
        index.apply(seq, key, False)

    def source(subtree):
        s, entries = index.snapshot(subtree)
        return s, ((k, q or 0, b"v%d" % (q or 0) if q else b"") for k, q in entries)
    front = chp.ChpFrontEnd(source)
    front.on_snapshot(b"id", [b"ICANHAZ?", b"/x/"], 0.0)
    got = []
    front.pump_snapshots(lambda ident, frames: got.append(frames) or True, 0.0)
    assert got == [[b"/x/a", (1).to_bytes(8, "big"), b"", b"", b"v1"],
                   [b"/x/b", (2).to_bytes(8, "big"), b"", b"", b"v2"],
                   [b"KTHXBAI", (3).to_bytes(8, "big"), b"", b"", b"/x/"]]


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
