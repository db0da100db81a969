"""Key snapshots in the broker (ids 74-77, docs/protocol.md "Snapshots"): SNAPSHOT and the
streaming of its entries. Pure logic, no sockets; a mixin of :class:`~zeps.broker.core.BrokerCore`.

A client attached to a stream that has a last-value index (created with ``key_index`` or
``compact``, or any stream of a broker run with ``--key-index``), allowed to subscribe and
not subscribed yet, sends SNAPSHOT with 1 to :data:`MAX_SNAPSHOT_PREFIXES` key prefixes.
The broker answers with one SNAPSHOT-ENTRY (or SNAPSHOT-ENTRY-H, to a client that chose
HEADERS-SELECT, for a message with headers) per live
key under a prefix - that key's latest message - then SNAPSHOT-END with the sequence the
snapshot is consistent at (``seq``) and the count of entries. Applying the entries, then the
stream from ``seq + 1`` (SUBSCRIBE with ``latest = seq``), gives exactly the current state: no
gap, no duplicate (:mod:`zeps.journal.lastvalue` explains why the index never needs old versions).

* **When ``seq`` is taken.** On SNAPSHOT, after the stream's queued publishes are appended: every
  message published before the SNAPSHOT is in it or in the stream after ``seq``.
* **Bounded memory.** The broker keeps a cursor per snapshot (:class:`SnapshotCursor`: which
  prefix, the last key sent, ``seq``, the count: O(1)), never the answer. Entries are produced in
  the round's pump step, at most :data:`SNAPSHOT_STEP` per session a round, each read from the
  journal as it is sent, looking at most :data:`SNAPSHOT_LOOKS` keys (keys skipped, changed
  after ``seq`` or gone with retention, count too, and the cursor passes them: a round's work is
  bounded however many keys are skipped, and none is looked at twice), and only while the
  client has credit for it (an entry costs what the same message costs as a DELIVER, or
  DELIVER-H for -H) and its pipe is not congested. A reader
  that grants no credit, or stops reading, costs its cursor and nothing else: an entry its full
  pipe does not take is taken back as a DELIVER is (:meth:`Snapshots.snapshot_unsent`: its
  credit returned, the cursor rewound to its key, nothing held), and SNAPSHOT-END is produced
  only in a round that sent no entry, so it never overtakes an entry sent again.
* **Purges.** The index does not know a purge: entries at or below the stream's ``purged_to``
  are skipped (their keys' later messages, if any, are in the stream).
* Overlapping prefixes are reduced to the shortest (``a`` covers ``ab``), so no key comes twice;
  entries come prefix by prefix, each in key order (UTF-8 bytes).
* Refused with INVALID: a regex (``~``), no prefix or more than the limit, a client that may
  not subscribe (rights first), one already subscribed (snapshot first, then subscribe), a
  second SNAPSHOT while one runs, a stream without the index.
"""
from __future__ import annotations

import struct

from zeps.journal.errors import JournalError
from zeps.matching.patterns import REGEX_MARKER
from zeps.protocol import commands as c, encode
from zeps.protocol.deliver import frame_cost
from zeps.protocol.reasons import Reason
from zeps.protocol.deliver import OVERHEAD, TS_SHIFT
from zeps.protocol.headers import BLOCK_HEAD_SIZE, deliver_h_cost
from zeps.protocol.snapshot import (MAX_SNAPSHOT_PREFIXES, SNAPSHOT_ENTRY_H_ID,
                                    entry_from_deliver, entry_h_from_deliver)

_U32 = struct.Struct(">I")
#: Where an entry's key length is (SNAPSHOT-ENTRY; SNAPSHOT-ENTRY-H: where its block starts).
ENTRY_KEY = 19

#: The most entries one session is sent in one round.
SNAPSHOT_STEP = 256
#: The most keys one session's step looks at in one round, entries and keys skipped (changed
#: after the snapshot's sequence, dropped by retention or a purge) together.
SNAPSHOT_LOOKS = 4 * SNAPSHOT_STEP
#: The least credit an entry costs (as a DELIVER: sequence and key length).
MIN_COST = 9

NO_INDEX = ("stream has no key index (create it with --key-index or --compact, or run the broker "
            "with --key-index)")


class SnapshotCursor:
    """Where a session's snapshot is: O(1) whatever the number of keys."""

    __slots__ = ("prefixes", "i", "after", "seq", "count", "redo")

    def __init__(self, prefixes, seq: int):
        self.prefixes = prefixes
        self.i = 0                      # the prefix being sent
        self.after = None               # the last key sent under it (None: from its start)
        self.seq = seq                  # consistent at
        self.count = 0                  # entries sent
        self.redo = False               # ``after`` itself did not go out: send it again first


def reduce_prefixes(prefixes) -> tuple:
    """The prefixes in order, without those another one covers (so no key comes twice)."""
    out: list = []
    for p in sorted(set(prefixes)):
        if not out or not p.startswith(out[-1]):
            out.append(p)
    return tuple(out)


