"""The Spark Structured Streaming job: ZEPS ``orders`` -> 1-minute windows per region ->
ZEPS ``order-stats``.

Reads the JSON order events with the ``zeps`` source (``bodyFormat=json``), aggregates
orders and revenue per event-time minute and region, and publishes one JSON result per window
and region (key ``stats.<region>``) to ZEPS, waiting for publisher confirms.

Output mode ``update`` (each micro-batch publishes the windows it changed) goes through
``foreachBatch`` + the ``zeps`` batch sink: PySpark's Python streaming sinks (the
``writeStream.format("zeps")`` path) accept the append and complete modes only, and append would
hold every window back until the watermark passes it.
``trigger(availableNow=True)`` processes everything published so far and stops; run it again and
it continues from its checkpoint.

    python -m examples.pipeline.job --endpoint tcp://127.0.0.1:7470 --checkpoint /tmp/ck
"""
from __future__ import annotations

import argparse
import os
import sys

ORDER_SCHEMA = "order_id BIGINT, region STRING, amount DOUBLE, event_time TIMESTAMP"


def build_session(master=None):
    """A session; ``master=None`` keeps what spark-submit set (or local[*] when run bare)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName("zeps-pipeline")
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):     # keep a local run on the loopback interface
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false"))
    spark = (builder
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_job(spark, endpoint: str, checkpoint: str, source: str = "orders",
            sink: str = "order-stats", available_now: bool = True):
    """Start the streaming query; with ``available_now`` wait until it has processed everything
    that was published when it started. Returns the StreamingQuery."""
    from pyspark.sql import functions as F
    from zeps.spark import register
    register(spark)
    orders = (spark.readStream.format("zeps")
              .option("endpoint", endpoint)
              .option("stream", source)
              .option("pattern", "orders.")
              .option("startingSequence", "earliest")
              .option("bodyFormat", "json")
              .option("bodySchema", ORDER_SCHEMA)
              .load()
              .select("body.*"))
    stats = (orders
             .withWatermark("event_time", "10 minutes")
             .groupBy(F.window("event_time", "1 minute"), "region")
             .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue")))
    out = stats.select(
        F.concat(F.lit("stats."), F.col("region")).alias("key"),
        F.to_json(F.struct(
            F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
            F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
            "region", "orders", "revenue")).alias("body"))
    def publish(batch_df, batch_id):
        # writeId: a micro-batch run again after a restart publishes none of its rows twice
        (batch_df.write.format("zeps").option("endpoint", endpoint).option("stream", sink)
         .option("writeId", "order-stats").mode("append").save())

    writer = (out.writeStream.foreachBatch(publish)
              .option("checkpointLocation", checkpoint)
              .outputMode("update"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="2 seconds")
    q = writer.start()
    if available_now:
        q.awaitTermination()
    return q


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:7470")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--master", help="e.g. local[2], spark://host:7077 (default: spark-submit's "
                    "master, or local[*])")
    ap.add_argument("--continuous", action="store_true",
                    help="keep running (micro-batch every 2 s) instead of availableNow")
    args = ap.parse_args(argv)
    spark = build_session(args.master)
    try:
        q = run_job(spark, args.endpoint, args.checkpoint, available_now=not args.continuous)
        if args.continuous:
            q.awaitTermination()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
