"""Batching in the client's pure core (zeps/clients/batching.py, zeps/clients/peering.py):
BATCH-SELECT at attach and the fallback to ZEPS/1, DELIVER-BATCH decoded into the messages and
the credit DELIVERs give, natural batching of publishes (what leaves at once, what waits, the
max_batch cap), and per-message accounting of batched publishes (refusals, confirms, producer
sequences, reconnects). No sockets, no clock: a fake socket that takes ``room`` frames."""
from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zeps.clients import InvalidError, Message, MessageBatch, Receipt
from zeps.clients.batching import (MAX_BATCH_BYTES, BadEntries, batch_frames,
                                   decode_deliver_batch)
from zeps.clients.requests import RequestKind
from zeps.protocol import commands as c
from zeps.protocol.batch import (ENTRY_COST_EXTRA, PUBLISH_HEAD_SIZE, deliver_batch_head,
                                 encode_entries, walk)
from zeps.protocol.codec import decode, encode, encode_publish
from zeps.protocol.deliver import encode_deliver, message_cost, ts_from_deliver
from zeps.protocol.reasons import PUBLISH_REJECTED
from tests.test_client_peering import OLD_BROKER_LIMITS, feed, peering, sent
from .property_examples import examples

MAX_BATCH = 200
#: STREAM-DESCRIBE-OK of a stream with the broker's default limits.
DESCRIBED = c.StreamDescribeOk(1, 0, 0, 0, 0, 0, 0, 0, 0)


def batching(confirms=False, max_batch=MAX_BATCH, window=10_000, idempotent=False):
    """An attached peering whose broker answered BATCH-SELECT-OK ``max_batch``."""
    p = peering(confirms=confirms, window=window, batching=True, idempotent=idempotent)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.BatchSelectOk(max_batch))
    feed(p, DESCRIBED)
    if confirms:
        feed(p, c.ConfirmSelectOk(0))
        feed(p, c.StreamInfoOk(1, 0, 0, 0, 0))      # the anchor: the stream is empty
        if idempotent:
            feed(p, c.ProducerOk(0))
    sent(p)
    return p


class Socket:
    """A socket that takes ``room`` more frames, driven as ``Connection.flush`` and the front
    ends' ``publish`` drive the real one."""

    def __init__(self, room=0):
        self.room = room
        self.wire = []

    def flush(self, p):
        while True:
            frame = p.next_frame()
            if frame is None or self.room == 0:
                return
            self.wire.append(frame)
            p.outbox.popleft()
            self.room -= 1

    def publish(self, p, body=b"m", key="k"):
        frame = encode_publish(key, body)
        r = Receipt(frame, None)
        assert p.publish(frame, 0.0, r)
        if p.waiting:
            p.queue_publish(frame)
            self.flush(p)
        elif self.room:
            self.room -= 1
            self.wire.append(frame)
        else:
            p.queue_publish(frame)
        return r

    def commands(self):
        out = [decode(f) for f in self.wire]
        self.wire.clear()
        return out


def messages_of(cmds):
    """The (key, body) of every message in PUBLISH and PUBLISH-BATCH commands, in order."""
    out = []
    for cmd in cmds:
        if isinstance(cmd, c.Publish):
            out.append((cmd.key, cmd.body))
        elif isinstance(cmd, c.PublishBatch):
            o = cmd.offsets
            for i in range(cmd.count):
                e = cmd.entries[o[i]:o[i + 1]]
                kend = 1 + e[0]
                out.append((e[1:kend].decode(), e[kend + 4:]))
    return out


def deliver_batch(first, items, ts=77):
    return deliver_batch_head(ts, first, len(items)) + encode_entries(items)


def cut_into_batches(items, cuts):
    """DELIVER-BATCH frames of ``items`` from sequence 1, of ``cuts[0]``, ``cuts[1]``, ...
    messages (round and round)."""
    frames, i, n = [], 0, 0
    while i < len(items):
        size = cuts[n % len(cuts)]
        frames.append(deliver_batch(i + 1, items[i:i + size]))
        i, n = i + size, n + 1
    return frames


# ------------------------------------------------------------------ negotiation

