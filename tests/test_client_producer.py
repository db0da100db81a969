"""Exactly-once publishing in the client's pure peering (zeps/clients/producer.py): producer
ids, producer sequences across reconnects, re-sends after PRODUCER-OK (numbered again past what
the broker holds), duplicates the broker confirms without storing, a producer fenced by a newer
one, and a broker that forgot the producer. No sockets, no clock."""
from __future__ import annotations

import logging

import pytest

from tests.test_client_peering import OLD_BROKER_LIMITS, feed, peering, publish, sent
from zeps.clients.errors import InvalidError, ProducerFenced, ProducerStateLost
from zeps.clients.peering import Peering
from zeps.clients.producer import runs
from zeps.clients.receipt import Receipt
from zeps.protocol import commands as c
from zeps.protocol import encode_publish
from zeps.protocol.reasons import PUBLISH_REJECTED, Reason


def producer(producer_id=None):
    """Attached with confirms and exactly-once on: returns the peering and its producer id."""
    p = peering(confirms=True, idempotent=True, producer_id=producer_id)
    sent(p)
    feed(p, c.AttachOk())
    out = sent(p)
    assert out[:3] == [c.Limits(), c.ConfirmSelect(), c.StreamInfo()]
    assert out[-1] == c.Producer(p.producer, 1)              # numbering starts at 1
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.ConfirmSelectOk(0))
    return p


def reattach(p, now=1.0):
    p.connection_lost("connection closed by the broker")
    p.reconnect(now)
    sent(p)
    feed(p, c.AttachOk())
    out = sent(p)
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.ConfirmSelectOk(0))
    return out


def test_a_random_producer_id_per_client_unless_given():
    a, b = producer(), producer()
    assert a.producer != b.producer and a.producer
    assert producer("spark:q1:0:3").producer == "spark:q1:0:3"
    assert peering(confirms=True, idempotent=False).producer is None
    assert peering(confirms=False, idempotent=True).producer is None     # needs confirms


@pytest.mark.parametrize("bad", ["", "x" * 256])
def test_a_producer_id_no_broker_takes_is_a_value_error(bad):
    with pytest.raises(ValueError):
        peering(confirms=True, producer_id=bad)


def test_a_producer_id_without_confirms_is_a_value_error():
    with pytest.raises(ValueError, match="confirms"):
        peering(confirms=False, producer_id="p")


def test_after_a_reconnect_it_resends_from_the_first_unconfirmed_producer_sequence():
    p = producer()
    feed(p, c.StreamInfoOk(0, 10, 0, 0, 0))                 # anchor: the stream's last is 10
    feed(p, c.ProducerOk(0))
    rs = [publish(p, b"m%d" % i) for i in range(1, 6)]
    assert [r.pseq for r in rs] == [1, 2, 3, 4, 5]
    feed(p, c.Confirm(2, 12))
    assert [r.sequence for r in rs[:2]] == [11, 12]
    out = reattach(p)
    # PRODUCER from 3, alone: the re-sends wait for its answer
    assert out[-1] == c.Producer(p.producer, 3) and not p.ready
    feed(p, c.StreamInfoOk(0, 13, 0, 0, 0))                 # anchor: 3 was stored (13)
    feed(p, c.ProducerOk(3))                                # ... and the broker knows it
    assert p.ready
    assert sent(p) == [c.Publish("k", b"m3"), c.Publish("k", b"m4"), c.Publish("k", b"m5")]
    feed(p, c.Confirm(3, 15))                               # 3 a duplicate; 4, 5 stored
    assert all(r.done() for r in rs)
    assert rs[2].sequence is None and rs[2].duplicate      # stored before, under 13
    assert rs[4].sequence == 15 and not rs[4].duplicate
    r6 = publish(p, b"m6")
    assert r6.pseq == 6                                     # counting goes on across reconnects
    feed(p, c.Confirm(4, 16))
    assert r6.sequence == 16


def holed():
    """A producer that published a (confirmed), b (refused: producer sequence 2 is a hole) and
    c, and reconnected before c's answer: PRODUCER from 3, the re-send waiting for its answer.
    (The refusal comes after a's CONFIRM: zeps/broker/confirms.py.)"""
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    a = publish(p, b"a")
    big = publish(p, b"b" * 100)
    cc = publish(p, b"c")
    feed(p, c.Confirm(1, 1))
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 100 bytes is over the broker's limit of 99"))
    assert big.exception() is not None and big.pseq == 2 and a.sequence == 1
    p.heard(big.exception())
    assert [(first, len(rs)) for first, rs in runs(p.tracker.unconfirmed)] == [(3, 1)]
    out = reattach(p)
    assert out[-1] == c.Producer(p.producer, 3)
    feed(p, c.StreamInfoOk(0, 1, 0, 0, 0))
    return p, cc


