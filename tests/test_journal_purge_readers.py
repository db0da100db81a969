"""A purge is served by no reader: a :class:`JournalReader` in another process (``zeps replay
--data-dir``, ``zeps stats --data-dir``, Spark, the Event BUS front end's snapshots) reads from
the stream's ``purged_to + 1`` (its settings), though a purge that deleted no whole segment
left the messages on disk. (Those readers served them.)"""
from __future__ import annotations

from zeps.journal import DataDir, JournalConfig, JournalReader
from zeps.journal.columnar import read_columns
from zeps.protocol.batch import encode_entries
from zeps.protocol.commands import PublishBatch


def _stream(tmp_path):
    """``s``: 1..3 plain, 4..8 one batch record, 9..10 plain, all in one segment."""
    dd = DataDir(str(tmp_path), JournalConfig(fsync="never"))
    j = dd.journal("s")
    pairs = [(f"b.{i}", b"%d" % i) for i in range(5)]
    j.append_batch([("k", b"1"), ("k", b"2"), ("k", b"3"),
                    PublishBatch(5, encode_entries(pairs)), ("k", b"9"), ("k", b"10")])
    return dd, j


def test_a_reader_starts_after_a_purge_that_left_the_messages_on_disk(tmp_path):
    dd, j = _stream(tmp_path)
    early = JournalReader(j.stream_dir)                  # opened before the purge
    assert dd.purge("s", 5) == 6
    assert j.info().segments == 1, "no whole segment was deleted: 1..5 are on disk"
    for r in (early, JournalReader(j.stream_dir)):
        assert r.first_seq == 6
        info = r.info()
        assert (info.first_seq, info.last_seq) == (6, 10)
        assert info.oldest_ts == j.read_batch(6, max_records=1)[0].timestamp
        assert [x.sequence for x in r.read_batch(1)] == list(range(6, 11))
        assert [x.sequence for x in r.read_from(3, end_seq=7)] == [6, 7]
        seqs = [s for cols in read_columns(r, 1, 10) for s in cols.sequence.tolist()]
        assert seqs == list(range(6, 11)), "none of the batch's purged messages"
        assert r.seq_at(0) == 6
        r.close()
    dd.close()


def test_a_purge_of_every_message_leaves_an_empty_stream_to_readers(tmp_path):
    dd, j = _stream(tmp_path)
    dd.purge("s", 10)
    with JournalReader(j.stream_dir) as r:
        info = r.info()
        assert (info.first_seq, info.last_seq, info.oldest_ts) == (11, 10, 0)
        assert r.read_batch(1) == [] and list(r.read_from(1)) == []
    dd.close()
