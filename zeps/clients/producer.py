"""Exactly-once publishing, the client's part: producer ids and producer sequences.

With ``confirms=True`` a client is an *idempotent producer* (``PRODUCER``, docs/protocol.md):
it has a producer id (random per client unless the application gives one) and numbers every
publish it ever makes 1, 2, 3, ... (the *producer sequence*, kept on the publish's receipt),
across reconnects. After each ATTACH it says ``PRODUCER id next`` and waits for the answer,
``PRODUCER-OK last``: the highest producer sequence the broker holds for that producer on that
stream. The broker gives the peering's PUBLISHes the producer sequences ``next``, ``next + 1``,
... in order, stores a publish only if its producer sequence is above ``last``, and counts and
confirms a duplicate without storing it. So after a reconnect the client re-sends its
unconfirmed publishes: those up to ``last`` as they were numbered (the broker drops them: their
CONFIRM came too late, or never: the broker crashed after writing them; their receipts resolve
with ``duplicate`` True and no sequence), the others numbered again from ``last + 1`` (the
broker refuses a peering whose sequences start past ``last + 1``: "out of order"; a rejected
publish, or records a broker crash lost before they were durable, leave such holes).

What protects one producer from another (issue 15, finding 5): a newer ``PRODUCER`` of an id
*fences* the peering that had it (its later publishes are refused, never confirmed as stored:
this client then fails with :class:`~zeps.clients.errors.ProducerFenced`, as Kafka's producer
does); no peering can start past ``last + 1``, so nobody can make another producer's future
sequences look stored; with CurveZMQ an id is bound to the key that first stored records under
it (another key's ``PRODUCER`` gets INVALID, ``ProducerFenced`` here).

When the broker *forgot* the producer -- ``last`` is below a producer sequence it already
confirmed to this client: it keeps at most 10,000 producers per stream and forgets one silent
for a day (``--producer-max-age``), or the stream was deleted and created again -- the client
cannot tell which unconfirmed publishes are stored. It does not re-send them: their receipts
fail with :class:`~zeps.clients.errors.ProducerStateLost` (raised once by the next call, unless
a receipt reported it), it logs a warning, and it numbers its next publishes from ``last + 1``.

The guarantee: **exactly-once among confirmed messages** -- every message whose receipt
resolved (or that ``wait_for_confirms()`` covered) is in the stream exactly once -- across
broker crashes (SIGKILL included: the broker's producer state is in its journal), reconnects
of the SDK, and a new client that takes over the producer id (a retried Spark task re-sending
the same rows in the same order). It does not cover:

* two clients publishing with the same producer id at the same time: the later one's
  ``PRODUCER`` fences the earlier (it fails with ``ProducerFenced``);
* a retry by a *new* client that comes after the broker forgot the producer (silent for
  longer than ``--producer-max-age``, or 10,000 other producers on the stream since): it is
  stored again, as the new client has no confirmed sequence to compare ``last`` with;
* a retry whose messages differ (other rows, another order): the broker compares producer
  sequences, not bodies.

Every PUBLISH of a peering after ``PRODUCER`` uses up one producer sequence, whether the broker
stores it, drops it as a duplicate or rejects it (``PUBLISH rejected: ...``). After a rejection
the broker stores nothing more of the peering until a ``PRODUCER`` from its ``last + 1`` (no
hole: docs/protocol.md): the publishes it refuses as out of order meanwhile are not failed but
re-sent, numbered again, after the ``PRODUCER`` the first of those refusals makes the client
send (:meth:`Refusals._producer_hole <zeps.clients.refusals.Refusals._producer_hole>`). A
client removes a rejected publish from its unconfirmed ones; the producer sequences it re-sends
after a reconnect are split into consecutive runs (:func:`runs`), each re-sent after its own
``PRODUCER`` (a broker from before the rule stored publishes above a hole).

:class:`ExactlyOnce` is the peering's side of it (a mixin of
:class:`~zeps.clients.peering.Peering`, which owns the state it uses): what it does with the
answer to the PRODUCER after an ATTACH, and with a refused or fenced producer. The numbering
itself is kept with the receipts, in :class:`~zeps.clients.confirms.ConfirmTracker`. Pure: no
sockets, no clock.
"""
from __future__ import annotations

import logging
import uuid
from typing import Iterable, List, Optional, Tuple

from ..protocol import commands as c
from ..protocol.reasons import (BOUND, FENCED, OUT_OF_ORDER, PRODUCER_REFUSED, PUBLISH_REJECTED,
                                Code, Reason)
from .errors import ProducerFenced, ProducerStateLost
from .requests import Request, RequestKind

__all__ = ["new_producer_id", "check_producer_id", "runs", "refusal_kind", "ExactlyOnce"]

log = logging.getLogger("zeps.client")


def new_producer_id() -> str:
    """A random producer id (a client's default): 128 random bits, in hex."""
    return f"zeps-{uuid.uuid4().hex}"


