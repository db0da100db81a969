"""One segment: a ``.log`` file named by its first sequence, its two index files, the producer
state snapshot taken before its first record (``.producers``, :mod:`.producers`; not every
segment has one), and block reads of it. Naming is defined here once (:func:`segment_base`, the suffixes,
:func:`list_segment_seqs`); checking and rebuilding a segment's index and recovering its tail
are in :mod:`.recovery`.

Decisions:

* A segment file is opened once and its fd kept; reads are ``os.pread`` (no shared file
  position, so many readers/iterators can use one fd). A deleted segment (retention) keeps its
  fd until the last :class:`Segment` object referring to it is dropped, so a reader that is
  inside it finishes reading it (POSIX keeps unlinked open files readable).
* A sealed segment (not the last) is loaded lazily on first use (:func:`.recovery.load_sealed`);
  the last one is recovered by the writer (:func:`.recovery.recover`) or loaded as a growing
  tail by a reader (:func:`.recovery.load_tail`).
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

from .errors import CorruptionError, JournalError, JournalNotFoundError
from .index import FileIndex
from .record import (END, GAPS, GAPS_AFTER_FIRST, HEADER_SIZE, SHORT, Record, ScanResult,
                     parse_records)

SEQ_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_SUFFIX = ".timeindex"
PRODUCERS_SUFFIX = ".producers"
_LOG_RE = re.compile(r"^(\d{%d})\.log$" % SEQ_DIGITS)
BLOCK = 256 << 10          # default read block for scans
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def segment_base(first_seq: int) -> str:
    """The file name of a segment without its suffix: its first sequence, 20 digits."""
    return f"{first_seq:0{SEQ_DIGITS}d}"


def list_segment_seqs(dirpath: str) -> List[int]:
    """First sequences of the segments (``.log`` files) in a stream directory, sorted."""
    seqs = []
    for name in os.listdir(dirpath):
        m = _LOG_RE.match(name)
        if m:
            seqs.append(int(m.group(1)))
    seqs.sort()
    return seqs


def fsync_dir(dirpath: str) -> None:
    """Make created/renamed/deleted directory entries durable."""
    fd = os.open(dirpath, os.O_RDONLY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, data: bytes, sync: bool) -> None:
    """Write the file ``path`` (created or truncated) with ``data`` whole; with ``sync`` the
    data is made durable (``fdatasync``). Raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, sync: bool) -> None:
    """Replace the file ``path`` by ``data`` whole: written to ``path + ".tmp"``, renamed over
    it; with ``sync`` the data and the directory entry are made durable. A crash leaves the
    old file or the new one (and perhaps the temporary one). Raises OSError."""
    tmp = path + ".tmp"
    write_file(tmp, data, sync)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def check_dir(path: str) -> None:
    """Raise a clear :class:`JournalError` unless ``path`` is a readable directory."""
    if not os.path.exists(path):
        raise JournalNotFoundError(f"stream directory {path!r} does not exist")
    if not os.path.isdir(path):
        raise JournalNotFoundError(f"{path!r} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise JournalError(f"stream directory {path!r} is not readable (permission denied)")


class Segment:
    """A segment of a stream. Reading state is shared by the writer and readers."""

    def __init__(self, dirpath: str, first_seq: int, gaps: bool = False):
        self.dir = dirpath
        self.first_seq = first_seq
        self.gaps = gaps           # a compacted stream's: records may skip sequences
        self.ino = 0               # the log file's inode (compaction replaces the file)
        base = os.path.join(dirpath, segment_base(first_seq))
        self.log_path = base + LOG_SUFFIX
        self.index_path = base + INDEX_SUFFIX
        self.time_path = base + TIME_SUFFIX
        self.producers_path = base + PRODUCERS_SUFFIX
        self.fd = -1
        self.index = None          # MemIndex | FileIndex
        self.size: Optional[int] = None   # known byte size (writer / sealed); None: fstat
        # the writer's: a sealed log's byte size, kept when it is unloaded (Journal.info)
        self.sealed_bytes: Optional[int] = None
        self.loaded = False
        self.sealed = False
        self.last_ts: Optional[int] = None    # newest record's timestamp, once known
        self.first_ts: Optional[int] = None
        self.bad_pos: Optional[int] = None    # first invalid byte of a sealed segment
        self.bad_reason: Optional[str] = None
        # writer-only state of the active segment
        self.ifd_w = -1
        self.tfd_w = -1
        self.index_file_ok = True

    def __repr__(self):
        return f"Segment({self.log_path!r})"

    # ------------------------------------------------------------------ files

    def open_log(self, writable: bool = False) -> None:
        if self.fd >= 0:
            return
        flags = (os.O_RDWR | os.O_APPEND) if writable else os.O_RDONLY
        self.fd = os.open(self.log_path, flags | _CLOEXEC)
        try:
            self.ino = os.fstat(self.fd).st_ino
        except OSError:
            self.ino = 0

    def open_index_writers(self) -> None:
        """Open both index files for appending (the writer's active segment)."""
        self.ifd_w = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC,
                             0o644)
        self.tfd_w = os.open(self.time_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC,
                             0o644)

    def limit(self) -> int:
        """Bytes of the log that may be read."""
        if self.size is not None:
            return self.size
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        for attr in ("fd", "ifd_w", "tfd_w"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, attr, -1)
        idx = getattr(self, "index", None)
        if isinstance(idx, FileIndex):
            idx.close()

    def __del__(self):
        self.close()

    def unload(self) -> None:
        """Close the files of a sealed segment (LRU eviction); loading re-opens them (and,
        if compaction replaced them meanwhile, finds the new ones: what was learnt of the old
        file is forgotten)."""
        self.close()
        self.index = None
        self.loaded = False
        self.size = None
        self.first_ts = self.last_ts = None
        self.bad_pos = self.bad_reason = None

    def delete_files(self) -> None:
        """Unlink the segment's files (log first: it is what readers list; the producer
        snapshot last). Open fds stay readable until closed."""
        for path in (self.log_path, self.index_path, self.time_path, self.producers_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def file_size(self) -> int:
        return os.fstat(self.fd).st_size

    # ------------------------------------------------------------------ parsing

    def parse(self, pos: int, seq: int, limit: int, out: Optional[list] = None,
              max_records: int = 1 << 62, max_bytes: int = 1 << 62, want_seq: int = 0,
              stop_ts: Optional[int] = None, block: int = BLOCK, n0: int = 0,
              nbytes0: int = 0, last_ts: Optional[int] = None,
              chunks: bool = False, exact: bool = False,
              gaps: Optional[bool] = None) -> ScanResult:
        """Parse records from byte ``pos`` (whose record must be ``seq``) up to ``limit``, one
        ``os.pread`` per block (a record longer than the block gets a read of its size).
        ``n0``/``nbytes0``: messages/frame bytes the same read already emitted (limits are
        totals); ``last_ts``: timestamp of the record before ``pos``, if the read saw it;
        ``chunks``: batch records are emitted whole (see
        :func:`~zeps.journal.record.parse_records`). In a segment with ``gaps`` (by default
        its own), records may skip sequences and the one at ``pos`` may be above ``seq``,
        unless ``exact`` (``pos`` and ``seq`` come from an index entry: that record must be
        ``seq``, so that a stale index is found out, never followed) and ``pos > 0`` (nothing
        can be skipped before the first record)."""
        n = n0
        nbytes = nbytes0
        fd = self.fd
        if not (self.gaps if gaps is None else gaps):
            mode = first_mode = 0
        else:
            mode, first_mode = GAPS, (GAPS_AFTER_FIRST if exact and pos > 0 else GAPS)
        start = pos
        while True:
            if pos >= limit:
                return ScanResult(END, pos, seq, last_ts, None, n, nbytes)
            want = min(limit - pos, block)
            buf = os.pread(fd, want, pos)
            end = len(buf)
            res = parse_records(buf, 0, end, seq, out, max_records, max_bytes, want_seq,
                                stop_ts, n, nbytes, last_ts, chunks,
                                first_mode if pos == start else mode)
            pos += res.pos
            res.pos = pos
            status, seq, last_ts, n, nbytes = res.status, res.seq, res.last_ts, res.n, res.nbytes
            if status == END:
                if end < want:                 # the file is shorter than limit said
                    return ScanResult(SHORT if pos < limit else END, pos, seq, last_ts,
                                      HEADER_SIZE, n, nbytes)
                continue
            if status == SHORT:
                info = res.info
                if pos + info <= limit and end == want:
                    if info > block:
                        block = info
                    continue
            return res

    def read_first_ts(self) -> Optional[int]:
        """Timestamp of the first record (cached), None if the segment is empty/unreadable."""
        if self.first_ts is None:
            idx = self.index
            if idx is not None and len(idx) > 0:
                seq, pos, ts = idx.entry(0)
                if (seq == self.first_seq or self.gaps and seq > self.first_seq) and pos == 0:
                    self.first_ts = ts
                    return ts
            out: List[Record] = []
            lim = self.limit()
            if lim <= 0:
                return None
            self.parse(0, self.first_seq, lim, out, max_records=1, block=4096)
            if out:
                self.first_ts = out[0].timestamp
        return self.first_ts

    # ------------------------------------------------------------------ lookups

    def start_for(self, seq: int) -> Tuple[int, int]:
        """(position, sequence) of the index entry at or before ``seq`` (the segment start if
        none)."""
        idx = self.index
        if idx is not None:
            e = idx.floor_seq(seq)
            if e is not None:
                return e[1], e[0]
        return 0, self.first_seq

    def start_below_ts(self, ts: int) -> Tuple[int, int]:
        idx = self.index
        if idx is not None:
            e = idx.below_ts(ts)
            if e is not None:
                return e[1], e[0]
        return 0, self.first_seq

    def corruption(self, pos: int, reason: str, why: str) -> CorruptionError:
        """The error for a bad record at byte ``pos``; ``why`` says why it is not a torn tail."""
        return CorruptionError(
            f"corrupt journal segment {self.log_path} at byte offset {pos}: {reason}. Records "
            f"before it are readable; records after it in this segment are not read ({why})",
            self.log_path, pos)

