"""Message headers in the SDK's sans-I/O parts (issue 18 item 7): HEADERS-SELECT after each
ATTACH, DELIVER-H into Message.headers with its credit, PUBLISH-H never batched."""
from __future__ import annotations

import pytest

from tests.test_client_batching import MAX_BATCH, batching
from tests.test_client_peering import OLD_BROKER_LIMITS, feed, peering, sent
from zeps.clients import Headers, Message
from zeps.clients.operations import publish_frame
from zeps.clients.publishing import _plain_publishes, _publishes_in
from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.headers import deliver_h_cost, encode_block

H = (("uuid", b"u" * 16), ("ttl", b"30"))


def test_headers_select_follows_each_attach_before_any_subscribe():
    p = peering(headers=True)
    sent(p)
    feed(p, c.AttachOk())
    assert sent(p) == [c.Limits(), c.HeadersSelect()]
    feed(p, OLD_BROKER_LIMITS)
    assert p.headers_offered is None
    feed(p, c.HeadersSelectOk(255, 65536))
    assert p.headers_offered is True and p.error is None
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.connection_lost("test")
    p.reconnect(1.0)
    sent(p)
    feed(p, c.AttachOk())                             # a re-ATTACH: asked again, before SUBSCRIBE
    assert p.headers_offered is None
    out = sent(p)
    assert out.index(c.HeadersSelect()) < out.index(c.Subscribe("", 0))
    p = peering(headers=True)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, OLD_BROKER_LIMITS)
    feed(p, c.Invalid("unknown command 70"))          # an older broker: no headers
    assert p.headers_offered is False and p.error is None and p.fatal is None


def test_deliver_h_becomes_a_message_with_headers_at_its_credit_cost():
    p = peering(window=10_000)
    sent(p)
    feed(p, c.AttachOk())
    feed(p, OLD_BROKER_LIMITS)
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    frame = encode(c.DeliverHeaders(77, 1, "k", b"body", H))
    p.receive(frame, 0.0)
    p.receive(encode(c.Deliver(2, "k", b"plain")), 0.0)
    assert p.buffered == deliver_h_cost(frame) + 9 + 1 + 5
    msgs = p.take()
    assert msgs == [Message(1, "k", b"body", 77, "s", Headers(H)),
                    Message(2, "k", b"plain", None, "s")]
    assert msgs[0].headers.get("ttl") == b"30" and msgs[1].headers == ()
    assert msgs[0].cost == deliver_h_cost(frame)
    p.receive(frame, 0.0)                             # a repeat: dropped, its credit counted
    assert p.take() == []


def test_publish_h_is_never_batched_and_keeps_its_place():
    p = batching(max_batch=MAX_BATCH)
    hframe = publish_frame("h", b"x", {"n": b"1"})
    for f in (publish_frame("a", b"1"), hframe, publish_frame("b", b"2"),
              publish_frame("c", b"3")):
        p.queue_publish(f)
    p.outbox.append(p.queue.seal())
    got = [decode(f) for f in p.outbox]
    assert [type(m) for m in got] == [c.Publish, c.PublishHeaders, c.PublishBatch]
    assert got[1] == c.PublishHeaders("h", b"x", (("n", b"1"),))
    assert _publishes_in(hframe) == 1 and _plain_publishes(hframe) == [hframe]


def test_publish_frame_takes_a_dict_or_pairs():
    assert decode(publish_frame("k", "b", {"a": "x", "t": [b"1", b"2"]})) == c.PublishHeaders(
        "k", b"b", (("a", b"x"), ("t", b"1"), ("t", b"2")))
    assert decode(publish_frame("k", b"b", [("t", b"1"), ("t", b"2")])).headers == (
        ("t", b"1"), ("t", b"2"))
    assert publish_frame("k", b"b", None) == publish_frame("k", b"b", {}) == encode(
        c.Publish("k", b"b"))
    with pytest.raises(ValueError, match="key longer"):
        publish_frame("k" * 256, b"", {"a": b""})
    with pytest.raises(ValueError, match="over the limit"):
        publish_frame("k", b"", {"a": b"x" * 70_000})


def test_a_message_without_headers_is_what_it_was():
    m = Message(1, "k", b"v")
    assert m.headers == () and m == Message(1, "k", b"v", None, None, ())
    assert m.cost == 9 + 1 + 1
    assert Message(1, "k", b"v", headers=Headers(H)).cost == m.cost + len(encode_block(H))
