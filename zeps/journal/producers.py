"""Producer state: for each producer id, the last producer sequence (``pseq``) the journal holds
and the stream sequence of that record - what the broker deduplicates idempotent publishers
against (issue 9) - and its snapshot files.

The truth is the log: a record appended with a producer carries ``pid`` and ``pseq`` in its
CRC-covered producer extension (:mod:`.record`; a batch record's ``pseq`` is its first
message's, so its last message has ``pseq + count - 1``, the value the state keeps), so the
state is a function of the records (:meth:`ProducerState.observe` applied in sequence order)
and is crash-consistent with them by construction. Rebuilding it must not read the whole
stream, and retention deletes old records, so the writer keeps snapshots:

* ``<first seq of segment>.producers`` (beside the segment's ``.log``) is the state *before*
  that segment's first record, written when the segment is created by a roll (after the sealed
  segment was synced, so it never describes a record that is not durable). Opening a stream
  loads the newest valid snapshot ``N`` with ``first_seq <= N <= next_seq`` and applies only
  the records from ``N`` on (at most the last segment, normally). Retention deletes a segment's
  snapshot with it; the snapshot of the oldest kept segment carries everything retention
  deleted, so a producer that published long ago is still known.
* Between rolls, the writer also writes the state every ``snapshot_interval_bytes`` of log
  (8 MiB by default) and at :meth:`Journal.close <zeps.journal.Journal.close>`, so a restart
  applies at most that many bytes of records after a crash, and none after a clean close. Such
  a snapshot is not at a segment start; each one replaces the previous one, and a roll replaces
  it by the new segment's. It is not synced (the log is the truth: one that did not survive, or
  that describes records the log lost, is not used).
* A torn or invalid snapshot (bad magic, CRC, count, or a sequence that does not match its
  name), or one that names a sequence past the recovered log (records it describes were lost
  in a crash under ``fsync="never"``), is ignored and deleted: the next older one is used, or
  the records that are left are scanned.

File format (big-endian)::

    magic   8 bytes  "ZEPSPRD2"
    upto    u64      the sequence the state is taken before (= the number in the file name)
    count   u32
    entry   count x  pid_len u8 | pid (UTF-8) | pseq u64 | seq u64 | ts u64
                     | key_len u8 | key (UTF-8, empty: not bound)    least recently used first
    crc     u32      CRC-32C of everything before it

A version 1 snapshot (``"ZEPSPRD1"``: entries without ``ts`` and key) is still read; its ids
count as last used at the time it is loaded, and are not bound.

Bounded memory and age (issue 15, finding 6): at most ``max_producers`` ids are kept;
appending a record of an id makes it the most recently used one, and beyond the limit the
least recently used id is dropped. An id whose last record is older than ``max_age_ns``
(``JournalConfig.producer_max_age_ms``, one day by default, as Kafka's
``producer.id.expiration.ms``) is dropped too: at the next append (the record timestamps are
the clock, so the oldest id is always the first, and dropping costs O(1) per id) and, for a
lookup, as soon as it is that old. A producer that retries after its state was dropped is not
known and its retry is not deduplicated (the SDK tells the application when it can see it:
:mod:`zeps.clients.producer`). Only appends (and the rebuild, which applies the same records,
with the same timestamps, in the same order) change the order, so the rebuilt state equals the
writer's.

Binding (issue 15, finding 5): an entry may carry the CurveZMQ key of the client whose records
made it (:meth:`ProducerState.bind`, set by the broker after the first append of an id under a
key); the broker refuses the id to any other key while the entry lives. Records do not carry
keys, so a binding is as durable as the snapshots: one made after the newest snapshot is lost
in a crash (the id is then bound again by the next key that publishes with it).
"""
from __future__ import annotations

import logging
import os
import re
import struct
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Tuple

import google_crc32c

from .errors import CorruptionError
from .segment import PRODUCERS_SUFFIX, SEQ_DIGITS, segment_base, write_atomic

log = logging.getLogger("zeps.journal")

MAGIC = b"ZEPSPRD2"
MAGIC_V1 = b"ZEPSPRD1"
_HEAD = struct.Struct(">8sQI")
_TAIL = struct.Struct(">QQQ")          # pseq, seq, ts
_TAIL_V1 = struct.Struct(">QQ")        # pseq, seq
_CRC = struct.Struct(">I")
_NAME_RE = re.compile(r"^(\d{%d})%s$" % (SEQ_DIGITS, re.escape(PRODUCERS_SUFFIX)))


