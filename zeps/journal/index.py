"""Sparse offset index and time index of one segment.

Files (fixed 16-byte big-endian entries, so entry *i* is at byte ``16 * i`` and a lookup is a
binary search, never a scan):

* ``<first seq>.index``     ``seq u64 | position u64``  - byte position of record ``seq``
* ``<first seq>.timeindex`` ``timestamp u64 | seq u64`` - timestamp of record ``seq``

Both files get an entry for the same records: the first record of the segment, then the first
record starting ``index_interval_bytes`` or more after the previous entry (Kafka's rule). So
entry *i* of both files describes the same record, and a time lookup yields a position through
the offset entry of the same rank. The rule depends only on record positions, so rebuilding an
index from the log gives the same entries.

The log is the truth: the index is written after the log bytes it points to, is never
fsync'ed (it is rebuilt after a crash from the log), and every entry found by a lookup is
checked against the record it points to by the caller's parser (the sequence is in the frame).

Both readers of a segment - the per-record one and the columnar one (:mod:`.columnar`) - get
the index the same way, through the segment's loader (:mod:`.recovery`), and use it only as a
hint checked against the log.

Two implementations with one interface:

* :class:`MemIndex` - arrays in memory (the writer's active segment, or an index rebuilt in
  memory by a read-only reader); ``bisect`` on ``array('Q')``.
* :class:`FileIndex` - binary search with one ``os.pread`` of 16 bytes per probe (~17 probes
  for a full 256 MiB segment): no loading and no memory, and it works on a file another
  process is still appending to (the entry count is re-read from the file size).
"""
from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import Iterable, List, Optional, Tuple

ENTRY = struct.Struct(">QQ")
ENTRY_SIZE = ENTRY.size  # 16
_SWAP = __import__("sys").byteorder == "little"  # files are big-endian


def _load_pairs(data: bytes) -> Tuple[array, array]:
    """Split a file of 16-byte big-endian (a, b) entries into two arrays."""
    n = len(data) // ENTRY_SIZE
    flat = array("Q")
    flat.frombytes(data[:n * ENTRY_SIZE])
    if _SWAP:
        flat.byteswap()
    return flat[0::2], flat[1::2]


class MemIndex:
    """Index held in memory (parallel arrays of seq, position, timestamp)."""

    __slots__ = ("seqs", "poss", "tss")

    def __init__(self, seqs=None, poss=None, tss=None):
        self.seqs = seqs if seqs is not None else array("Q")
        self.poss = poss if poss is not None else array("Q")
        self.tss = tss if tss is not None else array("Q")

    @classmethod
    def from_bytes(cls, index_data: bytes, time_data: bytes) -> "MemIndex":
        seqs, poss = _load_pairs(index_data)
        tss, tseqs = _load_pairs(time_data)
        n = min(len(seqs), len(tss))
        # keep the common prefix whose two files agree on the sequence
        for i in range(n):
            if seqs[i] != tseqs[i]:
                n = i
                break
        return cls(seqs[:n], poss[:n], tss[:n])

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, seq: int, pos: int, ts: int) -> None:
        self.seqs.append(seq)
        self.poss.append(pos)
        self.tss.append(ts)

    def truncate(self, n: int) -> None:
        del self.seqs[n:]
        del self.poss[n:]
        del self.tss[n:]

    def entry(self, i: int) -> Tuple[int, int, int]:
        return self.seqs[i], self.poss[i], self.tss[i]

    def floor_seq(self, seq: int) -> Optional[Tuple[int, int]]:
        """(seq, position) of the last entry with entry seq <= seq, or None."""
        i = bisect_right(self.seqs, seq) - 1
        if i < 0:
            return None
        return self.seqs[i], self.poss[i]

    def below_ts(self, ts: int) -> Optional[Tuple[int, int]]:
        """(seq, position) of the last entry with timestamp < ts, or None."""
        i = bisect_left(self.tss, ts) - 1
        if i < 0:
            return None
        return self.seqs[i], self.poss[i]

    def last_pos(self) -> int:
        return self.poss[-1] if self.poss else 0

    def after_seq(self, seq: int) -> Optional[int]:
        """Position of the first entry whose sequence is > ``seq``, or None."""
        i = bisect_right(self.seqs, seq)
        return self.poss[i] if i < len(self.poss) else None

    def positions_between(self, lo: int, hi: int) -> array:
        """Positions of the entries with ``lo < position < hi`` (record starts to check)."""
        poss = self.poss
        return poss[bisect_right(poss, lo):bisect_left(poss, hi)]


