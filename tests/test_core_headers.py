"""Message headers in the broker core (issue 18 item 7), driven in-process
(tests/core_harness.py): PUBLISH-H is journalled with its headers; a client that sent
HEADERS-SELECT gets DELIVER-H (live and replayed, whatever else it chose), any other client gets
exactly what it gets for a message without headers; credit, congestion, producers and the body
limit count the headers as docs/protocol.md says."""
from __future__ import annotations

import pytest

from tests.core_harness import Core, core_fixture, cost, make_fixture, messages_of  # noqa: F401
from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.batch import encode_publish_batch
from zeps.protocol.headers import MAX_HEADERS, MAX_HEADERS_BYTES, encode_block
from zeps.protocol.reasons import PUBLISH_REJECTED

PUB, HSUB, PLAIN, TS, BATCH, BOTH = b"pub", b"hsub", b"plain", b"ts", b"batch", b"both"
H = (("uuid", bytes(range(16))), ("ttl", b"30"))
BLOCK = encode_block(H)


def hcost(key: str, body: bytes = b"x") -> int:
    """Credit a DELIVER-H of ``key``/``body`` with headers ``H`` costs."""
    return cost(key, body) + len(BLOCK)


def publish_h(h: Core, key: str, body: bytes = b"x", headers=H, ident: bytes = PUB) -> None:
    if ident not in h.core.sessions:
        h.send(ident, c.Attach("s"))
        assert h.take(ident) == [c.AttachOk()]
    h.core.receive(ident, [encode(c.PublishHeaders(key, body, headers))], h.now)
    h.round()


def selecting(h: Core, ident: bytes, *selects: c.Command, latest: int = c.LATEST_LIVE,
              credit: int = 1 << 30) -> None:
    h.send(ident, c.Attach("s"), *selects, c.Credit(credit), c.Subscribe("", latest))
    got = h.kinds(ident)
    assert got[0] is c.AttachOk and got[-1] is c.SubscribeOk and c.Invalid not in got


def every_kind(h: Core, latest: int = c.LATEST_LIVE) -> None:
    selecting(h, HSUB, c.HeadersSelect(), latest=latest)
    selecting(h, PLAIN, latest=latest)
    selecting(h, TS, c.DeliverTimestamps(), latest=latest)
    selecting(h, BATCH, c.BatchSelect(), latest=latest)
    selecting(h, BOTH, c.BatchSelect(), c.HeadersSelect(), latest=latest)


def test_headers_select_answers_the_limits_in_any_state(core):
    core.send(b"x", c.HeadersSelect())
    assert core.take(b"x") == [c.HeadersSelectOk(MAX_HEADERS, MAX_HEADERS_BYTES)]
    assert core.core.sessions[b"x"].headers


def _deliveries(core, stored):
    """What each kind of subscriber got, checked against what was stored."""
    plain, with_h = stored
    assert core.take(HSUB) == [c.Deliver(1, "a", b"x"),
                               c.DeliverHeaders(with_h.timestamp, 2, "b", b"x", H)]
    got = core.take(PLAIN)
    assert got == [c.Deliver(1, "a", b"x"), c.Deliver(2, "b", b"x")]
    assert [type(m) for m in core.take(TS)] == [c.DeliverTs, c.DeliverTs]
    assert core.delivered(BATCH) == [(1, "a"), (2, "b")]      # no headers, as DELIVER-BATCH
    got = core.take(BOTH)
    assert [type(m) for m in got] == [c.DeliverBatch, c.DeliverHeaders]
    assert messages_of(got[0]) == [(1, "a")] and got[1].headers == H


def test_live_each_subscriber_gets_what_it_chose(core):
    every_kind(core)
    core.publish("a")                 # one round each, so that both have their own record
    publish_h(core, "b")
    stored = core.core.streams["s"].journal.read_batch(1)
    assert stored[0].header_block is None and stored[1].header_block == BLOCK
    _deliveries(core, stored)


def test_replayed_each_subscriber_gets_what_it_chose(core):
    core.publish("a")
    publish_h(core, "b")
    every_kind(core, latest=0)
    core.drain()
    _deliveries(core, core.core.streams["s"].journal.read_batch(1))


def test_a_plain_subscriber_is_sent_the_journal_bytes_zero_copy(core):
    selecting(core, PLAIN)
    publish_h(core, "b")
    core.core.receive(PUB, [encode(c.PublishHeaders("c", b"y", H))], core.now)
    core.core.append_queued()
    out = core.core.take_outbox()
    stored = core.core.streams["s"].journal.read_batch(2)[0]
    assert [(i, f) for i, f in out if i == PLAIN] == [(PLAIN, stored.frame)]


