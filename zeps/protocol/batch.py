"""The batch layouts, defined once: PUBLISH-BATCH, DELIVER-BATCH and the journal's batch record.

Batching is an extension (ZEPS/1 clients never see it): a client opts in with BATCH-SELECT and
the broker's BATCH-SELECT-OK says how large a PUBLISH-BATCH it takes. Both batch commands carry
the same **entries**, each laid out exactly like the fields of a PUBLISH::

    entry    = keylen u8 | key (UTF-8) | bodylen u32 BE | body

::

    PUBLISH-BATCH  AA A5 3A | count u32 | entries            (C: count >= 1 messages)
    DELIVER-BATCH  AA A5 3B | timestamp u64 | sequence u64 | count u32 | entries
                   (S: messages sequence, sequence + 1, ... sequence + count - 1, all journalled
                   at ``timestamp``: a run of consecutive sequences)

The journal stores a published batch as one record whose frame *is* its DELIVER-BATCH (one
header, one CRC for the whole batch): replaying it to a batching subscriber sends the stored
bytes, and live routing sends the bytes it wrote, exactly as a plain record stores and sends its
DELIVER. The entries of the PUBLISH-BATCH are copied into it verbatim; nothing is re-encoded.

Credit is counted per message exactly as ZEPS/1 defines it (``8 + 1 + len(key) + len(body)``
per DELIVER): an entry costs its length + 4 (the sequence's 8 octets less the body length's 4),
so a run of entries costs ``len(entries) + 4 * count``.

:func:`walk` is the one parser of entries: the codec, the journal's reader and the SDK use it.
"""
from __future__ import annotations

import struct
from typing import List, Sequence, Tuple

from .deliver import DELIVER_ID, HEAD, SIGNATURE, encode_deliver
from .speedups import batchc as _batchc

PUBLISH_BATCH_ID = 58
DELIVER_BATCH_ID = 59
#: PUBLISH-BATCH: signature, id, count.
PUBLISH_HEAD = struct.Struct(">2sBI")
#: DELIVER-BATCH: signature, id, timestamp, sequence, count.
DELIVER_HEAD = struct.Struct(">2sBQQI")
PUBLISH_HEAD_SIZE = PUBLISH_HEAD.size      # 7
DELIVER_HEAD_SIZE = DELIVER_HEAD.size      # 23
#: Credit an entry costs beyond its own length (see the module's docstring).
ENTRY_COST_EXTRA = 4
#: The smallest entry: an empty key and an empty body (their two lengths).
MIN_ENTRY = 5
MAX_COUNT = 2**32 - 1
#: The most entries a PUBLISH-BATCH may hold (a rule of the extension, like ``max_batch``): the
#: broker checks it in the frame's head before it walks a single entry, so one frame's parsing,
#: journalling and routing costs a bounded amount of work whatever its size (a 1 MiB frame of
#: empty messages would otherwise be 209,715 of them). Clients cut their batches at it.
MAX_BATCH_ENTRIES = 4096

_c_walk = _batchc.walk if _batchc is not None else None
_U32 = struct.Struct(">I")
_u32_from = _U32.unpack_from
_U32_pack = _U32.pack
_pub_pack = PUBLISH_HEAD.pack
_del_pack = DELIVER_HEAD.pack


class BadEntries(ValueError):
    """Entries that do not parse; ``str()`` says where and why (fit for an INVALID)."""


def walk(buf, start: int, end: int, count: int, check_keys: bool = True) -> List[int]:
    """Offsets of the ``count`` entries in ``buf[start:end]``, plus ``end`` (so entry ``i`` is
    ``buf[offsets[i]:offsets[i + 1]]``). The entries must fill the span exactly. With
    ``check_keys`` every key must be UTF-8. Raises :class:`BadEntries`.

    The loop over the entries runs in C when the optional extension is built
    (:mod:`.speedups`), else in :func:`walk_py`, its definition: both give the same offsets,
    or the same reason, for any input (tests/test_batchc.py)."""
    if count < 1:
        raise BadEntries("a batch holds at least one message")
    if count * MIN_ENTRY > end - start:    # a forged count: refused before allocating for it
        raise BadEntries(f"{count} entries cannot fit in {end - start} bytes")
    if _c_walk is None:
        return walk_py(buf, start, end, count, check_keys)
    try:
        return _c_walk(buf, start, end, count, check_keys)
    except ValueError as e:
        raise BadEntries(str(e)) from None


