"""Arrow columns of a subscription's :class:`~zeps.clients.message.MessageBatch`, for the
Spark reader's broker path (:func:`zeps.spark.reader.read_partition` without ``path``).

A batch the broker sent as one DELIVER-BATCH frame is kept whole by the client, with the offsets
of its entries (``key length u8 | key | body length u32 BE | body``): its columns are built with
no Python work per message - numpy over the offsets gives each key's and body's range in the
frame, and one compaction (:mod:`zeps.journal.ranges`: a C loop of copies, or pyarrow's
``filter``) makes the ``key`` and ``body`` arrays; the sequences are consecutive and the
timestamp is the frame's. Keys are decoded as the client decodes them (UTF-8, undecodable bytes
replaced by U+FFFD): one validation of the whole column, and the client's decoding only for a
batch that fails it. A batch of messages received one by one (DELIVER, DELIVER-H: they may
carry headers) gets its columns from its messages, as before.

``tests/test_batch_columns.py`` checks both give the same columns for any batch.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import pyarrow as pa

from ..clients.message import MessageBatch
from ..journal.columnar import HEADERS_TYPE
from ..journal.ranges import _compact

__all__ = ["batch_columns", "message_columns"]

#: (sequences int64, timestamps ns int64 or None (unknown), key string, body binary,
#: headers HEADERS_TYPE or None (none))
BatchColumns = Tuple[np.ndarray, Optional[np.ndarray], pa.Array, pa.Array, Optional[pa.Array]]


def batch_columns(batch: MessageBatch) -> BatchColumns:
    """The columns of ``batch``: from its frame when it has one, else :func:`message_columns`."""
    frame, offsets = batch._frame, batch._offsets
    if frame is None or batch._messages is not None:
        return message_columns(batch.messages)
    n = len(offsets) - 1
    off = np.array(offsets, dtype=np.int64)
    entry = off[:-1]
    kstart = entry + 1
    kend = kstart + np.frombuffer(frame, dtype=np.uint8)[entry]
    data = pa.py_buffer(frame)
    key = _compact(data, kstart, kend).view(pa.string())
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
    definition :func:`batch_columns` is checked against)."""
    stamps = [m.timestamp for m in msgs]
    headers = [[{"key": k, "value": v} for k, v in m.headers] if m.headers else None
               for m in msgs]
    return (np.array([m.sequence for m in msgs], dtype=np.int64),
            None if None in stamps else np.array(stamps, dtype=np.int64),
            pa.array([m.key for m in msgs], type=pa.string()),
            pa.array([m.body for m in msgs], type=pa.binary()),
            None if all(h is None for h in headers) else pa.array(headers, type=HEADERS_TYPE))
