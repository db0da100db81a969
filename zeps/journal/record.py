"""Record format, encoding and parsing (the journal's hot path).

A record in a ``.log`` file (see docs/architecture.md, "Journal contract")::

    length    u32 BE   bit 31: a producer extension follows the timestamp;
                       bits 0-30: length of the DELIVER frame
    crc       u32 BE   CRC-32C (Castagnoli, google_crc32c) of timestamp || extension || frame
    timestamp u64 BE   ns since the epoch, taken at append; never decreases within a stream
    extension          only if bit 31 of length is set (a record published with a producer id):
                       pid_len u8 (1..255) | pid (UTF-8) | pseq u64 BE (1..2^64-1)
                       (on a batch record: the producer sequence of its first message)
    frame     bytes    the complete ZEPS DELIVER frame (one message):
                       AA A5 07 | seq u64 | keylen u8 | key | bodylen u32 | body
                       (layout defined once in :mod:`zeps.protocol.deliver`)
                       or DELIVER-BATCH frame (a batch record: ``count`` messages):
                       AA A5 3B | timestamp u64 | seq u64 | count u32 | entries
                       (layout defined once in :mod:`zeps.protocol.batch`)

A batch record (a PUBLISH-BATCH appended as one record, read as :class:`BatchRecord`) is
valid when it is whole, its CRC matches, the frame's timestamp equals the header's, its
sequence is the expected one, ``count >= 1``, the entries fill the frame exactly
(:func:`zeps.protocol.batch.walk`, keys UTF-8) and its timestamp is not below the previous
record's. It may carry a producer extension (an idempotent producer's PUBLISH-BATCH): its
``pseq`` is that of the batch's first message, message ``i`` has ``pseq + i``, so a flagged batch
record is valid only if ``pseq >= 1`` and ``pseq + count - 1 <= 2^64-1``. The record after it
has sequence ``seq + count``. Journals without batch records read exactly as before.

Why the record stores its DELIVER frame verbatim: replay is the broker's hot path, and with the
frame on disk a replayed record is sent as the exact bytes read (no decode, no re-encode, no
copy beyond the read), and live routing sends the very bytes it wrote. It also means the
sequence is inside the CRC-covered bytes, so recovery can check "this is record N" and not just
"these bytes are intact".

Why timestamp || frame are contiguous in the CRC: they are adjacent on disk, so the reader
checks one contiguous slice; the length is not covered but a wrong length makes the CRC (or the
frame's own lengths) fail.

Why the producer extension is flagged in the length's top bit and sits before the frame: a
record without one is byte-for-byte the record of a journal written before the extension
existed (old journals stay readable, a replay still sends the stored frame verbatim, and such a
record costs nothing more to write or read: the reader's first check, ``length`` against the
bytes available, already sends a flagged length down the slow path). With the extension inside
the CRC-covered ``timestamp || extension || frame`` slice, the producer id and sequence are
exactly as durable and as verified as the record: rebuilding the producer state from the log
(:mod:`.producers`) can trust them. A DELIVER frame is at most 2^31-1 bytes
(``JournalConfig.max_record_bytes``).

Why a batch is one record holding its DELIVER-BATCH: appending a batch of N messages costs one
header, one CRC over the bytes and a few Python calls whatever N is (the entries of the
PUBLISH-BATCH are copied in verbatim), and replay can send a stored batch as it is. Index
entries point at record starts, so a lookup for a sequence inside a batch lands at (or before)
its record and the reader skips within it.

Parsing never trusts a record it has not CRC-checked: :func:`parse_records` yields only whole,
verified records, and reports where and why it stopped. It is the one definition of a valid
record: the columnar reader (:mod:`.columnar`) asks it why the first record it rejects is bad.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import repeat
from typing import List, Optional, Sequence, Tuple

import google_crc32c

from ..protocol.batch import (DELIVER_BATCH_ID, DELIVER_HEAD, DELIVER_HEAD_SIZE, MIN_ENTRY, BadEntries,
                              deliver_batch_head, deliver_frames, entry_body, entry_key, walk)
from ..protocol.commands import PublishBatch
from ..protocol.deliver import (DELIVER_ID, HEAD, KEY_OFFSET, KEYLEN_OFFSET, MIN_FRAME,
                                SIGNATURE, encode_deliver)
from .errors import InvalidRecordError, KeyTooLongError, RecordTooLargeError

HEADER = struct.Struct(">IIQ")        # length, crc, timestamp
HEADER_SIZE = HEADER.size             # 16
CRC_OFFSET = 4                        # offset of the crc in a record
TS_OFFSET = 8                         # offset of the timestamp: the CRC covers record[TS_OFFSET:]
PRODUCER_FLAG = 0x80000000            # length bit: a producer extension follows the timestamp
LENGTH_MASK = 0x7FFFFFFF              # length bits: the frame length
MAX_FRAME = LENGTH_MASK               # the largest frame a record can hold
PID_LEN_OFFSET = HEADER_SIZE          # the extension's pid_len, when the flag is set
EXT_FIXED = 9                         # extension bytes besides the pid: pid_len u8, pseq u64
MAX_PRODUCER_ID = 255
MAX_PSEQ = (1 << 64) - 1
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
    ``key`` and ``body`` are decoded from it on first access (replay only needs ``frame``).
    ``producer``/``pseq``: the publisher id and its sequence the record was appended with
    (both None for a record without them; a record with them is a :class:`ProducerRecord`, so
    that building a plain record costs what it did before the extension existed)."""

    __slots__ = ("sequence", "timestamp", "frame", "_key", "_body")
    producer: Optional[str] = None
    pseq: Optional[int] = None

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
    def last_sequence(self) -> int:
        """The sequence of the last message in this record (its own: one message)."""
        return self.sequence

    @property
    def size(self) -> int:
        """Bytes this record takes in the log (header, producer extension, frame)."""
        if self.producer is None:
            return HEADER_SIZE + len(self.frame)
        return HEADER_SIZE + EXT_FIXED + len(self.producer.encode("utf-8")) + len(self.frame)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return (self.sequence == other.sequence and self.timestamp == other.timestamp
                and self.frame == other.frame and self.producer == other.producer
                and self.pseq == other.pseq)

    def __hash__(self):
        return hash((self.sequence, self.timestamp, self.frame))

    def __repr__(self):
        body = self.body
        shown = body[:32] + (b"..." if len(body) > 32 else b"")
        prod = "" if self.producer is None else f", producer={self.producer!r}, pseq={self.pseq}"
        return (f"Record(sequence={self.sequence}, timestamp={self.timestamp}, "
                f"key={self.key!r}, body={shown!r}{prod})")


