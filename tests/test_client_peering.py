"""The client's pure peering core (zeps/clients/peering.py): frames and events in, frames and
outcomes out. No sockets, no clock: every test passes the time explicitly."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.clients import (ClientClosed, ClientForked, ConnectionLost, InvalidError, Message,
                          Receipt)
from zeps.clients.peering import CONNECTING, FAILED, RECONNECT_SPACING, Peering
from zeps.clients.requests import RequestKind
from zeps.protocol import commands as c
from zeps.protocol.codec import decode, encode, encode_publish
from zeps.protocol.deliver import encode_deliver, message_cost, ts_from_deliver
from zeps.protocol.reasons import NOT_ATTACHED, PUBLISH_REJECTED
from .property_examples import examples

WINDOW = 1000


#: What a broker without LIMITS answers to it: the window stays as asked.
OLD_BROKER_LIMITS = c.Invalid("unknown command 44")


def peering(confirms=False, timestamps=False, window=WINDOW, heartbeat=5.0, timeout=2.0, now=0.0,
            idempotent=False, producer_id=None, batching=False, reasons=False,
            incarnations=False, headers=False):
    """A peering; exactly-once publishing, batching, REASONS-SELECT, STREAM-ID and headers off unless
    asked (tests/test_client_producer.py, tests/test_client_batching.py, tests/test_reasons.py,
    tests/test_stream_incarnation.py)."""
    return Peering("s", credit_window=window, confirms=confirms, timestamps=timestamps,
                   timeout=timeout, heartbeat=heartbeat, now=now, idempotent=idempotent,
                   producer_id=producer_id, batching=batching, reasons=reasons,
                   incarnations=incarnations, headers=headers)


def sent(p):
    """The commands the peering wants sent (decoded), emptying its outbox."""
    out = [decode(f) for f in p.outbox]
    p.outbox.clear()
    return out


def credit_sent(p):
    """The credit granted in the frames the peering wants sent (emptying its outbox)."""
    return sum(x.credit for x in sent(p) if isinstance(x, c.Credit))


def feed(p, cmd, now=0.0):
    p.receive(encode(cmd), now)


def deliver(p, seq, key="k", body=b"x", ts=None, now=0.0):
    frame = encode_deliver(seq, key.encode(), body)
    p.receive(frame if ts is None else ts_from_deliver(frame, ts), now)


def attached(**kw):
    p = peering(**kw)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, OLD_BROKER_LIMITS)                       # the window stays (test_client_window.py)
    if p.confirms:
        feed(p, c.ConfirmSelectOk(0))
    sent(p)                                    # the session setup went out
    return p


def publish(p, body=b"m", now=0.0):
    frame = encode_publish("k", body)
    r = Receipt(frame, None)
    assert p.publish(frame, now, r)
    return r


# ------------------------------------------------------------------ attach

def test_attach_then_session_setup():
    p = peering(confirms=True, timestamps=True)
    assert p.state is CONNECTING and sent(p) == [c.Attach("s")]
    feed(p, c.AttachOk())
    assert p.attached and not p.ready                  # confirms not selected yet
    assert sent(p) == [c.Limits(), c.ConfirmSelect(), c.StreamInfo(), c.DeliverTimestamps()]
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.ConfirmSelectOk(0))
    assert p.ready


def test_refused_attach_is_the_attach_error():
    p = peering()
    feed(p, c.Invalid("cannot open stream 's': disk on fire"))
    assert isinstance(p.attach_error, InvalidError) and p.attach_error.command == "ATTACH"
    assert not p.attached


# ------------------------------------------------------------------ requests and INVALID

def test_replies_answer_requests_in_order_and_invalid_answers_the_head():
    p = attached()
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    seq_at = p.request(c.SeqAtTime(5), "seq_at", 0.0)
    assert sent(p) == [c.StreamInfo(), c.SeqAtTime(5)]
    feed(p, c.StreamInfoOk(1, 9, 100, 1, 2))
    assert info.done and info.result.last == 9 and not seq_at.done
    feed(p, c.Invalid("SEQ-AT-TIME failed in the broker: no"))
    assert seq_at.done and isinstance(seq_at.error, InvalidError)
    assert seq_at.error.command == "SEQ-AT-TIME" and p.error is None


def test_a_request_after_publishes_goes_behind_a_ping_barrier():
    p = attached()
    publish(p)
    r = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    assert sent(p) == [c.Ping(), c.StreamInfo()]             # the publish went out by the shell
    feed(p, c.Invalid("credit overflow"))                    # before PING-OK: not the request's
    assert not r.done
    assert isinstance(p.error, InvalidError) and p.error.command is None
    feed(p, c.PingOk())
    feed(p, c.StreamInfoOk(1, 1, 1, 1, 1))
    assert r.done and r.error is None
    with pytest.raises(InvalidError):
        p.check()                                            # raised once, by the next call
    p.check()


def test_publish_rejected_never_answers_a_request():
    p = attached()
    r = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 9 bytes is over the broker's limit of 8"))
    assert not r.done and p.error.command == "PUBLISH"


def test_unexpected_reply_kind_is_protocol_confusion_and_reconnects():
    p = attached()
    p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    feed(p, c.SeqAtTimeOk(3))
    assert "protocol confusion" in p.need_reconnect


def test_broker_ping_is_answered():
    p = attached()
    feed(p, c.Ping())
    assert sent(p) == [c.PingOk()]


def test_publish_gate():
    p = attached(heartbeat=5.0)
    frame = encode_publish("k", b"x")
    assert p.publish(frame, 1.0, None)
    assert not p.publish(frame, 6.5, None)        # silent for a heartbeat: check the peering first
    p.error = InvalidError("x")
    assert not p.publish(frame, 1.0, None)
    p.error = None
    p.queue_publish(frame)                        # the socket's high-water mark: queue behind it
    assert not p.publish(frame, 1.0, None)
    assert p.publish(frame, 1.0, None, checked=False) and p.pubs_since_request == 2


# ------------------------------------------------------------------ subscribing and credit

def test_subscribe_records_the_pattern_on_subscribe_ok_and_credit_follows():
    p = attached()
    r = p.subscribe("eu.", 4, False, 0.0)
    assert sent(p) == [c.Subscribe("eu.", 4)] and p.patterns == {}
    feed(p, c.SubscribeOk())
    assert r.done and p.patterns == {"eu.": 4}
    p.start_delivery()
    p.start_delivery()                                         # once
    assert sent(p) == [c.Credit(WINDOW)]


def test_live_subscribe_resumes_from_the_stream_last_at_that_time():
    p = attached()
    p.subscribe("", 0, True, 0.0)
    assert sent(p) == [c.StreamInfo(), c.Subscribe("", c.LATEST_LIVE)]
    feed(p, c.StreamInfoOk(1, 41, 0, 0, 0))
    feed(p, c.SubscribeOk())
    assert p.patterns == {"": 41}


def test_deliveries_are_decoded_buffered_and_credit_is_topped_up_as_they_are_taken():
    p = attached()
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    sent(p)
    body = b"y" * 91                               # cost 8 + 1 + 1 + 91 = 101
    for seq in range(1, 6):
        deliver(p, seq, body=body, ts=1000 + seq)
    assert [m.sequence for m, _ in p.buffer] == [1, 2, 3, 4, 5]
    first = p.take(limit=3)
    assert first == [Message(s, "k", body, 1000 + s, "s") for s in (1, 2, 3)]
    assert sent(p) == [] and p.last_handed == 3            # 303 < half the window
    assert [m.sequence for m in p.take()] == [4, 5]
    assert sent(p) == [c.Credit(5 * message_cost("k", body))]   # 505 >= 500: exactly what was used
    assert p.consumed == 0


def test_take_stops_at_half_the_window():
    p = attached()
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    for seq in range(1, 6):
        deliver(p, seq, body=b"z" * 190)           # cost 200: 1000, the whole window
    assert [m.sequence for m in p.take()] == [1, 2, 3]   # 600 >= 500 after the third
    assert sent(p)[-1] == c.Credit(600)
    assert [m.sequence for m in p.take()] == [4, 5]


def test_duplicates_and_old_sequences_are_dropped_counted_and_earn_no_credit():
    p = attached()
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    deliver(p, 7)
    deliver(p, 7)
    deliver(p, 3)
    assert [m.sequence for m, _ in p.buffer] == [7]
    assert p.consumed == 0 and p.duplicates == 2   # never granted back (zeps.clients.bounds)
    assert p.wasted == 2 * message_cost("k", b"x")


def test_a_broker_that_sends_beyond_the_credit_given_is_dropped():
    p = attached(window=300)
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    deliver(p, 1, body=b"a" * 190)                 # 200 of 300
    assert p.need_reconnect is None
    deliver(p, 2, body=b"a" * 190)                 # 400 > 300: the broker lies about credit
    assert "more than the 300 bytes of credit" in p.need_reconnect
    assert len(p.buffer) == 1                      # the excess was not kept


def test_a_truncated_deliver_is_ignored():
    p = attached()
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    p.receive(encode_deliver(1, b"k", b"hello")[:-2], 0.0)
    assert not p.buffer and p.need_reconnect is None


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 150)), min_size=1, max_size=60),
       st.lists(st.integers(1, 5), min_size=1, max_size=10))
def test_every_message_handed_once_in_order_and_credit_never_runs_dry(messages, takes):
    """A broker that sends exactly what its credit allows (sequence gaps as a pattern filter
    makes them, bodies up to 150 bytes) and an application taking 1..5 messages at a time: the
    application gets every message once, in order; the peering never accuses the broker of
    overrunning the window; and the credit granted back always lets the next message come."""
    p = attached(window=400)
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    granted = credit_sent(p)
    used, seq, expected, handed = 0, 0, [], []
    todo = list(messages)
    take_sizes = itertools.cycle(takes)
    for _ in range(10_000):
        if not todo and not p.buffer:
            break
        while todo and used + message_cost("k", b"b" * todo[0][1]) <= granted:
            gap, size = todo.pop(0)
            seq += gap
            used += message_cost("k", b"b" * size)
            deliver(p, seq, body=b"b" * size)
            expected.append(seq)
        handed += [m.sequence for m in p.take(next(take_sizes))]
        granted += credit_sent(p)
        assert p.need_reconnect is None
    else:
        pytest.fail("stuck: the broker lacks the credit for the next message")
    assert handed == expected


# ------------------------------------------------------------------ confirms and receipts

def test_receipts_resolve_to_exact_sequences_when_the_stream_moved_by_our_publishes_only():
    p = attached(confirms=True)
    sent(p)
    feed(p, c.StreamInfoOk(1, 10, 0, 0, 0))        # the anchor: the stream's last is 10
    rs = [publish(p) for _ in range(3)]
    feed(p, c.Confirm(3, 13))                      # 13 - 10 == 3: nobody else published
    assert [r.sequence for r in rs] == [11, 12, 13] and all(r.done() for r in rs)
    more = [publish(p) for _ in range(2)]
    feed(p, c.Confirm(5, 20))                      # 20 - 13 != 2: others published in between
    assert [r.sequence for r in more] == [None, 20]   # the last one is named by the CONFIRM
    assert p.tracker.last_confirmed == 20 and not p.tracker.unconfirmed


def test_a_rejected_publish_fails_its_receipt_and_the_count_stays_right():
    p = attached(confirms=True)
    sent(p)
    feed(p, c.StreamInfoOk(1, 0, 0, 0, 0))
    small, big, small2 = publish(p, b"ok"), publish(p, b"z" * 50), publish(p, b"ok")
    # The broker sends a refusal after the CONFIRMs of the publishes before it
    # (zeps/broker/confirms.py): the refused publish is the oldest unconfirmed one.
    feed(p, c.Confirm(1, 1))
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}body of 50 bytes is over the broker's limit of 10"))
    assert isinstance(big.exception(), InvalidError) and not small2.done()
    feed(p, c.Confirm(2, 2))                        # the broker counted the two others
    assert (small.sequence, small2.sequence) == (1, 2)
    with pytest.raises(InvalidError):
        p.check()                                   # told once, by the next call...


def test_a_refusal_fails_the_oldest_unconfirmed_publish_whatever_its_size():
    """Same sizes, a refusal that names none (a full disk): the oldest is the refused one, not
    a guess (by the largest frame, the first of equal ones: a stored publish failed and the
    refused one was confirmed in its place when the refusal came before the CONFIRMs)."""
    p = attached(confirms=True)
    sent(p)
    feed(p, c.StreamInfoOk(1, 0, 0, 0, 0))
    rs = [publish(p, b"%d" % i) for i in range(4)]
    feed(p, c.Confirm(1, 1))
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}journal append failed: [Errno 28] No space left"))
    feed(p, c.Confirm(3, 3))
    assert [r.sequence for r in (rs[0], rs[2], rs[3])] == [1, 2, 3]
    assert isinstance(rs[1].exception(), InvalidError)


def test_a_rejection_heard_through_its_receipt_is_not_raised_again():
    p = attached(confirms=True)
    big = publish(p, b"z" * 50)
    feed(p, c.Invalid(f"{PUBLISH_REJECTED}too big"))
    p.heard(big.exception())                        # ...or by the receipt, if looked at first
    p.check()


def test_close_fails_unconfirmed_receipts():
    p = attached(confirms=True)
    r = publish(p)
    p.close()
    assert isinstance(r.exception(), ClientClosed)
    assert not isinstance(r.exception(), ClientForked)


def test_a_forked_copy_fails_unconfirmed_receipts_with_client_forked():
    p = attached(confirms=True)
    r = publish(p)
    p.forked(4242)
    assert isinstance(r.exception(), ClientForked) and "process 4242" in str(r.exception())
    assert isinstance(p.closed_as(), ClientForked)


# ------------------------------------------------------------------ heartbeats and timers

def test_heartbeat_probe_after_silence_and_lost_when_unanswered():
    p = attached(heartbeat=5.0, timeout=2.0)
    assert p.next_timer(1.0) == 5.0
    p.tick(4.9)
    assert sent(p) == []
    p.tick(5.0)
    assert sent(p) == [c.StreamInfo()]
    assert p.next_timer(6.0) == 10.0               # probe sent at 5.0 + probe timeout 5.0
    p.tick(10.0)
    assert p.need_reconnect is None
    p.tick(10.1)
    assert "no answer to a heartbeat" in p.need_reconnect


def test_answered_heartbeat_keeps_the_peering():
    p = attached(heartbeat=5.0)
    p.tick(5.0)
    sent(p)
    p.sent(5.0)
    feed(p, c.StreamInfoOk(1, 0, 0, 0, 0), now=5.2)
    p.tick(20.0)
    assert p.need_reconnect is None and sent(p) == [c.StreamInfo()]   # the next heartbeat


def test_publish_after_silence_waits_for_a_probe():
    p = attached(heartbeat=5.0)
    assert p.silent(6.0)
    probe = p.heartbeat_probe(6.0)
    assert p.heartbeat_probe(6.0) is probe          # the one in flight
    assert sent(p) == [c.StreamInfo()]


# ------------------------------------------------------------------ losing and re-establishing

def subscribed(confirms=False):
    p = attached(confirms=confirms)
    p.subscribe("eu.", 0, False, 0.0)
    if confirms:
        feed(p, c.StreamInfoOk(1, 0, 0, 0, 0))
    feed(p, c.SubscribeOk())
    p.start_delivery()
    sent(p)
    return p


@pytest.mark.parametrize("forgotten", [c.Detach(), c.Invalid(f"{NOT_ATTACHED}PUBLISH before ATTACH")],
                         ids=["S:DETACH", "INVALID not attached"])
def test_a_broker_that_forgets_us_gets_a_reattach_and_resume(forgotten):
    p = subscribed(confirms=True)
    for seq in (1, 2, 3):
        deliver(p, seq, key="eu.fr")
    assert [m.sequence for m in p.take(limit=2)] == [1, 2]       # 3 received, not handed
    r = publish(p)
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    sent(p)
    feed(p, forgotten, now=1.0)
    assert p.need_reconnect and p.reconnect_due(1.0)
    p.reconnect(1.0)
    assert info.cancelled and info.done                         # the shell asks again
    assert p.state is CONNECTING and not p.buffer and p.reconnects == 1
    assert sent(p) == [c.Attach("s")]
    feed(p, c.AttachOk(), now=1.1)
    assert sent(p) == [c.Limits(), c.ConfirmSelect(), c.StreamInfo(),
                       c.Subscribe("eu.", 2),                   # from the last message handed
                       c.Credit(WINDOW),                        # a fresh window
                       c.Publish("k", b"m")]                    # the unconfirmed publish again
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.ConfirmSelectOk(0))
    feed(p, c.StreamInfoOk(1, 3, 0, 0, 0))
    feed(p, c.SubscribeOk())
    deliver(p, 3, key="eu.fr")
    assert [m.sequence for m in p.take()] == [3]                 # no gap, no duplicate
    feed(p, c.Confirm(1, 4))
    assert r.sequence == 4
    assert not p.reconnect_due(1.05)                            # reconnects are spaced
    p.connection_lost("again")
    assert not p.reconnect_due(1.0 + RECONNECT_SPACING / 2) and p.reconnect_due(1.0 + RECONNECT_SPACING)


def test_without_confirms_publishes_the_socket_never_took_survive_a_reconnect():
    p = attached()
    frame = encode_publish("k", b"held")
    assert p.publish(frame, 0.0, None)
    p.queue_publish(frame)                          # the high-water mark kept it
    p.request(c.StreamInfo(), RequestKind.INFO, 0.0)          # queued behind it, lost with the socket
    p.connection_lost("connection closed by the broker")
    p.reconnect(0.0)
    assert p.unfinished_publishes() == 1
    sent(p)
    feed(p, c.AttachOk())
    assert sent(p) == [c.Limits(), c.Publish("k", b"held")]


def test_detach_while_closing_does_not_reconnect():
    p = attached()
    d = p.detach(0.0)
    feed(p, c.Detach())
    assert p.state is FAILED and p.need_reconnect is None and not d.done


def test_refused_reattach_is_fatal_and_fails_unconfirmed_receipts():
    p = attached(confirms=True)
    r = publish(p)
    p.connection_lost("gone")
    p.reconnect(1.0)
    feed(p, c.Invalid("cannot open stream 's': gone"))
    assert p.state is FAILED and isinstance(p.fatal, ConnectionLost)
    assert r.exception() is p.fatal
    with pytest.raises(ConnectionLost):
        p.check()


def test_no_attach_ok_after_a_reconnect_is_lost_again():
    p = attached(heartbeat=1.0, timeout=1.0)
    p.connection_lost("gone")
    p.reconnect(10.0)
    p.tick(11.9)
    assert p.need_reconnect is None
    p.tick(12.1)                                    # 2 x probe timeout without ATTACH-OK
    assert p.need_reconnect == "no ATTACH-OK"
