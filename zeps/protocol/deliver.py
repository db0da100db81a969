"""The DELIVER frame's layout and the credit a delivered message costs, defined once.

Every part of ZEPS that builds, slices or prices a DELIVER frame uses these names: the codec
(``encode_deliver``), the journal (a record stores its DELIVER frame verbatim), the broker's
live routing and replay (credit), the client SDK (decoding DELIVER and DELIVER-TS, sizing its
credit window) and the Spark columnar reader.

::

    offset 0   signature   AA A5
    offset 2   command id  07 (DELIVER)
    offset 3   sequence    u64 BE
    offset 11  key length  u8
    offset 12  key         key length bytes (UTF-8)
    then       body length u32 BE
    then       body

DELIVER-TS (an extension, id 43) is the same frame with a u64 timestamp inserted after the
command id: every offset after it moves by :data:`TS_SHIFT` (8).

Credit: ZEPS/1 (``zeps.txt``) counts ``8 + len(key) + 1 + len(body)`` bytes per DELIVER (the
sequence, the key with its length octet, the body), i.e. the frame's length minus
:data:`OVERHEAD` (the 2-octet signature, the command id and the 4-octet body length).
"""
from __future__ import annotations

import struct

SIGNATURE = b"\xaa\xa5"
DELIVER_ID = 7
DELIVER_TS_ID = 43
#: signature, command id, sequence, key length: the fixed head of every DELIVER frame.
HEAD = struct.Struct(">2sBQB")
SEQ_OFFSET = 3
KEYLEN_OFFSET = 11
KEY_OFFSET = 12
#: Bytes DELIVER-TS adds after the command id (the u64 timestamp).
TS_SHIFT = 8
#: The smallest DELIVER frame (empty key, empty body).
MIN_FRAME = KEY_OFFSET + 4
#: DELIVER frame length minus the credit it costs.
OVERHEAD = 7

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_U32_pack = _U32.pack
_U64_pack = _U64.pack
_U64_unpack_from = _U64.unpack_from
_U32_unpack_from = _U32.unpack_from
_HEAD_pack = HEAD.pack
_TS_PREFIX = SIGNATURE + bytes((DELIVER_TS_ID,))


def deliver_cost(key_len: int, body_len: int) -> int:
    """Credit one DELIVER costs, from the key's encoded length and the body's length."""
    return 9 + key_len + body_len


def message_cost(key: str, body) -> int:
    """Credit one delivered message costs, from its key (text) and body."""
    return 9 + len(key.encode("utf-8")) + len(body)


def frame_cost(frame) -> int:
    """Credit the message in an encoded DELIVER frame costs."""
    return len(frame) - OVERHEAD


def encode_deliver(sequence: int, key: bytes, body) -> bytes:
    """A DELIVER frame from a sequence, an already-encoded key (<= 255 bytes) and a body.

    Callers check the limits (the codec's :func:`zeps.protocol.codec.encode_deliver` does)."""
    return b"".join((_HEAD_pack(SIGNATURE, DELIVER_ID, sequence, len(key)), key,
                     _U32_pack(len(body)), body))


def sequence_of(frame, shift: int = 0) -> int:
    """The sequence of an encoded DELIVER (``shift=0``) or DELIVER-TS (``shift=TS_SHIFT``) frame."""
    return _U64_unpack_from(frame, SEQ_OFFSET + shift)[0]


def timestamp_of_ts(frame) -> int:
    """The timestamp of an encoded DELIVER-TS frame."""
    return _U64_unpack_from(frame, SEQ_OFFSET)[0]


def key_body_of(frame, shift: int = 0):
    """``(key_bytes, body_bytes)`` of an encoded DELIVER (or DELIVER-TS with ``shift=8``) frame.

    Raises IndexError / struct.error on a frame too short for its own lengths."""
    kpos = KEY_OFFSET + shift
    kend = kpos + frame[KEYLEN_OFFSET + shift]
    blen = _U32_unpack_from(frame, kend)[0]
    bpos = kend + 4
    if bpos + blen > len(frame):
        raise IndexError("DELIVER body runs past the end of the frame")
    return frame[kpos:kend], frame[bpos:bpos + blen]


def ts_from_deliver(frame: bytes, timestamp: int) -> bytes:
    """The DELIVER-TS frame for an encoded DELIVER frame (the journal's bytes) and a time."""
    return b"".join((_TS_PREFIX, _U64_pack(timestamp), frame[SEQ_OFFSET:]))
