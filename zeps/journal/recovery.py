"""Making a segment trustworthy before it is read: check (or rebuild) its index, find where its
valid records end, and - for the writer - cut a torn tail.

The log is the truth; an index is a hint. Every function here verifies records with
:func:`zeps.journal.record.parse_records` (through :meth:`Segment.parse`), and the index entries
it writes follow one rule (the writer's, see :mod:`.index`), so a rebuilt index equals the one
the writer wrote.

* :func:`recover` - the writer's last segment, like Kafka's ``LogSegment.recover``: start at the
  last index entry that points at a valid record, scan forward verifying each record, stop at the
  first short or bad one, truncate the log there, and rewrite the index tail.
* :func:`load_sealed` - a sealed segment, lazily on first use: its index is checked cheaply (first
  entry, last entry, and the few KiB after the last entry are scanned) and rebuilt from the log
  if missing, short or wrong. The writer writes a rebuilt index atomically (temp + rename); a
  read-only reader keeps it in memory. A bad record found after the last entry is remembered
  (``bad_pos``) and reported when a read reaches it.
* :func:`load_tail` - a reader's last (still growing) segment: the index files are used as they
  are if their last entry points at a valid record, else rebuilt in memory from the log.
* :func:`rebuild_in_memory` - an index entry that a read found pointing at the wrong record.
"""
from __future__ import annotations

import errno
import logging
import os
from typing import List

from .index import (ENTRY_SIZE, FileIndex, MemIndex, encode_entries, entries_for,
                    read_index_files)
from .record import BAD, END, LIMIT, Record
from .segment import ScanResult, Segment

log = logging.getLogger("zeps.journal")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

#: How many index entries recovery backs off before it rescans the segment from the start.
MAX_BACKOFF = 4


def scan_entries(seg: Segment, pos: int, seq: int, limit: int, interval: int,
                 last_entry_pos: int, need_first: bool, exact: bool = False):
    """Verify records from ``pos`` to ``limit`` and compute the index entries they need
    (same rule as the writer: over records, a batch record being one). ``exact``: ``pos``
    and ``seq`` come from an index entry (in a compacted segment, the record there must be
    ``seq``). Returns (ScanResult, [(seq, pos, ts)])."""
    entries = []
    last_ts = None
    while True:
        out: List[Record] = []
        res = seg.parse(pos, seq, limit, out, max_records=8192, last_ts=last_ts,
                        chunks=True, exact=exact)
        exact = False
        new, last_entry_pos = entries_for(out, pos, last_entry_pos, interval, need_first)
        if new:
            entries += new
            need_first = False
        last_ts = res.last_ts
        pos, seq = res.pos, res.seq
        if res.status != LIMIT:
            return res, entries


def _mem_index(entries) -> MemIndex:
    mem = MemIndex()
    for e in entries:
        mem.append(*e)
    return mem


def _entry_ok(seg: Segment, entry, size: int) -> bool:
    """Whether an index entry (seq, pos, ...) points at a whole, valid record with that seq."""
    seq, pos = entry[0], entry[1]
    if pos >= size:
        return False
    out: List[Record] = []
    seg.parse(pos, seq, size, out, max_records=1, block=4096, exact=True)
    return bool(out)


def _valid_prefix(seg: Segment, mem: MemIndex, size: int) -> int:
    """Number of leading entries that are well-formed (increasing, inside the log, the first
    one at (first_seq, 0)), then back off entries that do not point at their record."""
    k = 0
    prev_seq, prev_pos, prev_ts = seg.first_seq - 1, -1, 0
    for i in range(len(mem)):
        s, p, t = mem.entry(i)
        if i == 0 and (not _first_entry_ok(seg, s) or p != 0):
            break
        if s <= prev_seq or p <= prev_pos or p >= size or t < prev_ts:
            break
        prev_seq, prev_pos, prev_ts = s, p, t
        k = i + 1
    for _ in range(MAX_BACKOFF):
        if k == 0 or _entry_ok(seg, mem.entry(k - 1), size):
            return k
        k -= 1
    return 0


def _first_entry_ok(seg: Segment, s0: int) -> bool:
    """Whether ``s0`` may be the sequence of a segment's first record (in a compacted
    segment, the first one kept: at or above the segment's first sequence)."""
    return s0 == seg.first_seq or (seg.gaps and s0 > seg.first_seq)


def _file_index_plausible(seg: Segment, idx: FileIndex, size: int) -> bool:
    n = len(idx)
    if n == 0:
        return size == 0
    s0, p0, _ = idx.entry(0)
    if not _first_entry_ok(seg, s0) or p0 != 0:
        return False
    s, p, _ = idx.entry(n - 1)
    return s >= seg.first_seq and p < size


