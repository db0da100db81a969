"""The SDK's consumer member without I/O (zeps.clients.consumer, issue 19): the pipelined
set-up, CONSUME-OK then the credit window, messages with ack/nak/in_progress, acknowledgements
batched into ACK ranges (one frame per flush, at most 1,024 ranges each), credit granted back
as messages are taken, malformed frames as a clear error, refusals, losses and rejoins; and the
settings' checks (consumer_add)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from zeps.clients.consumer import (ACK_DELAY, CLOSED, JOINED, JOINING, ConsumerMessage,
                                   ConsumerPeering, consumer_add)
from zeps.clients.errors import InvalidError, NoStream, ZepsError, ZepsTimeout
from zeps.protocol import commands as c
from zeps.protocol.batch import deliver_batch_head, encode_entries
from zeps.protocol.codec import decode, encode
from zeps.protocol.consumer import MAX_ACK_RANGES, unpack_ranges
from zeps.protocol.deliver import deliver_cost

SETUP = ["REASONS-SELECT", "STREAM-EXPECT", "ATTACH", "LIMITS", "BATCH-SELECT",
         "HEADERS-SELECT", "DELIVER-TIMESTAMPS", "CONSUME"]
OKS = [c.ReasonsSelectOk(), c.StreamExpectOk(), c.AttachOk(), c.LimitsOk(100, 1 << 20),
       c.BatchSelectOk(1 << 20), c.HeadersSelectOk(255, 65536), c.DeliverTimestampsOk()]


def sent(m: ConsumerPeering):
    out = [decode(f) for f in m.outgoing]
    m.sent(0.0)
    return out


def joined(window=10_000, **kw) -> ConsumerPeering:
    m = ConsumerPeering("s", "work", window=window, **kw)
    assert [cmd.NAME for cmd in sent(m)] == SETUP
    for ok in OKS:
        m.receive(encode(ok), 0.0)
    assert m.state is JOINING and m.outgoing == []
    m.receive(encode(c.ConsumeOk(4, 5, 0)), 0.0)
    assert m.state is JOINED and (m.floor, m.next) == (4, 5)
    assert [x.NAME for x in sent(m)] == ["CREDIT"]
    return m


def deliver(m, seq, key="k", body=b"x", ts=9):
    m.receive(encode(c.DeliverTs(ts, seq, key, body)), 0.0)


def acks(cmds):
    return [unpack_ranges(x.ranges) for x in cmds if isinstance(x, c.Ack)]


def test_setup_is_pipelined_and_credit_follows_consume_ok():
    m = ConsumerPeering("s", "work", window=10_000)
    cmds = sent(m)
    assert [x.NAME for x in cmds] == SETUP
    assert cmds[2] == c.Attach("s") and cmds[-1] == c.Consume("work")
    assert cmds[1] == c.StreamExpect(0)               # a member never creates the stream
    for ok in OKS:
        m.receive(encode(ok), 0.0)
    assert sent(m) == []                              # no credit before CONSUME-OK
    m.receive(encode(c.ConsumeOk(0, 1, 0)), 0.0)
    cmds = sent(m)
    assert len(cmds) == 1 and isinstance(cmds[0], c.Credit) and cmds[0].credit >= 10_000


def test_an_older_broker_refusing_the_options_still_joins():
    m = ConsumerPeering("s", "work", window=10_000, batching=False)
    assert "BATCH-SELECT" not in [x.NAME for x in sent(m)]
    m.receive(encode(c.Invalid("unknown command")), 0.0)          # REASONS-SELECT
    m.receive(encode(c.StreamExpectOk()), 0.0)
    m.receive(encode(c.AttachOk()), 0.0)
    for _ in range(3):                                             # LIMITS, HEADERS, TS
        m.receive(encode(c.Invalid("unknown command")), 0.0)
    m.receive(encode(c.ConsumeOk(0, 1, 0)), 0.0)
    assert m.state is JOINED and m.error is None
    assert [x.credit for x in sent(m)] == [10_000]


@pytest.mark.parametrize("at,text,cls", [
    (2, "no stream: 's'", NoStream),
    (7, "no consumer 'work' on stream 's'", InvalidError),
])
def test_refused_attach_or_consume_is_the_error(at, text, cls):
    m = ConsumerPeering("s", "work")
    sent(m)
    for ok in OKS[:at]:
        m.receive(encode(ok), 0.0)
    m.receive(encode(c.Invalid(text)), 0.0)
    assert isinstance(m.error, cls) and text in str(m.error)
    m.receive(encode(c.Invalid("not attached: CONSUME")), 0.0)     # the rest: ignored
    assert isinstance(m.error, cls)


def test_messages_carry_what_came_and_credit_goes_back_at_the_top_up():
    m = joined(window=1000)                      # top-up: 500 bytes
    cost = deliver_cost(1, 100)
    for seq in range(5, 13):                     # 8 * 113 bytes: within the window
        deliver(m, seq, body=b"b" * 100)
    got = m.take(3, 0.0)
    assert [x.sequence for x in got] == [5, 6, 7] and isinstance(got[0], ConsumerMessage)
    assert got[0].timestamp == 9 and got[0].body == b"b" * 100 and got[0].stream == "s"
    assert sent(m) == []                         # 3 * 113 < 500
    got += m.take(100, 0.0)
    assert [x.credit for x in sent(m) if isinstance(x, c.Credit)] == [8 * cost]
    assert len(got) == 8


def test_more_than_the_credit_loses_the_peering():
    m = joined(window=300)          # grown by LIMITS-OK (100-byte bodies, a dead letter's headers)
    assert m.window == 2 * (9 + 255 + 100 + 512) == 1752
    for seq in range(1, 17):                     # 16 x 113 > 1752
        deliver(m, seq, body=b"b" * 100)
    assert m.need_rejoin and "credit" in m.need_rejoin and not m.buffered


def test_acks_become_one_ack_of_ranges_per_flush():
    m = joined()
    for seq in [5, 6, 7, 8, 10, 11, 20]:
        deliver(m, seq)
    got = m.take(100, 0.0)
    for x in got:
        x.ack()
    got[0].ack()                                  # twice: nothing more
    assert acks(sent(m)) == []                    # queued
    m.take(100, 0.0)                              # nothing buffered: the acks leave
    assert acks(sent(m)) == [[(5, 8), (10, 11), (20, 20)]]
    m.take(100, 0.0)
    assert acks(sent(m)) == []                    # sent once


def test_acks_wait_while_messages_are_buffered_but_not_longer_than_ack_delay():
    m = joined()
    for seq in range(1, 5):
        deliver(m, seq)
    a = m.take(1, 1.0)[0]
    a.ack()
    m.take(1, 1.0)[0].ack()
    assert acks(sent(m)) == []                    # two still buffered, no time passed
    m.take(1, 1.0 + ACK_DELAY)
    assert acks(sent(m)) == [[(1, 2)]]


def test_a_batch_flushes_and_nak_and_progress():
    m = joined()
    for seq in range(1, 4):
        deliver(m, seq)
    one, two, three = m.take(100, 0.0)
    three.in_progress()
    assert sent(m) == [c.Progress(3)]             # at once
    one.ack()
    two.nak(1.5)
    two.ack()                                     # settled by the nak: nothing
    deliver(m, 4)
    m.take(100, 0.0, flush=True)
    cmds = sent(m)
    assert acks(cmds) == [[(1, 1)]] and [x for x in cmds if isinstance(x, c.Nak)] == [
        c.Nak(2, 1500)]
    three.nak()
    m.flush()
    assert sent(m) == [c.Nak(3, 0)]


def test_1024_ranges_flush_at_once_and_a_frame_never_holds_more():
    woken = []
    m = joined(window=10_000_000)
    m.wake = lambda: woken.append(1)
    for seq in range(1, 2 * MAX_ACK_RANGES + 3, 2):    # every other: one range each
        deliver(m, seq)
    got = m.take(10_000, 0.0)
    for x in got[:MAX_ACK_RANGES - 1]:
        x.ack()
    assert acks(sent(m)) == [] and not woken
    got[MAX_ACK_RANGES - 1].ack()
    first = acks(sent(m))
    assert woken and len(first) == 1 and len(first[0]) == MAX_ACK_RANGES
    for x in got[MAX_ACK_RANGES:]:
        x.ack()
    m.flush()
    assert acks(sent(m)) == [[(s, s) for s in range(2 * MAX_ACK_RANGES + 1,
                                                     2 * MAX_ACK_RANGES + 3, 2)]]
    # acknowledged out of order: still ranges, and the frame count by the merged ranges
    for seq in range(3000, 2999 + 2 * MAX_ACK_RANGES):
        deliver(m, seq)
    got = m.take(10_000, 0.0)
    for x in reversed(got):
        x.ack()
    m.flush()
    assert sum(len(r) for r in acks(sent(m))) <= 2


@pytest.mark.parametrize("frame,what", [
    (encode(c.DeliverTs(1, 5, "k", b"body"))[:-2], "DELIVER-TS"),
    (encode(c.Deliver(5, "k", b"body"))[:14], "DELIVER"),
    (deliver_batch_head(1, 5, 3) + encode_entries([("k", b"x")]), "DELIVER-BATCH"),
    (encode(c.DeliverTs(1, 5, "k", b"x")).replace(b"\x01k", b"\x01\xff"), "DELIVER-TS"),
    (b"\xaa\xa5\xfe\x00", "does not decode"),
])
def test_a_malformed_frame_is_a_clear_error(frame, what):
    m = joined()
    m.receive(frame, 0.0)
    assert isinstance(m.error, ZepsError) and what in str(m.error)
    assert "consumer 'work' of stream 's'" in str(m.error)


def test_batches_and_headers_become_messages():
    m = joined()
    m.receive(deliver_batch_head(7, 10, 2) + encode_entries([("a", b"1"), ("b", b"22")]), 0.0)
    m.receive(encode(c.DeliverHeaders(8, 12, "h", b"3", (("n", b"v"),))), 0.0)
    got = m.take(10, 0.0)
    assert [(x.sequence, x.key, x.body, x.timestamp) for x in got] == [
        (10, "a", b"1", 7), (11, "b", b"22", 7), (12, "h", b"3", 8)]
    assert got[2].headers.get("n") == b"v"


def test_a_lost_peering_rejoins_and_old_messages_cannot_be_settled():
    m = joined()
    deliver(m, 5)
    deliver(m, 6)
    old = m.take(1, 0.0)[0]
    m.receive(encode(c.Detach()), 1.0)
    assert m.need_rejoin and "DETACH" in m.need_rejoin and not m.buffered
    assert m.next_timer(1.0) == m.rejoin_at > 1.0
    m.rejoin(2.0)
    assert [x.NAME for x in sent(m)] == SETUP and m.state is JOINING
    for ok in OKS:
        m.receive(encode(ok), 2.0)
    m.receive(encode(c.ConsumeOk(4, 7, 2)), 2.0)
    assert m.joins == 2 and m.skipped == 2
    sent(m)
    old.ack()                                     # came before the reconnect: nothing
    deliver(m, 5)
    again = m.take(1, 2.0)[0]
    again.ack()
    m.take(1, 2.0)
    assert acks(sent(m)) == [[(5, 5)]]


def test_not_attached_while_joined_rejoins_and_rejoined_consume_refused_is_the_error():
    m = joined()
    m.receive(encode(c.Invalid("not attached: ACK")), 0.0)
    assert m.need_rejoin and m.error is None
    m.rejoin(1.0)
    sent(m)
    for ok in OKS:
        m.receive(encode(ok), 1.0)
    m.receive(encode(c.Invalid("no consumer 'work'")), 1.0)
    assert isinstance(m.error, InvalidError)


def test_heartbeat_probe_and_its_timeout():
    m = joined(heartbeat=5.0, timeout=3.0)
    m.tick(4.0)
    assert sent(m) == []
    m.sent(0.0)
    m.tick(5.0)
    assert sent(m) == [c.StreamInfo()]
    m.receive(encode(c.StreamInfoOk(1, 2, 3, 4, 5)), 6.0)
    assert m.probe_at is None
    m.sent(6.0)
    m.tick(11.0)
    assert sent(m) == [c.StreamInfo()]
    m.tick(13.0)
    assert m.need_rejoin is None
    m.tick(14.5)
    assert m.need_rejoin and "heartbeat" in m.need_rejoin


def test_the_first_join_times_out_later_ones_retry():
    m = ConsumerPeering("s", "work", timeout=2.0, now=10.0)
    m.tick(12.5)
    assert isinstance(m.error, ZepsTimeout)
    m = joined(timeout=2.0)
    m.lost("gone", 0.0)
    m.rejoin(1.0)
    m.tick(3.5)
    assert m.error is None and m.need_rejoin


def test_close_flushes_then_detach_and_settling_after_raises():
    m = joined()
    deliver(m, 5)
    x = m.take(1, 0.0)[0]
    x.ack()
    m.close(0.0)
    cmds = sent(m)
    assert acks(cmds) == [[(5, 5)]] and cmds[-1] == c.Detach()
    with pytest.raises(ZepsError, match="closed"):
        x.ack()
    m.receive(encode(c.DetachOk()), 0.0)
    assert m.state is CLOSED
    with pytest.raises(ZepsError, match="closed"):
        m.take(1, 0.0)


def test_ping_is_answered_and_a_plain_message_cannot_be_acked():
    m = joined()
    m.receive(encode(c.Ping()), 0.0)
    assert sent(m) == [c.PingOk()]
    with pytest.raises(ZepsError, match="did not come from a consumer"):
        ConsumerMessage(1, "k", b"").ack()
    assert ConsumerMessage(1, "k", b"") == ConsumerMessage(1, "k", b"")


def test_consumer_add_checks_every_setting():
    cmd = consumer_add("work", "order.", start=17, ack="all", ack_wait=1.5, max_deliver=5,
                       max_ack_pending=10, dead_letter="dead", key_order=True)
    assert cmd == c.ConsumerAdd("work", ("order.",), c.START_SEQUENCE, 17, c.ACK_ALL, 1500, 5,
                                10, "dead", c.CONSUMER_KEY_ORDER)
    assert consumer_add("w").start == c.START_ALL
    assert consumer_add("w", start="new").start == c.START_NEW
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert consumer_add("w", start=t).start_value == int(t.timestamp()) * 10**9
    for bad in [dict(name=".x"), dict(name="a b"), dict(name="x" * 65),
                dict(start=-1), dict(start="soon"), dict(start=True), dict(ack="some"),
                dict(ack_wait=0), dict(max_deliver=-1), dict(max_ack_pending=0),
                dict(max_ack_pending=70_000), dict(patterns=()), dict(patterns=("",) * 17),
                dict(dead_letter="a\x00")]:
        args = {"name": "w", **bad}
        name = args.pop("name")
        with pytest.raises((ValueError, TypeError)):
            consumer_add(name, **args)