class ProducerState:
    """``pid -> (last pseq, seq, ts, key)`` for at most ``max_producers`` ids, least recently
    used first: the producer sequence and stream sequence of the id's last record, that
    record's timestamp (ns), and the key the id is bound to (None: not bound). Ids whose last
    record is older than ``max_age_ns`` (None: no age limit) are dropped. Pure: no files; the
    time is the records' timestamps, or the ``now_ns`` a lookup is given."""

    __slots__ = ("_d", "_by_key", "max_producers", "max_age_ns")

    def __init__(self, max_producers: int, max_age_ns: Optional[int] = None):
        self._d: "OrderedDict[str, Entry]" = OrderedDict()
        # key -> the ids bound to it, least recently used first (appended or bound, and
        # to_back for an id the broker says is in use)
        self._by_key: "Dict[str, OrderedDict[str, None]]" = {}
        self.max_producers = max_producers
        self.max_age_ns = max_age_ns

    def __len__(self) -> int:
        return len(self._d)

    def _unbind(self, pid: str, entry: "Entry") -> None:
        """``pid`` (its entry ``entry``) left the state: it leaves its key's ids."""
        key = entry[3]
        if key is not None:
            ids = self._by_key[key]
            del ids[pid]
            if not ids:
                del self._by_key[key]

    def observe(self, pid: str, pseq: int, seq: int, ts: int = 0) -> None:
        """The record ``seq`` (timestamp ``ts``) was appended by ``pid`` with ``pseq``: it
        becomes the id's last record and the id the most recently used one; then the least
        recently used ids beyond ``max_producers``, and those older than ``max_age_ns`` at
        ``ts``, are dropped (O(1) per id dropped)."""
        d = self._d
        old = d.pop(pid, None)
        key = None if old is None else old[3]
        d[pid] = (pseq, seq, ts, key)
        if key is not None:
            self._by_key[key].move_to_end(pid)
        if len(d) > self.max_producers:
            self._unbind(*d.popitem(last=False))
        if self.max_age_ns is not None:
            self.expire(ts)

    def expire(self, now_ns: int) -> int:
        """Drop the ids whose last record is older than ``max_age_ns`` at ``now_ns`` (from the
        least recently used on: stops at the first one young enough). Returns how many."""
        if self.max_age_ns is None:
            return 0
        d = self._d
        oldest = now_ns - self.max_age_ns
        n = 0
        while d:
            pid = next(iter(d))
            if d[pid][2] >= oldest:
                break
            self._unbind(pid, d.pop(pid))
            n += 1
        return n

    def get(self, pid: str, now_ns: Optional[int] = None) -> "Optional[Entry]":
        """``(last pseq, seq, ts, key)`` of ``pid``, or None if it is not known, or (with
        ``now_ns``) its last record is older than ``max_age_ns`` then. O(1), changes nothing."""
        e = self._d.get(pid)
        if (e is not None and now_ns is not None and self.max_age_ns is not None
                and e[2] < now_ns - self.max_age_ns):
            return None
        return e

    def bind(self, pid: str, key: str) -> None:
        """Bind a known id that is not bound yet to ``key`` (the CurveZMQ key whose records
        made it); nothing otherwise. Does not change the order."""
        e = self._d.get(pid)
        if e is not None and e[3] is None:
            self._d[pid] = (e[0], e[1], e[2], key)
            # the key's newest (the broker binds an id just after its first records: the
            # order differs from _d's only among the ids appended in one batch)
            self._by_key.setdefault(key, OrderedDict())[pid] = None

    def bound_to(self, key: str) -> Tuple[int, Optional[str]]:
        """``(how many ids are bound to key, the least recently used of them or None)``: the
        broker bounds the ids of one key (``--max-producer-ids-per-key``). O(1)."""
        ids = self._by_key.get(key)
        return (0, None) if not ids else (len(ids), next(iter(ids)))

    def to_back(self, key: str, pid: str) -> None:
        """Make ``pid`` the most recently used of the ids bound to ``key`` (the broker: an id a
        peering owns is in use, whenever it last published). O(1)."""
        ids = self._by_key.get(key)
        if ids is not None and pid in ids:
            ids.move_to_end(pid)

    def forget(self, pid: str) -> None:
        """Drop ``pid`` (as the least recently used beyond ``max_producers`` is dropped)."""
        e = self._d.pop(pid, None)
        if e is not None:
            self._unbind(pid, e)

    def observe_records(self, records: Iterable) -> None:
        """:meth:`observe` each record that has a producer, in order: a
        :class:`~.record.Record`, or a :class:`~.record.BatchRecord` whose last message (at
        ``last_sequence``) has producer sequence ``pseq + count - 1``."""
        for r in records:
            if r.producer is not None:
                last = r.last_sequence
                self.observe(r.producer, r.pseq + last - r.sequence, last, r.timestamp)

    def as_dict(self) -> Dict[str, Tuple[int, int]]:
        """A copy: ``{pid: (last pseq, seq)}``, least recently used first. O(ids): for tests
        and inspection, never on a request's path (:meth:`get` is)."""
        return {pid: e[:2] for pid, e in self._d.items()}

    def encode(self, upto: int) -> bytes:
        """The snapshot file's bytes for the state before sequence ``upto``."""
        parts: List[bytes] = [_HEAD.pack(MAGIC, upto, len(self._d))]
        pack = _TAIL.pack
        for pid, (pseq, seq, ts, key) in self._d.items():
            pb = pid.encode("utf-8")
            kb = b"" if key is None else key.encode("utf-8")
            parts.append(bytes((len(pb),)) + pb + pack(pseq, seq, ts) + bytes((len(kb),)) + kb)
        body = b"".join(parts)
        return body + _CRC.pack(google_crc32c.value(body))

    @classmethod
    def decode(cls, data: bytes, upto: int, max_producers: int,
               max_age_ns: Optional[int] = None, v1_ts: int = 0) -> "ProducerState":
        """The state in a snapshot's bytes; ValueError saying why they are not a valid
        snapshot of the state before ``upto``. A version 1 snapshot's ids get timestamp
        ``v1_ts`` and no key. Nothing is dropped by age while loading."""
        if len(data) < _HEAD.size + _CRC.size:
            raise ValueError(f"{len(data)} bytes is too short")
        if _CRC.unpack_from(data, len(data) - 4)[0] != google_crc32c.value(data[:-4]):
            raise ValueError("CRC-32C mismatch")
        magic, got, count = _HEAD.unpack_from(data, 0)
        if magic not in (MAGIC, MAGIC_V1):
            raise ValueError("not a producer snapshot")
        if got != upto:
            raise ValueError(f"it holds the state before sequence {got}, not {upto}")
        v1 = magic == MAGIC_V1
        tail = _TAIL_V1 if v1 else _TAIL
        state = cls(max_producers)
        d = state._d
        p, end = _HEAD.size, len(data) - 4
        for _ in range(count):
            if p >= end or p + 1 + data[p] + tail.size > end:
                raise ValueError("entries run past the end")
            n = data[p]
            try:
                pid = data[p + 1:p + 1 + n].decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError("a producer id is not UTF-8") from None
            if v1:
                (pseq, seq), ts = tail.unpack_from(data, p + 1 + n), v1_ts
            else:
                pseq, seq, ts = tail.unpack_from(data, p + 1 + n)
            if not n or not pseq or not 1 <= seq < upto:
                raise ValueError("an entry is out of range")
            p += 1 + n + tail.size
            key = None
            if not v1:
                if p >= end or p + 1 + data[p] > end:
                    raise ValueError("entries run past the end")
                k = data[p]
                try:
                    key = data[p + 1:p + 1 + k].decode("utf-8") or None
                except UnicodeDecodeError:
                    raise ValueError("a key is not UTF-8") from None
                p += 1 + k
            d.pop(pid, None)
            d[pid] = (pseq, seq, ts, key)
            if len(d) > max_producers:
                d.popitem(last=False)
        if p != end:
            raise ValueError("bytes after the last entry")
        state.max_age_ns = max_age_ns
        for pid, e in d.items():
            if e[3] is not None:
                state._by_key.setdefault(e[3], OrderedDict())[pid] = None
        return state


