"""Publisher confirms, the client's part: the publishes awaiting CONFIRM and what each CONFIRM
resolves.

With ``confirms=True`` each publish's receipt (:mod:`zeps.clients.receipt`) waits in the
:class:`ConfirmTracker`'s :attr:`~ConfirmTracker.unconfirmed` queue, in publish order, until a
CONFIRM covers it; the receipt keeps the PUBLISH frame, which the peering re-sends after a
reconnect. A ``CONFIRM count sequence`` says "your first *count* publishes on this connection
are durable and the *count*-th got sequence *s*": the receipts it covers resolve in place, the
last one to ``sequence``, the earlier ones to consecutive sequences when the stream advanced by
exactly as many messages as this client published since the previous CONFIRM (or since the
*anchor*: the stream's last sequence before any publish of ours, asked after each ATTACH),
otherwise to None (durable, place not on the wire).

The tracker also numbers the publishes for exactly-once publishing (the *producer sequence*,
:mod:`zeps.clients.producer`): a CONFIRM covering publishes the broker already held (up to its
``PRODUCER-OK last``) resolves them as duplicates; after a re-ATTACH :meth:`ConfirmTracker.resync`
numbers the unconfirmed publishes again from the broker's answer, and says which to re-send in
which runs.

Pure: no sockets, no clock, no frames sent: the :class:`~zeps.clients.peering.Peering` owns one
tracker and does the sending.
"""
from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional, Tuple

from .producer import runs

__all__ = ["ConfirmTracker"]


