"""Idempotent producers inside one stream: who owns each producer id, the producer sequences of
the publishes queued this round, and the split of a round's publishes into new ones and
duplicates (retries of what the stream holds, which are confirmed but not stored again).

Pure logic over the stream's :class:`zeps.journal.Journal` (its producer state, O(1) per
lookup); no sockets. :class:`~zeps.broker.stream.Stream` owns one :class:`ProducerDedup` and
asks it on PRODUCER, on each publish, and when it appends the queued publishes.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from zeps.protocol.reasons import Reason

from .batching import batch_tail
from .confirms import refuse
from .session import Session


#: Ids in use a new id of a key passes over before it is refused (dedup._room_for).
IN_USE_LOOKS = 64


class Duplicate(NamedTuple):
    """``count`` messages ``publisher`` queued that its producer had already stored (a retry),
    queued just before kept publish ``before`` (an index into the kept publishes).

    They are confirmed at the stream sequence of the producer's last stored message: ``stored``
    when the journal holds that message, or, when it is one kept in this same round (a retry
    queued along with its original), the last message of kept publish ``same_round`` (its
    sequence is known once appended; ``stored`` is then None). The second case is kept for
    safety: a PRODUCER appends what its id queued before it answers
    (:meth:`~zeps.broker.stream.Stream.register_producer`), so within one round an id's
    producer sequences only go up."""
    publisher: Session
    count: int
    before: int
    stored: Optional[int]
    same_round: Optional[int]

    def sequence(self, last_seqs: List[int]) -> int:
        """The stream sequence the confirm names (``last_seqs[i]``: the last sequence of kept
        publish ``i``, once appended)."""
        return self.stored if self.same_round is None else last_seqs[self.same_round]


class ProducerDedup:
    """The idempotent producers of one stream (PRODUCER, docs/protocol.md).

    ``owners``: producer id -> the session of its newest PRODUCER on this stream;
    ``duplicates_total``: producer retries not stored again, since the stream was opened."""

    def __init__(self, journal, max_per_key: int = 1000):
        self.journal = journal
        self.max_per_key = max_per_key
        self.owners: Dict[str, Session] = {}
        self.duplicates_total = 0
        self._marks: Dict[int, Tuple[str, int]] = {}   # queued publish index -> (producer, pseq)
        self._queued: set = set()                       # producer ids with publishes queued

    # ------------------------------------------------------------------ PRODUCER
    def last(self, producer: str) -> int:
        """The highest producer sequence the stream holds for ``producer`` (0: none). O(1)."""
        e = self.journal.producer(producer)
        return 0 if e is None else e[0]

    def has_queued(self, producer: str) -> bool:
        """Whether ``producer`` has publishes queued this round (not appended yet)."""
        return producer in self._queued

    def register(self, session: Session, producer: str,
                 first: int) -> Tuple[Optional[Reason], int]:
        """PRODUCER ``producer first`` from ``session``, once the publishes ``producer`` has
        queued are appended (see :meth:`Stream.register_producer`): ``(refusal, last)``."""
        entry = self.journal.producer(producer)
        owners = self.owners
        owner = owners.get(producer)
        user = session.user
        if user is not None and ((owner is not None and owner is not session
                                  and owner.user != user)
                                 or (entry is not None and entry[3] is not None
                                     and entry[3] != user)):
            return Reason.producer_bound(producer, f"key {user}"), 0
        if user is not None and entry is None and owner is None:
            refusal = self._room_for(user)
            if refusal is not None:
                return refusal, 0
        if owner is not None and owner is not session:
            owner.producer_refusal = Reason.producer_fenced(producer)
        old = session.producer
        if old is not None and old != producer and owners.get(old) is session:
            del owners[old]
        owners[producer] = session
        last = 0 if entry is None else entry[0]
        session.producer = producer
        session.pseq_next = first
        session.producer_refusal = (Reason.producer_out_of_order(producer, last, first)
                                    if first > last + 1 else None)
        return None, last

    def _room_for(self, user: str) -> Optional[Reason]:
        """A new id for key ``user``: beyond ``max_per_key`` ids bound to that key, the key's
        least recently used one is forgotten, so one key's ids never push out another's (the
        journal keeps ``max_producers`` ids in all, least recently used dropped: a key that
        reconnected to pass the per-connection limit evicted every other producer's state).
        An id a peering owns now, or with publishes queued this round, is in use: it goes to
        the back of the key's order and the next is looked at (one idle owner refused every
        new id of its key), up to :data:`IN_USE_LOOKS` of them; past that, refused (``limit:
        max_producer_ids_per_key``). O(1) each."""
        journal = self.journal
        count, oldest = journal.producers_bound_to(user)
        if count < self.max_per_key:
            return None
        for _ in range(min(count, IN_USE_LOOKS)):
            if oldest not in self.owners and oldest not in self._queued:
                journal.forget_producer(oldest)
                return None
            journal.producer_in_use(user, oldest)
            oldest = journal.producers_bound_to(user)[1]
        return Reason.limit("max_producer_ids_per_key", self.max_per_key)

    def refused(self, session: Session) -> None:
        """One of ``session``'s publishes was refused (not stored), after it took its producer
        sequence: a hole. A later publish stored above it would make the refused one look stored
        to a client that re-attached before it read the refusal (PRODUCER-OK names the highest
        stored: it resolved as a duplicate; found by review). So, as Kafka's broker wants
        consecutive sequences, the peering's later publishes are refused as out of order until
        a PRODUCER from ``last + 1`` or below (the SDK re-attaches)."""
        if session.producer is not None and session.producer_refusal is None:
            session.producer_refusal = Reason.producer_out_of_order(
                session.producer, self.last(session.producer), session.pseq_next)

    def forget(self, session: Session) -> None:
        """The session leaves the stream: it owns its producer id no more."""
        if session.producer is not None and self.owners.get(session.producer) is session:
            del self.owners[session.producer]

    # ------------------------------------------------------------------ the queued publishes
    def queue(self, session: Session, index: int, count: int) -> None:
        """Queued publish ``index`` of ``count`` messages from ``session`` (whose peering has a
        producer id) takes the peering's next ``count`` producer sequences."""
        producer = session.producer
        self._marks[index] = (producer, session.pseq_next)
        self._queued.add(producer)
        session.pseq_next += count

    @property
    def marked(self) -> bool:
        """Are producer sequences marked on publishes queued this round (for :meth:`split`)?"""
        return bool(self._marks)

    def split(self, pending) -> Tuple[list, Optional[list], List[Duplicate]]:
        """Split a round's queued publishes (``(publisher, key, body)``; ``key`` None: ``body``
        is a PUBLISH-BATCH) into those to append and the duplicates.

        Returns ``(keep, producers, dups)``: ``keep``, the publishes to append; ``producers``
        parallel to it, each None or ``(producer id, pseq of its first message)`` (None instead
        of the list when no publish of the round has a producer); ``dups``, the
        :class:`Duplicate` s in queue order. A batch whose first entries only are duplicates
        keeps the rest: its entries sliced at the entry offsets (not re-encoded), with the first
        new producer sequence."""
        marks, self._marks = self._marks, {}
        self._queued.clear()
        if not marks:
            return pending, None, []
        # this round's state over the journal's (O(1) each):
        # producer -> (last pseq, its stored sequence or None, or the kept index holding it)
        state: Dict[str, Tuple[int, Optional[int], Optional[int]]] = {}
        lookup = self.journal.producer
        keep, producers, dups = [], [], []
        for i, entry in enumerate(pending):
            mark = marks.get(i)
            if mark is not None:
                pid, pseq = mark
                pub, key, body = entry
                n = 1 if key is not None else body.count
                known = state.get(pid)
                if known is None:
                    e = lookup(pid)
                    known = (0, 0, None) if e is None else (e[0], e[1], None)
                last_pseq, stored, same_round = known
                if pseq <= last_pseq:                  # a retry of what the stream holds
                    dup = min(n, last_pseq - pseq + 1)
                    dups.append(Duplicate(pub, dup, len(keep), stored, same_round))
                    self.duplicates_total += dup
                    if dup == n:
                        continue
                    entry = (pub, None, batch_tail(body, dup))
                    mark = (pid, pseq + dup)
                state[pid] = (pseq + n - 1, None, len(keep))   # stored by this kept publish
            keep.append(entry)
            producers.append(mark)
        return keep, producers, dups


def count_duplicates(stream, dups, upto: int, last_seqs, refused: Optional[Reason] = None) -> int:
    """In ``stream``'s round, count and queue the confirms of the duplicates
    (:class:`Duplicate`) of ``dups`` that came before kept publish ``upto`` (``last_seqs[i]``:
    the last sequence of kept publish ``i``, once appended); returns how many of ``dups`` are
    done. With ``refused`` (a Reason: the append failed), a duplicate of a publish of this
    round is refused with it instead."""
    done = 0
    for dup in dups:
        if dup.before > upto:
            break
        done += 1
        pub, n = dup.publisher, dup.count
        if dup.same_round is not None and refused is not None:
            if pub.identity in stream.sessions:
                refuse(stream, pub, refused.frame(pub.reasons), n)
                stream.invalids[refused.label] += n
            continue
        stream.count_stored(pub, n, dup.sequence(last_seqs))
    return done