def test_batch_select_is_pipelined_at_attach_and_its_answer_sets_max_batch():
    p = peering(confirms=True, timestamps=True, batching=True)
    sent(p)
    feed(p, c.AttachOk())
    assert sent(p) == [c.Limits(), c.BatchSelect(), c.StreamDescribe("s"), c.ConfirmSelect(),
                       c.StreamInfo(), c.DeliverTimestamps()]
    assert p.max_batch is None                       # plain PUBLISH until the broker says
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.BatchSelectOk(4096))
    assert p.max_batch is None and not p.ready       # and the stream's limits are known
    feed(p, DESCRIBED)
    assert p.max_batch == 4096 and not p.ready
    feed(p, c.ConfirmSelectOk(0))
    assert p.ready


def test_an_older_broker_refusing_batch_select_leaves_zeps1_silently():
    p = peering(batching=True)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, OLD_BROKER_LIMITS)
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    assert not p.ready                               # connecting waits for the answer
    feed(p, c.Invalid("unknown command 56"))         # answers BATCH-SELECT, not the request
    feed(p, c.Invalid("unknown command 54"))         # and STREAM-DESCRIBE
    assert p.max_batch is None and p.error is None and p.fatal is None and not info.done
    assert p.ready
    feed(p, c.StreamInfoOk(1, 2, 3, 4, 5))
    assert info.done and info.error is None
    sent(p)
    sock = Socket(room=0)
    for body in (b"a", b"b", b"c"):
        if p.publish(encode_publish("k", body), 0.0, None):
            p.queue_publish(encode_publish("k", body))
        else:                                        # ZEPS/1: waits for the socket as before
            sock.room = 10
            sock.flush(p)
            assert p.publish(encode_publish("k", body), 0.0, None)
            p.queue_publish(encode_publish("k", body))
    sock.room = 10
    sock.flush(p)
    assert sock.commands() == [c.Publish("k", b"a"), c.Publish("k", b"b"), c.Publish("k", b"c")]


def test_batching_off_never_asks():
    p = peering(batching=False)
    sent(p)
    feed(p, c.AttachOk())
    assert sent(p) == [c.Limits()]


def test_a_reconnect_forgets_max_batch_and_asks_the_next_broker_again():
    p = batching()
    p.connection_lost("gone")
    p.reconnect(1.0)
    assert p.max_batch is None
    sent(p)
    feed(p, c.AttachOk())
    assert c.BatchSelect() in sent(p)


# ------------------------------------------------------------------ DELIVER-BATCH

def test_deliver_batch_gives_the_messages_of_its_run_with_its_timestamp():
    p = batching()
    p.start_delivery()
    sent(p)
    p.receive(deliver_batch(5, [("a", b"x"), ("é", b""), ("k", b"yy")], ts=123), 0.0)
    got = p.take()
    assert [(m.sequence, m.key, m.body, m.timestamp, m.stream) for m in got] == [
        (5, "a", b"x", 123, "s"), (6, "é", b"", 123, "s"), (7, "k", b"yy", 123, "s")]


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "a", "key.é"]), st.binary(max_size=60)),
                min_size=1, max_size=40),
       st.lists(st.integers(1, 7), min_size=1, max_size=40))
@example([("", b"x" * 60)] * 10, [3, 7])   # 3 taken, then 7 that do not fit the credit left
def test_deliver_batch_hands_and_credits_exactly_what_delivers_would(items, cuts):
    """The same messages as DELIVER frames and as DELIVER-BATCH runs: the same messages come
    out in the same order and the same credit goes back to the broker."""
    plain, batched = batching(window=600), batching(window=600)
    for p in (plain, batched):
        p.start_delivery()
        sent(p)
    frames_plain = [encode_deliver(i + 1, k.encode(), b) for i, (k, b) in enumerate(items)]
    frames_batch = cut_into_batches(items, cuts)
    outs = []
    for p, frames in ((plain, frames_plain), (batched, frames_batch)):
        got, credit, pending = [], 0, list(frames)
        while pending or p.buffer:
            broker_sends(p, pending)                  # only what the credit covers
            taken = p.take()
            assert taken, "nothing to take: no message buffered and no credit for the next one"
            got += [(m.sequence, m.key, m.body) for m in taken]
            credit += sum(x.credit for x in sent(p) if isinstance(x, c.Credit))
        outs.append((got, credit))
    assert outs[0] == outs[1]
    assert [g[0] for g in outs[0][0]] == list(range(1, len(items) + 1))


def _cost(frame):
    cmd = decode(frame)
    if isinstance(cmd, c.Deliver):
        return message_cost(cmd.key, cmd.body)
    return len(cmd.entries) + 4 * cmd.count


