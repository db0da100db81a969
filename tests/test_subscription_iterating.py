"""Iterating a blocking :class:`~zeps.clients.Subscription` (issue 20): ``iter(sub)`` is an
``itertools.chain`` that hands each message in C and runs the subscription's Python once per
fill, and ``next()``, ``poll()``, ``next(sub)`` and ``next_batch()`` read the same ready
messages. Checked against the subscription it replaces (``OldSubscription`` below, its code as
it was: a deque popped message by message): for any mix of the ways of reading, over DELIVER
and DELIVER-BATCH frames, the same messages in the same order, the same ``position`` and
``buffered`` after each step, and the same CREDIT after the same messages. Then what the
chain must keep: a ``for`` loop survives a timeout, ends when the client is closed (``next()``
raises ClientClosed), and a closed client hands nothing more.

No test times anything: that ``for`` runs the subscription's Python once per fill, not per
message, is counted with ``sys.setprofile``.

Pure: the real sans-I/O peering and the real ``operations.fill``, driven by hand; a "broker"
sends the frames the credit covers whenever the subscription waits (no sockets, no clock)."""
from __future__ import annotations

import sys
from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.clients import ClientClosed, InvalidError, MessageBatch, Subscription, ZepsTimeout
from zeps.clients import operations as ops
from zeps.protocol import commands as c
from zeps.protocol.deliver import encode_deliver
from tests.test_client_batching import _cost, batching, deliver_batch
from tests.test_client_peering import sent
from .property_examples import examples


class Front:
    """What a Subscription needs of its client, without a socket: the real peering, and
    ``_fill`` driving ``operations.fill``; whenever it waits, the broker sends the pending
    frames the credit covers. ``handed`` is set by the test (messages handed so far) so that
    each CREDIT is recorded with the messages handed before it."""

    def __init__(self, frames, window=600):
        self._p = p = batching(window=window)
        p.start_delivery()
        sent(p)
        self.stream = "s"
        self.pending = list(frames)
        self.credits = []
        self.handed = 0
        self.subscription = None

    def _send_queued(self):
        self.credits += [(self.handed, x.credit) for x in sent(self._p)
                         if isinstance(x, c.Credit)]

    def _broker(self):
        p = self._p
        while self.pending and p.buffered + p.consumed + _cost(self.pending[0]) <= p.credit_window:
            p.receive(self.pending.pop(0), 0.0)

    def _fill(self, ready, timeout, batches=False):
        steps = ops.fill(self, ready, timeout, batches)
        try:
            cond, _deadline = next(steps)
            while True:
                self._broker()
                cond, _deadline = steps.send(bool(cond()))
        except StopIteration as done:
            return done.value

    def close(self):
        """As ``Client.close``: the peering closed, the ready messages dropped."""
        self._p.close()
        self.subscription._drop()


class OldSubscription:
    """The blocking subscription before issue 20's chain (its reading code as it was)."""

    def __init__(self, client):
        self._client = client
        self.timeout = None
        self._ready = deque()
        self._batches = deque()
        self._position = 0

    position = property(lambda self: self._position)

    @property
    def buffered(self):
        return (self._client._p.buffered_messages + len(self._ready)
                + sum(len(b) for b in self._batches))

    def _drop(self):
        self._ready.clear()

    def _unbatch(self):
        if not self._batches:
            return False
        for b in self._batches:
            self._ready.extend(b.messages)
        self._batches.clear()
        return True

    def _ready_batch(self):
        if self._ready:
            batch = MessageBatch(self._ready)
            self._ready.clear()
        elif self._batches:
            batch = self._batches.popleft()
        else:
            return None
        self._position = batch.last
        return batch

    def next(self, timeout=None):
        msg = self.poll(timeout)
        if msg is None:
            raise ZepsTimeout("timeout")
        return msg

    def poll(self, timeout=0.0):
        ready = self._ready
        while True:
            try:
                msg = ready.popleft()
                break
            except IndexError:
                if not self._unbatch() and not self._client._fill(ready, timeout):
                    return None
        self._position = msg.sequence
        return msg

    def next_batch(self, timeout=None):
        while True:
            batch = self._ready_batch()
            if batch is not None:
                return batch
            if not self._client._fill(self._batches, timeout, True):
                raise ZepsTimeout("timeout")

    def __iter__(self):
        return self

    def __next__(self):
        try:
            msg = self._ready.popleft()
        except IndexError:
            try:
                return self.next(self.timeout)
            except ClientClosed:
                raise StopIteration from None
        self._position = msg.sequence
        return msg


