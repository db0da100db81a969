"""The journal's record format (as LevelDB's ``log_format``): the layout, its constants and
the record types.

A record in a ``.log`` file (see docs/architecture.md, "Journal contract")::

    length    u32 BE   bit 31: a producer extension follows the timestamp;
                       bit 30: a headers extension follows (after the producer extension);
                       bits 0-29: length of the headers extension (if any) + the frame
    crc       u32 BE   CRC-32C (Castagnoli, google_crc32c) of
                       timestamp || extensions || frame
    timestamp u64 BE   ns since the epoch, taken at append; never decreases within a stream
    extension          only if bit 31 of length is set (a record published with a producer id):
                       pid_len u8 (1..255) | pid (UTF-8) | pseq u64 BE (1..2^64-1)
                       (on a batch record: the producer sequence of its first message)
    headers            only if bit 30 of length is set (a message published with headers,
                       PUBLISH-H): the headers block exactly as on the wire
                       (:mod:`zeps.protocol.headers`: size u32 | count u16 | pairs); never on
                       a batch record
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
(:mod:`.producers`) can trust them. A DELIVER frame (with its headers) is at most 2^30-1
bytes (``JournalConfig.max_record_bytes``).

Why the headers extension is flagged the same way and sits outside the frame: a message
without headers is byte-for-byte the record it always was (and costs nothing more), and a
message with headers still stores the DELIVER frame a ZEPS/1 subscriber gets, so the broker
sends that stored frame, zero-copy, to every subscriber that did not ask for headers, and builds
a DELIVER-H from the frame and the stored block (one concatenation) for those that did. The
length covers extension and frame, so a record's span is found as before (header, producer
extension, length): the block's own ``size`` is read only once the CRC has verified it. Taking
bit 30 for the flag halves the largest frame to 2^30-1 bytes (1 GiB; the broker's records are
``--max-message`` + 512 bytes, 1 MiB by default): a journal written with a frame of 1 GiB or
more, which only a ``max_record_bytes`` above 1 GiB allowed, reads as damaged from that record.

Why a batch is one record holding its DELIVER-BATCH: appending a batch of N messages costs one
header, one CRC over the bytes and a few Python calls whatever N is (the entries of the
PUBLISH-BATCH are copied in verbatim), and replay can send a stored batch as it is. Index
entries point at record starts, so a lookup for a sequence inside a batch lands at (or before)
its record and the reader skips within it.

Writing records is :mod:`.encoder`; reading them, the one definition of a valid record, is
:mod:`.parser`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Optional, Sequence

from ...protocol.batch import DELIVER_HEAD_SIZE, deliver_frames, entry_body, entry_key, walk
from ...protocol.deliver import KEY_OFFSET, KEYLEN_OFFSET, MIN_FRAME
from ...protocol.headers import Headers, headers_of

HEADER = struct.Struct(">IIQ")        # length, crc, timestamp
HEADER_SIZE = HEADER.size             # 16
CRC_OFFSET = 4                        # offset of the crc in a record
TS_OFFSET = 8                         # offset of the timestamp: the CRC covers record[TS_OFFSET:]
PRODUCER_FLAG = 0x80000000            # length bit: a producer extension follows the timestamp
HEADERS_FLAG = 0x40000000             # length bit: a headers extension follows (then the frame)
LENGTH_MASK = 0x3FFFFFFF              # length bits: the headers extension's and frame's length
MAX_FRAME = LENGTH_MASK               # the largest frame (with its headers) a record can hold
PID_LEN_OFFSET = HEADER_SIZE          # the extension's pid_len, when the flag is set
EXT_FIXED = 9                         # extension bytes besides the pid: pid_len u8, pseq u64
MAX_PRODUCER_ID = 255
MAX_PSEQ = (1 << 64) - 1
MAX_SEQ = (1 << 64) - 1                # a message's sequence is u64
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
MAX_KEY = 255


class Record:
    """One journal record. ``frame`` is the DELIVER frame exactly as stored (and sent);
    ``key`` and ``body`` are decoded from it on first access (replay only needs ``frame``).
    ``producer``/``pseq``: the publisher id and its sequence the record was appended with
    (both None for a record without them; a record with them is a :class:`ProducerRecord`, so
    that building a plain record costs what it did before the extension existed).
    ``header_block``: the headers block as stored (None: no headers; a record with one is a
    :class:`HeadersRecord`); ``headers`` decodes it (empty for none)."""

    __slots__ = ("sequence", "timestamp", "frame", "_key", "_body")
    producer: Optional[str] = None
    pseq: Optional[int] = None
    header_block: Optional[bytes] = None

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
    def headers(self) -> Headers:
        """The message's headers: ``(name, value)`` pairs in order (empty: none)."""
        return headers_of(self.header_block)

    @property
    def last_sequence(self) -> int:
        """The sequence of the last message in this record (its own: one message)."""
        return self.sequence

    @property
    def size(self) -> int:
        """Bytes this record takes in the log (header, extensions, frame)."""
        n = HEADER_SIZE + len(self.frame)
        if self.producer is not None:
            n += EXT_FIXED + len(self.producer.encode("utf-8"))
        if self.header_block is not None:
            n += len(self.header_block)
        return n

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return (self.sequence == other.sequence and self.timestamp == other.timestamp
                and self.frame == other.frame and self.producer == other.producer
                and self.pseq == other.pseq and self.header_block == other.header_block)

    def __hash__(self):
        return hash((self.sequence, self.timestamp, self.frame))

    def __repr__(self):
        body = self.body
        shown = body[:32] + (b"..." if len(body) > 32 else b"")
        prod = "" if self.producer is None else f", producer={self.producer!r}, pseq={self.pseq}"
        if self.header_block is not None:
            prod += f", headers={tuple(self.headers)!r:.80}"
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


class HeadersRecord(Record):
    """A :class:`Record` with a headers extension (``header_block``), and a producer extension
    or not (``producer``/``pseq`` None)."""

    __slots__ = ("producer", "pseq", "header_block")

    def __init__(self, sequence: int, timestamp: int, frame: bytes, key: Optional[str],
                 body: Optional[bytes], producer: Optional[str], pseq: Optional[int],
                 header_block: bytes):
        Record.__init__(self, sequence, timestamp, frame, key, body)
        self.producer = producer
        self.pseq = pseq
        self.header_block = header_block


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
    header_block = None           # a batch record never has headers

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



def record_span(buf, pos: int, end: int) -> int:
    """Bytes the record at ``pos`` takes (header, extension, frame) as its length field says,
    or, if ``buf[pos:end]`` is too short to tell, the bytes needed to tell."""
    if end - pos < HEADER_SIZE:
        return HEADER_SIZE
    length = U32.unpack_from(buf, pos)[0]
    if length <= LENGTH_MASK:
        return HEADER_SIZE + length
    if length < PRODUCER_FLAG:              # headers only: the length covers them
        return HEADER_SIZE + (length & LENGTH_MASK)
    if end - pos <= PID_LEN_OFFSET:
        return PID_LEN_OFFSET + 1
    return HEADER_SIZE + EXT_FIXED + buf[pos + PID_LEN_OFFSET] + (length & LENGTH_MASK)
