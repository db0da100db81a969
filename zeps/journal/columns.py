"""The columns the columnar reader (:mod:`.columnar`) returns for a run of records."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

#: The ``headers`` column's type: a message's headers in order, as Spark's Kafka source has them.
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass
class Columns:
    """Parallel columns for ``len(self)`` consecutive records."""
    sequence: np.ndarray        # int64
    timestamp_ns: np.ndarray    # int64
    key: pa.Array               # pa.string()
    body: pa.Array              # pa.binary()
    producer: pa.Array          # pa.string(), null for a record without a producer extension
    pseq: pa.Array              # pa.uint64(), null likewise
    headers: pa.Array = None    # HEADERS_TYPE, null for a message without headers

    def __post_init__(self):
        if self.headers is None:
            self.headers = pa.nulls(len(self.sequence), HEADERS_TYPE)

    def __len__(self) -> int:
        return len(self.sequence)
