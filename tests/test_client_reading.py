"""Reading message by message (issue 20): ``Message`` is built in one C call (a tuple of its
fields underneath) and ``Peering.take`` hands up to ``TAKE_LIMIT`` (512) messages at once. Both
are checked against what they replace: a Message is the same value a frozen dataclass was
(attributes, equality with Messages only, hashing, immutability, pickling, ``repr``, keyword
construction, ``match``), a DELIVER-BATCH gives the messages DELIVERs would, and taking many at
once hands the same messages in the same order and grants the same credit after the same
messages as taking 64 at a time. Pure: no sockets, no clock."""
from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zeps.clients import Message, MessageBatch
from zeps.clients.batching import decode_deliver_batch
from zeps.clients.delivery import TAKE_LIMIT
from zeps.clients.message import build_message
from zeps.protocol import commands as c
from zeps.protocol.deliver import message_cost
from zeps.protocol.headers import NO_HEADERS, Headers, encode_block
from tests.test_client_batching import batching, broker_sends, cut_into_batches, deliver_batch
from tests.test_client_peering import sent
from .property_examples import examples

keys = st.sampled_from(["", "a", "key.é", "x" * 255])
fields = st.tuples(st.integers(0, 2**64 - 1), keys, st.binary(max_size=40),
                   st.none() | st.integers(0, 2**63), st.none() | st.sampled_from(["s", "ß"]),
                   st.sampled_from([NO_HEADERS, Headers((("a", b"1"), ("a", b"2")))]))


@settings(max_examples=examples(100), deadline=None)
@given(fields)
def test_a_message_is_the_value_its_fields_make(f):
    seq, key, body, ts, stream, headers = f
    m = Message(seq, key, body, ts, stream, headers)
    assert (m.sequence, m.key, m.body, m.timestamp, m.stream, m.headers) == f
    assert m == build_message(*f) == Message(sequence=seq, key=key, body=body, timestamp=ts,
                                            stream=stream, headers=headers)
    assert hash(m) == hash(build_message(*f))
    assert pickle.loads(pickle.dumps(m)) == m and copy.copy(m) == m and copy.deepcopy(m) == m
    assert m.cost == message_cost(key, body) + (len(encode_block(headers)) if headers else 0)
    assert repr(m) == (f"Message(sequence={seq!r}, key={key!r}, body={body!r}, timestamp={ts!r}, "
                       f"stream={stream!r}, headers={headers!r})")
    assert m != Message(seq, key, body + b"!", ts, stream, headers)
    match m:
        case Message(s, k, b):
            assert (s, k, b) == (seq, key, body)
    assert m.text == body.decode("utf-8", "replace")


def test_a_message_equals_only_a_message_and_cannot_be_changed():
    m = Message(1, "k", b"v")
    assert m.timestamp is None and m.stream is None and m.headers == NO_HEADERS
    assert m != (1, "k", b"v", None, None, NO_HEADERS)
    assert (1, "k", b"v", None, None, NO_HEADERS) != m
    assert not m == (1, "k", b"v", None, None, NO_HEADERS)
    assert m != "Message" and m != 1
    with pytest.raises(AttributeError):
        m.key = "other"
    with pytest.raises(AttributeError):
        m.extra = 1
    assert {m: 1}[Message(1, "k", b"v")] == 1


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(keys, st.binary(max_size=60)), min_size=1, max_size=60),
       st.integers(1, 2**40), st.integers(0, 2**63))
def test_a_deliver_batch_gives_the_messages_built_one_by_one(items, first, ts):
    frame = deliver_batch(first, items, ts)
    t, f, offsets = decode_deliver_batch(frame)
    batch = MessageBatch.from_frame(frame, offsets, f, t, "s")
    expected = [build_message(first + i, k, b, ts, "s") for i, (k, b) in enumerate(items)]
    assert batch.messages == expected
    assert [batch[i] for i in range(len(items))] == expected      # built alone, the same
    assert all(type(m) is Message for m in batch.messages)


def _read(frames, limit):
    """Read ``frames`` to the end taking at most ``limit`` messages at a time, sent as a broker
    sends them (a frame that does not fit in the credit left goes as the run of messages that
    does, the rest once credit comes back): the messages and, for each CREDIT sent, (messages
    handed before it, amount)."""
    p = batching(window=600)
    p.start_delivery()
    sent(p)
    got, grants, pending = [], [], list(frames)
    while pending or p.buffer:
        broker_sends(p, pending)
        taken = p.take(limit)
        assert taken, "nothing to take: no message buffered and no credit for the next one"
        got += [(m.sequence, m.key, m.body) for m in taken]
        grants += [(len(got), x.credit) for x in sent(p) if isinstance(x, c.Credit)]
    return got, grants, p.consumed


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "a", "key.é"]), st.binary(max_size=20)),
                min_size=1, max_size=300),
       st.lists(st.integers(1, 200), min_size=1, max_size=10))
@example([("", b"")] * 100, [100])      # a batch over the window: sent in runs, as a broker does
def test_taking_many_at_once_hands_and_credits_what_taking_64_does(items, cuts):
    assert TAKE_LIMIT > 64
    frames = cut_into_batches(items, cuts)
    assert _read(frames, TAKE_LIMIT) == _read(frames, 64)
    got, grants, owed = _read(frames, TAKE_LIMIT)
    assert got == [(i + 1, k, b) for i, (k, b) in enumerate(items)]
    assert sum(amount for _n, amount in grants) + owed == sum(message_cost(k, b)
                                                              for k, b in items)


# ------------------------------------------------------------------ publish_batch's backlog

def test_publish_batch_leaves_a_bounded_backlog_of_frames_for_the_socket():
    """``publish_batch`` builds its next frame while earlier ones wait for the socket (which
    takes only a few frames ahead of ZeroMQ's I/O thread), up to ``BACKLOG_FRAMES`` frames and
    ``MAX_BATCH_BYTES``; a single ``publish`` still waits for an empty outbox."""
    from zeps.clients.batching import MAX_BATCH_BYTES
    from zeps.clients.publishing import BACKLOG_FRAMES
    p = batching()
    assert p.may_publish(0.0) and p.may_publish(0.0, True)
    p.publish_frame(b"\xaa\xa5\x06\x01k\x00\x00\x00\x01m", 1, 0.0)        # waits for the socket
    assert not p.may_publish(0.0) and p.may_publish(0.0, True)
    while len(p.outbox) < BACKLOG_FRAMES - 1:
        p.publish_frame(b"\xaa\xa5\x06\x01k\x00\x00\x00\x01m", 1, 0.0)
    assert p.may_publish(0.0, True)
    p.publish_frame(b"\xaa\xa5\x06\x01k\x00\x00\x00\x01m", 1, 0.0)
    assert len(p.outbox) == BACKLOG_FRAMES and not p.may_publish(0.0, True)
    big = batching()
    big.outbox.append(b"\xaa\xa5\x06\x01k" + (MAX_BATCH_BYTES).to_bytes(4, "big") + b"x" * MAX_BATCH_BYTES)
    assert not big.may_publish(0.0, True)                   # bytes bound the backlog too
    big.error = RuntimeError("refused")
    big.outbox.clear()
    assert not big.may_publish(0.0, True)                   # an error to raise first still stops it
