"""The client SDK against a real broker process (tests/conftest.py), real sockets on 127.0.0.1."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.measure import wait_for
from tests.ports import fixed_ports
from tests.rawclient import RawClient
from zeps.clients import (Client, ClientClosed, ConcurrentUseError, InvalidError, Message,
                          MessageBatch, StreamInfo, ZepsError, ZepsTimeout, list_streams)
from zeps.protocol.codec import publish_frame_limit
from zeps.protocol.commands import Detach

REPO = Path(__file__).resolve().parent.parent
FAST = dict(timeout=5.0, heartbeat=1.0)


def drain(sub, n, timeout=10.0):
    """Read exactly n messages (each within timeout), checking sequences strictly increase."""
    out = []
    for _ in range(n):
        m = sub.next(timeout=timeout)
        assert not out or m.sequence > out[-1].sequence
        out.append(m)
    return out


def publish_n(endpoint, stream, n, key="k", start=0, confirms=True):
    with Client(endpoint, stream, confirms=confirms, **FAST) as c:
        for i in range(start, start + n):
            c.publish(key if isinstance(key, str) else key(i), b"%d" % i)
        return c.wait_for_confirms() if confirms else None


# ------------------------------------------------------------------ basics

def test_round_trip(broker):
    with Client(broker.endpoint, "orders", **FAST) as pub:
        pub.publish("eu.fr", b"bytes body")
        pub.publish("eu.de", "text body é")           # str body: UTF-8
        assert pub.publish_batch([("us.ny", b"b%d" % i) for i in range(98)]) == 98
    with Client(broker.endpoint, "orders", **FAST) as c:
        msgs = drain(c.subscribe(), 100)
    assert [m.sequence for m in msgs] == list(range(1, 101))
    assert msgs[0] == Message(1, "eu.fr", b"bytes body", msgs[0].timestamp, "orders")
    assert msgs[1].body == "text body é".encode() and msgs[1].text == "text body é"
    assert msgs[99].key == "us.ny" and msgs[99].body == b"b97"
    # DELIVER-TS carries the journal's timestamps: exactly what the journal holds
    from zeps.journal import JournalReader, stream_dir_name
    journal = JournalReader(broker.data_dir / stream_dir_name("orders"))
    assert [m.timestamp for m in msgs] == [r.timestamp for r in journal.read_from(1)]
    assert msgs[0].timestamp > 0
    with Client(broker.endpoint, "orders", timestamps=False, batching=False,
                **FAST) as c:                                        # plain ZEPS/1 DELIVER
        assert all(m.timestamp is None for m in drain(c.subscribe(), 100))
    with Client(broker.endpoint, "orders", timestamps=False, **FAST) as c:
        # DELIVER-BATCH always carries the journal's time
        assert [m.timestamp for m in drain(c.subscribe(), 100)] == [m.timestamp for m in msgs]


def test_subscribe_before_publish_gets_live_messages(broker):
    # A subscriber that waits for its publisher creates the stream: readers do not otherwise
    # (tests/test_readers_never_create.py).
    with Client(broker.endpoint, "s", create=True, **FAST) as c:
        sub = c.subscribe()
        assert sub.poll(0.1) is None
        publish_n(broker.endpoint, "s", 5)
        assert [m.body for m in drain(sub, 5)] == [b"0", b"1", b"2", b"3", b"4"]


def test_from_seq(broker):
    publish_n(broker.endpoint, "s", 20)
    with Client(broker.endpoint, "s", **FAST) as c:
        msgs = drain(c.subscribe(from_seq=11), 10)
        assert [m.sequence for m in msgs] == list(range(11, 21))
        assert c.subscribe(from_seq=1).poll(0.2) is None     # never rewinds the position


def test_from_time_and_seq_at(broker):
    publish_n(broker.endpoint, "s", 10)
    with Client(broker.endpoint, "s", **FAST) as c:
        newest = c.info().newest                   # the journal time of message 10
    # t_ns lies strictly between the two groups' journal times: wait (not sleep) until the
    # clock has passed message 10's, and publish the second group after that.
    t_ns = wait_for(time.time_ns, lambda now: now > newest + 1000, timeout=10, interval=0.001)
    assert t_ns > newest + 1000, "the clock did not pass message 10's journal time"
    publish_n(broker.endpoint, "s", 10, start=10)
    with Client(broker.endpoint, "s", **FAST) as c:
        assert c.seq_at(t_ns) == 11
        assert c.seq_at(t_ns / 1e9) == 11                               # float seconds
        assert c.seq_at(datetime.fromtimestamp(t_ns / 1e9, tz=timezone.utc)) == 11
        assert c.seq_at(0) == 1
        assert c.seq_at(time.time_ns() + 10**12) == 21                  # last + 1
        msgs = drain(c.subscribe(from_time=t_ns), 10)
        assert msgs[0].sequence == 11 and msgs[-1].body == b"19"


def test_live_only(broker):
    publish_n(broker.endpoint, "s", 5)
    with Client(broker.endpoint, "s", **FAST) as c:
        sub = c.subscribe(live=True)
        assert sub.poll(0.2) is None
        publish_n(broker.endpoint, "s", 3, start=5)
        assert [m.sequence for m in drain(sub, 3)] == [6, 7, 8]


def test_subscribe_argument_errors(broker):
    with Client(broker.endpoint, "s", **FAST) as c:
        with pytest.raises(ValueError):
            c.subscribe(from_seq=3, live=True)
        with pytest.raises(ValueError):
            c.subscribe(from_seq=-1)
        with pytest.raises(ZepsError):
            c._fill(collections.deque(), 0)        # nothing subscribed yet
        with pytest.raises(TypeError):
            c.publish("k", 42)
        with pytest.raises(ValueError):
            c.publish("k" * 256, b"")


def test_several_patterns_on_one_client(broker):
    keys = ["eu.fr", "us.ny", "asia.jp", "eu.de", "us.sf", "africa.ng"] * 5
    publish_n(broker.endpoint, "s", len(keys), key=lambda i: keys[i])
    with Client(broker.endpoint, "s", **FAST) as c:
        sub = c.subscribe(["eu.", "~^us\\."])                # both from the first message
        assert c.subscribe("eu.") is sub                    # same pattern again: harmless
        assert sub.patterns == ("eu.", "~^us\\.")
        msgs = drain(sub, 20)
        assert sub.poll(0.3) is None                        # each message once
    assert all(m.key.startswith(("eu.", "us.")) for m in msgs)
    assert [m.sequence for m in msgs] == [i + 1 for i, k in enumerate(keys)
                                          if k.startswith(("eu.", "us."))]


def test_later_pattern_applies_from_the_position(broker):
    publish_n(broker.endpoint, "s", 4, key=lambda i: ["eu.a", "us.a"][i % 2])   # 1..4
    with Client(broker.endpoint, "s", **FAST) as c:
        sub = c.subscribe("eu.")
        assert [m.sequence for m in drain(sub, 2)] == [1, 3]
        assert sub.poll(0.3) is None                    # the position is now past 4
        assert c.subscribe("~^us", from_seq=1) is sub   # added from the position: no rewind
        publish_n(broker.endpoint, "s", 4, key=lambda i: ["eu.b", "us.b"][i % 2])  # 5..8
        assert [(m.sequence, m.key) for m in drain(sub, 4)] == [
            (5, "eu.b"), (6, "us.b"), (7, "eu.b"), (8, "us.b")]


def test_info_and_list_streams(broker):
    with Client(broker.endpoint, "empty", create=True, **FAST) as c:    # creates it, empty
        info = c.info()
        assert (info.first, info.last, info.count, info.empty) == (1, 0, 0, True)
    before = time.time_ns()
    publish_n(broker.endpoint, "full", 7)
    with Client(broker.endpoint, "full", **FAST) as c:
        info = c.info()
        assert isinstance(info, StreamInfo) and info.stream == "full"
        assert (info.first, info.last, info.count) == (1, 7, 7)
        assert info.size > 0 and before <= info.oldest <= info.newest <= time.time_ns()
        assert set(c.list_streams()) >= {"empty", "full"}
    assert set(list_streams(broker.endpoint, timeout=5)) >= {"empty", "full"}


def test_reading_in_batches_and_message_by_message_mixed_gives_every_message_once(
        start_broker, tmp_path):
    """History (stored as batches) then live messages, read in turns with next(), next_batch()
    and batches(): every sequence once, in order, the position where the reading stopped.
    (Messages of at most 1 KiB, so that a 64 KiB credit window holds: the ~600 KB of history
    come in many DELIVER-BATCHes, each as much as the credit allows.)"""
    broker = start_broker(tmp_path / "data", "--max-message", "1K")
    n = 5000
    with Client(broker.endpoint, "bulk", **FAST) as pub:
        pub.publish_batch([("k.%d" % (i % 7), b"%100d" % i) for i in range(n)])
        pub.flush()
        with Client(broker.endpoint, "bulk", credit_window=64 << 10, **FAST) as c:
            sub = c.subscribe()
            got = [(m.sequence, m.key, m.body) for m in drain(sub, 10)]
            while len(got) < n // 2:
                b = sub.next_batch(timeout=10)
                assert isinstance(b, MessageBatch) and len(b) >= 1
                got += list(zip(b.sequences, b.keys, b.bodies))
                assert sub.position == b.last == got[-1][0]
            got += [(m.sequence, m.key, m.body) for m in drain(sub, 10)]
            for b in sub.batches(timeout=10):
                got += [(m.sequence, m.key, m.body) for m in b]        # as Messages
                if got[-1][0] >= n:
                    break
            pub.publish("live", b"after")                    # then live
            pub.flush()
            b = sub.next_batch(timeout=10)
            got += list(zip(b.sequences, b.keys, b.bodies))
            assert sub.buffered == 0 and sub.position == n + 1
            with pytest.raises(ZepsTimeout):
                sub.next_batch(timeout=0.2)                  # nothing more was published
    assert got == [(i + 1, "k.%d" % (i % 7), b"%100d" % i) for i in range(n)] + [
        (n + 1, "live", b"after")]


def test_batches_ends_when_the_client_is_closed(broker):
    with Client(broker.endpoint, "bulk-close", **FAST) as pub:
        pub.publish_batch([("k", b"x")] * 50)
    c = Client(broker.endpoint, "bulk-close", **FAST)
    sub = c.subscribe()
    seen = 0
    for b in sub.batches():
        seen += len(b)
        if seen == 50:
            c.close()
    assert seen == 50


# ------------------------------------------------------------------ credit

def test_tiny_credit_window_slow_subscriber_gets_everything_fast_one_unaffected(broker):
    """A subscriber with a tiny credit window that stops reading does not hold back a fast one:
    the slow one reads a few messages, then reads nothing more until the fast one has had all
    600 (a broker that held the fast one back would never get there: the deadline fails it);
    then the slow one gets everything too, in order."""
    n, body = 600, b"x" * 100                      # cost of one message: 8 + 1 + 1 + 100 = 110
    results = {}
    fast_done = threading.Event()

    def consume(name, window, stall_after):
        with Client(broker.endpoint, "s", credit_window=window, create=True, **FAST) as c:
            sub = c.subscribe()
            subscribed.wait()                      # both subscribed before anything is published
            got = []
            while len(got) < n:
                got.append(sub.next(timeout=30).sequence)
                if len(got) == stall_after:        # stops reading, its window full
                    results["fast done while the slow one stalled"] = fast_done.wait(30)
            results[name] = got
            if name == "fast":
                fast_done.set()

    subscribed = threading.Barrier(3, timeout=30)
    threads = [threading.Thread(target=consume, args=("slow", 300, 5), daemon=True),
               threading.Thread(target=consume, args=("fast", 8 << 20, None), daemon=True)]
    for t in threads:
        t.start()
    subscribed.wait()
    with Client(broker.endpoint, "s", confirms=True, **FAST) as pub:
        pub.publish_batch(("k", body) for _ in range(n))
        assert pub.wait_for_confirms() == n
    for t in threads:
        t.join(90)
    assert results["fast done while the slow one stalled"] is True
    assert results["fast"] == list(range(1, n + 1))
    assert results["slow"] == list(range(1, n + 1))


def test_message_larger_than_half_window_still_flows(broker):
    with Client(broker.endpoint, "s", **FAST) as pub:
        pub.publish_batch(("k", b"y" * 1000) for _ in range(20))
    with Client(broker.endpoint, "s", credit_window=1010, **FAST) as c:   # exactly one message (8+1+1+1000)
        assert [m.sequence for m in drain(c.subscribe(), 20)] == list(range(1, 21))


# ------------------------------------------------------------------ confirms and INVALID

def test_confirms_survive_sigkill(broker):
    with Client(broker.endpoint, "s", confirms=True, **FAST) as c:
        assert c.wait_for_confirms() == 0                  # nothing published yet
        for i in range(300):
            c.publish("k", b"m%d" % i)
        assert c.wait_for_confirms() == 300
        assert c.unconfirmed == 0 and c.last_confirmed == 300
        broker.kill()
    broker.restart()
    with Client(broker.endpoint, "s", **FAST) as c:
        assert c.info().last == 300
        msgs = drain(c.subscribe(), 300)
    assert [m.body for m in msgs] == [b"m%d" % i for i in range(300)]


def test_invalid_regex_surfaces_with_reason(broker):
    with Client(broker.endpoint, "s", create=True, **FAST) as c:
        with pytest.raises(InvalidError) as e:
            c.subscribe("~(")
        assert "bad regular expression" in e.value.reason
        assert e.value.command == "SUBSCRIBE"
        publish_n(broker.endpoint, "s", 2)
        assert len(drain(c.subscribe(""), 2)) == 2          # the client is still usable


def test_rejected_publish_surfaces_on_next_call(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--max-message", "1K")
    with Client(b.endpoint, "s", confirms=True, **FAST) as c:
        c.publish("k", b"ok1")
        c.publish("k", b"z" * 5000)                          # over --max-message
        c.publish("k", b"ok2")
        with pytest.raises(InvalidError) as e:
            c.wait_for_confirms()
        assert e.value.reason.startswith("PUBLISH rejected") and e.value.command == "PUBLISH"
        assert c.wait_for_confirms() == 2                    # the two others are durable
    with Client(b.endpoint, "s", **FAST) as c:
        c.publish("k", b"z" * 5000)
        with pytest.raises(InvalidError):
            # Raised by a later call once the INVALID has arrived (here: flush or close).
            c.flush()
        c.publish("k", b"ok3")                               # still usable afterwards
    with Client(b.endpoint, "s", **FAST) as c:
        assert [m.body for m in drain(c.subscribe(), 3)] == [b"ok1", b"ok2", b"ok3"]


def test_a_message_longer_than_the_broker_reads_is_refused_at_once_and_loses_nothing(
        start_broker, tmp_path):
    """A PUBLISH longer than the broker reads at all (with the default limits: its --max-message
    of body under a 255-byte key, and 64 KiB more) makes it drop the connection unread, and a
    client with confirms would send it again after each reconnect until its timeout. The client
    refuses it with ValueError, sending nothing, even as the first call before the broker said
    its limits; publish_batch sends the messages before it, with no further call, and none
    after it. One byte shorter, the broker reads it and refuses it itself (InvalidError)."""
    b = start_broker(tmp_path / "d")                    # the default limits
    limit = publish_frame_limit(1 << 20)               # what a PUBLISH frame may be
    unread = b"y" * (limit - 9 + 1)                     # its frame: 9 bytes more (key "k")
    read = b"y" * (limit - 9)
    with Client(b.endpoint, "s", confirms=True, **FAST) as c:
        with pytest.raises(ValueError, match="over the --max-message of 1048576 bytes"):
            c.publish("k", unread)                      # the first call: limits learnt first
        c.publish("k", b"one")
        with pytest.raises(ValueError):
            c.publish_batch([("k", b"two"), ("k", unread), ("k", b"never")])
        with Client(b.endpoint, "s", **FAST) as reader:   # "two" leaves with no further call
            assert [m.body for m in drain(reader.subscribe(), 2)] == [b"one", b"two"]
        c.publish("k", read)
        with pytest.raises(InvalidError) as e:
            c.wait_for_confirms()
        assert e.value.reason.startswith("PUBLISH rejected")
        assert c.wait_for_confirms() == 2
    with Client(b.endpoint, "s", **FAST) as c:          # without confirms: the batch frames' path
        with pytest.raises(ValueError):
            c.publish_batch([("k", b"three"), ("k", unread), ("k", b"never")])
        c.publish("k", b"four")
        c.flush()
    with Client(b.endpoint, "s", **FAST) as c:
        assert [m.body for m in drain(c.subscribe(), 4)] == [b"one", b"two", b"three", b"four"]
        assert c.info().last == 4                       # nothing else was stored


def test_wait_for_confirms_needs_confirms(broker):
    with Client(broker.endpoint, "s", **FAST) as c:
        with pytest.raises(ZepsError):
            c.wait_for_confirms()


# ------------------------------------------------------------------ timeouts, errors, close

def test_timeouts(broker):
    with Client(broker.endpoint, "s", create=True, **FAST) as c:
        sub = c.subscribe()
        t = time.monotonic()
        with pytest.raises(ZepsTimeout) as e:
            sub.next(timeout=0.2)
        assert isinstance(e.value, TimeoutError)
        assert 0.15 < time.monotonic() - t < 2
        assert sub.poll(0.05) is None


def test_iteration_timeout_raises_then_the_subscription_goes_on(broker):
    publish_n(broker.endpoint, "s", 3)
    with Client(broker.endpoint, "s", **FAST) as c:
        got = []
        with pytest.raises(ZepsTimeout):
            for m in c.subscribe(timeout=0.3):         # each step waits at most 0.3 s
                got.append(m.sequence)
                last = time.monotonic()
        assert got == [1, 2, 3]
        assert 0.25 < time.monotonic() - last < 3
        sub = c.subscribe()                            # the same subscription, same timeout
        assert sub.timeout == 0.3
        publish_n(broker.endpoint, "s", 1, start=3)
        assert next(iter(sub)).sequence == 4
        with pytest.raises(ValueError):
            c.subscribe(timeout=0)


def test_unreachable_broker_times_out():
    port = fixed_ports()    # free, and outside the ephemeral range: the client cannot connect to itself
    t = time.monotonic()
    with pytest.raises(ZepsTimeout, match="no answer"):
        Client(f"tcp://127.0.0.1:{port}", "s", timeout=0.3)
    assert time.monotonic() - t < 10                 # its timeout, not a hang
    with pytest.raises(ZepsTimeout):
        list_streams(f"tcp://127.0.0.1:{port}", timeout=0.3)


@pytest.mark.parametrize("endpoint", ["nope", "tcp://127.0.0.1", "tcp://127.0.0.1:99999",
                                      "http://127.0.0.1:80", "", "tcp://:7470"])
def test_bad_endpoint_is_value_error_naming_it(endpoint):
    with pytest.raises(ValueError, match="bad endpoint"):
        Client(endpoint, "s", timeout=0.3)


def test_close_is_idempotent_and_final(broker):
    c = Client(broker.endpoint, "s", create=True, **FAST)
    sub = c.subscribe()
    c.publish("k", b"1")
    c.close()
    c.close()
    assert c.closed and not c.attached
    with pytest.raises(ClientClosed):
        c.publish("k", b"2")
    assert list(sub) == []                          # iteration ends once closed
    with Client(broker.endpoint, "s", **FAST) as c2:   # the publish before close() was flushed
        assert c2.info().last == 1


# ------------------------------------------------------------------ one caller at a time

def test_two_threads_at_once_get_an_error_naming_both(broker):
    with Client(broker.endpoint, "s", create=True, **FAST) as c:
        sub = c.subscribe()
        got = []

        def reader():
            while True:
                try:
                    got.append(sub.next(timeout=10))       # waits inside the client
                    return
                except ConcurrentUseError:                  # collided with the main thread
                    time.sleep(0.001)

        t = threading.Thread(target=reader, name="reader")
        t.start()
        deadline = time.monotonic() + 10
        while True:                                         # until the reader is inside
            try:
                c.info()
            except ConcurrentUseError as e:
                err = e
                break
            assert time.monotonic() < deadline, "the reader never got into the client"
            time.sleep(0.01)
        assert isinstance(err, ZepsError)
        assert "thread 'MainThread' called info()" in str(err)
        assert "thread 'reader' is inside a call" in str(err)
        publish_n(broker.endpoint, "s", 1)                  # the reader gets it and leaves
        t.join(10)
        assert [m.sequence for m in got] == [1]
        assert c.info().last == 1                           # one thread at a time again: fine


def test_two_greenlets_at_once_get_an_error(broker):
    gevent = pytest.importorskip("gevent")
    import zmq.green as zgreen

    ctx = zgreen.Context()
    with Client(broker.endpoint, "g", context=ctx, create=True, **FAST) as c:
        sub = c.subscribe()
        reader = gevent.spawn(sub.next, 10)
        gevent.sleep(0)                                     # the reader runs until it waits
        with pytest.raises(ConcurrentUseError, match="another greenlet of thread 'MainThread'"):
            c.publish("k", b"x")
        publish_n(broker.endpoint, "g", 1)
        assert reader.get(timeout=10).sequence == 1
        c.publish("k", b"y")                                # usable again
    ctx.term()


# ------------------------------------------------------------------ reconnect

def test_reconnect_after_sigkill_no_gap_no_duplicate(broker):
    """Broker SIGKILLed and restarted mid-stream while a publisher keeps publishing with
    confirms: the subscriber sees one increasing, gap-free sequence and every confirmed
    message; unconfirmed ones were re-sent (at-least-once)."""
    n = 1500
    confirmed = []
    errors = []

    def publisher():
        try:
            with Client(broker.endpoint, "s", confirms=True, **FAST) as c:
                for i in range(n):
                    c.publish("k", b"%d" % i)
                    if i % 50 == 49:
                        c.wait_for_confirms()
                        confirmed.append(i)
                    time.sleep(0.0005)
                c.wait_for_confirms()
                confirmed.append(n - 1)
                publisher.reconnects = c.reconnects
        except Exception as e:       # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=publisher)
    got = []
    with Client(broker.endpoint, "s", credit_window=64 << 10, create=True, **FAST) as c:
        sub = c.subscribe()
        t.start()
        while True:
            m = sub.poll(2.0)
            if m is None:
                break
            got.append(m)
            if len(got) == 400:
                broker.kill()
                time.sleep(0.2)
                broker.restart()
        sub_reconnects = c.reconnects
    t.join(30)
    assert not errors
    assert sub_reconnects >= 1 and publisher.reconnects >= 1
    seqs = [m.sequence for m in got]
    assert seqs == list(range(1, len(seqs) + 1))            # no gap, no duplicate
    bodies = {int(m.body) for m in got}
    assert set(range(confirmed[-1] + 1)) <= bodies            # every confirmed message is there
    assert len(got) >= n


def test_reconnect_resumes_from_last_handed_message(broker):
    publish_n(broker.endpoint, "s", 50)
    with Client(broker.endpoint, "s", credit_window=500, **FAST) as c:
        sub = c.subscribe()
        first = drain(sub, 10)
        broker.kill()
        broker.restart()
        publish_n(broker.endpoint, "s", 10, start=50)
        rest = drain(sub, 50)
        # at least the restart; a 1 s heartbeat unanswered on a loaded machine may add one
        assert c.reconnects >= 1
    assert [m.sequence for m in first + rest] == list(range(1, 61))


def _publish_when_up(c, key: str, body: bytes, seconds: float = 10.0) -> None:
    """``c.publish`` again while it times out waiting for the broker's ATTACH-OK (or, after
    that, for its reconnection), until ``seconds`` have passed: the client's short timeout is
    for the broker being down, and a loaded machine may take longer than it to create or reopen
    a stream. A publish that timed out there was not accepted (it raises before the message is
    queued: the confirmed counts below say so)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return c.publish(key, body)
        except ZepsTimeout as exc:
            if not ("no answer to ATTACH" in str(exc) or "still reconnecting" in str(exc)) \
                    or time.monotonic() > deadline:
                raise