def frames_of(items, cuts):
    """``items`` from sequence 1 as frames: ``cuts[i]`` 0 is one plain DELIVER, n > 0 a
    DELIVER-BATCH of n messages (round and round)."""
    frames, i, n = [], 0, 0
    while i < len(items):
        size = cuts[n % len(cuts)]
        if size == 0:
            key, body = items[i]
            frames.append(encode_deliver(i + 1, key.encode(), body))
            size = 1
        else:
            frames.append(deliver_batch(i + 1, items[i:i + size]))
        i, n = i + size, n + 1
    return frames


def read(cls, frames, total, steps):
    """Read ``total`` messages from ``frames`` with a subscription of class ``cls``, doing
    ``steps`` round and round: what each step handed (message fields, or "timeout"), the
    position and buffered count after it, and the credits granted (with the messages handed
    before each)."""
    front = Front(frames, window=300)       # CREDIT every 150 bytes; a frame costs at most 135
    sub = front.subscription = cls(front)
    sub.timeout = 0.0
    kept = iter(sub)
    log, handed, i = [], 0, 0
    while handed < total:
        what, n = steps[i % len(steps)]
        i += 1
        assert i < 10 * total + 100, "no progress"
        try:
            if what == "next":
                got = [sub.next(0.0)]
            elif what == "poll":
                got = [m for m in [sub.poll(0.0)] if m is not None]
            elif what == "dunder":
                got = [next(sub)]
            elif what == "batch":
                got = list(sub.next_batch(0.0))
            else:                        # n messages from a kept or a new iter(sub)
                it = kept if what == "iter_kept" else iter(sub)
                got = []
                for m in it:
                    got.append(m)
                    if len(got) >= min(n, total - handed):
                        break
        except ZepsTimeout:
            got = "timeout"
        if got != "timeout":
            handed += len(got)
            front.handed = handed
            got = [(m.sequence, m.key, m.body, m.timestamp, m.stream) for m in got]
        log.append((what, got, sub.position, sub.buffered))
    return log, front.credits, front._p.consumed


items_st = st.lists(st.tuples(st.sampled_from(["", "a", "key.é"]), st.binary(max_size=12)),
                    min_size=1, max_size=150)
cuts_st = st.lists(st.integers(0, 5), min_size=1, max_size=12)
steps_st = st.lists(st.tuples(st.sampled_from(["next", "poll", "dunder", "batch", "iter_new",
                                               "iter_kept"]), st.integers(1, 9)),
                    min_size=1, max_size=12)


@settings(max_examples=examples(150), deadline=None)
@given(items_st, cuts_st, steps_st)
def test_any_mix_of_reads_hands_and_credits_what_the_old_subscription_did(items, cuts, steps):
    frames = frames_of(items, cuts)
    new = read(Subscription, frames, len(items), steps)
    old = read(OldSubscription, frames, len(items), steps)
    assert new == old
    got = [m for _what, ms, _pos, _buf in new[0] if ms != "timeout" for m in ms]
    assert [(s, k, b) for s, k, b, _ts, _st in got] == [
        (i + 1, k, b) for i, (k, b) in enumerate(items)]


def test_a_for_loop_hands_each_message_once_when_next_poll_and_batches_read_inside_it():
    items = [("k", bytes([i])) for i in range(40)]
    front = Front(frames_of(items, [5, 0, 3]))
    sub = front.subscription = Subscription(front)
    got = []
    for m in sub:
        got.append(m.sequence)
        assert sub.position == m.sequence
        if m.sequence % 7 == 0:
            got.append(sub.next(0.0).sequence)
            got += [x.sequence for x in sub.next_batch(0.0)]
            assert sub.position == got[-1]
        elif m.sequence % 5 == 0:
            got.append(sub.poll(0.0).sequence)
        if got[-1] == 40:
            break
    assert got == list(range(1, 41))


def test_a_for_loop_lives_on_after_a_timeout_as_the_subscription_did():
    front = Front([])
    sub = front.subscription = Subscription(front)
    sub.timeout = 0.5
    it = iter(sub)
    with pytest.raises(ZepsTimeout, match="within 0.5s"):
        next(it)
    with pytest.raises(ZepsTimeout):
        sub.next(0.25)
    assert sub.poll(0.0) is None
    front.pending = frames_of([("k", b"a"), ("k", b"b"), ("k", b"c")], [2, 0])
    assert next(it).body == b"a"
    assert sub.next(0.0).body == b"b"
    assert next(it).body == b"c" and sub.position == 3
    with pytest.raises(ZepsTimeout):
        next(it)


@pytest.mark.parametrize("cls", [Subscription, OldSubscription])
def test_an_error_of_the_client_is_raised_once_and_the_loop_goes_on(cls):
    a, b = frames_of([("k", b"a"), ("k", b"b")], [1, 1])
    front = Front([a])
    sub = front.subscription = cls(front)
    sub.timeout = 1.0
    it = iter(sub)
    assert next(it).body == b"a"
    front.pending.append(b)
    front._p.error = InvalidError("refused")
    with pytest.raises(InvalidError, match="refused"):
        next(it)
    assert next(it).body == b"b" and sub.position == 2