def test_what_a_broker_holds_above_a_hole_is_resent_as_numbered():
    """c was stored above the hole (a broker before the rule that refuses it: the broker holds
    up to 3): it is re-sent as numbered, a duplicate, after no other PRODUCER."""
    p, cc = holed()
    feed(p, c.ProducerOk(3))
    assert sent(p) == [c.Publish("k", b"c")]
    assert (cc.pseq, p.tracker.next_pseq) == (3, 4)


def test_what_the_broker_does_not_hold_is_numbered_again_after_its_last():
    """Issue 15, finding 5: a peering may not start past the producer's last + 1. What the
    broker does not hold (c, after the hole of the refused b) is numbered again from last + 1,
    after a PRODUCER from there, so the re-send follows on without a hole and is stored."""
    p, cc = holed()
    feed(p, c.ProducerOk(1))
    assert sent(p) == [c.Producer(p.producer, 2), c.Publish("k", b"c")]
    assert (cc.pseq, p.tracker.next_pseq) == (2, 3)
    r = publish(p, b"d")
    assert r.pseq == 3


def test_publishes_wait_for_the_producer_ok_after_an_attach():
    """Until PRODUCER-OK says what the broker holds, a publish cannot be numbered: it waits
    (the shells wait for ``ready`` / ``producer_sync``)."""
    p = producer()
    frame = encode_publish("k", b"x")
    assert not p.ready and not p.may_publish(0.0)
    assert not p.publish(frame, 0.0, Receipt(frame, None))
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    assert p.ready and p.publish(frame, 0.0, Receipt(frame, None))


def test_a_new_client_taking_over_the_producer_id_has_its_duplicates_confirmed_not_stored():
    """A retried Spark task: same producer id, same messages in the same order."""
    p = producer("task-7")
    feed(p, c.StreamInfoOk(0, 40, 0, 0, 0))
    feed(p, c.ProducerOk(2))                                # the failed attempt stored 1 and 2
    rs = [publish(p, b"row%d" % i) for i in (1, 2, 3)]
    feed(p, c.Confirm(3, 41))                               # all counted; only row3 stored
    assert [r.sequence for r in rs] == [None, None, 41]
    assert [r.duplicate for r in rs] == [True, True, False], "told, not given another's sequence"
    assert all(r.exception() is None for r in rs)


def test_a_broker_that_refuses_producer_leaves_at_least_once_without_an_error():
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.Invalid("PRODUCER is sent by the broker, not by a client"))
    assert p.producer is None and p.error is None and p.ready
    publish(p)
    out = reattach(p)
    assert not any(isinstance(x, c.Producer) for x in out)
    assert out[-1] == c.Publish("k", b"m")                 # still re-sent: at-least-once


def test_without_confirms_nothing_is_numbered_and_no_producer_is_sent():
    p = Peering("s", credit_window=100, confirms=False, timestamps=False, timeout=1,
                heartbeat=1, now=0.0, batching=False, reasons=False, incarnations=False,
                headers=False)
    sent(p)
    feed(p, c.AttachOk())
    assert sent(p) == [c.Limits()]


# ---------------------------------------------------------------------------- issue 15: 5, 6

def test_a_broker_that_forgot_the_producer_is_noticed_and_nothing_is_sent_twice(caplog):
    """Finding 6: 10,000 other producer ids evicted a producer's state; its retry got
    PRODUCER-OK last=0 and everything was stored twice, silently. The client knows what the
    broker confirmed (producer sequence 3): a ``last`` below it means the broker forgot. The
    unconfirmed publishes are not re-sent: their receipts fail with ProducerStateLost (also
    raised once by the next call), a warning says so, and numbering starts again after
    ``last``."""
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    rs = [publish(p, b"m%d" % i) for i in range(1, 6)]
    feed(p, c.Confirm(3, 3))
    assert [r.sequence for r in rs[:3]] == [1, 2, 3]
    assert reattach(p)[-1] == c.Producer(p.producer, 4)
    feed(p, c.StreamInfoOk(0, 3, 0, 0, 0))
    with caplog.at_level(logging.WARNING, logger="zeps.client"):
        feed(p, c.ProducerOk(0))
    assert "forgot producer" in caplog.text
    assert sent(p) == [c.Producer(p.producer, 1)], "nothing re-sent; numbering from 1"
    for r in rs[3:]:
        assert isinstance(r.exception(), ProducerStateLost)
        assert (r.exception().last, r.exception().confirmed) == (0, 3)
    p.error = None if isinstance(p.error, ProducerStateLost) else p.error  # heard (owner None)
    feed(p, c.ProducerOk(0))
    r = publish(p, b"new")
    assert r.pseq == 1 and p.ready


