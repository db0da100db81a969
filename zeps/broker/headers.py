"""Message headers in the broker (ids 70-73, docs/protocol.md "Message headers"): HEADERS-SELECT,
PUBLISH-H, and the delivery of a message that has headers. Pure logic, no sockets.

* **PUBLISH-H** is a PUBLISH whose headers block (:mod:`zeps.protocol.headers`, checked by the
  codec in its head before a pair is read) is journalled verbatim in the record's headers
  extension. It counts as one PUBLISH everywhere (confirms, producer sequences, refusals), and
  its body and headers together must fit the body limit (``len(body) + len(block)``).
* **Delivery.** The record keeps the DELIVER frame a ZEPS/1 subscriber gets, so a subscriber that
  did not send HEADERS-SELECT is sent exactly what it would get for a message without headers
  (DELIVER, DELIVER-TS or a DELIVER-BATCH entry: the headers left out, as NATS does for a client
  without headers support) at DELIVER's credit cost. One that did is sent DELIVER-H (built once
  per record from the stored frame and block, one concatenation), costing DELIVER's credit plus
  the block's length; for a batching subscriber it closes the run of DELIVER-BATCH being built
  and goes alone, in order. Messages without headers take the paths they always took.
"""
from __future__ import annotations

from zeps.protocol import commands as c, deliver_ts_from_deliver, encode
from zeps.protocol.deliver import frame_cost
from zeps.protocol.headers import (MAX_HEADERS, MAX_HEADERS_BYTES, deliver_h_from_deliver,
                                   encode_block)
from zeps.protocol.reasons import Reason

_HEADERS_SELECT_OK = encode(c.HeadersSelectOk(MAX_HEADERS, MAX_HEADERS_BYTES))


class Headed:
    """A queued PUBLISH-H's body and headers block, as the stream's pending list holds it in
    place of a body (:func:`journal_item` makes the journal's item of it)."""

    __slots__ = ("body", "block")

    def __init__(self, body: bytes, block: bytes):
        self.body = body
        self.block = block

    def __len__(self) -> int:
        return len(self.body) + len(self.block)


def journal_item(key, body):
    """The journal's item for a queued publish: ``(key, body)``, ``(key, body, block)`` for a
    PUBLISH-H, or the PublishBatch itself (``key`` None)."""
    if key is None:
        return body
    if type(body) is Headed:
        return (key, body.body, body.block)
    return (key, body)


class HeadersHandling:
    """The core's handlers of HEADERS-SELECT and PUBLISH-H (a mixin of BrokerCore)."""

    def _on_headers_select(self, s, cmd) -> None:
        s.headers = True                 # DELIVER-H for messages with headers, from now on
        self.outbox.append((s.identity, _HEADERS_SELECT_OK))

    def _on_publish_headers(self, s, cmd: c.PublishHeaders) -> None:
        """As a PUBLISH (rights, then the body limit, then the producer), the headers counted
        in the body's size."""
        if not s.may_publish:
            self._reject(s, Reason.not_allowed(self.acl.who(s.user), "publish", s.stream))
            return
        stream = self.streams[s.stream]
        limit, whose = self._body_limit(stream)
        block = cmd.block or None
        if block is None:                # built in process, not decoded: encode it once
            block = encode_block(cmd.headers)
        size = len(cmd.body) + len(block)
        if size > limit:
            self._reject(s, f"body of {len(cmd.body)} bytes and headers of {len(block)} bytes "
                            f"({size}) are over the {whose}'s limit of {limit}")
            return
        self._queue_publish(s, stream, cmd.key, Headed(cmd.body, block))


def route_headers(stream, rec, runs) -> None:
    """Route one record with headers just appended to the live subscribers that want it:
    DELIVER-H to those that sent HEADERS-SELECT, the stored DELIVER frame (or what they chose
    instead) to the others. A subscriber without the credit drops to historical, as ever."""
    ids = stream.index.match(rec.key) & stream.live_set.ids
    if not ids:
        return
    seq = rec.sequence
    sessions = stream.sessions
    outbox = stream.outbox
    delivered = delivered_bytes = 0
    frame = rec.frame
    block = rec.header_block
    h_frame = ts_frame = None            # built once if anyone wants them
    plain_cost = frame_cost(frame)
    for ident in ids:
        s = sessions.get(ident)
        if s is None or not s.live or seq < s.next_seq:
            continue
        if seq < s.future_start and not s.accepts(rec.key, seq):
            continue
        cost = plain_cost + len(block) if s.headers else plain_cost
        if s.credit < cost:
            stream.out_of_credit(s, seq, cost, runs)
            continue
        s.credit -= cost
        s.next_seq = seq + 1
        s.delivered += 1
        if s.headers:
            if h_frame is None:
                h_frame = deliver_h_from_deliver(frame, rec.timestamp, block)
            runs.close(ident)            # what was gathered for it goes first
            outbox.append((ident, h_frame))
        elif s.batches:
            runs.add_frame(ident, rec.timestamp, frame)
        elif s.timestamps:
            if ts_frame is None:
                ts_frame = deliver_ts_from_deliver(frame, rec.timestamp)
            outbox.append((ident, ts_frame))
        else:
            outbox.append((ident, frame))
        delivered += 1
        delivered_bytes += cost
    stream.delivered_total += delivered
    stream.delivered_bytes += delivered_bytes


def replay_frame(s, rec, frame: bytes):
    """``(frame, cost)`` to replay record ``rec`` (its stored DELIVER ``frame``) to ``s``: the
    DELIVER-H and its cost if the record has headers and ``s`` asked for them, else the frame
    (the caller converts it as it always did) and DELIVER's cost."""
    block = rec.header_block
    if block is None or not s.headers:
        return frame, frame_cost(frame)
    return deliver_h_from_deliver(frame, rec.timestamp, block), frame_cost(frame) + len(block)
