"""Snapshot sessions: answering ICANHAZ? and SYNCSTART at a bounded cost. Pure.

A snapshot can be long (every key of a hashmap, every event since a sequence), its client may
never read it, and clients may ask for many at once. So:

* A :class:`Session` holds an iterator and at most **one** encoded message (the head, not yet
  sent): it never materialises the snapshot. Its iterator yields, per entry it examines, the
  frames to send or ``None`` (an entry skipped: another subtree, a deleted key), so the budget
  counts entries examined as well as messages sent. After the last entry comes the end message
  (KTHXBAI, SYNCEND): fixed when the session was opened, or a callable asked for it then (the
  CHP front end's sequence is SNAPSHOT-END's, known at the end). An iterator whose source is
  not ready (the broker's next entries are on their way) yields :data:`WAIT`: the session then
  waits for its source, not for its peer; it keeps its slot (it is making progress) and is
  pumped again in the next round, and dropped as one blocked on its peer is after
  ``stall_timeout`` seconds without progress. Its shell wakes when the source has more (CHP:
  it polls the socket of each waiting snapshot).
* The shell's ``send(ident, frames)`` returns True (sent), False (the peer's pipe is full, its
  ``SNDHWM`` reached: the head is kept and the session waits) or None (the peer is gone: the
  session ends). A client that never reads therefore costs its pipe (``SNDHWM`` messages) and
  one head message, and nothing grows; after ``stall_timeout`` seconds without progress its
  session is dropped so that it gives its slot back.
* :class:`Snapshots` runs its sessions round robin, ``turn`` entries each per turn and
  ``round_budget`` in all per :meth:`Snapshots.pump`, so one huge snapshot neither starves the
  others nor stalls the broker's loop. A session is opened, through the front end's ``opener``,
  when fewer than ``max_active`` sessions are making progress (not blocked on their peer) and
  fewer than ``max_sessions`` are open; so readers that never read do not hold the slots of
  those that do: they only count against ``max_sessions``, and once that many are open a
  request that waits has the session blocked the longest dropped to make room
  (``snapshot.abandoned``, as after ``stall_timeout``). Requests beyond wait in a FIFO of
  ``max_waiting``; one identity has at most one request active or waiting (a second is
  ignored: ``snapshot.busy``); beyond the FIFO a request is dropped (``snapshot.refused``; the
  Guide's clients ask again after a silence). A waiting request holds no iterator; an open
  session holds its iterator's state and one message.
* A session whose iterator can **park** (has ``park()``: it lets go of what it read ahead and
  takes it again from its cursor when next asked, as the BUS front end's journal scans do) gives
  its slot up after a turn it spent whole mostly skipping (it sent fewer entries than half those
  it looked at) while requests wait: it goes, parked, to the back of the FIFO and the request at
  its head is opened. So the slots go round the scans that skip, not to the first
  ``max_active`` until they end: a SYNCSTART whose subtrees match nothing scans the whole
  journal without ever sending (so it never blocks and always counts as making progress), and
  a few of them held every slot for minutes while a client that asked for ten events waited
  behind them (found by review). A request now waits at most a turn (``turn`` entries) per
  skipping scan ahead of it; a parked session holds its cursor and end message only, and
  counts in the FIFO against ``max_waiting``. A session that sends keeps its slot (one rotated
  after every turn went round behind every waiting request, each opened again: a calm client's
  3,000 events behind 40 readers that never read took over 10 s), as does an iterator that
  cannot park (CHP's: a SNAPSHOT peering with the broker each).
* A request whose source is the **whole stream, filtered** (``whole``: CHP's subtrees starting
  with ``~``, which the broker's SNAPSHOT would take for a regex) cannot park either, and for a
  subtree that matches nothing it sends nothing, so it never blocks: 8 of them (18 bytes
  each) held every slot while a client asking for one key waited 30.6 s (200,000 keys; 3 ms
  alone). At most ``max_whole`` (1) such sessions make progress (one blocked on its peer
  does not count: a client that never read held the place until its stall timeout); the
  requests behind them in the FIFO are opened past those waiting for the whole stream, and at
  most ``max_whole_waiting`` (8) of those wait (more: ``snapshot.refused``).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

Frames = List[bytes]
#: The shell's send: True sent, False would block (pipe full), None peer gone.
Send = Callable[[bytes, Frames], Optional[bool]]
#: The front end's opener: request -> (the entries' frames or None each, the end message).
Opener = Callable[[Any], Tuple[Iterator[Optional[Frames]], Frames]]

MORE, BLOCKED, DONE, GONE, WAITING = "more", "blocked", "done", "gone", "waiting"


class _Wait:
    __slots__ = ()

    def __repr__(self) -> str:
        return "WAIT"


#: What an entries iterator yields when its source has nothing yet (not an entry: not counted).
WAIT: Any = _Wait()


class Session:
    __slots__ = ("ident", "request", "_entries", "_end", "_head", "_head_is_end",
                 "blocked_since", "waiting_since", "messages", "examined", "backoff",
                 "retry_at")

    def __init__(self, ident: bytes, request: Any, entries: Iterator[Optional[Frames]],
                 end: Any):
        self.ident = ident
        self.request = request
        self._entries: Optional[Iterator[Optional[Frames]]] = entries
        self._end = end
        self._head: Optional[Frames] = None
        self._head_is_end = False
        self.blocked_since: Optional[float] = None
        #: since when its source has had nothing for it (None: not waiting for its source)
        self.waiting_since: Optional[float] = None
        self.messages = 0          # sent, the end message included
        self.examined = 0          # entries taken from the iterator
        self.backoff = 0.0         # blocked on its peer: seconds to the next try, doubling ...
        self.retry_at = 0.0        # ... and when that is

    def pump(self, send: Send, now: float, budget: int) -> Tuple[str, int]:
        """Send until ``budget`` entries were examined, the peer blocks or the end is sent.
        Returns (MORE | BLOCKED | DONE | GONE | WAITING, entries examined)."""
        used = 0
        while True:
            if self._head is None:
                if self._entries is None:
                    return DONE, used
                if used >= budget:
                    return MORE, used
                item = next(self._entries, _END)
                if item is WAIT:
                    if self.waiting_since is None:
                        self.waiting_since = now
                    return WAITING, used
                self.waiting_since = None
                if item is _END:
                    self.close()
                    end = self._end
                    self._head, self._head_is_end = (end() if callable(end) else end), True
                else:
                    used += 1
                    self.examined += 1
                    if item is None:
                        continue
                    self._head = item
            ok = send(self.ident, self._head)
            if ok is None:
                self.close()
                return GONE, used
            if not ok:
                if self.blocked_since is None:
                    self.blocked_since = now
                return BLOCKED, used
            self.blocked_since = None
            self.messages += 1
            self._head = None
            if self._head_is_end:
                self._entries = None
                return DONE, used

    def park(self) -> bool:
        """Let the iterator go of what it read ahead, if it can and no head is held: True if
        parked (the session can wait in the FIFO holding its cursor only)."""
        park = getattr(self._entries, "park", None)
        if park is None or self._head is not None:
            return False
        park()
        return True

    def close(self) -> None:
        entries, self._entries = self._entries, None
        close = getattr(entries, "close", None)
        if close is not None:
            close()


_END: Any = object()


class Snapshots:
    """The snapshot socket's sessions. ``counters`` is the front end's
    :class:`~zeps.frontends.counters.Counters`."""

    def __init__(self, opener: Opener, counters, *, max_active: int = 8, max_sessions: int = 32,
                 max_waiting: int = 256, turn: int = 64, round_budget: int = 1024,
                 stall_timeout: float = 30.0, retry: float = 0.05, first_retry: float = 0.001,
                 whole: Optional[Callable[[Any], bool]] = None, max_whole: int = 1,
                 max_whole_waiting: int = 8):
        self._opener = opener
        #: requests whose source is the whole stream, filtered (CHP's ``~`` subtrees): at most
        #: ``max_whole`` open and ``max_whole_waiting`` waiting (more: refused)
        self._whole = whole
        self.max_whole = max_whole
        self.max_whole_waiting = max_whole_waiting
        self._whole_waiting = 0            # of those in ``_waiting`` (counted, not looked for)
        self._counters = counters
        self.max_active = max_active
        self.max_sessions = max(max_sessions, max_active)
        self.max_waiting = max_waiting
        self.turn = turn
        self.round_budget = round_budget
        self.stall_timeout = stall_timeout
        self.retry = retry
        self.first_retry = min(first_retry, retry)
        #: requests not opened yet, (ident, request), and parked sessions, in turn order
        self._waiting: Deque[Any] = deque()
        self._active: "OrderedDict[bytes, Session]" = OrderedDict()
        self._idents: Dict[bytes, None] = {}           # active or waiting

    def __len__(self) -> int:
        return len(self._active) + len(self._waiting)

    @property
    def active(self) -> int:
        return len(self._active)

    def request(self, ident: bytes, request: Any) -> bool:
        """A parsed request from ``ident``; False if ignored (busy or refused, counted)."""
        c = self._counters
        if ident in self._idents:
            c.add("snapshot.busy")
            return False
        whole = self._whole is not None and self._whole(request)
        # (a count: a pass over the FIFO cost each ~ request O(max_waiting), refused or not)
        if len(self._waiting) >= self.max_waiting or (
                whole and self._whole_waiting >= self.max_whole_waiting):
            c.add("snapshot.refused")
            return False
        self._waiting.append((ident, request))
        self._whole_waiting += whole
        self._idents[ident] = None
        c.add("snapshot.requested")
        return True

    def _running(self) -> int:
        return sum(1 for s in self._active.values() if s.blocked_since is None)

    def _is_whole(self, item: Any) -> bool:
        """A waiting request (or session) for the whole stream, filtered."""
        if self._whole is None:
            return False
        return self._whole(item.request if isinstance(item, Session) else item[1])

    def _next(self) -> Optional[int]:
        """Where in the FIFO the next request to open is: its head, past those for the whole
        stream while ``max_whole`` of them are open (each sends nothing of a subtree that
        matches nothing, so never blocks: a few held every slot for whole scans while a
        client asking for one key waited; found by review); None if none may open."""
        if not self._waiting:
            return None
        if self._whole is None or sum(      # one blocked on its peer costs nothing: not counted
                s.blocked_since is None and self._is_whole(s)
                for s in self._active.values()) < self.max_whole:
            return 0
        return next((i for i, item in enumerate(self._waiting) if not self._is_whole(item)),
                    None)

    def _room(self) -> bool:
        """A waiting request can be opened now (maybe in place of a blocked session)."""
        if self._next() is None or self._running() >= self.max_active:
            return False
        return len(self._active) < self.max_sessions or self._running() < len(self._active)

    def _open(self) -> None:
        while self._room():
            if len(self._active) >= self.max_sessions:     # make room: the longest blocked
                victim = min((s for s in self._active.values() if s.blocked_since is not None),
                             key=lambda s: s.blocked_since)
                self._drop(victim, "snapshot.abandoned")
            at = self._next()
            item = self._waiting[at]
            del self._waiting[at]
            self._whole_waiting -= self._is_whole(item)
            if isinstance(item, Session):                # parked: its turn again
                self._active[item.ident] = item
                continue
            ident, request = item
            try:
                entries, end = self._opener(request)
            except Exception:                            # the source failed: no snapshot
                self._counters.add("snapshot.failed")
                del self._idents[ident]
                continue
            self._active[ident] = Session(ident, request, iter(entries), end)

    def pump(self, send: Send, now: float) -> bool:
        """One round over the sessions; True if a session can go on at once (not blocked)."""
        self._open()
        budget = self.round_budget
        for ident in list(self._active):
            if budget <= 0:
                break
            s = self._active.get(ident)
            if s is None:                                # dropped to make room this round
                continue
            since = s.blocked_since if s.blocked_since is not None else s.waiting_since
            if since is not None and now - since >= self.stall_timeout:
                self._end(s, "snapshot.abandoned")
                continue
            if s.blocked_since is not None and now < s.retry_at:
                continue                                 # its peer's pipe was full just now
            sent = s.messages
            try:
                state, used = s.pump(send, now, min(self.turn, budget))
            except Exception:                            # the source failed mid-way
                self._end(s, "snapshot.failed")
                continue
            budget -= max(used, 1)
            if state == BLOCKED:                         # from 1 ms again after progress
                s.backoff = (min(self.retry, s.backoff * 2) if s.messages == sent and s.backoff
                             else self.first_retry)
                s.retry_at = now + s.backoff
            else:
                s.backoff = 0.0
            if state == DONE:
                self._end(s, "snapshot.served")
            elif state == GONE:
                self._end(s, "snapshot.gone")
            elif state == MORE:
                # others wait, and this turn mostly skipped: to the FIFO's back, parked
                if self._waiting and 2 * (s.messages - sent) < used and s.park():
                    del self._active[ident]
                    self._waiting.append(s)
                    self._whole_waiting += self._is_whole(s)
                    self._open()
                else:
                    self._active.move_to_end(ident)      # round robin across calls
        return self.next_deadline(now) == now

    def _drop(self, s: Session, outcome: str) -> None:
        s.close()
        del self._active[s.ident]
        del self._idents[s.ident]
        self._counters.add(outcome)

    def _end(self, s: Session, outcome: str) -> None:
        self._drop(s, outcome)
        self._open()

    def next_deadline(self, now: float) -> Optional[float]:
        """When :meth:`pump` has something to do: now if a session can go on or a request can
        start; when the first session blocked on its peer is tried again, if all are (1 ms
        after its pipe was found full, doubling while it stays full, up to ``retry``: a reader
        that keeps up is not held ``retry`` seconds each time its pipe fills, one that never
        reads costs a try each ``retry``); None if there is none. A session waiting for its
        source is due at its stall timeout (its shell wakes earlier, when the source has
        more)."""
        if self._room():
            return now
        deadline = None
        for s in self._active.values():
            if s.waiting_since is not None:
                due = s.waiting_since + self.stall_timeout
                deadline = due if deadline is None else min(deadline, due)
                continue
            if s.blocked_since is None:
                return now
            due = max(now, min(s.retry_at, s.blocked_since + self.stall_timeout))
            deadline = due if deadline is None else min(deadline, due)
        return deadline

    def close(self) -> None:
        for s in [*self._active.values(), *self._waiting]:
            if isinstance(s, Session):
                s.close()
        self._active.clear()
        self._waiting.clear()
        self._whole_waiting = 0
        self._idents.clear()

    def sessions(self) -> List[Session]:
        return list(self._active.values())