def test_publish_blocks_then_times_out_while_broker_down(broker):
    with Client(broker.endpoint, "s", confirms=True, timeout=0.5, heartbeat=1.0) as c:
        _publish_when_up(c, "k", b"before")
        assert c.wait_for_confirms(timeout=5) == 1
        broker.kill()
        time.sleep(0.2)
        t = time.monotonic()
        with pytest.raises(ZepsTimeout):
            for _ in range(100):          # the disconnect may be noticed at the first or next call
                c.publish("k", b"during")
        assert time.monotonic() - t < 10             # one timeout (0.5 s), not 100 of them
        accepted = c.unconfirmed
        broker.restart()
        _publish_when_up(c, "k", b"after")
        assert c.wait_for_confirms(timeout=5) == 2 + accepted
    with Client(broker.endpoint, "s", **FAST) as c:
        bodies = [m.body for m in drain(c.subscribe(), 2 + accepted)]
    assert bodies[0] == b"before" and bodies[-1] == b"after"


def _expired(b) -> int:
    """How many clients the broker forgot for their silence (its ``client_expired`` log lines)."""
    return b.log_path.read_text(errors="replace").count("client_expired")


def test_expired_client_recovers_transparently(start_broker, tmp_path):
    """Two clients the broker forgot while neither called (no call, no heartbeat) recover at
    their next call with exactly one reconnect each, and the message published then arrives.

    No sleep "long enough": the test waits until the broker has logged both expiries. The
    heartbeat (0.3 s) is well under the expiry (2 s), so a client inside a call is not forgotten
    again meanwhile (the next test)."""
    b = start_broker(tmp_path / "d", "--expiry", "2")
    with Client(b.endpoint, "s", timeout=5, heartbeat=0.3, create=True) as sub_client, \
            Client(b.endpoint, "s", timeout=5, heartbeat=0.3) as pub:
        sub = sub_client.subscribe()
        pub.publish("k", b"0")
        assert drain(sub, 1)[0].body == b"0"
        # neither client calls: the broker forgets both
        assert wait_for(lambda: _expired(b), lambda n: n >= 2, timeout=30) == 2, b.log()
        assert pub.reconnects == 0 and sub_client.reconnects == 0
        pub.publish("k", b"1")             # checks the peering first: re-attaches, not lost
        pub.flush()
        m = sub.next(timeout=5)
        assert (m.sequence, m.body) == (2, b"1")
        assert pub.reconnects == 1 and sub_client.reconnects == 1


