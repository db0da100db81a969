"""The memory the columnar reader (:mod:`.columnar`) reads its blocks into."""
from __future__ import annotations

import mmap
import os
from typing import Optional

_PREADV = hasattr(os, "preadv")
_SEQUENTIAL = getattr(mmap, "MADV_SEQUENTIAL", None)
#: The bytes of a sealed segment's log a reader maps at a time (:meth:`BlockBuffer.mapped`).
MAP_WINDOW = 64 << 20


class BlockBuffer:
    """The memory a block is read into, reused from block to block of a read: a fresh ``bytes``
    per block costs its page faults and zeroing on top of the copy (32 MiB: about three times
    the copy alone). Nothing a block's columns hold points into it: keys, bodies, producer ids
    and the numeric columns are copies (:mod:`.ranges`, numpy gathers), and records parsed one
    by one (``parse_records``) slice copies out of it.

    A sealed segment can also be read through a memory map of its log (:meth:`mapped`): no copy
    from the page cache at all (the copy of ``preadv`` was about a sixth of a Spark worker's
    time). Only sealed segments: ZEPS truncates nothing but the last segment of a stream (the
    torn tail at recovery, a failed batch), and a page of a mapped file cut away under a reader
    kills it with SIGBUS, where ``preadv`` would return fewer bytes. Compaction and retention
    replace and delete files, which leaves an existing map intact."""

    def __init__(self):
        self.buf: Optional[bytearray] = None
        #: what the reader learnt of the index for the blocks of this read (see
        #: :meth:`.columnar.ColumnSink._end_hint`)
        self.end_hints: dict = {}
        self._map_key = None
        self._file_size = 0
        self._map = None        # (offset of the window in the file, memoryview of it)

    def read(self, fd: int, size: int, pos: int):
        """``size`` bytes of ``fd`` at ``pos`` (fewer at the end of the file)."""
        if not _PREADV:                                 # pragma: no cover - not on Linux
            return os.pread(fd, size, pos)
        b = self.buf
        if b is None or len(b) != size:
            b = self.buf = bytearray(size)
        got = os.preadv(fd, [b], pos)
        if got < size:
            self.buf = None
            return b[:got]
        return b

    def mapped(self, seg, size: int, pos: int) -> Optional[memoryview]:
        """A read-only view of ``size`` bytes of sealed segment ``seg``'s log at ``pos`` (fewer
        at the end of the file), or None where the file cannot be mapped (empty, out of
        address space): then :meth:`read` it. The map is a window of :data:`MAP_WINDOW` bytes
        (a reader's address space does not grow with the segment size), moved on when a read
        leaves it; a window is unmapped when the last view of it goes."""
        key = (seg.log_path, seg.ino)
        if key != self._map_key:
            self._map_key, self._map = key, None
            self._file_size = os.fstat(seg.fd).st_size
        end = min(pos + size, self._file_size)
        if pos >= end:
            return None
        w = self._map
        if w is None or pos < w[0] or end > w[0] + len(w[1]):
            self._map = None
            start = pos - pos % mmap.ALLOCATIONGRANULARITY
            length = min(max(MAP_WINDOW, end - start), self._file_size - start)
            try:
                m = mmap.mmap(seg.fd, length, prot=mmap.PROT_READ, offset=start)
            except (OSError, ValueError):
                return None
            if _SEQUENTIAL is not None:
                m.madvise(_SEQUENTIAL)
            self._map = w = (start, memoryview(m))
        start, view = w
        return view[pos - start:end - start]
