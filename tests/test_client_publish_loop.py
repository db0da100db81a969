"""``publish()`` in a loop (issue 20): a publisher faster than its socket finds it busy after a
few frames (the DEALER's send high-water mark, ``transport.BATCH_SNDHWM``) and its publishes
leave together as PUBLISH-BATCH frames (natural batching, :mod:`zeps.clients.batching`). That
path must give exactly what plain PUBLISH frames give: the same messages, in the same order,
each confirmed once with its own sequence. Real broker process, real sockets on 127.0.0.1; no
figure of time is asserted (the speed is measured in bench/, docs/benchmarks.md)."""
from __future__ import annotations

import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.measure import wait_for
from zeps.clients import Client
from zeps.clients.transport import BATCH_SNDHWM, PLAIN_SNDHWM

FAST = dict(timeout=20.0, heartbeat=5.0)

messages = st.lists(st.tuples(st.sampled_from(["", "k", "a.b", "clé", "x" * 255]),
                              st.binary(max_size=300)), min_size=1, max_size=400)
# where the program stops publishing for a moment to ask the broker something (a flush): the
# queue in front of it must leave before it, in order
pauses = st.sets(st.integers(0, 399), max_size=3)


def _read_all(endpoint: str, stream: str, n: int):
    with Client(endpoint, stream, **FAST) as cl:
        sub = cl.subscribe()
        got = [sub.next(timeout=20) for _ in range(n)]
        assert sub.poll(0.05) is None                       # nothing more
    return got


def test_the_tail_of_a_burst_leaves_without_another_call(broker):
    """A program publishes a burst, then does nothing with the client (it waits for a request,
    say): every message of the burst reaches the broker. A socket kept only a few frames ahead
    (a send high-water mark of 4) left most of the burst's tail in the client until its next
    call, which may never come: the lone publish's latency the issue asks to keep."""
    with Client(broker.endpoint, "tail", create=True, **FAST) as pub, \
            Client(broker.endpoint, "tail", **FAST) as watcher:
        assert pub.max_batch is not None                    # the broker batches
        for _ in range(20):                                 # bursts of 10, then nothing
            want = watcher.info().last + 10
            for i in range(10):
                pub.publish("k", b"%d" % i)
            assert wait_for(lambda: watcher.info().last, lambda last, w=want: last == w,
                            timeout=10) == want, "part of the burst stayed in the client"
    with Client(broker.endpoint, "tail", batching=False, **FAST) as plain:
        assert plain._conn.sock.getsockopt(zmq.SNDHWM) == PLAIN_SNDHWM


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(items=messages, stops=pauses, confirms=st.booleans())
def test_publishes_in_a_loop_give_what_plain_publishes_give(broker, items, stops, confirms):
    got = {}
    for batching in (True, False):
        stream = f"loop-{batching}-{confirms}-{abs(hash((tuple(items), tuple(stops)))) % 10**9}"
        with Client(broker.endpoint, stream, confirms=confirms, batching=batching,
                    **FAST) as pub:
            receipts = []
            for i, (key, body) in enumerate(items):
                receipts.append(pub.publish(key, body))
                if i in stops:
                    pub.flush()
            if confirms:
                assert pub.wait_for_confirms() == len(items)
                assert pub.unconfirmed == 0
                got[batching, "seq"] = [r.result(0) for r in receipts]
            else:
                pub.flush()
        got[batching] = [(m.sequence, m.key, m.body)
                         for m in _read_all(broker.endpoint, stream, len(items))]
    expected = [(i, key, body) for i, (key, body) in enumerate(items, 1)]
    assert got[True] == got[False] == expected
    if confirms:                      # every message confirmed once, with its own sequence
        assert got[True, "seq"] == got[False, "seq"] == list(range(1, len(items) + 1))


def _bursts_reach_the_broker(pub, watcher, rounds: int, size: int, confirms: bool, batch: bool,
                             pad: bytes = b""):
    """Bursts of ``size`` publishes far faster than the socket, each followed by nothing on
    ``pub`` until ``watcher`` sees the whole burst in the stream; with confirms the burst's
    receipts then resolve to its own sequences."""
    for r in range(rounds):
        first = watcher.info().last + 1
        want = first + size - 1
        if batch:
            pub.publish_batch([("k", b"%d-%d%s" % (r, i, pad)) for i in range(size)])
            receipts = []
        else:
            receipts = [pub.publish("k", b"%d-%d%s" % (r, i, pad)) for i in range(size)]
        last = wait_for(lambda: watcher.info().last, lambda last, w=want: last >= w, timeout=20)
        assert last == want, f"round {r}: {want - last} publishes stayed in the client"
        if confirms:
            assert [rc.result(20) for rc in receipts] == list(range(first, want + 1))


def test_a_burst_then_nothing_reaches_the_broker(broker):
    """A burst far beyond what the socket holds (its send high-water mark), then the program
    does nothing with the client: the client's own sender sends what the burst left queued in
    it (without one, the tail waited for the client's next call, which may never come)."""
    with Client(broker.endpoint, "burst", create=True, **FAST) as pub, \
            Client(broker.endpoint, "burst", **FAST) as watcher:
        assert pub.max_batch is not None
        assert pub._conn.sock.getsockopt(zmq.SNDHWM) == BATCH_SNDHWM
        _bursts_reach_the_broker(pub, watcher, rounds=5, size=3000, confirms=False, batch=False)


def test_a_burst_with_confirms_resolves_to_its_sequences(broker):
    """The same with confirms: what the client's sender sent is confirmed, and each receipt of
    the burst resolves to its own message's sequence, in order."""
    with Client(broker.endpoint, "burst-c", create=True, confirms=True, **FAST) as pub, \
            Client(broker.endpoint, "burst-c", **FAST) as watcher:
        _bursts_reach_the_broker(pub, watcher, rounds=5, size=3000, confirms=True, batch=False)
        assert pub.wait_for_confirms() == watcher.info().last and pub.unconfirmed == 0


def test_the_tail_of_publish_batch_leaves_without_another_call(broker):
    """``publish_batch`` returns with frames still waiting for the socket (it builds its next
    frame while some wait): they leave without another call too."""
    with Client(broker.endpoint, "burst-b", create=True, **FAST) as pub, \
            Client(broker.endpoint, "burst-b", **FAST) as watcher:
        _bursts_reach_the_broker(pub, watcher, rounds=3, size=20000, confirms=False, batch=True,
                                 pad=b"x" * 2000)


def test_close_sends_what_a_burst_left_queued(broker):
    """``close()`` right after a burst sends every publish still queued in the client, whether
    the client's sender took some of them already or not, in order, once each."""
    for confirms in (False, True):
        stream = f"close-{confirms}"
        n = 0
        for _ in range(5):
            with Client(broker.endpoint, stream, create=True, confirms=confirms, **FAST) as pub:
                for i in range(2000):
                    pub.publish("k", b"%d" % (n + i))
            n += 2000
        got = _read_all(broker.endpoint, stream, n)
        assert [(m.sequence, m.body) for m in got] == [(i + 1, b"%d" % i) for i in range(n)]
