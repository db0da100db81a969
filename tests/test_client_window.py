"""The client peering's credit window and the broker's advice (pure: no sockets, no clock).

LIMITS after ATTACH sizes the window to the largest message the broker accepts; an old broker's
INVALID to LIMITS changes nothing; WINDOW_TOO_SMALL and PATTERN_REMOVED are INVALIDs the broker
sends on its own, which answer no request; lost / reconnected events for the shell."""
from __future__ import annotations

import pytest

from tests.test_client_peering import credit_sent, deliver, feed, peering, sent
from zeps.clients import InvalidError
from zeps.clients.bounds import DELIVERY_HEAD, FRAME_FLOOR, FRAME_SLACK, frame_bound
from zeps.clients.errors import PatternRemoved
from zeps.clients.peering import LOST, RECONNECTED
from zeps.clients.requests import RequestKind
from zeps.clients.window import advised_cost, largest_cost, topup_for, window_for
from zeps.protocol import commands as c
from zeps.protocol.consumer import DEAD_LETTER_HEADERS
from zeps.protocol.deliver import deliver_cost, message_cost
from zeps.protocol.reasons import PATTERN_REMOVED, WINDOW_TOO_SMALL

MB = 1 << 20




def test_limits_ok_grows_the_window_within_the_socket_s_bound_and_grants_the_difference():
    p = peering(window=4 * MB)
    sent(p)
    feed(p, c.AttachOk())
    p.subscribe("", 0, False, 0.0)
    p.start_delivery()
    assert credit_sent(p) == 4 * MB
    feed(p, c.LimitsOk(2 * MB, 64 * MB))
    largest = deliver_cost(255, 2 * MB) + DEAD_LETTER_HEADERS     # a dead letter's headers
    assert p.credit_window == 2 * largest            # room for it, and for the top-up slack
    assert p.credit_window + DELIVERY_HEAD <= p.read_limit == frame_bound(4 * MB)
    assert credit_sent(p) == 2 * largest - 4 * MB    # the broker now holds the whole window
    feed(p, c.SubscribeOk())                         # the subscribe still gets its answer
    deliver(p, 1, body=b"s")
    deliver(p, 2, body=b"x" * (2 * MB))               # the largest body fits
    assert p.need_reconnect is None and [m.sequence for m in p.take()] == [1, 2]


def test_a_window_grown_past_the_socket_s_bound_is_granted_on_a_new_connection():
    """The socket reads frames up to the first window's bound (ZMQ_MAXMSGSIZE, fixed when it
    connects): the grown window is granted on a new one, whose bound fits it."""
    p = peering(window=1000)
    sent(p)
    feed(p, c.AttachOk())
    p.subscribe("", 0, False, 0.0)
    feed(p, c.LimitsOk(16 * MB, 64 * MB))
    feed(p, c.SubscribeOk())
    p.start_delivery()
    largest = deliver_cost(255, 16 * MB) + DEAD_LETTER_HEADERS
    assert p.credit_window == 2 * largest and p.read_limit == FRAME_FLOOR
    assert credit_sent(p) == 0 and "credit window grew" in p.need_reconnect
    p.reconnect(1.0)
    assert p.read_limit == 2 * largest + FRAME_SLACK
    sent(p)
    feed(p, c.AttachOk(), 1.0)
    assert credit_sent(p) == 2 * largest             # the whole window, on the new socket
    feed(p, c.LimitsOk(16 * MB, 64 * MB))            # the same: nothing grows
    feed(p, c.SubscribeOk())                         # the re-subscribe
    deliver(p, 1, body=b"s")
    deliver(p, 2, body=b"x" * (16 * MB))              # the largest body fits
    assert p.need_reconnect is None and [m.sequence for m in p.take()] == [1, 2]


def test_the_credit_held_back_never_keeps_the_largest_message_out():
    """Whatever the application consumed and the client has not granted back yet, once the
    buffer is empty the broker holds enough credit for the largest message."""
    for window, largest in ((1000, 999), (1000, 400), (1000, 1000), (10, 1), (3, 2)):
        topup = topup_for(window, largest)
        assert 1 <= topup and window - (topup - 1) >= largest
    assert window_for(1000, 1000, None) == 2000
    assert window_for(1000, 1000, 1500) == 1500
    assert window_for(1000, 2000, 1500) is None
    assert window_for(5000, 1000, 1500) == 5000      # never shrinks: the broker caps it


def test_a_dead_letter_at_the_limit_always_finds_the_credit_it_costs():
    """A dead-letter stream's messages carry up to 429 bytes of headers the broker added to a
    message that was at the limit: whatever the application took and the peering has not
    granted back yet, the broker holds the credit for such a message. (The window counted
    only the largest message the broker accepts: after 1,000 bytes taken, the broker held
    1,528 of the 1,693 a dead letter at the limit costs, and both sides waited for good.)"""
    dead_letter = deliver_cost(255, 1000) + 429       # the most the headers add (consumer.py)
    for taken in (1, 500, 1000, 1264, 1500, 1775, 2500, 4000):
        p = peering(window=1000)
        sent(p)
        feed(p, c.AttachOk())
        p.subscribe("", 0, False, 0.0)
        p.start_delivery()
        feed(p, c.LimitsOk(1000, 1 << 20))
        feed(p, c.SubscribeOk())
        granted, spent, seq = credit_sent(p), 0, 0
        while spent < taken:                        # messages of up to 200 bytes of credit
            seq += 1
            body = b"x" * (min(200, taken - spent + 9) - 10)
            deliver(p, seq, body=body)
            spent += message_cost("k", body)
            assert [m.sequence for m in p.take()] == [seq]
            granted += credit_sent(p)
            assert granted - spent >= dead_letter, (taken, spent)