class Snapshots:
    """SNAPSHOT's handler and the pump step that sends the entries (a mixin of BrokerCore, which
    owns ``snapshotting``: identity -> cursor of the snapshots that can go on now; the session
    holds its cursor in ``Session.snapshot`` meanwhile)."""

    def _on_snapshot(self, s, cmd: c.Snapshot) -> None:
        if not s.may_subscribe:
            self._invalid(s.identity, Reason.not_allowed(self.acl.who(s.user), "subscribe",
                                                         s.stream))
            return
        n = len(cmd.prefixes)
        why = None
        if not 1 <= n <= MAX_SNAPSHOT_PREFIXES:
            why = f"SNAPSHOT takes 1 to {MAX_SNAPSHOT_PREFIXES} key prefixes, not {n}"
        elif any(p.startswith(REGEX_MARKER) for p in cmd.prefixes):
            why = "SNAPSHOT takes key prefixes, not a regex (~)"
        elif s.subscribed:
            why = "SNAPSHOT while subscribed: snapshot first, then SUBSCRIBE from its sequence"
        elif s.snapshot is not None:
            why = "a SNAPSHOT is already under way on this peering"
        elif s.consumer is not None:
            why = "SNAPSHOT on a consumer's member (use another peering)"
        if why is not None:
            self._invalid(s.identity, why)
            return
        st = self.streams[s.stream]
        if st.queued_publishes:
            st.append_queued()
        try:
            seq = st.journal.keys_seq
        except JournalError:
            self._invalid(s.identity, NO_INDEX)
            return
        s.snapshot = SnapshotCursor(reduce_prefixes(cmd.prefixes), seq)
        self.snapshot_resume(s)

    def pump_snapshots(self) -> bool:
        """One step of every snapshot whose client has credit and a pipe that takes it (only
        those are in ``snapshotting``: one waiting for CREDIT, or congested, costs no round
        anything). True if one of them has more to send now (run the next round at once)."""
        more = False
        for ident, cur in list(self.snapshotting.items()):
            s = self.sessions.get(ident)
            st = self.streams.get(s.stream) if s is not None and s.stream is not None else None
            if st is None or s.snapshot is not cur:          # detached, forgotten, re-attached
                del self.snapshotting[ident]
                continue
            if s.congested_until or s.credit < MIN_COST or not self._snapshot_step(s, st, cur):
                self.snapshotting.pop(ident, None)          # back when CREDIT or the pipe is
            else:
                more = True
        return more

    def snapshot_resume(self, s) -> None:
        """The client granted credit, or its congestion ended: its snapshot, if any, runs
        again from the next round."""
        if s.snapshot is not None and not s.congested_until and s.credit >= MIN_COST:
            self.snapshotting[s.identity] = s.snapshot

    def _snapshot_step(self, s, st, cur: SnapshotCursor) -> bool:
        """Send up to :data:`SNAPSHOT_STEP` entries within the credit, looking at up to
        :data:`SNAPSHOT_LOOKS` keys (a skipped key moves the cursor past it: a step that stops
        for credit does not look at it again); SNAPSHOT-END when done. True if the step stopped
        at a bound with credit left."""
        budget, looks = SNAPSHOT_STEP, SNAPSHOT_LOOKS
        ident = s.identity
        outbox = self.outbox
        purged_to = st.purged_to
        try:
            if cur.redo:                          # the first entry its full pipe did not take
                rec = st.journal.latest(cur.after)
                if rec is not None and purged_to < rec.sequence <= cur.seq:
                    if not self._send_entry(s, st, cur, rec):
                        return False
                    budget -= 1
                cur.redo = False
            while cur.i < len(cur.prefixes):
                snap = st.journal.snapshot(cur.prefixes[cur.i], cur.after)
                snap.seq = cur.seq                # consistent at the SNAPSHOT's sequence
                for key, rec in snap.steps():
                    looks -= 1
                    if rec is None or rec.sequence <= purged_to:
                        cur.after = key.decode("utf-8")
                    elif self._send_entry(s, st, cur, rec):
                        budget -= 1
                    else:
                        return False              # wait for CREDIT
                    if budget == 0 or looks == 0:
                        return True
                cur.i += 1
                cur.after = None
            if budget < SNAPSHOT_STEP:            # END in a round that sends no entry: it
                return True                       # never overtakes one its pipe gives back
        except Exception as exc:       # CorruptionError, I/O error: say so, end this snapshot
            self.log("snapshot_failed", stream=st.name, client=ident.hex(), error=str(exc))
            self._invalid(ident, Reason.failed("SNAPSHOT failed in the broker", exc))
        else:
            outbox.append((ident, encode(c.SnapshotEnd(cur.seq, cur.count))))
        s.snapshot = None
        return False

    def _send_entry(self, s, st, cur: SnapshotCursor, rec) -> bool:
        """Send ``rec`` as an entry if the credit takes it (False: it does not)."""
        block = rec.header_block if s.headers else None
        cost = frame_cost(rec.frame) + (len(block) if block else 0)
        if s.credit < cost:
            st.window_advice(s, rec.sequence, cost)
            return False
        s.credit -= cost
        self.outbox.append((s.identity, entry_h_from_deliver(rec.frame, rec.timestamp, block)
                            if block else entry_from_deliver(rec.frame, rec.timestamp)))
        cur.after = rec.key
        cur.count += 1
        s.delivered += 1
        st.delivered_total += 1
        st.delivered_bytes += cost
        return True

    def snapshot_unsent(self, s, frame: bytes) -> None:
        """The shell could not send this entry (the client's pipe is full): its credit comes
        back, and the first one given back rewinds the cursor to its key (sent again first).
        The core calls this for the session's unsent entries in outbox order (= key order)."""
        cur = s.snapshot
        s.delivered -= 1
        if cur is None:
            return
        if frame[2] == SNAPSHOT_ENTRY_H_ID:
            kpos = ENTRY_KEY + BLOCK_HEAD_SIZE + _U32.unpack_from(frame, ENTRY_KEY)[0]
            s.credit += deliver_h_cost(frame)
        else:
            kpos = ENTRY_KEY
            s.credit += len(frame) - OVERHEAD - TS_SHIFT
        cur.count -= 1
        if cur.redo and cur.after is not None:
            return                               # an earlier key is sent again first
        key = bytes(frame[kpos + 1:kpos + 1 + frame[kpos]]).decode("utf-8")
        for i, p in enumerate(cur.prefixes):
            if key.startswith(p):
                cur.i, cur.after, cur.redo = i, key, True
                return