#: A producer state entry: (last pseq, stream sequence of that record, its timestamp in ns,
#: the key the id is bound to or None).
Entry = Tuple[int, int, int, Optional[str]]


# ----------------------------------------------------------------------------- files

def snapshot_path(stream_dir: str, upto: int) -> str:
    return os.path.join(stream_dir, segment_base(upto) + PRODUCERS_SUFFIX)


def list_snapshots(stream_dir: str) -> List[int]:
    """The sequences of the snapshot files in a stream directory, newest first."""
    found = []
    for name in os.listdir(stream_dir):
        m = _NAME_RE.match(name)
        if m:
            found.append(int(m.group(1)))
    found.sort(reverse=True)
    return found


def write_snapshot(stream_dir: str, state: ProducerState, upto: int, sync: bool) -> None:
    """Write the snapshot of the state before ``upto`` atomically (temporary file, rename); with
    ``sync`` its data and the directory entry are made durable. Raises OSError."""
    write_atomic(snapshot_path(stream_dir, upto), state.encode(upto), sync)


def _discard(path: str, why: str) -> None:
    log.warning("journal: ignoring producer snapshot %s: %s", path, why)
    try:
        os.unlink(path)
    except OSError:
        pass


def load_snapshot(stream_dir: str, firsts: List[int], next_seq: int,
                  max_producers: int, max_age_ns: Optional[int] = None,
                  v1_ts: int = 0) -> Tuple[Optional[ProducerState], int]:
    """``(state, upto)`` from the newest valid snapshot with ``firsts[0] <= upto <= next_seq``
    (the records from ``upto`` on are those to apply); ``(None, firsts[0])`` if there is none.
    ``firsts``: the segments' first sequences. Deletes the snapshots that cannot be used
    (invalid, past ``next_seq``, or before ``firsts[0]``) and the older ones not at a segment
    start (superseded). ``max_age_ns``, ``v1_ts``: as :meth:`ProducerState.decode`. Writer
    only."""
    first = firsts[0]
    starts = set(firsts)
    chosen: Tuple[Optional[ProducerState], int] = (None, first)
    for upto in list_snapshots(stream_dir):
        path = snapshot_path(stream_dir, upto)
        if upto < first:          # its segment was deleted (retention, or a crash in it)
            _discard(path, f"its segment is gone (the stream starts at {first})")
            continue
        if upto > next_seq:
            _discard(path, f"it describes records up to {upto - 1}, the log ends at "
                           f"{next_seq - 1}")
            continue
        if chosen[0] is None:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                chosen = (ProducerState.decode(data, upto, max_producers, max_age_ns, v1_ts),
                          upto)
            except (OSError, ValueError) as e:
                _discard(path, str(e))
                continue
        elif upto not in starts:
            try:
                os.unlink(path)
            except OSError:
                pass
    return chosen


