"""Writing for the ``zeps`` data source: each task publishes its rows through a broker with
confirms, as a producer id that every attempt of the task shares (docs/spark.md).

Everything Spark pickles here (writers, commit messages) is defined in an importable module:
Spark workers import ``zeps.spark.writer`` instead of receiving code from ``__main__``.
"""
from __future__ import annotations

import logging
import uuid
from typing import Optional

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql import types as T

from .options import ZepsOptions, ZepsSparkError, parse_options

log = logging.getLogger("zeps.spark")

__all__ = ["ZepsWriter", "ZepsStreamWriter", "ZepsCommitMessage", "check_sink_schema",
           "publish_batches", "task_producer_id"]


# ============================================================================ writing

class ZepsCommitMessage(WriterCommitMessage):
    def __init__(self, count: int, last_seq: int, partition_id: Optional[int] = None):
        self.count = count
        self.last_seq = last_seq
        self.partition_id = partition_id

    def __repr__(self):
        return f"ZepsCommitMessage(count={self.count}, last_seq={self.last_seq})"


_SINK_COLUMNS = ("key", "body", "headers")
_IGNORED_COLUMNS = ("stream", "sequence", "timestamp")   # what a zeps read produces


def check_sink_schema(schema: T.StructType) -> None:
    names = [f.name for f in schema.fields]
    lower = {n.lower(): f for n, f in zip(names, schema.fields)}
    if "body" not in lower:
        raise ZepsSparkError("the zeps sink needs a column 'body' (binary or string) and "
                             f"optionally 'key' (string); the DataFrame has: {', '.join(names)}")
    bt = lower["body"].dataType
    if not isinstance(bt, (T.BinaryType, T.StringType)):
        raise ZepsSparkError(f"column 'body' must be binary or string, not {bt.simpleString()} "
                             "(serialize it first, e.g. to_json(struct(...)) AS body)")
    if "key" in lower and not isinstance(lower["key"].dataType, T.StringType):
        raise ZepsSparkError(f"column 'key' must be a string, not "
                             f"{lower['key'].dataType.simpleString()}")
    if "headers" in lower and not _headers_type(lower["headers"].dataType):
        raise ZepsSparkError(f"column 'headers' must be array<struct<key: string, value: binary "
                             f"or string>> (as a zeps or Kafka read has it), not "
                             f"{lower['headers'].dataType.simpleString()}")
    extra = [n for n in names if n.lower() not in _SINK_COLUMNS + _IGNORED_COLUMNS]
    if extra:
        raise ZepsSparkError(f"unexpected column '{extra[0]}': the zeps sink publishes 'key' "
                             "(string), 'body' (binary or string) and 'headers'; select those")


def _headers_type(t) -> bool:
    """Is ``t`` an array of structs with a string ``key`` and a binary or string ``value``?"""
    if not isinstance(t, T.ArrayType) or not isinstance(t.elementType, T.StructType):
        return False
    f = {x.name.lower(): x.dataType for x in t.elementType.fields}
    return (set(f) == {"key", "value"} and isinstance(f["key"], T.StringType)
            and isinstance(f["value"], (T.BinaryType, T.StringType)))


#: Local properties Spark sets on the tasks of a streaming query's micro-batch.
_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"


def task_producer_id(write_id: str, task, streaming: bool = True,
                     given: Optional[str] = None) -> str:
    """The producer id of one write task (exactly-once publishing, docs/spark.md): the same for
    every attempt of the task, different for every other task. ``task`` is the task's
    ``pyspark.TaskContext``; the partition id ends it (not the attempt number).

    * A streaming sink's (``streaming``): the query id (which its checkpoint keeps across
      restarts; else ``write_id``, made once per write on the driver) and the epoch (the
      micro-batch id).
    * A batch write's: ``write_id``, made once per write on the driver, and epoch 0. (It took a
      streaming query's ids where it ran in one, in ``foreachBatch``: two writes to one stream
      in a micro-batch then had the same producer ids, and the second one's rows were taken
      for retries of the first's and dropped.) With option ``writeId`` (``given``), that id
      instead, after the query's id and epoch in ``foreachBatch``: the same for a re-run of the
      write, or of the micro-batch, so its rows land once."""
    if streaming:
        query = task.getLocalProperty(_QUERY_ID) or write_id
        epoch = task.getLocalProperty(_BATCH_ID) or "0"
        return f"spark:{query}:{epoch}:{task.partitionId()}"
    if given is None:
        return f"spark:{write_id}:0:{task.partitionId()}"
    query = task.getLocalProperty(_QUERY_ID)
    if query:
        return f"spark:{query}:{task.getLocalProperty(_BATCH_ID) or '0'}:{given}:" \
               f"{task.partitionId()}"
    return f"spark:w:{given}:{task.partitionId()}"


