"""One segment: a ``.log`` file named by its first sequence, its two index files, and the
code that reads blocks of it, rebuilds its index and recovers its tail.

Decisions:

* A segment file is opened once and its fd kept; reads are ``os.pread`` (no shared file
  position, so many readers/iterators can use one fd). A deleted segment (retention) keeps its
  fd until the last :class:`Segment` object referring to it is dropped, so a reader that is
  inside it finishes reading it (POSIX keeps unlinked open files readable).
* A sealed segment (not the last) is loaded lazily on first use: its index is checked cheaply
  (first entry, last entry, and the few KiB after the last entry are scanned), and rebuilt from
  the log if missing, short or wrong. The writer writes a rebuilt index file atomically
  (temp + rename); a read-only reader keeps it in memory.
* Recovery (:meth:`Segment.recover`, the writer's last segment only), like Kafka's
  ``LogSegment.recover``: start at the last index entry that points at a valid record, scan
  forward verifying each record (CRC, frame, expected sequence), stop at the first short or
  bad one, truncate the log there, and rewrite the index tail.
"""
from __future__ import annotations

import logging
import os
import re
from typing import List, Optional, Tuple

from .errors import CorruptionError, JournalError
from .index import ENTRY_SIZE, FileIndex, MemIndex, encode_entries
from .record import BAD, END, HEADER_SIZE, LIMIT, SHORT, Record, parse_records

log = logging.getLogger("zeps.journal")

SEQ_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_SUFFIX = ".timeindex"
_LOG_RE = re.compile(r"^(\d{20})\.log$")
BLOCK = 256 << 10          # default read block for scans
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def segment_base(first_seq: int) -> str:
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


class ScanResult:
    """Where a scan stopped: ``status`` (END/LIMIT/SHORT/BAD from :mod:`.record`), ``pos`` and
    ``seq`` of the first record not consumed, ``last_ts`` of the last consumed one (or None),
    ``info`` (bytes needed for SHORT, reason for BAD)."""

    __slots__ = ("status", "pos", "seq", "last_ts", "info")

    def __init__(self, status, pos, seq, last_ts, info):
        self.status, self.pos, self.seq, self.last_ts, self.info = status, pos, seq, last_ts, info

    def describe(self) -> str:
        if self.status == SHORT:
            return "incomplete record"
        if self.status == BAD:
            return str(self.info)
        return "end"


