"""Journal tests: real files in tmp_path, real child processes, no mocks."""
from __future__ import annotations

import os

import pytest

from zeps.journal import (DataDir, Journal, JournalConfig, JournalLockedError, JournalReader,
                          Record, StreamStats)
from zeps.protocol.codec import encode_deliver

SMALL = JournalConfig(segment_bytes=4096, index_interval_bytes=256, fsync="never")


def items(n, start=0, size=10):
    return [(f"k.{i}", (b"%08d" % i) * (size // 8 + 1)) for i in range(start, start + n)]


def test_round_trip_and_frames(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        assert (j.first_seq, j.last_seq, j.next_seq) == (1, 0, 1)
        recs = j.append_batch(items(50))
        assert [r.sequence for r in recs] == list(range(1, 51))
        for r, (k, b) in zip(recs, items(50)):
            assert r.frame == encode_deliver(r.sequence, k.encode(), b)
        got = j.read_batch(1, 1000, 1 << 30)
        assert got == recs
        assert [(r.key, r.body) for r in got] == items(50)


def test_restart_continues_sequence(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        j.append_batch(items(30))
    with Journal.open(tmp_path / "s", SMALL) as j:
        assert j.next_seq == 31
        assert j.append_batch(items(1))[0].sequence == 31
        assert [r.sequence for r in j.read_from(1)] == list(range(1, 32))


def test_datadir_basics(tmp_path):
    dd = DataDir(tmp_path / "data", SMALL)
    j = dd.journal("orders")
    assert dd.journal("orders") is j
    j.append_batch(items(3))
    assert dd.streams() == ["orders"]
    assert isinstance(j.info(), StreamStats)
    with pytest.raises(JournalLockedError):
        DataDir(tmp_path / "data", SMALL)
    dd.close()
    DataDir(tmp_path / "data", SMALL).close()
