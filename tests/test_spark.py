"""The ``zeps`` Spark data source, end to end on a local[2] session (one for the module).

Journal-path tests write the journal with :mod:`zeps.journal` directly; endpoint tests go through
a real broker process and the SDK. Java must be installed (``make test`` installs it): these
tests are not skipped without it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

pytest.importorskip("pyspark")

from zeps.journal import DataDir, JournalConfig, stream_dir_name  # noqa: E402

from .conftest import BrokerProcess  # noqa: E402
from .ports import fixed_ports  # noqa: E402

pytestmark = pytest.mark.spark


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("zeps-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    from zeps.spark import register
    register(s)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    """One broker process for the module (the lead's ``broker`` fixture is per test)."""
    d = tmp_path_factory.mktemp("spark-broker")
    b = BrokerProcess(d / "data", log_path=d / "broker.log").start()
    yield b
    b.stop()


def _keys(i: int) -> str:
    return ("eu.fr", "eu.de", "us.ny", "apac.sg")[i % 4]


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory):
    """A journal written directly: 3 groups (30 ms apart) of 400 records, small segments so
    the stream has many of them. Returns (data dir, records, batch time boundaries in ns)."""
    d = tmp_path_factory.mktemp("journal") / "data"
    dd = DataDir(str(d), JournalConfig(segment_bytes=16 << 10, fsync="never"))
    j = dd.journal("orders")
    recs, bounds = [], []
    for b in range(3):
        out = []
        for lo in range(b * 400, (b + 1) * 400, 50):     # a batch is never split across segments
            out += j.append_batch([(_keys(i), b"body-%d-" % i + bytes([i % 256]) * (i % 50))
                                   for i in range(lo, lo + 50)])
        recs.extend(out)
        bounds.append((out[0].timestamp, out[-1].timestamp))
        time.sleep(0.03)
    dd.close()
    return str(d), recs, bounds


def _read(spark, **opts):
    r = spark.read.format("zeps")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _as_tuples(rows):
    return [(r.sequence, r.key, bytes(r.body)) for r in rows]


def _publish(endpoint, stream, items):
    from zeps.clients import Client
    with Client(endpoint, stream, confirms=True) as c:
        c.publish_batch(items)
        return c.wait_for_confirms(timeout=30)


def _fetch(endpoint, stream, n, timeout=10.0):
    from zeps.clients import Client
    out = []
    with Client(endpoint, stream) as c:
        sub = c.subscribe("", from_seq=1)
        while len(out) < n:
            m = sub.poll(timeout)
            if m is None:
                break
            out.append(m)
        extra = sub.poll(0.3)
    assert extra is None, f"more than {n} messages in {stream!r}: {extra}"
    return out


# ----------------------------------------------------------------------------- batch, journal path

