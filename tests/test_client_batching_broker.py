"""Batching end to end: the client SDK against a real broker process (tests/conftest.py), real
sockets on 127.0.0.1. Publishes go out naturally batched, every one is confirmed exactly once
and in order; a late subscriber replays them as DELIVER-BATCH frames with no gap and no
duplicate; a ZEPS/1 peer of the same stream still gets one DELIVER per message."""
from __future__ import annotations

import pytest

import asyncio

from tests.rawclient import RawClient
from zeps.clients import AsyncClient, Client
from zeps.protocol import commands as c
from zeps.protocol.batch import encode_entries

FAST = dict(timeout=10.0, heartbeat=2.0)
N = 10_000


def counting_frames(client):
    """Count the frames the broker sends ``client`` (they still reach its peering)."""
    p = client._p
    receive = p.receive
    seen = {"frames": 0}

    def counted(frame, now):
        seen["frames"] += 1
        receive(frame, now)
    p.receive = counted
    return seen


def test_ten_thousand_confirmed_publishes_then_a_late_subscriber_replays_them_in_batches(broker):
    with Client(broker.endpoint, "b", confirms=True, **FAST) as pub:
        receipts = [pub.publish("k.%d" % (i % 7), b"%d" % i) for i in range(N)]
        assert pub.wait_for_confirms(timeout=60) == N
        assert pub.max_batch is not None and pub.max_batch > 0     # the broker batches
    assert [r.result(0) for r in receipts] == list(range(1, N + 1))    # each once, in order
    assert pub.max_batch is not None

    with Client(broker.endpoint, "b", **FAST) as sub_client:
        seen = counting_frames(sub_client)
        sub = sub_client.subscribe()
        got = [sub.next(timeout=10) for _ in range(N)]
        assert sub.poll(0.2) is None                                 # nothing more
    assert [m.sequence for m in got] == list(range(1, N + 1))         # no gap, no duplicate
    assert [m.body for m in got] == [b"%d" % i for i in range(N)]
    assert [m.key for m in got] == ["k.%d" % (i % 7) for i in range(N)]
    assert all(m.timestamp and m.stream == "b" for m in got)
    # replayed as DELIVER-BATCH: far fewer frames than messages (replies included)
    assert seen["frames"] < N // 10


def test_a_zeps1_peer_gets_plain_delivers_of_batched_messages(broker):
    raw = RawClient(broker.endpoint).attach("z")
    raw.send(c.BatchSelect())
    raw.expect(c.BatchSelectOk)
    raw.send(c.PublishBatch(3, encode_entries([("a", b"1"), ("b", b"2"), ("c", b"3")])))
    raw.send(c.Ping())
    raw.expect(c.PingOk)
    with Client(broker.endpoint, "z", confirms=True, **FAST) as pub:
        for i in range(500):
            pub.publish("d", b"%d" % i)
        assert pub.wait_for_confirms() == 503
    old = RawClient(broker.endpoint).attach("z").subscribe("", 0, credit=1 << 20)
    delivers = old.delivers(503)                     # asserts each frame is a DELIVER
    assert [d.sequence for d in delivers] == list(range(1, 504))
    assert [(d.key, d.body) for d in delivers[:3]] == [("a", b"1"), ("b", b"2"), ("c", b"3")]
    assert delivers[-1].body == b"499"
    assert old.nothing()


def test_a_batching_and_a_plain_client_see_the_same_stream(broker):
    with Client(broker.endpoint, "m", confirms=True, **FAST) as pub:
        for i in range(2000):
            pub.publish("k", b"%d" % i)
        pub.flush()                                  # pushes out what is queued
        assert pub.wait_for_confirms() == 2000
    views = []
    for batching in (True, False):
        with Client(broker.endpoint, "m", batching=batching, **FAST) as cl:
            assert (cl.max_batch is not None) == batching
            sub = cl.subscribe()
            views.append([(m.sequence, m.key, m.body, m.timestamp)
                          for m in (sub.next(timeout=10) for _ in range(2000))])
    assert views[0] == views[1]


def test_asyncio_client_publishes_and_replays_with_batches(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "a", confirms=True, **FAST) as pub:
            receipts = [await pub.publish("k", b"%d" % i) for i in range(3000)]
            assert await pub.wait_for_confirms(30) == 3000
            assert pub.max_batch is not None
            seqs = [await r for r in receipts]
        async with AsyncClient(broker.endpoint, "a", **FAST) as cl:
            sub = await cl.subscribe()
            got = [await sub.next(10) for _ in range(3000)]
        return seqs, got

    seqs, got = asyncio.run(asyncio.wait_for(main(), 120))
    assert seqs == list(range(1, 3001))
    assert [(m.sequence, m.body) for m in got] == [(i + 1, b"%d" % i) for i in range(3000)]


def counting_sends(client):
    """Count the PUBLISH and PUBLISH-BATCH frames ``client`` hands its socket."""
    conn = client._conn
    send = conn.send
    seen = {"frames": 0}

    def counted(frame, *args, **kw):
        result = send(frame, *args, **kw)
        if frame[2] in (c.Publish.ID, c.PublishBatch.ID):
            seen["frames"] += 1
        return result
    conn.send = counted
    return seen