def _within(frame, room):
    """What a broker sends of ``frame`` (DELIVER or DELIVER-BATCH) to a subscriber with
    ``room`` bytes of credit (docs/protocol.md, DELIVER-BATCH): ``(frame, None)`` when all of
    it fits; for a DELIVER-BATCH that does not, a frame of the first messages that fit and a
    frame of the rest; ``(None, frame)`` when not even the first message fits."""
    if _cost(frame) <= room:
        return frame, None
    cmd = decode(frame)
    if not isinstance(cmd, c.DeliverBatch):
        return None, frame
    offs = walk(cmd.entries, 0, len(cmd.entries), cmd.count, False)
    k = 0
    while k < cmd.count and offs[k + 1] + ENTRY_COST_EXTRA * (k + 1) <= room:
        k += 1
    if k == 0:
        return None, frame
    return (deliver_batch_head(cmd.timestamp, cmd.sequence, k) + cmd.entries[:offs[k]],
            deliver_batch_head(cmd.timestamp, cmd.sequence + k, cmd.count - k)
            + cmd.entries[offs[k]:])


def broker_sends(p, pending) -> None:
    """The broker's side of a reading test: send ``p`` the ``pending`` frames (removed from
    the list as they go) as far as its credit covers them, a DELIVER-BATCH that does not fit
    as the run of its messages that does (the rest stays first in ``pending``)."""
    while pending:
        head, rest = _within(pending[0], p.credit_window - p.buffered - p.consumed)
        if head is None:
            return
        p.receive(head, 0.0)
        if rest is None:
            pending.pop(0)
        else:
            pending[0] = rest


def test_entries_already_received_are_skipped_and_earn_no_credit():
    p = batching()
    p.start_delivery()
    sent(p)
    p.receive(deliver_batch(1, [("k", b"1"), ("k", b"2")]), 0.0)
    p.receive(deliver_batch(2, [("k", b"2"), ("k", b"3")]), 0.0)   # 2 again: a lying broker
    assert [m.sequence for m in p.take()] == [1, 2, 3]
    assert p.consumed + p.buffered == 3 * message_cost("k", b"1")
    assert p.wasted == message_cost("k", b"1") and p.duplicates == 1


def test_a_deliver_batch_beyond_the_credit_given_drops_the_peering():
    p = batching(window=40)
    p.start_delivery()
    sent(p)
    p.receive(deliver_batch(1, [("k", b"x" * 10)] * 3), 0.0)        # 3 x 20 > 40
    assert "more than the 40 bytes" in p.need_reconnect


@pytest.mark.parametrize("frame", [
    deliver_batch(1, [("k", b"x")])[:-1],                            # truncated entry
    deliver_batch(1, [("k", b"x")]) + b"\0",                         # trailing byte
    deliver_batch_head(1, 1, 0),                                     # no message
    deliver_batch(1, [("k", b"x")])[:10],                            # truncated head
])
def test_a_bad_deliver_batch_is_ignored_and_hands_nothing(frame):
    p = batching()
    p.start_delivery()
    sent(p)
    p.receive(frame, 0.0)
    assert not p.buffer and p.need_reconnect is None and p.error is None


