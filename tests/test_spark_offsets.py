"""The Spark source's streaming offsets over a journal retention has cut (pure: the stream
reader the Spark driver calls, over a journal directory, no Spark session)."""
from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadMaxRows

from zeps.journal import DataDir, JournalConfig
from zeps.spark.reader import ZepsStreamReader
from zeps.spark.source import base_schema


def test_a_limited_trigger_counts_from_the_first_kept_sequence(tmp_path):
    """A checkpointed offset retention has passed since: with ``maxRecordsPerTrigger``, the
    query stepped through the deleted sequences, an empty micro-batch for each 100 of them
    before its first row. The first micro-batch now starts at the first kept sequence and
    carries 100 rows, and the next ones follow on."""
    d = str(tmp_path / "data")
    dd = DataDir(d, JournalConfig(segment_bytes=4096, fsync="never"))
    j = dd.journal("s")
    j.append_batch([("k", b"x" * 20)] * 50)
    reader = ZepsStreamReader({"path": d, "stream": "s", "maxRecordsPerTrigger": "100"},
                              base_schema())
    start = reader.initialOffset()
    assert start == {"s": 1}
    for _ in range(60):
        j.append_batch([("k", b"x" * 20)] * 50)
    j.drop_before(2000)
    first = j.first_seq
    assert first > 1000
    seqs = []
    for _ in range(3):
        end = reader.latestOffset(start, ReadMaxRows(100))
        rows = [s for p in reader.partitions(start, end) for rb in reader.read(p)
                for s in rb.column("sequence").to_pylist()]
        assert rows == list(range(max(start["s"], first), end["s"])) and len(rows) == 100
        seqs += rows
        start = end
    assert seqs == list(range(first, first + 300))
    dd.close()
