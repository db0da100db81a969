"""Reading for the ``zeps`` data source: where the data is (a journal directory or a broker),
the partitions, the Arrow batches, and the batch and streaming readers Spark drives.

Everything Spark pickles here (readers, partitions, the read plan) is defined in an importable
module: Spark workers import ``zeps.spark.reader`` instead of receiving code from ``__main__``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

from pyspark.sql.datasource import (DataSourceReader, DataSourceStreamReader, EqualTo,
                                    GreaterThan, GreaterThanOrEqual, In, InputPartition, LessThan,
                                    LessThanOrEqual, StringStartsWith)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows, SupportsTriggerAvailableNow)
from pyspark.sql import types as T

from .options import ZepsOptions, ZepsSparkError, parse_options

__all__ = ["ZepsBatchReader", "ZepsFilteringBatchReader", "ZepsStreamReader", "ZepsPartition",
           "read_partition"]

DEFAULT_BROKER_RECORDS_PER_PARTITION = 200_000
ARROW_BATCH_ROWS = 32768


# ============================================================================ where the data is

class _Source:
    """Metadata of the stream being read, on the driver: a journal directory or a broker."""

    def __init__(self, o: ZepsOptions):
        self.o = o

    # -- construction with the checks that give one clear error --------------------------

    @staticmethod
    def open(o: ZepsOptions) -> "_Source":
        return _PathSource(o) if o.path else _BrokerSource(o)

    def first_last(self) -> Tuple[int, int]:
        raise NotImplementedError

    def seq_at(self, ts_ns: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _PathSource(_Source):
    def __init__(self, o: ZepsOptions):
        super().__init__(o)
        from ..journal import JournalError, JournalReader, list_streams, stream_dir_name
        root = o.path
        if root.startswith("file://"):
            root = root[len("file://"):]
        if not os.path.isdir(root):
            raise ZepsSparkError(f"option 'path': no journal data directory at {o.path!r} "
                                 "(it must be readable on the driver and on every executor)")
        self.root = root
        self.stream_dir = os.path.join(root, stream_dir_name(o.stream))
        if not os.path.isdir(self.stream_dir):
            try:
                present = list_streams(root)
            except JournalError:
                present = []
            raise ZepsSparkError(
                f"option 'stream': no stream {o.stream!r} in the journal directory {o.path!r} "
                f"(streams there: {', '.join(present) if present else 'none'})")
        try:
            self.reader = JournalReader(self.stream_dir)
        except JournalError as e:
            raise ZepsSparkError(f"option 'path': cannot read stream {o.stream!r}: {e}") from None

    def first_last(self) -> Tuple[int, int]:
        st = self.reader.info()
        return st.first_seq, st.last_seq

    def seq_at(self, ts_ns: int) -> int:
        return self.reader.seq_at(ts_ns)

    def close(self) -> None:
        try:
            self.reader.close()
        except Exception:
            pass


class _BrokerSource(_Source):
    def __init__(self, o: ZepsOptions):
        super().__init__(o)
        from ..clients import ZepsError, ZepsTimeout, list_streams
        try:
            present = list_streams(o.endpoint, timeout=o.timeout)
        except ZepsTimeout:
            raise ZepsSparkError(f"option 'endpoint': no ZEPS broker answered at {o.endpoint} "
                                 f"within {o.timeout:g}s (is it running and reachable from the "
                                 "driver and the executors?)") from None
        except (ZepsError, OSError) as e:
            raise ZepsSparkError(f"option 'endpoint': cannot talk to the broker at "
                                 f"{o.endpoint}: {e}") from None
        if o.stream not in present:
            raise ZepsSparkError(
                f"option 'stream': the broker at {o.endpoint} has no stream {o.stream!r} "
                f"(streams there: {', '.join(present) if present else 'none'})")
        self._client = None

    def client(self):
        if self._client is None:
            from ..clients import Client
            self._client = Client(self.o.endpoint, self.o.stream, timeout=self.o.timeout,
                                  curve=self.o.curve)
        return self._client

    def first_last(self) -> Tuple[int, int]:
        info = self.client().info()
        return info.first, info.last

    def seq_at(self, ts_ns: int) -> int:
        return self.client().seq_at(int(ts_ns))

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close(timeout=1.0)
            except Exception:
                pass
            self._client = None


# ============================================================================ partitions

@dataclass
class _KeyFilter:
    op: str          # "eq" | "prefix" | "in"
    value: object


class ZepsPartition(InputPartition):
    """Records ``first..last`` (inclusive) of one stream. From a journal: read from the stream
    directory ``stream_dir`` (the range lies in one segment). From a broker: read with the
    SDK."""

    def __init__(self, first: int, last: int, stream_dir: Optional[str] = None):
        super().__init__((first, last))
        self.first = first
        self.last = last
        self.stream_dir = stream_dir


def _split(first: int, last: int, per: int) -> List[Tuple[int, int]]:
    out = []
    s = first
    while s <= last:
        e = min(last, s + per - 1)
        out.append((s, e))
        s = e + 1
    return out


def plan_path_partitions(reader, first: int, last: int, per: int) -> List[ZepsPartition]:
    """Partitions from a JournalReader's segments (each holds the sequences from its first to
    the next one's): one per segment, each split further into ~``per`` records. A task finds
    its start in the segment's sparse index."""
    if last < first:
        return []
    firsts = reader.segment_seqs()
    out: List[ZepsPartition] = []
    for i, seg_first in enumerate(firsts):
        seg_last = firsts[i + 1] - 1 if i + 1 < len(firsts) else last
        lo, hi = max(first, seg_first), min(last, seg_last)
        out += [ZepsPartition(a, b, reader.stream_dir) for a, b in _split(lo, hi, per)]
    return out


