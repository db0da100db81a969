"""Batches in the broker: routing a journal batch record, DELIVER-BATCH for subscribers that
chose it (BATCH-SELECT), and a PUBLISH-BATCH cut into parts (:func:`split_batch`). Pure logic,
no sockets; used by :class:`~zeps.broker.stream.Stream`.

Every message still costs the credit ZEPS/1 defines and still moves a subscriber's position one
sequence at a time; batching only changes how many messages share a frame:

* a **batch record** (one PUBLISH-BATCH, journalled as one record whose frame is its
  DELIVER-BATCH, see :mod:`zeps.protocol.batch`) goes whole — the very bytes the journal wrote,
  built once and shared — to every batching subscriber that takes all of it (its patterns take
  every key, it has the credit, it is at that sequence); one that takes part of it gets a
  DELIVER-BATCH per run of consecutive entries it takes; a ZEPS/1 subscriber gets one DELIVER
  per message (built once per record, shared by all of them);
* :class:`Runs` gathers, per batching subscriber, consecutive messages of one routing or replay
  step that share a timestamp into one DELIVER-BATCH (plain records appended together share
  theirs), so a batching subscriber of ZEPS/1 publishers gets batches too.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from zeps.protocol import commands as c
from zeps.protocol import deliver_ts_from_deliver
from zeps.protocol.batch import (DELIVER_HEAD_SIZE, ENTRY_COST_EXTRA, deliver_batch_head,
                                 deliver_frames, entry_key, is_batch_frame, walk)
from zeps.protocol.deliver import KEYLEN_OFFSET, sequence_of

from .headers import replay_frame

#: Entry bytes of one DELIVER frame start after its signature, id and sequence.
ENTRY_OFFSET = KEYLEN_OFFSET
#: A run is closed (sent) once it holds this many bytes.
MAX_RUN_BYTES = 1 << 20


class _Run:
    __slots__ = ("ts", "first", "next", "parts", "count", "size", "whole")

    def __init__(self, ts: int, first: int):
        self.ts = ts
        self.first = first
        self.next = first
        # (source, start, end): the entries are source[start:end], copied once, when the run's
        # frame is built (a record's entries are not sliced out per subscriber)
        self.parts: List[Tuple[bytes, int, int]] = []
        self.count = 0
        self.size = 0
        self.whole: Optional[bytes] = None     # the stored frame, while the run is exactly it


class Runs:
    """DELIVER-BATCH frames under construction, one open run per batching subscriber, for one
    routing or replay step. :meth:`close` (one subscriber) or :meth:`close_all` (end of the
    step) puts them in the outbox; a subscriber's run is closed before anything else is queued
    for it, so its frames stay in order.

    A run's frame is built with one copy of its entries, from the records they are in. Runs of
    the same entries of the same records (every subscriber of a stream's every key, at the same
    sequence: a live fan-out) share one frame, built once per step: a round that journalled
    several batch records copied every subscriber's entries three times (a slice per record,
    the join, the head's concatenation): a quarter of the loop's time in a fan-out to 10
    (issue 20)."""

    def __init__(self, outbox):
        self.outbox = outbox
        self.open: Dict[bytes, _Run] = {}
        self._built: Optional[Dict[tuple, Tuple[list, bytes]]] = None

    def _run_for(self, ident: bytes, ts: int, seq: int) -> _Run:
        run = self.open.get(ident)
        if run is not None and (run.next != seq or run.ts != ts or run.size >= MAX_RUN_BYTES):
            self.close(ident)
            run = None
        if run is None:
            run = self.open[ident] = _Run(ts, seq)
        return run

    def add_frame(self, ident: bytes, ts: int, frame: bytes) -> None:
        """One message, given as its DELIVER frame."""
        seq = sequence_of(frame)
        run = self._run_for(ident, ts, seq)
        run.parts.append((frame, ENTRY_OFFSET, len(frame)))
        run.whole = None
        run.count += 1
        run.size += len(frame) - ENTRY_OFFSET
        run.next = seq + 1

    def add_entries(self, ident: bytes, ts: int, seq: int, count: int, source: bytes,
                    start: int, end: int, whole: Optional[bytes] = None) -> None:
        """``count`` messages from ``seq``, given as their entries ``source[start:end]``
        (``whole``: the stored DELIVER-BATCH frame they are all of, sent as is if the run holds
        nothing else)."""
        run = self._run_for(ident, ts, seq)
        run.whole = whole if run.count == 0 else None
        run.parts.append((source, start, end))
        run.count += count
        run.size += end - start
        run.next = seq + count

    def close(self, ident: bytes) -> None:
        run = self.open.pop(ident, None)
        if run is None:
            return
        if run.whole is not None:
            self.outbox.append((ident, run.whole))
        elif self._built is None:            # one subscriber's run alone: nothing to share
            self.outbox.append((ident, _frame(run)))
        else:
            parts = run.parts
            key = (run.ts, run.first, run.count, tuple([(id(s), a, b) for s, a, b in parts]))
            got = self._built.get(key)
            if got is None:
                # the entry keeps ``parts`` (so its sources) alive: an id in a key stays theirs
                got = self._built[key] = (parts, _frame(run))
            self.outbox.append((ident, got[1]))

    def close_all(self) -> None:
        if len(self.open) > 1:
            self._built = {}
        for ident in list(self.open):
            self.close(ident)
        self._built = None


def _frame(run: _Run) -> bytes:
    """A run's DELIVER-BATCH: its head, then its entries, copied once (a short single part is
    sliced and concatenated: cheaper than a view and a join, and the same bytes)."""
    head = deliver_batch_head(run.ts, run.first, run.count)
    parts = run.parts
    if len(parts) == 1:
        return _one_part(head, *parts[0])
    return b"".join([head] + [memoryview(src)[a:b] for src, a, b in parts])


def _one_part(head: bytes, src: bytes, a: int, b: int) -> bytes:
    return head + (src[a:b] if b - a < 4096 else memoryview(src)[a:b])


def batch_of_one(ts: int, seq: int, frame: bytes) -> bytes:
    """The DELIVER-BATCH of the one message ``seq`` whose DELIVER frame is ``frame``, at
    timestamp ``ts``: the frame of a run holding only it."""
    return _one_part(deliver_batch_head(ts, seq, 1), frame, ENTRY_OFFSET, len(frame))


class BatchView:
    """One batch record (its stored DELIVER-BATCH frame) as routing and replay read it: entry
    offsets, keys and ZEPS/1 DELIVER frames computed once, on first need."""

    __slots__ = ("frame", "sequence", "count", "timestamp", "_rec", "_keys", "_plain",
                 "_plain_ts")

    def __init__(self, rec):
        self._rec = rec
        self.frame = rec.frame
        self.sequence = rec.sequence
        self.count = rec.count
        self.timestamp = rec.timestamp
        self._keys = self._plain = self._plain_ts = None

    @property
    def offsets(self):
        return self._rec.offsets

    def key(self, i: int) -> str:
        keys = self._keys
        if keys is None:
            frame, offs = self.frame, self.offsets
            keys = self._keys = [entry_key(frame, offs[k]) for k in range(self.count)]
        return keys[i]

    def cost(self, i: int, j: int) -> int:
        """Credit entries ``i`` .. ``j - 1`` cost."""
        if i == 0 and j == self.count:
            return len(self.frame) - DELIVER_HEAD_SIZE + ENTRY_COST_EXTRA * j
        offs = self.offsets
        return offs[j] - offs[i] + ENTRY_COST_EXTRA * (j - i)

    def entry_cost(self, i: int) -> int:
        offs = self.offsets
        return offs[i + 1] - offs[i] + ENTRY_COST_EXTRA

    def deliver(self, i: int, timestamps: bool) -> bytes:
        """The ZEPS/1 frame of entry ``i`` (DELIVER, or DELIVER-TS)."""
        plain = self._plain
        if plain is None:
            plain = self._plain = deliver_frames(self.frame, self.offsets, self.sequence)
        if not timestamps:
            return plain[i]
        ts = self._plain_ts
        if ts is None:
            ts = self._plain_ts = [None] * self.count
        f = ts[i]
        if f is None:
            f = ts[i] = deliver_ts_from_deliver(plain[i], self.timestamp)
        return f

    def send(self, runs: Runs, outbox, s, i: int, j: int) -> None:
        """Queue entries ``i`` .. ``j - 1`` for subscriber ``s`` in its chosen form."""
        ident = s.identity
        if s.batches:
            frame = self.frame
            if i == 0 and j == self.count:
                runs.add_entries(ident, self.timestamp, self.sequence, j, frame,
                                 DELIVER_HEAD_SIZE, len(frame), frame)
            else:
                offs = self.offsets
                runs.add_entries(ident, self.timestamp, self.sequence + i, j - i, frame,
                                 offs[i], offs[j])
        else:
            ts = s.timestamps
            for k in range(i, j):
                outbox.append((ident, self.deliver(k, ts)))


def take(view: BatchView, s, i: int, credit: int):
    """Which entries of ``view`` from index ``i`` subscriber ``s`` takes with ``credit``:
    ``(runs, used, stop)`` — ``runs`` a list of ``(start, end)`` index ranges, ``used`` the
    credit they cost, ``stop`` the index of the first entry it wanted but could not pay for
    (None: it got all it wanted)."""
    n = view.count
    base = view.sequence
    if s.takes_all(base + i):
        cost = view.cost(i, n)
        if cost <= credit:
            return [(i, n)], cost, None
        j, used = i, 0
        while j < n:
            c = view.entry_cost(j)
            if used + c > credit:
                break
            used += c
            j += 1
        return ([(i, j)] if j > i else []), used, j
    runs, used, start = [], 0, None
    accepts = s.accepts
    for k in range(i, n):
        if accepts(view.key(k), base + k):
            c = view.entry_cost(k)
            if used + c > credit:
                if start is not None:
                    runs.append((start, k))
                return runs, used, k
            used += c
            if start is None:
                start = k
        elif start is not None:
            runs.append((start, k))
            start = None
    if start is not None:
        runs.append((start, n))
    return runs, used, None


def route_batch(stream, view: BatchView, runs: Runs) -> None:
    """Route a batch record just appended to the live subscribers (see the module docstring);
    one without the credit for a message it wants drops to historical there, as for a DELIVER."""
    index = stream.index
    if index.selective():
        match = index.match
        ids = set()
        for k in range(view.count):
            ids |= match(view.key(k))
        ids &= stream.live_set.ids       # the live ones, in a set of its own: routing changes it
    else:
        ids = index.everyone() & stream.live_set.ids
    base, n = view.sequence, view.count
    sessions, outbox = stream.sessions, stream.outbox
    delivered = delivered_bytes = 0
    for ident in ids:
        s = sessions.get(ident)
        if s is None or not s.live or base + n <= s.next_seq:
            continue
        taken, used, stop = take(view, s, max(0, s.next_seq - base), s.credit)
        for i, j in taken:
            view.send(runs, outbox, s, i, j)
            s.delivered += j - i
            delivered += j - i
        s.credit -= used
        delivered_bytes += used
        if stop is None:
            s.next_seq = base + n
        else:
            stream.out_of_credit(s, base + stop, view.entry_cost(stop), runs)
    stream.delivered_total += delivered
    stream.delivered_bytes += delivered_bytes


def replay_chunks(stream, s, chunks, runs: Runs) -> bool:
    """Feed subscriber ``s`` (a batching one) the journal chunks read for it (plain records and
    batch records, in order). False if it ran out of credit (it waits for CREDIT)."""
    outbox = stream.outbox
    credit = granted = s.credit
    delivered = 0
    all_from = s.takes_all_from()       # from there on no key needs to be looked at
    for ch in chunks:
        if is_batch_frame(ch.frame):
            view = BatchView(ch)
            base, n = view.sequence, view.count
            if base + n <= s.next_seq:
                continue
            taken, used, stop = take(view, s, max(0, s.next_seq - base), credit)
            for i, j in taken:
                view.send(runs, outbox, s, i, j)
                delivered += j - i
            credit -= used
            if stop is not None:
                s.next_seq = base + stop
                cost = view.entry_cost(stop)
                break
            s.next_seq = base + n
            continue
        seq = ch.sequence
        if seq < s.next_seq:
            continue
        if (all_from is not None and seq >= all_from) or s.accepts(ch.key, seq):
            frame = ch.frame
            cost = len(frame) - 7
            headed = ch.header_block is not None and s.headers
            if headed:              # a message with headers, for a client that chose them
                frame, cost = replay_frame(s, ch, frame)
            if credit < cost:
                s.next_seq = seq
                stop = 0
                break
            credit -= cost
            if headed:              # DELIVER-H, alone, after what was gathered before it
                runs.close(s.identity)
                outbox.append((s.identity, frame))
            else:
                runs.add_frame(s.identity, ch.timestamp, frame)
            delivered += 1
        s.next_seq = seq + 1
    else:
        stop = None
    s.credit = credit
    s.delivered += delivered
    stream.delivered_total += delivered
    stream.delivered_bytes += granted - credit
    if stop is not None:
        runs.close(s.identity)
        stream.window_advice(s, s.next_seq, cost)
        return False
    return True


# --------------------------------------------------------------------------- PUBLISH-BATCH parts

def _offsets(batch: c.PublishBatch):
    """Where each entry of a PUBLISH-BATCH starts, plus the end (the codec's, else walked)."""
    return batch.offsets or walk(batch.entries, 0, len(batch.entries), batch.count)


def _part(batch: c.PublishBatch, i: int, j: int, offsets) -> c.PublishBatch:
    """Entries ``i`` to ``j - 1`` of a PUBLISH-BATCH, sliced out at their ``offsets``."""
    at = offsets[i]
    return c.PublishBatch(j - i, batch.entries[at:offsets[j]],
                          tuple(o - at for o in offsets[i:j + 1]))


def batch_tail(batch: c.PublishBatch, k: int) -> c.PublishBatch:
    """Entries ``k`` on of a PUBLISH-BATCH (sliced, not re-encoded)."""
    return _part(batch, k, batch.count, _offsets(batch))


def split_batch(batch: c.PublishBatch, max_entries: int) -> List[c.PublishBatch]:
    """A PUBLISH-BATCH cut into consecutive parts whose entries take at most ``max_entries``
    bytes each (a part of one entry may take more: the caller checked every body against the
    stream's limit, which the journal's record limit covers)."""
    if len(batch.entries) <= max_entries:
        return [batch]
    offsets = _offsets(batch)
    parts, i = [], 0
    for j in range(1, batch.count + 1):
        if offsets[j] - offsets[i] > max_entries and j - 1 > i:
            parts.append(_part(batch, i, j - 1, offsets))
            i = j - 1
    parts.append(_part(batch, i, batch.count, offsets))
    return parts