class ProducerRecord(Record):
    """A :class:`Record` appended with a producer id and sequence (its producer extension)."""

    __slots__ = ("producer", "pseq")

    def __init__(self, sequence: int, timestamp: int, frame: bytes, key: Optional[str],
                 body: Optional[bytes], producer: str, pseq: int):
        Record.__init__(self, sequence, timestamp, frame, key, body)
        self.producer = producer
        self.pseq = pseq


#: A message's DELIVER frame is its entry after this many bytes (signature, id, sequence).
ENTRY_IN_DELIVER = KEYLEN_OFFSET


class BatchRecord:
    """One batch record: messages ``sequence`` .. ``last_sequence`` journalled at ``timestamp``
    in one DELIVER-BATCH ``frame`` (exactly as stored, and as sent to a batching subscriber).

    ``offsets``: where each entry starts in ``frame``, plus ``len(frame)`` (entry ``i`` is
    ``frame[offsets[i]:offsets[i + 1]]``); computed on first use unless the parser or writer
    already had them. ``producer``/``pseq``: the producer id and the producer sequence of the
    batch's first message (message ``i`` has ``pseq + i``), or both None."""

    __slots__ = ("sequence", "count", "timestamp", "frame", "_offsets", "_shift", "producer",
                 "pseq")

    def __init__(self, sequence: int, count: int, timestamp: int, frame: bytes,
                 offsets: Optional[Sequence[int]] = None, shift: int = 0,
                 producer: Optional[str] = None, pseq: Optional[int] = None):
        self.producer = producer
        self.pseq = pseq
        self.sequence = sequence
        self.count = count
        self.timestamp = timestamp
        self.frame = frame
        self._offsets = offsets
        self._shift = shift      # offsets given relative to the entries: add this to each

    @property
    def offsets(self) -> Sequence[int]:
        offs = self._offsets
        if offs is None:
            offs = walk(self.frame, DELIVER_HEAD_SIZE, len(self.frame), self.count, False)
        elif self._shift:
            d = self._shift
            offs = [o + d for o in offs]
        self._offsets, self._shift = offs, 0
        return offs

    @property
    def last_sequence(self) -> int:
        return self.sequence + self.count - 1

    @property
    def last_pseq(self) -> Optional[int]:
        """The producer sequence of the batch's last message (None without a producer)."""
        return None if self.pseq is None else self.pseq + self.count - 1

    @property
    def size(self) -> int:
        """Bytes this record takes in the log (header, producer extension, frame)."""
        if self.producer is None:
            return HEADER_SIZE + len(self.frame)
        return HEADER_SIZE + EXT_FIXED + len(self.producer.encode("utf-8")) + len(self.frame)

    def key(self, i: int) -> str:
        """The key of message ``i`` (0-based) of the batch."""
        return entry_key(self.frame, self.offsets[i])

    def body(self, i: int) -> bytes:
        """The body of message ``i`` (0-based) of the batch."""
        return entry_body(self.frame, self.offsets[i])

    def records(self, start: int = 0) -> List[Record]:
        """Message ``start`` on as :class:`Record` objects whose ``frame`` is the DELIVER frame
        a ZEPS/1 subscriber gets (built by :func:`zeps.protocol.batch.deliver_frames`); with a
        producer, :class:`ProducerRecord` objects with ``pseq + i``."""
        return expand(self.frame, self.offsets, self.sequence, self.timestamp, start,
                      self.count, self.producer, self.pseq)

    def __eq__(self, other):
        if not isinstance(other, BatchRecord):
            return NotImplemented
        return (self.sequence == other.sequence and self.timestamp == other.timestamp
                and self.count == other.count and self.frame == other.frame
                and self.producer == other.producer and self.pseq == other.pseq)

    def __hash__(self):
        return hash((self.sequence, self.timestamp, self.frame))

    def __repr__(self):
        prod = "" if self.producer is None else f", producer={self.producer!r}, pseq={self.pseq}"
        return (f"BatchRecord(sequence={self.sequence}, count={self.count}, "
                f"timestamp={self.timestamp}, frame_bytes={len(self.frame)}{prod})")


