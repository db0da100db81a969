"""A durable consumer's state in the broker (issue 19, docs/consumers.md): which messages are
out with which member, which wait to go again, and the cursor. Pure: no sockets, no clock, no
files (the core hands in the time; :mod:`zeps.journal.consumers` stores :meth:`Group.state`).

Every message handed out and not acknowledged is **outstanding** (:class:`Out`): held by a
member (with its ack deadline), or waiting to go again (``ready``, due now, in sequence order;
``delayed``, after a NAK's delay), or — per-key order — **parked** behind an earlier message of
its key. ``next`` is the next sequence to read from the journal; the **floor** is the highest
sequence below which nothing is outstanding.

Costs: each operation is O(log n) in the outstanding messages it touches, except an ACK range,
which costs O(log held + messages it acknowledges); timers use lazy heaps (a stale entry is
dropped when it comes up; an extended deadline is pushed again only then, so a PROGRESS flood
adds nothing to them). A message acknowledged leaves its entry behind until its time comes (an
ack wait of up to a day), so a heap holding more than twice the outstanding messages (plus
:data:`HEAP_SLACK`) is rebuilt from them: its size stays bounded by ``MAX_PENDING``, at an
amortised O(1) an operation. The bounds (``MAX_*``) are the core's to check before calling.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections import deque
from typing import Deque, Dict, Iterable, List, Optional, Tuple

from zeps.protocol import commands as c

from .outstanding import Budget

#: Members one consumer may have.
MAX_MEMBERS = 4096
#: Outstanding messages of one consumer, whatever its members' ``max_ack_pending`` add up to.
MAX_PENDING = 65_536
#: The largest ``max_ack_pending`` a consumer may ask for.
MAX_ACK_PENDING = MAX_PENDING
#: Consumers of one stream.
MAX_CONSUMERS = 1024
#: The most messages one consumer hands out in one round.
CONSUMER_STEP = 256
#: How often a consumer whose state changed is saved (seconds).
SAVE_INTERVAL = 0.1
#: A timer heap is rebuilt once it holds more than twice the outstanding messages plus this
#: many entries (stale ones of messages acknowledged since were pushed).
HEAP_SLACK = 1024


class Out:
    """One outstanding message."""
    __slots__ = ("member", "deliveries", "deadline", "key", "timer")

    def __init__(self, deliveries: int, key: Optional[str] = None):
        self.member: Optional[bytes] = None     # the member holding it, or None
        self.deliveries = deliveries            # handed out so far
        self.deadline = 0.0                     # its ack deadline while held
        self.key = key                          # known once read (per-key order)
        self.timer = 0.0                        # the deadline of its entry in the heap (0: none)


class Member:
    """One joined peering: the sequences it holds, in order."""
    __slots__ = ("session", "held")

    def __init__(self, session):
        self.session = session
        self.held: List[int] = []


class Group:
    """One consumer of one stream (see the module docstring)."""

    def __init__(self, stream: str, config, next_seq: int,
                 outstanding: Optional[Dict[int, int]] = None,
                 counters: Optional[Dict[str, int]] = None, skipped: int = 0,
                 budget: Optional[Budget] = None):
        self.stream = stream
        #: The broker's budget of outstanding messages, shared by its consumers: every
        #: message put in ``out`` or taken out of it for good is counted there (None: no core,
        #: no bound but ``MAX_PENDING``).
        self.budget = budget
        self.stream_dir = ""                        # where it is saved (set by its loader)
        #: The core's groups with timers or unsaved changes (consuming.py visits only those
        #: each tick): a change or a timer puts this group in it (None: no core).
        self.ticking: Optional[Dict["Group", None]] = None
        #: The core's groups with members (the pump step visits only those; None: no core).
        self.pumping: Optional[Dict["Group", None]] = None
        self.config = config
        self.next = next_seq
        self.out: Dict[int, Out] = {}
        #: Heap of the sequences put in ``out`` (lazy: one no longer there is dropped when it
        #: comes up): the floor and a trim find the lowest without a pass over ``out``.
        self.low: List[int] = []
        self.members: Dict[bytes, Member] = {}
        self._turn = 0                              # round robin position
        self.ready: List[int] = []                  # heap of sequences due to go again
        self.delayed: List[Tuple[float, int]] = []  # heap of (not before, sequence)
        self.deadlines: List[Tuple[float, int]] = []  # heap of (deadline, sequence), lazy
        self.parked: Dict[str, Deque[int]] = {}     # key -> later messages behind it
        self.busy: Dict[str, int] = {}              # key -> its messages held or ready
        self.unknown_keys = 0                       # restored, key not read yet
        self.ack_none = config.ack == c.ACK_NONE
        # Per-key order holds nothing back under ACK_NONE: nothing is held (each message is
        # done as it is handed out, so a key's messages go in sequence order anyway).
        self.key_order = bool(config.flags & c.CONSUMER_KEY_ORDER) and not self.ack_none
        self.counters = {"acked": 0, "redelivered": 0, "dead_lettered": 0, "bad_acks": 0,
                         "delivered": 0, "dropped": 0}
        if counters:
            self.counters.update({k: v for k, v in counters.items() if k in self.counters})
        self.skipped = skipped
        self._dirty = False
        self.saved_at = float("-inf")               # when consumer_timers last saved it
        self.asleep = False                         # nothing to do until woken (consuming.py)
        for seq, n in sorted((outstanding or {}).items()):
            self.out[seq] = Out(n)
            self.ready.append(seq)
            if self.key_order:
                self.unknown_keys += 1
        heapq.heapify(self.ready)
        self.low = list(self.ready)                 # sorted: a heap
        if budget is not None:                      # loaded: counted, even past the limit
            budget.held += len(self.out)

    @property
    def dirty(self) -> bool:
        """The state changed since it was last saved."""
        return self._dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        # every change that pushes a timer (hand, NAK) or must be saved comes here
        self._dirty = value
        if value and self.ticking is not None:
            self.ticking[self] = None

    def quiet(self) -> bool:
        """Nothing for the timers: no unsaved change, no deadline or delay to wait for. With
        nothing outstanding what the timer heaps still hold is stale; it goes."""
        if not self.out:
            self.deadlines.clear()
            self.delayed.clear()
        return not (self._dirty or self.deadlines or self.delayed)

    # ------------------------------------------------------------------ members
    def join(self, session) -> None:
        self.members[session.identity] = Member(session)
        if self.pumping is not None:
            self.pumping[self] = None

    def leave(self, ident: bytes) -> int:
        """A member left (DETACH, expiry, its connection gone): what it held goes again."""
        m = self.members.pop(ident, None)
        if m is None:
            return 0
        if not self.members and self.pumping is not None:
            self.pumping.pop(self, None)
        for seq in m.held:
            o = self.out.get(seq)
            if o is not None and o.member == ident:
                o.member = None
                heapq.heappush(self.ready, seq)
                self.counters["redelivered"] += 1
        self.dirty = True
        return len(m.held)

    def members_in_turn(self) -> List[Member]:
        """The members, starting after the one served first last time (round robin)."""
        ms = list(self.members.values())
        if not ms:
            return ms
        k = self._turn % len(ms)
        self._turn = k + 1
        return ms[k:] + ms[:k]

    # ------------------------------------------------------------------ handing out
    @property
    def room(self) -> int:
        """How many more messages may be outstanding: the consumer's own bound, and the
        broker's budget (:mod:`zeps.broker.outstanding`)."""
        own = MAX_PENDING - len(self.out)
        if self.budget is None:
            return own
        return min(own, self.budget.room(len(self.out)))

    def held_back(self) -> bool:
        """The broker's budget, not the consumer's own bound, stops it reading."""
        return self.budget is not None and len(self.out) < MAX_PENDING \
            and self.budget.room(len(self.out)) <= 0

    def forget(self) -> None:
        """The consumer is deleted (or its stream): what it held leaves the budget."""
        if self.budget is not None:
            self.budget.give(len(self.out))
            self.budget = None

    def hand(self, seq: int, member: Member, key: str, now: float) -> None:
        """``seq`` (key ``key``) was handed to ``member``."""
        self.counters["delivered"] += 1
        if self.ack_none:                         # acknowledged as it goes
            if self.out.pop(seq, None) is not None:
                if self.budget is not None:
                    self.budget.give()
                self._release(key)
            self.counters["acked"] += 1
            self.dirty = True
            return
        o = self.out.get(seq)
        if o is None:
            o = self._add(seq, Out(0, key))
            if self.key_order:
                self.busy[key] = self.busy.get(key, 0) + 1
        elif o.key is None and key is not None:
            o.key = key
            if self.key_order:
                self.unknown_keys -= 1
                self.busy[key] = self.busy.get(key, 0) + 1
        o.deliveries += 1
        o.member = member.session.identity
        o.deadline = now + self.config.ack_wait_ms / 1000.0
        if not o.timer:                           # one heap entry per message at a time
            o.timer = o.deadline
            heapq.heappush(self.deadlines, (o.deadline, seq))
            self._tidy_timers()
        insort(member.held, seq)
        self.dirty = True

    def unhand(self, seq: int, ident: bytes) -> None:
        """The frame handing ``seq`` to ``ident`` did not go out (its pipe was full): it goes
        again first, and this delivery does not count."""
        m = self.members.get(ident)
        o = self.out.get(seq)
        if o is None and self.ack_none and seq < self.next:
            # acknowledged as it was handed out (ACK_NONE): it was not, so it is outstanding
            # again, and neither the delivery nor the acknowledgement counts
            self._add(seq, Out(0))
            heapq.heappush(self.ready, seq)
            self.counters["delivered"] -= 1
            self.counters["acked"] -= 1
            self.dirty = True
            return
        if o is None or o.member != ident:
            return
        o.member = None
        o.deliveries -= 1
        self.counters["delivered"] -= 1
        if m is not None:
            _remove(m.held, seq)
        heapq.heappush(self.ready, seq)

    def park(self, seq: int, key: str) -> bool:
        """Per-key order: a new message whose key has one out already waits behind it. True
        if it was parked (it is outstanding from now on)."""
        if not self.key_order or not self.busy.get(key):
            return False
        self._add(seq, Out(0, key))
        self.parked.setdefault(key, deque()).append(seq)
        return True

    def park_loaded(self, seq: int, key: str) -> bool:
        """Per-key order: ``seq``, outstanding since the consumer was loaded (its key unknown
        until read: a restart), is of ``key``; True if a message of that key is out, and
        ``seq`` now waits behind it (they come off ``ready`` in sequence order, so a key's
        parked messages stay in order)."""
        if not self.key_order or not self.busy.get(key):
            return False
        self.out[seq].key = key
        self.unknown_keys -= 1
        self.parked.setdefault(key, deque()).append(seq)
        return True

    def pop_ready(self, now: float) -> Optional[int]:
        """The lowest sequence due to go again, or None (taken off ``ready``; hand it, or
        :meth:`put_back` it)."""
        self._due(now)
        while self.ready:
            seq = heapq.heappop(self.ready)
            o = self.out.get(seq)
            if o is not None and o.member is None:
                return seq
        return None

    def put_back(self, seq: int) -> None:
        heapq.heappush(self.ready, seq)

    def has_ready(self, now: float) -> bool:
        self._due(now)
        return bool(self.ready)

    def _due(self, now: float) -> None:
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, seq = heapq.heappop(delayed)
            o = self.out.get(seq)
            if o is not None and o.member is None:
                heapq.heappush(self.ready, seq)

    # ------------------------------------------------------------------ acknowledgements
    def ack(self, ident: bytes, ranges: Iterable[Tuple[int, int]]) -> Tuple[int, int]:
        """Acknowledge what ``ident`` holds in each (first, last) range (ACK_ALL: everything it
        holds up to the highest ``last``). Returns (acknowledged, refused): a sequence named
        alone that it does not hold is refused (counted in ``bad_acks``)."""
        m = self.members.get(ident)
        acked = bad = 0
        if self.config.ack == c.ACK_ALL:
            top = max(last for _, last in ranges)
            ranges = ((1, top),)
        for first, last in ranges:
            if m is None:
                bad += 1
                continue
            held = m.held
            lo, hi = bisect_left(held, first), bisect_right(held, last)
            if lo == hi:
                bad += 1
                continue
            done = held[lo:hi]            # a range acknowledges what the member holds in it
            del held[lo:hi]
            for seq in done:
                self._done(seq)
            acked += len(done)
        self.counters["acked"] += acked
        self.counters["bad_acks"] += bad
        if acked:
            self.dirty = True
        return acked, bad

    def nak(self, ident: bytes, seq: int, delay: float, now: float) -> bool:
        o = self._held_by(ident, seq)
        if o is None:
            self.counters["bad_acks"] += 1
            return False
        _remove(self.members[ident].held, seq)
        o.member = None
        self.counters["redelivered"] += 1
        if delay > 0:
            heapq.heappush(self.delayed, (now + delay, seq))
            self._tidy_timers()
        else:
            heapq.heappush(self.ready, seq)
        self.dirty = True
        return True

    def progress(self, ident: bytes, seq: int, now: float) -> bool:
        o = self._held_by(ident, seq)
        if o is None:
            self.counters["bad_acks"] += 1
            return False
        o.deadline = now + self.config.ack_wait_ms / 1000.0   # expire() finds it later
        return True

    def drop(self, seq: int, dead_lettered: bool) -> None:
        """``seq`` leaves for good without an ACK: dead-lettered (``max_deliver``), or gone
        from the journal (retention)."""
        self._done(seq)
        self.counters["dead_lettered" if dead_lettered else "dropped"] += 1
        self.dirty = True

    def _add(self, seq: int, o: Out) -> Out:
        """``seq`` is outstanding (``o``), and in the heap of the lowest. A heap that holds more
        than twice the outstanding messages (plus :data:`HEAP_SLACK`: those acknowledged since
        they were put in) is rebuilt from ``out``: amortised O(1), as :meth:`_tidy_timers`."""
        self.out[seq] = o
        if self.budget is not None:
            self.budget.held += 1
        low = self.low
        heapq.heappush(low, seq)
        if len(low) > 2 * len(self.out) + HEAP_SLACK:
            low[:] = self.out
            heapq.heapify(low)
        return o

    def _lowest(self) -> Optional[int]:
        """The lowest outstanding sequence, or None: amortised O(log n)."""
        low, out = self.low, self.out
        while low and low[0] not in out:
            heapq.heappop(low)
        return low[0] if low else None

    def _held_by(self, ident: bytes, seq: int) -> Optional[Out]:
        o = self.out.get(seq)
        return o if o is not None and o.member == ident and ident in self.members else None

    def _done(self, seq: int) -> None:
        o = self.out.pop(seq, None)
        if o is not None:
            if self.budget is not None:
                self.budget.give()
            if o.key is None and self.key_order:
                self.unknown_keys -= 1
            self._release(o.key)
            self._tidy_timers()

    def _tidy_timers(self) -> None:
        """Rebuild a timer heap that holds more than twice the outstanding messages (plus
        :data:`HEAP_SLACK`): the entries of messages acknowledged (or dropped) stay until
        their deadline, a day at most, and would grow with the rate times the ack wait. Its
        live entries are found from ``out``: a deadline is live if it is its message's
        ``timer``, a NAK's delay if its message is outstanding and held by no one. At least
        ``len(out) + HEAP_SLACK`` operations come between two rebuilds, each of which costs
        O(heap): amortised O(1). In place: a caller may hold the list."""
        bound = 2 * len(self.out) + HEAP_SLACK
        out = self.out
        dl = self.deadlines
        if len(dl) > bound:
            dl[:] = [(o.timer, seq) for seq, o in out.items() if o.timer]
            heapq.heapify(dl)
        delayed = self.delayed
        if len(delayed) > bound:
            delayed[:] = [(t, seq) for t, seq in delayed
                          if seq in out and out[seq].member is None]
            heapq.heapify(delayed)

    def _release(self, key: Optional[str]) -> None:
        """Per-key order: a message of ``key`` is done; the next one parked behind it may go."""
        if not self.key_order or key is None:
            return
        n = self.busy.get(key, 0) - 1
        q = self.parked.get(key)
        if q:
            seq = q.popleft()
            if not q:
                del self.parked[key]
            heapq.heappush(self.ready, seq)
            n += 1
        if n > 0:
            self.busy[key] = n
        else:
            self.busy.pop(key, None)

    # ------------------------------------------------------------------ timers
    def expire(self, now: float) -> int:
        """Messages whose ack deadline passed go again. Returns how many."""
        n = 0
        dl = self.deadlines
        while dl and dl[0][0] <= now:
            deadline, seq = heapq.heappop(dl)
            o = self.out.get(seq)
            if o is None or o.timer != deadline:
                continue                               # stale: acknowledged since
            o.timer = 0.0
            if o.member is None:
                continue                               # already given back
            if o.deadline > deadline:                  # extended (PROGRESS) or handed again:
                o.timer = o.deadline                   # wait again, still one entry
                heapq.heappush(dl, (o.deadline, seq))
                continue
            m = self.members.get(o.member)
            if m is not None:
                _remove(m.held, seq)
            o.member = None
            heapq.heappush(self.ready, seq)
            n += 1
        if n:
            self.counters["redelivered"] += n
            self.dirty = True
        return n

    def next_deadline(self) -> float:
        t = float("inf")
        if self.deadlines:
            t = self.deadlines[0][0]
        if self.delayed:
            t = min(t, self.delayed[0][0])
        return t

    # ------------------------------------------------------------------ state
    @property
    def floor(self) -> int:
        """Every sequence up to this one is acknowledged (or was skipped). Not a pass over the
        outstanding messages: CONSUME-OK says it, and a CONSUME (with the trim before it) cost
        O(outstanding), 2 ms with 65,536 of them, a command any member may send in a loop."""
        lowest = self._lowest()
        return (self.next if lowest is None else lowest) - 1

    @property
    def pending(self) -> int:
        """Messages held by members, not acknowledged."""
        return sum(len(m.held) for m in self.members.values())

    def outstanding(self) -> Dict[int, Out]:
        """sequence -> its record, of every outstanding message (what is saved: a copy of the
        dict, made at C speed on the loop; the Saver's thread reads the delivery counts)."""
        return dict(self.out)

    def trim(self, first: int) -> int:
        """Retention removed everything below ``first``: the cursor moves up to it and the
        outstanding messages below it are dropped. Returns how many messages were lost."""
        lost = 0
        if self.next < first:
            lost += first - self.next
            self.next = first
        low = self.low
        while (seq := self._lowest()) is not None and seq < first:   # the lowest: no pass
            heapq.heappop(low)
            o = self.out[seq]
            if o.member is not None and o.member in self.members:
                _remove(self.members[o.member].held, seq)
            self._done(seq)
            lost += 1
        if lost:
            self.skipped += lost
            self.dirty = True
        return lost

    def rewind(self, end: int) -> int:
        """The journal ends below the cursor: its next sequence is ``end``. A power loss under
        ``fsync=interval`` takes the journal's unsynced tail while this consumer's file, synced
        by every save, names the messages in it (acknowledged, outstanding). Those sequences
        will be used again by new messages (a publisher sends again what was not confirmed), so
        the cursor comes back to ``end`` and what is outstanding at or past it is dropped:
        else the new messages would be skipped, or taken for the lost ones. The high-side twin
        of :meth:`trim`; returns how many outstanding messages were dropped."""
        if self.next <= end:
            return 0
        self.next = end
        gone = [s for s in self.out if s >= end]
        for seq in gone:
            o = self.out[seq]
            if o.member is not None and o.member in self.members:
                _remove(self.members[o.member].held, seq)
            self._done(seq)
        # their timers and places in line go too (not left for the lazy heaps to find)
        self.ready = [s for s in self.ready if s < end]
        heapq.heapify(self.ready)
        self.delayed = [e for e in self.delayed if e[1] < end]
        heapq.heapify(self.delayed)
        self.deadlines = [e for e in self.deadlines if e[1] < end]
        heapq.heapify(self.deadlines)
        self.dirty = True
        return len(gone)


def _remove(held: List[int], seq: int) -> None:
    i = bisect_left(held, seq)
    if i < len(held) and held[i] == seq:
        del held[i]
