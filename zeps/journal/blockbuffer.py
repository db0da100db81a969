"""The memory the columnar reader (:mod:`.columnar`) reads its blocks into."""
from __future__ import annotations

import os
from typing import Optional

_PREADV = hasattr(os, "preadv")


class BlockBuffer:
    """The memory a block is read into, reused from block to block of a read: a fresh ``bytes``
    per block costs its page faults and zeroing on top of the copy (32 MiB: about three times
    the copy alone). Nothing a block's columns hold points into it: keys, bodies, producer ids
    and the numeric columns are copies (:mod:`.ranges`, numpy gathers), and records parsed one
    by one (``parse_records``) slice copies out of it."""

    def __init__(self):
        self.buf: Optional[bytearray] = None
        #: what the reader learnt of the index for the blocks of this read (see
        #: :meth:`.columnar.ColumnSink._end_hint`)
        self.end_hints: dict = {}

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