def test_credit_counts_the_headers_for_deliver_h_only(core):
    selecting(core, HSUB, c.HeadersSelect(), credit=hcost("b") - 1)
    selecting(core, PLAIN, credit=cost("b"))
    publish_h(core, "b")
    assert core.take(PLAIN) == [c.Deliver(1, "b", b"x")]
    assert core.core.sessions[PLAIN].credit == 0
    got = core.take(HSUB)                         # one byte short: historical, and told
    assert [type(m) for m in got] == [c.Invalid]
    assert f"needs {hcost('b')} bytes of credit" in got[0].reason
    s = core.core.sessions[HSUB]
    assert (s.live, s.next_seq) == (False, 1)
    core.send(HSUB, c.Credit(1))
    core.drain()
    got = core.take(HSUB)
    assert [type(m) for m in got] == [c.DeliverHeaders] and got[0].headers == H
    assert core.core.sessions[HSUB].credit == 0 and core.core.sessions[HSUB].live


def test_a_congested_deliver_h_is_taken_back_and_replayed(core):
    selecting(core, HSUB, c.HeadersSelect(), credit=10 * hcost("b"))
    core.pipe[HSUB] = 0
    publish_h(core, "b")
    assert [type(m) for _i, m in core.unsent] == [c.DeliverHeaders]
    s = core.core.sessions[HSUB]
    assert (s.live, s.next_seq, s.credit) == (False, 1, 10 * hcost("b"))
    del core.pipe[HSUB]
    core.now += 5
    core.drain()
    got = core.take(HSUB)
    assert [(m.sequence, m.headers) for m in got] == [(1, H)]


def test_body_and_headers_together_must_fit_the_body_limit(make):
    h = make(max_message=100)
    publish_h(h, "k", b"x" * (100 - len(BLOCK)))             # exactly the limit: stored
    publish_h(h, "k", b"x" * (101 - len(BLOCK)))             # one over: refused
    got = h.take(PUB)
    assert len(got) == 1 and got[0].reason.startswith(PUBLISH_REJECTED)
    assert f"headers of {len(BLOCK)} bytes" in got[0].reason
    assert h.core.streams["s"].journal.next_seq == 2


def test_a_producer_publish_h_is_confirmed_and_its_retry_is_not_stored_twice(core):
    core.send(PUB, c.Attach("s"), c.ConfirmSelect(), c.Producer("p1", 1))
    core.take(PUB)
    frame = encode(c.PublishHeaders("k", b"v", H))
    core.core.receive(PUB, [frame], core.now)
    core.round()
    core.round()
    assert core.take(PUB)[-1] == c.Confirm(1, 1)
    core.send(PUB, c.Detach())
    core.send(PUB, c.Attach("s"), c.ConfirmSelect(), c.Producer("p1", 1))  # the retry
    core.take(PUB)
    core.core.receive(PUB, [frame], core.now)
    core.round()
    core.round()
    assert core.take(PUB)[-1] == c.Confirm(1, 1)
    recs = core.core.streams["s"].journal.read_batch(1)
    assert [(r.sequence, r.producer, r.pseq, r.headers) for r in recs] == [(1, "p1", 1, H)]


@pytest.mark.parametrize("head", [
    (5, MAX_HEADERS + 1), (MAX_HEADERS_BYTES + 1, 1), (2**32 - 1, 0xFFFF)])
def test_headers_over_the_limits_get_one_invalid_and_the_calm_pair_is_unharmed(core, head):
    selecting(core, PLAIN)
    selecting(core, b"h-sub", c.HeadersSelect())
    core.send(b"hostile", c.Attach("s"))
    core.take(b"hostile")
    size, count = head
    bad = b"\xaa\xa5\x48" + size.to_bytes(4, "big") + count.to_bytes(2, "big") + b"\x01a\x00\x00"
    for _ in range(3):
        core.send_frames(b"hostile", [bad + b"\x01k\x00\x00\x00\x00"])
    got = core.take(b"hostile")
    assert [type(m) for m in got] == [c.Invalid] * 3
    assert "over the limit" in got[0].reason
    publish_h(core, "calm")
    core.publish("calm2")
    assert core.take(PLAIN) == [c.Deliver(1, "calm", b"x"), c.Deliver(2, "calm2", b"x")]
    assert [type(m) for m in core.take(b"h-sub")] == [c.DeliverHeaders, c.Deliver]
    assert core.core.streams["s"].journal.next_seq == 3


def test_publish_h_needs_attach_and_is_a_client_command_only(core):
    core.send(b"x", c.PublishHeaders("k", b"", H))
    assert core.take(b"x")[0].reason.startswith("not attached")
    core.send(b"x", c.Attach("s"), c.DeliverHeaders(1, 1, "k", b"", H))
    got = core.take(b"x")
    assert got[0] == c.AttachOk() and "sent by the broker" in got[1].reason


def test_batches_never_carry_headers_and_keep_their_bytes(core):
    selecting(core, BOTH, c.BatchSelect(), c.HeadersSelect())
    core.send(PUB, c.Attach("s"))
    core.take(PUB)
    core.core.receive(PUB, [encode_publish_batch([("a", b"1"), ("b", b"2")])], core.now)
    core.round()
    got = core.take(BOTH)
    stored = core.core.streams["s"].journal.read_chunks(1)
    assert [encode(m) for m in got] == [stored[0].frame]
    assert decode(stored[0].frame).count == 2