def test_path_read_equals_journal(spark, journal_dir):
    path, recs, _ = journal_dir
    df = _read(spark, path=path, stream="orders", maxRecordsPerPartition=150)
    assert [f.name for f in df.schema.fields] == ["stream", "sequence", "key", "body", "timestamp",
                                                  "headers"]
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "string", "bigint", "string", "binary", "timestamp",
        "array<struct<key:string,value:binary>>"]
    segs = [n for n in os.listdir(os.path.join(path, stream_dir_name("orders")))
            if n.endswith(".log")]
    assert len(segs) > 3
    # partitions come from the segments, split further to <= 150 records
    assert df.rdd.getNumPartitions() >= max(len(segs), len(recs) // 150)
    rows = df.orderBy("sequence").collect()
    assert _as_tuples(rows) == [(r.sequence, r.key, r.body) for r in recs]
    assert {r.stream for r in rows} == {"orders"}
    want_ts = [datetime.fromtimestamp(r.timestamp // 1000 / 1e6, tz=timezone.utc)
               .replace(tzinfo=None) for r in recs]
    assert [r.timestamp for r in rows] == want_ts


def test_path_pattern_prefix_and_regex(spark, journal_dir):
    path, recs, _ = journal_dir
    got = _as_tuples(_read(spark, path=path, stream="orders", pattern="eu.").orderBy("sequence")
                     .collect())
    assert got == [(r.sequence, r.key, r.body) for r in recs if r.key.startswith("eu.")]
    got = _read(spark, path=path, stream="orders", pattern=r"~^(us|apac)\.").select(
        "sequence").orderBy("sequence").collect()
    assert [r.sequence for r in got] == [r.sequence for r in recs
                                         if r.key.startswith(("us.", "apac."))]


def test_path_sequence_and_time_bounds(spark, journal_dir):
    path, recs, bounds = journal_dir
    df = _read(spark, path=path, stream="orders", startingSequence=395, endingSequence=805)
    assert [r.sequence for r in df.select("sequence").orderBy("sequence").collect()] == \
        list(range(395, 806))
    assert _read(spark, path=path, stream="orders", startingSequence="latest").count() == 0
    # batch 2 only, by time: epoch ms strictly between the batches
    start_ms = bounds[0][1] // 1_000_000 + 10
    end_ms = bounds[2][0] // 1_000_000 - 10
    df = _read(spark, path=path, stream="orders", startingTime=start_ms, endingTime=end_ms)
    assert sorted(r.sequence for r in df.select("sequence").collect()) == list(range(401, 801))
    iso = datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc).isoformat()
    df = _read(spark, path=path, stream="orders", startingTime=iso.replace("+00:00", "Z"))
    assert df.count() == 800


def test_path_filter_pushdown(spark, journal_dir):
    path, recs, _ = journal_dir
    from pyspark.sql import functions as F

    def fresh():          # a new DataFrame per query: see docs/spark.md (PySpark 4.3 reuse bug)
        return _read(spark, path=path, stream="orders", maxRecordsPerPartition=100)

    cases = [
        (lambda d: d.filter(F.col("key").startswith("eu.")), lambda r: r.key.startswith("eu.")),
        (lambda d: d.filter(F.col("key") == "us.ny"), lambda r: r.key == "us.ny"),
        (lambda d: d.filter(F.col("key").isin("us.ny", "apac.sg") & (F.col("sequence") > 1100)),
         lambda r: r.key in ("us.ny", "apac.sg") and r.sequence > 1100),
        (lambda d: d.filter((F.col("sequence") == 7) | (F.col("key") == "eu.de")),
         lambda r: r.sequence == 7 or r.key == "eu.de"),
        (lambda d: d.filter("sequence >= 101 and sequence < 150"),
         lambda r: 101 <= r.sequence < 150),
    ]
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "false"   # the default
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        narrowed = fresh().filter("sequence >= 101 and sequence < 150")
        assert narrowed.rdd.getNumPartitions() == 1      # the range was pushed into planning
        for q, pred in cases:
            got = sorted(r.sequence for r in q(fresh()).select("sequence").collect())
            assert got == [r.sequence for r in recs if pred(r)]
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    # without pushdown (the default) the same answers, and one DataFrame may be reused
    df = fresh()
    assert df.filter("sequence >= 101 and sequence < 150").rdd.getNumPartitions() > 1
    for q, pred in cases:
        assert sorted(r.sequence for r in q(df).select("sequence").collect()) == \
            [r.sequence for r in recs if pred(r)]
        assert df.count() == len(recs)


def test_path_crc_verified_by_default(spark, tmp_path):
    d = tmp_path / "data"
    dd = DataDir(str(d), JournalConfig(fsync="never"))
    recs = dd.journal("s").append_batch([("k", b"x" * 100) for _ in range(50)])
    dd.close()
    log = next((d / stream_dir_name("s")).glob("*.log"))
    data = bytearray(log.read_bytes())
    rec = len(data) // 50                             # equal-sized records
    data[24 * rec + rec - 10] ^= 0x01                 # flip one bit in the body of record 25
    log.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"corrupt journal.* at byte offset {24 * rec}: CRC-32C mismatch"):
        _read(spark, path=str(d), stream="s").collect()
    rows = _read(spark, path=str(d), stream="s", verifyCrc="false").orderBy("sequence").collect()
    assert len(rows) == 50 and bytes(rows[24].body) != recs[24].body
    assert [bytes(r.body) for r in rows[25:]] == [r.body for r in recs[25:]]


