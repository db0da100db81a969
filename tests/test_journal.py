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
from zeps.journal.retention import segments_to_delete
from zeps.protocol.codec import decode, encode_deliver
from zeps.protocol.commands import Deliver
from .property_examples import examples

SMALL = JournalConfig(segment_bytes=4096, index_interval_bytes=256, fsync="never")


class FakeClock:
    """A clock the test moves by hand (ns for Journal.open, seconds for read_from)."""

    def __init__(self, now=1_700_000_000_000_000_000):
        self.now = now

    def __call__(self):
        return self.now


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
    clock = FakeClock()
    with Journal.open(tmp_path / "s", SMALL, clock=clock) as j:
        recs = []
        for b in range(40):
            recs += j.append_batch(items(1 + b % 9, size=30 + b))
            clock.now += (0, 1, 7, 1000)[b % 4]       # some batches share a timestamp
        assert len({r.timestamp for r in recs}) == 30
        _check_seq_at(j, recs)
        _check_seq_at(JournalReader(tmp_path / "s"), recs)
        assert j.seq_at(recs[-1].timestamp + 1) == j.next_seq


def test_timestamps_never_decrease(tmp_path):
    clock = FakeClock(5_000)
    with Journal.open(tmp_path / "s", SMALL, clock=clock) as j:
        a = j.append_batch(items(3))
        assert [r.timestamp for r in a] == [5_000] * 3   # one timestamp per batch, the clock's
        clock.now = 3_000                                # the clock steps back
        b = j.append_batch(items(2))
        assert [r.timestamp for r in b] == [5_000] * 2   # the journal keeps its last timestamp
        clock.now = 6_000
        assert j.append(*items(1)[0]).timestamp == 6_000
    clock.now = 10
    with Journal.open(tmp_path / "s", SMALL, clock=clock) as j:   # also across a restart
        assert j.append_batch(items(1))[0].timestamp == 6_000
        assert j.info().newest_ts == 6_000


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
    """durable_seq under each policy: "always" and "never" follow the appends; "interval"
    follows sync() (the broker decides when to call it) and close()."""
    cfg = JournalConfig(fsync="always")
    with Journal.open(tmp_path / "a", cfg) as j:
        j.append_batch(items(3))
        assert j.durable_seq == 3
    cfg = JournalConfig(fsync="never")
    with Journal.open(tmp_path / "n", cfg) as j:
        j.append_batch(items(3))
        assert j.durable_seq == 3
        assert j.sync() == 3
    cfg = JournalConfig(fsync="interval")
    with Journal.open(tmp_path / "i", cfg) as j:
        j.append_batch(items(3))
        assert j.durable_seq == 0
        assert j.sync() == 3 and j.durable_seq == 3
        assert j.sync() == 3                             # nothing left to sync
        j.append_batch(items(2))
        assert j.durable_seq == 3
    with Journal.open(tmp_path / "i", cfg) as j:         # close synced
        assert j.durable_seq == 5


def fail_fdatasync_once(monkeypatch) -> None:
    """The next os.fdatasync fails with EIO, as a failing disk's does; the later ones work."""
    real = os.fdatasync
    failing = [True]

    def fdatasync(fd):
        if failing[0]:
            failing[0] = False
            raise OSError(5, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)


def test_a_failed_sync_is_final_for_this_opening(tmp_path, monkeypatch):
    """fdatasync fails once (EIO): the kernel may have dropped the pages it could not write, so
    a later fdatasync that succeeds proves nothing ("fsyncgate"). durable_seq stays where the
    last good sync left it, each later sync() and append raises, and the records are what the
    files hold when the stream is opened again. (The next sync() marked them durable.)"""
    cfg = JournalConfig(fsync="interval")
    j = Journal.open(tmp_path / "i", cfg)
    j.append_batch(items(3))
    assert j.sync() == 3
    j.append_batch(items(2, 3))
    fail_fdatasync_once(monkeypatch)
    with pytest.raises(JournalError, match="not known durable"):
        j.sync()
    with pytest.raises(JournalError, match="not known durable"):
        j.sync()                                         # fdatasync works again: still not
    assert j.durable_seq == 3
    with pytest.raises(JournalError, match="opened again"):
        j.append_batch(items(1, 5))
    with pytest.raises(JournalError):
        j.append("k", b"v")
    assert j.next_seq == 6
    j.close()                                            # logs that its last sync failed
    with Journal.open(tmp_path / "i", cfg) as j2:        # what the files hold
        assert j2.next_seq == 6 and j2.sync() == 5