class ConfirmTracker:
    """The publishes of one client awaiting CONFIRM, and the counts CONFIRMs are read with."""

    __slots__ = ("unconfirmed", "count", "last_confirmed", "anchor", "next_pseq", "held_back",
                 "producer_confirmed", "producer_last")

    def __init__(self):
        #: Receipts of the publishes not confirmed yet, oldest first (each keeps its frame).
        self.unconfirmed: Deque = deque()
        #: The broker's count of this connection's publishes it confirmed (CONFIRM's count).
        self.count = 0
        #: The sequence of the last message confirmed durable (0 if none yet).
        self.last_confirmed = 0
        #: The sequence of our ``count``-th publish on this connection (None: not known).
        self.anchor: Optional[int] = None
        #: The producer sequence of the next publish.
        self.next_pseq = 1
        #: The highest producer sequence the broker confirmed.
        self.producer_confirmed = 0
        #: The broker's last ``PRODUCER-OK``: up to it, a publish is a duplicate it had.
        self.producer_last = 0
        #: The oldest unconfirmed publishes the broker refused as out of order after a hole,
        #: kept to be re-sent once PRODUCER-OK comes (:meth:`hold_back`).
        self.held_back = 0

    def track(self, receipt) -> None:
        """A publish with confirms was handed to the socket: number it, keep its receipt."""
        receipt.pseq = self.next_pseq
        self.next_pseq += 1
        self.unconfirmed.append(receipt)

    def new_connection(self) -> None:
        """A new ATTACH: the broker counts this connection's publishes from 0."""
        self.count = 0
        self.anchor = None
        self.held_back = 0

    def hold_back(self) -> None:
        """The broker refused the next unconfirmed publish as out of order (after a hole): it
        stays, to be re-sent after the PRODUCER that answers it (:meth:`resync`), and the next
        refusal is of the publish after it."""
        self.held_back += 1

    def first_pseq(self) -> int:
        """The producer sequence the PRODUCER after an ATTACH names: the oldest unconfirmed
        publish's, or the next publish's."""
        return self.unconfirmed[0].pseq if self.unconfirmed else self.next_pseq

    def confirm(self, count: int, sequence: int) -> None:
        """A ``CONFIRM count sequence``: resolve the receipts it covers (see the module docs)."""
        n = count - self.count
        if n > 0:
            unconfirmed = self.unconfirmed
            k = min(n, len(unconfirmed))
            s = sequence
            if k and unconfirmed[0].pseq <= self.producer_last:
                self._confirm_with_duplicates(k, n, s)
            else:
                # Consecutive sequences are proven when the stream advanced by exactly n.
                # (Receipts are resolved in place, without a call each: this runs for every
                # message.)
                seq = s - k + 1 if self.anchor is not None and s - self.anchor == n else None
                for _ in range(k - 1):
                    r = unconfirmed.popleft()
                    r._outcome = seq
                    r.frame = None
                    if seq is not None:
                        seq += 1
                if k:
                    r = unconfirmed.popleft()
                    r._outcome = s if k == n else None
                    r.frame = None
                    self.producer_confirmed = r.pseq
                self.anchor = s
            self.count = count
        if sequence > self.last_confirmed:
            self.last_confirmed = sequence

    def _confirm_with_duplicates(self, k: int, n: int, s: int) -> None:
        """A CONFIRM covering publishes the broker already held (producer sequence up to its
        PRODUCER-OK): they are durable, stored earlier, under sequences not on the wire
        (None). A stored one gets ``s`` if it is the last covered; the stream position of
        this client's publishes is no longer known (no anchor) if the last was a duplicate."""
        unconfirmed = self.unconfirmed
        last_dup = self.producer_last
        for i in range(k):
            r = unconfirmed.popleft()
            r.duplicate = dup = r.pseq <= last_dup
            r._outcome = s if (i == k - 1 and k == n and not dup) else None
            r.frame = None
            if i == k - 1:
                self.anchor = None if dup else s
                if r.pseq > self.producer_confirmed:
                    self.producer_confirmed = r.pseq

    def reject_one(self, error: Exception) -> None:
        """The broker rejected one of the unconfirmed publishes (and does not count it): the
        oldest (past those held back: :meth:`hold_back`). The broker sends a confirming
        client's refusal after the CONFIRMs of the publishes it sent before it
        (zeps/broker/confirms.py), so those are resolved by then.
        (Which one it was is not on the wire: a guess by the frames' sizes failed a stored
        publish and confirmed the refused one in its place when the refusal came first.)"""
        unconfirmed, i = self.unconfirmed, self.held_back
        if i < len(unconfirmed):
            r = unconfirmed[i]
            del unconfirmed[i]
            r._fail(error)

    def fail_all(self, error: Exception) -> None:
        """Every unconfirmed publish fails with ``error`` (the peering is over, or the broker
        forgot the producer)."""
        self.held_back = 0
        while self.unconfirmed:
            self.unconfirmed.popleft()._fail(error)

    def forgotten(self, last: int) -> bool:
        """The broker's ``PRODUCER-OK last`` is below a producer sequence it already confirmed:
        it forgot this producer."""
        return last < self.producer_confirmed

    def restart(self, last: int, error: Exception) -> None:
        """The broker forgot this producer (:meth:`forgotten`): the unconfirmed publishes may or
        may not be stored, so they fail with ``error`` instead of being re-sent, and the next
        publishes are numbered from ``last + 1``."""
        self.fail_all(error)
        self.producer_confirmed = self.producer_last = last
        self.next_pseq = last + 1

    def resync(self, last: int) -> List[Tuple[int, list]]:
        """The broker holds this producer's publishes up to ``last`` (``PRODUCER-OK``): the
        unconfirmed publishes up to it keep their numbers (duplicates: the broker confirms them
        without storing them again); the others are numbered again from ``last + 1`` (a
        peering may not start past it). Returns the runs to re-send, in order: ``[(first
        producer sequence, [receipts]), ...]`` (the last run may be empty: it then says where
        the next publish's number starts)."""
        self.producer_last = last
        self.held_back = 0
        unconfirmed = self.unconfirmed
        k = 0
        while k < len(unconfirmed) and unconfirmed[k].pseq <= last:
            k += 1
        dups, new = list(unconfirmed)[:k], list(unconfirmed)[k:]
        for i, r in enumerate(new):                   # the broker holds none of them
            r.pseq = last + 1 + i
        if new:
            self.next_pseq = last + 1 + len(new)
        elif self.next_pseq > last + 1:
            self.next_pseq = last + 1
        return runs(dups) + [(self.next_pseq - len(new), new)]

