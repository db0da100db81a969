"""The subscriber's half of a :class:`~zeps.clients.peering.Peering`: messages in, credit out.

Pure (no socket, no clock), as the rest of the peering. What arrives:

* **DELIVER / DELIVER-TS** frames are decoded into :class:`~zeps.clients.message.Message`
  objects and buffered with their credit cost (``zeps.protocol.deliver``); so are **DELIVER-H**
  frames (a message with headers, after HEADERS-SELECT), whose cost includes their headers
  (``zeps.protocol.headers``);
* a **DELIVER-BATCH** is kept whole as a :class:`~zeps.clients.message.MessageBatch` (its
  credit is one sum from the entries' offsets; nothing is decoded per message) unless it
  repeats sequences already received, which are dropped one by one;
* a delivery at or below the last sequence received (or before the client subscribed) is a
  duplicate: dropped, counted, its credit not granted back (:mod:`zeps.clients.bounds`).

What leaves: :meth:`Delivery.take` hands messages to the front ends (building a batch's
messages then, and cutting it at the top-up exactly where DELIVERs would have stopped),
:meth:`Delivery.take_batches` hands batches as they came. Credit goes back to the broker once
half the window (``zeps.clients.window``) was handed; a broker that sends beyond the credit it
was given loses the peering. The peering's position (:attr:`last_handed`, where a
resubscription starts after a reconnect) moves as messages are handed. The window is sized
after each ATTACH from the broker's ``LIMITS`` and grown when the broker advises "credit window
too small" (``_fit``, with :mod:`zeps.clients.window`).

:class:`Delivery` is a mixin of :class:`~zeps.clients.peering.Peering`, which owns the state it
uses (``buffer``, ``buffered``, ``buffered_messages``, ``consumed``, ``topup``,
``credit_window``, ``largest``, ``max_credit``, ``subscribed``, ``last_received``,
``last_handed``, ``stream``, ``error``) and the ``attached`` / ``connection_lost`` / ``_send``
it uses.
"""
from __future__ import annotations

import logging
import struct
from typing import List, Optional

from ..protocol import commands as c
from ..protocol.codec import encode
from ..protocol.codec import ProtocolError, decode_headers
from ..protocol.deliver import SEQ_OFFSET, TS_SHIFT, deliver_cost, key_body_of
from ..protocol.headers import NO_HEADERS, Headers, deliver_h_cost
from ..protocol.reasons import Reason
from .batching import DELIVER_HEAD_SIZE, ENTRY_COST_EXTRA, BadEntries, decode_deliver_batch
from .errors import InvalidError
from .message import Message, MessageBatch, build_message
from .window import advised_cost, topup_for, window_for

__all__ = ["Delivery", "TAKE_LIMIT"]

log = logging.getLogger("zeps.client")

#: Most messages :meth:`Delivery.take` hands out at once (a subscription takes them under one
#: lock and hands them one by one; 512 instead of 64 made ``for msg in sub`` 1.16x faster;
#: issue 20). What is taken counts as handed: its credit goes back to the broker.
TAKE_LIMIT = 512

_TS_SEQ_OFFSET = SEQ_OFFSET + TS_SHIFT
_U64_unpack_from = struct.Struct(">Q").unpack_from
_tuple_new = tuple.__new__
#: A DELIVER-BATCH's count (u32) ends its head; of one entry, the frame is a DELIVER-TS's
#: (timestamp, sequence, key length, key, body length, body) with the count inserted before
#: the key length: decoded with DELIVER-TS's offsets moved on by the count's four bytes.
_COUNT_AT = DELIVER_HEAD_SIZE - 4
_ONE = (1).to_bytes(4, "big")
_LONE_KEY = DELIVER_HEAD_SIZE + 1                       # where its key starts
_TS_SEQ_unpack_from = struct.Struct(">QQ").unpack_from   # DELIVER-TS's timestamp, sequence
_U32_unpack_from = struct.Struct(">I").unpack_from
#: A batch of one's length minus its credit (the entry's, as a batch counts it: its length
#: plus ENTRY_COST_EXTRA, which is DELIVER's for the same key and body).
_LONE_LESS = DELIVER_HEAD_SIZE - ENTRY_COST_EXTRA