def test_a_failed_sync_while_rolling_is_final_too(tmp_path, monkeypatch):
    """The sealed segment's fdatasync at a roll fails once: the next roll's would succeed
    without what the kernel dropped (it marked the whole segment durable). The append fails,
    and so does every later one; durable_seq stays."""
    cfg = JournalConfig(fsync="interval", segment_bytes=1024)
    j = Journal.open(tmp_path / "s", cfg)
    j.append_batch(items(10, size=60))
    fail_fdatasync_once(monkeypatch)
    with pytest.raises(JournalError, match="while rolling"):
        j.append_batch(items(10, 10, size=60))
    with pytest.raises(JournalError, match="opened again"):
        j.append_batch(items(10, 10, size=60))
    assert j.durable_seq == 0 and j.next_seq == 11
    with pytest.raises(JournalError, match="not known durable"):
        j.sync()
    j.close()


def test_roll_makes_old_segment_durable(tmp_path):
    cfg = JournalConfig(fsync="interval", segment_bytes=1024)
    with Journal.open(tmp_path / "s", cfg) as j:
        j.append_batch(items(10, size=60))
        assert j.durable_seq == 0
        j.append_batch(items(10, size=60))               # rolls: the old segment is synced
        assert j.durable_seq == 10


def test_sync_from_worker_thread(tmp_path):
    cfg = JournalConfig(fsync="interval", segment_bytes=16384)
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
            for _ in range(30):
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


def test_follow_polls_on_its_clock_until_timeout(tmp_path):
    """Follow mode measures its idle timeout on the injected clock and sleeps through the
    injected sleep: a record appended while it waits is yielded and restarts the timeout;
    then it ends after exactly `timeout` of idle (fake) time."""
    with Journal.open(tmp_path / "s", SMALL) as j:
        j.append_batch(items(2))
        r = JournalReader(tmp_path / "s")
        clock = FakeClock(100.0)
        slept = []

        def sleep(dt):
            slept.append((clock.now, dt))
            clock.now += dt
            if len(slept) == 3:
                j.append_batch(items(1, 2))              # arrives while the follower waits

        got = [x.sequence for x in r.read_from(1, follow=True, poll_interval=0.25, timeout=1.0,
                                              clock=clock, sleep=sleep)]
        assert got == [1, 2, 3]
        # idle from 100.0: 3 polls, then record 3; idle again from 100.75: 4 polls of 0.25
        assert [t for t, _ in slept] == [100.0, 100.25, 100.5, 100.75, 101.0, 101.25, 101.5]
        assert {dt for _, dt in slept} == {0.25} and clock.now == 101.75


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


def test_purge_and_retention_after_a_restart_delete_segments_never_read(tmp_path):
    """After an open, sealed segments are loaded only when used (at most 32 stay open). A
    purge of segments nobody had read since failed (fstat of no descriptor, EBADF), and so
    did every retention pass with more than 32 segments due (the 33rd pushed the first out
    of the open ones), and an append that rolled, which applies retention: the stream then
    grew without bound and that publish was refused."""
    cfg = JournalConfig(segment_bytes=1000, fsync="never")
    path = tmp_path / "s"
    with Journal.open(path, cfg) as j:
        for i in range(400):
            j.append(f"k{i}", b"x" * 100)
    with Journal.open(path, cfg) as j:
        assert j.drop_before(30) > 0 and j.first_seq <= 30
        kept = j.first_seq
    on_disk = sum(os.path.getsize(path / n) for n in os.listdir(path) if n.endswith(".log"))
    assert on_disk > 20_000
    small = JournalConfig(segment_bytes=1000, fsync="never", retention_bytes=2000)
    with Journal.open(path, small) as j:
        assert j.apply_retention() > 32 and j.info().size_bytes <= 2000
    with Journal.open(path, cfg) as j:                  # a roll applies retention too
        for _ in range(20):
            j.append("more", b"y" * 100)
    with Journal.open(path, JournalConfig(segment_bytes=1000, fsync="never",
                                          retention_bytes=3000)) as j:
        first = j.first_seq
        for _ in range(20):
            j.append("new", b"z" * 100)
        assert j.first_seq > first > kept and j.info().size_bytes <= 3000 + 1000