def expand(frame: bytes, offsets: Sequence[int], seq: int, ts: int, start: int, stop: int,
           producer: Optional[str], pseq: Optional[int]) -> List[Record]:
    """Messages ``start..stop-1`` of the batch record (``frame``, entry ``offsets``, first
    sequence ``seq``) as :class:`Record` objects (:class:`ProducerRecord` with ``pseq + i``
    when the batch has a producer)."""
    s0 = seq + start
    frames = deliver_frames(frame, offsets, s0, start, stop)
    if producer is None:
        return [Record(s0 + k, ts, f) for k, f in enumerate(frames)]
    p0 = pseq + start
    return [ProducerRecord(s0 + k, ts, f, None, None, producer, p0 + k)
            for k, f in enumerate(frames)]


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


def check_producers(producers, n: int) -> List[Optional[Tuple[bytes, int]]]:
    """Validate ``append_batch``'s ``producers`` (a list parallel to the ``n`` items, each None
    or ``(producer id, pseq)``); return each as ``(UTF-8 id, pseq)`` or None. Raises
    :class:`InvalidRecordError` saying which entry is wrong and why."""
    if not isinstance(producers, (list, tuple)) or len(producers) != n:
        raise InvalidRecordError(
            f"producers must be a list of {n} entries (one per item, None or (producer id, "
            f"pseq)), not {producers!r:.60}; nothing of the batch was appended")
    out: List[Optional[Tuple[bytes, int]]] = []
    for i, p in enumerate(producers):
        if p is None:
            out.append(None)
            continue
        try:
            pid, pseq = p
        except (TypeError, ValueError):
            raise InvalidRecordError(f"producers[{i}] must be None or a (producer id, pseq) "
                                     f"pair, not {p!r:.60}") from None
        if not isinstance(pid, str):
            raise InvalidRecordError(f"producers[{i}]: producer id must be str, not "
                                     f"{type(pid).__name__}")
        try:
            pb = pid.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRecordError(f"producers[{i}]: producer id {pid!r:.60} is not valid "
                                     f"Unicode text") from None
        if not 1 <= len(pb) <= MAX_PRODUCER_ID:
            raise InvalidRecordError(f"producers[{i}]: producer id is {len(pb)} bytes in UTF-8; "
                                     f"it must be 1 to {MAX_PRODUCER_ID}")
        if not isinstance(pseq, int) or isinstance(pseq, bool) or not 1 <= pseq <= MAX_PSEQ:
            raise InvalidRecordError(f"producers[{i}]: pseq must be an integer from 1 to 2^64-1, "
                                     f"not {pseq!r:.40}")
        out.append((pb, pseq))
    return out


