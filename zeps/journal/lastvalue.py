"""The last-value index of a stream (issue 18, item 1): for each key, the sequence of its latest
message and where that message is in the log - the "current value of every key" that CHP, a
JetStream KV bucket or a Kafka compacted topic gives its users - and its checkpoint file.

The truth is the log, as for the producer state (:mod:`.producers`, whose pattern this copies):
the index is a function of the records, applied in sequence order (:meth:`KeyIndex.observe`),
so it is crash-consistent with them by construction.

**What it holds.** ``key (UTF-8 bytes) -> seq << 40 | position``: one ``dict`` entry whose value
is one packed ``int`` (the sequence of the key's latest message and the byte position of the
record holding it in the segment of that sequence; a message of a batch record has its record's
position). The segment is the one whose range holds the sequence (sequences never change, nor
do segments' first sequences, so it needs no bits). Positions from 2^40 on are not kept (stored
as 0) and a position is a *hint*: a lookup reads the record there and checks that it holds the
sequence (its sequence is inside its CRC-covered frame); a hint made stale by compaction, which
moves records, falls back to the sparse index (:meth:`Journal.latest
<zeps.journal.Journal.latest>`). Beside the ``dict``, :class:`SortedKeys` keeps the live keys in
byte order for prefix iteration. Memory per key: the ``dict`` slot (~40 bytes with its spare
room), the key's ``bytes`` object (33 + its length, rounded to 8), the packed ``int`` (~36) and
the sorted list's pointer (8): measured by ``python -m bench.bench_kv_index --keys 100000`` as
the process's resident set, 162 bytes per key for keys of 4 to 8 bytes (``kv.<n>``); rebuilding
it from its checkpoint took 0.04 s, from the log alone 0.22 s, and appending costs about
0.9 µs more per message with the index than without (figures at 10^6 keys: run it without
``--keys``).

**Tombstones.** A message with an empty body deletes its key (CHP's rule): the key leaves the
index (and the live view); compaction keeps the tombstone record itself for
``delete_retention_ms`` (:mod:`.compaction`) so that readers of the log see the deletion.

**Retention.** A key whose latest message retention (or a purge) deleted is not served: every
read checks ``seq >= first_seq``. Its entry is removed without any pass over the keys on the
owner's thread (the one that appends), in three steps: the checkpoint writer thread (below),
which walks every entry of its copy anyway, leaves it out of the file and, when done, hands the
entries below the ``first_seq`` of its roll to the index (:attr:`KeyIndex.dead`); then each
append removes up to twice as many of them as it has messages (:meth:`KeyIndex.prune`), each
only if its value is still the one handed over (a key written again since is live, as
``first_seq`` never decreases); the entries still queued when the next checkpoint starts leave
the queue, and that checkpoint finds them again. Retention kills about one key per message
appended at most (the key of each message it deletes, if that was the key's latest), so
pruning keeps up, and catches up after a purge. The index so holds the live keys and, in the
steady state, at most about two checkpoint periods' messages of dead ones, not every key ever
published; opening a stream loads the live keys only.

**Snapshots (prefix iteration) and their sequence.** :class:`KeySnapshot` iterates the live
keys under a prefix in key order, a bounded chunk at a time (never the whole answer at once):
it re-finds its place by key after each chunk, so appends in between cannot disturb it. It is
*consistent at* ``seq`` (the index's sequence when it was made) in this sense: it yields every
key whose latest message is at or below ``seq`` with that message, and skips the keys whose
latest message is above ``seq`` when it reaches them (changed, or created, since) and those
deleted since. A reader that applies the snapshot and then the stream from ``seq + 1`` (in
which every skipped key's latest message is, as compaction never removes a key's latest
message) ends with exactly the current state, without the index ever keeping old versions. (A
message yielded may be superseded, and so compacted away, before the reader reads it:
:meth:`Journal.read_at <zeps.journal.Journal.read_at>` then gives None, and the key's change is
in the stream after ``seq``.) (The alternative - sorting all keys into a list at snapshot
time - costs O(keys log keys) and the whole answer's memory per snapshot.)

**Checkpoint file** ``<upto, 20 digits>.keys`` beside the segments: the index before sequence
``upto`` (big-endian)::

    magic  8 bytes   "ZEPSKEY1"
    upto   u64       the index covers the records below it (= the number in the file name)
    count  u64
    lens   count x u8    key lengths, keys in ascending byte order
    keys   the keys, concatenated
    seqs   count x u64
    poss   count x u64   position hints (0: none)
    crc    u32       CRC-32C of everything before it

The writer writes it at :meth:`~zeps.journal.Journal.close` (synced) and at a roll once as many
messages were appended since the last one as that one held keys (:attr:`KeyIndex.kept`, the
live keys then; ``KEY_CHECKPOINT_MIN`` at least): writing one costs O(keys), and the index
holds at most the live keys plus about two such periods' messages, so O(1) amortised per
message. (Counting every key of the index, the dead ones not found yet included, made each
period longer than the last under retention with ever-new keys, and the index grow with it.)
The one at a roll is encoded and written by a short-lived thread
(:class:`~zeps.journal.kv.KeyCheckpointWriter`) from a copy taken at the roll (``dict.copy``
and the sorted keys: tens of ms at 10^6 keys), in chunks that let the owner's thread run.
Opening a stream loads the newest valid checkpoint with ``upto <= next_seq`` and applies the
records from ``max(upto, first_seq)`` on (so at most as many records as keys plus one segment
after a crash, none after a clean close); a torn, invalid or stale one (``upto`` past the
recovered log) is ignored and deleted, and the index is rebuilt from the whole log. Same
torn-tail rules as the log: the records applied are exactly those recovery kept.
"""
from __future__ import annotations