class Delivery:
    """Messages in, credit out (see the module docs)."""

    __slots__ = ()

    def start_delivery(self) -> None:
        """Grant the credit window, once: after the patterns of the first subscribe call are
        in place (with credit the broker starts delivering, moving the position past what a
        later pattern of the same call would match)."""
        if self.subscribed:
            return
        self.subscribed = True
        self.last_received = self.last_handed
        if self.attached:
            if self.outgrown():             # LIMITS-OK grew the window past the socket's bound
                self.regrow()
                return
            self._send(encode(c.Credit(self.credit_window)))

    def take(self, limit: int = TAKE_LIMIT) -> List[Message]:
        """Hand the oldest buffered messages to the application: at most ``limit``, and no more
        than half the credit window's worth (but at least one). Grants credit back once half
        the window was consumed. A front end takes a batch under one lock and hands it out message by
        message: the messages count as handed from here on (the position to resubscribe
        from), and the credit they free goes back to the broker."""
        buf = self.buffer
        out: List[Message] = []
        spent = 0
        topup = self.topup
        while buf:
            item, cost = buf.popleft()
            if type(item) is MessageBatch:           # handed message by message, as DELIVERs
                if spent + cost < topup and len(out) + len(item) < limit:
                    out.extend(item.messages)
                else:
                    messages, cost, rest = item.cut(spent, topup, limit - len(out))
                    out.extend(messages)
                    if rest is not None:
                        buf.appendleft((rest, rest.cost))
                        spent += cost
                        break
            else:
                out.append(item)
            spent += cost
            if spent >= topup or len(out) >= limit:
                break
        if out:
            self._handed(spent, len(out), out[-1].sequence)
        return out

    def take_batches(self) -> List[MessageBatch]:
        """As :meth:`take`, as :class:`MessageBatch` objects: each DELIVER-BATCH as received
        (nothing built per message), the DELIVERs between them gathered into one batch."""
        buf = self.buffer
        out: List[MessageBatch] = []
        run: List[Message] = []
        spent = n = 0
        topup = self.topup
        while buf:
            item, cost = buf.popleft()
            if type(item) is MessageBatch:
                if run:
                    out.append(MessageBatch(run))
                    run = []
                out.append(item)
                n += len(item)
            else:
                run.append(item)
                n += 1
            spent += cost
            if spent >= topup:
                break
        if run:
            out.append(MessageBatch(run))
        if out:
            self._handed(spent, n, out[-1].last)
        return out

    def _beyond_credit(self) -> None:
        """The broker sent more than the credit it was given: drop the peering."""
        self.connection_lost(f"the broker sent more than the {self.credit_window} bytes of "
                             f"credit it was given")

    def _handed(self, spent: int, count: int, last: int) -> None:
        self.buffered -= spent
        self.buffered_messages -= count
        self.last_handed = last
        self.consumed += spent
        if self.consumed >= self.topup:
            self._grant()

    def _on_deliver(self, frame: bytes, shift: int) -> None:
        """A DELIVER (``shift`` 0) or DELIVER-TS (``shift`` TS_SHIFT)."""
        try:
            key, body = key_body_of(frame, shift)
            if shift:
                ts = _U64_unpack_from(frame, SEQ_OFFSET)[0]
                seq = _U64_unpack_from(frame, _TS_SEQ_OFFSET)[0]
            else:
                ts = None
                seq = _U64_unpack_from(frame, SEQ_OFFSET)[0]
            text = key.decode()
        except (IndexError, struct.error, UnicodeDecodeError) as e:
            log.warning("zeps: ignoring a bad DELIVER frame: %s", e)
            return
        self._buffer_one(seq, text, body, ts, deliver_cost(len(key), len(body)))

    def _on_lone_entry(self, frame: bytes) -> None:
        """A DELIVER-BATCH of one entry (what a live subscriber gets for a message published
        alone): laid out as a DELIVER-TS with the count before the entry, so decoded as one
        with its offsets moved on by four, with no batch built; the same message and credit as
        :meth:`_on_deliver_batch` gives it (tests/test_client_batching.py)."""
        try:
            kend = _LONE_KEY + frame[_LONE_KEY - 1]
            if kend + 4 + _U32_unpack_from(frame, kend)[0] != len(frame):
                raise BadEntries("the entry does not fill the frame")
        except (IndexError, struct.error, BadEntries) as e:
            log.warning("zeps: ignoring a bad DELIVER-BATCH frame: %s", e)
            return
        ts, seq = _TS_SEQ_unpack_from(frame, SEQ_OFFSET)
        self._buffer_one(seq, frame[_LONE_KEY:kend].decode("utf-8", "replace"), frame[kend + 4:],
                         ts, len(frame) - _LONE_LESS)

    def _buffer_one(self, seq: int, text: str, body: bytes, ts: Optional[int],
                    cost: int) -> None:
        """One decoded message (not a DELIVER-H): buffered, or only counted if a duplicate."""
        if not self.subscribed or seq <= self.last_received:
            self._duplicate(cost)           # never handed twice, never paid for
            return
        self.buffered += cost
        if self.buffered + self.consumed + self.wasted > self.credit_window:
            self.buffered -= cost
            self._beyond_credit()
            return
        self.last_received = seq
        self.buffered_messages += 1
        self.buffer.append((_tuple_new(Message, (seq, text, body, ts, self.stream, NO_HEADERS)),
                            cost))

    def _on_deliver_h(self, frame: bytes) -> None:
        """A DELIVER-H: a message with headers (and its timestamp), costing DELIVER's credit
        plus its headers block's length."""
        try:
            cmd = decode_headers(frame)
        except ProtocolError as e:
            log.warning("zeps: ignoring a bad DELIVER-H frame: %s", e)
            return
        cost = deliver_h_cost(frame)
        seq = cmd.sequence
        if not self.subscribed or seq <= self.last_received:
            self._duplicate(cost)
            return
        self.last_received = seq
        self.buffered += cost
        if self.buffered + self.consumed + self.wasted > self.credit_window:
            self._beyond_credit()
            return
        self.buffered_messages += 1
        self.buffer.append((build_message(seq, cmd.key, cmd.body, cmd.timestamp, self.stream,
                                          Headers(cmd.headers)), cost))

    def _on_deliver_batch(self, frame: bytes) -> None:
        """A DELIVER-BATCH: the messages a DELIVER each would give (sequence first + i, the
        batch's timestamp), credit counted per message as for DELIVER. Kept whole (a
        :class:`MessageBatch`: nothing decoded per message until the application asks) unless
        it repeats sequences already received; a batch of one is decoded at once
        (:meth:`_on_lone_entry`)."""
        if frame[_COUNT_AT:DELIVER_HEAD_SIZE] == _ONE:
            self._on_lone_entry(frame)
            return
        try:
            ts, first, offsets = decode_deliver_batch(frame)
        except (BadEntries, struct.error) as e:
            log.warning("zeps: ignoring a bad DELIVER-BATCH frame: %s", e)
            return
        count = len(offsets) - 1
        if count == 0:
            return
        total = offsets[-1] - offsets[0] + ENTRY_COST_EXTRA * count
        if not self.subscribed:
            self._duplicate(total, count)
            return
        if first > self.last_received:             # the usual case: all of it is new
            self.buffered += total
            if self.buffered + self.consumed + self.wasted > self.credit_window:
                self.buffered -= total
                self._beyond_credit()
                return
            self.last_received = first + count - 1
            self.buffered_messages += count
            self.buffer.append((MessageBatch.from_frame(frame, offsets, first, ts, self.stream),
                                total))
            return
        self._deliver_batch_entries(frame, ts, first, offsets)

    def _deliver_batch_entries(self, frame: bytes, ts: int, first: int, offsets) -> None:
        """A DELIVER-BATCH that repeats sequences already received: its new entries are
        buffered one by one, the others are duplicates (never handed, never paid for)."""
        stream = self.stream
        append = self.buffer.append
        last = self.last_received
        window = self.credit_window
        seq = first - 1
        start = offsets[0]
        repeats = repeated = 0
        for end in offsets[1:]:
            seq += 1
            cost = end - start + ENTRY_COST_EXTRA
            kend = start + 1 + frame[start]
            if seq <= last:
                repeats += 1
                repeated += cost
                start = end
                continue
            key = frame[start + 1:kend].decode("utf-8", "replace")
            last = seq
            self.buffered += cost
            if self.buffered + self.consumed + self.wasted + repeated > window:
                self.buffered -= cost
                self.last_received = last
                self._beyond_credit()
                return
            self.buffered_messages += 1
            append((build_message(seq, key, frame[kend + 4:end], ts, stream), cost))
            start = end
        self.last_received = last
        if repeats:
            self._duplicate(repeated, repeats)

    def _grant(self) -> None:
        if self.attached and self.consumed:
            self._send(encode(c.Credit(self.consumed)))
        self.consumed = 0

    def _fit(self, largest: int, advice: Optional[str] = None) -> None:
        """Size the credit window for messages costing up to ``largest`` (window.py), granting
        what it grows by -- and the credit not granted back yet -- at once while subscribed.
        With a broker's ``advice`` that cannot be followed, the application hears it."""
        largest = max(largest, self.largest)
        window = window_for(self.credit_window, largest, self.credit_cap())
        if window is None:              # can never be delivered to this client: say so
            text = advice or f"a message of {largest} bytes of credit cannot be delivered"
            if self.max_frame is not None:
                text += f" (this client reads frames of up to max_frame={self.max_frame} bytes)"
            self.error = self.error or InvalidError(text)
            return
        self.largest = largest
        self.topup = topup_for(window, largest)
        more = window - self.credit_window
        if more <= 0:
            return
        log.info("zeps: credit window for stream %r grows from %d to %d bytes", self.stream,
                 self.credit_window, window)
        self.credit_window = window
        if self.subscribed and self.attached and self.outgrown():
            self.regrow()                   # granted on a socket that reads what it allows
        elif self.subscribed:
            self.consumed += more
            self._grant()

    def _window_too_small(self, why: Reason) -> None:
        """Unasked: a message costs more credit than this client ever held at once: grow the
        window to fit it (:mod:`zeps.clients.refusals`)."""
        # fields: (sequence, cost, peak); from a broker without REASONS-SELECT, the text's figure
        cost = why.fields[1] if len(why.fields) > 1 else ""
        self._fit(int(cost) if cost.isdigit() else advised_cost(why.text, self.credit_window),
                  why.text)