def test_heartbeat_keeps_a_waiting_subscriber_attached(start_broker, tmp_path):
    """A subscriber waiting inside the client (poll) heartbeats, so the broker does not forget
    it, while a client attached after it that makes no call is forgotten.

    No poll "long enough": the subscriber polls until the broker has expired the silent client
    (attached after the subscriber's last call, so a subscriber that did not heartbeat would
    be forgotten no later than it); by then the subscriber has outlived an expiry."""
    b = start_broker(tmp_path / "d", "--expiry", "2")
    with Client(b.endpoint, "s", timeout=5, heartbeat=0.3, create=True) as c:
        sub = c.subscribe()
        assert sub.poll(0) is None
        silent = RawClient(b.endpoint).attach("s")         # makes no call from here on
        try:
            def poll_and_count() -> int:
                assert sub.poll(0.2) is None               # waiting inside the client
                return _expired(b)

            assert wait_for(poll_and_count, lambda n: n >= 1, timeout=30, interval=0) == 1, b.log()
            assert isinstance(silent.recv(5), Detach)     # the silent one was told
            assert sub.poll(0.2) is None and _expired(b) == 1
            assert c.reconnects == 0
        finally:
            silent.close()


# ------------------------------------------------------------------ gevent

def test_gevent_two_greenlets_with_green_context(broker):
    gevent = pytest.importorskip("gevent")
    import zmq.green as zgreen

    ctx = zgreen.Context()
    n = 300
    got = []
    ticks = []

    def subscriber():
        with Client(broker.endpoint, "g", context=ctx, create=True, **FAST) as c:
            assert c.green
            sub = c.subscribe()
            for m in sub:
                got.append(m.sequence)
                if len(got) == n:
                    break

    def publisher():
        with Client(broker.endpoint, "g", context=ctx, confirms=True, **FAST) as c:
            for i in range(n):
                c.publish("k", b"%d" % i)
                if i % 100 == 0:
                    gevent.sleep(0.01)
            assert c.wait_for_confirms() == n

    def ticker():
        while len(got) < n:
            ticks.append(1)
            gevent.sleep(0.01)

    gs = [gevent.spawn(subscriber), gevent.spawn(ticker)]
    gevent.sleep(0.2)                       # the subscriber waits in the client, cooperatively
    gs.append(gevent.spawn(publisher))
    gevent.joinall(gs, timeout=20, raise_error=True)
    assert got == list(range(1, n + 1))
    assert len(ticks) >= 10                 # the hub kept running while clients waited
    ctx.term()


GEVENT_SCRIPT = r"""
from gevent import monkey; monkey.patch_all()
import sys, gevent
from zeps.clients import Client
ep = sys.argv[1]
got = []
def sub():
    with Client(ep, "patched", timeout=5, create=True) as c:
        assert c.green, "monkey-patched socket must select zmq.green"
        s = c.subscribe()
        got.extend(m.sequence for m in (s.next(5) for _ in range(50)))
def pub():
    gevent.sleep(0.1)
    with Client(ep, "patched", confirms=True, timeout=5) as c:
        c.publish_batch(("k", b"x") for _ in range(50))
        c.wait_for_confirms()
gevent.joinall([gevent.spawn(sub), gevent.spawn(pub)], timeout=20, raise_error=True)
assert got == list(range(1, 51)), got
print("ok")
"""


def test_gevent_monkey_patched_program_uses_zmq_green(broker):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", GEVENT_SCRIPT, broker.endpoint], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