def _batch_decoder(frame, stream="s"):
    """What the batch path (decode_deliver_batch and MessageBatch) makes of a DELIVER-BATCH:
    its messages and their credit, or None for a frame it refuses."""
    try:
        ts, first, offsets = decode_deliver_batch(frame)
    except (BadEntries, struct.error):
        return None
    batch = MessageBatch.from_frame(frame, offsets, first, ts, stream)
    cost = batch.cost                   # from the offsets, as the peering counts it
    return [tuple(m) for m in batch.messages], cost


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=255), st.binary(max_size=300), st.integers(1, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.integers(-6, 3), st.binary(min_size=1, max_size=3))
@example(b"\xff\xfe", b"x", 1, 0, 0, b"\0")            # a key that is not UTF-8: replaced
@example(b"k", b"x", 1, 0, -1, b"\0")                     # the body one byte short
@example(b"k", b"x", 1, 0, 1, b"\0")                      # a byte after the entry
@example(b"k", b"x", 2**64 - 1, 0, 0, b"\0")              # the last u64 sequence
def test_a_batch_of_one_gives_the_message_and_credit_the_batch_path_gives(
        key, body, seq, ts, change, extra):
    """A DELIVER-BATCH of one entry (what a live subscriber gets for each lone publish) is
    decoded at once, as a DELIVER-TS (Delivery._on_lone_entry), instead of as a batch: for
    any such frame, whole, cut short or with bytes after it, the peering buffers exactly the
    message and credit the batch decoder gives, or nothing where it refuses the frame, for any
    u64 sequence."""
    frame = (deliver_batch_head(ts, seq, 1) + bytes((len(key),)) + key
             + len(body).to_bytes(4, "big") + body)
    frame = frame[:len(frame) + change] if change < 0 else frame + (extra * 3)[:change]
    p = batching()
    p.start_delivery()
    sent(p)
    p.receive(frame, 0.0)
    expected = _batch_decoder(frame)
    if expected is None:
        assert not p.buffer and p.buffered == 0 and p.last_received == 0
    else:
        messages, cost = expected
        assert [tuple(m) for m, _ in p.buffer] == messages
        assert p.buffered == cost and p.buffered_messages == 1 and p.last_received == seq
        taken = p.take()
        assert [tuple(m) for m in taken] == messages and p.buffered == 0
        assert p.consumed == cost                 # to grant back (under the top-up)


# ------------------------------------------------------------------ publish_batch's frames

@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "k", "clé", "x" * 200]),
                          st.one_of(st.binary(max_size=120), st.text(max_size=20))),
                max_size=60),
       st.integers(40, 600), st.one_of(st.none(), st.integers(0, 100)))
def test_batch_frames_carry_every_message_in_order_within_max_batch(items, max_batch, max_body):
    frames = list(batch_frames(items, max_batch, max_body))
    cmds = [decode(f) for f, _n in frames]
    assert [n for _f, n in frames] == [1 if isinstance(x, c.Publish) else x.count for x in cmds]
    assert messages_of(cmds) == [(k, b if isinstance(b, bytes) else b.encode()) for k, b in items]
    for (frame, n), cmd in zip(frames, cmds):
        if n > 1:                                # a batch: within both limits
            assert len(frame) <= max_batch
            assert max_body is None or all(len(e) <= max_body for _k, e in messages_of([cmd]))


@pytest.mark.parametrize("bad, error", [(("k", 42), TypeError), ((b"k", b"x"), TypeError),
                                        (("é" * 128, b"x"), ValueError)])
def test_batch_frames_yield_the_messages_before_a_bad_one_then_raise(bad, error):
    good = [("a", b"1"), ("b", b"2")]
    it = batch_frames(good + [bad, ("c", b"3")], 1000, None)
    frame, n = next(it)
    assert n == 2 and messages_of([decode(frame)]) == good
    with pytest.raises(error):
        next(it)


# ------------------------------------------------------------------ reading in bulk

def _received(p, frames):
    p.start_delivery()
    sent(p)
    for f in frames:
        p.receive(f, 0.0)


def test_a_deliver_batch_is_handed_whole_as_a_message_batch_with_its_columns():
    p = batching()
    _received(p, [deliver_batch(5, [("a", b"x"), ("é", b""), ("k", b"yy")], ts=123)])
    assert p.buffered_messages == 3
    [batch] = p.take_batches()
    assert isinstance(batch, MessageBatch)
    assert (len(batch), batch.first, batch.last, list(batch.sequences)) == (3, 5, 7, [5, 6, 7])
    assert batch.keys == ["a", "é", "k"] and batch.bodies == [b"x", b"", b"yy"]
    assert batch.timestamps == [123] * 3 and batch.stream == "s"
    assert list(batch) == [Message(5, "a", b"x", 123, "s"), Message(6, "é", b"", 123, "s"),
                           Message(7, "k", b"yy", 123, "s")]
    assert batch[1].key == "é" and batch[-1] == Message(7, "k", b"yy", 123, "s")
    with pytest.raises(IndexError):
        batch[3]
    assert batch[:2] == list(batch)[:2] and batch.cost == sum(m.cost for m in batch)
    assert p.last_handed == 7 and p.buffered_messages == 0 and p.buffered == 0


