"""Batches in the broker core (PUBLISH-BATCH, batch records, DELIVER-BATCH), driven in-process
(tests/core_harness.py): each message still costs the credit ZEPS/1 defines and moves a
subscriber one sequence at a time, with no gap and no duplicate, whichever form it travels in.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core_harness import Core, core_fixture, cost, make_fixture, messages_of  # noqa: F401
from zeps.broker.stream import split_batch
from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.batch import encode_publish_batch
from zeps.protocol.reasons import PUBLISH_REJECTED
from .property_examples import examples

PUB, SUB, OLD = b"pub", b"sub", b"old"


def batch(*keys: str, body: bytes = b"x") -> c.PublishBatch:
    return decode(encode_publish_batch([(k, body) for k in keys]))


def batching_subscriber(h: Core, ident: bytes, pattern: str = "", latest: int = c.LATEST_LIVE,
                        credit: int = 1 << 30) -> None:
    h.send(ident, c.BatchSelect())
    assert h.take(ident) == [c.BatchSelectOk(h.core.config.max_batch)]
    h.subscriber(ident, pattern, latest, credit)


def publish_batch(h: Core, *keys: str, ident: bytes = PUB, body: bytes = b"x") -> None:
    if ident not in h.core.sessions:
        h.send(ident, c.Attach("s"))
        assert h.take(ident) == [c.AttachOk()]
    h.core.receive(ident, [encode(batch(*keys, body=body))], h.now)
    h.round()


def test_a_batch_goes_whole_to_a_batching_subscriber_and_as_delivers_to_a_zeps1_one(core):
    batching_subscriber(core, SUB)
    core.subscriber(OLD)
    publish_batch(core, "a", "b", "c")
    got = core.take(SUB)
    assert [type(m) for m in got] == [c.DeliverBatch]
    assert messages_of(got[0]) == [(1, "a"), (2, "b"), (3, "c")]
    stored = core.core.streams["s"].journal.read_chunks(1)
    assert len(stored) == 1 and encode(got[0]) == stored[0].frame     # the bytes written
    assert core.take(OLD) == [c.Deliver(1, "a", b"x"), c.Deliver(2, "b", b"x"),
                              c.Deliver(3, "c", b"x")]


def test_credit_is_counted_per_message_and_the_rest_is_replayed_from_the_journal(core):
    batching_subscriber(core, SUB, credit=3 * cost("k1"))
    publish_batch(core, "k1", "k2", "k3", "k4", "k5")
    assert core.delivered(SUB) == [(1, "k1"), (2, "k2"), (3, "k3")]
    s = core.core.sessions[SUB]
    assert (s.live, s.next_seq, s.credit) == (False, 4, 0)
    core.send(SUB, c.Credit(1 << 20))
    core.drain()
    got = core.take(SUB)
    assert [type(m) for m in got] == [c.DeliverBatch]
    assert messages_of(got[0]) == [(4, "k4"), (5, "k5")]
    publish_batch(core, "k6")                      # live again
    assert core.delivered(SUB) == [(6, "k6")]


def test_a_rounds_one_message_reaches_batching_subscribers_as_one_shared_batch(core):
    batching_subscriber(core, SUB)
    batching_subscriber(core, b"sub2")
    batching_subscriber(core, b"poor", credit=cost("k1") - 1)     # not enough for one message
    core.publish("k1", body=b"abc")
    sent = {}
    core.core.receive(PUB, [encode(c.Publish("k2", b"de"))], core.now)
    core.core.round(core.now, lambda: sent.update(core.core.take_outbox()), False)
    core.core.sent()
    assert sent[SUB] is sent[b"sub2"]                 # built once for both
    assert messages_of(decode(sent[SUB])) == [(2, "k2")]
    assert core.delivered(SUB) == [(1, "k1")]
    told = core.take(b"poor")                         # no message; told why, once
    assert b"poor" not in sent and [type(m) for m in told] == [c.Invalid]
    assert "credit window too small" in told[0].reason
    s = core.core.sessions[b"poor"]
    assert (s.live, s.next_seq) == (False, 1)         # historical at the message it lacked
    core.send(b"poor", c.Credit(1 << 20))
    core.drain()
    assert core.delivered(b"poor") == [(1, "k1"), (2, "k2")]


def test_a_filtered_subscriber_gets_one_batch_per_run_of_messages_it_wants(core):
    batching_subscriber(core, SUB, pattern="a")
    publish_batch(core, "a1", "b1", "a2", "a3", "b2", "a4")
    got = core.take(SUB)
    assert [messages_of(m) for m in got] == [[(1, "a1")], [(3, "a2"), (4, "a3")], [(6, "a4")]]
    batching_subscriber(core, b"late", pattern="a", latest=0)
    core.drain()
    assert core.delivered(b"late") == [(1, "a1"), (3, "a2"), (4, "a3"), (6, "a4")]


def test_plain_publishes_of_one_round_reach_a_batching_subscriber_as_one_batch(core):
    batching_subscriber(core, SUB)
    core.publish("p1", "p2", "p3")
    got = core.take(SUB)
    assert [type(m) for m in got] == [c.DeliverBatch]
    assert messages_of(got[0]) == [(1, "p1"), (2, "p2"), (3, "p3")]


def test_a_late_joiner_replays_mixed_records_with_no_gap_and_no_duplicate(make):
    h = make(replay_batch_records=3, replay_batch_bytes=200)
    expected = []
    for r in range(6):
        keys = [f"r{r}k{i}" for i in range(r + 1)]
        if r % 2:
            publish_batch(h, *keys)
        else:
            h.publish(*keys)
        expected += keys
    batching_subscriber(h, SUB, latest=0, credit=7 * cost("r0k0"))
    core_seen = []
    for _ in range(50):
        h.drain()
        core_seen += h.delivered(SUB)
        h.send(SUB, c.Credit(5 * cost("r0k0")))
    h.drain()
    core_seen += h.delivered(SUB)
    assert core_seen == list(enumerate(expected, 1))
    h.subscriber(OLD, latest=5)                    # a ZEPS/1 view of the same journal
    h.drain()
    assert h.delivered(OLD) == list(enumerate(expected, 1))[5:]


def test_each_entry_counts_as_one_publish_for_confirms(core):
    core.send(PUB, c.Attach("s"), c.ConfirmSelect())
    assert core.take(PUB) == [c.AttachOk(), c.ConfirmSelectOk(0)]
    core.core.receive(PUB, [encode(batch("a", "b", "c"))], core.now)
    core.core.receive(PUB, [encode(c.Publish("d", b"x"))], core.now)
    core.round()
    assert core.take(PUB) == [c.Confirm(4, 4)]


def test_a_refused_batch_gets_one_invalid_per_entry_and_stores_nothing(make):
    """A batch refused for what it carries gets one INVALID per entry (each counts as a PUBLISH);
    one over ``max_batch`` is refused by its size before it is parsed, with one INVALID."""
    h = make(max_message=10, max_batch=200)
    publish_batch(h, "a", "b", "c", body=b"x" * 11)          # one body over max_message: all
    publish_batch(h, *[f"k{i}" for i in range(30)])            # over max_batch: once
    refusals = [m for m in h.take(PUB) if isinstance(m, c.Invalid)]
    assert len(refusals) == 4
    assert all(m.reason.startswith(PUBLISH_REJECTED) for m in refusals)
    assert "limit of 10" in refusals[0].reason and "200" in refusals[-1].reason
    assert h.core.streams["s"].journal.next_seq == 1
    publish_batch(h, "ok")
    assert h.core.streams["s"].journal.next_seq == 2


def test_a_malformed_batch_gets_one_invalid_and_the_broker_serves_the_others(core):
    core.subscriber(SUB)
    core.send(PUB, c.Attach("s"))
    core.take(PUB)
    frame = encode(batch("a", "b"))
    for bad in (frame + b"\x00", frame[:-1], frame[:3] + b"\x00\x00\x00\x05" + frame[7:]):
        core.send_frames(PUB, [bad])
        reply = core.take(PUB)
        assert len(reply) == 1 and isinstance(reply[0], c.Invalid), reply
        assert "PUBLISH-BATCH" in reply[0].reason
    publish_batch(core, "fine")
    assert core.delivered(SUB) == [(1, "fine")]


def test_a_producer_batch_takes_one_producer_sequence_per_entry_and_a_retry_is_not_stored(core):
    core.send(PUB, c.Attach("s"), c.Producer("p1", 1))
    assert core.take(PUB) == [c.AttachOk(), c.ProducerOk(0)]
    publish_batch(core, "a", "b", "c")
    assert core.core.streams["s"].journal.producers()["p1"][0] == 3
    core.send(b"pub2", c.Attach("s"), c.Producer("p1", 2))     # a retry from pseq 2
    core.take(b"pub2")
    publish_batch(core, "b", "c", "d", ident=b"pub2")
    journal = core.core.streams["s"].journal
    assert [r.key for r in journal.read_batch(1)] == ["a", "b", "c", "d"]


def test_a_full_pipe_hands_a_batch_back_and_the_journal_replays_it_without_gap(core):
    batching_subscriber(core, SUB)
    publish_batch(core, "a", "b")
    assert core.delivered(SUB) == [(1, "a"), (2, "b")]
    core.pipe[SUB] = 0                                         # it stops reading
    publish_batch(core, "c", "d", "e")
    assert [messages_of(m) for _i, m in core.unsent] == [[(3, "c"), (4, "d"), (5, "e")]]
    s = core.core.sessions[SUB]
    assert (s.live, s.next_seq, s.credit) == (False, 3, (1 << 30) - 2 * cost("a"))
    del core.pipe[SUB]
    core.now += 10                                             # the backoff is over
    core.tick()
    core.drain()
    assert core.delivered(SUB) == [(3, "c"), (4, "d"), (5, "e")]


def test_batch_select_before_attach_lasts_for_the_connection(core):
    core.send(SUB, c.BatchSelect())
    assert core.take(SUB) == [c.BatchSelectOk(core.core.config.max_batch)]
    core.subscriber(SUB)
    publish_batch(core, "a", "b")
    assert [type(m) for m in core.take(SUB)] == [c.DeliverBatch]



def test_a_batch_larger_than_the_streams_record_limit_is_stored_as_several_records(make):
    """A stream of small messages has a small journal record limit, while the broker takes
    PUBLISH-BATCHes up to max_batch from anyone: the batch is stored as consecutive records
    that fit, each entry once, counted per entry for confirms and producer sequences."""
    h = make(max_message=10, max_record_bytes=100)
    keys = [f"k{i:02d}" for i in range(40)]                  # entries of 9 bytes: ~8 a record
    h.send(PUB, c.Attach("s"), c.ConfirmSelect(), c.Producer("p1", 1))
    assert h.take(PUB) == [c.AttachOk(), c.ConfirmSelectOk(0), c.ProducerOk(0)]
    batching_subscriber(h, SUB)
    h.core.receive(PUB, [encode(batch(*keys, body=b"x"))], h.now)
    h.round()
    assert h.take(PUB) == [c.Confirm(40, 40)]
    journal = h.core.streams["s"].journal
    chunks = journal.read_chunks(1)
    assert len(chunks) > 1 and all(len(ch.frame) <= 100 for ch in chunks)
    assert [r.key for r in journal.read_batch(1)] == keys
    assert journal.producers()["p1"][0] == 40
    assert [k for _seq, k in h.delivered(SUB)] == keys


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=40)), min_size=1, max_size=30),
       st.integers(1, 200))
def test_split_batch_cuts_at_entries_into_parts_that_fit(items, limit):
    whole = decode(encode_publish_batch(items))
    parts = split_batch(whole, limit)
    assert b"".join(p.entries for p in parts) == whole.entries
    assert sum(p.count for p in parts) == whole.count
    for p in parts:
        assert len(p.entries) <= limit or p.count == 1
        assert p.offsets[0] == 0 and p.offsets[-1] == len(p.entries) and len(p.offsets) == p.count + 1
        assert decode(encode(c.PublishBatch(p.count, p.entries))).count == p.count


def test_a_batch_refused_by_its_head_comes_after_the_confirms_before_it(make):
    """A PUBLISH-BATCH refused by its head (over max_batch: one INVALID, nothing parsed) from a
    confirming peering comes in order with its CONFIRMs, as every refused publish does: after
    the CONFIRM of the publish before it (it went out at once, and the SDK failed that stored
    publish, its oldest unconfirmed one; found by review)."""
    h = make(fsync="interval", max_batch=64)
    h.send(b"p", c.Attach("s"), c.ConfirmSelect(), c.Publish("k", b"one"))
    h.take(b"p")
    h.send_frames(b"p", [encode_publish_batch([("k", b"x" * 40), ("j", b"y" * 40)])])
    assert h.take(b"p") == [], "it waits for the CONFIRM of the publish before it"
    h.round()
    h.round()                                          # synced: confirmed
    confirm, refused = h.take(b"p")
    assert confirm == c.Confirm(1, 1) and refused.reason.startswith(PUBLISH_REJECTED), refused
