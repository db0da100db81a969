"""Encoding records (as LevelDB's ``log_writer``): the bytes of an append, built all or
nothing before anything is written. The layout is in :mod:`.format`."""
from __future__ import annotations

from itertools import repeat
from typing import List, Optional, Sequence, Tuple

import google_crc32c

from ...protocol.batch import DELIVER_HEAD_SIZE, MIN_ENTRY, BadEntries, deliver_batch_head, walk
from ...protocol.commands import PublishBatch
from ...protocol.deliver import MIN_FRAME, encode_deliver
from ...protocol.headers import BadHeaders, block_end
from ..errors import InvalidRecordError, KeyTooLongError, RecordTooLargeError
from ..speedups import journalc
from .format import (HEADER, HEADERS_FLAG, MAX_KEY, MAX_PRODUCER_ID, MAX_PSEQ, PRODUCER_FLAG, U64,
                     BatchRecord, HeadersRecord, ProducerRecord, Record)

_crc_value = google_crc32c.value

#: The largest body a batch's plain record is one :func:`encode_plain` call for: that call
#: makes the record (header and frame) as one string, the frame copied once more, and the
#: batch's join copies it again; for a large body that copy costs more memory than the call
#: saves time (a publisher of 1,000 KiB messages flat out took the broker 2 MiB past its bound,
#: tests/test_isolation.py).
PLAIN_CALL_MAX = 4096
_crc_extend = google_crc32c.extend


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
    :class:`Record`), a ``(key, body, header_block)`` triple (``header_block``: None or a
    headers block, :mod:`zeps.protocol.headers`, stored in the record's headers extension: a
    :class:`HeadersRecord`; the block and the frame together count against
    ``max_record_bytes``) or a :class:`~zeps.protocol.commands.PublishBatch` (one
    :class:`BatchRecord` holding its entries verbatim, sequences ``seq .. seq + count - 1``).
    ``producers``: None or a list parallel to ``items`` of None or ``(producer id, pseq)``
    (checked by :func:`check_producers`; for a PublishBatch the pseq is that of its first
    message, and ``pseq + count - 1`` must not pass 2^64-1); a record with one gets the
    producer extension (header, extension, frame). Raises before anything is written if any
    item is invalid (all or nothing). Frames are built by
    :func:`zeps.protocol.deliver.encode_deliver` and :func:`zeps.protocol.batch.deliver_batch_head`.

    A plain ``(key, body)`` pair without a producer and with a body of at most
    :data:`PLAIN_CALL_MAX` bytes (most of a broker's round at a low rate: a PUBLISH or two) is
    one call of :func:`encode_plain` (C where built; the same bytes and record as the loop's
    general code gives the triple ``(key, body, None)``; issue 20)."""
    if (producers is None and len(items) == 1 and type(items[0]) is tuple and len(items[0]) == 2
            and type(items[0][1]) is bytes and len(items[0][1]) <= PLAIN_CALL_MAX):
        one = encode_plain(items[0][0], items[0][1], first_seq, timestamp, max_record_bytes)
        if one is not None:                      # one plain record: not even the loop's setup
            return [one[0]], [one[1]]
    ts_bytes = U64.pack(timestamp)
    ts_crc = _crc_value(ts_bytes)
    pack = HEADER.pack
    prods = repeat(None) if producers is None else check_producers(producers, len(items))
    parts: List[bytes] = []
    records: List = []
    seq = first_seq
    for i, (item, prod) in enumerate(zip(items, prods)):
        if (prod is None and type(item) is tuple and len(item) == 2
                and type(item[1]) is bytes and len(item[1]) <= PLAIN_CALL_MAX):
            one = encode_plain(item[0], item[1], seq, timestamp, max_record_bytes)
            if one is not None:
                parts.append(one[0])
                records.append(one[1])
                seq += 1
                continue                         # else the general code encodes or refuses it
        if seq >= 1 << 64:
            raise InvalidRecordError("sequence would exceed 2^64-1")
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
                ext = bytes((len(pb),)) + pb + U64.pack(pseq)
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
        block = None
        try:
            if len(item) == 3:
                key, body, block = item
            else:
                key, body = item
        except (TypeError, ValueError):
            raise InvalidRecordError(f"batch item {i} must be a (key, body) pair, a (key, body, "
                                     f"header_block) triple or a PublishBatch, not "
                                     f"{item!r:.60}") from None
        if block is not None:
            _check_block(block, i)
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
        if flen > max_record_bytes or (block is not None and flen + len(block) > max_record_bytes):
            raise RecordTooLargeError(
                f"record {i} of the batch has a {flen}-byte frame"
                f"{'' if block is None else f' and {len(block)} bytes of headers'}, over "
                f"max_record_bytes={max_record_bytes}; nothing of the batch was appended")
        frame = encode_deliver(seq, kb, body)
        if block is not None:
            ext = b"" if prod is None else bytes((len(prod[0]),)) + prod[0] + U64.pack(prod[1])
            flags = HEADERS_FLAG if prod is None else HEADERS_FLAG | PRODUCER_FLAG
            parts.append(pack((flen + len(block)) | flags, _crc_extend(_crc_extend(
                _crc_extend(ts_crc, ext), block), frame), timestamp))
            if ext:
                parts.append(ext)
            parts.append(block)
            parts.append(frame)
            records.append(HeadersRecord(seq, timestamp, frame, key, body,
                                         None if prod is None else prod[0].decode("utf-8"),
                                         None if prod is None else prod[1], block))
        elif prod is None:
            parts.append(pack(flen, _crc_extend(ts_crc, frame), timestamp))
            parts.append(frame)
            records.append(Record(seq, timestamp, frame, key, body))
        else:
            pb, pseq = prod
            ext = bytes((len(pb),)) + pb + U64.pack(pseq)
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


def encode_plain(key, body, seq: int, timestamp: int, max_record_bytes: int
                 ) -> Optional[Tuple[bytes, Record]]:
    """``(record bytes, Record)`` of one plain message (a str ``key``, a bytes ``body``) at
    ``seq``, as :func:`encode_batch` encodes the item ``(key, body)``; None for what that
    function encodes otherwise or refuses (another type, a key or frame over its limit, a
    sequence past 2^64-1). :meth:`Journal.append <zeps.journal.Journal.append>` writes it."""
    if type(key) is not str or type(body) is not bytes or seq >= 1 << 64:
        return None
    kb = key.encode("utf-8")
    if len(kb) > MAX_KEY or MIN_FRAME + len(kb) + len(body) > max_record_bytes:
        return None
    record, frame = _plain_record(seq, timestamp, kb, body)
    return record, Record(seq, timestamp, frame, key, body)


def plain_record_py(seq: int, timestamp: int, kb: bytes, body: bytes) -> Tuple[bytes, bytes]:
    """``(record, frame)``: the bytes of one plain record (header, then its DELIVER frame) and
    its DELIVER frame, from a sequence, a timestamp, a UTF-8 key of at most 255 bytes and a
    body. The definition of the C loop ``plain_record`` (:mod:`zeps.journal.speedups`), and what
    runs without it; ``tests/test_journal_plain.py`` checks the two against each other."""
    frame = encode_deliver(seq, kb, body)
    return HEADER.pack(len(frame), _crc_extend(_crc_value(U64.pack(timestamp)), frame),
                       timestamp) + frame, frame


_plain_record = plain_record_py if journalc is None else journalc.plain_record


def _check_block(block, i: int) -> None:
    """A headers block must be bytes and valid (the one parser, :mod:`zeps.protocol.headers`):
    a record stores only what a reader will accept."""
    if not isinstance(block, bytes):
        raise InvalidRecordError(f"item {i}: header_block must be bytes, not "
                                 f"{type(block).__name__}")
    try:
        if block_end(block, 0, len(block)) != len(block):
            raise BadHeaders("bytes after the headers block")
    except BadHeaders as e:
        raise InvalidRecordError(f"item {i}: headers: {e}; nothing of the batch was "
                                 f"appended") from None


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
