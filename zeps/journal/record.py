"""Record format, encoding and parsing (the journal's hot path).

A record in a ``.log`` file (see docs/architecture.md, "Journal contract")::

    length    u32 BE   length of the DELIVER frame that follows
    crc       u32 BE   CRC-32C (Castagnoli, google_crc32c) of timestamp || frame
    timestamp u64 BE   ns since the epoch, taken at append; never decreases within a stream
    frame     bytes    the complete ZEPS DELIVER frame:
                       AA A5 07 | seq u64 | keylen u8 | key | bodylen u32 | body
                       (layout defined once in :mod:`zeps.protocol.deliver`)

Why the record stores its DELIVER frame verbatim: replay is the broker's hot path, and with the
frame on disk a replayed record is sent as the exact bytes read (no decode, no re-encode, no
copy beyond the read), and live routing sends the very bytes it wrote. It also means the
sequence is inside the CRC-covered bytes, so recovery can check "this is record N" and not just
"these bytes are intact".

Why timestamp || frame are contiguous in the CRC: they are adjacent on disk, so the reader
checks one contiguous slice; the length is not covered but a wrong length makes the CRC (or the
frame's own lengths) fail.

Parsing never trusts a record it has not CRC-checked: :func:`parse_records` yields only whole,
verified records, and reports where and why it stopped. It is the one definition of a valid
record: the columnar reader (:mod:`.columnar`) asks it why the first record it rejects is bad.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import google_crc32c

from ..protocol.deliver import (DELIVER_ID, HEAD, KEY_OFFSET, KEYLEN_OFFSET, MIN_FRAME,
                                SIGNATURE, encode_deliver)
from .errors import InvalidRecordError, KeyTooLongError, RecordTooLargeError

HEADER = struct.Struct(">IIQ")        # length, crc, timestamp
HEADER_SIZE = HEADER.size             # 16
CRC_OFFSET = 4                        # offset of the crc in a record
TS_OFFSET = 8                         # offset of the timestamp: the CRC covers record[TS_OFFSET:]
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
MAX_KEY = 255

_crc_value = google_crc32c.value
_crc_extend = google_crc32c.extend

# parse_records() stop reasons
END = 0      # consumed exactly up to ``end``
LIMIT = 1    # max_records / max_bytes reached (``pos`` is the next record)
SHORT = 2    # the record at ``pos`` is not complete within ``end`` (``need`` bytes needed)
BAD = 3      # the bytes at ``pos`` are not a valid record (``reason`` says why)


class Record:
    """One journal record. ``frame`` is the DELIVER frame exactly as stored (and sent);
    ``key`` and ``body`` are decoded from it on first access (replay only needs ``frame``)."""

    __slots__ = ("sequence", "timestamp", "frame", "_key", "_body")

    def __init__(self, sequence: int, timestamp: int, frame: bytes,
                 key: Optional[str] = None, body: Optional[bytes] = None):
        self.sequence = sequence
        self.timestamp = timestamp
        self.frame = frame
        self._key = key
        self._body = body

    @property
    def key(self) -> str:
        k = self._key
        if k is None:
            frame = self.frame
            k = self._key = frame[KEY_OFFSET:KEY_OFFSET + frame[KEYLEN_OFFSET]].decode("utf-8")
        return k

    @property
    def body(self) -> bytes:
        b = self._body
        if b is None:
            frame = self.frame
            b = self._body = frame[MIN_FRAME + frame[KEYLEN_OFFSET]:]
        return b

    @property
    def size(self) -> int:
        """Bytes this record takes in the log (header + frame)."""
        return HEADER_SIZE + len(self.frame)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return (self.sequence == other.sequence and self.timestamp == other.timestamp
                and self.frame == other.frame)

    def __hash__(self):
        return hash((self.sequence, self.timestamp, self.frame))

    def __repr__(self):
        body = self.body
        shown = body[:32] + (b"..." if len(body) > 32 else b"")
        return (f"Record(sequence={self.sequence}, timestamp={self.timestamp}, "
                f"key={self.key!r}, body={shown!r})")


@dataclass(frozen=True)
class StreamStats:
    """What :meth:`info` reports. Timestamps are 0 and ``last_seq`` is ``first_seq - 1`` when
    the stream holds no record."""
    first_seq: int
    last_seq: int
    size_bytes: int
    oldest_ts: int
    newest_ts: int
    segments: int


def encode_batch(items: Sequence[Tuple[str, bytes]], first_seq: int, timestamp: int,
                 max_record_bytes: int) -> Tuple[List[bytes], List[Record]]:
    """Encode a batch sharing one timestamp. Returns (record byte strings: header, frame,
    header, frame..., Records). Raises before anything is written if any item is invalid (all or
    nothing). Frames are built by :func:`zeps.protocol.deliver.encode_deliver`."""
    ts_bytes = _U64.pack(timestamp)
    ts_crc = _crc_value(ts_bytes)
    pack = HEADER.pack
    if first_seq + len(items) > 1 << 64:
        raise InvalidRecordError("sequence would exceed 2^64-1")
    parts: List[bytes] = []
    records: List[Record] = []
    seq = first_seq
    for item in items:
        try:
            key, body = item
        except (TypeError, ValueError):
            raise InvalidRecordError(f"batch item {seq - first_seq} must be a (key, body) pair, "
                                     f"not {item!r:.60}") from None
        if not isinstance(key, str):
            raise InvalidRecordError(f"key must be str, not {type(key).__name__}")
        if not isinstance(body, bytes):
            if isinstance(body, (bytearray, memoryview)):
                body = bytes(body)
            else:
                raise InvalidRecordError(f"body must be bytes, not {type(body).__name__}")
        kb = key.encode("utf-8")
        if len(kb) > MAX_KEY:
            raise KeyTooLongError(f"key is {len(kb)} bytes in UTF-8; the limit is {MAX_KEY} "
                                  f"(key starts {key[:40]!r}); nothing of the batch was appended")
        flen = MIN_FRAME + len(kb) + len(body)
        if flen > max_record_bytes:
            raise RecordTooLargeError(
                f"record {seq - first_seq} of the batch has a {flen}-byte frame, over "
                f"max_record_bytes={max_record_bytes}; nothing of the batch was appended")
        frame = encode_deliver(seq, kb, body)
        parts.append(pack(flen, _crc_extend(ts_crc, frame), timestamp))
        parts.append(frame)
        records.append(Record(seq, timestamp, frame, key, body))
        seq += 1
    return parts, records


def parse_records(buf: bytes, pos: int, end: int, expect_seq: int, out: Optional[list],
                  max_records: int = 1 << 62, max_bytes: int = 1 << 62,
                  want_seq: int = 0, stop_ts: Optional[int] = None, n: int = 0, nbytes: int = 0,
                  last_ts: Optional[int] = None):
    """Parse the records in ``buf[pos:end]`` whose first sequence must be ``expect_seq``.

    Whole, CRC-verified records with ``sequence >= want_seq`` are appended to ``out`` as
    :class:`Record` (records below ``want_seq`` are verified and skipped). If ``out`` is None
    nothing is built (scan/recovery mode). Stops after ``max_records`` emitted records, before a
    record that would take the emitted frame bytes over ``max_bytes`` (the first one is always
    emitted; ``n``/``nbytes`` count what earlier calls of the same read already emitted), at
    ``end``, at an incomplete record or at a bad one. If ``stop_ts`` is given, stops
    (LIMIT) before the first record with ``timestamp >= stop_ts``. ``last_ts``: the timestamp
    of the record before ``pos`` if the caller read it (a timestamp below it is BAD).

    A record is valid when it is whole, its length is at least a minimal DELIVER frame, its
    CRC-32C matches, its frame is a DELIVER whose key and body lengths add up to the length, its
    sequence is the expected one and its timestamp is not below the previous record's.

    Returns ``(status, pos, expect_seq, last_ts, info)``: ``pos``/``expect_seq`` are those of
    the first record not consumed, ``last_ts`` the timestamp of the last consumed record (the
    one given if none was), ``info`` is the number of bytes needed for SHORT, the reason text
    for BAD.
    """
    unpack_hdr = HEADER.unpack_from
    unpack_head = HEAD.unpack_from
    unpack_u32 = _U32.unpack_from
    crc_value = _crc_value
    crc_extend = _crc_extend
    append = out.append if out is not None else None
    while True:
        avail = end - pos
        if avail < HEADER_SIZE:
            if avail == 0:
                return END, pos, expect_seq, last_ts, None
            return SHORT, pos, expect_seq, last_ts, HEADER_SIZE
        length, crc, ts = unpack_hdr(buf, pos)
        if length < MIN_FRAME:
            return BAD, pos, expect_seq, last_ts, f"record length {length} is below the minimum"
        if HEADER_SIZE + length > avail:
            return SHORT, pos, expect_seq, last_ts, HEADER_SIZE + length
        fstart = pos + HEADER_SIZE
        fend = fstart + length
        frame = buf[fstart:fend]
        if crc_extend(crc_value(buf[pos + TS_OFFSET:fstart]), frame) != crc:
            return BAD, pos, expect_seq, last_ts, "CRC-32C mismatch"
        sig, cid, seq, klen = unpack_head(frame, 0)
        if sig != SIGNATURE or cid != DELIVER_ID:
            return BAD, pos, expect_seq, last_ts, "not a DELIVER frame"
        if (MIN_FRAME + klen > length
                or MIN_FRAME + klen + unpack_u32(frame, KEY_OFFSET + klen)[0] != length):
            return BAD, pos, expect_seq, last_ts, "frame lengths do not add up"
        if seq != expect_seq:
            return BAD, pos, expect_seq, last_ts, f"sequence {seq} where {expect_seq} was expected"
        if last_ts is not None and ts < last_ts:
            return BAD, pos, expect_seq, last_ts, "timestamp goes backwards"
        if stop_ts is not None and ts >= stop_ts:
            return LIMIT, pos, expect_seq, last_ts, None
        if seq >= want_seq and append is not None:
            if n and nbytes + length > max_bytes:
                return LIMIT, pos, expect_seq, last_ts, None
            append(Record(seq, ts, frame))
            n += 1
            nbytes += length
            last_ts = ts
            pos = fend
            expect_seq = seq + 1
            if n >= max_records or nbytes >= max_bytes:
                return LIMIT, pos, expect_seq, last_ts, None
        else:
            last_ts = ts
            pos = fend
            expect_seq = seq + 1