def rebuild(view, stream_dir: str, firsts: List[int], next_seq: int,
            max_producers: int, max_age_ns: Optional[int] = None,
            v1_ts: int = 0) -> Tuple[ProducerState, int]:
    """The producer state of the records a (just recovered) writer's ``view`` holds: the newest
    usable snapshot, then the records after it; and the sequence of that snapshot (``firsts[0]``
    if none). A corrupt sealed segment is skipped with an error logged (the records it hides
    cannot count). ``max_age_ns``: ids older than that are dropped as the records' timestamps
    pass it; ``v1_ts``: the timestamp of the ids of a version 1 snapshot."""
    state, seq = load_snapshot(stream_dir, firsts, next_seq, max_producers, max_age_ns, v1_ts)
    upto = seq
    if state is None:
        state = ProducerState(max_producers, max_age_ns)
        if firsts[0] > 1:
            log.warning("journal %s: no usable producer snapshot; producer state rebuilt from "
                        "records %d on only", stream_dir, firsts[0])
    cursor = None
    while seq < next_seq:
        try:
            recs, cursor = view._read_records(seq, 8192, 8 << 20, cursor, True)
        except CorruptionError as e:
            later = [q for q in firsts if q > seq]
            log.error("journal %s: producer state misses the unreadable records of a segment: "
                      "%s", stream_dir, e)
            if not later:
                break
            seq, cursor = later[0], None
            continue
        if not recs:
            break
        state.observe_records(recs)          # batch records come whole (chunks)
        seq = recs[-1].last_sequence + 1
    return state, upto


def remove_snapshot(stream_dir: str, upto: int) -> None:
    """Delete a snapshot that a newer one superseded (missing is fine)."""
    try:
        os.unlink(snapshot_path(stream_dir, upto))
    except OSError:
        pass
