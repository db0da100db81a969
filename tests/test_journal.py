"""Journal tests: API, reads, indexes, durability, retention. Real files in tmp_path, no mocks.

Recovery/corruption tests are in test_journal_recovery.py, stream names in
test_journal_names.py, multi-process tests in test_journal_processes.py.
"""
from __future__ import annotations

import bisect
import os
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeps.journal import (DataDir, InvalidRecordError, Journal, JournalClosedError,
                          JournalConfig, JournalError, JournalLockedError, JournalNotFoundError,
                          JournalReader, KeyTooLongError, Record, RecordTooLargeError,
                          StreamStats, list_streams)
from zeps.journal.record import HEADER_SIZE
from zeps.protocol.codec import decode, encode_deliver
from zeps.protocol.commands import Deliver

SMALL = JournalConfig(segment_bytes=4096, index_interval_bytes=256, fsync="never")


def items(n, start=0, size=10):
    return [(f"k.{i}", (b"%08d" % i) * (size // 8 + 1)) for i in range(start, start + n)]


def fill(j, batches=60, per=7, size=40):
    out = []
    for b in range(batches):
        out += j.append_batch(items(per, b * per, size + b % 13))
    return out


def seqs(records):
    return [r.sequence for r in records]


# ---------------------------------------------------------------------------- basics

def test_round_trip_and_frames(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        assert (j.first_seq, j.last_seq, j.next_seq) == (1, 0, 1)
        recs = j.append_batch(items(50))
        assert seqs(recs) == list(range(1, 51))
        for r, (k, b) in zip(recs, items(50)):
            assert r.frame == encode_deliver(r.sequence, k.encode(), b)
            assert decode(r.frame) == Deliver(r.sequence, k, b)
        got = j.read_batch(1, 1000, 1 << 30)
        assert got == recs
        assert [(r.key, r.body) for r in got] == items(50)
        assert all(isinstance(r, Record) for r in got)
        assert (j.first_seq, j.last_seq, j.next_seq) == (1, 50, 51)


def test_empty_journal(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        assert j.read_batch(1) == []
        assert list(j.read_from(1)) == []
        assert j.seq_at(0) == 1
        assert j.append_batch([]) == []
        info = j.info()
        assert info == StreamStats(first_seq=1, last_seq=0, size_bytes=0, oldest_ts=0,
                                   newest_ts=0, segments=1)
    r = JournalReader(tmp_path / "s")
    assert (r.first_seq, r.last_seq) == (1, 0)
    assert r.read_batch(1) == [] and r.seq_at(5) == 1


def test_restart_continues_sequence(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        first = fill(j, 20)
        last_ts = j.info().newest_ts
    with Journal.open(tmp_path / "s", SMALL) as j:
        assert j.next_seq == len(first) + 1
        assert j.durable_seq == len(first)
        r = j.append_batch(items(1))[0]
        assert r.sequence == len(first) + 1
        assert r.timestamp >= last_ts
        assert j.read_batch(1, 10_000, 1 << 30) == first + [r]


def test_segments_roll_and_names(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = fill(j)
        info = j.info()
        assert info.segments > 5
        logs = sorted(f for f in os.listdir(tmp_path / "s") if f.endswith(".log"))
        assert len(logs) == info.segments
        firsts = [int(f[:-4]) for f in logs]
        assert all(len(f) == 24 for f in logs)
        assert firsts[0] == 1
        # each segment starts with the sequence it is named by, and is rolled near the size
        for f, first in zip(logs, firsts):
            assert j.read_batch(first, 1)[0].sequence == first
            assert os.path.exists(tmp_path / "s" / (f[:-4] + ".index"))
            assert os.path.exists(tmp_path / "s" / (f[:-4] + ".timeindex"))
        for f in logs[:-1]:
            assert os.path.getsize(tmp_path / "s" / f) <= 4096
        assert info.size_bytes == sum(os.path.getsize(tmp_path / "s" / f) for f in logs)
        assert info.size_bytes == sum(r.size for r in recs)


def test_batch_bigger_than_segment_is_not_split(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        j.append_batch(items(3))
        big = j.append_batch(items(100, size=100))          # ~13 KiB > segment_bytes
        assert j.info().segments == 2
        assert j.read_batch(4, 1000, 1 << 30) == big
        j.append_batch(items(1))
        assert j.info().segments == 3


def test_read_batch_limits(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = fill(j)
        n = len(recs)
        assert seqs(j.read_batch(5, 3)) == [5, 6, 7]
        # max_bytes counts frame bytes; the first record is always returned
        got = j.read_batch(1, 1000, max_bytes=1)
        assert seqs(got) == [1]
        got = j.read_batch(1, 1000, max_bytes=len(recs[0].frame) + len(recs[1].frame))
        assert seqs(got) == [1, 2]
        # batches cross segment boundaries
        got = j.read_batch(1, n + 5, 1 << 30)
        assert got == recs
        assert j.read_batch(n, 10) == [recs[-1]]
        assert j.read_batch(n + 1, 10) == []
        assert j.read_batch(0, 2) == recs[:2]            # below the first: from first_seq


def test_read_from_bounds(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = fill(j)
        assert list(j.read_from(1)) == recs
        assert seqs(j.read_from(17, end_seq=121)) == list(range(17, 122))
        assert seqs(j.read_from(17, end_seq=17)) == [17]
        assert list(j.read_from(17, end_seq=10)) == []
        assert list(j.read_from(len(recs) + 1)) == []
        it = j.read_from(3, batch_records=2)
        assert (it.first_available, it.gap, it.skipped_to) == (1, False, None)
        assert seqs(it) == list(range(3, len(recs) + 1))


def test_every_position_and_segment_boundaries(tmp_path):
    """read_batch / read_from land on the right record for every sequence, in particular
    at segment boundaries (tiny segments), for the writer and a reader."""
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = fill(j)
        firsts = j._firsts
        assert len(firsts) > 5
        r = JournalReader(tmp_path / "s")
        for view in (j, r):
            for s in range(1, len(recs) + 1):
                assert view.read_batch(s, 1) == [recs[s - 1]]
            for f in firsts[1:]:
                assert seqs(view.read_batch(f - 1, 2)) == [f - 1, f]
                assert next(iter(view.read_from(f))).sequence == f


def _check_seq_at(view, recs):
    tss = [r.timestamp for r in recs]
    probes = {0, 1, tss[-1] + 1, 1 << 63}
    for t in tss:
        probes.update((t - 1, t, t + 1))
    for t in sorted(probes):
        expect = bisect.bisect_left(tss, t) + 1       # first sequence with ts >= t
        assert view.seq_at(t) == expect, t


def test_seq_at(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = []
        for b in range(40):
            recs += j.append_batch(items(1 + b % 9, size=30 + b))
            time.sleep(0.0005)
        assert len({r.timestamp for r in recs}) > 20
        _check_seq_at(j, recs)
        _check_seq_at(JournalReader(tmp_path / "s"), recs)
        assert j.seq_at(recs[-1].timestamp + 1) == j.next_seq


def test_timestamps_never_decrease(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        a = j.append_batch(items(3))
        assert len({r.timestamp for r in a}) == 1        # one timestamp per batch
        # a clock that stepped back: the journal keeps its last timestamp
        future = time.time_ns() + 10**12
        j._last_ts = future
        b = j.append_batch(items(2))
        assert all(r.timestamp == future for r in b)
    with Journal.open(tmp_path / "s", SMALL) as j:       # also across a restart
        assert j.append_batch(items(1))[0].timestamp >= future


def test_info(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = fill(j, 10)
        info = j.info()
        assert info.first_seq == 1 and info.last_seq == len(recs)
        assert info.oldest_ts == recs[0].timestamp and info.newest_ts == recs[-1].timestamp
        assert JournalReader(tmp_path / "s").info() == info


def test_reader_and_record_laziness(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = fill(j, 10)
    r = JournalReader(tmp_path / "s")
    got = r.read_batch(1, 10_000, 1 << 30)
    assert got == recs
    x = got[3]
    assert x._key is None and x._body is None             # decoded only when asked
    assert (x.key, x.body) == (recs[3].key, recs[3].body)
    assert "Record(sequence=4" in repr(x)
    r.close()
    with pytest.raises(JournalClosedError):
        r.read_batch(1)


# ---------------------------------------------------------------------------- invalid input

def test_record_too_large_appends_nothing(tmp_path):
    cfg = JournalConfig(max_record_bytes=200, fsync="never")
    with Journal.open(tmp_path / "s", cfg) as j:
        j.append_batch(items(2))
        size = j.info().size_bytes
        with pytest.raises(RecordTooLargeError, match="max_record_bytes=200"):
            j.append_batch([("a", b"x"), ("b", b"y" * 200), ("c", b"z")])
        assert j.next_seq == 3 and j.info().size_bytes == size
        ok = j.append_batch([("a", b"x" * (200 - 17))])     # exactly at the limit
        assert ok[0].sequence == 3 and len(ok[0].frame) == 200


def test_key_limits(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        with pytest.raises(KeyTooLongError, match="256 bytes"):
            j.append_batch([("ok", b""), ("é" * 128, b"")])
        assert j.next_seq == 1
        r = j.append_batch([("é" * 127 + "a", b"")])[0]      # 255 bytes
        assert r.key == "é" * 127 + "a"
        with pytest.raises(InvalidRecordError):
            j.append_batch([(b"bytes-key", b"")])
        with pytest.raises(InvalidRecordError):
            j.append_batch([("k", "text body")])
        with pytest.raises(InvalidRecordError):
            j.append_batch(["not a pair"])
        assert j.next_seq == 2
        r = j.append_batch([("k", bytearray(b"ba")), ("", memoryview(b"mv"))])
        assert [x.body for x in r] == [b"ba", b"mv"] and r[1].key == ""


def test_config_validation():
    with pytest.raises(ValueError):
        JournalConfig(fsync="sometimes")
    with pytest.raises(ValueError):
        JournalConfig(segment_bytes=0)
    with pytest.raises(ValueError):
        JournalConfig(retention_ms=-1)


# ---------------------------------------------------------------------------- errors / locks

def test_missing_directories(tmp_path):
    with pytest.raises(JournalNotFoundError, match="nope"):
        JournalReader(tmp_path / "nope")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(JournalNotFoundError, match="not a directory"):
        JournalReader(tmp_path / "file")
    with pytest.raises(JournalError):
        Journal.open(tmp_path / "file" / "s", SMALL)
    with pytest.raises(JournalNotFoundError):
        list_streams(str(tmp_path / "nope"))


def test_second_writer_is_refused(tmp_path):
    j = Journal.open(tmp_path / "s", SMALL)
    with pytest.raises(JournalLockedError) as ei:
        Journal.open(tmp_path / "s", SMALL)
    msg = str(ei.value)
    assert str(tmp_path / "s") in msg and f"process {os.getpid()}" in msg
    assert ei.value.holder_pid == os.getpid()
    r = JournalReader(tmp_path / "s")           # readers take no lock
    j.append_batch(items(2))
    assert r.last_seq == 2
    j.close()
    with pytest.raises(JournalClosedError):
        j.append_batch(items(1))
    Journal.open(tmp_path / "s", SMALL).close()  # released on close


def test_datadir(tmp_path):
    dd = DataDir(tmp_path / "data", SMALL)
    j = dd.journal("orders")
    assert dd.journal("orders") is j
    j.append_batch(items(3))
    dd.journal("../../etc").append_batch(items(1))
    dd.journal(".hidden")
    assert dd.streams() == ["../../etc", ".hidden", "orders"]
    assert sorted(os.listdir(tmp_path / "data")) == ["%2E%2E%2F%2E%2E%2Fetc"[:0] + "%2E.%2F..%2Fetc",
                                                     "%2Ehidden", "LOCK", "orders"]
    assert dd.reader("orders").last_seq == 3
    with pytest.raises(JournalNotFoundError):
        dd.reader("absent")
    with pytest.raises(JournalLockedError, match=str(tmp_path / "data")):
        DataDir(tmp_path / "data", SMALL)
    with pytest.raises(JournalLockedError):      # the stream lock is held too
        Journal.open(dd.stream_path("orders"), SMALL)
    dd.close()
    with pytest.raises(JournalClosedError):
        dd.journal("orders")
    with DataDir(tmp_path / "data", SMALL) as dd2:
        assert dd2.journal("orders").last_seq == 3


# ---------------------------------------------------------------------------- durability

def test_fsync_policies(tmp_path):
    cfg = JournalConfig(fsync="always")
    with Journal.open(tmp_path / "a", cfg) as j:
        j.append_batch(items(3))
        assert j.durable_seq == 3 and not j.sync_due()
    cfg = JournalConfig(fsync="never")
    with Journal.open(tmp_path / "n", cfg) as j:
        j.append_batch(items(3))
        assert j.durable_seq == 3
        assert j.sync() == 3
    cfg = JournalConfig(fsync="interval", fsync_interval_ms=50)
    with Journal.open(tmp_path / "i", cfg) as j:
        t0 = time.monotonic()
        j.append_batch(items(3))
        assert j.durable_seq == 0
        assert not j.sync_due(j._last_sync + 0.010)
        assert j.sync_due(j._last_sync + 0.050)
        assert j.sync() == 3 and j.durable_seq == 3
        assert not j.sync_due(t0 + 100)                  # nothing left to sync
        j.append_batch(items(2))
        assert j.durable_seq == 3
    with Journal.open(tmp_path / "i", cfg) as j:         # close synced
        assert j.durable_seq == 5


def test_roll_makes_old_segment_durable(tmp_path):
    cfg = JournalConfig(fsync="interval", segment_bytes=1024)
    with Journal.open(tmp_path / "s", cfg) as j:
        j.append_batch(items(10, size=60))
        assert j.durable_seq == 0
        j.append_batch(items(10, size=60))               # rolls: the old segment is synced
        assert j.durable_seq == 10


def test_sync_from_worker_thread(tmp_path):
    cfg = JournalConfig(fsync="interval", fsync_interval_ms=1, segment_bytes=16384)
    with Journal.open(tmp_path / "s", cfg) as j:
        stop = threading.Event()
        seen = []
        errors = []

        def worker():
            try:
                while not stop.is_set():
                    seen.append(j.sync())
            except Exception as e:       # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=worker)
        t.start()
        for b in range(400):
            j.append_batch(items(5, b * 5, 50))
        stop.set()
        t.join()
        assert not errors
        assert seen == sorted(seen)                      # durable_seq never goes back
        assert all(s <= 2000 for s in seen)
        assert j.sync() == 2000 == j.durable_seq
        assert j.info().segments > 3


# ---------------------------------------------------------------------------- follow

def test_follow_sees_new_records(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        j.append_batch(items(5))
        r = JournalReader(tmp_path / "s")

        def writer():
            for b in range(30):
                time.sleep(0.002)
                j.append_batch(items(7, size=50))

        t = threading.Thread(target=writer)
        t.start()
        got_r = [x.sequence for x in r.read_from(1, end_seq=215, follow=True,
                                                 poll_interval=0.002, timeout=10)]
        t.join()
        got_w = [x.sequence for x in j.read_from(200, follow=True, poll_interval=0.002,
                                                 timeout=0.05)]
        assert got_r == list(range(1, 216))
        assert got_w == list(range(200, 216))
        stopped = list(r.read_from(216, follow=True, stop=lambda: True))
        assert stopped == []
        t0 = time.monotonic()
        assert list(r.read_from(216, follow=True, poll_interval=0.01, timeout=0.1)) == []
        assert 0.1 <= time.monotonic() - t0 < 2


# ---------------------------------------------------------------------------- retention

def test_retention_by_bytes(tmp_path):
    cfg = JournalConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never",
                        retention_bytes=6000)
    with Journal.open(tmp_path / "s", cfg) as j:
        recs = fill(j, 80)
        assert j.info().size_bytes <= 6000 + 2048         # applied on each roll
        j.apply_retention()
        assert j.apply_retention() == 0
        info = j.info()
        assert 6000 - 2048 < info.size_bytes <= 6000
        assert info.first_seq > 1 and info.last_seq == len(recs)
        logs = sorted(f for f in os.listdir(tmp_path / "s") if f.endswith(".log"))
        assert int(logs[0][:-4]) == info.first_seq
        assert len(logs) == info.segments
        # whole segments only: what is left reads fine from its first sequence
        assert j.read_batch(1, 10_000, 1 << 30) == recs[info.first_seq - 1:]
        it = j.read_from(1)
        assert (it.first_available, it.gap, it.skipped_to) == (info.first_seq, True,
                                                             info.first_seq)
        assert it.missed == info.first_seq - 1
        assert seqs(it) == list(range(info.first_seq, len(recs) + 1))
        r = JournalReader(tmp_path / "s")
        assert r.first_seq == info.first_seq
        assert r.read_batch(1, 3)[0].sequence == info.first_seq


def test_retention_by_age_never_deletes_active(tmp_path):
    cfg = JournalConfig(segment_bytes=2048, fsync="never", retention_ms=60_000)
    with Journal.open(tmp_path / "s", cfg) as j:
        a = fill(j, 20)
        segs_before = j.info().segments
        assert j.apply_retention() == 0                   # nothing older than a minute
        time.sleep(0.002)
        cut = time.time_ns()
        b = fill(j, 20)
        # "now" such that everything before `cut` is older than retention_ms
        deleted = j.apply_retention(now_ns=cut + 60_000 * 10**6)
        assert deleted >= segs_before - 1 > 0
        assert j.first_seq <= b[0].sequence
        assert all(r.timestamp < cut for r in a)
        kept = j.read_batch(1, 10_000, 1 << 30)
        assert kept[-1].sequence == b[-1].sequence
        assert j.first_seq > 1
        # far future: everything but the active segment goes
        j.apply_retention(now_ns=time.time_ns() + 10**15)
        assert j.info().segments == 1
        assert j._segs[0] is j._active
        assert j.append_batch(items(1))[0].sequence == b[-1].sequence + 1


def test_in_process_reader_survives_retention(tmp_path):
    cfg = JournalConfig(segment_bytes=2048, fsync="never", retention_bytes=4096)
    with Journal.open(tmp_path / "s", cfg) as j:
        fill(j, 5)
        assert j.first_seq == 1
        it = j.read_from(1, batch_records=3)
        first = next(it)
        fill(j, 60)                                       # retention deletes segments
        rest = list(it)
        assert first.sequence == 1
        assert it.gap and rest[-1].sequence == j.last_seq
        s = seqs(rest)
        assert s == sorted(s)


# ---------------------------------------------------------------------------- properties

batches_st = st.lists(
    st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=300)), min_size=1, max_size=20),
    min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches_st, seg=st.sampled_from([512, 2048, 1 << 20]),
       interval=st.sampled_from([1, 100, 4096]))
def test_property_random_batches_round_trip(batches, seg, interval):
    cfg = JournalConfig(segment_bytes=seg, index_interval_bytes=interval, fsync="never")
    with tempfile.TemporaryDirectory() as d:
        flat = [it for b in batches for it in b]
        with Journal.open(os.path.join(d, "s"), cfg) as j:
            for b in batches:
                j.append_batch(b)
            got = j.read_batch(1, 10**6, 1 << 40)
            assert [(r.key, r.body) for r in got] == flat
            assert seqs(got) == list(range(1, len(flat) + 1))
        with Journal.open(os.path.join(d, "s"), cfg) as j:
            assert j.next_seq == len(flat) + 1
            r = JournalReader(os.path.join(d, "s"))
            again = list(r.read_from(1, batch_records=7))
            assert again == got
            mid = len(flat) // 2 + 1
            assert seqs(j.read_batch(mid, 5)) == list(range(mid, min(mid + 5, len(flat) + 1)))
            assert sum(x.size for x in got) == j.info().size_bytes
            assert all(x.size == HEADER_SIZE + len(x.frame) for x in got)


def test_open_files_stay_bounded_over_many_segments(tmp_path):
    """A replay over many segments keeps at most MAX_OPEN_SEALED of them open (LRU)."""
    from zeps.journal.reader import MAX_OPEN_SEALED

    def nfds():
        return len(os.listdir("/proc/self/fd"))

    cfg = JournalConfig(segment_bytes=1024, index_interval_bytes=256, fsync="never")
    with Journal.open(tmp_path / "s", cfg) as j:
        recs = fill(j, 400)
        nsegs = j.info().segments
        assert nsegs > 3 * MAX_OPEN_SEALED
    before = nfds()
    for view in (Journal.open(tmp_path / "s", cfg), JournalReader(tmp_path / "s")):
        it = view.read_from(1, batch_records=50)
        got = list(it)
        assert got == recs
        assert nfds() - before <= 3 * (MAX_OPEN_SEALED + 3)
        # evicted segments are re-opened transparently, also under a live iterator
        assert view.read_batch(1, 3) == recs[:3]
        assert seqs(view.read_batch(len(recs) // 2, 2)) == [len(recs) // 2, len(recs) // 2 + 1]
        tss = [r.timestamp for r in recs]
        for r in recs[::97]:
            assert view.seq_at(r.timestamp) == bisect.bisect_left(tss, r.timestamp) + 1
        view.close()
    assert nfds() <= before + 1


def test_follower_keeps_open_files_bounded(tmp_path):
    from zeps.journal.reader import MAX_OPEN_SEALED
    cfg = JournalConfig(segment_bytes=512, index_interval_bytes=256, fsync="never")
    with Journal.open(tmp_path / "s", cfg) as j:
        r = JournalReader(tmp_path / "s")
        before = len(os.listdir("/proc/self/fd"))
        nxt = 1
        for b in range(300):                 # every batch rolls; the reader follows each
            j.append_batch(items(4, size=60))
            got = r.read_batch(nxt, 100)
            assert seqs(got) == list(range(nxt, nxt + 4))
            nxt += 4
        assert j.info().segments >= 3 * MAX_OPEN_SEALED
        # writer and reader each keep at most MAX_OPEN_SEALED sealed segments (3 fds each)
        assert len(os.listdir("/proc/self/fd")) - before <= 2 * 3 * (MAX_OPEN_SEALED + 3)
        assert seqs(r.read_batch(1, 3)) == [1, 2, 3]
        r.close()