class FileIndex:
    """Read-only binary search over the two index files through ``os.pread``."""

    __slots__ = ("ifd", "tfd", "_n")

    def __init__(self, index_path: str, time_path: str, fixed: bool = False):
        self.ifd = os.open(index_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self.tfd = os.open(time_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            os.close(self.ifd)
            self.ifd = self.tfd = -1
            raise
        self._n = self._count() if fixed else None

    def close(self) -> None:
        for fd in (getattr(self, "ifd", -1), getattr(self, "tfd", -1)):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ifd = self.tfd = -1

    def __del__(self):
        self.close()

    def _count(self) -> int:
        return min(os.fstat(self.ifd).st_size, os.fstat(self.tfd).st_size) // ENTRY_SIZE

    def __len__(self) -> int:
        return self._n if self._n is not None else self._count()

    def _ientry(self, i: int) -> Tuple[int, int]:
        return _read_entry(self.ifd, i)

    def _tentry(self, i: int) -> Tuple[int, int]:
        return _read_entry(self.tfd, i)

    def _bisect_right(self, value: int, field: int, n: int) -> int:
        """How many of the first ``n`` offset entries have ``field`` (0: the sequence, 1: the
        position) <= ``value``: ``bisect_right``, one ``os.pread`` a probe."""
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            if value < self._ientry(mid)[field]:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def entry(self, i: int) -> Tuple[int, int, int]:
        seq, pos = self._ientry(i)
        return seq, pos, self._tentry(i)[0]

    def floor_seq(self, seq: int) -> Optional[Tuple[int, int]]:
        lo = self._bisect_right(seq, 0, len(self))
        if lo == 0:
            return None
        return self._ientry(lo - 1)

    def below_ts(self, ts: int) -> Optional[Tuple[int, int]]:
        lo, hi = 0, len(self)
        while lo < hi:                       # bisect_left on the entry timestamps
            mid = (lo + hi) >> 1
            if self._tentry(mid)[0] < ts:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return None
        tseq = self._tentry(lo - 1)[1]
        seq, pos = self._ientry(lo - 1)
        if seq != tseq:        # the two files disagree: let the caller fall back to a scan
            return None
        return seq, pos

    def last_pos(self) -> int:
        n = len(self)
        return self._ientry(n - 1)[1] if n else 0

    def after_seq(self, seq: int) -> Optional[int]:
        """Position of the first entry whose sequence is > ``seq``, or None."""
        n = len(self)
        lo = self._bisect_right(seq, 0, n)
        return self._ientry(lo)[1] if lo < n else None

    def positions_between(self, lo: int, hi: int) -> array:
        """Positions of the entries with ``lo < position < hi``: two binary searches, then one
        ``os.pread`` of the entries in between."""
        n = len(self)
        a = self._bisect_right(lo, 1, n)
        b = self._bisect_right(hi - 1, 1, n)
        if a >= b:
            return array("Q")
        return _load_pairs(os.pread(self.ifd, (b - a) * ENTRY_SIZE, a * ENTRY_SIZE))[1]


def _read_entry(fd: int, i: int) -> Tuple[int, int]:
    """Entry ``i`` of an index file (:class:`IndexError` past its end)."""
    data = os.pread(fd, ENTRY_SIZE, i * ENTRY_SIZE)
    if len(data) < ENTRY_SIZE:
        raise IndexError(i)
    return ENTRY.unpack(data)


def entries_for(records, pos: int, last_entry_pos: int, interval: int,
                need_first: bool) -> Tuple[List[Tuple[int, int, int]], int]:
    """The index rule, used by the writer and by every rebuild: the entries ``(seq, pos, ts)``
    that ``records`` (consecutive, the first at byte ``pos``) get after an entry at
    ``last_entry_pos`` - a record gets one when it starts ``interval`` or more bytes after the
    previous entry, or when it is the first of a segment without entries (``need_first``).
    Returns the entries and the position of the last entry."""
    entries = []
    for r in records:
        if need_first or pos - last_entry_pos >= interval:
            entries.append((r.sequence, pos, r.timestamp))
            last_entry_pos = pos
            need_first = False
        pos += r.size
    return entries, last_entry_pos


def read_index_files(index_path: str, time_path: str) -> Optional[MemIndex]:
    """The entries both index files agree on, in memory; None if a file is missing."""
    try:
        with open(index_path, "rb") as f:
            idata = f.read()
        with open(time_path, "rb") as f:
            tdata = f.read()
    except FileNotFoundError:
        return None
    return MemIndex.from_bytes(idata, tdata)


def encode_entries(entries: Iterable[Tuple[int, int, int]]) -> Tuple[bytes, bytes]:
    """(index bytes, timeindex bytes) for entries (seq, pos, ts)."""
    pack = ENTRY.pack
    ib: List[bytes] = []
    tb: List[bytes] = []
    for seq, pos, ts in entries:
        ib.append(pack(seq, pos))
        tb.append(pack(ts, seq))
    return b"".join(ib), b"".join(tb)