def test_body_formats(spark, tmp_path):
    import msgpack
    d = tmp_path / "data"
    dd = DataDir(str(d), JournalConfig(fsync="never"))
    docs = [{"id": i, "name": f"n{i}", "tags": ["a", "b"][: i % 3], "price": i * 1.5,
             "at": "2024-05-01T12:00:00Z", "extra": {"x": i}} for i in range(5)]
    dd.journal("j").append_batch([("k", json.dumps(x).encode()) for x in docs]
                                 + [("k", b"not json"), ("k", b'{"id": "seven"}')])
    dd.journal("m").append_batch([("k", msgpack.packb(x)) for x in docs])
    dd.journal("t").append_batch([("k", "héllo".encode()), ("k", b"\xff\xfe")])
    dd.close()
    schema = ("id BIGINT, name STRING, tags ARRAY<STRING>, price DOUBLE, at TIMESTAMP, "
              "extra STRUCT<x: INT>, missing STRING")
    for stream, fmt, n_extra in (("j", "json", 2), ("m", "msgpack", 0)):
        df = _read(spark, path=str(d), stream=stream, bodyFormat=fmt, bodySchema=schema)
        assert df.schema["body"].dataType.simpleString() == (
            "struct<id:bigint,name:string,tags:array<string>,price:double,at:timestamp,"
            "extra:struct<x:int>,missing:string>")
        rows = df.orderBy("sequence").collect()
        assert len(rows) == len(docs) + n_extra
        for r, x in zip(rows, docs):
            b = r.body
            assert (b.id, b.name, b.tags, b.price, b.extra.x, b.missing) == \
                (x["id"], x["name"], x["tags"], x["price"], x["extra"]["x"], None)
            assert b.at == datetime(2024, 5, 1, 12, 0)
        if n_extra:
            assert rows[-2].body is None                      # not JSON: null body
            assert rows[-1].body.id is None                   # a field of the wrong type: null
    rows = _read(spark, path=str(d), stream="t", bodyFormat="utf8").orderBy("sequence").collect()
    assert df.schema is not None and rows[0].body == "héllo" and rows[1].body == "\ufffd\ufffd"


# ----------------------------------------------------------------------------- through a broker

def test_endpoint_read_equals_published(spark, mbroker):
    items = [(_keys(i), b"payload %d" % i) for i in range(700)]
    _publish(mbroker.endpoint, "ep-read", items)
    df = _read(spark, endpoint=mbroker.endpoint, stream="ep-read", maxRecordsPerPartition=250)
    assert df.rdd.getNumPartitions() == 3
    rows = df.orderBy("sequence").collect()
    assert _as_tuples(rows) == [(i + 1, k, b) for i, (k, b) in enumerate(items)]
    # DELIVER-TS: the journal's timestamps (us in Spark), as a path read gives them
    want_ts = _read(spark, path=str(mbroker.data_dir), stream="ep-read").orderBy("sequence") \
        .select("timestamp").collect()
    assert [r.timestamp for r in rows] == [r.timestamp for r in want_ts]
    assert None not in {r.timestamp for r in rows}
    got = _read(spark, endpoint=mbroker.endpoint, stream="ep-read", pattern="us.",
                startingSequence=100, endingSequence=300).select("sequence").collect()
    assert sorted(r.sequence for r in got) == [i + 1 for i, (k, _) in enumerate(items)
                                               if k.startswith("us.") and 100 <= i + 1 <= 300]