def recover(seg: Segment, interval: int) -> ScanResult:
    """Writer only, last segment: verify the tail, truncate it at the first bad or short
    record, rewrite the index tail, and keep the index in memory (the active segment).
    Returns where the valid records end (``seq`` is the next sequence)."""
    seg.open_log(writable=True)
    size = seg.file_size()
    mem = read_index_files(seg.index_path, seg.time_path) or MemIndex()
    k = _valid_prefix(seg, mem, size)
    mem.truncate(k)
    if k:
        seq0, pos0, _ = mem.entry(k - 1)
    else:
        seq0, pos0 = seg.first_seq, 0
    res, entries = scan_entries(seg, pos0, seq0, size, interval, pos0, need_first=(k == 0),
                                exact=k > 0)
    if res.pos < size:
        log.warning("journal recovery: %s: cut %d bytes at offset %d (%s); last good "
                    "sequence %d", seg.log_path, size - res.pos, res.pos, res.describe(),
                    res.seq - 1)
        os.ftruncate(seg.fd, res.pos)
        os.fsync(seg.fd)
    for e in entries:
        mem.append(*e)
    seg.index = mem
    try:
        _rewrite_index_tail(seg, k, entries)
        seg.open_index_writers()
    except OSError as e:
        # A full disk: the stream is opened all the same, its index kept in memory (the files
        # keep their k verified entries at most, and are rebuilt from the log at the next
        # open), as an append whose index write fails goes on. It could not be opened at all
        # (ATTACH refused: "No space left on device"), its records read by no one until space
        # was freed (found by review).
        seg.index_file_ok = False
        for path in (seg.index_path, seg.time_path):
            try:
                os.truncate(path, min(os.path.getsize(path), k * ENTRY_SIZE))
            except OSError:
                pass
        log.warning("journal recovery: cannot write the index of %s (%s); it is kept in memory "
                    "and rebuilt from the log at the next open", seg.log_path, e)
    seg.size = res.pos
    seg.last_ts = res.last_ts
    if len(mem):
        seg.first_ts = mem.tss[0]
    seg.loaded = True
    return res


def _rewrite_index_tail(seg: Segment, k: int, entries) -> None:
    """Rewrite the index files in place: keep the ``k`` verified entries, append ``entries``."""
    ib, tb = encode_entries(entries)
    for path, data in ((seg.index_path, ib), (seg.time_path, tb)):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, k * ENTRY_SIZE)
            if data:
                if os.pwrite(fd, data, k * ENTRY_SIZE) != len(data):
                    raise OSError(errno.ENOSPC, "short write of the index")
        finally:
            os.close(fd)


def load_sealed(seg: Segment, interval: int, persist: bool) -> None:
    """Prepare a sealed segment for reading: check (cheaply) or rebuild its index, find
    its valid end. ``persist``: the writer writes a rebuilt index back to disk."""
    if seg.loaded:
        return
    seg.open_log(writable=False)
    size = seg.file_size()
    seg.size = size
    seg.sealed = True
    try:
        idx = FileIndex(seg.index_path, seg.time_path, fixed=True)
    except FileNotFoundError:
        idx = None
    res = None
    if idx is not None and _file_index_plausible(seg, idx, size) and not len(idx):
        res = ScanResult(END, 0, seg.first_seq, None, None)   # empty (compaction emptied it)
    elif idx is not None and _file_index_plausible(seg, idx, size):
        seq0, pos0, _ = idx.entry(len(idx) - 1)
        res, extra = scan_entries(seg, pos0, seq0, size, interval, pos0, need_first=False,
                                  exact=True)
        if res.pos == pos0 and res.status == BAD or extra:
            res = None                     # the last entry is wrong, or the index is short
    if res is None:
        if idx is not None:
            idx.close()
        res, entries = scan_entries(seg, 0, seg.first_seq, size, interval, 0, True)
        idx = _mem_index(entries)
        log.warning("journal: %s: index missing or incomplete, rebuilt from the log "
                    "(%d entries)", seg.index_path, len(idx))
        if persist and res.status == END:
            try:
                _write_index_atomically(seg, entries)
                idx = FileIndex(seg.index_path, seg.time_path, fixed=True)
            except OSError as e:
                log.warning("journal: could not write rebuilt index %s: %s",
                            seg.index_path, e)
    seg.index = idx
    seg.last_ts = res.last_ts
    if res.status != END:
        seg.bad_pos = res.pos
        seg.bad_reason = res.describe()
    seg.loaded = True


def _write_index_atomically(seg: Segment, entries) -> None:
    ib, tb = encode_entries(entries)
    for path, data in ((seg.index_path, ib), (seg.time_path, tb)):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


def load_tail(seg: Segment, interval: int) -> None:
    """Read-only reader, last segment (still growing): use the index files as they are
    (re-reading their size at each lookup) if their last entry points at a valid record;
    rebuild in memory from the log otherwise."""
    if seg.loaded:
        return
    seg.open_log(writable=False)
    try:
        seg.index = FileIndex(seg.index_path, seg.time_path, fixed=False)
    except FileNotFoundError:
        seg.index = None
    size = seg.file_size()
    idx = seg.index
    if idx is None or not _file_index_plausible(seg, idx, size) or (
            size and not _entry_ok(seg, idx.entry(len(idx) - 1), size)):
        if idx is not None:
            idx.close()
        _, entries = scan_entries(seg, 0, seg.first_seq, size, interval, 0, True)
        seg.index = _mem_index(entries)
    seg.loaded = True


def rebuild_in_memory(seg: Segment, interval: int) -> None:
    """Replace the index by one rebuilt from the log (an index that pointed at the wrong
    record)."""
    _, entries = scan_entries(seg, 0, seg.first_seq, seg.limit(), interval, 0, True)
    old = seg.index
    seg.index = _mem_index(entries)
    if isinstance(old, FileIndex):
        old.close()
