"""Compacted streams (issue 18, item 2): rewriting sealed segments to keep only the latest message
of each key, as Kafka's log cleaner does, crash-safe at every step.

**What is kept.** Over the *cleanable* segments (the leading sealed ones; never the active
segment, whose records may not be durable yet), an offset map ``key -> latest sequence`` is built
first. Then each cleanable segment, oldest first, is rewritten keeping a record if it holds the
latest message of one of its keys, except a tombstone (an empty body: the key was deleted) older
than ``delete_retention_ms`` (by its record's timestamp against the injected clock), which goes
once no older message of its key is left anywhere (as Kafka's ``delete.retention.ms``: readers
of the log have that long to see a deletion), and once no last-value checkpoint on disk is older
than it (:mod:`.lastvalue`: the index rebuilt from that checkpoint after a crash applies the
records after it, and a key deleted there would stay in it). Records are copied verbatim
(their bytes, whatever extensions they carry: producer, headers), so sequences never change:
the segment keeps its name and first sequence and now has gaps, which every reader accepts in a
compacted stream (``parse_records(gaps=)``; a read of a removed sequence returns the next kept
one). A batch record is the unit: it is kept whole if any of its messages is kept (its
superseded messages stay readable; the index and compaction still know the latest), dropped
only if none is. A segment whose every record goes stays, empty (merging small segments is left
for later).

Oldest first makes every state in between safe: a superseded message goes no earlier than the
segment holding it is rewritten, and a tombstone goes only once every older message of its key is
gone (those in earlier segments were removed in an earlier step; one kept inside a kept batch
record keeps the tombstone too). So at any point - after any step, after a crash - every key's
latest message is there, and a deleted key cannot come back.

**When.** :func:`should_compact` (pure): the cleanable segments are the leading sealed ones
whose newest record is at least ``min_lag`` old; compaction runs if the bytes of those written
since the last compaction (at or after ``cleaned_to``, the *cleaner checkpoint*, ``CLEANER`` in
the stream directory) are at least ``min_cleanable_dirty_ratio`` of all of them (Kafka's dirty
ratio). It then rewrites all cleanable segments (a new message can supersede old ones anywhere),
but only writes those that change.

**Crash safety** (Kafka's ``.cleaned``/``.swap`` suffixes). For a segment ``B``:

1. ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned`` written and fsynced;
2. the two index files renamed to ``.swap``, then ``B.log.cleaned`` to ``B.log.swap`` and the
   directory fsynced: **the commit point** is the existence of ``B.log.swap``;
3. ``B.index.swap`` and ``B.timeindex.swap`` replace ``B.index``/``B.timeindex``, then
   ``B.log.swap`` replaces ``B.log`` (``os.replace``: atomic), directory fsynced.

:func:`recover` (run by :meth:`Journal.open <zeps.journal.Journal.open>` and before each
compaction) finishes step 3 for every ``B.log.swap`` it finds and deletes every other
``.cleaned``/``.swap`` file. In between, a reader may see the new index beside the old log (step
3 replaces the index first): an index entry names the sequence of the record it points at and a
read from an entry checks it (``exact``), so a mismatched index is rebuilt from the log, never
followed; a reader that has the old log open keeps reading it (and its cursors, which remember
the file's inode, are located again in the new one). ``ZEPS_COMPACT_CRASH_AT=<step>[:<n>]``
makes the process SIGKILL itself at the ``n``-th (default first) time it reaches ``step`` (one
of :data:`STEPS`), for the crash tests.

**Running beside the broker.** :func:`run` is a function over a stream directory and the
journal's sealed segments: the broker calls it off its loop (a thread or a subprocess; it takes
the ``COMPACTION.LOCK`` flock so that two never run at once, and never holds the writer's lock),
then :meth:`Journal.reload_segments <zeps.journal.Journal.reload_segments>` with the segments it
rewrote. Its Python work yields the GIL every few ms (switch interval) like any thread; its
memory is the offset map (about 100 bytes per distinct key) and one segment's decisions.

**Producer state.** Records that carried a producer's last sequence may be removed; the state
itself is in the ``.producers`` snapshots (one per segment start), so it survives, except when
every snapshot is lost and it is rebuilt from the log (then ids whose records were removed are
forgotten, and a retry of theirs is not deduplicated).
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import signal
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

from .errors import CorruptionError, JournalError, JournalLockedError
from .index import encode_entries, entries_for, read_index_files
from .lastvalue import list_checkpoints, message_keys
from .record import END, LIMIT
from .segment import (INDEX_SUFFIX, LOG_SUFFIX, TIME_SUFFIX, Segment, fsync_dir,
                      list_segment_seqs, segment_base, write_file)
from . import settings as stream_settings

log = logging.getLogger("zeps.journal")

CLEANED = ".cleaned"
SWAP = ".swap"
CHECKPOINT = "CLEANER"
LOCK_FILE = "COMPACTION.LOCK"
CRASH_ENV = "ZEPS_COMPACT_CRASH_AT"
#: The points where ``ZEPS_COMPACT_CRASH_AT`` can kill the process: after the offset map,
#: after a segment's ``.cleaned`` files, after its index files' rename to ``.swap``, after the
#: commit (``B.log.swap``), after its index files replaced, after its log replaced, and before
#: the cleaner checkpoint.
STEPS = ("map", "cleaned", "swap-index", "swap", "replace-index", "replaced", "checkpoint")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_COPY = 1 << 20


# ----------------------------------------------------------------------------- the rule

@dataclasses.dataclass(frozen=True)
class Decision:
    """What :func:`should_compact` decided: clean the first ``count`` sealed segments (0:
    none), whose dirty bytes are ``dirty`` of ``total`` (``ratio``)."""
    count: int
    dirty: int
    total: int

    @property
    def ratio(self) -> float:
        return self.dirty / self.total if self.total else 0.0


def should_compact(segments: Sequence[Tuple[int, int, Optional[int]]], cleaned_to: int,
                   min_dirty_ratio: float, min_lag_ns: int, now_ns: int) -> Decision:
    """For the sealed segments ``(first sequence, size in bytes, newest timestamp or None)``,
    oldest first (the active one excluded): the leading ones whose newest record is at least
    ``min_lag_ns`` old at ``now_ns`` are cleanable; clean them if the bytes of those at or
    after ``cleaned_to`` (written since the last compaction) are at least ``min_dirty_ratio``
    of theirs, and not zero. Pure."""
    k = 0
    dirty = total = 0
    for first, size, newest in segments:
        if min_lag_ns and newest is not None and newest > now_ns - min_lag_ns:
            break
        k += 1
        total += size
        if first >= cleaned_to:
            dirty += size
    if dirty == 0 or dirty < min_dirty_ratio * total:
        return Decision(0, dirty, total)
    return Decision(k, dirty, total)


def keep(latest: int, seq: int, tombstone: bool, ts: int, horizon_ns: int,
         older_kept: bool, pinned: bool = False) -> bool:
    """Whether compaction keeps message ``seq`` of a key whose latest message is ``latest``:
    only the latest, and a tombstone only while it is not older than ``horizon_ns``, or an
    older message of its key is still kept somewhere (``older_kept``), or it is at or above
    a last-value checkpoint on disk (``pinned``: the key index rebuilt after a crash from that
    checkpoint, which may still hold the key, learns of the delete by reading it). Pure."""
    if seq < latest:
        return False
    return not tombstone or ts >= horizon_ns or older_kept or pinned


# ----------------------------------------------------------------------------- crash points

_reached: Dict[str, int] = {}


def _step(name: str) -> None:
    """Kill the process here if ``ZEPS_COMPACT_CRASH_AT`` names this step (and occurrence)."""
    want = os.environ.get(CRASH_ENV)
    if not want:
        return
    step, _, nth = want.partition(":")
    if step != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)


# ----------------------------------------------------------------------------- files

def _base(stream_dir: str, first_seq: int) -> str:
    return os.path.join(stream_dir, segment_base(first_seq))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def recover(stream_dir: str) -> List[str]:
    """Finish or discard what a compaction interrupted by a crash left (see the module
    docstring): for each ``B.log.swap``, put the swapped files in place; delete every other
    ``.cleaned`` or ``.swap`` file. Returns what it did, one line each. Does nothing while a
    compaction holds the lock (it finishes its own steps), and takes no lock when there is
    nothing to do (a stream that was never compacted gets no lock file)."""
    if not any(n.endswith((CLEANED, SWAP)) for n in os.listdir(stream_dir)):
        return []
    try:
        lock = _take_lock(stream_dir)
    except JournalLockedError:
        return []
    try:
        return _recover(stream_dir)
    finally:
        os.close(lock)


def _recover(stream_dir: str) -> List[str]:
    done = []
    names = os.listdir(stream_dir)
    swapped = {n[:-len(LOG_SUFFIX + SWAP)] for n in names if n.endswith(LOG_SUFFIX + SWAP)}
    for base in sorted(swapped):
        path = os.path.join(stream_dir, base)
        for suffix in (INDEX_SUFFIX, TIME_SUFFIX, LOG_SUFFIX):
            if os.path.exists(path + suffix + SWAP):
                os.replace(path + suffix + SWAP, path + suffix)
        done.append(f"finished the compaction of {base}{LOG_SUFFIX}")
    for n in names:
        if n.endswith(CLEANED) or (n.endswith(SWAP) and n[:20] not in swapped):
            _unlink(os.path.join(stream_dir, n))
            done.append(f"discarded {n}")
    _unlink(os.path.join(stream_dir, CHECKPOINT + ".tmp"))
    if done:
        fsync_dir(stream_dir)
        for line in done:
            log.warning("journal %s: compaction recovery: %s", stream_dir, line)
    return done


def _take_lock(stream_dir: str) -> int:
    fd = os.open(os.path.join(stream_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise JournalLockedError(f"a compaction of {stream_dir} is running", stream_dir,
                                     None) from None
        raise
    return fd


def lock_unless_running(stream_dir: str, create: bool) -> Optional[int]:
    """The compaction lock, taken without waiting, by the writer's retention for its deletion
    of segments: a compaction that had read a segment retention then deleted put its files
    back (``_rewrite``). The descriptor to close afterwards; None if a compaction holds the
    lock (retention waits for its next pass); -1 if the stream has no lock file and
    ``create`` is false (a stream that is not compacted: nothing runs to hold it)."""
    flags = os.O_RDWR | _CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(os.path.join(stream_dir, LOCK_FILE), flags, 0o644)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def read_checkpoint(stream_dir: str) -> int:
    """``cleaned_to``: the first sequence not covered by the last compaction (1: none)."""
    try:
        with open(os.path.join(stream_dir, CHECKPOINT), "rb") as f:
            v = json.loads(f.read().decode("utf-8"))["cleaned_to"]
        return v if isinstance(v, int) and v >= 1 else 1
    except FileNotFoundError:
        return 1
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("journal %s: unreadable cleaner checkpoint (%s): the whole log counts as "
                    "dirty", stream_dir, e)
        return 1


def _write_checkpoint(stream_dir: str, cleaned_to: int) -> None:
    path = os.path.join(stream_dir, CHECKPOINT)
    with open(path + ".tmp", "wb") as f:
        f.write(json.dumps({"cleaned_to": cleaned_to}).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fsync_dir(stream_dir)


# ----------------------------------------------------------------------------- reading

def _records(seg: Segment, bound: int):
    """``(record, position)`` of every record of a sealed segment, in order, chunk by chunk
    (a batch record whole); CorruptionError at a short or bad record, or one at or past
    ``bound`` (the next segment's first sequence)."""
    size = seg.file_size()
    pos, seq, last_ts = 0, seg.first_seq, None
    while True:
        out: list = []
        res = seg.parse(pos, seq, size, out, max_records=8192, chunks=True, last_ts=last_ts,
                        gaps=True)
        p = pos
        for r in out:
            if r.last_sequence >= bound:
                raise CorruptionError(f"{seg.log_path}: sequence {r.last_sequence} at byte {p} "
                                      f"is in the next segment's range (from {bound})",
                                      seg.log_path, p)
            yield r, p
            p += r.size
        pos, seq, last_ts = res.pos, res.seq, res.last_ts
        if res.status == LIMIT:
            continue
        if res.status != END or pos != size:
            raise seg.corruption(pos, res.describe(), "compaction reads sealed segments only")
        return


# ----------------------------------------------------------------------------- compacting

@dataclasses.dataclass
class Result:
    """What :func:`compact` did."""
    cleaned_to: int = 1            # the first sequence after the segments it cleaned
    segments: List[int] = dataclasses.field(default_factory=list)   # rewritten (first seqs)
    bytes_before: int = 0          # of the segments rewritten
    bytes_after: int = 0
    removed: int = 0               # messages removed
    tombstones_removed: int = 0
    keys: int = 0                  # distinct keys in the offset map


def _bounds(stream_dir: str, sealed: Sequence[int]) -> List[Tuple[int, int]]:
    """``(first seq, next segment's first seq)`` of the given sealed segments that are on disk
    and not the last segment there (the active one is never compacted)."""
    on_disk = list_segment_seqs(stream_dir)
    nxt = {a: b for a, b in zip(on_disk, on_disk[1:])}
    return [(q, nxt[q]) for q in sorted(set(sealed)) if q in nxt]


def compact(stream_dir: str, sealed: Sequence[int], *, now_ns: Optional[int] = None,
            delete_retention_ns: Optional[int] = None, interval: int = 4096,
            fsync: bool = True) -> Result:
    """Compact the sealed segments ``sealed`` (first sequences; those not on disk, and the last
    segment on disk, are left alone) of a compacted stream's directory, oldest first, as the
    module docstring says; then write the cleaner checkpoint. ``now_ns`` (the clock, ns) and
    ``delete_retention_ns`` default to the time and the stream's settings. Takes the
    compaction lock (:class:`JournalLockedError` if another compaction holds it); finishes
    what a crashed one left first. :class:`CorruptionError` (nothing changed by this call's
    later steps) if a segment cannot be read. ``interval``: the index interval (the
    journal's ``index_interval_bytes``)."""
    if not stream_settings.is_compact(stream_dir):
        raise JournalError(f"{stream_dir} is not a compacted stream (its settings say so)")
    own = stream_settings.read(stream_dir)
    if delete_retention_ns is None:
        delete_retention_ns = own.delete_retention_ns
    now = time.time_ns() if now_ns is None else now_ns
    lock = _take_lock(stream_dir)
    try:
        _recover(stream_dir)
        return _compact(stream_dir, _bounds(stream_dir, sealed), now - delete_retention_ns,
                        interval, fsync)
    finally:
        os.close(lock)


def _compact(stream_dir: str, bounds: List[Tuple[int, int]], horizon: int, interval: int,
             fsync: bool) -> Result:
    result = Result()
    if not bounds:
        return result
    segs = [Segment(stream_dir, q, True) for q, _ in bounds]
    try:
        latest: Dict[bytes, int] = {}
        for seg, (_, bound) in zip(segs, bounds):
            seg.open_log()
            for r, _ in _records(seg, bound):
                for key, seq, _ in message_keys(r):
                    latest[key] = seq
        result.keys = len(latest)
        _step("map")
        older_kept: Set[bytes] = set()       # keys with a superseded message still kept
        # Tombstones from the oldest last-value checkpoint on are kept: a rebuild after a crash
        # starts from a checkpoint and applies the records after it (a tombstone removed
        # there left its key in the index, deleted, for good: it is checkpointed again).
        pin = min(list_checkpoints(stream_dir), default=None)
        for seg, (_, bound) in zip(segs, bounds):
            plan = _plan(seg, bound, latest, horizon, older_kept, interval, pin)
            if plan is None:
                continue
            ranges, entries, removed, tombs = plan
            before = seg.file_size()
            after = _rewrite(stream_dir, seg, ranges, entries, fsync)
            result.segments.append(seg.first_seq)
            result.bytes_before += before
            result.bytes_after += after
            result.removed += removed
            result.tombstones_removed += tombs
        result.cleaned_to = bounds[-1][1]
        _step("checkpoint")
        _write_checkpoint(stream_dir, result.cleaned_to)
    finally:
        for seg in segs:
            seg.close()
    if result.segments:
        log.info("journal %s: compacted %d segments (%d -> %d bytes, %d messages removed, %d "
                 "of them tombstones)", stream_dir, len(result.segments), result.bytes_before,
                 result.bytes_after, result.removed, result.tombstones_removed)
    return result


def _plan(seg: Segment, bound: int, latest: Dict[bytes, int], horizon: int,
          older_kept: Set[bytes], interval: int, pin: Optional[int] = None):
    """What to keep of one segment: ``(byte ranges to copy, index entries of the new file,
    messages removed, tombstones removed)``, or None if it keeps everything. Updates
    ``older_kept`` with the keys of superseded messages it keeps (inside kept batch records)."""
    ranges: List[List[int]] = []
    kept: list = []
    entries: list = []
    new_pos = last_entry = 0
    removed = tombs = 0
    for r, pos in _records(seg, bound):
        msgs = message_keys(r)
        verdicts = [keep(latest[k], s, t, r.timestamp, horizon, k in older_kept,
                         pin is not None and s >= pin) for k, s, t in msgs]
        if any(verdicts):
            for k, s, _ in msgs:
                if s < latest[k]:
                    older_kept.add(k)
            if ranges and ranges[-1][1] == pos:
                ranges[-1][1] = pos + r.size
            else:
                ranges.append([pos, pos + r.size])
            kept.append(r)
            if len(kept) >= 4096:
                new, last_entry = entries_for(kept, new_pos, last_entry, interval, not entries
                                              and new_pos == 0)
                entries += new
                new_pos += sum(x.size for x in kept)
                kept = []
        else:
            removed += len(msgs)
            tombs += sum(1 for k, s, t in msgs if t and s >= latest[k])
    if not removed:
        return None
    new, last_entry = entries_for(kept, new_pos, last_entry, interval, not entries and new_pos == 0)
    entries += new
    return ranges, entries, removed, tombs


def _copy(src: int, dst: int, start: int, end: int) -> None:
    while start < end:
        data = os.pread(src, min(_COPY, end - start), start)
        if not data:
            raise OSError(errno.EIO, "segment shorter than it was read")
        view = memoryview(data)
        while view:
            view = view[os.write(dst, view):]
        start += len(data)


def _rewrite(stream_dir: str, seg: Segment, ranges, entries, fsync: bool) -> int:
    """Steps 1-3 of the module docstring for one segment; returns the new log's size."""
    base = _base(stream_dir, seg.first_seq)
    log_c, idx_c, time_c = (base + s + CLEANED for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_SUFFIX))
    fd = os.open(log_c, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o644)
    try:
        for start, end in ranges:
            _copy(seg.fd, fd, start, end)
        size = os.fstat(fd).st_size
        if fsync:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    ib, tb = encode_entries(entries)
    write_file(idx_c, ib, fsync)
    write_file(time_c, tb, fsync)
    _step("cleaned")
    os.rename(idx_c, base + INDEX_SUFFIX + SWAP)
    os.rename(time_c, base + TIME_SUFFIX + SWAP)
    _step("swap-index")
    os.rename(log_c, base + LOG_SUFFIX + SWAP)          # the commit point
    if fsync:
        fsync_dir(stream_dir)
    _step("swap")
    os.replace(base + INDEX_SUFFIX + SWAP, base + INDEX_SUFFIX)
    os.replace(base + TIME_SUFFIX + SWAP, base + TIME_SUFFIX)
    _step("replace-index")
    os.replace(base + LOG_SUFFIX + SWAP, base + LOG_SUFFIX)
    if fsync:
        fsync_dir(stream_dir)
    _step("replaced")
    return size