def _stream_to_parquet(spark, mode_opts, out, ck, max_per_trigger="120"):
    r = spark.readStream.format("zeps").option("maxRecordsPerTrigger", max_per_trigger)
    for k, v in mode_opts.items():
        r = r.option(k, v)
    q = (r.load().select("sequence", "key", "body").writeStream.format("parquet")
         .option("path", out).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None
    return q


@pytest.mark.parametrize("via", ["endpoint", "path"])
def test_streaming_restart_no_loss_no_duplicates(spark, mbroker, tmp_path, via):
    stream = f"st-{via}"
    first = [(_keys(i), b"first %d" % i) for i in range(300)]
    _publish(mbroker.endpoint, stream, first)
    opts = ({"endpoint": mbroker.endpoint} if via == "endpoint"
            else {"path": str(mbroker.data_dir)})      # the live broker's journal directory
    opts["stream"] = stream
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    q = _stream_to_parquet(spark, opts, out, ck)
    assert q.recentProgress and max(p["numInputRows"] for p in q.recentProgress) <= 120
    assert spark.read.parquet(out).count() == 300
    second = [(_keys(i), b"second %d" % i) for i in range(250)]
    _publish(mbroker.endpoint, stream, second)
    _stream_to_parquet(spark, opts, out, ck)             # restarted from the checkpoint
    rows = spark.read.parquet(out).collect()
    got = sorted(_as_tuples(rows))
    assert got == [(i + 1, k, b) for i, (k, b) in enumerate(first + second)]


def test_streaming_starting_latest_and_ending(spark, mbroker, tmp_path):
    _publish(mbroker.endpoint, "st-latest", [("k", b"old")] * 50)
    ck = str(tmp_path / "ck")
    r = (spark.readStream.format("zeps").option("endpoint", mbroker.endpoint)
         .option("stream", "st-latest").option("startingSequence", "latest")
         .option("endingSequence", "80").load())
    q = (r.select("sequence").writeStream.format("memory").queryName("latest_q")
         .option("checkpointLocation", ck).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.time() + 30
        while not q.recentProgress and time.time() < deadline:
            time.sleep(0.2)
        _publish(mbroker.endpoint, "st-latest", [("k", b"new")] * 50)
        while time.time() < deadline:
            if spark.sql("select count(*) c from latest_q").collect()[0].c >= 30:
                break
            time.sleep(0.3)
        time.sleep(1.0)
        seqs = sorted(r.sequence for r in spark.sql("select * from latest_q").collect())
    finally:
        q.stop()
    assert seqs == list(range(51, 81))


def test_write_sink_publishes_every_row(spark, mbroker):
    rows = [(f"k.{i % 5}", bytes([i % 256]) * (i % 40)) for i in range(1000)]
    rows.append(("ünï.cödé", b""))
    df = spark.createDataFrame(rows, "key string, body binary").repartition(3)
    df.write.format("zeps").option("endpoint", mbroker.endpoint).option("stream", "sink-bin") \
        .mode("append").save()
    got = _fetch(mbroker.endpoint, "sink-bin", len(rows))
    assert [m.sequence for m in got] == list(range(1, len(rows) + 1))
    assert Counter((m.key, m.body) for m in got) == Counter(rows)
    # string body, and the columns of a zeps read are accepted as they are (copy a stream)
    sdf = spark.createDataFrame([("a", "hé"), ("b", "")], "key string, body string")
    sdf.write.format("zeps").option("endpoint", mbroker.endpoint).option("stream", "sink-str") \
        .mode("append").save()
    assert sorted((m.key, m.body) for m in _fetch(mbroker.endpoint, "sink-str", 2)) == \
        [("a", "hé".encode()), ("b", b"")]
    _read(spark, endpoint=mbroker.endpoint, stream="sink-str").write.format("zeps") \
        .option("endpoint", mbroker.endpoint).option("stream", "sink-copy").mode("append").save()
    assert sorted((m.key, m.body) for m in _fetch(mbroker.endpoint, "sink-copy", 2)) == \
        [("a", "hé".encode()), ("b", b"")]


def test_streaming_sink(spark, mbroker, tmp_path):
    items = [(_keys(i), b"s%d" % i) for i in range(400)]
    _publish(mbroker.endpoint, "ss-in", items)
    q = (spark.readStream.format("zeps").option("endpoint", mbroker.endpoint)
         .option("stream", "ss-in").option("maxRecordsPerTrigger", "150").load()
         .select("key", "body").writeStream.format("zeps")
         .option("endpoint", mbroker.endpoint).option("stream", "ss-out")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = _fetch(mbroker.endpoint, "ss-out", len(items))
    assert Counter((m.key, m.body) for m in got) == Counter(items)


def test_two_writes_to_one_stream_in_foreach_batch_store_every_row(spark, mbroker, tmp_path):
    """``foreachBatch`` with two batch writes to one stream: the second write's tasks took the
    producer ids of the first's (the query's id and micro-batch id), and the broker dropped
    its 100 rows as retries, with no error. Each batch write has its own ids now."""
    items = [("eu.%d" % i if i % 2 else "us.%d" % i, b"v%d" % i) for i in range(200)]
    _publish(mbroker.endpoint, "fb-in", items)

    def each(df, _batch_id):
        for prefix in ("eu.", "us."):
            (df.filter(df.key.startswith(prefix)).select("key", "body").write.format("zeps")
             .option("endpoint", mbroker.endpoint).option("stream", "fb-out")
             .mode("append").save())
    q = (spark.readStream.format("zeps").option("endpoint", mbroker.endpoint)
         .option("stream", "fb-in").load().writeStream.foreachBatch(each)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = _fetch(mbroker.endpoint, "fb-out", len(items))
    assert Counter((m.key, m.body) for m in got) == Counter(items)


def test_a_batch_write_run_again_with_its_write_id_stores_nothing_twice(spark, mbroker):
    """Option ``writeId`` names a batch write's rows: the same write run again (a job re-run,
    or a micro-batch ``foreachBatch`` runs again after a restart) stores none of them twice;
    another ``writeId`` is another write."""
    df = spark.createDataFrame([(f"k{i}", b"w%d" % i) for i in range(50)], "key string, body binary")

    def write(write_id):
        df.coalesce(2).write.format("zeps").option("endpoint", mbroker.endpoint) \
            .option("stream", "wid").option("writeId", write_id).mode("append").save()
    write("nightly-2026-11-30")
    write("nightly-2026-11-30")
    assert len(_fetch(mbroker.endpoint, "wid", 50)) == 50
    write("nightly-2026-12-01")
    assert len(_fetch(mbroker.endpoint, "wid", 100)) == 100
    msg = _error(lambda: df.write.format("zeps").option("endpoint", mbroker.endpoint)
                 .option("stream", "wid").option("writeId", "").mode("append").save())
    assert "option 'writeId'" in msg
    msg = _error(lambda: _read(spark, endpoint=mbroker.endpoint, stream="wid",
                               writeId="x").count())
    assert "option 'writeId' only applies to writing" in msg


def test_example_pipeline_end_to_end(spark, tmp_path):
    from examples.pipeline import publisher
    from examples.pipeline.run import pipeline
    import io
    buf = io.StringIO()
    text = pipeline(str(tmp_path), count=900, spark=spark, out=buf)
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    assert lines, buf.getvalue()
    got = {}
    for m in lines:
        assert m["stream"] == "order-stats" and m["key"].startswith("stats.")
        b = json.loads(m["body"])
        got[(b["window_start"], b["region"])] = (b["orders"], b["revenue"])  # latest wins
    want = {}
    for o in publisher.make_orders(900):
        k = (o["event_time"][:17] + "00Z", o["region"])
        n, s = want.get(k, (0, 0.0))
        want[k] = (n + 1, s + o["amount"])
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in want.items()}
    for k, (_n, s) in want.items():
        assert got[k][1] == pytest.approx(s, abs=0.01)


# ----------------------------------------------------------------------------- bad input

def _error(fn) -> str:
    with pytest.raises(Exception) as ei:
        fn()
    return str(ei.value)


def test_bad_input_messages(spark, journal_dir, mbroker, tmp_path):
    path, _, _ = journal_dir
    msg = _error(lambda: _read(spark, path=path, stream="nope"))
    assert "zeps: option 'stream': no stream 'nope' in the journal directory" in msg
    assert "streams there: orders" in msg
    msg = _error(lambda: _read(spark, endpoint=mbroker.endpoint, stream="nope"))
    assert f"zeps: option 'stream': the broker at {mbroker.endpoint} has no stream 'nope'" in msg
    # nothing listens there, and outside the ephemeral range the client cannot connect to itself
    dead = f"tcp://127.0.0.1:{fixed_ports()}"
    msg = _error(lambda: _read(spark, endpoint=dead, stream="x", timeout="1"))
    assert f"zeps: option 'endpoint': no ZEPS broker answered at {dead} within 1s" in msg
    msg = _error(lambda: _read(spark, path=path, stream="orders", startingOfset="1"))
    assert "zeps: unknown option 'startingofset'" in msg and "startingSequence" in msg
    msg = _error(lambda: _read(spark, path=path, stream="orders", bodyFormat="json",
                               bodySchema="id BIGINT,, name"))
    assert "zeps: option 'bodySchema' is not a valid schema" in msg
    msg = _error(lambda: _read(spark, path=path, stream="orders", bodyFormat="json",
                               bodySchema="id BIGINTEGER"))
    assert "zeps: option 'bodySchema' is not a valid schema: unknown type 'BIGINTEGER'" in msg
    msg = _error(lambda: _read(spark, path=path, stream="orders", bodyFormat="json"))
    assert "zeps: option 'bodySchema' is required with bodyFormat=json" in msg
    msg = _error(lambda: _read(spark, path=path))
    assert "zeps: option 'stream' is required" in msg
    msg = _error(lambda: _read(spark, stream="orders"))
    assert "zeps: option 'path' (a journal data directory) or 'endpoint'" in msg
    msg = _error(lambda: _read(spark, path=str(tmp_path / "none"), stream="orders"))
    assert "zeps: option 'path': no journal data directory at" in msg
    msg = _error(lambda: _read(spark, path=path, stream="orders", startingTime="yesterday"))
    assert "zeps: option 'startingTime': bad time 'yesterday'" in msg
    df = spark.createDataFrame([("k", "v", 1)], "key string, body string, n int")
    msg = _error(lambda: df.write.format("zeps").option("endpoint", mbroker.endpoint)
                 .option("stream", "w").mode("append").save())
    assert "zeps: unexpected column 'n'" in msg
    msg = _error(lambda: df.select("key", "body").write.format("zeps")
                 .option("endpoint", mbroker.endpoint).option("stream", "w")
                 .mode("overwrite").save())
    assert "zeps: mode 'overwrite' is not possible" in msg
    msg = _error(lambda: df.select("key", "body").write.format("zeps").option("path", path)
                 .option("stream", "w").mode("append").save())
    assert "zeps: option 'path' cannot be written to" in msg


def test_write_failure_is_not_silent(spark, mbroker):
    """A row the broker refuses (over its 1 MiB --max-message) fails the job with a message."""
    df = spark.createDataFrame([("ok", b"x"), ("big", b"y" * (2 << 20))], "key string, body binary")
    msg = _error(lambda: df.coalesce(1).write.format("zeps").option("endpoint", mbroker.endpoint)
                 .option("stream", "sink-fail").mode("append").save())
    assert "zeps: publishing to stream 'sink-fail'" in msg