def encode_batch(items: Sequence, first_seq: int, timestamp: int, max_record_bytes: int,
                 producers=None) -> Tuple[List[bytes], List[Record]]:
    """Encode a batch sharing one timestamp. Returns (record byte strings: header, frame,
    header, frame..., records parallel to ``items``). An item is a ``(key, body)`` pair (one
    :class:`Record`) or a :class:`~zeps.protocol.commands.PublishBatch` (one
    :class:`BatchRecord` holding its entries verbatim, sequences ``seq .. seq + count - 1``).
    ``producers``: None or a list parallel to ``items`` of None or ``(producer id, pseq)``
    (checked by :func:`check_producers`; for a PublishBatch the pseq is that of its first
    message, and ``pseq + count - 1`` must not pass 2^64-1); a record with one gets the
    producer extension (header, extension, frame). Raises before anything is written if any
    item is invalid (all or nothing). Frames are built by
    :func:`zeps.protocol.deliver.encode_deliver` and :func:`zeps.protocol.batch.deliver_batch_head`."""
    ts_bytes = _U64.pack(timestamp)
    ts_crc = _crc_value(ts_bytes)
    pack = HEADER.pack
    prods = repeat(None) if producers is None else check_producers(producers, len(items))
    parts: List[bytes] = []
    records: List = []
    seq = first_seq
    for i, (item, prod) in enumerate(zip(items, prods)):
        if isinstance(item, PublishBatch):
            batch = _batch_record(item, i, seq, timestamp, max_record_bytes)
            entries = item.entries
            head = batch.frame
            flen = len(head) + len(entries)
            if prod is None:
                parts.append(pack(flen, _crc_extend(_crc_extend(ts_crc, head), entries),
                                  timestamp))
            else:
                pb, pseq = prod
                if pseq + batch.count - 1 > MAX_PSEQ:
                    raise InvalidRecordError(
                        f"producers[{i}]: pseq {pseq} + {batch.count} messages passes 2^64-1; "
                        f"nothing of the batch was appended")
                ext = bytes((len(pb),)) + pb + _U64.pack(pseq)
                parts.append(pack(flen | PRODUCER_FLAG, _crc_extend(_crc_extend(
                    _crc_extend(ts_crc, ext), head), entries), timestamp))
                parts.append(ext)
                batch.producer, batch.pseq = pb.decode("utf-8"), pseq
            parts.append(head)
            parts.append(entries)
            batch.frame = head + entries
            records.append(batch)
            seq += batch.count
            continue
        try:
            key, body = item
        except (TypeError, ValueError):
            raise InvalidRecordError(f"batch item {i} must be a (key, body) pair or a "
                                     f"PublishBatch, not {item!r:.60}") from None
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
                f"record {i} of the batch has a {flen}-byte frame, over "
                f"max_record_bytes={max_record_bytes}; nothing of the batch was appended")
        frame = encode_deliver(seq, kb, body)
        if prod is None:
            parts.append(pack(flen, _crc_extend(ts_crc, frame), timestamp))
            parts.append(frame)
            records.append(Record(seq, timestamp, frame, key, body))
        else:
            pb, pseq = prod
            ext = bytes((len(pb),)) + pb + _U64.pack(pseq)
            parts.append(pack(flen | PRODUCER_FLAG,
                              _crc_extend(_crc_extend(ts_crc, ext), frame), timestamp))
            parts.append(ext)
            parts.append(frame)
            records.append(ProducerRecord(seq, timestamp, frame, key, body, pb.decode("utf-8"),
                                          pseq))
        seq += 1
    if seq > 1 << 64:
        raise InvalidRecordError("sequence would exceed 2^64-1")
    return parts, records


