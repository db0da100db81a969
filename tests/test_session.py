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