def check_producer_id(producer_id: Optional[str], confirms: bool) -> None:
    """Raise :class:`ValueError` for a ``producer_id`` no broker takes (1 to 255 bytes of
    UTF-8), or one given without confirms (exactly-once works through confirms)."""
    if producer_id is None:
        return
    if not isinstance(producer_id, str) or not producer_id:
        raise ValueError("producer_id must be a non-empty string")
    if len(producer_id.encode("utf-8")) > 255:
        raise ValueError("producer_id longer than 255 bytes")
    if not confirms:
        raise ValueError("producer_id needs confirms=True (exactly-once publishing works "
                         "through confirms)")


def runs(receipts: Iterable) -> List[Tuple[int, list]]:
    """Split unconfirmed publishes (receipts, in producer-sequence order) into runs of
    consecutive producer sequences: ``[(first producer sequence, [receipts]), ...]``."""
    out: List[Tuple[int, list]] = []
    expect = None
    for r in receipts:
        if r.pseq != expect:
            out.append((r.pseq, []))
        out[-1][1].append(r)
        expect = r.pseq + 1
    return out


def refusal_kind(why: Reason) -> Optional[str]:
    """What a refusal says about this client's producer id: ``FENCED``, ``OUT_OF_ORDER`` or
    ``BOUND`` (:data:`zeps.protocol.reasons.PRODUCER_REFUSED`, alone or as the cause of a
    ``PUBLISH rejected``), or None. From its code and fields (ERROR), or from the text of an
    INVALID."""
    fields = why.fields
    if why.code is Code.PRODUCER_REFUSED and fields:
        return fields[0]
    if why.code is Code.PUBLISH_REJECTED and len(fields) > 1 and fields[0] == "producer_refused":
        return fields[1]
    text = why.text
    if text.startswith(PUBLISH_REJECTED):
        text = text[len(PUBLISH_REJECTED):]
    if text.startswith(PRODUCER_REFUSED):
        text = text[len(PRODUCER_REFUSED):]
        for kind in (FENCED, OUT_OF_ORDER, BOUND):
            if text.startswith(kind + ":"):
                return kind
    return None


class ExactlyOnce:
    """The peering's part of exactly-once publishing (see the module docs)."""

    __slots__ = ()

    def _producer_synced(self, last: int, now: float) -> None:
        """The answer to the PRODUCER after ATTACH: the broker holds this producer's messages
        up to ``last``. The unconfirmed publishes up to it are re-sent as they were numbered,
        after their own PRODUCERs (duplicates: confirmed, not stored again); the others are
        numbered again from ``last + 1`` (a peering may not start past it: a rejected publish,
        or records a broker crash lost, leave holes) and re-sent after one PRODUCER.

        If ``last`` is below a producer sequence the broker already confirmed, it forgot this
        producer (too old, evicted, the stream created again): the unconfirmed publishes may
        or may not be stored, so they are not re-sent (they would be stored twice); they fail
        with :class:`ProducerStateLost`, said once (receipt or next call) and logged, and the
        next publishes are numbered from ``last + 1``."""
        self.producer_sync = None
        tracker = self.tracker
        at = self.producer_at
        if tracker.forgotten(last):
            n = len(tracker.unconfirmed)
            err = ProducerStateLost(
                f"the broker at {self.endpoint} forgot producer {self.producer!r} on stream "
                f"{self.stream!r}: it holds its messages up to producer sequence {last}, yet "
                f"it had confirmed {tracker.producer_confirmed} (its producer state was "
                f"dropped: too old, too many producers, or the stream was created again); {n} "
                f"unconfirmed message(s) were not re-sent, as they may be stored already: "
                f"publish them again only if a duplicate does no harm", last,
                tracker.producer_confirmed)
            log.warning("zeps: %s", err)
            if n:
                self.error = self.error or err
            tracker.restart(last, err)
            if at != last + 1:
                self.request(c.Producer(self.producer, last + 1), RequestKind.PRODUCER, now)
            return
        for first, receipts in tracker.resync(last):
            if first != at:
                self.request(c.Producer(self.producer, first), RequestKind.PRODUCER, now)
            self._resend(receipts)
            at = first + len(receipts)

    def _producer_refused(self, head: Request, why: Reason) -> None:
        """PRODUCER was refused: the id is another key's (final: :class:`ProducerFenced`),
        or the broker does not do exactly-once here (an older broker, no right to publish, a
        limit): publishing goes on at-least-once (the unconfirmed publishes are re-sent)."""
        if refusal_kind(why) is not None:
            self._fenced(why)
            return
        log.warning("zeps: the broker at %s refused PRODUCER (%s): publishing to stream %r is "
                    "at-least-once, not exactly-once", self.endpoint, why.text, self.stream)
        self.producer = None
        if head is self.producer_sync:
            self.producer_sync = None
            self.tracker.held_back = 0
            self._resend(self.tracker.unconfirmed)

    def _fenced(self, why: Reason) -> None:
        """Another client took this producer id over (or it is another key's): final."""
        if self.fatal is not None:                   # one INVALID per publish in flight
            return
        err = ProducerFenced(why.text, "PRODUCER", why.code, why.fields)
        log.warning("zeps: stream %r: exactly-once publishing stops: %s", self.stream, why.text)
        self.producer_sync = None
        self._fail(err)