def _batch_record(item, i: int, seq: int, timestamp: int, max_record_bytes: int) -> BatchRecord:
    """The :class:`BatchRecord` for PublishBatch ``item`` (item ``i`` of an append) at ``seq``,
    its ``frame`` holding only the DELIVER-BATCH head (the caller appends the entries).
    Checks the count, the entries (walked unless the codec's ``offsets`` are given) and the
    size."""
    count, entries = item.count, item.entries
    if not isinstance(entries, bytes):
        raise InvalidRecordError(f"item {i}: PublishBatch entries must be bytes, not "
                                 f"{type(entries).__name__}")
    if not isinstance(count, int) or not 1 <= count <= len(entries) // MIN_ENTRY:
        raise InvalidRecordError(f"item {i}: PublishBatch count {count!r:.20} does not fit "
                                 f"its {len(entries)} bytes of entries")
    flen = DELIVER_HEAD_SIZE + len(entries)
    if flen > max_record_bytes:
        raise RecordTooLargeError(
            f"item {i} of the batch (a PublishBatch of {count} messages) has a {flen}-byte "
            f"frame, over max_record_bytes={max_record_bytes}; nothing of the batch was appended")
    offsets = item.offsets
    if not offsets:
        try:
            offsets = walk(entries, 0, len(entries), count)
        except BadEntries as e:
            raise InvalidRecordError(f"item {i}: PublishBatch entries: {e}") from None
    elif len(offsets) != count + 1 or offsets[-1] != len(entries):
        raise InvalidRecordError(f"item {i}: PublishBatch offsets do not match its count and "
                                 f"entries")
    return BatchRecord(seq, count, timestamp, deliver_batch_head(timestamp, seq, count),
                       offsets, DELIVER_HEAD_SIZE)


def record_span(buf, pos: int, end: int) -> int:
    """Bytes the record at ``pos`` takes (header, extension, frame) as its length field says,
    or, if ``buf[pos:end]`` is too short to tell, the bytes needed to tell."""
    if end - pos < HEADER_SIZE:
        return HEADER_SIZE
    length = _U32.unpack_from(buf, pos)[0]
    if length <= LENGTH_MASK:
        return HEADER_SIZE + length
    if end - pos <= PID_LEN_OFFSET:
        return PID_LEN_OFFSET + 1
    return HEADER_SIZE + EXT_FIXED + buf[pos + PID_LEN_OFFSET] + (length & LENGTH_MASK)


