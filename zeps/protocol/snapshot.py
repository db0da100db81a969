"""Key snapshots on the wire (ids 74-77, docs/protocol.md "Snapshots"), defined once: the ids and
the two entry frames the broker builds from a journal record's stored DELIVER frame with one
concatenation (nothing decoded).

* SNAPSHOT-ENTRY (75) has DELIVER-TS's layout with its own id: ``timestamp sequence key body``.
* SNAPSHOT-ENTRY-H (76) has DELIVER-H's layout with its own id: ``timestamp sequence block key
  body`` (sent to a client that chose HEADERS-SELECT, for a message that has headers).

An entry costs the credit the same message costs as a DELIVER (DELIVER-H for -H).
"""
from __future__ import annotations

import struct

SNAPSHOT_ID = 74
SNAPSHOT_ENTRY_ID = 75
SNAPSHOT_ENTRY_H_ID = 76
SNAPSHOT_END_ID = 77
#: The most prefixes one SNAPSHOT may name.
MAX_SNAPSHOT_PREFIXES = 16

ENTRY_HEAD = b"\xaa\xa5" + bytes((SNAPSHOT_ENTRY_ID,))
ENTRY_H_HEAD = b"\xaa\xa5" + bytes((SNAPSHOT_ENTRY_H_ID,))
_U64_pack = struct.Struct(">Q").pack
_ENTRY_FIXED = struct.Struct(">QQB")       # timestamp, sequence, key length
_U32_from = struct.Struct(">I").unpack_from


def entry_from_deliver(frame: bytes, timestamp: int) -> bytes:
    """SNAPSHOT-ENTRY from a stored DELIVER frame and its time."""
    return b"".join((ENTRY_HEAD, _U64_pack(timestamp), frame[3:]))


def entry_h_from_deliver(frame: bytes, timestamp: int, block: bytes) -> bytes:
    """SNAPSHOT-ENTRY-H from a stored DELIVER frame, its time and its headers block."""
    return b"".join((ENTRY_H_HEAD, _U64_pack(timestamp), frame[3:11], block, frame[11:]))


def parse_entry(frame: bytes):
    """``(timestamp, sequence, key, body)`` of a SNAPSHOT-ENTRY frame, read in place (a
    reader's fast path: no command object); None if ``frame`` is anything else or not exactly
    a well-formed SNAPSHOT-ENTRY (the caller then decodes it, which says why). Bytes after
    the body are ignored, as the codec ignores them."""
    if frame[:3] != ENTRY_HEAD or len(frame) < 24:
        return None
    ts, seq, klen = _ENTRY_FIXED.unpack_from(frame, 3)
    end = 20 + klen
    if len(frame) < end + 4:
        return None
    blen = _U32_from(frame, end)[0]
    if len(frame) < end + 4 + blen:
        return None
    try:
        key = frame[20:end].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return ts, seq, key, frame[end + 4:end + 4 + blen]
