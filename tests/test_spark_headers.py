"""The Spark data source's ``headers`` column (issue 18 item 7): a path read and an endpoint
read give each message's headers (null for a message without), and the writer publishes a
DataFrame's headers column, so a read written back keeps them."""
from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from zeps.journal import DataDir, JournalConfig  # noqa: E402
from zeps.protocol.headers import encode_block  # noqa: E402

from .conftest import BrokerProcess  # noqa: E402
from .test_spark import _fetch, _read, spark  # noqa: E402,F401

H1 = (("uuid", bytes(range(16))), ("ttl", b"30"))
H2 = (("trace", b"1"), ("trace", b"2"))


def _rows(df):
    return [(r.sequence, r.key, bytes(r.body),
             None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers])
            for r in df.orderBy("sequence").collect()]


WANT = [(1, "a", b"1", [("uuid", bytes(range(16))), ("ttl", b"30")]),
        (2, "b", b"2", None),
        (3, "c", b"3", [("trace", b"1"), ("trace", b"2")]),
        (4, "d", b"4", None)]


def test_headers_column_from_a_journal_and_through_a_broker(spark, tmp_path):  # noqa: F811
    d = tmp_path / "data"
    dd = DataDir(str(d), JournalConfig(fsync="never"))
    j = dd.journal("h")
    j.append_batch([("a", b"1", encode_block(H1)), ("b", b"2")])
    j.append_batch([("c", b"3", encode_block(H2)), ("d", b"4", None)])
    dd.close()
    assert _rows(_read(spark, path=str(d), stream="h")) == WANT
    assert _rows(_read(spark, path=str(d), stream="h", pattern="c")) == [WANT[2]]
    b = BrokerProcess(d, log_path=tmp_path / "broker.log").start()
    try:
        df = _read(spark, endpoint=b.endpoint, stream="h")
        assert _rows(df) == WANT
        # written back: the headers column is published with each row
        df.write.format("zeps").option("endpoint", b.endpoint).option("stream", "h2") \
            .mode("append").save()
        got = sorted(_fetch(b.endpoint, "h2", 4), key=lambda m: m.key)
        assert [(m.key, m.body, m.headers) for m in got] == [
            ("a", b"1", H1), ("b", b"2", ()), ("c", b"3", H2), ("d", b"4", ())]
        bad = spark.createDataFrame([("k", b"v", [1])], "key string, body binary, headers array<int>")
        with pytest.raises(Exception, match="column 'headers' must be array<struct"):
            bad.write.format("zeps").option("endpoint", b.endpoint).option("stream", "h3") \
                .mode("append").save()
    finally:
        b.stop()