def test_a_message_of_a_batch_is_built_alone_when_indexed():
    frame = deliver_batch(10, [("a", b"1"), ("bé", b"22"), ("c", b"")], ts=5)
    b = MessageBatch.from_frame(frame, decode_deliver_batch(frame)[2], 10, 5, "s")
    assert [b[0], b[-1], b[1], b[-3]] == [Message(10, "a", b"1", 5, "s"),
                                          Message(12, "c", b"", 5, "s"),
                                          Message(11, "bé", b"22", 5, "s"),
                                          Message(10, "a", b"1", 5, "s")]
    for i in (3, -4):
        with pytest.raises(IndexError):
            b[i]
    assert b._messages is None                       # nothing else was built
    assert (b.first, b.last, len(b), b.cost) == (10, 12, 3, sum(m.cost for m in b))


def test_delivers_between_batches_are_gathered_into_one_batch_in_order():
    p = batching()
    _received(p, [ts_from_deliver(encode_deliver(1, b"k", b"1"), 10),
                  ts_from_deliver(encode_deliver(3, b"k", b"3"), 11),   # 2 filtered out
                  deliver_batch(4, [("k", b"4"), ("k", b"5")]),
                  ts_from_deliver(encode_deliver(6, b"j", b"6"), 12)])
    batches = p.take_batches()
    assert [list(b.sequences) for b in batches] == [[1, 3], [4, 5], [6]]
    assert [b.keys for b in batches] == [["k", "k"], ["k", "k"], ["j"]]
    assert [b.timestamps for b in batches] == [[10, 11], [77, 77], [12]]


def test_take_cuts_a_batch_at_half_the_window_and_keeps_the_rest_in_order():
    p = batching(window=1000)                        # top-up at 500
    body = b"z" * 190                                # cost 200
    _received(p, [deliver_batch(1, [("k", body)] * 5)])      # 1000: the whole window
    assert [m.sequence for m in p.take()] == [1, 2, 3]       # 600 >= 500 after the third
    assert sent(p)[-1] == c.Credit(600) and p.buffered == 400 and p.buffered_messages == 2
    assert [m.sequence for m in p.take(limit=1)] == [4]
    [rest] = p.take_batches()
    assert (list(rest.sequences), rest.bodies) == ([5], [body])
    assert p.buffered == 0 and p.buffered_messages == 0


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "a", "key.é"]), st.binary(max_size=60)),
                min_size=1, max_size=40),
       st.lists(st.integers(1, 7), min_size=1, max_size=40),
       st.lists(st.booleans(), min_size=1, max_size=20))
@example([("", b"x" * 60)] * 10, [3, 7], [True])
def test_reading_in_batches_gives_and_credits_what_reading_messages_does(items, cuts, bulk):
    """The same DELIVER-BATCH frames read message by message (``take``) and read with
    ``take_batches`` and ``take`` mixed: the same messages in the same order, and every
    message's credit goes back to the broker in both (at most a top-up's worth still owed)."""
    frames = cut_into_batches(items, cuts)
    outs = []
    for mode in ("messages", "mixed"):
        p = batching(window=600)
        p.start_delivery()
        sent(p)
        got, credit, pending, step = [], 0, list(frames), 0
        while pending or p.buffer:
            broker_sends(p, pending)
            assert p.buffer, "no message buffered and no credit for the next one"
            if mode == "mixed" and bulk[step % len(bulk)]:
                for b in p.take_batches():
                    assert list(b.sequences) == [m.sequence for m in b]
                    got += list(zip(b.sequences, b.keys, b.bodies))
            else:
                got += [(m.sequence, m.key, m.body) for m in p.take()]
            step += 1
            credit += sum(x.credit for x in sent(p) if isinstance(x, c.Credit))
        assert credit + p.consumed == sum(message_cost(k, b) for k, b in items)
        assert p.consumed < p.topup and p.buffered == 0 and p.buffered_messages == 0
        outs.append(got)
    assert outs[0] == outs[1] == [(i + 1, k, b) for i, (k, b) in enumerate(items)]


# ------------------------------------------------------------------ natural batching

def test_a_lone_publish_leaves_at_once_as_a_plain_publish():
    p = batching()
    sock = Socket(room=10)
    sock.publish(p, b"hello")
    assert sock.commands() == [c.Publish("k", b"hello")] and not p.waiting


def test_publishes_made_while_the_socket_is_busy_leave_as_one_batch_when_it_is_free():
    p = batching()
    sock = Socket(room=0)
    for i in range(6):
        sock.publish(p, b"%d" % i)
    assert sock.wire == [] and p.waiting and p.unfinished_publishes() == 6
    sock.room = 10
    sock.flush(p)
    cmds = sock.commands()
    assert messages_of(cmds) == [("k", b"%d" % i) for i in range(6)]
    assert len(cmds) == 2 and isinstance(cmds[1], c.PublishBatch)   # sealed as the socket freed
    assert not p.waiting and p.unfinished_publishes() == 0


