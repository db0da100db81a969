"""Hostile snapshot readers beside a calm pair, against a real broker (issue 18 item 3): with
10^5 keys in an indexed stream, readers that send SNAPSHOT and never grant credit, and readers
that grant a huge credit and never read, cost the broker a bounded memory (its cursor per
snapshot and each pipe, never the answer) while the calm pair gets every message in order."""
from __future__ import annotations

import zmq

from tests.measure import rss_mb
from tests.pair import Pair
from tests.rawclient import RawClient
from zeps.clients import Client
from zeps.protocol import commands as c

KEYS = 100_000


def test_readers_that_never_read_cost_a_bounded_memory(start_broker):
    b = start_broker(None, "--key-index")
    with Client(b.endpoint, "kv", confirms=True) as pub:
        for start in range(0, KEYS, 1000):
            pub.publish_batch((f"key.{i:06}", b"v" * 100) for i in range(start, start + 1000))
        pub.wait_for_confirms(60)
    pair = Pair(b.endpoint)
    ctx = zmq.Context()
    hostiles = []
    try:
        pair.publish(100)
        assert pair.wait_all(30), pair.problems
        before = rss_mb(b.proc.pid)
        for i in range(20):
            h = RawClient(b.endpoint, ctx).attach("kv")
            h.sock.setsockopt(zmq.RCVHWM, 10)
            # half grant nothing, half grant a credit far beyond the answer and never read
            h.send(c.Snapshot(("",)) if i % 2 else c.Credit(1 << 40))
            if not i % 2:
                h.send(c.Snapshot(("",)))
            hostiles.append(h)
        pair.publish(2000)
        assert pair.wait_all(60), pair.problems
        grown = rss_mb(b.proc.pid) - before
        # 20 whole answers would be 20 x 10^5 entries of ~130 bytes (> 250 MB)
        assert grown < 60, f"the broker grew by {grown:.0f} MB for 20 snapshot readers"
        assert pair.problems == []
        # a reader that does read gets all of it, consistent, beside them
        with Client(b.endpoint, "kv") as calm:
            snap = calm.snapshot("key.")
            assert len(snap) == KEYS and snap.seq == KEYS
    finally:
        for h in hostiles:
            h.close()
        pair.close()
        ctx.destroy(linger=0)