def plan_broker_partitions(first: int, last: int, per: int) -> List[ZepsPartition]:
    return [ZepsPartition(a, b) for a, b in _split(first, last, per)] if last >= first else []


# ============================================================================ reading

class _ReadPlan:
    """What a partition reader needs (picklable, built on the driver)."""

    def __init__(self, o: ZepsOptions, schema: T.StructType):
        self.o = o
        self.schema = schema
        self.key_filters: List[_KeyFilter] = []

    def arrow_schema(self):
        from pyspark.sql.pandas.types import to_arrow_schema
        return to_arrow_schema(self.schema, timezone="UTC")   # what Spark's worker checks against


def _const_string(value: str, n: int):
    import numpy as np
    import pyarrow as pa
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


class _BatchBuilder:
    """Turns parsed columns into RecordBatches of the output schema; applies pattern and
    pushed-down key filters."""

    def __init__(self, plan: _ReadPlan):
        import pyarrow as pa
        self.plan = plan
        self.o = plan.o
        self.pa_schema = plan.arrow_schema()
        self.names = [f.name for f in self.pa_schema]
        self.body_type = self.pa_schema.field("body").type
        self.decode_one = None
        if self.o.body_format in ("json", "msgpack"):
            from .body import make_decoder
            self.decode_one = make_decoder(self.o.body_format, self.plan.schema["body"].dataType)
        self.matcher = None
        self._stream_col = None
        p = self.o.pattern
        if p.startswith("~"):
            from ..matching import compile_pattern     # the broker's own matching (timed regex)
            self.matcher = compile_pattern(p).matches
        self.pa = pa

    def _stream_column(self, n: int):
        """The ``stream`` column of ``n`` rows: a slice of one made once for the longest batch
        so far (a batch's column costs nothing more)."""
        col = self._stream_col
        if col is None or len(col) < n:
            col = self._stream_col = _const_string(self.o.stream, max(n, ARROW_BATCH_ROWS))
        return col.slice(0, n)

    def _mask(self, key):
        import pyarrow.compute as pc
        pa = self.pa
        mask = None

        def both(a, b):
            return b if a is None else pc.and_(a, b)
        p = self.o.pattern
        if p and not p.startswith("~"):
            mask = both(mask, pc.starts_with(key, pattern=p))
        elif self.matcher is not None:
            m = self.matcher
            mask = both(mask, pa.array([m(k) for k in key.to_pylist()], type=pa.bool_()))
        for f in self.plan.key_filters:
            if f.op == "eq":
                mask = both(mask, pc.equal(key, f.value))
            elif f.op == "prefix":
                mask = both(mask, pc.starts_with(key, pattern=f.value))
            elif f.op == "in":
                mask = both(mask, pc.is_in(key, value_set=pa.array(list(f.value), pa.string())))
        return mask

    def build(self, seq, ts_ns, key, body, headers=None):
        """seq, ts_ns: int64 numpy arrays (ts_ns may be None: unknown); key: pa.string();
        body: pa.binary(); headers: the journal's ``HEADERS_TYPE`` array, or None (none)."""
        import numpy as np
        pa = self.pa
        mask = self._mask(key)
        if mask is not None:
            mask = mask.fill_null(False)
            npmask = mask.to_numpy(zero_copy_only=False)
            if not npmask.all():
                seq = seq[npmask]
                ts_ns = None if ts_ns is None else ts_ns[npmask]
                key, body = key.filter(mask), body.filter(mask)
                headers = None if headers is None else headers.filter(mask)
        n = len(seq)
        if n == 0:
            return None
        from .body import decode_body
        cols = {
            "stream": self._stream_column(n),
            "sequence": pa.array(np.ascontiguousarray(seq, dtype=np.int64), type=pa.int64()),
            "key": key,
            "body": decode_body(body, self.o.body_format, self.body_type, self.decode_one),
            # null only from a broker that does not send DELIVER-TS (a plain ZEPS/1 one)
            "timestamp": (pa.nulls(n, pa.timestamp("us", tz="UTC")) if ts_ns is None else
                          pa.array(np.ascontiguousarray(ts_ns // 1000, dtype=np.int64),
                                   type=pa.int64()).view(pa.timestamp("us", tz="UTC"))),
        }
        if "headers" in self.names:
            htype = self.pa_schema.field("headers").type
            cols["headers"] = pa.nulls(n, htype) if headers is None else headers
        arrays = []
        for f in self.pa_schema:
            a = cols[f.name]
            if a.type != f.type:
                a = a.cast(f.type)
            arrays.append(a)
        return pa.RecordBatch.from_arrays(arrays, schema=self.pa_schema)


_frozen = False


def _freeze_once() -> None:
    """Once per Python worker, after its first batch: put what exists by then (chiefly the
    modules PySpark, pyarrow, numpy and zeps imported) out of the cyclic garbage collector's
    sight (``gc.freeze``, as the broker does after start-up). PySpark's worker runs a full
    ``gc.collect()`` after every task: over the ~80k objects those imports leave, 10-30 ms a
    task here (a partition of 1M rows: ~4% of a ``count()``'s CPU), 0.1 ms once frozen.
    Objects frozen are never collected as cycles, so what the first task holds in cycles at
    that moment stays: a few objects, once per worker."""
    global _frozen
    if not _frozen:
        import gc
        gc.freeze()
        _frozen = True


def read_partition(plan: _ReadPlan, part: ZepsPartition) -> Iterator:
    """Yield pyarrow.RecordBatch for one partition."""
    for rb in _read_partition(plan, part):
        yield rb
        if not _frozen:
            _freeze_once()


def _read_partition(plan: _ReadPlan, part: ZepsPartition) -> Iterator:
    b = _BatchBuilder(plan)
    if part.stream_dir is not None:
        from ..journal import CorruptionError, JournalReader
        from ..journal.columnar import read_columns
        try:
            with JournalReader(part.stream_dir) as reader:
                # records retention deleted after planning are skipped (with a warning)
                for cols in read_columns(reader, part.first, part.last,
                                         verify_crc=plan.o.verify_crc):
                    rb = b.build(cols.sequence, cols.timestamp_ns, cols.key, cols.body,
                                 cols.headers)
                    if rb is not None:
                        # smaller batches let the JVM convert one while Python parses the next
                        for off in range(0, rb.num_rows, ARROW_BATCH_ROWS):
                            yield rb.slice(off, ARROW_BATCH_ROWS)
        except CorruptionError as e:
            raise ZepsSparkError(f"corrupt journal: {e}") from None
        return
    yield from _read_broker(plan, part, b)


def _read_broker(plan: _ReadPlan, part: ZepsPartition, b: _BatchBuilder) -> Iterator:
    """Read ``first..last`` through the SDK: one subscription of every key from ``first``
    (the pattern is applied here, so that reaching ``last`` is always observable), batch by
    batch (:meth:`~zeps.clients.Subscription.next_batch`); a batch the broker sent as one
    DELIVER-BATCH frame becomes Arrow columns with no Python work per message
    (:func:`zeps.clients.columns.batch_columns`)."""
    import numpy as np
    from ..clients import Client, ZepsTimeout
    from ..clients.columns import batch_columns
    o = plan.o
    with Client(o.endpoint, o.stream, timeout=o.timeout, curve=o.curve) as c:
        sub = c.subscribe("", from_seq=part.first)
        waited = 0.0
        while True:
            try:
                batch = sub.next_batch(1.0)
            except ZepsTimeout:
                waited += 1.0
                info = c.info()
                if info.first > part.last or info.last < part.first:
                    break                 # retention removed the rest of this range
                if waited >= max(o.timeout, 5.0):
                    raise ZepsSparkError(f"option 'endpoint': the broker at {o.endpoint} sent "
                                         f"nothing for {waited:g}s while reading sequences "
                                         f"{part.first}..{part.last} of {o.stream!r}") from None
                continue
            waited = 0.0
            seq, ts, key, body, headers = batch_columns(batch)
            k = int(np.searchsorted(seq, part.last, side="right"))   # those up to `last`
            if k < len(seq):
                seq, key, body = seq[:k], key.slice(0, k), body.slice(0, k)
                ts = None if ts is None else ts[:k]
                headers = None if headers is None else headers.slice(0, k)
            if k:
                rb = b.build(seq, ts, key, body, headers)
                if rb is not None:
                    yield rb
            if k == 0 or int(seq[-1]) >= part.last:
                break


def _resolve_start(o: ZepsOptions, src: _Source, first: int, last: int) -> int:
    if o.starting_time_ns is not None:
        return max(first, src.seq_at(o.starting_time_ns))
    s = o.starting_sequence
    if s == "latest":
        return last + 1
    if s == "earliest" or s is None:
        return first
    return max(int(s), first)


def _resolve_end(o: ZepsOptions, src: _Source, last: int) -> int:
    """Inclusive upper bound from endingSequence / endingTime (``last`` if neither)."""
    if o.ending_time_ns is not None:
        return min(last, src.seq_at(o.ending_time_ns + 1) - 1)
    if o.ending_sequence is not None:
        return min(last, o.ending_sequence)
    return last


def _per_partition(o: ZepsOptions, explicit: bool) -> int:
    if o.path or explicit:
        return o.records_per_partition
    return DEFAULT_BROKER_RECORDS_PER_PARTITION


def _plan(o: ZepsOptions, src: _Source, lo: int, hi: int, rpp_explicit: bool
          ) -> List[ZepsPartition]:
    per = _per_partition(o, rpp_explicit)
    if o.path:
        return plan_path_partitions(src.reader, lo, hi, per)
    return plan_broker_partitions(lo, hi, per)


class ZepsBatchReader(DataSourceReader):
    """Batch read: the range is fixed on the driver when the query is planned."""

    def __init__(self, options, schema: T.StructType):
        self.o = parse_options(options, "read")
        self.plan = _ReadPlan(self.o, schema)
        self._rpp_explicit = "maxrecordsperpartition" in {k.lower() for k in options}
        self.seq_lo = 0
        self.seq_hi = (1 << 63) - 1

    def partitions(self) -> Sequence[InputPartition]:
        src = _Source.open(self.o)
        try:
            first, last = src.first_last()
            lo = max(_resolve_start(self.o, src, first, last), self.seq_lo)
            hi = min(_resolve_end(self.o, src, last), self.seq_hi)
            parts = _plan(self.o, src, lo, hi, self._rpp_explicit)
        finally:
            src.close()
        # Spark wants at least one partition; an empty one reads nothing
        return parts or [ZepsPartition(1, 0)]

    def read(self, partition: ZepsPartition):
        if partition.last < partition.first:
            return iter(())
        return read_partition(self.plan, partition)


class ZepsFilteringBatchReader(ZepsBatchReader):
    """The batch reader with filter pushdown (used when ``spark.sql.python.filterPushdown
    .enabled`` is true): ``sequence`` comparisons narrow the sequence range before planning;
    ``key = 'x'``, ``key IN (...)`` and ``key LIKE 'p%'`` (startswith) are applied to each
    block's key column in Arrow, before the body is decoded. Both are applied exactly, so
    Spark does not re-check them."""

    def pushFilters(self, filters):
        for f in filters:
            col = f.attribute[0] if len(f.attribute) == 1 else None
            if col == "sequence" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual,
                                                    LessThan, LessThanOrEqual)) \
                    and isinstance(f.value, int) and not isinstance(f.value, bool):
                v = f.value
                if isinstance(f, EqualTo):
                    self.seq_lo, self.seq_hi = max(self.seq_lo, v), min(self.seq_hi, v)
                elif isinstance(f, GreaterThan):
                    self.seq_lo = max(self.seq_lo, v + 1)
                elif isinstance(f, GreaterThanOrEqual):
                    self.seq_lo = max(self.seq_lo, v)
                elif isinstance(f, LessThan):
                    self.seq_hi = min(self.seq_hi, v - 1)
                else:
                    self.seq_hi = min(self.seq_hi, v)
                continue
            if col == "key" and isinstance(f, EqualTo) and isinstance(f.value, str):
                self.plan.key_filters.append(_KeyFilter("eq", f.value))
                continue
            if col == "key" and isinstance(f, StringStartsWith) and isinstance(f.value, str):
                self.plan.key_filters.append(_KeyFilter("prefix", f.value))
                continue
            if col == "key" and isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                self.plan.key_filters.append(_KeyFilter("in", tuple(f.value)))
                continue
            yield f