def walk_py(buf, start: int, end: int, count: int, check_keys: bool = True) -> List[int]:
    """:func:`walk`'s loop in Python (the definition; ``count`` already checked against the
    span). Keys are checked with one decode of the keys joined by newlines: an ASCII separator
    cannot complete or start a multi-byte sequence, so the joined text is valid exactly when
    every key is."""
    if check_keys:       # all ASCII (text bodies, as JSON): every key is UTF-8, nothing to gather
        span = buf if (start == 0 and end == len(buf) and type(buf) is bytes) else bytes(buf[start:end])
        check_keys = not span.isascii()
    offsets = [0] * (count + 1)
    keys: List[bytes] = []
    pos = start
    try:
        if check_keys:
            add = keys.append
            for i in range(count):
                offsets[i] = pos
                k = pos + 1
                kend = k + buf[pos]
                add(buf[k:kend])
                pos = kend + 4 + _u32_from(buf, kend)[0]
        else:
            for i in range(count):
                offsets[i] = pos
                kend = pos + 1 + buf[pos]
                pos = kend + 4 + _u32_from(buf, kend)[0]
    except (IndexError, struct.error):
        raise BadEntries(f"entry {i} of {count} runs past the end of the batch") from None
    if pos != end:
        if pos > end:
            raise BadEntries(f"entry {count - 1} of {count} runs past the end of the batch")
        raise BadEntries(f"{end - pos} bytes after the last of {count} entries")
    offsets[count] = end
    if check_keys:
        try:
            b"\n".join(keys).decode("utf-8")
        except UnicodeDecodeError:
            for i, key in enumerate(keys):
                try:
                    bytes(key).decode("utf-8")
                except UnicodeDecodeError:
                    raise BadEntries(f"the key of entry {i} is not valid UTF-8") from None
    return offsets


def entry_key(buf, off: int) -> str:
    """The key of the entry at ``off``."""
    return bytes(buf[off + 1:off + 1 + buf[off]]).decode("utf-8")


def entry_body(buf, off: int) -> bytes:
    """The body of the entry at ``off``."""
    kend = off + 1 + buf[off]
    return bytes(buf[kend + 4:kend + 4 + _u32_from(buf, kend)[0]])


def entry_key_body(buf, off: int) -> Tuple[bytes, bytes]:
    """``(key bytes, body bytes)`` of the entry at ``off``."""
    kend = off + 1 + buf[off]
    return bytes(buf[off + 1:kend]), bytes(buf[kend + 4:kend + 4 + _u32_from(buf, kend)[0]])


def run_cost(offsets: Sequence[int], i: int, j: int) -> int:
    """Credit entries ``i`` to ``j - 1`` cost."""
    return offsets[j] - offsets[i] + ENTRY_COST_EXTRA * (j - i)


def is_batch_frame(frame) -> bool:
    """Is this (stored or sent) frame a DELIVER-BATCH?"""
    return frame[2] == DELIVER_BATCH_ID


def batch_first_seq(frame) -> int:
    """The first sequence of a DELIVER-BATCH frame."""
    return DELIVER_HEAD.unpack_from(frame)[3]


def batch_count(frame) -> int:
    """How many messages a DELIVER-BATCH frame holds."""
    return DELIVER_HEAD.unpack_from(frame)[4]


def batch_cost(frame) -> int:
    """Credit the messages of a DELIVER-BATCH frame cost (as their DELIVERs would)."""
    return len(frame) - DELIVER_HEAD_SIZE + ENTRY_COST_EXTRA * batch_count(frame)


def encode_entries(items) -> bytes:
    """The entries of ``(key: str, body: bytes)`` pairs (keys checked: at most 255 bytes)."""
    parts = []
    add = parts.append
    for key, body in items:
        kb = key.encode("utf-8")
        if len(kb) > 255:
            raise ValueError(f"key longer than 255 bytes: {key[:40]!r}")
        add(bytes((len(kb),)))
        add(kb)
        add(_U32_pack(len(body)))
        add(body)
    return b"".join(parts)


def publish_batch_head(count: int) -> bytes:
    return _pub_pack(SIGNATURE, PUBLISH_BATCH_ID, count)


def encode_publish_batch(items) -> bytes:
    """A PUBLISH-BATCH frame from ``(key, body)`` pairs (at least one)."""
    if not items:
        raise ValueError("a PUBLISH-BATCH holds at least one message")
    return publish_batch_head(len(items)) + encode_entries(items)


def deliver_batch_head(timestamp: int, sequence: int, count: int) -> bytes:
    return _del_pack(SIGNATURE, DELIVER_BATCH_ID, timestamp, sequence, count)


def deliver_frames(buf, offsets: Sequence[int], sequence: int, i: int = 0, j: int = -1
                   ) -> List[bytes]:
    """The DELIVER frames of entries ``i`` to ``j - 1`` (``j=-1``: to the last), the first
    with ``sequence`` (what a ZEPS/1 subscriber of a batch record gets)."""
    if j < 0:
        j = len(offsets) - 1
    out = []
    for k in range(i, j):
        off = offsets[k]
        out.append(b"".join((SIGNATURE, bytes((DELIVER_ID,)), _SEQ_pack(sequence + k - i),
                             bytes(buf[off:offsets[k + 1]]))))
    return out


_SEQ_pack = struct.Struct(">Q").pack

__all__ = ["BadEntries", "walk", "entry_key", "entry_body", "entry_key_body", "run_cost",
           "encode_entries", "encode_publish_batch", "publish_batch_head", "deliver_batch_head",
           "deliver_frames", "is_batch_frame", "batch_first_seq", "batch_count", "batch_cost",
           "PUBLISH_BATCH_ID", "DELIVER_BATCH_ID", "PUBLISH_HEAD", "MAX_BATCH_ENTRIES",
           "DELIVER_HEAD", "PUBLISH_HEAD_SIZE", "DELIVER_HEAD_SIZE", "ENTRY_COST_EXTRA", "HEAD",
           "encode_deliver"]
