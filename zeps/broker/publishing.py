"""Publishing: the PUBLISH, PUBLISH-BATCH and PRODUCER handlers of the broker core, and their
checks — rights first, then the body limits (the stream's ``max_message`` below the broker's), a
PUBLISH-BATCH judged by its head before one entry is walked, and an idempotent producer's
refusals (fenced, out of order, sequences past 2^64-1). An accepted publish is queued on its
stream (:meth:`Stream.publish`), which the round appends and routes.

A mixin of :class:`~zeps.broker.core.BrokerCore`, as the other handlers' files are.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from zeps.journal.record import MAX_PSEQ
from zeps.protocol import commands as c, encode
from zeps.protocol.batch import (MAX_BATCH_ENTRIES, MIN_ENTRY, PUBLISH_HEAD, PUBLISH_HEAD_SIZE,
                                 entry_body)
from zeps.protocol.reasons import Reason

from .confirms import refuse
from .session import ATTACHED, Session

if TYPE_CHECKING:
    from .stream import Stream


def _pseq_exhausted(pseq: int) -> str:
    """Why a PUBLISH of an idempotent producer is refused when its producer sequence ``pseq``
    is past what a journal record can hold (a PRODUCER ``next`` near 2^64-1)."""
    return (f"producer sequence {pseq} is over 2^64-1 (PRODUCER with a lower next, or a new "
            f"producer id)")


class Publishing:
    """The publishing handlers (see the module docstring)."""

    def _batch_refused(self, identity: bytes, frame: bytes) -> bool:
        """A PUBLISH-BATCH is judged by its head before one entry is walked: its size against
        ``max_batch``, its count against :data:`MAX_BATCH_ENTRIES` and what the entries' bytes
        can hold, and the sender's state (attached) — each refused with *one* INVALID, whatever
        the count claims. So parsing costs at most one ``max_batch`` frame of at most
        ``MAX_BATCH_ENTRIES`` entries, and only for an attached client. To a confirming
        client the INVALID comes after the CONFIRMs of the publishes before it
        (:meth:`_refuse_in_order`)."""
        size = len(frame) - PUBLISH_HEAD_SIZE
        if size + PUBLISH_HEAD_SIZE > self.config.max_batch:
            why = (f"PUBLISH-BATCH of {len(frame)} bytes is over the broker's limit of "
                   f"{self.config.max_batch} (BATCH-SELECT-OK)")
        elif size < 0:
            return False                                  # the codec says why
        else:
            count = PUBLISH_HEAD.unpack_from(frame)[2]
            s = self.sessions.get(identity)
            if s is None or s.state is not ATTACHED:
                self._invalid(identity, Reason.not_attached("PUBLISH-BATCH"))
                return True
            if count > MAX_BATCH_ENTRIES:
                why = f"PUBLISH-BATCH of {count} entries is over the limit of {MAX_BATCH_ENTRIES}"
            elif count * MIN_ENTRY > size:
                why = f"PUBLISH-BATCH: {count} entries cannot fit in {size} bytes"
            else:
                return False
        s = self.sessions.get(identity)
        if s is not None and s.confirms and s.state is ATTACHED:
            self._refuse_in_order(s, Reason.publish_rejected(why))   # after its CONFIRMs
        else:
            self._invalid(identity, Reason.publish_rejected(why))
        self._note_bad_frame(identity, why)
        return True

    def _on_publish(self, s: Session, cmd: c.Publish) -> None:
        if not s.may_publish:
            self._reject(s, Reason.not_allowed(self.acl.who(s.user), "publish", s.stream))
            return
        stream = self.streams[s.stream]
        limit, whose = self._body_limit(stream)
        if len(cmd.body) > limit:
            self._reject(s, f"body of {len(cmd.body)} bytes is over the {whose}'s limit of {limit}")
            return
        self._queue_publish(s, stream, cmd.key, cmd.body)

    def _queue_publish(self, s: Session, stream: Stream, key: str, body) -> None:
        """The end of a PUBLISH or PUBLISH-H whose rights and size were checked: an idempotent
        producer's refusal (fenced, out of order, sequences exhausted), else queued on
        ``stream`` (``body``: bytes, or the PUBLISH-H's ``Headed``)."""
        if s.producer is not None:
            why = self._producer_refusal(s, 1)
            if why is not None:
                self._reject(s, why)
                return
        self.queued += 1
        stream.publish(s, key, body)

    def _on_publish_batch(self, s: Session, cmd: c.PublishBatch) -> None:
        """Each entry counts as one PUBLISH (its size and count were checked before it was
        parsed: :meth:`_batch_refused`): a refused batch gets one INVALID per entry, and a
        PRODUCER peering's entries take one producer sequence each. An accepted batch is queued
        whole (journalled as one batch record, with its first producer sequence if any)."""
        stream = self.streams[s.stream]
        n = cmd.count
        why = None
        if not s.may_publish:
            why = Reason.not_allowed(self.acl.who(s.user), "publish", s.stream)
        elif s.producer is not None and (refused := self._producer_refusal(s, n)) is not None:
            why = refused
        else:
            limit, whose = self._body_limit(stream)
            # No body can be longer than the entries less the 5 fixed bytes of each entry.
            if len(cmd.entries) - 5 * n > limit:
                for i in range(n):
                    size = len(entry_body(cmd.entries, cmd.offsets[i]))
                    if size > limit:
                        why = (f"entry {i} of the batch: body of {size} bytes is over the "
                               f"{whose}'s limit of {limit}")
                        break
        if why is not None:
            for _ in range(n):
                self._reject(s, why)
            return
        self.queued += n
        stream.publish_batch(s, cmd)

    def _body_limit(self, stream: Stream):
        """The largest body ``stream`` takes and whose limit it is: the stream's own
        ``max_message`` where it is set and lower than the broker's ``--max-message``, else the
        broker's (a stream never takes more than the broker reads)."""
        own, broker = stream.max_message, self.config.max_message
        return (own, "stream") if 0 < own < broker else (broker, "broker")

    def _reject(self, s: Session, why: Reason | str) -> None:
        """One INVALID for a PUBLISH not stored; it still uses up its producer sequence, as every
        PUBLISH after PRODUCER does (the client numbers them all), and the peering's later ones
        are refused until its next PRODUCER (:meth:`ProducerDedup.refused
        <zeps.broker.dedup.ProducerDedup.refused>`). To a confirming session it comes after the
        CONFIRMs of the publishes before it (:mod:`.confirms`)."""
        stream = self.streams[s.stream]
        if s.producer is not None:
            s.pseq_next += 1
            stream.dedup.refused(s)                   # no hole: later ones wait for PRODUCER
        if not s.confirms:
            self._invalid(s.identity, Reason.publish_rejected(why))
            return
        self._refuse_in_order(s, Reason.publish_rejected(why))

    def _refuse_in_order(self, s: Session, reason: Reason) -> None:
        """The refusal of a confirming session's publish: after the CONFIRMs of those before
        it (:mod:`.confirms`), the round's queued publishes appended first."""
        stream = self.streams[s.stream]
        if stream.queued_publishes:                   # what came before it is appended first
            stream.append_queued()
        self.invalids[reason.label] += 1
        refuse(stream, s, reason.frame(s.reasons))

    def _on_producer(self, s: Session, cmd: c.Producer) -> None:
        """Rights first (a client that may not publish has no use for a producer id), then the
        connection's limit of distinct ids (one client cannot fill the stream's producer table
        or evict others' state), then the stream's O(1) registration: binding, fencing, the
        out-of-order check (``Stream.register_producer``)."""
        if not s.may_publish:
            self._invalid(s.identity, Reason.not_allowed(self.acl.who(s.user), "publish", s.stream))
            return
        if not cmd.producer or cmd.next < 1:
            self._invalid(s.identity, "PRODUCER needs a producer id and a sequence from 1")
            return
        ids = s.producer_ids
        if cmd.producer not in ids and len(ids) >= self.config.max_producer_ids:
            self._invalid(s.identity, Reason.limit("max_producer_ids", self.config.max_producer_ids))
            return
        why, last = self.streams[s.stream].register_producer(s, cmd.producer, cmd.next)
        if why is not None:
            self._invalid(s.identity, why)
            return
        ids.add(cmd.producer)
        self.outbox.append((s.identity, encode(c.ProducerOk(last))))

    @staticmethod
    def _producer_refusal(s: Session, n: int):
        """Why the next ``n`` publishes of a PRODUCER peering are refused (fenced, out of
        order, or producer sequences past 2^64-1), or None."""
        if s.producer_refusal is not None:
            return s.producer_refusal
        if s.pseq_next + n - 1 > MAX_PSEQ:
            return _pseq_exhausted(s.pseq_next + n - 1)
        return None