def test_retention_by_age_never_deletes_active(tmp_path):
    cfg = JournalConfig(segment_bytes=2048, fsync="never", retention_ms=60_000)
    clock = FakeClock()
    minute = 60_000 * 10**6
    with Journal.open(tmp_path / "s", cfg, clock=clock) as j:
        a = fill(j, 20)
        segs_before = j.info().segments
        assert segs_before > 2
        clock.now += minute
        assert j.apply_retention() == 0                   # exactly a minute old: kept
        clock.now += 1
        b = fill(j, 20)                                   # rolls: retention deletes a's segments
        assert j.first_seq > 1
        assert j.first_seq <= b[0].sequence
        assert all(r.timestamp < b[0].timestamp for r in a)
        kept = j.read_batch(1, 10_000, 1 << 30)
        assert kept[0].sequence == j.first_seq and kept[-1].sequence == b[-1].sequence
        assert j.apply_retention(now_ns=b[0].timestamp) == 0   # an explicit "now" wins
        # a minute later: everything but the active segment goes
        clock.now += minute + 1
        assert j.apply_retention() > 0
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


def test_retention_rule_deletes_a_prefix_by_size_or_age():
    """The pure rule: oldest first, by size while over the limit, by age while older than
    retention_ms at now; the first segment kept stops the pass, and later segments are not
    even looked at (they may be loaded lazily)."""
    minute = 60_000 * 10**6
    segs = [(100, 10), (100, 20), (100, minute * 9), (100, 30)]
    assert segments_to_delete(segs, 500, 250, None, 0) == ["size", "size", "size"]
    assert segments_to_delete(segs, 500, 300, None, 0) == ["size", "size"]
    assert segments_to_delete(segs, 500, 500, None, 0) == []
    assert segments_to_delete(segs, 500, None, 60_000, minute + 20) == ["age"]
    assert segments_to_delete(segs, 500, None, 60_000, minute + 21) == ["age", "age"]
    assert segments_to_delete(segs, 500, 450, 60_000, minute + 21) == ["size", "age"]
    assert segments_to_delete([(100, None)], 500, None, 1, 10**18) == []   # no record: no age
    seen = []

    def lazy():
        for s in segs:
            seen.append(s)
            yield s
    assert segments_to_delete(lazy(), 500, 350, None, 0) == ["size", "size"]
    assert seen == segs[:3]


# ---------------------------------------------------------------------------- properties

batches_st = st.lists(
    st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=300)), min_size=1, max_size=20),
    min_size=1, max_size=25)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    from zeps.journal.open_segments import MAX_OPEN_SEALED

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
    from zeps.journal.open_segments import MAX_OPEN_SEALED
    cfg = JournalConfig(segment_bytes=512, index_interval_bytes=256, fsync="never")
    with Journal.open(tmp_path / "s", cfg) as j:
        r = JournalReader(tmp_path / "s")
        before = len(os.listdir("/proc/self/fd"))
        nxt = 1
        for _ in range(300):                 # every batch rolls; the reader follows each
            j.append_batch(items(4, size=60))
            got = r.read_batch(nxt, 100)
            assert seqs(got) == list(range(nxt, nxt + 4))
            nxt += 4
        assert j.info().segments >= 3 * MAX_OPEN_SEALED
        # writer and reader each keep at most MAX_OPEN_SEALED sealed segments (3 fds each)
        assert len(os.listdir("/proc/self/fd")) - before <= 2 * 3 * (MAX_OPEN_SEALED + 3)
        assert seqs(r.read_batch(1, 3)) == [1, 2, 3]
        r.close()
