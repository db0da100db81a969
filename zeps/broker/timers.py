"""The broker core's timers: expiry of silent clients, retention, compaction checks, the
group-fsync schedule.

A mixin of :class:`~zeps.broker.core.BrokerCore`. No clock of its own: the shell calls
:meth:`Timers.tick` with the time and waits until :meth:`Timers.next_deadline`. Expiry,
retention and the compaction check visit the sessions and the open streams in slices
(:mod:`zeps.broker.sweeps`): a round's timer work does not grow with what the broker holds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from .confirms import fail_unconfirmed, sync_refusal
from .groups import SAVE_INTERVAL
from .session import DETACH_FRAME

if TYPE_CHECKING:
    from .stream import Stream

#: Sessions an expiry slice visits (each a look at its last sign of life).
EXPIRY_SLICE = 1000
#: Open streams a retention slice visits (each a look at its oldest segment's age and size),
#: and a compaction check's (each a look at its settings, and its segments if compacted).
RETENTION_SLICE = COMPACTION_SLICE = 100


class Timers:
    """``tick(now)`` runs what is due and names the streams to fsync (see the module docstring)."""

    def next_deadline(self) -> float:
        """When :meth:`tick` next has work (monotonic seconds)."""
        nxt = min(self._expiry_sweep.next_at, self._retention_sweep.next_at,
                  self._compaction_sweep.next_at)
        if self.config.fsync == "interval":
            nxt = min(nxt, self._next_sync)
        ends = self.congestion_deadline() if self.congested else None
        if ends is not None:
            nxt = min(nxt, ends)
        if self.consumers:
            nxt = min(nxt, self._next_consumer_tick)
        return nxt

    def tick(self, now: float) -> List[Stream]:
        """Run the timers that are due at ``now`` — expiry of silent clients, retention — and
        return the streams whose journals the shell should fsync now (``fsync=interval``: every
        ``fsync_interval`` seconds, the streams with unsynced records). After syncing them the
        shell calls :meth:`confirm`."""
        if now >= self._expiry_sweep.next_at:
            passes = self._expiry_sweep.passes
            self.expire(now)
            if self._expiry_sweep.passes != passes:     # once an expiry period
                self._log_bad_frames()
        if now >= self._retention_sweep.next_at:
            self._retention(now)
        if self.consumers and now >= self._next_consumer_tick:
            self._next_consumer_tick = now + SAVE_INTERVAL
            self.consumer_timers(now)
        if now >= self._compaction_sweep.next_at:
            self.check_compaction(now)
        if self.config.fsync != "interval" or now < self._next_sync:
            return []
        self._next_sync = now + self.config.fsync_interval
        due = []                        # the streams appended to since they were last durable
        unsynced, streams = self.work.unsynced, self.streams
        for name, st in list(unsynced.items()):
            journal = st.journal             # a failed sync is final: not tried again
            if (streams.get(name) is st and journal.durable_seq < journal.last_seq
                    and journal.sync_error is None):
                due.append(st)
            else:
                del unsynced[name]
        return due

    def _log_bad_frames(self) -> None:
        for ident, n in self.bad_frames.items():
            if n:
                self.log("invalid_frames", client=ident.hex(), more=n)
        if self.bad_frames_other:
            self.log("invalid_frames", clients="others", more=self.bad_frames_other)
        self.bad_frames.clear()
        self.bad_frames_other = 0

    def sync_failed(self, stream: Stream, exc: Exception) -> None:
        """A stream's fsync failed: final for this opening of it (zeps/journal/durability.py),
        so its publishes awaiting CONFIRM are refused, not known durable; other streams go on."""
        self.log("fsync_failed", stream=stream.name, error=str(exc))
        fail_unconfirmed(stream, sync_refusal(exc))

    def _retention(self, now: float) -> None:
        """Apply retention to the open streams of the slice due (each a stream's journal
        dropping its segments past the stream's limits)."""
        job = self.compacting
        streams = self.streams
        for name in self._retention_sweep.take(now, streams.keys):
            st = streams.get(name)
            if st is None:
                continue             # closed since its pass started
            if job is not None and job.stream == st.name:
                continue             # its segments are being rewritten: the next pass
            try:
                dropped = st.journal.apply_retention()
            except Exception as exc:       # one stream's failure is that stream's
                self.log("retention_failed", stream=st.name, error=str(exc))
                continue
            if dropped:
                self.log("retention", stream=st.name, segments_deleted=dropped,
                         first_seq=st.journal.first_seq)

    def expire(self, now: float) -> List[bytes]:
        """Forget the clients of the slice due (:attr:`_expiry_sweep`: each session once an
        ``expiry_check``) silent for longer than the expiry, telling each with DETACH; return
        their identities. Deliveries the client took since the last check count as a sign of
        life (its pipe was not full, so it reads)."""
        limit = now - self.config.expiry
        gone = []
        sessions = self.sessions
        for ident in self._expiry_sweep.take(now, sessions.keys):
            s = sessions.get(ident)
            if s is None:
                continue                       # forgotten since its pass started
            if s.delivered != s.delivered_seen:
                s.delivered_seen = s.delivered
                if not s.congested_until:
                    s.last_seen = max(s.last_seen, now - self.config.expiry_check)
            if s.last_seen < limit:
                gone.append(ident)
        for ident in gone:
            congested = self.sessions[ident].congested_until
            self.forget(ident)
            if not congested:                  # a full pipe would not take it anyway
                self.outbox.append((ident, DETACH_FRAME))
            self.log("client_expired", client=ident.hex())
        return gone