def test_a_request_goes_behind_the_queued_publishes():
    p = batching()
    sock = Socket(room=0)
    sock.publish(p, b"1")
    sock.publish(p, b"2")
    sock.publish(p, b"3")
    p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    sock.room = 10
    sock.flush(p)
    cmds = sock.commands()
    assert [type(x) for x in cmds][-2:] == [c.Ping, c.StreamInfo]    # barrier after the publishes
    assert messages_of(cmds) == [("k", b"1"), ("k", b"2"), ("k", b"3")]


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 260), st.integers(0, 3)), min_size=1, max_size=60),
       st.integers(PUBLISH_HEAD_SIZE + 6, 400))
def test_batches_never_exceed_max_batch_and_keep_every_message_once_in_order(steps, max_batch):
    """Any publish sizes and any socket pace: every message leaves once, in order; every
    PUBLISH-BATCH fits in max_batch; a message too large for any batch goes as a PUBLISH."""
    p = batching(max_batch=max_batch)
    sock = Socket(room=0)
    bodies = []
    for i, (size, room) in enumerate(steps):
        body = bytes([i % 256]) * size
        frame = encode_publish("k", body)
        if not p.publish(frame, 0.0, None):          # blocked: the front end waits for room
            sock.room = 1000
            sock.flush(p)
            sock.room = 0
        sock.publish(p, body)
        bodies.append(("k", body))
        sock.room += room
        sock.flush(p)
    sock.room = 10_000
    sock.flush(p)
    for f in sock.wire:
        cmd = decode(f)
        if isinstance(cmd, c.PublishBatch):
            assert len(f) <= max_batch and cmd.count >= 2
        else:
            assert isinstance(cmd, c.Publish)
    assert messages_of(sock.commands()) == bodies


def test_a_full_queue_behind_an_unsent_batch_blocks_the_next_publish():
    p = batching(max_batch=60)
    sock = Socket(room=0)
    while not p.outbox:                              # fill until one batch is sealed
        sock.publish(p, b"x" * 10)
    while p.queue.size + len(encode_publish("k", b"x" * 10)) <= 60:
        sock.publish(p, b"x" * 10)
    assert not p.publish(encode_publish("k", b"x" * 10), 0.0, None)   # the shell waits
    sock.room = 1
    sock.flush(p)
    assert p.publish(encode_publish("k", b"x" * 10), 0.0, None)


# ------------------------------------------------------------------ per-message accounting

def test_a_refused_entry_fails_its_own_receipt_and_the_confirm_count_stays_right():
    p = batching(confirms=True)
    sock = Socket(room=0)
    small, big, small2 = sock.publish(p, b"ok"), sock.publish(p, b"z" * 50), sock.publish(p, b"ok")
    sock.room = 10
    sock.flush(p)
    assert any(isinstance(x, c.PublishBatch) for x in sock.commands())
    feed(p, c.Confirm(1, 1))                        # the refusal comes after it (in order)
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 50 bytes is over the broker's limit of 10"))
    assert isinstance(big.exception(), InvalidError) and not small2.done()
    feed(p, c.Confirm(2, 2))
    assert (small.sequence, small2.sequence) == (1, 2)


def test_a_refused_batch_fails_every_receipt_once():
    p = batching(confirms=True)
    sock = Socket(room=0)
    rs = [sock.publish(p, b"%d" % i) for i in range(3)]
    sock.room = 10
    sock.flush(p)
    for _ in rs:                                     # one INVALID per entry
        feed(p, c.Invalid(f"{PUBLISH_REJECTED}stream is read-only"))
    assert all(isinstance(r.exception(), InvalidError) for r in rs) and not p.tracker.unconfirmed