import logging
import os
import re
import struct
from array import array
from bisect import bisect_left, bisect_right, insort
from itertools import accumulate, chain
from typing import Iterator, List, Optional, Tuple

import google_crc32c

from ..protocol.deliver import KEY_OFFSET, KEYLEN_OFFSET, MIN_FRAME
from .record import BAD, END, LIMIT, SHORT, BatchRecord
from .segment import SEQ_DIGITS, segment_base, write_atomic

log = logging.getLogger("zeps.journal")

SHIFT = 40
POS_MASK = (1 << SHIFT) - 1
MAGIC = b"ZEPSKEY1"
SUFFIX = ".keys"
_HEAD = struct.Struct(">8sQQ")
_CRC = struct.Struct(">I")
_NAME_RE = re.compile(r"^(\d{%d})%s$" % (SEQ_DIGITS, re.escape(SUFFIX)))
_SWAP = __import__("sys").byteorder == "little"
#: keys handled per step by the checkpoint writer thread (each step is a few ms of work)
CHUNK = 16384


def pack(seq: int, pos: int) -> int:
    return (seq << SHIFT) | (pos if 0 <= pos <= POS_MASK else 0)


# ----------------------------------------------------------------------------- sorted keys

class SortedKeys:
    """Keys (``bytes``) in ascending order: a list of sorted lists of at most ``2 * load``
    keys each and the greatest key of each (as ``sortedcontainers.SortedList`` without its
    positional index), so adding or removing a key costs a binary search and a move of at most
    ``2 * load`` pointers, whatever the number of keys."""

    __slots__ = ("_lists", "_maxes", "_load", "_len")

    def __init__(self, keys: Optional[List[bytes]] = None, load: int = 1000):
        """``keys``: already sorted and distinct (a checkpoint's)."""
        self._load = load
        keys = keys or []
        self._lists = [keys[i:i + load] for i in range(0, len(keys), load)]
        self._maxes = [lst[-1] for lst in self._lists]
        self._len = len(keys)

    def __len__(self) -> int:
        return self._len

    def add(self, key: bytes) -> None:
        """Add a key that is not present."""
        maxes = self._maxes
        if not maxes:
            self._lists.append([key])
            maxes.append(key)
            self._len = 1
            return
        i = bisect_left(maxes, key)
        if i == len(maxes):
            i -= 1
            self._lists[i].append(key)
            maxes[i] = key
        else:
            insort(self._lists[i], key)
        self._len += 1
        lst = self._lists[i]
        if len(lst) > 2 * self._load:
            half = lst[self._load:]
            del lst[self._load:]
            self._lists.insert(i + 1, half)
            maxes[i] = lst[-1]
            maxes.insert(i + 1, half[-1])

    def discard(self, key: bytes) -> None:
        """Remove a key if it is present."""
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            return
        lst = self._lists[i]
        j = bisect_left(lst, key)
        if j == len(lst) or lst[j] != key:
            return
        del lst[j]
        self._len -= 1
        if not lst:
            del self._lists[i]
            del maxes[i]
        elif j == len(lst):
            maxes[i] = lst[-1]

    def chunk_from(self, key: bytes, inclusive: bool) -> List[bytes]:
        """A copy of the keys from ``key`` on (at or above if ``inclusive``, else above) up to
        the end of the sublist holding the first of them: a bounded piece, [] at the end."""
        maxes = self._maxes
        i = bisect_left(maxes, key) if inclusive else bisect_right(maxes, key)
        if i == len(maxes):
            return []
        lst = self._lists[i]
        j = bisect_left(lst, key) if inclusive else bisect_right(lst, key)
        return lst[j:]

    def flat(self) -> List[bytes]:
        """All keys in order (one C-level call: atomic for other Python threads)."""
        return list(chain.from_iterable(self._lists))


