"""The per-client protocol state machine, as pure code: no broker, no sockets."""
import pytest

from zeps.broker.session import ATTACHED, NEW, ProtocolViolation, Session
from zeps.matching import compile_pattern
from zeps.protocol import commands as c


def test_grammar_walk():
    s = Session(b"id", now=0.0)
    s.accept(c.Ping(), 1.0)
    s.accept(c.ListStreams(), 1.0)
    assert s.state == NEW
    for cmd in (c.Subscribe("", 0), c.Credit(1), c.Publish("k", b""), c.Detach(), c.StreamInfo(),
                c.SeqAtTime(0), c.ConfirmSelect(), c.DeliverTimestamps()):
        with pytest.raises(ProtocolViolation, match=f"not attached: {cmd.NAME} before ATTACH"):
            s.accept(cmd, 2.0)
    s.accept(c.Attach("orders"), 3.0)
    assert (s.state, s.last_seen) == (NEW, 3.0), "accept() checks; the stream makes the move"
    s.attached("orders")
    assert (s.state, s.stream) == (ATTACHED, "orders")
    with pytest.raises(ProtocolViolation, match="ATTACH while attached"):
        s.accept(c.Attach("other"), 4.0)
    s.confirms = True
    s.accept(c.Detach(), 5.0)
    assert (s.state, s.stream, s.confirms) == (ATTACHED, "orders", True)
    s.detached()
    assert (s.state, s.stream, s.confirms, s.subscriptions, s.credit) == (NEW, None, False, [], 0)


@pytest.mark.parametrize("cmd", [c.AttachOk(), c.SubscribeOk(), c.Deliver(1, "k", b""), c.PingOk(),
                                 c.DetachOk(), c.Invalid("x"), c.Confirm(1, 1), c.SeqAtTimeOk(1),
                                 c.StreamInfoOk(1, 1, 1, 1, 1), c.ListStreamsOk(()),
                                 c.ConfirmSelectOk(0), c.DeliverTimestampsOk(),
                                 c.DeliverTs(1, 1, "k", b"")])
def test_server_commands_from_a_client_are_refused(cmd):
    s = Session(b"id", 0.0)
    with pytest.raises(ProtocolViolation, match="sent by the broker"):
        s.accept(cmd, 0.0)


def test_subscriptions_share_one_position():
    s = Session(b"id", 0.0)
    s.attached("x")
    s.add_subscription(compile_pattern("a"), 5)
    assert s.next_seq == 5
    s.add_subscription(compile_pattern("b"), 9)
    assert s.next_seq == 5 and s.future_start == 9
    assert s.accepts("a1", 5) and not s.accepts("b1", 5) and s.accepts("b1", 9)
    s.add_subscription(compile_pattern("b"), 7)        # same pattern again: the earlier start
    assert s.accepts("b1", 7) and len(s.subscriptions) == 2


def test_detached_forgets_the_peering_but_not_the_connection():
    s = Session(b"id", 0.0)
    s.attached("x")
    s.add_subscription(compile_pattern("a"), 3)
    s.credit, s.live, s.confirms, s.timestamps, s.published = 100, True, True, True, 2
    s.unconfirmed.append((2, 7))
    s.congested_until, s.backoff = 5.0, 0.02
    s.held.append(b"held reply")
    s.detached()
    assert (s.state, s.stream, s.subscriptions, s.next_seq, s.credit, s.live, s.future_start,
            s.confirms, s.timestamps, s.published, list(s.unconfirmed)) == \
        (NEW, None, [], 0, 0, False, 0, False, False, 0, [])
    assert (s.congested_until, s.backoff, list(s.held)) == (5.0, 0.02, [b"held reply"]), \
        "the connection's congestion belongs to the connection, not the peering"
    s.attached("y")
    assert (s.state, s.stream, s.subscribed, s.credit) == (ATTACHED, "y", False, 0)


def test_a_refused_command_is_still_a_sign_of_life():
    s = Session(b"id", 0.0)
    with pytest.raises(ProtocolViolation):
        s.accept(c.Credit(1), 7.0)
    assert s.last_seen == 7.0


@pytest.mark.parametrize("name", ["", "a\x00b"])
def test_attach_to_a_name_outside_the_grammar_is_refused(name):
    s = Session(b"id", 0.0)
    with pytest.raises(ProtocolViolation, match="stream name must be 1 to 255 bytes"):
        s.accept(c.Attach(name), 1.0)
    assert s.state == NEW