def test_batched_publishes_take_consecutive_producer_sequences_and_are_resent_after_a_reconnect():
    p = batching(confirms=True, idempotent=True)
    sock = Socket(room=0)
    rs = [sock.publish(p, b"%d" % i) for i in range(4)]
    assert [r.pseq for r in rs] == [1, 2, 3, 4]
    sock.room = 10
    sock.flush(p)
    feed(p, c.Confirm(1, 1))
    p.connection_lost("gone")
    p.reconnect(1.0)
    sent(p)
    feed(p, c.AttachOk())
    out = sent(p)
    assert c.Producer(p.producer, 2) in out
    assert not [x for x in out if isinstance(x, c.Publish)], "the re-sends wait for PRODUCER-OK"
    for reply in (OLD_BROKER_LIMITS, c.BatchSelectOk(MAX_BATCH), DESCRIBED, c.ConfirmSelectOk(0),
                  c.StreamInfoOk(1, 1, 0, 0, 0), c.ProducerOk(1)):
        feed(p, reply)
    assert sent(p) == [c.Publish("k", b"%d" % i) for i in (1, 2, 3)]


def test_without_confirms_publishes_queued_or_batched_survive_a_reconnect_as_plain_publishes():
    p = batching()
    sock = Socket(room=0)
    for i in range(5):
        sock.publish(p, b"%d" % i)
    assert p.outbox and p.queue.frames               # a sealed batch and a queue, both unsent
    p.connection_lost("gone")
    p.reconnect(1.0)
    assert p.unfinished_publishes() == 5
    sent(p)
    feed(p, c.AttachOk())
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.Invalid("unknown command 56"))        # the new broker does not batch
    feed(p, c.Invalid("unknown command 54"))
    assert [x for x in sent(p) if isinstance(x, c.Publish)] == [c.Publish("k", b"%d" % i)
                                                                for i in range(5)]


def test_encode_keeps_the_batch_layout():
    """The frames the queue seals decode as the codec's PUBLISH-BATCH (one definition)."""
    p = batching()
    sock = Socket(room=0)
    for body in (b"a", b"b", b"c"):
        sock.publish(p, body, key="é")
    sock.room = 10
    sock.flush(p)
    assert sock.wire[0] == encode(c.PublishBatch(2, encode_entries([("é", b"a"), ("é", b"b")])))
    assert sock.wire[1] == encode_publish("é", b"c")


def test_a_message_over_the_streams_limit_is_never_batched_so_it_is_refused_alone():
    """The broker refuses a whole batch for one body over the limit: such a message goes as
    a plain PUBLISH (the stream's own limit replaces the broker's LIMITS one)."""
    p = peering(confirms=True, batching=True)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.LimitsOk(1000, 1 << 20))
    feed(p, c.BatchSelectOk(1 << 20))
    feed(p, c.StreamDescribeOk(1, 0, 0, 0, 0, 0, 0, 10, 0))   # this stream: 10-byte bodies
    feed(p, c.ConfirmSelectOk(0))
    feed(p, c.StreamInfoOk(1, 0, 0, 0, 0))
    sent(p)
    sock = Socket(room=0)
    rs = [sock.publish(p, body) for body in (b"ok", b"ok", b"z" * 11, b"ok", b"y" * 10)]
    sock.room = 10
    sock.flush(p)
    cmds = sock.commands()
    assert c.Publish("k", b"z" * 11) in cmds                  # alone, in its place
    assert messages_of(cmds) == [("k", b) for b in (b"ok", b"ok", b"z" * 11, b"ok", b"y" * 10)]
    assert any(isinstance(x, c.PublishBatch) for x in cmds)
    feed(p, c.Confirm(2, 2))                        # the refusal comes after it (in order)
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 11 bytes is over the stream's limit of 10"))
    feed(p, c.Confirm(4, 4))
    assert isinstance(rs[2].exception(), InvalidError)
    assert [r.sequence for r in rs[:2] + rs[3:]] == [1, 2, 3, 4]


def test_a_broker_offering_huge_batches_cannot_make_a_publisher_buffer_without_bound():
    """A broker that never reads and offers 2**63-byte batches: the client queues at most
    MAX_BATCH_BYTES behind the unsent frame, then publish blocks (and times out) as before."""
    p = batching(max_batch=2**63)
    assert p.max_batch == MAX_BATCH_BYTES
    sock = Socket(room=0)
    body = b"x" * 65536
    published = 0
    while p.publish(encode_publish("k", body), 0.0, None):
        p.queue_publish(encode_publish("k", body))  # the socket takes nothing
        sock.flush(p)
        published += 1
        assert published < 1000
    queued = sum(len(f) for f in p.outbox) + p.queue.size
    assert queued <= 2 * MAX_BATCH_BYTES + len(body)