# ----------------------------------------------------------------------------- the index

def message_keys(r):
    """``(key bytes, sequence, is a tombstone)`` of each message of a record (a
    :class:`~.record.Record`, or a :class:`~.record.BatchRecord`'s entries), read from its
    frame without decoding anything."""
    frame = r.frame
    if not isinstance(r, BatchRecord):
        klen = frame[KEYLEN_OFFSET]
        return ((frame[KEY_OFFSET:KEY_OFFSET + klen], r.sequence,
                 len(frame) == MIN_FRAME + klen),)
    offs = r.offsets
    seq = r.sequence
    out = []
    for i in range(len(offs) - 1):
        o = offs[i]
        klen = frame[o]
        out.append((frame[o + 1:o + 1 + klen], seq + i, offs[i + 1] - o == 5 + klen))
    return out


class KeyIndex:
    """``key -> (latest sequence, position hint)`` over the messages observed, tombstoned keys
    left out, with the live keys kept sorted. Pure: no files."""

    __slots__ = ("_d", "_sorted", "dead", "_at", "kept")

    def __init__(self, d: Optional[dict] = None, sorted_keys: Optional[SortedKeys] = None):
        self._d = d if d is not None else {}
        self._sorted = sorted_keys if sorted_keys is not None else SortedKeys()
        #: None, or ``(keys, packed values)`` of entries whose message was below the first
        #: sequence, to prune from ``_at`` on: handed over by the checkpoint writer thread as
        #: its last act on the index (:meth:`checkpointed`), cleared by
        #: :meth:`checkpoint_state` before the next one starts (so the owner never prunes
        #: while one may hand over)
        self.dead: Optional[Tuple[List[bytes], List[int]]] = None
        self._at = 0
        #: how many keys the last checkpoint of this index held (the live ones then)
        self.kept = len(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def observe(self, key: bytes, seq: int, pos: int, tombstone: bool) -> None:
        """Message ``seq`` of ``key`` (in a record at byte ``pos``) was appended."""
        d = self._d
        if tombstone:
            if d.pop(key, None) is not None:
                self._sorted.discard(key)
            return
        if key not in d:
            self._sorted.add(key)
        d[key] = pack(seq, pos)

    def observe_records(self, records, pos: int) -> None:
        """The consecutive ``records`` were appended, the first at byte ``pos`` of its
        segment (a batch record's messages all get its position)."""
        d = self._d
        sk = self._sorted
        for r in records:
            p = pos if pos <= POS_MASK else 0
            frame = r.frame
            if not isinstance(r, BatchRecord):
                klen = frame[KEYLEN_OFFSET]
                key = frame[KEY_OFFSET:KEY_OFFSET + klen]
                if len(frame) == MIN_FRAME + klen:
                    if d.pop(key, None) is not None:
                        sk.discard(key)
                else:
                    if key not in d:
                        sk.add(key)
                    d[key] = (r.sequence << SHIFT) | p
            else:
                for key, seq, tomb in message_keys(r):
                    self.observe(key, seq, p, tomb)
            pos += r.size
        if self.dead is not None:
            self.prune(2 * (records[-1].last_sequence - records[0].sequence + 1))

    def prune(self, budget: int) -> None:
        """Remove up to ``budget`` of the entries in :attr:`dead` (owner's thread), each only if
        its value is unchanged (the key was not written again, nor deleted, since)."""
        keys, vals = self.dead
        d, sk, i = self._d, self._sorted, self._at
        self._at = stop = min(i + budget, len(keys))
        for j in range(i, stop):
            if d.get(keys[j]) == vals[j]:
                del d[keys[j]]
                sk.discard(keys[j])
        if stop == len(keys):
            self.dead = None

    def get(self, key: bytes) -> Optional[Tuple[int, int]]:
        """``(sequence, position hint)`` of the key's latest message, or None."""
        v = self._d.get(key)
        return None if v is None else (v >> SHIFT, v & POS_MASK)

    def chunk(self, start: bytes, inclusive: bool) -> List[bytes]:
        """A bounded piece of the live keys from ``start`` on, in order (a copy)."""
        return self._sorted.chunk_from(start, inclusive)

    def packed(self, key: bytes) -> Optional[int]:
        """The key's packed ``seq << 40 | position``, or None."""
        return self._d.get(key)

    def items(self) -> List[Tuple[bytes, int]]:
        """All ``(key, packed)`` in key order (O(keys): tests and tools)."""
        d = self._d
        return [(k, d[k]) for k in self._sorted.flat()]

    def copy_state(self) -> Tuple[List[bytes], dict]:
        """The sorted keys and a copy of the mapping, each taken by one C-level call (cheap,
        and consistent when taken on the thread that appends)."""
        return self._sorted.flat(), self._d.copy()

    def checkpoint_state(self) -> Tuple[List[bytes], dict]:
        """:meth:`copy_state` for a background checkpoint (owner's thread): what an earlier
        one left to prune is dropped, as the new one finds what is left of it again."""
        self.dead, self._at = None, 0
        return self.copy_state()

    def checkpointed(self, kept: int, dead: Tuple[List[bytes], List[int]]) -> None:
        """The background checkpoint's last act on the index (its thread): it kept ``kept``
        keys, and ``dead`` (keys, packed values) are to prune, by the owner (:meth:`prune`)."""
        self.kept = kept
        self.dead = dead if dead[0] else None


# ----------------------------------------------------------------------------- snapshots

class KeySnapshot:
    """The live keys under ``prefix``, in key order, consistent at ``seq`` (see the module
    docstring): iterating yields ``(key, sequence)``; keys whose latest message is above
    ``seq`` or below the stream's first sequence are skipped. ``after``: start after this key
    (to resume a paged answer). Made by :meth:`zeps.journal.Journal.snapshot`."""

    def __init__(self, index: KeyIndex, prefix: str, seq: int, first_seq, after: Optional[str],
                 read_at=None):
        self.prefix = prefix
        self.seq = seq
        self._index = index
        self._first_seq = first_seq
        self._read_at = read_at
        self._p = prefix.encode("utf-8")
        self._after = None if after is None else after.encode("utf-8")

    def __iter__(self) -> Iterator[Tuple[str, int]]:
        for k, v in self._entries():
            yield k.decode("utf-8"), v >> SHIFT

    def records(self):
        """The messages themselves (:class:`~zeps.journal.Record`), in key order: each read
        at the position the index keeps (checked; through the sparse index if it moved). A
        message compacted away since (the key changed after ``seq``) is skipped."""
        for _, rec in self.steps():
            if rec is not None:
                yield rec

    def steps(self) -> Iterator[Tuple[bytes, object]]:
        """Every key under the prefix looked at, in key order, as ``(key, record)``: its message
        as :meth:`records` reads it, or None for a key skipped (its latest message is above
        ``seq`` or below the stream's first sequence, or was compacted away since). A reader
        that pages through a snapshot (the broker) counts the skipped keys too, so that a step
        of it looks at a bounded number of keys however many are skipped."""
        read = self._read_at
        for k, v in self._entries(True):
            yield k, None if v is None else read(v >> SHIFT, v & POS_MASK)

    def _entries(self, skipped: bool = False) -> Iterator[Tuple[bytes, Optional[int]]]:
        """``(key, packed)`` of the keys kept; with ``skipped``, ``(key, None)`` for the others."""
        p = self._p
        start, inclusive = (p, True) if self._after is None or self._after < p \
            else (self._after, False)
        top = self.seq
        index = self._index
        while True:
            chunk = index.chunk(start, inclusive)
            if not chunk:
                return
            first = self._first_seq()
            for k in chunk:
                if not k.startswith(p):
                    return
                v = index.packed(k)           # now, not when the chunk was taken
                if v is not None and first <= v >> SHIFT <= top:
                    yield k, v
                elif skipped:
                    yield k, None
            start, inclusive = chunk[-1], False


# ----------------------------------------------------------------------------- files

def checkpoint_path(stream_dir: str, upto: int) -> str:
    return os.path.join(stream_dir, segment_base(upto) + SUFFIX)


def list_checkpoints(stream_dir: str) -> List[int]:
    """The ``upto`` of the checkpoint files in a stream directory, newest first."""
    found = [int(m.group(1)) for m in map(_NAME_RE.match, os.listdir(stream_dir)) if m]
    found.sort(reverse=True)
    return found


def encode_steps(upto: int, keys: List[bytes], d: dict, first_seq: int = 1,
                 dead: Optional[Tuple[List[bytes], List[int]]] = None):
    """Encode the checkpoint of ``keys`` (sorted) over the mapping ``d``, keeping the entries
    at or above ``first_seq``: a generator yielding between chunks of :data:`CHUNK` keys (so
    that a thread running it lets others run) and returning the file's bytes. ``dead``: two
    lists, to which the keys and values of the entries below ``first_seq`` are appended."""
    dead_keys, dead_vals = dead if dead is not None else ([], [])
    lens = bytearray()
    seqs = array("Q")
    poss = array("Q")
    kept: List[bytes] = []
    for i in range(0, len(keys), CHUNK):
        part = keys[i:i + CHUNK]
        vals = [d.get(k) for k in part]
        for k, v in zip(part, vals):
            if v is not None and v >> SHIFT >= first_seq:
                kept.append(k)
                lens.append(len(k))
                seqs.append(v >> SHIFT)
                poss.append(v & POS_MASK)
            elif v is not None:
                dead_keys.append(k)
                dead_vals.append(v)
        yield
    if _SWAP:
        seqs.byteswap()
        poss.byteswap()
    body = b"".join((_HEAD.pack(MAGIC, upto, len(kept)), bytes(lens), b"".join(kept),
                     seqs.tobytes(), poss.tobytes()))
    return body + _CRC.pack(google_crc32c.value(body))


def encode(upto: int, keys: List[bytes], d: dict, first_seq: int = 1) -> bytes:
    gen = encode_steps(upto, keys, d, first_seq)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def decode(data: bytes, upto: int) -> KeyIndex:
    """The index in a checkpoint's bytes; ValueError saying why they are not a valid
    checkpoint of the index before ``upto``."""
    if len(data) < _HEAD.size + _CRC.size:
        raise ValueError(f"{len(data)} bytes is too short")
    if _CRC.unpack_from(data, len(data) - 4)[0] != google_crc32c.value(data[:-4]):
        raise ValueError("CRC-32C mismatch")
    magic, got, count = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError("not a key index checkpoint")
    if got != upto:
        raise ValueError(f"it holds the index before sequence {got}, not {upto}")
    p = _HEAD.size
    lens = data[p:p + count]
    p += count
    total = sum(lens)
    if len(lens) != count or p + total + 16 * count + 4 != len(data):
        raise ValueError("sizes do not add up")
    offs = list(accumulate(lens, initial=p))
    keys = [data[a:b] for a, b in zip(offs, offs[1:])]
    p += total
    seqs = array("Q", data[p:p + 8 * count])
    poss = array("Q", data[p + 8 * count:p + 16 * count])
    if _SWAP:
        seqs.byteswap()
        poss.byteswap()
    if count and (max(seqs) >= upto or min(seqs) < 1 or max(poss) > POS_MASK):
        raise ValueError("an entry is out of range")
    d = dict(zip(keys, [(s << SHIFT) | q for s, q in zip(seqs, poss)]))
    if len(d) != count:
        raise ValueError("a key is repeated")
    return KeyIndex(d, SortedKeys(keys))


def write_file(stream_dir: str, upto: int, data: bytes, sync: bool) -> None:
    """Write a checkpoint atomically (temporary file, rename), deleting the older ones; with
    ``sync`` its data and the directory entry are made durable. Raises OSError."""
    write_atomic(checkpoint_path(stream_dir, upto), data, sync)
    for other in list_checkpoints(stream_dir):
        if other != upto:
            remove(stream_dir, other)


def remove(stream_dir: str, upto: int) -> None:
    try:
        os.unlink(checkpoint_path(stream_dir, upto))
    except OSError:
        pass


# ----------------------------------------------------------------------------- rebuilding

def _discard(path: str, why: str) -> None:
    log.warning("journal: ignoring key index checkpoint %s: %s", path, why)
    try:
        os.unlink(path)
    except OSError:
        pass


def load_checkpoint(stream_dir: str, next_seq: int) -> Tuple[Optional[KeyIndex], int]:
    """``(index, upto)`` from the newest valid checkpoint with ``upto <= next_seq``, or
    ``(None, 1)``; the others are deleted. Writer only."""
    chosen: Tuple[Optional[KeyIndex], int] = (None, 1)
    for upto in list_checkpoints(stream_dir):
        path = checkpoint_path(stream_dir, upto)
        if chosen[0] is not None:
            remove(stream_dir, upto)
            continue
        if upto > next_seq:
            _discard(path, f"it describes records up to {upto - 1}, the log ends at "
                           f"{next_seq - 1}")
            continue
        try:
            with open(path, "rb") as f:
                chosen = (decode(f.read(), upto), upto)
        except (OSError, ValueError) as e:
            _discard(path, str(e))
    return chosen


def apply_log(view, index: KeyIndex, seq: int, next_seq: int) -> None:
    """Apply the records ``seq .. next_seq - 1`` of a (just recovered) writer's ``view`` to
    ``index``, with their positions: segment by segment, from the index entry at or before
    ``seq``, through :meth:`Segment.parse <zeps.journal.segment.Segment.parse>` (the records
    recovery kept, gaps of compacted segments included). A corrupt sealed segment is skipped
    with an error logged (the records it hides cannot count)."""
    segs = view._segs
    firsts = view._firsts
    i = max(bisect_right(firsts, seq) - 1, 0)
    for seg in segs[i:]:
        view._prepare(seg)
        pos, s = seg.start_for(seq)
        exact = pos > 0
        limit = view._limit(seg)
        last_ts = None
        while True:
            out: list = []
            res = seg.parse(pos, s, limit, out, max_records=8192, chunks=True, last_ts=last_ts,
                            exact=exact)
            exact = False
            p = pos
            for r in out:
                if r.last_sequence >= seq:
                    if r.sequence >= seq:
                        index.observe_records((r,), p)
                    else:                   # a batch record that began below seq
                        for key, q, tomb in message_keys(r):
                            if q >= seq:
                                index.observe(key, q, p, tomb)
                p += r.size
            pos, s, last_ts = res.pos, res.seq, res.last_ts
            if res.status == LIMIT:
                continue
            if res.status in (BAD, SHORT) or (seg.bad_pos is not None and pos >= seg.bad_pos):
                why = res.describe() if res.status != END else seg.bad_reason
                log.error("journal %s: the key index misses the unreadable records of %s "
                          "after byte %d (%s)", view._dir, seg.log_path, pos, why)
            break


def rebuild(view, stream_dir: str, first_seq: int, next_seq: int) -> Tuple[KeyIndex, int]:
    """The index of the records a (just recovered) writer's ``view`` holds: the newest usable
    checkpoint, then the records after it; and that checkpoint's ``upto`` (1 if none)."""
    index, upto = load_checkpoint(stream_dir, next_seq)
    if index is None:
        index = KeyIndex()
    start = max(upto, first_seq)
    if start < next_seq:
        apply_log(view, index, start, next_seq)
    return index, upto
