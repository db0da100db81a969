"""One stream inside the broker: sequencing, live routing, journal replay and the switch between them.

Pure logic over a :class:`zeps.journal.Journal`; no sockets. Frames to send are appended to an
``outbox`` list of ``(identity, frame)`` that the I/O shell drains.

Live and historical
-------------------
A published message is appended to the journal first (one ``append_batch`` per batch of
publishes) and only then routed: every *live* subscriber whose patterns match and who has credit
for it is sent the very bytes the journal wrote (the record's DELIVER frame: encoded once). A live
subscriber without credit for it drops to *historical*: the stream keeps only its ``next_seq``.

When a historical subscriber has credit, :meth:`Stream.pump` feeds it from the journal in batches
(``read_batch``), filtering by its patterns, until it reaches the journal head; at that moment,
within the same step (nothing can be appended in between: the broker is one greenlet doing one
thing at a time), it is switched back to live. Sequences a client receives therefore strictly
increase with no gap and no duplicate, and the broker holds O(1) state per slow subscriber.

Congestion
----------
Credit is a client's promise; the broker does not rely on it. When the I/O shell cannot send a
DELIVER because the client's pipe is full, :meth:`Stream.unsent` takes the message back: the
credit it used is returned, the client drops to historical at that sequence (as if it had run out
of credit), and the journal replays it once the client reads again. What the broker holds for a
client that never reads is therefore its pipe (bounded by the socket's send high-water mark) and
its position, whatever credit it granted.

Replay cost
-----------
A replay step reads at most what the client's credit can take (each delivered message costs at
least :data:`MIN_COST` bytes), so a client granting tiny credit over and over (``CREDIT 1`` in a
loop) costs one small read per grant, not a 1,000-record batch.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, List, Optional, Tuple

from zeps.protocol import commands as c, deliver_ts_from_deliver, encode

from zeps.protocol.batch import DELIVER_HEAD_SIZE, batch_cost, batch_first_seq, is_batch_frame
from zeps.protocol.deliver import DELIVER_TS_ID, OVERHEAD, TS_SHIFT, frame_cost, sequence_of
from zeps.protocol.headers import DELIVER_H_ID, deliver_h_cost, deliver_h_sequence
from zeps.protocol.reasons import Reason

from zeps.journal.settings import StreamSettings

from .batching import BatchView, Runs, batch_of_one, replay_chunks, route_batch, split_batch
from .confirms import confirm, refuse
from .dedup import ProducerDedup, count_duplicates
from .headers import journal_item, replay_frame, route_headers
from .liveset import LiveSet
from .lone import append_lone, is_lone
from .session import Session
from .worklists import Worklists

Outbox = List[Tuple[bytes, bytes]]

#: The least credit any message costs (empty key and body: the sequence and key length).
MIN_COST = 9
#: A stream's traffic counters (since it was opened): messages appended, DELIVERs produced,
#: and their bytes as ZEPS/1 counts credit (sequence, key and body: ``frame_cost``).
COUNTERS = ("published_total", "delivered_total", "published_bytes", "delivered_bytes")


def unsent_position(frame: bytes) -> Tuple[int, int]:
    """(first sequence, credit cost) of a DELIVER, DELIVER-TS, DELIVER-H or DELIVER-BATCH
    frame the shell could not send."""
    if is_batch_frame(frame):
        return batch_first_seq(frame), batch_cost(frame)
    if frame[2] == DELIVER_H_ID:
        return deliver_h_sequence(frame), deliver_h_cost(frame)
    shift = TS_SHIFT if frame[2] == DELIVER_TS_ID else 0
    return sequence_of(frame, shift), len(frame) - OVERHEAD - shift


class Stream:
    def __init__(self, name: str, journal, outbox: Outbox, *,
                 replay_batch_records: int = 1000, replay_batch_bytes: int = 1 << 20,
                 regex_strikes: int = 3, log: Optional[Callable[..., None]] = None,
                 invalids: Optional[Counter] = None, settings=None,
                 work: Optional[Worklists] = None, max_producer_ids_per_key: int = 1000):
        from zeps.matching import SubscriptionIndex

        self.name = name
        self.journal = journal
        self.outbox = outbox
        self.replay_batch_records = replay_batch_records
        self.replay_batch_bytes = replay_batch_bytes
        self.log = log or (lambda *a, **k: None)
        self.settings = settings or StreamSettings()
        self.purged_to = self.settings.purged_to
        self.regex_strike_limit = regex_strikes
        self.regex_strikes: Dict[str, int] = {}     # regex text -> timeouts so far
        self.bad_regexes: List[str] = []            # struck out: removed after the current step
        self.sessions: Dict[bytes, Session] = {}
        self.index = SubscriptionIndex()
        self.live_set = LiveSet()       # routing visits a key's matches that are live (liveset.py)
        self.catching_up: Dict[bytes, Session] = {}   # historical, with credit: pump feeds them
        self.confirming: Dict[bytes, Session] = {}    # sessions with unconfirmed publishes
        # ... of which those that waited for more since the last look (confirm()), and the
        # durable sequence the last look at them all saw
        self.confirm_fresh: Dict[bytes, Session] = {}
        self.confirmed_at = -1
        self.queued_publishes: List[Tuple[Session, str, bytes]] = []   # publishes not yet appended
        # the core's lists of streams with work (worklists.py), shared by its streams
        self.work = Worklists() if work is None else work
        self.dedup = ProducerDedup(journal, max_producer_ids_per_key)   # idempotent producers
        self.published_total = self.delivered_total = 0
        self.published_bytes = self.delivered_bytes = 0
        self.invalids = Counter() if invalids is None else invalids   # by reasons.label (shared)

    # ------------------------------------------------------------------ membership
    def attach(self, session: Session) -> None:
        """The client joins this stream with a fresh peering (the ATTACH transition)."""
        session.attached(self.name)
        self.sessions[session.identity] = session

    def detach(self, session: Session) -> None:
        """The client leaves (DETACH, expiry, or its connection is gone): undo everything this
        stream holds for it — index entries, replay and confirm queues — *then* reset the
        session, so nothing of the old peering can reach a later ATTACH on the same connection."""
        ident = session.identity
        if self.queued_publishes:
            self.append_queued()
        self.go_historical(session)
        for pattern, _start in session.subscriptions:
            self.index.remove(ident, pattern)
        self.sessions.pop(ident, None)
        self.catching_up.pop(ident, None)
        self.confirming.pop(ident, None)
        self.confirm_fresh.pop(ident, None)
        self.dedup.forget(session)
        if session.consumer is not None:       # a consumer's member: what it held goes again
            g = session.consumer
            if g.leave(ident):
                g.asleep = False
        session.detached()

    def unsubscribe_all(self, session: Session) -> None:
        """Remove every pattern of a client (it stays attached, with its position)."""
        self.go_historical(session)
        for pattern, _start in session.subscriptions:
            self.index.remove(session.identity, pattern)
        session.subscriptions = []
        session.future_start = 0
        session.next_seq = 0
        self.catching_up.pop(session.identity, None)

    # ------------------------------------------------------------------ subscribe / credit
    def start_of(self, latest: int) -> int:
        """The first sequence a SUBSCRIBE with this ``latest`` asks for."""
        j = self.journal
        if latest == c.LATEST_LIVE:
            return j.next_seq
        return max(latest + 1, self.first_seq)

    @property
    def max_message(self) -> int:
        """The stream's own largest message, or 0 for the broker's."""
        return self.settings.max_message

    def purged(self, settings) -> None:
        """After a purge: nobody is served at or below ``purged_to`` again."""
        self.settings = settings
        self.purged_to = settings.purged_to
        for s in self.sessions.values():
            if s.subscribed and s.next_seq <= self.purged_to:
                s.next_seq = self.purged_to + 1

    @property
    def first_seq(self) -> int:
        """The first sequence served: the journal's first kept, and above any purge."""
        return max(self.journal.first_seq, self.purged_to + 1)

    def subscribe(self, session: Session, pattern, latest: int) -> None:
        """Add a subscription and answer SUBSCRIBE-OK (before any DELIVER it causes)."""
        if self.queued_publishes:
            self.append_queued()
        start = self.start_of(latest)
        if session.subscribed:
            # One position per client: a new pattern never rewinds it (docs/protocol.md).
            position = max(session.next_seq, self.journal.next_seq) if session.live else session.next_seq
            start = max(start, position)
        first = not session.subscribed
        session.add_subscription(pattern, start)
        self.index.add(session.identity, pattern)
        self.outbox.append((session.identity, encode(c.SubscribeOk())))
        if first:
            if start >= self.journal.next_seq and not session.congested_until:
                self.go_live(session)
            else:
                self.go_historical(session)
                self.resume(session)

    def credit(self, session: Session, amount: int) -> None:
        session.credit += amount
        if session.credit > session.credit_peak:
            session.credit_peak = session.credit
        self.resume(session)

    # ------------------------------------------------------------------ regex isolation
    def regex_timed_out(self, text: str, key: str) -> None:
        """A regex match ran out of time (called from inside matching). After
        ``regex_strikes`` timeouts the pattern is removed from every client that has it, with
        INVALID, once the current routing or replay step is over (see :meth:`_drop_bad_regexes`)."""
        n = self.regex_strikes.get(text, 0) + 1
        self.regex_strikes[text] = n
        self.log("regex_timeout", stream=self.name, pattern=text, key=key[:64], strikes=n)
        if n == self.regex_strike_limit:
            self.bad_regexes.append(text)

    def _drop_bad_regexes(self) -> None:
        bad, self.bad_regexes = self.bad_regexes, []
        for text in bad:
            self.regex_strikes.pop(text, None)
            reason = Reason.pattern_removed(text, self.regex_strike_limit)
            kind = reason.label
            for s in self.sessions.values():
                for p, _start in s.subscriptions:
                    if p.text == text:
                        self.index.remove(s.identity, p)
                        s.remove_pattern(text)
                        self.outbox.append((s.identity, reason.frame(s.reasons)))
                        self.invalids[kind] += 1
                        break

    def resume(self, session: Session) -> None:
        """Queue a historical client for replay if it can take a message and is not congested."""
        if (session.subscribed and not session.live and session.credit >= MIN_COST
                and not session.congested_until):
            if not self.catching_up:
                self.work.replays[self.name] = self
            self.catching_up[session.identity] = session

    def go_live(self, s: Session) -> None:
        """``s`` is live from here on: routing visits it (O(1), whatever its patterns)."""
        s.live = True
        self.live_set.add(s.identity)

    def go_historical(self, s: Session) -> None:
        """``s`` is no longer live (it keeps its position): routing no longer visits it."""
        s.live = False
        self.live_set.discard(s.identity)

    def pause(self, session: Session) -> None:
        """The client is congested: produce no DELIVER for it (its position stays) until the
        core ends the congestion and calls :meth:`resume`."""
        self.go_historical(session)
        self.catching_up.pop(session.identity, None)

    def unsent(self, session: Session, frame: bytes) -> None:
        """The shell could not send this DELIVER (the client's pipe is full): take it back.

        The credit it used is returned and the client drops to historical at its sequence (the
        lowest unsent one, when several of a round's frames come back). The core calls this for
        every unsent DELIVER of the client, in outbox order, and sets the congestion deadline."""
        seq, cost = unsent_position(frame)
        if self.sessions.get(session.identity) is not session or not session.subscribed:
            return
        session.credit += cost
        if session.live or seq < session.next_seq:
            session.next_seq = seq
        self.go_historical(session)
        self.catching_up.pop(session.identity, None)

    # ------------------------------------------------------------------ publish and live routing
    def publish(self, session: Session, key: str, body: bytes) -> None:
        """Queue a publish; :meth:`append_queued` appends the queued batch with one journal write.
        A PUBLISH of an idempotent producer (PRODUCER) takes the peering's next producer
        sequence."""
        if not self.queued_publishes:
            self.work.publishes[self.name] = self
        if session.producer is not None:
            self.dedup.queue(session, len(self.queued_publishes), 1)
        self.queued_publishes.append((session, key, body))

    def publish_batch(self, session: Session, batch: c.PublishBatch) -> None:
        """Queue a PUBLISH-BATCH: :meth:`append_queued` appends it as one journal batch record, or as
        several consecutive ones where its DELIVER-BATCH frame would pass the journal's record
        limit (a stream with small messages has a small one, while the broker takes batches of
        up to ``max_batch`` bytes from any client). The entries of an idempotent producer's
        batch take the peering's next ``count`` producer sequences (each record carries its
        first)."""
        if not self.queued_publishes:
            self.work.publishes[self.name] = self
        for part in split_batch(batch, self.journal.config.max_record_bytes - DELIVER_HEAD_SIZE):
            if session.producer is not None:
                self.dedup.queue(session, len(self.queued_publishes), part.count)
            self.queued_publishes.append((session, None, part))

    @property
    def duplicates_total(self) -> int:
        """Producer retries not stored again, since the stream was opened."""
        return self.dedup.duplicates_total

    def producer_last(self, producer: str) -> int:
        """The highest producer sequence the stream holds for ``producer`` (0: none). O(1)."""
        return self.dedup.last(producer)

    def register_producer(self, session: Session, producer: str,
                          first: int) -> Tuple[Optional[Reason], int]:
        """PRODUCER ``producer first`` from ``session`` (rights and the per-connection limit
        were checked): ``(refusal, last)`` - the refusal (the id is bound to another key) or
        None, and the producer's last sequence the stream holds. O(1) whatever the number of
        producers known (issue 15, finding 4); the publishes the id has queued are appended
        first, so ``last`` counts them.

        Accepted, the session owns the id on this stream: a session that owned it before is
        fenced (its later publishes are refused, never confirmed: Kafka's epochs), and if
        ``first`` is past ``last + 1`` the session's publishes are refused as out of order until
        a PRODUCER from ``last + 1`` or below (no peering can make another's future producer
        sequences look stored). With CurveZMQ keys, an id is bound to the key whose records made
        it (the journal keeps the binding) or whose peering owns it now: another key is
        refused."""
        if self.dedup.has_queued(producer):
            self.append_queued()
        return self.dedup.register(session, producer, first)

    def _bind_producers(self, pending, producers) -> None:
        """With CurveZMQ keys, the producer ids just appended are bound to their publishers'
        keys (those not bound yet: the first key to store records under an id keeps it)."""
        bind = self.journal.bind_producer
        for (pub, _key, _body), mark in zip(pending, producers):
            if mark is not None and pub.user is not None:
                bind(mark[0], pub.user)

    def _refuse(self, pending, dups, exc: Exception) -> None:
        """The append failed, nothing was appended: one INVALID per publish (an entry of a
        PUBLISH-BATCH counts as one), in queue order with the duplicates (those of what the
        stream holds are still confirmed), so a publisher counting confirms stays exact."""
        reason = Reason.publish_rejected(Reason.failed("journal append failed", exc))
        kind = reason.label
        n = 0
        for i, (s, key, body) in enumerate(pending):
            if dups:
                del dups[:count_duplicates(self, dups, i, [], reason)]
            self.dedup.refused(s)
            if s.identity in self.sessions:
                count = 1 if key is not None else body.count
                refuse(self, s, reason.frame(s.reasons), count)
                self.invalids[kind] += count
                n += count
        count_duplicates(self, dups, len(pending), [], reason)
        self.log("append_failed", stream=self.name, error=str(exc), messages=n)
        self.confirm()

    def append_queued(self) -> None:
        """Append the queued publishes to the journal, then route them live."""
        if not self.queued_publishes:
            return
        pending, self.queued_publishes = self.queued_publishes, []
        if len(pending) == 1 and is_lone(pending[0]) and not self.dedup.marked:
            return append_lone(self, *pending[0])
        pending, producers, dups = self.dedup.split(pending)
        if not pending:
            count_duplicates(self, dups, 0, [])
            self.confirm()
            return
        try:
            records = self.journal.append_batch(
                [journal_item(key, body) for _s, key, body in pending], producers=producers)
        except Exception as exc:  # JournalFullError, OSError...: nothing was appended
            self._refuse(pending, dups, exc)
            return
        if self.journal.config.fsync == "interval":
            self.work.unsynced[self.name] = self           # the sync timer names it
        if producers is not None:
            self._bind_producers(pending, producers)
        if dups:
            last_seqs = [rec.sequence + BatchView(rec).count - 1 if key is None else rec.sequence
                         for (_p, key, _b), rec in zip(pending, records)]
        runs = Runs(self.outbox)
        for i, ((pub, key, _b), rec) in enumerate(zip(pending, records)):
            if dups:
                del dups[:count_duplicates(self, dups, i, last_seqs)]
            if key is None:
                view = BatchView(rec)
                n = view.count
                self.count_published(pub, n, batch_cost(rec.frame), view.sequence + n - 1)
                route_batch(self, view, runs)
            else:
                self.count_published(pub, 1, frame_cost(rec.frame), rec.sequence)
                self._route(rec, runs)
        if dups:
            count_duplicates(self, dups, len(pending), last_seqs)
        runs.close_all()
        if self.bad_regexes:
            self._drop_bad_regexes()
        self.confirm()

    def count_published(self, pub: Session, n: int, cost: int, last: int) -> None:
        """``n`` messages of ``pub`` were appended (``cost``: their credit cost, ``last``: the
        sequence of the last): counted in the stream's totals and for ``pub``."""
        self.published_total += n
        self.published_bytes += cost
        self.count_stored(pub, n, last)

    def count_stored(self, pub: Session, n: int, last: int) -> None:
        """``n`` more of ``pub``'s messages are in the stream, the last at sequence ``last``
        (appended now, or a retry's that was already there): counted, and awaiting CONFIRM if
        ``pub`` asked for it."""
        pub.published += n
        if pub.confirms:
            pub.unconfirmed.append((pub.published, last))
            self.awaits_confirm(pub)

    def _route(self, rec, runs: Optional[Runs]) -> None:
        """Route one plain record just appended to the live subscribers that want it (``runs``
        None: a round's lone record, :mod:`.lone`, whose batching subscribers share one
        DELIVER-BATCH of it, queued after the others as :meth:`Runs.close_all` queues them)."""
        if rec.header_block is not None:
            return route_headers(self, rec, runs)
        ids = self.index.match(rec.key)
        if len(ids) > 1:
            ids = ids & self.live_set.ids                # C: over the smaller set
        if not ids:
            return
        seq = rec.sequence
        sessions = self.sessions
        outbox = self.outbox
        delivered = delivered_bytes = 0
        frame = rec.frame
        ts_frame = None                     # DELIVER-TS, built once if anyone wants it
        batching = []                       # with runs None: who gets the DELIVER-BATCH
        cost = frame_cost(frame)
        for ident in ids:
            s = sessions.get(ident)
            if s is None or not s.live or seq < s.next_seq:
                continue
            if seq < s.future_start and not s.accepts(rec.key, seq):
                continue
            if s.credit >= cost:
                s.credit -= cost
                s.next_seq = seq + 1
                s.delivered += 1
                if s.batches:
                    if runs is None:
                        batching.append(ident)
                    else:
                        runs.add_frame(ident, rec.timestamp, frame)
                elif s.timestamps:
                    if ts_frame is None:
                        ts_frame = deliver_ts_from_deliver(frame, rec.timestamp)
                    outbox.append((ident, ts_frame))
                else:
                    outbox.append((ident, frame))
                delivered += 1
                delivered_bytes += cost
            else:
                self.out_of_credit(s, seq, cost, runs)
        if batching:
            one = batch_of_one(rec.timestamp, seq, frame)
            outbox.extend([(ident, one) for ident in batching])
        self.delivered_total += delivered
        self.delivered_bytes += delivered_bytes

    def out_of_credit(self, s: Session, seq: int, cost: int, runs: Optional[Runs]) -> None:
        """Live ``s`` lacks the credit for ``seq`` (``cost``): historical there, its run sent."""
        self.go_historical(s)           # only the position is remembered
        s.next_seq = seq
        if runs is not None:
            runs.close(s.identity)
        self.window_advice(s, seq, cost)

    def window_advice(self, s: Session, seq: int, cost: int) -> None:
        """A subscriber lacks the credit for message ``seq``: if that message needs more than
        the client ever held at once, it may never fit — say so, once."""
        if 0 < s.credit_peak < cost and s.told_too_big != seq:
            s.told_too_big = seq
            reason = Reason.window_too_small(seq, cost, s.credit_peak)
            self.outbox.append((s.identity, reason.frame(s.reasons)))
            self.invalids[reason.label] += 1

    # ------------------------------------------------------------------ replay
    def pump(self) -> bool:
        """Feed each catching-up subscriber one journal batch. True if any still needs more."""
        for ident in list(self.catching_up):
            s = self.catching_up.get(ident)
            if s is not None:
                self._replay(s)
        if self.bad_regexes:
            self._drop_bad_regexes()
        return bool(self.catching_up)

    def _replay(self, s: Session) -> None:
        j = self.journal
        first = self.first_seq
        if s.next_seq < first:                       # retention or a purge removed it
            self.log("replay_gap", stream=self.name, wanted=s.next_seq, first_kept=first)
            s.next_seq = first
        if s.next_seq < j.next_seq:
            # Read no more than the credit can take: at most credit // MIN_COST records, and frame
            # bytes (cost + OVERHEAD each) within the credit plus their overheads. A batching
            # subscriber reads whole batch records (``read_chunks``): no object per message.
            max_records = min(self.replay_batch_records, s.credit // MIN_COST + 1)
            max_bytes = min(self.replay_batch_bytes, s.credit + OVERHEAD * max_records)
            read = j.read_chunks if s.batches else j.read_batch
            try:
                records = read(s.next_seq, max_records=max_records, max_bytes=max_bytes)
            except Exception as exc:      # CorruptionError, I/O error: say so, stop this replay
                self.log("replay_failed", stream=self.name, client=s.identity.hex(),
                         sequence=s.next_seq, error=str(exc))
                reason = Reason.failed(f"cannot replay from sequence {s.next_seq}", exc)
                self.outbox.append((s.identity, reason.frame(s.reasons)))
                self.invalids[reason.label] += 1
                del self.catching_up[s.identity]
                return
            if s.batches:
                runs = Runs(self.outbox)
                more = replay_chunks(self, s, records, runs)
                runs.close_all()
                if not more:                      # out of credit: wait for CREDIT
                    del self.catching_up[s.identity]
                    return
            elif not self._replay_records(s, records):
                del self.catching_up[s.identity]
                return
        if s.next_seq >= j.next_seq:                  # at the head: back to live, same step
            self.go_live(s)
            del self.catching_up[s.identity]

    def _replay_records(self, s: Session, records) -> bool:
        """Feed a ZEPS/1 subscriber the records read for it, one DELIVER each. False if it ran
        out of credit (it waits for CREDIT)."""
        outbox = self.outbox
        ident = s.identity
        credit = granted = s.credit
        ok = True
        for rec in records:
            seq = rec.sequence
            if seq < s.next_seq:
                continue
            if s.accepts(rec.key, seq):
                frame, cost = replay_frame(s, rec, rec.frame)     # DELIVER-H, if chosen
                if credit < cost:
                    s.next_seq = seq
                    ok = False
                    break
                credit -= cost
                if s.timestamps and frame is rec.frame:
                    frame = deliver_ts_from_deliver(frame, rec.timestamp)
                outbox.append((ident, frame))
                s.delivered += 1
                self.delivered_total += 1
            s.next_seq = seq + 1
        s.credit = credit
        self.delivered_bytes += granted - credit
        if not ok:
            self.window_advice(s, seq, cost)
        return ok

    # ------------------------------------------------------------------ confirms
    def awaits_confirm(self, pub: Session) -> None:
        """``pub`` waits for a CONFIRM from this stream (its newest in ``pub.unconfirmed``)."""
        if not self.confirming:
            self.work.confirms[self.name] = self
        self.confirming[pub.identity] = pub
        self.confirm_fresh[pub.identity] = pub

    def confirm(self) -> None:
        """Send CONFIRM to publishers whose messages became durable (:func:`.confirms.confirm`,
        with the refusals that waited for them): all of them once the durable sequence moved
        (a sync), else those that waited for more since (a duplicate's, a refusal). A PING, a
        DETACH... append what was queued, and each looked at every publisher waiting for the
        group fsync (5,000: a PUBLISH and a PING cost 1.3 ms)."""
        if not self.confirming:
            return
        journal = self.journal
        durable = journal.durable_seq
        fresh = self.confirm_fresh
        if durable != self.confirmed_at or journal.sync_error is not None:
            self.confirmed_at = durable
            fresh.clear()
            confirm(self)
        elif fresh:
            self.confirm_fresh = {}
            confirm(self, fresh)

    # ------------------------------------------------------------------ queries
    def info(self) -> c.StreamInfoOk:
        if self.queued_publishes:
            self.append_queued()
        st = self.journal.info()
        first = max(st.first_seq, self.purged_to + 1)
        oldest = st.oldest_ts or 0
        if first != st.first_seq and first <= st.last_seq:
            recs = self.journal.read_batch(first, max_records=1)
            oldest = recs[0].timestamp if recs else 0
        elif first > st.last_seq:
            oldest = 0
        return c.StreamInfoOk(first=first, last=st.last_seq, size=st.size_bytes,
                              oldest=oldest, newest=st.newest_ts or 0 if first <= st.last_seq
                              else 0)

    def seq_at(self, timestamp: int) -> int:
        if self.queued_publishes:
            self.append_queued()
        return self.journal.seq_at(timestamp)

