"""Spark batch read of a ZEPS journal beside ``spark.read.parquet`` of the same rows.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python -m bench.bench_spark --n 10000000

1. writes N messages (100-byte bodies, keys ``eu.fr``/``us.ny``/...) to a journal with
   :mod:`zeps.journal` (kept in ``--data-dir`` and reused when it already holds N records):
   one record per message, or with ``--group G`` batch records of G messages each, as a
   journal written by the SDK's ``publish_batch`` (``--group 100``);
2. writes the same rows once as Parquet (``spark.read.format("zeps")...write.parquet``);
3. on one local[2] session, interleaved, ``--runs`` times each (after two warm-up rounds):
   ``count()`` and a full materialisation ``agg(sum(length(body)))`` over
   * ``zeps`` path read, CRC verified (the default),
   * ``zeps`` path read, ``verifyCrc=false``,
   * ``spark.read.parquet`` (the baseline),
   * PySpark's ceiling for a Python data source: one that reads nothing and yields, for the
     same number of rows in as many partitions as the ``zeps`` read plans, the same ready-made
     Arrow batch (the ``zeps`` read's first 32,768 rows, its schema) again and again — what
     Spark's side of the Python data source API costs, no source can be faster;
4. prints the median seconds and rows/s, and the columnar reader alone
   (:func:`zeps.journal.columnar.read_columns`, one core, no Spark).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def write_journal(data_dir: str, n: int, body: int, group: int = 1) -> None:
    from zeps.journal import DataDir, JournalConfig, JournalReader, stream_dir_name
    from zeps.protocol import decode
    from zeps.protocol.batch import encode_publish_batch
    sdir = os.path.join(data_dir, stream_dir_name("bench"))
    if os.path.isdir(sdir):
        try:
            if JournalReader(sdir).last_seq == n:
                print(f"reusing the journal in {data_dir} ({n} records)")
                return
        except Exception:
            pass
        shutil.rmtree(data_dir)
    t = time.monotonic()
    dd = DataDir(data_dir, JournalConfig(fsync="never"))
    j = dd.journal("bench")
    keys = ("eu.fr", "eu.de", "us.ny", "us.sf", "apac.sg")
    pad = b"x" * body
    batch = 10_000
    for lo in range(0, n, batch):
        items = [(keys[i % 5], (b"%012d" % i + pad)[:body]) for i in range(lo, min(n, lo + batch))]
        if group > 1:
            items = [decode(encode_publish_batch(items[g:g + group]))
                     for g in range(0, len(items), group)]
        j.append_batch(items)
    j.sync()
    dd.close()
    print(f"wrote {n} records to {data_dir} in {time.monotonic() - t:.1f}s")


def reader_alone(data_dir: str, verify: bool) -> float:
    from zeps.journal import JournalReader, stream_dir_name
    from zeps.journal.columnar import read_columns
    n = 0
    t = time.perf_counter()
    with JournalReader(os.path.join(data_dir, stream_dir_name("bench"))) as r:
        for c in read_columns(r, 1, verify_crc=verify):
            n += len(c)
    return n / (time.perf_counter() - t)


def ceiling_source(batch, n: int, partitions: int):
    """A Python data source class ``zeps-ceiling`` that yields ``batch`` (a pyarrow
    RecordBatch) until ``n`` rows in ``partitions`` partitions: no I/O, no decoding. Defined
    here, in a function, so that cloudpickle ships it to the workers by value."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    schema = batch.schema
    rows = batch.num_rows

    class CeilingReader(DataSourceReader):
        def partitions(self):
            per, extra = divmod(n, partitions)
            return [InputPartition(per + (i < extra)) for i in range(partitions)]

        def read(self, partition):
            left = partition.value
            while left > 0:
                yield batch if left >= rows else batch.slice(0, left)
                left -= rows

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return "zeps-ceiling"

        def schema(self):
            from pyspark.sql.pandas.types import from_arrow_schema
            return from_arrow_schema(schema)

        def reader(self, schema):
            return CeilingReader()

    return Ceiling


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--group", type=int, default=1,
                    help="messages per journal record (batch records when > 1)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "zeps-bench-spark"))
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    jdir = os.path.join(args.data_dir, f"journal-g{args.group}")
    pdir = os.path.join(args.data_dir, "parquet")
    write_journal(jdir, args.n, args.body, args.group)
    reader_alone(jdir, True)                              # warm-up (imports, page cache)
    try:
        from zeps.journal.speedups import C_LOOPS
        loops = "C loops" if C_LOOPS else "numpy loops (pure Python)"
    except ImportError:                       # a revision from before the extension
        loops = "numpy loops"
    print(f"columnar reader alone, one core, {loops}: {reader_alone(jdir, True) / 1e6:.2f} "
          f"M rows/s (CRC verified), {reader_alone(jdir, False) / 1e6:.2f} M rows/s "
          "(verifyCrc=false)")

    from pyspark.sql import SparkSession, functions as F
    spark = (SparkSession.builder.master(args.master).appName("bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "4g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from zeps.spark import register
    register(spark)

    def zeps(verify: bool):
        return (spark.read.format("zeps").option("path", jdir).option("stream", "bench")
                .option("verifyCrc", str(verify).lower()).load())

    if not os.path.isdir(pdir) or spark.read.parquet(pdir).count() != args.n:
        t = time.monotonic()
        zeps(True).write.mode("overwrite").parquet(pdir)
        print(f"wrote the same rows as Parquet in {time.monotonic() - t:.1f}s")

    first = zeps(True).limit(32768).toArrow().combine_chunks().to_batches()[0]
    spark.dataSource.register(ceiling_source(first, args.n, zeps(True).rdd.getNumPartitions()))
    sources = {
        "zeps journal (CRC verified, default)": lambda: zeps(True),
        "zeps journal (verifyCrc=false)": lambda: zeps(False),
        "baseline: spark.read.parquet": lambda: spark.read.parquet(pdir),
        "ceiling: a Python data source yielding one ready Arrow batch":
            lambda: spark.read.format("zeps-ceiling").load(),
    }
    ops = {
        "count()": lambda df: df.count(),
        "agg(sum(length(body)))": lambda df: df.agg(F.sum(F.length("body"))).collect()[0][0],
    }
    expect_len = args.n * args.body
    times = {(s, o): [] for s in sources for o in ops}
    for rnd in range(args.runs + 2):                      # rounds 0-1 warm up (workers, JIT)
        for o, op in ops.items():
            for s, make in sources.items():
                df = make()
                t = time.perf_counter()
                r = op(df)
                dt = time.perf_counter() - t
                want = args.n if o == "count()" else expect_len
                assert r == want, (s, o, r, want)
                if rnd >= 2:
                    times[(s, o)].append(dt)
    spark.stop()

    print(f"\n{args.n} rows, {args.body}-byte bodies, "
          f"{'one message' if args.group == 1 else f'{args.group} messages'} per journal record, "
          f"{args.master}, median of {args.runs} interleaved runs after two warm-up rounds\n")
    print("| source | operation | seconds | rows/s |")
    print("|---|---|---:|---:|")
    for o in ops:
        for s in sources:
            med = statistics.median(times[(s, o)])
            print(f"| {s} | {o} | {med:.2f} | {args.n / med:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