@pytest.mark.parametrize("cls", [Subscription, OldSubscription])
def test_closing_ends_for_loops_and_drops_what_was_not_handed(cls):
    front = Front(frames_of([("k", bytes([i])) for i in range(10)], [10]))
    sub = front.subscription = cls(front)
    sub.timeout = 1.0
    it = iter(sub)
    assert next(it).sequence == 1 and sub.buffered == 9
    front.close()
    assert sub.position == 1 and sub.buffered == 0
    assert list(it) == [] and list(sub) == []
    with pytest.raises(StopIteration):
        next(sub)
    with pytest.raises(ClientClosed):
        sub.next(0.0)
    with pytest.raises(ClientClosed):
        sub.poll(0.0)
    with pytest.raises(ClientClosed):
        sub.next_batch(0.0)


def python_calls(step):
    """The Python functions called while ``step()`` runs, counted by name."""
    calls = Counter()

    def profile(frame, event, _arg):
        if event == "call":
            calls[frame.f_code.co_name] += 1
    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return calls


def test_a_for_loop_runs_python_per_fill_and_next_one_call_per_message():
    items = [("k", bytes([i % 256])) for i in range(1000)]
    front = Front(frames_of(items, [100]), window=1 << 20)
    sub = front.subscription = Subscription(front)
    front._broker()                                 # all received: only reading is counted
    got = []
    it = iter(sub)
    calls = python_calls(lambda: got.extend(m.sequence for _, m in zip(range(900), it)))
    assert got == list(range(1, 901))
    assert 1 <= calls["_fill"] <= 3                 # up to 512 messages a fill
    # Per fill: the feed, the fill, the peering's take; per frame taken, building its messages
    # (a few comprehensions); per message nothing but the generator expression above.
    assert sum(calls.values()) - calls["<genexpr>"] < len(got) // 5, calls
    calls = python_calls(lambda: [sub.next(0.0) for _ in range(50)])
    # next() is one call (its first one asks the feed of its own chain once)
    assert calls["next"] == 50 and sum(calls.values()) < 60, calls
    assert sub.position == 950


# ------------------------------------------------------------------ building a batch's messages

def old_cut_point(offsets, spent, topup, room):
    """Where ``MessageBatch.cut`` cut before its binary search (its loop as it was)."""
    n, k, cost = len(offsets) - 1, 0, 0
    while k < n:
        cost += offsets[k + 1] - offsets[k] + 4
        k += 1
        if spent + cost >= topup or k >= room:
            break
    return k, cost


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=30)), min_size=1,
                max_size=60),
       st.integers(1, 40), st.integers(0, 400), st.integers(1, 900), st.booleans())
def test_messages_built_in_bulk_and_cuts_are_those_of_the_entries_one_by_one(
        raw, first, spent, topup, from_middle):
    """Any key bytes (ASCII, UTF-8, not UTF-8: each decoded with U+FFFD replacing what does not
    decode, as ``MessageBatch.keys``), a run from the frame's first entry or from the middle
    (what ``cut`` leaves), and the cut at the top-up where the loop before cut it."""
    entries = [bytes((len(k),)) + k + len(b).to_bytes(4, "big") + b for k, b in raw]
    frame = b"\xaa\xa5\x3b" + bytes(20) + b"".join(entries)
    offsets = [23]
    for e in entries:
        offsets.append(offsets[-1] + len(e))
    if from_middle and len(raw) > 1:
        raw, offsets, first = raw[1:], offsets[1:], first + 1
    batch = MessageBatch.from_frame(frame, offsets, first, 5, "s")
    expected = [(first + i, k.decode("utf-8", "replace"), b, 5, "s")
                for i, (k, b) in enumerate(raw)]
    assert [(m.sequence, m.key, m.body, m.timestamp, m.stream) for m in batch.messages] == expected
    assert batch.keys == [k for _s, k, _b, _t, _st in expected]
    if spent < topup:
        room = 1 + topup % 70
        k, cost = old_cut_point(offsets, spent, topup, room)
        messages, got_cost, rest = MessageBatch.from_frame(
            frame, offsets, first, 5, "s").cut(spent, topup, room)
        assert (len(messages), got_cost) == (k, cost)
        assert [m.sequence for m in messages] == [first + i for i in range(k)]
        assert (rest is None) == (k == len(raw))
        if rest is not None:
            assert list(rest.sequences) == list(range(first + k, first + len(raw)))
