"""Arrow columns of a subscription's :class:`~zeps.clients.message.MessageBatch`
(:meth:`MessageBatch.to_arrow <zeps.clients.message.MessageBatch.to_arrow>`, and the Spark
reader's broker path). Needs numpy and pyarrow (the ``spark`` extra); ``zeps.clients`` imports
this module only when asked for columns.

A batch the broker sent as one DELIVER-BATCH frame is kept whole by the client, with the offsets
of its entries (``key length u8 | key | body length u32 BE | body``): its columns are built with
no Python work per message - numpy over the offsets gives each key's and body's range in the
frame, and one compaction (:mod:`zeps.journal.ranges`: a C loop of copies, or pyarrow's
``filter``) makes the ``key`` and ``body`` arrays; the sequences are consecutive and the
timestamp is the frame's. Keys are decoded as the client decodes them (UTF-8, undecodable bytes
replaced by U+FFFD): one validation of the whole column, and the client's decoding only for a
batch that fails it. A batch of messages received one by one (DELIVER, DELIVER-H: they may
carry headers) gets its columns from its messages (:func:`message_columns`, the definition).

``tests/test_batch_columns.py`` checks both give the same columns for any batch.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import pyarrow as pa

from ..journal.columns import HEADERS_TYPE
from ..journal.ranges import _compact
from .message import MessageBatch

__all__ = ["ARROW_SCHEMA", "batch_columns", "message_columns", "record_batch"]

#: (sequences int64, timestamps ns int64 or None (unknown), key string, body binary,
#: headers HEADERS_TYPE or None (none))
BatchColumns = Tuple[np.ndarray, Optional[np.ndarray], pa.Array, pa.Array, Optional[pa.Array]]

#: The schema of :meth:`MessageBatch.to_arrow`, the same for every batch (so that a program
#: can concatenate them): ``timestamp`` is null where unknown, ``headers`` null for a message
#: without headers (a DELIVER-BATCH never carries any).
ARROW_SCHEMA = pa.schema([("sequence", pa.int64(), False),
                          ("timestamp", pa.timestamp("ns", tz="UTC")),
                          ("key", pa.string(), False),
                          ("body", pa.binary(), False),
                          ("headers", HEADERS_TYPE)])

_INT64_MAX = 2**63 - 1
_INT64 = pa.int64()
_TIMESTAMP = ARROW_SCHEMA.field("timestamp").type


def batch_columns(batch: MessageBatch) -> BatchColumns:
    """The columns of ``batch``: from its frame when it has one, else :func:`message_columns`.
    Raises ValueError for sequences or a timestamp beyond int64 (Arrow's and Spark's
    columns)."""
    frame, offsets = batch._frame, batch._offsets
    if frame is None or batch._messages is not None:
        return message_columns(batch.messages)
    n = len(offsets) - 1
    if batch._first + n - 1 > _INT64_MAX or (batch._ts or 0) > _INT64_MAX:
        raise ValueError("sequence or timestamp beyond int64 (Arrow's columns)")
    off = np.array(offsets, dtype=np.int64)
    entry = off[:-1]
    kstart = entry + 1
    kend = kstart + np.frombuffer(frame, dtype=np.uint8)[entry]
    data = pa.py_buffer(frame)
    key = _compact(data, kstart, kend, pa.string())
    try:
        key.validate(full=True)
    except pa.ArrowInvalid:              # not UTF-8 (never from a ZEPS broker): as the client
        key = pa.array(batch.keys, type=pa.string())
    body = _compact(data, kend + 4, off[1:])
    seq = np.arange(batch._first, batch._first + n, dtype=np.int64)
    ts = None if batch._ts is None else np.full(n, batch._ts, dtype=np.int64)
    return seq, ts, key, body, None


def message_columns(msgs) -> BatchColumns:
    """The columns of :class:`~zeps.clients.message.Message` objects, one by one (the
    definition :func:`batch_columns` is checked against). Raises ValueError as it does."""
    stamps = [m.timestamp for m in msgs]
    if any(not 0 <= m.sequence <= _INT64_MAX for m in msgs) or \
            any(t is not None and t > _INT64_MAX for t in stamps):
        raise ValueError("sequence or timestamp beyond int64 (Arrow's columns)")
    headers = [[{"key": k, "value": v} for k, v in m.headers] if m.headers else None
               for m in msgs]
    return (np.array([m.sequence for m in msgs], dtype=np.int64),
            None if None in stamps else np.array(stamps, dtype=np.int64),
            pa.array([m.key for m in msgs], type=pa.string()),
            pa.array([m.body for m in msgs], type=pa.binary()),
            None if all(h is None for h in headers) else pa.array(headers, type=HEADERS_TYPE))


def record_batch(batch: MessageBatch) -> pa.RecordBatch:
    """``batch`` as a ``pyarrow.RecordBatch`` of :data:`ARROW_SCHEMA`; from a DELIVER-BATCH
    frame with no Python work per message (:func:`batch_columns`)."""
    seq, ts, key, body, headers = batch_columns(batch)
    n = len(seq)
    return pa.RecordBatch.from_arrays(
        [pa.Array.from_buffers(_INT64, n, [None, pa.py_buffer(seq)]),
         pa.nulls(n, _TIMESTAMP) if ts is None else
         pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(ts)]),
         key, body, pa.nulls(n, HEADERS_TYPE) if headers is None else headers],
        schema=ARROW_SCHEMA)
