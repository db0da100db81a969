"""Which old segments retention deletes: a pure rule, no files and no clock of its own.

Whole segments only, oldest first, never the active (last) one. A segment goes while the stream
is over ``retention_bytes``, or while its newest record is older than ``retention_ms`` at
``now_ns`` (a sealed segment left empty by compaction counts as old); the first segment that
meets neither condition stops the pass (retention never leaves a hole between kept segments).
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Tuple


def segments_to_delete(segments: Iterable[Tuple[int, Optional[int]]], total_bytes: int,
                       retention_bytes: Optional[int], retention_ms: Optional[int],
                       now_ns: int) -> List[str]:
    """For the sealed segments ``(size, newest timestamp or None)`` (oldest first, the active
    one excluded) of a stream of ``total_bytes``, the reason to delete each of the leading
    ones: ``"size"`` or ``"age"``; its length is how many to delete. ``segments`` is consumed
    only up to the first segment kept (it may load segments lazily)."""
    reasons = []
    for size, newest_ts in segments:
        if retention_bytes is not None and total_bytes > retention_bytes:
            reasons.append("size")
        elif retention_ms is not None and (
                newest_ts < now_ns - retention_ms * 1_000_000 if newest_ts is not None
                else size == 0):
            reasons.append("age")
        else:
            break
        total_bytes -= size
    return reasons