def test_the_next_call_raises_producer_state_lost_when_no_receipt_was_looked_at():
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    publish(p, b"a")
    feed(p, c.Confirm(1, 1))
    publish(p, b"b")
    reattach(p)
    feed(p, c.StreamInfoOk(0, 1, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    with pytest.raises(ProducerStateLost):
        p.check()
    p.check()                                              # once


def test_fenced_by_a_newer_producer_every_unconfirmed_publish_fails_and_the_client_stops():
    """Finding 5: a takeover of the producer id made the old client's publishes "duplicates",
    confirmed and never stored. The broker now refuses them as fenced: the client fails every
    unconfirmed receipt with ProducerFenced (none of them resolves as stored) and every later
    call raises it (as Kafka's ProducerFencedException is final)."""
    p = producer("shared")
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    rs = [publish(p, b"m%d" % i) for i in range(3)]
    why = Reason.publish_rejected(Reason.producer_fenced("shared"))
    for _ in rs:
        feed(p, c.Invalid(why.text))
    assert all(isinstance(r.exception(), ProducerFenced) for r in rs)
    assert not p.tracker.unconfirmed
    with pytest.raises(ProducerFenced, match="fenced"):
        p.check()
    # an ERROR (REASONS-SELECT) says the same with its code and fields
    q = producer("shared")
    feed(q, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(q, c.ProducerOk(0))
    r = publish(q)
    feed(q, c.Error(int(why.code), why.fields, why.text))
    assert isinstance(r.exception(), ProducerFenced) and isinstance(q.fatal, ProducerFenced)


def test_a_producer_id_bound_to_another_key_is_final():
    """With CurveZMQ, PRODUCER of an id another key's records made is refused ("bound"): the
    client does not fall back to at-least-once under someone else's id; it stops."""
    p = producer("theirs")
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.Invalid(Reason.producer_bound("theirs", "key X").text))
    assert isinstance(p.fatal, ProducerFenced) and p.producer_sync is None


def test_publishes_refused_after_a_hole_are_resent_after_a_producer_not_failed():
    """b is refused (a full disk), so the broker refuses c and d as out of order (nothing is
    stored above a hole until a PRODUCER: zeps/broker/dedup.py). They are not failed: the first
    such refusal sends PRODUCER from c's number, new publishes wait for its answer, and then c
    and d are re-sent, numbered from the broker's last + 1, and confirmed."""
    p = producer()
    feed(p, c.StreamInfoOk(0, 10, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    a, b, cc, d = (publish(p, body) for body in (b"a", b"b", b"c", b"d"))
    sent(p)
    feed(p, c.Confirm(1, 11))
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}journal append failed: No space left on device"))
    assert isinstance(b.exception(), InvalidError) and a.sequence == 11
    p.heard(b.exception())
    hole = c.Invalid(Reason.publish_rejected(Reason.producer_out_of_order(p.producer, 1, 3)).text)
    feed(p, hole)
    assert sent(p) == [c.Ping(), c.Producer(p.producer, 3)] and not p.ready
    feed(p, hole)                                            # d's: nothing more is sent
    assert sent(p) == [] and not cc.done() and not d.done()
    feed(p, c.PingOk())
    feed(p, c.ProducerOk(1))
    assert sent(p) == [c.Producer(p.producer, 2), c.Publish("k", b"c"), c.Publish("k", b"d")]
    assert (cc.pseq, d.pseq, p.ready) == (2, 3, True)
    feed(p, c.Confirm(3, 13))
    assert (cc.sequence, d.sequence) == (12, 13)
    assert publish(p, b"e").pseq == 4


def test_a_refusal_after_a_hole_fails_its_own_publish_not_one_held_back():
    """b and d are too large: c, after the hole of b, is refused as out of order and held back
    for its re-send; d's refusal (its size: checked first) is d's, not c's (the oldest
    unconfirmed: c failed, and d was stored after the re-sync; zeps publish reported line 3);
    e is held back too, and c and e are re-sent after the PRODUCER."""
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    a, b, cc, d, e = (publish(p, body) for body in (b"a", b"b" * 200, b"c", b"d" * 101, b"e"))
    sent(p)
    feed(p, c.Confirm(1, 1))
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 200 bytes is over the broker's limit of 100"))
    p.heard(b.exception())
    hole = c.Invalid(Reason.publish_rejected(Reason.producer_out_of_order(p.producer, 1, 3)).text)
    feed(p, hole)                                            # c's
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 101 bytes is over the broker's limit of 100"))
    assert isinstance(d.exception(), InvalidError) and not cc.done()
    p.heard(d.exception())
    feed(p, hole)                                            # e's
    assert sent(p) == [c.Ping(), c.Producer(p.producer, 3)]
    feed(p, c.PingOk())
    feed(p, c.ProducerOk(1))
    assert sent(p) == [c.Producer(p.producer, 2), c.Publish("k", b"c"), c.Publish("k", b"e")]
    feed(p, c.Confirm(3, 3))
    assert (a.sequence, cc.sequence, e.sequence) == (1, 2, 3)
