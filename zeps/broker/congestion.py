"""Congestion in the broker core: what happens to frames a client's full pipe did not take.

A mixin of :class:`~zeps.broker.core.BrokerCore`. The shell hands back every frame it could not
send (:meth:`Congestion.unsent`) and says when a batch is done (:meth:`Congestion.sent`). A
congested client gets no DELIVER until its backoff ends (it is historical: the journal replays
it), its replies wait in order in ``held``, and a client that holds more than ``max_held`` reads
nothing and is forgotten. DELIVERs of a peering that ended while they waited are :class:`_Stale`.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import Optional

from zeps.protocol.batch import DELIVER_BATCH_ID, batch_count
from zeps.protocol.deliver import DELIVER_ID, DELIVER_TS_ID
from zeps.protocol.headers import DELIVER_H_ID
from zeps.protocol.snapshot import SNAPSHOT_ENTRY_H_ID, SNAPSHOT_ENTRY_ID

from .session import ATTACHED, Session

_DELIVERS = (DELIVER_ID, DELIVER_TS_ID, DELIVER_BATCH_ID, DELIVER_H_ID, SNAPSHOT_ENTRY_ID,
             SNAPSHOT_ENTRY_H_ID)


class _Stale(bytes):
    """A DELIVER of a peering that ended while it waited in the outbox: still sent (it is the
    client's, in order), but if it cannot be, it is not the new peering's to replay."""
    __slots__ = ()



def behind_held(outbox, s: Session, frames) -> None:
    """``frames`` for ``s`` made outside its own commands (a group fsync's CONFIRM, a refusal
    released by it, the DETACH of a stream or consumer another client deleted): behind the
    replies it holds, if it holds any (it is congested). In the outbox, they went out before
    those once its pipe had room again, while its backoff still held them (found by review:
    the SDK, which fails its oldest unconfirmed publish on a refusal, took a refused publish
    for the confirmed one)."""
    if s.held:
        s.held.extend(frames)
    else:
        outbox.extend([(s.identity, f) for f in frames])


class Congestion:
    """Frames that did not go out, and the end of congestion (see the module docstring)."""

    def unsent(self, identity: bytes, frame: bytes, now: float) -> None:
        """The shell could not send ``frame``: the client's pipe is full (its send high-water
        mark). Called for that frame and every later frame for the same client in the batch.

        The client is congested until a backoff ends: no DELIVER is produced for it meanwhile
        (it is historical), and every reply to it waits behind the ones already held. A DELIVER
        goes back to the journal (the stream rewinds the client and returns the credit) unless
        its peering has ended; any other frame is held, in order, and sent when the congestion
        ends; a client holding more than ``max_held`` frames reads nothing and is forgotten."""
        if type(frame) is _Stale:
            return
        s = self.sessions.get(identity)
        if s is None:
            return
        st = self.streams.get(s.stream) if s.stream is not None else None
        self._recovering.pop(identity, None)   # its pipe is still full: the backoff grows
        if s.congested_until <= now:           # first failure of this batch: back off
            s.backoff = min(self.config.congestion_backoff_max,
                            s.backoff * 2 if s.backoff else self.config.congestion_backoff)
            s.congested_until = now + s.backoff
            self.congested[identity] = s
            heappush(self.congestion_ends, (s.congested_until, next(self._congestion_order),
                                            identity))
            if st is not None:
                st.pause(s)
        cid = frame[2]
        if cid == DELIVER_ID or cid == DELIVER_TS_ID or cid == DELIVER_BATCH_ID or cid == DELIVER_H_ID:
            # not a sign of life: it did not go out
            s.delivered -= batch_count(frame) if cid == DELIVER_BATCH_ID else 1
            if s.consumer is not None:
                self.consumer_unsent(s, frame)   # the consumer gives it again (consuming.py)
            elif st is not None:
                st.unsent(s, frame)
            return
        if cid == SNAPSHOT_ENTRY_ID or cid == SNAPSHOT_ENTRY_H_ID:
            self.snapshot_unsent(s, frame)       # taken back as a DELIVER is (snapshots.py)
            return
        s.held.append(frame)
        if len(s.held) > self.config.max_held:
            self.log("client_unresponsive_forgotten", client=identity.hex(), held=len(s.held))
            self.forget(identity)

    def _hold_replies(self, s: Session, mark: int) -> None:
        """Replies produced for a congested client since outbox position ``mark`` wait behind
        the ones it already holds (the same bound applies)."""
        out = self.outbox
        ident = s.identity
        if self._ended and self._ended[-1][1] > mark:
            self._mark_stale(mark)               # the positions past ``mark`` move below
        kept = []
        for entry in out[mark:]:
            if entry[0] == ident:
                s.held.append(entry[1])
            else:
                kept.append(entry)
        out[mark:] = kept
        if len(s.held) > self.config.max_held:
            self.log("client_unresponsive_forgotten", client=ident.hex(), held=len(s.held))
            self.forget(ident)

    def _tell(self, s: Session, frame: bytes) -> None:
        """``frame`` for ``s``, made outside its own commands: :func:`behind_held`."""
        behind_held(self.outbox, s, (frame,))

    def _end_peering(self, s: Session) -> None:
        """Its DELIVERs in the outbox so far belong to a peering that is over (see _Stale):
        noted with the outbox's length, and marked by one pass over the outbox when it is
        taken (:meth:`_mark_stale`). A pass per peering that ended cost a STREAM-DELETE of a
        stream with N clients O(N^2): each one's DETACH grew the outbox the next one looked
        through (8,000 clients: 5.6 s, every client waiting)."""
        self._ended.append((s.identity, len(self.outbox)))

    def _mark_stale(self, lo: int = 0) -> None:
        """Mark the DELIVERs of the peerings that ended (:meth:`_end_peering`) from outbox
        position ``lo`` on: one pass over ``outbox[lo:]`` whatever the number of them. With
        ``lo`` 0 (the outbox is taken) that is all of them; else (:meth:`_hold_replies` moves
        what follows ``lo``) those noted past ``lo`` are now noted at ``lo``, what is before
        it left for the pass that takes the outbox. The noted positions never decrease."""
        ended = self._ended
        k = len(ended)
        while k and ended[k - 1][1] > lo:
            k -= 1
        ends: dict = {}
        for ident, pos in ended[k:]:
            ends[ident] = pos                    # the latest is the highest
        if ends:
            out = self.outbox
            for i in range(lo, max(ends.values())):
                who, frame = out[i]
                end = ends.get(who)
                if end is not None and i < end and frame[2] in _DELIVERS:
                    out[i] = (who, _Stale(frame))
        if lo == 0:
            ended.clear()
        else:
            ended[k:] = [(ident, lo) for ident, _pos in ended[k:]]

    def congestion_deadline(self) -> Optional[float]:
        """When the next congestion ends (monotonic seconds), or None: the head of
        :attr:`congestion_ends` once the entries of clients no longer congested until then
        (forgotten, or congested again since) are dropped from it."""
        ends, congested = self.congestion_ends, self.congested
        while ends:
            until, _, ident = ends[0]
            s = congested.get(ident)
            if s is not None and s.congested_until == until:
                return until
            heappop(ends)
        return None

    def _uncongest(self, now: float) -> None:
        """End the congestions due at ``now``, in the order of their deadlines: a heap, so that
        a round's work does not grow with the clients that never read (issue 20: with 1,000 of
        them congested, a round of one PUBLISH cost 75 µs against 10 with none)."""
        ends = self.congestion_ends
        while True:
            until = self.congestion_deadline()
            if until is None or until > now:
                return
            ident = heappop(ends)[2]
            s = self.congested.pop(ident)
            s.congested_until = 0.0
            self._recovering[ident] = s
            if s.held:
                self.outbox.extend((ident, f) for f in s.held)
                s.held.clear()
            st = self.streams.get(s.stream) if s.stream is not None else None
            if st is not None:
                st.resume(s)
                if s.snapshot is not None:
                    self.snapshot_resume(s)
                if s.consumer is not None:
                    s.consumer.asleep = False
            elif s.state != ATTACHED:
                self._to_free.append(s)          # only held a DETACH-OK: free it once sent