def test_publish_batch_sends_few_frames_and_every_message_arrives_in_order(broker):
    with Client(broker.endpoint, "pb", **FAST) as pub:
        seen = counting_sends(pub)
        for start in range(0, N, 500):
            assert pub.publish_batch([("k", b"%d" % i) for i in range(start, start + 500)]) == 500
        pub.flush()
    assert 0 < seen["frames"] <= N // 100, seen            # batches, not one frame per message
    with Client(broker.endpoint, "pb", **FAST) as sub_client:
        sub = sub_client.subscribe()
        got = [sub.next(timeout=10) for _ in range(N)]
        assert sub.poll(0.2) is None
    assert [(m.sequence, m.body) for m in got] == [(i + 1, b"%d" % i) for i in range(N)]


def test_a_replay_read_as_arrow_record_batches_is_what_was_published(broker):
    pa = pytest.importorskip("pyarrow")
    with Client(broker.endpoint, "arrow", **FAST) as pub:
        for start in range(0, N, 500):
            pub.publish_batch([("k.%d" % (i % 3), b"%d" % i) for i in range(start, start + 500)])
        pub.publish("h", b"with", headers=[("x", b"1")])       # alone, as DELIVER-H
        pub.flush()
    with Client(broker.endpoint, "arrow", **FAST) as sub_client:
        sub = sub_client.subscribe()
        batches, n = [], 0
        while n < N + 1:
            b = sub.next_batch(timeout=10)
            batches.append(b.to_arrow())
            n += len(b)
    assert n == N + 1 and len(batches) < N // 10                # frames kept whole, not messages
    t = pa.Table.from_batches(batches).to_pydict()
    assert t["sequence"] == list(range(1, N + 2))
    assert t["key"] == ["k.%d" % (i % 3) for i in range(N)] + ["h"]
    assert t["body"] == [b"%d" % i for i in range(N)] + [b"with"]
    assert t["headers"] == [None] * N + [[{"key": "x", "value": b"1"}]]
    assert all(ts is not None for ts in t["timestamp"])


def test_publish_batch_publishes_the_messages_before_a_bad_one_and_none_after(broker):
    with Client(broker.endpoint, "pb-bad", **FAST) as pub:
        items = [("k", b"%d" % i) for i in range(300)] + [("k", 3.5)] + [("k", b"after")]
        with pytest.raises(TypeError, match="body must be bytes or str"):
            pub.publish_batch(items)
        pub.publish("next", b"!")
        pub.flush()
    with Client(broker.endpoint, "pb-bad", **FAST) as sub_client:
        sub = sub_client.subscribe()
        got = [sub.next(timeout=10) for _ in range(301)]
        assert sub.poll(0.2) is None
    assert [m.body for m in got] == [b"%d" % i for i in range(300)] + [b"!"]


def test_publish_batch_with_confirms_sends_batches_and_survives_a_broker_crash_once(broker):
    """Confirmed publish_batch: few frames, every message confirmed; a SIGKILL of the broker
    with a batch unconfirmed: re-sent after the reconnect and stored exactly once."""
    part = [[("k", b"%d" % i) for i in range(start, start + 2000)] for start in (0, 2000, 4000)]
    with Client(broker.endpoint, "pbc", confirms=True, **FAST) as pub:
        seen = counting_sends(pub)
        assert pub.publish_batch(part[0]) == 2000
        assert pub.wait_for_confirms(timeout=30) == 2000
        assert 0 < seen["frames"] <= 2000 // 50, seen              # batches, not one per message
        pub.publish_batch(part[1])                                    # not waited for
        broker.kill()
        broker.restart()
        pub.publish_batch(part[2])
        assert pub.wait_for_confirms(timeout=60) == 6000
        assert pub.reconnects >= 1
    with Client(broker.endpoint, "pbc", **FAST) as sub_client:
        sub = sub_client.subscribe()
        got = [sub.next(timeout=10) for _ in range(6000)]
        assert sub.poll(0.2) is None                                 # nothing twice
    assert [(m.sequence, m.body) for m in got] == [(i + 1, b"%d" % i) for i in range(6000)]


def test_asyncio_publishes_in_a_loop_leave_in_batches_and_a_lone_one_leaves_at_once(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "ab", **FAST) as pub, \
                AsyncClient(broker.endpoint, "ab", create=True, **FAST) as sub_client:
            sub = await sub_client.subscribe(live=True)
            seen = counting_sends(pub)
            for i in range(N):
                await pub.publish("k", b"%d" % i)
            await pub.flush()
            frames = seen["frames"]
            got = [await sub.next(timeout=10) for _ in range(N)]
            # a lone publish, then nothing more from the publisher: it must still arrive
            await pub.publish("lone", b"!")
            lone = await sub.next(timeout=10)
        return frames, got, lone

    frames, got, lone = asyncio.run(main())
    assert frames <= N // 20, f"{frames} frames for {N} publishes"
    assert [m.body for m in got] == [b"%d" % i for i in range(N)]
    assert (lone.key, lone.sequence) == ("lone", N + 1)
