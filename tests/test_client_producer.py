"""Exactly-once publishing in the client's pure peering (zeps/clients/producer.py): producer
ids, producer sequences across reconnects, re-sends after PRODUCER, duplicates the broker
confirms without storing. No sockets, no clock."""
from __future__ import annotations

import pytest

from tests.test_client_peering import OLD_BROKER_LIMITS, feed, peering, publish, sent
from zeps.clients.peering import Peering
from zeps.clients.producer import runs
from zeps.protocol import commands as c
from zeps.protocol.reasons import PUBLISH_REJECTED


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
    # 3, 4 and 5 again, after PRODUCER saying they are 3, 4, 5
    assert out[-4:] == [c.Producer(p.producer, 3), c.Publish("k", b"m3"), c.Publish("k", b"m4"),
                        c.Publish("k", b"m5")]
    feed(p, c.StreamInfoOk(0, 13, 0, 0, 0))                 # anchor: 3 was stored (13)
    feed(p, c.ProducerOk(3))                                # ... and the broker knows it
    feed(p, c.Confirm(3, 15))                               # 3 a duplicate; 4, 5 stored
    assert all(r.done() for r in rs)
    assert rs[2].sequence is None                          # stored before, under 13
    assert rs[4].sequence == 15
    r6 = publish(p, b"m6")
    assert r6.pseq == 6                                     # counting goes on across reconnects
    feed(p, c.Confirm(4, 16))
    assert r6.sequence == 16


def test_a_rejected_publish_leaves_a_hole_each_run_gets_its_own_producer():
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.ProducerOk(0))
    publish(p, b"a")
    big = publish(p, b"b" * 100)
    publish(p, b"c")
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 100 bytes is over the broker's limit of 99"))
    assert big.exception() is not None and big.pseq == 2
    assert [(first, len(rs)) for first, rs in runs(p.pending)] == [(1, 1), (3, 1)]
    out = reattach(p)
    assert out[-5:] == [c.Producer(p.producer, 1), c.Publish("k", b"a"), c.Ping(),
                        c.Producer(p.producer, 3), c.Publish("k", b"c")]


def test_a_new_client_taking_over_the_producer_id_has_its_duplicates_confirmed_not_stored():
    """A retried Spark task: same producer id, same messages in the same order."""
    p = producer("task-7")
    feed(p, c.StreamInfoOk(0, 40, 0, 0, 0))
    feed(p, c.ProducerOk(2))                                # the failed attempt stored 1 and 2
    rs = [publish(p, b"row%d" % i) for i in (1, 2, 3)]
    feed(p, c.Confirm(3, 41))                               # all counted; only row3 stored
    assert [r.sequence for r in rs] == [None, None, 41]
    assert all(r.exception() is None for r in rs)


def test_a_broker_that_refuses_producer_leaves_at_least_once_without_an_error():
    p = producer()
    feed(p, c.StreamInfoOk(0, 0, 0, 0, 0))
    feed(p, c.Invalid("PRODUCER is sent by the broker, not by a client"))
    assert p.producer is None and p.error is None
    publish(p)
    out = reattach(p)
    assert not any(isinstance(x, c.Producer) for x in out)
    assert out[-1] == c.Publish("k", b"m")                 # still re-sent: at-least-once


def test_without_confirms_nothing_is_numbered_and_no_producer_is_sent():
    p = Peering("s", credit_window=100, confirms=False, timestamps=False, timeout=1,
                heartbeat=1, now=0.0, batching=False, reasons=False, incarnations=False)
    sent(p)
    feed(p, c.AttachOk())
    assert sent(p) == [c.Limits()]
