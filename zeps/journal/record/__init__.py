"""Journal records, in three parts as LevelDB's log is:

* :mod:`.format` (``log_format``): the layout of a record in a ``.log`` file, its constants,
  the record types (:class:`Record`, :class:`ProducerRecord`, :class:`HeadersRecord`,
  :class:`BatchRecord`) and
  :func:`record_span`;
* :mod:`.encoder` (``log_writer``): :func:`encode_batch`, the bytes of an append, all or nothing;
* :mod:`.parser` (``log_reader``): :func:`parse_records`, the one definition of a valid record,
  which says where and why it stopped in a :class:`ScanResult`.

Everything is importable from here (``zeps.journal.record``) as it was when this was one module.
"""
from .encoder import check_producers, encode_batch, encode_plain
from .format import (CRC_OFFSET, ENTRY_IN_DELIVER, EXT_FIXED, HEADER, HEADER_SIZE, HEADERS_FLAG,
                     LENGTH_MASK, MAX_FRAME, MAX_KEY, MAX_PRODUCER_ID, MAX_PSEQ, PID_LEN_OFFSET,
                     PRODUCER_FLAG, TS_OFFSET, BatchRecord, HeadersRecord, ProducerRecord, Record,
                     StreamStats, expand, record_span)
from .parser import BAD, END, GAPS, GAPS_AFTER_FIRST, LIMIT, SHORT, ScanResult, parse_records

__all__ = [
    "BAD", "CRC_OFFSET", "END", "ENTRY_IN_DELIVER", "EXT_FIXED", "GAPS", "GAPS_AFTER_FIRST",
    "HEADER", "HEADER_SIZE",
    "HEADERS_FLAG", "HeadersRecord",
    "LENGTH_MASK", "LIMIT", "MAX_FRAME", "MAX_KEY", "MAX_PRODUCER_ID", "MAX_PSEQ",
    "PID_LEN_OFFSET", "PRODUCER_FLAG", "SHORT", "TS_OFFSET",
    "BatchRecord", "ProducerRecord", "Record", "ScanResult", "StreamStats",
    "check_producers", "encode_batch", "encode_plain", "expand", "parse_records", "record_span",
]
