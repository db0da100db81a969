"""Parsing records (as LevelDB's ``log_reader``): the one definition of a valid record.

Parsing never trusts a record it has not CRC-checked: :func:`parse_records` yields only whole,
verified records, and reports where and why it stopped in a :class:`ScanResult`. The columnar
reader (:mod:`zeps.journal.columnar`) asks it why the first record it rejects is bad. The
layout is in :mod:`.format`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import google_crc32c

from ...protocol.batch import (DELIVER_BATCH_ID, DELIVER_HEAD, DELIVER_HEAD_SIZE, MIN_ENTRY,
                              BadEntries, walk)
from ...protocol.deliver import DELIVER_ID, HEAD, KEY_OFFSET, MIN_FRAME, SIGNATURE
from ...protocol.headers import BadHeaders, block_end
from .format import (ENTRY_IN_DELIVER, HEADER, HEADER_SIZE, HEADERS_FLAG, LENGTH_MASK, MAX_PSEQ,
                     MAX_SEQ, PID_LEN_OFFSET, PRODUCER_FLAG, TS_OFFSET, U32, U64, BatchRecord,
                     HeadersRecord, ProducerRecord, Record, expand)

_crc_value = google_crc32c.value
_crc_extend = google_crc32c.extend

# parse_records() stop reasons
END = 0      # consumed exactly up to ``end``
LIMIT = 1    # max_records / max_bytes reached (``pos`` is the next record)
SHORT = 2    # the record at ``pos`` is not complete within ``end`` (``need`` bytes needed)
BAD = 3      # the bytes at ``pos`` are not a valid record (``reason`` says why)

# parse_records() gaps modes (a compacted segment)
GAPS = 1              # a record's sequence may be above the expected one
GAPS_AFTER_FIRST = 2  # the same, except for the first record, which must be the expected one


class ScanResult:
    """Where a scan stopped: ``status`` (END/LIMIT/SHORT/BAD), ``pos`` and ``seq`` of the first
    record not consumed, ``last_ts`` of the last consumed one (or of the record before the scan,
    or None), ``info`` (bytes needed for SHORT, reason for BAD); ``n``/``nbytes``: messages and
    frame bytes the read emitted in all (limits' counts)."""

    __slots__ = ("status", "pos", "seq", "last_ts", "info", "n", "nbytes")

    def __init__(self, status, pos, seq, last_ts, info, n=0, nbytes=0):
        self.status, self.pos, self.seq, self.last_ts, self.info = status, pos, seq, last_ts, info
        self.n, self.nbytes = n, nbytes

    def describe(self) -> str:
        if self.status == SHORT:
            return "incomplete record"
        if self.status == BAD:
            return str(self.info)
        return "end"

    def __repr__(self):
        return (f"ScanResult(status={self.status}, pos={self.pos}, seq={self.seq}, "
                f"last_ts={self.last_ts}, info={self.info!r}, n={self.n}, nbytes={self.nbytes})")


def parse_records(buf: bytes, pos: int, end: int, expect_seq: int, out: Optional[list],
                  max_records: int = 1 << 62, max_bytes: int = 1 << 62,
                  want_seq: int = 0, stop_ts: Optional[int] = None, n: int = 0, nbytes: int = 0,
                  last_ts: Optional[int] = None, chunks: bool = False,
                  gaps: int = 0) -> ScanResult:
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
    a non-zero pseq. A batch record's rules are in :mod:`.format`'s docstring.

    ``gaps`` (a compacted segment, :mod:`zeps.journal.compaction`, has gaps between its
    sequences): 0, each record's sequence is the expected one; :data:`GAPS`, a record's
    sequence may also be above it (sequences still increase); :data:`GAPS_AFTER_FIRST`, the
    same except for the record at ``pos``, which must be ``expect_seq`` exactly (``pos`` comes
    from an index entry, which names the record it points at).

    Returns a :class:`ScanResult`: ``pos``/``seq`` are those of the first record not consumed,
    ``last_ts`` the timestamp of the last consumed record (the one given if none was), ``info``
    is the number of bytes needed for SHORT, the reason text for BAD; ``n``/``nbytes`` the
    totals emitted so far.
    """
    unpack_hdr = HEADER.unpack_from
    unpack_head = HEAD.unpack_from
    unpack_u32 = U32.unpack_from
    crc_value = _crc_value
    crc_extend = _crc_extend
    append = out.append if out is not None else None
    start = pos
    while True:
        avail = end - pos
        if avail < HEADER_SIZE:
            if avail == 0:
                return ScanResult(END, pos, expect_seq, last_ts, None, n, nbytes)
            return ScanResult(SHORT, pos, expect_seq, last_ts, HEADER_SIZE, n, nbytes)
        length, crc, ts = unpack_hdr(buf, pos)
        if length < MIN_FRAME:
            return ScanResult(BAD, pos, expect_seq, last_ts,
                              f"record length {length} is below the minimum", n, nbytes)
        block = headed = None
        if length <= avail - HEADER_SIZE and length <= LENGTH_MASK:
            fstart = pos + HEADER_SIZE
            producer = None
        elif length <= LENGTH_MASK:
            return ScanResult(SHORT, pos, expect_seq, last_ts, HEADER_SIZE + length, n, nbytes)
        else:
            ext = _extension(buf, pos, end, length)
            if len(ext) == 2:
                return ScanResult(ext[0], pos, expect_seq, last_ts, ext[1], n, nbytes)
            fstart, length, producer, pseq, headed = ext
        fend = fstart + length
        frame = buf[fstart:fend]
        if crc_extend(crc_value(buf[pos + TS_OFFSET:fstart]), frame) != crc:
            return ScanResult(BAD, pos, expect_seq, last_ts, "CRC-32C mismatch", n, nbytes)
        if headed:                      # a headers extension, then the frame (both CRC-checked)
            frame = _split_headers(frame)
            if type(frame) is str:
                return ScanResult(BAD, pos, expect_seq, last_ts, frame, n, nbytes)
            block, frame = frame
            length = len(frame)
        sig, cid, seq, klen = unpack_head(frame, 0)
        if sig == SIGNATURE and cid == DELIVER_BATCH_ID:
            if block is not None:
                return ScanResult(BAD, pos, expect_seq, last_ts, "headers on a batch record",
                                  n, nbytes)
            batch = _check_batch(frame, ts, expect_seq,
                                 gaps == GAPS or (gaps and pos != start))
            if isinstance(batch, str):
                return ScanResult(BAD, pos, expect_seq, last_ts, batch, n, nbytes)
            if producer is not None:
                producer = _batch_producer(producer, pseq, batch[1])
                if isinstance(producer, tuple):
                    return ScanResult(BAD, pos, expect_seq, last_ts, producer[0], n, nbytes)
            if last_ts is not None and ts < last_ts:
                return ScanResult(BAD, pos, expect_seq, last_ts, "timestamp goes backwards", n, nbytes)
            if stop_ts is not None and ts >= stop_ts:
                return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
            seq, count, offsets = batch
            if append is not None and seq + count > want_seq:
                skip = want_seq - seq if want_seq > seq else 0
                if chunks:
                    if n and (n + count - skip > max_records or nbytes + length > max_bytes):
                        return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
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
                        return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
                last_ts = ts
                pos = fend
                expect_seq = seq + count
                if n >= max_records or nbytes >= max_bytes:
                    return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
            else:
                last_ts = ts
                pos = fend
                expect_seq = seq + count
            continue
        if sig != SIGNATURE or cid != DELIVER_ID:
            return ScanResult(BAD, pos, expect_seq, last_ts, "not a DELIVER frame", n, nbytes)
        if (MIN_FRAME + klen > length
                or MIN_FRAME + klen + unpack_u32(frame, KEY_OFFSET + klen)[0] != length):
            return ScanResult(BAD, pos, expect_seq, last_ts, "frame lengths do not add up", n, nbytes)
        if producer is not None:
            if pseq == 0:
                return ScanResult(BAD, pos, expect_seq, last_ts, "producer sequence 0", n, nbytes)
            try:
                producer = producer.decode("utf-8")
            except UnicodeDecodeError:
                return ScanResult(BAD, pos, expect_seq, last_ts, "producer id is not valid UTF-8", n, nbytes)
        if seq != expect_seq and (not gaps or seq < expect_seq
                                  or (gaps == GAPS_AFTER_FIRST and pos == start)):
            return ScanResult(BAD, pos, expect_seq, last_ts,
                              f"sequence {seq} where {expect_seq} was expected", n, nbytes)
        if last_ts is not None and ts < last_ts:
            return ScanResult(BAD, pos, expect_seq, last_ts, "timestamp goes backwards", n, nbytes)
        if stop_ts is not None and ts >= stop_ts:
            return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
        if seq >= want_seq and append is not None:
            if block is not None:       # the headers count as frame bytes (DELIVER-H's)
                length += len(block)
            if n and nbytes + length > max_bytes:
                return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
            if block is not None:
                append(HeadersRecord(seq, ts, frame, None, None, producer,
                                     None if producer is None else pseq, block))
            elif producer is None:
                append(Record(seq, ts, frame))
            else:
                append(ProducerRecord(seq, ts, frame, None, None, producer, pseq))
            n += 1
            nbytes += length
            last_ts = ts
            pos = fend
            expect_seq = seq + 1
            if n >= max_records or nbytes >= max_bytes:
                return ScanResult(LIMIT, pos, expect_seq, last_ts, None, n, nbytes)
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


def _check_batch(frame: bytes, ts: int, expect_seq: int, gap: bool = False):
    """``(sequence, count, entry offsets into frame)`` of a CRC-checked DELIVER-BATCH frame
    stored with header timestamp ``ts``, or the reason it is not a valid batch record
    (``gap``: its sequence may be above ``expect_seq``)."""
    length = len(frame)
    if length < DELIVER_HEAD_SIZE + MIN_ENTRY:
        return f"batch record length {length} is below the minimum"
    _, _, bts, seq, count = DELIVER_HEAD.unpack_from(frame, 0)
    if bts != ts:
        return "batch timestamp differs from the record's"
    if seq != expect_seq and not (gap and seq > expect_seq):
        return f"sequence {seq} where {expect_seq} was expected"
    if count > (length - DELIVER_HEAD_SIZE) // MIN_ENTRY:
        return f"batch count {count} does not fit its {length} bytes"
    if seq + count - 1 > MAX_SEQ:
        return f"batch sequences {seq}..{seq + count - 1} pass 2^64-1"
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


def _split_headers(data: bytes):
    """``(headers block, DELIVER frame)`` of the CRC-checked bytes after a record's producer
    extension when it has a headers extension, or the reason they are not valid."""
    try:
        hend = block_end(data, 0, len(data))
    except BadHeaders as e:
        return f"headers: {e}"
    if len(data) - hend < MIN_FRAME:
        return f"record length {len(data) - hend} is below the minimum"
    return data[:hend], data[hend:]


def _extension(buf, pos: int, end: int, length: int):
    """The extensions of the record at ``pos`` whose length field ``length`` has a flag:
    ``(start, length, producer id bytes, pseq)`` if the record is whole in ``buf[pos:end]``,
    else ``(SHORT, bytes needed)`` or ``(BAD, reason)``. Start and length are those of the
    frame, or, with a headers extension (``headed``, the fifth), of the headers block and the
    frame together (the caller splits them once the CRC is checked: :func:`_split_headers`).
    Without a producer extension the id is None."""
    flen = length & LENGTH_MASK
    if flen < MIN_FRAME:
        return BAD, f"record length {flen} is below the minimum"
    headed = bool(length & HEADERS_FLAG)
    if length < PRODUCER_FLAG:                     # headers only
        fstart = pos + HEADER_SIZE
        if fstart + flen > end:
            return SHORT, HEADER_SIZE + flen
        return fstart, flen, None, None, headed
    if end - pos <= PID_LEN_OFFSET:
        return SHORT, PID_LEN_OFFSET + 1
    plen = buf[pos + PID_LEN_OFFSET]
    if plen == 0:
        return BAD, "empty producer id"
    fstart = pos + PID_LEN_OFFSET + 1 + plen + 8
    if fstart + flen > end:
        return SHORT, fstart + flen - pos
    return (fstart, flen, buf[pos + PID_LEN_OFFSET + 1:fstart - 8],
            U64.unpack_from(buf, fstart - 8)[0], headed)