def _this_task_producer_id(write_id: str, streaming: bool = True,
                           given: Optional[str] = None) -> Optional[str]:
    from pyspark import TaskContext
    task = TaskContext.get()
    return None if task is None else task_producer_id(write_id, task, streaming, given)


def _publish_with_headers(c, items, headers) -> None:
    """Publish ``items`` in order: runs of rows without headers (null or empty) as batches,
    each row with headers by itself (PUBLISH-H; batches never carry headers)."""
    run = []
    for item, h in zip(items, headers):
        if not h:
            run.append(item)
            continue
        if run:
            c.publish_batch(run)
            run = []
        c.publish(item[0], item[1], headers=[(x["key"], b"" if x["value"] is None else x["value"])
                                             for x in h])
    if run:
        c.publish_batch(run)


def publish_batches(o: ZepsOptions, batches, producer_id: Optional[str] = None) -> ZepsCommitMessage:
    """Publish every row of ``batches`` (pyarrow RecordBatches with ``key``/``body``) with
    confirms, as producer ``producer_id`` (None: a random one), and wait until all are durable.
    Raises if anything was refused or not confirmed in time, so the task fails rather than
    committing a partial write."""
    from ..clients import Client, ZepsError
    count = 0
    last = 0
    try:
        with Client(o.endpoint, o.stream, confirms=True, timeout=o.timeout, curve=o.curve,
                    producer_id=producer_id) as c:
            for rb in batches:
                if rb.num_rows == 0:
                    continue
                names = {n.lower(): i for i, n in enumerate(rb.schema.names)}
                body = rb.column(names["body"])
                bodies = body.to_pylist()
                if "key" in names:
                    keys = rb.column(names["key"]).to_pylist()
                else:
                    keys = [""] * rb.num_rows
                items = [("" if k is None else k,
                          b"" if b is None else (b.encode("utf-8") if isinstance(b, str) else b))
                         for k, b in zip(keys, bodies)]
                if "headers" in names:         # a row with headers is published alone
                    _publish_with_headers(c, items, rb.column(names["headers"]).to_pylist())
                else:
                    c.publish_batch(items)
                count += len(items)
            if count:
                last = c.wait_for_confirms(timeout=max(o.timeout, 30.0))
    except (ZepsError, ValueError) as e:    # ValueError: a row the broker cannot take at all
        raise ZepsSparkError(f"publishing to stream {o.stream!r} at {o.endpoint} failed after "
                             f"{count} rows of this task were sent: {e}") from None
    return ZepsCommitMessage(count, last)


def _report_abort(o: ZepsOptions, messages, batch_id=None) -> None:
    done = [m for m in messages if isinstance(m, ZepsCommitMessage)]
    n = sum(m.count for m in done)
    what = f"micro-batch {batch_id}" if batch_id is not None else "write job"
    log.error("zeps: %s to stream %r aborted: %d task(s) had committed %d row(s), which stay "
              "published (a journal cannot take them back); failed tasks may have published "
              "part of their rows too (a retry of the same job or micro-batch re-sends them "
              "under the same producer ids: docs/spark.md).", what, o.stream,
              len(done), n)


class ZepsWriter(DataSourceArrowWriter):
    """``df.write.format("zeps")``: each task publishes its rows with confirms, as the producer
    :func:`task_producer_id` names (so that a retried attempt's rows land once), and commits
    only once all of them are durable."""

    def __init__(self, options, schema: T.StructType, overwrite: bool):
        self.o = parse_options(options, "write")
        if overwrite:
            raise ZepsSparkError("mode 'overwrite' is not possible: a ZEPS stream is "
                                 "append-only; use mode('append')")
        check_sink_schema(schema)
        self.write_id = uuid.uuid4().hex        # made on the driver: every task attempt sees it

    def write(self, iterator) -> ZepsCommitMessage:
        return publish_batches(self.o, iterator,
                               _this_task_producer_id(self.write_id, False, self.o.write_id))

    def commit(self, messages) -> None:
        n = sum(m.count for m in messages if isinstance(m, ZepsCommitMessage))
        log.info("zeps: published %d rows to stream %r", n, self.o.stream)

    def abort(self, messages) -> None:
        _report_abort(self.o, messages)


class ZepsStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("zeps")``: same as :class:`ZepsWriter` per micro-batch."""

    def __init__(self, options, schema: T.StructType, overwrite: bool):
        self.o = parse_options(options, "write")
        if self.o.write_id is not None:
            raise ZepsSparkError("option 'writeId' applies to df.write: a streaming query's "
                                 "rows are named by its checkpoint's query id")
        check_sink_schema(schema)
        self.write_id = uuid.uuid4().hex        # used only if Spark names no query id

    def write(self, iterator) -> ZepsCommitMessage:
        return publish_batches(self.o, iterator, _this_task_producer_id(self.write_id))

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        _report_abort(self.o, messages, batchId)