# ----------------------------------------------------------------------------- the driver

def segment_sizes(stream_dir: str, sealed: Sequence[int]) -> List[Tuple[int, int, Optional[int]]]:
    """``(first seq, size, newest timestamp known)`` of the sealed segments on disk, for
    :func:`should_compact`: the newest timestamp is that of the last time index entry (a
    record among the last ``index_interval_bytes`` of the segment), None if it has none."""
    out = []
    for q, _ in _bounds(stream_dir, sealed):
        base = _base(stream_dir, q)
        try:
            size = os.stat(base + LOG_SUFFIX).st_size
        except FileNotFoundError:
            continue
        mem = read_index_files(base + INDEX_SUFFIX, base + TIME_SUFFIX)
        newest = mem.tss[-1] if mem is not None and len(mem) else None
        out.append((q, size, newest))
    return out


def run(stream_dir: str, sealed: Sequence[int], *, now_ns: Optional[int] = None,
        min_lag_ns: int = 0, interval: int = 4096, fsync: bool = True) -> Optional[Result]:
    """Compact the stream if its dirty ratio says so (:func:`should_compact` with its
    settings): None if it is not due (or another compaction is running), else what
    :func:`compact` did. For the broker, off its loop; then it calls
    ``journal.reload_segments(result.segments)``."""
    own = stream_settings.read(stream_dir)
    if own is None or not own.compact:
        return None
    now = time.time_ns() if now_ns is None else now_ns
    infos = segment_sizes(stream_dir, sealed)
    d = should_compact(infos, read_checkpoint(stream_dir), own.dirty_ratio, min_lag_ns, now)
    if not d.count:
        return None
    try:
        return compact(stream_dir, [q for q, _, _ in infos[:d.count]], now_ns=now,
                       interval=interval, fsync=fsync)
    except JournalLockedError:
        return None