# ============================================================================ streaming read

class ZepsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{stream: next sequence to read}``. A micro-batch ``[start, end)`` reads
    sequences ``start[stream] .. end[stream] - 1``; Spark checkpoints the offsets, so a
    restarted query resumes at the exact sequence where it stopped."""

    def __init__(self, options, schema: T.StructType):
        self.o = parse_options(options, "stream")
        self.plan = _ReadPlan(self.o, schema)
        self._rpp_explicit = "maxrecordsperpartition" in {k.lower() for k in options}
        self._target: Optional[int] = None     # Trigger.AvailableNow: the head at its start
        self._src: Optional[_Source] = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_src"] = None
        return d

    def _source(self) -> _Source:
        if self._src is None:
            self._src = _Source.open(self.o)
        return self._src

    def _head(self) -> int:
        """The next sequence after the last readable one, capped by the ending options and
        by the AvailableNow target."""
        return self._first_and_head()[1]

    def _first_and_head(self) -> Tuple[int, int]:
        """The first sequence kept, and :meth:`_head`."""
        src = self._source()
        first, last = src.first_last()
        head = _resolve_end(self.o, src, last) + 1
        if self._target is not None:
            head = min(head, self._target)
        return first, head

    def initialOffset(self) -> dict:
        src = self._source()
        first, last = src.first_last()
        return {self.o.stream: _resolve_start(self.o, src, first, last)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.o.max_records_per_trigger:
            return ReadMaxRows(self.o.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        src = self._source()
        first, last = src.first_last()
        self._target = _resolve_end(self.o, src, last) + 1

    def _start_of(self, start: dict) -> int:
        v = start.get(self.o.stream) if isinstance(start, dict) else None
        if not isinstance(v, int):
            raise ZepsSparkError(f"the checkpointed offset {json.dumps(start)} is not for stream "
                                 f"{self.o.stream!r}: use a new checkpointLocation for another "
                                 "stream")
        return v

    def latestOffset(self, start: dict = None, limit: ReadLimit = None) -> dict:
        first, head = self._first_and_head()
        if start is None:              # pre-4.2 signature
            return {self.o.stream: head}
        s = self._start_of(start)
        end = max(head, s)
        # The rows a limit counts start at the first kept sequence: from an offset retention
        # has passed, maxRecordsPerTrigger stepped through the deleted ones, an empty
        # micro-batch for each maxRecordsPerTrigger of them.
        kept = max(s, first)
        if isinstance(limit, ReadMaxRows):
            end = min(end, kept + max(int(limit.max_rows), 1))
        elif isinstance(limit, ReadMinRows):
            if end - kept < int(limit.min_rows) and self._target is None:
                end = s
        return {self.o.stream: end}

    def reportLatestOffset(self) -> Optional[dict]:
        try:
            return {self.o.stream: self._head()}
        except Exception:
            return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s, e = self._start_of(start), self._start_of(end)
        if e <= s:
            return []
        src = self._source()
        first, _ = src.first_last()
        lo = max(s, first)           # retention may have removed some: they are gone
        if lo > e - 1:
            return []
        return _plan(self.o, src, lo, e - 1, self._rpp_explicit)

    def read(self, partition: ZepsPartition):
        return read_partition(self.plan, partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._src is not None:
            self._src.close()
            self._src = None