def test_the_window_never_goes_above_max_credit_nor_shrinks():
    assert window_for(8 * MB, largest_cost(16 * MB), 10 * MB) is None   # LIMITS path caps it
    assert window_for(8 * MB, 10 * MB, 10 * MB) == 10 * MB
    assert window_for(8 * MB, largest_cost(MB), 64 * MB) == 8 * MB      # already larger: kept
    p = peering(window=MB)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.LimitsOk(16 * MB, 10 * MB))              # a broker whose limits do not agree
    assert p.credit_window == 10 * MB and p.error is None
    p = peering(window=100 * MB)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.LimitsOk(MB, 64 * MB))
    assert p.credit_window == 100 * MB and p.max_credit == 64 * MB


def test_an_old_broker_that_does_not_know_limits_keeps_todays_behaviour():
    p = peering(window=1000)
    sent(p)
    feed(p, c.AttachOk())
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    feed(p, c.Invalid("unknown command 44"))         # answers LIMITS, quietly
    assert p.error is None and p.credit_window == 1000 and not info.done
    feed(p, c.StreamInfoOk(1, 2, 3, 4, 5))
    assert info.done and info.result.last == 2


def test_window_too_small_grows_the_window_to_fit_and_answers_no_request():
    p = peering(window=1000)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.Invalid("unknown command 44"))
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    sent(p)
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    sent(p)
    cost = message_cost("k", b"y" * 5000)
    feed(p, c.Invalid(f"{WINDOW_TOO_SMALL}message 7 needs {cost} bytes of credit, more than "
                      f"this client ever held at once (1000)"))
    assert not info.done and p.error is None
    assert p.credit_window == 2 * cost and credit_sent(p) == 2 * cost - 1000
    deliver(p, 7, body=b"y" * 5000)
    assert p.need_reconnect is None and [m.sequence for m in p.take()] == [7]
    feed(p, c.StreamInfoOk(1, 7, 0, 0, 0))
    assert info.done and info.error is None


def test_window_too_small_beyond_max_credit_is_an_error_for_the_application():
    p = peering(window=1000)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.LimitsOk(500, 3000))
    reason = f"{WINDOW_TOO_SMALL}message 3 needs 5000 bytes of credit, more than ... (1000)"
    assert p.credit_window == 2 * largest_cost(500)
    feed(p, c.Invalid(reason))
    assert p.credit_window == 2 * largest_cost(500)      # unchanged: 5000 > --max-credit
    with pytest.raises(InvalidError, match="needs 5000 bytes"):
        p.check()


def test_advice_names_the_cost_or_more_than_the_window():
    assert advised_cost(f"{WINDOW_TOO_SMALL}message 1 needs 2000 bytes of credit", 10) == 2000
    assert advised_cost(f"{WINDOW_TOO_SMALL}no figures", 1000) == 1001


def test_pattern_removed_drops_the_pattern_and_tells_the_application_once():
    p = peering()
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.Invalid("unknown command 44"))
    for pattern in ("eu.", "~(a+)+$"):
        p.subscribe(pattern, 0, False, 0.0)
        feed(p, c.SubscribeOk())
    p.start_delivery()
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    sent(p)
    feed(p, c.Invalid(f"{PATTERN_REMOVED}regular expression {'(a+)+$'!r} timed out 3 times"))
    assert not info.done                               # it answers no request
    with pytest.raises(PatternRemoved) as e:
        p.check()
    assert e.value.pattern == "~(a+)+$" and "timed out" in e.value.reason
    p.check()                                          # once
    assert list(p.patterns) == ["eu."]
    deliver(p, 1, key="eu.fr")                          # the other pattern goes on
    assert [m.key for m in p.take()] == ["eu.fr"]
    p.connection_lost("test")
    p.reconnect(1.0)
    sent(p)
    feed(p, c.AttachOk())
    assert [x for x in sent(p) if isinstance(x, c.Subscribe)] == [c.Subscribe("eu.", 1)]


def test_a_pattern_removed_reason_naming_no_known_pattern_is_still_reported():
    p = peering()
    sent(p)
    feed(p, c.AttachOk())
    feed(p, c.Invalid(f"{PATTERN_REMOVED}regular expression 'trunc"))
    with pytest.raises(PatternRemoved) as e:
        p.check()
    assert e.value.pattern is None


def test_connection_events_say_lost_once_per_loss_and_reconnected():
    p = peering(heartbeat=1.0, timeout=1.0)
    sent(p)
    feed(p, c.AttachOk())
    assert not p.events
    p.connection_lost("connection closed by the broker")
    p.reconnect(1.0)
    p.tick(10.0)                                        # no ATTACH-OK: tries again
    assert p.need_reconnect == "no ATTACH-OK"
    p.reconnect(10.1)
    feed(p, c.AttachOk())
    assert [(e.kind, e.reason) for e in p.events] == [
        (LOST, "connection closed by the broker"), (RECONNECTED, "nothing to re-send")]
    assert p.events[-1].reconnects == 2