class Segment:
    """A segment of a stream. Reading state is shared by the writer and readers."""

    def __init__(self, dirpath: str, first_seq: int):
        self.dir = dirpath
        self.first_seq = first_seq
        base = os.path.join(dirpath, segment_base(first_seq))
        self.log_path = base + LOG_SUFFIX
        self.index_path = base + INDEX_SUFFIX
        self.time_path = base + TIME_SUFFIX
        self.fd = -1
        self.index = None          # MemIndex | FileIndex
        self.size: Optional[int] = None   # known byte size (writer / sealed); None: fstat
        self.loaded = False
        self.sealed = False
        self.last_seq: Optional[int] = None   # known valid end, once scanned
        self.last_ts: Optional[int] = None
        self.end_pos: Optional[int] = None
        self.first_ts: Optional[int] = None
        self.bad_pos: Optional[int] = None    # first invalid byte of a sealed segment
        self.bad_reason: Optional[str] = None
        # writer-only state of the active segment
        self.ifd_w = -1
        self.tfd_w = -1
        self.index_file_ok = True
        self.deleted = False

    def __repr__(self):
        return f"Segment({self.log_path!r})"

    # ------------------------------------------------------------------ files

    def open_log(self, writable: bool = False) -> None:
        if self.fd >= 0:
            return
        flags = (os.O_RDWR | os.O_APPEND) if writable else os.O_RDONLY
        self.fd = os.open(self.log_path, flags | _CLOEXEC)

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
        """Close the files of a sealed segment (LRU eviction); :meth:`load_sealed` re-opens."""
        self.close()
        self.index = None
        self.loaded = False

    def delete_files(self) -> None:
        """Unlink the segment's files (log first: it is what readers list). Open fds stay
        readable until closed."""
        self.deleted = True
        for path in (self.log_path, self.index_path, self.time_path):
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
              nbytes0: int = 0) -> ScanResult:
        """Parse records from byte ``pos`` (whose record must be ``seq``) up to ``limit``, one
        ``os.pread`` per block (a record longer than the block gets a read of its size).
        ``n0``/``nbytes0``: records/frame bytes the same read already emitted (limits are
        totals)."""
        last_ts = None
        n = n0
        nbytes = nbytes0
        fd = self.fd
        while True:
            if pos >= limit:
                return ScanResult(END, pos, seq, last_ts, None)
            want = min(limit - pos, block)
            buf = os.pread(fd, want, pos)
            end = len(buf)
            if out is not None:
                before = len(out)
            status, npos, seq, lts, info = parse_records(
                buf, 0, end, seq, out, max_records, max_bytes, want_seq, stop_ts, n, nbytes)
            if out is not None and len(out) > before:
                new = out[before:]
                n += len(new)
                for r in new:
                    nbytes += len(r.frame)
            if lts is not None:
                last_ts = lts
            pos += npos
            if status == END:
                if end < want:                 # the file is shorter than limit said
                    return ScanResult(SHORT if pos < limit else END, pos, seq, last_ts,
                                      HEADER_SIZE)
                continue
            if status == SHORT:
                if pos + info <= limit and end == want:
                    if info > block:
                        block = info
                    continue
                return ScanResult(SHORT, pos, seq, last_ts, info)
            return ScanResult(status, pos, seq, last_ts, info)

    def read_first_ts(self) -> Optional[int]:
        """Timestamp of the first record (cached), None if the segment is empty/unreadable."""
        if self.first_ts is None:
            idx = self.index
            if idx is not None and len(idx) > 0:
                seq, pos, ts = idx.entry(0)
                if seq == self.first_seq and pos == 0:
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

    def scan_entries(self, pos: int, seq: int, limit: int, interval: int,
                     last_entry_pos: int, need_first: bool):
        """Verify records from ``pos`` to ``limit`` and compute the index entries they need
        (same rule as the writer). Returns (ScanResult, [(seq, pos, ts)])."""
        entries = []
        last_ts = None
        while True:
            out: List[Record] = []
            res = self.parse(pos, seq, limit, out, max_records=8192)
            p = pos
            for r in out:
                if need_first or p - last_entry_pos >= interval:
                    entries.append((r.sequence, p, r.timestamp))
                    last_entry_pos = p
                    need_first = False
                p += HEADER_SIZE + len(r.frame)
            if res.last_ts is not None:
                last_ts = res.last_ts
            pos, seq = res.pos, res.seq
            if res.status != LIMIT:
                res.last_ts = last_ts
                return res, entries

    # ------------------------------------------------------------------ loading

    def _index_from_files(self) -> Optional[MemIndex]:
        try:
            with open(self.index_path, "rb") as f:
                idata = f.read()
            with open(self.time_path, "rb") as f:
                tdata = f.read()
        except FileNotFoundError:
            return None
        return MemIndex.from_bytes(idata, tdata)

    def _valid_prefix(self, mem: MemIndex, size: int) -> int:
        """Number of leading entries that are well-formed (increasing, inside the log, the
        first one at (first_seq, 0)), then back off entries that do not point at their
        record."""
        n = len(mem)
        k = 0
        prev_seq, prev_pos, prev_ts = self.first_seq - 1, -1, 0
        for i in range(n):
            s, p, t = mem.entry(i)
            if i == 0 and (s != self.first_seq or p != 0):
                break
            if s <= prev_seq or p <= prev_pos or p >= size or t < prev_ts:
                break
            prev_seq, prev_pos, prev_ts = s, p, t
            k = i + 1
        tries = 0
        while k > 0:
            s, p, _ = mem.entry(k - 1)
            out: List[Record] = []
            self.parse(p, s, size, out, max_records=1, block=4096)
            if out:
                return k
            k -= 1
            tries += 1
            if tries >= 4:
                return 0
        return 0

    def recover(self, interval: int) -> ScanResult:
        """Writer only, last segment: verify the tail, truncate it at the first bad or short
        record, rewrite the index tail, and keep the index in memory (the active segment)."""
        self.open_log(writable=True)
        size = self.file_size()
        mem = self._index_from_files() or MemIndex()
        k = self._valid_prefix(mem, size)
        mem.truncate(k)
        if k:
            seq0, pos0, _ = mem.entry(k - 1)
        else:
            seq0, pos0 = self.first_seq, 0
        res, entries = self.scan_entries(pos0, seq0, size, interval, pos0, need_first=(k == 0))
        if res.pos < size:
            log.warning("journal recovery: %s: cut %d bytes at offset %d (%s); last good "
                        "sequence %d", self.log_path, size - res.pos, res.pos, res.describe(),
                        res.seq - 1)
            os.ftruncate(self.fd, res.pos)
            os.fsync(self.fd)
        for e in entries:
            mem.append(*e)
        # rewrite the index files in place: keep the k verified entries, append the rest
        ib, tb = encode_entries(entries)
        for path, data in ((self.index_path, ib), (self.time_path, tb)):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
            try:
                os.ftruncate(fd, k * ENTRY_SIZE)
                if data:
                    os.pwrite(fd, data, k * ENTRY_SIZE)
            finally:
                os.close(fd)
        self.index = mem
        self.size = res.pos
        self.end_pos = res.pos
        self.last_seq = res.seq - 1
        self.last_ts = res.last_ts
        if len(mem):
            self.first_ts = mem.tss[0]
        self.open_index_writers()
        self.loaded = True
        return res

    def open_index_writers(self) -> None:
        self.ifd_w = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC,
                             0o644)
        self.tfd_w = os.open(self.time_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC,
                             0o644)

    def load_sealed(self, interval: int, persist: bool) -> None:
        """Prepare a sealed segment for reading: check (cheaply) or rebuild its index, find
        its valid end. ``persist``: the writer writes a rebuilt index back to disk."""
        if self.loaded:
            return
        self.open_log(writable=False)
        size = self.file_size()
        self.size = size
        self.sealed = True
        idx = None
        try:
            idx = FileIndex(self.index_path, self.time_path, fixed=True)
        except FileNotFoundError:
            idx = None
        res = None
        if idx is not None and self._file_index_plausible(idx, size):
            seq0, pos0, _ = idx.entry(len(idx) - 1)
            res, extra = self.scan_entries(pos0, seq0, size, interval, pos0, need_first=False)
            if res.pos == pos0 and res.status == BAD or extra:
                res = None                     # the last entry is wrong, or the index is short
        if res is None:
            if idx is not None:
                idx.close()
            res, entries = self.scan_entries(0, self.first_seq, size, interval, 0, True)
            mem = MemIndex()
            for e in entries:
                mem.append(*e)
            idx = mem
            log.warning("journal: %s: index missing or incomplete, rebuilt from the log "
                        "(%d entries)", self.index_path, len(mem))
            if persist and res.status == END:
                try:
                    self._write_index_atomically(entries)
                    idx = FileIndex(self.index_path, self.time_path, fixed=True)
                except OSError as e:
                    log.warning("journal: could not write rebuilt index %s: %s",
                                self.index_path, e)
        self.index = idx
        self.end_pos = res.pos
        self.last_seq = res.seq - 1
        self.last_ts = res.last_ts
        if res.status != END:
            self.bad_pos = res.pos
            self.bad_reason = res.describe()
        self.loaded = True

    def _entry_ok(self, entry, size: int) -> bool:
        """Whether an index entry (seq, pos, ...) points at a whole record with that seq."""
        seq, pos = entry[0], entry[1]
        if pos >= size:
            return False
        out: List[Record] = []
        self.parse(pos, seq, size, out, max_records=1, block=4096)
        return bool(out)

    def _file_index_plausible(self, idx: FileIndex, size: int) -> bool:
        n = len(idx)
        if n == 0:
            return size == 0
        s0, p0, _ = idx.entry(0)
        if s0 != self.first_seq or p0 != 0:
            return False
        s, p, _ = idx.entry(n - 1)
        return s >= self.first_seq and p < size

    def _write_index_atomically(self, entries) -> None:
        ib, tb = encode_entries(entries)
        for path, data in ((self.index_path, ib), (self.time_path, tb)):
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)

    def load_tail(self, interval: int) -> None:
        """Read-only reader, last segment (still growing): use the index files as they are
        (re-reading their size at each lookup); rebuild in memory only if they are missing."""
        if self.loaded:
            return
        self.open_log(writable=False)
        try:
            self.index = FileIndex(self.index_path, self.time_path, fixed=False)
        except FileNotFoundError:
            self.index = None
        size = self.file_size()
        if self.index is None or not self._file_index_plausible(self.index, size) or (
                size and not self._entry_ok(self.index.entry(len(self.index) - 1), size)):
            if self.index is not None:
                self.index.close()
            res, entries = self.scan_entries(0, self.first_seq, size, interval, 0, True)
            mem = MemIndex()
            for e in entries:
                mem.append(*e)
            self.index = mem
        self.loaded = True

    def rebuild_in_memory(self, interval: int) -> None:
        """Replace the index by one rebuilt from the log (an index that pointed at the wrong
        record)."""
        limit = self.limit()
        res, entries = self.scan_entries(0, self.first_seq, limit, interval, 0, True)
        mem = MemIndex()
        for e in entries:
            mem.append(*e)
        old = self.index
        self.index = mem
        if isinstance(old, FileIndex):
            old.close()

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

    def corruption(self, pos: int, reason: str) -> CorruptionError:
        return CorruptionError(
            f"corrupt journal segment {self.log_path} at byte offset {pos}: {reason}. Records "
            f"before it are readable; records after it in this segment are not read (the "
            f"segment is not the last one, so this is not a torn tail)", self.log_path, pos)


def check_dir(path: str) -> None:
    if not os.path.exists(path):
        from .errors import JournalNotFoundError
        raise JournalNotFoundError(f"stream directory {path!r} does not exist")
    if not os.path.isdir(path):
        from .errors import JournalNotFoundError
        raise JournalNotFoundError(f"{path!r} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise JournalError(f"stream directory {path!r} is not readable (permission denied)")