def parse_records(buf: bytes, pos: int, end: int, expect_seq: int, out: Optional[list],
                  max_records: int = 1 << 62, max_bytes: int = 1 << 62,
                  want_seq: int = 0, stop_ts: Optional[int] = None, n: int = 0, nbytes: int = 0,
                  last_ts: Optional[int] = None, chunks: bool = False):
    """Parse the records in ``buf[pos:end]`` whose first sequence must be ``expect_seq``.

    Whole, CRC-verified messages with ``sequence >= want_seq`` are appended to ``out`` as
    :class:`Record` (a batch record expands into one per message; messages below
    ``want_seq`` are verified and skipped). With ``chunks`` a batch record holding any message
    at or above ``want_seq`` is appended whole as one :class:`BatchRecord` instead (it may
    start below ``want_seq``). If ``out`` is None nothing is built (scan/recovery mode).

    Limits count messages (at or above ``want_seq``) and frame bytes (a DELIVER frame per
    message; with ``chunks``, a batch record's whole frame): stops once ``max_records``
    messages were emitted, and before the message (chunk) that would take them over
    ``max_records`` / ``max_bytes`` unless nothing was emitted yet (``n``/``nbytes`` count
    what earlier calls of the same read already emitted); at ``end``, at an incomplete
    record or at a bad one. A read that stops inside a batch record reports the position of
    that record (the caller resumes there with ``want_seq`` past what it got). If ``stop_ts``
    is given, stops (LIMIT) before the first record with ``timestamp >= stop_ts``.
    ``last_ts``: the timestamp of the record before ``pos`` if the caller read it (a
    timestamp below it is BAD).

    A plain record is valid when it is whole, its length is at least a minimal DELIVER frame,
    its CRC-32C matches, its frame is a DELIVER whose key and body lengths add up to the
    length, its sequence is the expected one and its timestamp is not below the previous
    record's; a producer extension, if flagged, must hold a 1..255-byte UTF-8 producer id and
    a non-zero pseq. A batch record's rules are in the module's docstring.

    Returns ``(status, pos, expect_seq, last_ts, info, n, nbytes)``: ``pos``/``expect_seq`` are
    those of the first record not consumed, ``last_ts`` the timestamp of the last consumed
    record (the one given if none was), ``info`` is the number of bytes needed for SHORT, the
    reason text for BAD; ``n``/``nbytes`` the totals emitted so far.
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
                return END, pos, expect_seq, last_ts, None, n, nbytes
            return SHORT, pos, expect_seq, last_ts, HEADER_SIZE, n, nbytes
        length, crc, ts = unpack_hdr(buf, pos)
        if length < MIN_FRAME:
            return BAD, pos, expect_seq, last_ts, f"record length {length} is below the minimum", \
                n, nbytes
        if length <= avail - HEADER_SIZE and length <= LENGTH_MASK:
            fstart = pos + HEADER_SIZE
            producer = None
        elif length <= LENGTH_MASK:
            return SHORT, pos, expect_seq, last_ts, HEADER_SIZE + length, n, nbytes
        else:
            ext = _extension(buf, pos, end, length)
            if len(ext) == 2:
                return ext[0], pos, expect_seq, last_ts, ext[1], n, nbytes
            fstart, length, producer, pseq = ext
        fend = fstart + length
        frame = buf[fstart:fend]
        if crc_extend(crc_value(buf[pos + TS_OFFSET:fstart]), frame) != crc:
            return BAD, pos, expect_seq, last_ts, "CRC-32C mismatch", n, nbytes
        sig, cid, seq, klen = unpack_head(frame, 0)
        if sig == SIGNATURE and cid == DELIVER_BATCH_ID:
            batch = _check_batch(frame, ts, expect_seq)
            if isinstance(batch, str):
                return BAD, pos, expect_seq, last_ts, batch, n, nbytes
            if producer is not None:
                producer = _batch_producer(producer, pseq, batch[1])
                if isinstance(producer, tuple):
                    return BAD, pos, expect_seq, last_ts, producer[0], n, nbytes
            if last_ts is not None and ts < last_ts:
                return BAD, pos, expect_seq, last_ts, "timestamp goes backwards", n, nbytes
            if stop_ts is not None and ts >= stop_ts:
                return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
            seq, count, offsets = batch
            if append is not None and seq + count > want_seq:
                skip = want_seq - seq if want_seq > seq else 0
                if chunks:
                    if n and (n + count - skip > max_records or nbytes + length > max_bytes):
                        return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
                    append(BatchRecord(seq, count, ts, frame, offsets, 0, producer,
                                       pseq if producer is not None else None))
                    n += count - skip
                    nbytes += length
                else:
                    j, n, nbytes = _fit(offsets, skip, n, nbytes, max_records, max_bytes)
                    if j > skip:
                        out.extend(expand(frame, offsets, seq, ts, skip, j, producer,
                                          pseq if producer is not None else None))
                    if j < count:       # stopped inside the batch: resume at its start
                        return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
                last_ts = ts
                pos = fend
                expect_seq = seq + count
                if n >= max_records or nbytes >= max_bytes:
                    return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
            else:
                last_ts = ts
                pos = fend
                expect_seq = seq + count
            continue
        if sig != SIGNATURE or cid != DELIVER_ID:
            return BAD, pos, expect_seq, last_ts, "not a DELIVER frame", n, nbytes
        if (MIN_FRAME + klen > length
                or MIN_FRAME + klen + unpack_u32(frame, KEY_OFFSET + klen)[0] != length):
            return BAD, pos, expect_seq, last_ts, "frame lengths do not add up", n, nbytes
        if producer is not None:
            if pseq == 0:
                return BAD, pos, expect_seq, last_ts, "producer sequence 0", n, nbytes
            try:
                producer = producer.decode("utf-8")
            except UnicodeDecodeError:
                return BAD, pos, expect_seq, last_ts, "producer id is not valid UTF-8", n, nbytes
        if seq != expect_seq:
            return BAD, pos, expect_seq, last_ts, \
                f"sequence {seq} where {expect_seq} was expected", n, nbytes
        if last_ts is not None and ts < last_ts:
            return BAD, pos, expect_seq, last_ts, "timestamp goes backwards", n, nbytes
        if stop_ts is not None and ts >= stop_ts:
            return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
        if seq >= want_seq and append is not None:
            if n and nbytes + length > max_bytes:
                return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
            append(Record(seq, ts, frame) if producer is None else
                   ProducerRecord(seq, ts, frame, None, None, producer, pseq))
            n += 1
            nbytes += length
            last_ts = ts
            pos = fend
            expect_seq = seq + 1
            if n >= max_records or nbytes >= max_bytes:
                return LIMIT, pos, expect_seq, last_ts, None, n, nbytes
        else:
            last_ts = ts
            pos = fend
            expect_seq = seq + 1


def _batch_producer(pid: bytes, pseq: int, count: int):
    """The producer id (str) of a batch record of ``count`` messages whose extension holds
    ``pid``/``pseq``, or the reason (a str in a 1-tuple) the extension is not valid."""
    if pseq == 0:
        return ("producer sequence 0",)
    if pseq + count - 1 > MAX_PSEQ:
        return (f"producer sequences {pseq}..{pseq + count - 1} pass 2^64-1",)
    try:
        return pid.decode("utf-8")
    except UnicodeDecodeError:
        return ("producer id is not valid UTF-8",)


def _check_batch(frame: bytes, ts: int, expect_seq: int):
    """``(sequence, count, entry offsets into frame)`` of a CRC-checked DELIVER-BATCH frame
    stored with header timestamp ``ts``, or the reason it is not a valid batch record."""
    length = len(frame)
    if length < DELIVER_HEAD_SIZE + MIN_ENTRY:
        return f"batch record length {length} is below the minimum"
    _, _, bts, seq, count = DELIVER_HEAD.unpack_from(frame, 0)
    if bts != ts:
        return "batch timestamp differs from the record's"
    if seq != expect_seq:
        return f"sequence {seq} where {expect_seq} was expected"
    if count > (length - DELIVER_HEAD_SIZE) // MIN_ENTRY:
        return f"batch count {count} does not fit its {length} bytes"
    try:
        return seq, count, walk(frame, DELIVER_HEAD_SIZE, length, count)
    except BadEntries as e:
        return f"batch entries: {e}"


def _fit(offsets: Sequence[int], i: int, n: int, nbytes: int, max_records: int,
         max_bytes: int) -> Tuple[int, int, int]:
    """How far from entry ``i`` a read may take a batch's messages (as DELIVER frames) within
    the limits, ``n``/``nbytes`` already emitted: ``(j, n, nbytes)`` after taking ``i..j-1``."""
    last = len(offsets) - 1
    j = i
    while j < last:
        flen = offsets[j + 1] - offsets[j] + ENTRY_IN_DELIVER
        if n and nbytes + flen > max_bytes:
            break
        n += 1
        nbytes += flen
        j += 1
        if n >= max_records or nbytes >= max_bytes:
            break
    return j, n, nbytes


def _extension(buf, pos: int, end: int, length: int):
    """The producer extension of the record at ``pos`` whose length field ``length`` has the
    flag: ``(frame start, frame length, producer id bytes, pseq)`` if the record is whole in
    ``buf[pos:end]``, else ``(SHORT, bytes needed)`` or ``(BAD, reason)``."""
    flen = length & LENGTH_MASK
    if flen < MIN_FRAME:
        return BAD, f"record length {flen} is below the minimum"
    if end - pos <= PID_LEN_OFFSET:
        return SHORT, PID_LEN_OFFSET + 1
    plen = buf[pos + PID_LEN_OFFSET]
    if plen == 0:
        return BAD, "empty producer id"
    fstart = pos + PID_LEN_OFFSET + 1 + plen + 8
    if fstart + flen > end:
        return SHORT, fstart + flen - pos
    return fstart, flen, buf[pos + PID_LEN_OFFSET + 1:fstart - 8], _U64.unpack_from(buf,
                                                                                  fstart - 8)[0]

