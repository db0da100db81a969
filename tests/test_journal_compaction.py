"""Compacted streams (issue 18, item 2): the rule (dirty ratio, tombstone retention), the rewrite
keeping the latest message of each key with sequences unchanged, readers that take the gaps as
normal (JournalReader, read_from, read_chunks, seq_at, the columnar reader), the crash-safe swap
(a real SIGKILL at every step, then the journal opened and checked), and the writer's index
across it. Real files in a temp dir; the crashes are child processes killed by their own
fault-injection point (``ZEPS_COMPACT_CRASH_AT``), in tests/test_journal_kv_crash.py."""
from __future__ import annotations

import os

import pytest

from zeps.journal import (CorruptionError, Journal, JournalConfig, JournalError, JournalReader,
                          compaction, settings as stream_settings)
from zeps.journal.compaction import keep, should_compact
from zeps.protocol.batch import encode_entries
from zeps.protocol.commands import PublishBatch

T0 = 1_700_000_000 * 10**9
MS = 1_000_000
RETENTION_MS = 10_000          # tombstones are kept 10 s (of the injected clock)


class Clock:
    """One ms per call: message i is at about T0 + i ms."""

    def __init__(self):
        self.t = T0

    def __call__(self):
        self.t += MS
        return self.t


def cfg(**kw):
    base = dict(segment_bytes=1500, fsync="never", index_interval_bytes=200)
    base.update(kw)
    return JournalConfig(**base)


def make_stream(path, n=600, keys=23, compact=True, seed=0):
    """A stream of ``n`` messages over ``keys`` keys (every 7th a tombstone, every 40th a batch
    record) in small segments; returns (model of the latest state, journal clock)."""
    os.makedirs(path)
    stream_settings.write(str(path), stream_settings.StreamSettings(
        compact=compact, delete_retention_ms=RETENTION_MS if compact else 0))
    clock = Clock()
    j = Journal.open(path, cfg(), clock)
    model = {}
    for i in range(n):
        k = f"k.{(i * 7 + seed) % keys}"
        body = b"" if i % 7 == 3 else b"v%d" % i * (1 + i % 5)
        if i % 40 == 11:
            items = [(f"b.{i % 3}", b"w%d" % i), (k, body), (f"b.{i}", b"only")]
            first = j.append_batch([PublishBatch(3, encode_entries(items))])[0].sequence
            for m, (bk, bb) in enumerate(items):
                model[bk] = (first + m, bb)
        else:
            r = j.append(k, body)
            model[k] = (r.sequence, body)
        if i % 50 == 20:                  # a key set, then deleted for good
            j.append(f"d.{i}", b"x")
            model[f"d.{i}"] = (j.append(f"d.{i}", b"").sequence, b"")
    j.close()
    return {k: v for k, v in model.items() if v[1]}, clock


def sealed(path):
    r = JournalReader(path)
    try:
        return r.segment_seqs()[:-1]
    finally:
        r.close()


def records(path):
    r = JournalReader(path)
    try:
        return list(r.read_from(1))
    finally:
        r.close()


def state_of(recs):
    state = {}
    for r in recs:
        if r.body:
            state[r.key] = (r.sequence, r.body)
        else:
            state.pop(r.key, None)
    return state


def batch_seqs(recs):
    """The sequences of the messages of batch records (they all share their record's
    timestamp and are written by make_stream as keys b.N, k.N, b.M)."""
    out = set()
    for r in recs:
        if r.key.startswith("b.") and r.body == b"only":
            out |= {r.sequence - 2, r.sequence - 1, r.sequence}
    return out


def leftovers(path):
    return sorted(n for n in os.listdir(path) if n.endswith((".cleaned", ".swap")))


# ----------------------------------------------------------------------------- the rules

def test_dirty_ratio_rule():
    segs = [(1, 100, 10), (50, 100, 20), (90, 100, 30), (130, 100, 40)]
    # nothing cleaned yet: all dirty
    assert should_compact(segs, 1, 0.5, 0, 100).count == 4
    # cleaned up to 90: dirty 200 of 400 = 0.5
    d = should_compact(segs, 90, 0.5, 0, 100)
    assert (d.count, d.dirty, d.total, d.ratio) == (4, 200, 400, 0.5)
    assert should_compact(segs, 90, 0.6, 0, 100).count == 0
    assert should_compact(segs, 200, 0.1, 0, 100).count == 0           # nothing new
    # min lag: segments whose newest record is younger are not cleanable (nor what follows)
    d = should_compact(segs, 1, 0.5, 75, 100)                        # cut-off at 25
    assert (d.count, d.total) == (2, 200)
    assert should_compact([], 1, 0.5, 0, 100).count == 0


def test_keep_rule():
    assert keep(10, 10, False, 0, 100, False)           # the latest value
    assert not keep(10, 9, False, 0, 100, False)        # superseded
    assert not keep(10, 9, True, 500, 100, False)       # a superseded tombstone
    assert keep(10, 10, True, 100, 100, False)          # a tombstone within delete retention
    assert not keep(10, 10, True, 99, 100, False)       # past it
    assert keep(10, 10, True, 99, 100, True)            # past it, but an older value is left


def test_settings_validate_and_survive_a_round_trip(tmp_path):
    s = stream_settings.StreamSettings(compact=True, delete_retention_ms=5,
                                       min_cleanable_dirty_ratio=0.25)
    stream_settings.write(str(tmp_path), s)
    assert stream_settings.read(str(tmp_path)) == s
    assert s.dirty_ratio == 0.25 and s.delete_retention_ns == 5 * MS
    assert stream_settings.StreamSettings(compact=True).dirty_ratio == 0.5
    assert s.journal_config(JournalConfig()).compact
    for bad in (dict(compact=1), dict(compact=True, min_cleanable_dirty_ratio=1.5),
                dict(compact=True, delete_retention_ms=-1), dict(delete_retention_ms=5)):
        with pytest.raises(ValueError):
            stream_settings.StreamSettings(**bad)
    assert not s.same_limits(stream_settings.StreamSettings())


# ----------------------------------------------------------------------------- compacting

def test_compaction_keeps_the_latest_message_of_every_key_with_its_sequence(tmp_path):
    path = tmp_path / "s"
    model, clock = make_stream(path)
    before = records(path)
    seals = sealed(path)
    assert len(seals) > 10
    size_before = sum(os.path.getsize(path / n) for n in os.listdir(path) if n.endswith(".log"))
    # now: the tombstones of the last ~300 ms of messages are younger than delete retention
    now = clock.t + (RETENTION_MS - 300) * MS
    res = compaction.compact(str(path), seals, now_ns=now)
    assert res.segments and res.removed > 0 and res.tombstones_removed > 0
    after = records(path)
    size_after = sum(os.path.getsize(path / n) for n in os.listdir(path) if n.endswith(".log"))
    assert size_after < size_before
    # sequences unchanged: the records left are records that were there, byte for byte
    by_seq = {r.sequence: r for r in before}
    assert all(by_seq[r.sequence] == r for r in after)
    assert len(after) < len(before)
    assert state_of(after) == state_of(before) == model
    # every superseded plain record of a sealed segment went; a young tombstone stayed; the
    # active segment was not touched
    active = JournalReader(path).segment_seqs()[-1]
    in_batch = batch_seqs(before)
    latest = {}            # over the sealed segments (what compaction knows)
    for r in before:
        if r.sequence < active:
            latest[r.key] = r.sequence
    kept = {r.sequence for r in after}
    horizon = now - RETENTION_MS * MS
    for r in before:
        if r.sequence >= active:
            assert r.sequence in kept
        elif r.sequence == latest[r.key] and r.body:
            assert r.sequence in kept
        elif not r.body and r.sequence == latest[r.key] and r.timestamp >= horizon:
            assert r.sequence in kept
        elif r.sequence < latest[r.key] and r.sequence not in in_batch:
            assert r.sequence not in kept
    assert compaction.read_checkpoint(str(path)) == active
    assert leftovers(path) == []


def test_compaction_is_idempotent_and_expires_tombstones_later(tmp_path):
    path = tmp_path / "s"
    model, clock = make_stream(path)
    seals = sealed(path)
    compaction.compact(str(path), seals, now_ns=T0)            # every tombstone is young
    first = records(path)
    assert any(not r.body for r in first)
    again = compaction.compact(str(path), seals, now_ns=T0)
    assert again.segments == [] and records(path) == first
    later = compaction.compact(str(path), seals, now_ns=clock.t + 10**6 * MS)
    assert later.tombstones_removed > 0
    active = JournalReader(path).segment_seqs()[-1]
    left = records(path)
    in_batch = batch_seqs(left)
    for t in left:
        if not t.body and t.sequence < active and t.sequence not in in_batch:
            # a tombstone left: only for an older value kept inside a batch record
            assert any(o.key == t.key and o.sequence < t.sequence and o.sequence in in_batch
                       for o in left)
    assert sum(1 for t in left if not t.body) < sum(1 for t in first if not t.body)
    assert state_of(left) == model


def test_a_tombstone_stays_while_an_older_value_of_its_key_is_kept(tmp_path):
    """A batch record is kept whole while any of its messages is the latest of its key, so a
    superseded value inside it stays readable; a later tombstone of that key must then stay too,
    or the old value would come back."""
    path = tmp_path / "s"
    os.makedirs(path)
    stream_settings.write(str(path), stream_settings.StreamSettings(compact=True))
    clock = Clock()
    j = Journal.open(path, cfg(segment_bytes=300), clock)
    j.append_batch([PublishBatch(2, encode_entries([("x", b"old"), ("y", b"kept")]))])
    for i in range(20):
        j.append(f"filler{i}", b"f" * 20)
    j.append("x", b"")                     # tombstone of x
    for i in range(20):
        j.append(f"more{i}", b"f" * 20)
    j.close()
    compaction.compact(str(path), sealed(path), now_ns=clock.t + 10**9 * MS)
    recs = records(path)
    assert [r.body for r in recs[:2]] == [b"old", b"kept"]
    assert any(r.key == "x" and not r.body for r in recs)
    assert "x" not in state_of(recs)


def test_only_compacted_streams_are_compacted_and_readers_stay_strict_elsewhere(tmp_path):
    path = tmp_path / "s"
    make_stream(path, compact=False)
    with pytest.raises(JournalError, match="not a compacted stream"):
        compaction.compact(str(path), sealed(path))
    assert compaction.run(str(path), sealed(path)) is None
    # a gap in a stream that is not compacted is corruption, as before
    other = tmp_path / "c"
    make_stream(other)
    compaction.compact(str(other), sealed(other), now_ns=T0)
    os.unlink(other / "SETTINGS.json")
    with pytest.raises(CorruptionError, match="where .* was expected"):
        records(other)


def test_run_follows_the_dirty_ratio(tmp_path):
    path = tmp_path / "s"
    make_stream(path)
    stream_settings.write(str(path), stream_settings.StreamSettings(
        compact=True, min_cleanable_dirty_ratio=0.9))
    res = compaction.run(str(path), sealed(path), now_ns=T0)
    assert res is not None and res.segments                   # all dirty at first
    assert compaction.run(str(path), sealed(path), now_ns=T0) is None   # nothing new since
    clock = Clock()
    clock.t = T0 + 10**6 * MS
    j = Journal.open(path, cfg(), clock)
    for i in range(100):
        j.append(f"k.{i % 5}", b"new")
    j.close()
    assert compaction.run(str(path), sealed(path), now_ns=clock.t) is None   # below 0.9
    stream_settings.write(str(path), stream_settings.StreamSettings(
        compact=True, min_cleanable_dirty_ratio=0.1))
    assert compaction.run(str(path), sealed(path), now_ns=clock.t).segments


# ----------------------------------------------------------------------------- readers

def test_readers_take_the_gaps_as_normal(tmp_path):
    pytest.importorskip("pyarrow")
    from zeps.journal.columnar import read_columns
    path = tmp_path / "s"
    model, clock = make_stream(path)
    compaction.compact(str(path), sealed(path), now_ns=T0)
    r = JournalReader(path)
    recs = list(r.read_from(1))
    seqs = [x.sequence for x in recs]
    kept = set(seqs)
    # read_from a removed sequence starts at the next kept one; no gap, counted as compacted
    removed = [s for s in range(1, seqs[-1]) if s not in kept]
    for s in removed[::17]:
        it = r.read_from(s)
        first = next(it)
        assert first.sequence == min(q for q in seqs if q >= s)
        assert not it.gap
        rest = list(it)
        assert [x.sequence for x in rest] == [q for q in seqs if q > first.sequence]
        assert it.compacted == sum(1 for q in range(s, seqs[-1]) if q not in kept)
        assert r.read_batch(s, 3) == [x for x in recs if x.sequence >= s][:3]
    it = r.read_from(1)
    assert len(list(it)) == len(recs) and not it.gap and it.compacted == len(removed)
    # chunks: batch records whole, the same messages
    chunks = []
    seq = 1
    while True:
        got = r.read_chunks(seq, 50)
        if not got:
            break
        chunks += got
        seq = got[-1].last_sequence + 1
    flat = []
    for c in chunks:
        flat += c.records() if hasattr(c, "records") else [c]
    assert flat == recs
    # the columnar reader: the same rows
    cols = list(read_columns(r, 1))
    assert [int(s) for c in cols for s in c.sequence] == seqs
    assert [b for c in cols for b in c.body.to_pylist()] == [x.body for x in recs]
    part = list(read_columns(r, removed[3], removed[40]))
    assert [int(s) for c in part for s in c.sequence] == [q for q in seqs
                                                         if removed[3] <= q <= removed[40]]
    # seq_at: reading from its answer gives the first record at or after the time
    for x in recs[::9]:
        s = r.seq_at(x.timestamp)
        assert next(iter(r.read_from(s))).timestamp >= x.timestamp
        assert s <= x.sequence
    info = r.info()
    assert (info.first_seq, info.last_seq) == (1, seqs[-1])
    r.close()
    # the writer reads the same
    j = Journal.open(path, cfg(), Clock())
    assert list(j.read_from(1)) == recs
    for k, (s, body) in model.items():
        assert (j.latest(k).sequence, j.latest(k).body) == (s, body)
    j.close()


def test_a_stale_index_beside_a_compacted_log_is_found_out(tmp_path):
    """An index describing the old log (the moment between step 3's renames, or one a reader
    rebuilt from the old log) is checked against the records, never followed."""
    path = tmp_path / "s"
    make_stream(path)
    seals = sealed(path)
    old = {n: (path / n).read_bytes() for n in os.listdir(path)
           if n.endswith((".index", ".timeindex"))}
    before = records(path)
    compaction.compact(str(path), seals, now_ns=T0)
    after = records(path)
    for n, data in old.items():
        (path / n).write_bytes(data)
    r = JournalReader(path)
    assert list(r.read_from(1)) == after
    for x in before[::5]:
        got = r.read_batch(x.sequence, 1)
        assert got == [y for y in after if y.sequence >= x.sequence][:1]
    r.close()
    j = Journal.open(path, cfg(), Clock())
    assert list(j.read_from(1)) == after
    j.close()


def test_a_reader_across_a_compaction_continues_in_the_new_file(tmp_path):
    """A reader inside a sealed segment when compaction replaces it: while it has the old file
    open it reads the old records; once the segment is closed and opened again, its cursor
    (a position in the old file) is found out by the inode and the read located again."""
    path = tmp_path / "s"
    make_stream(path)
    before = records(path)
    r = JournalReader(path)
    it = r.read_from(1, batch_records=5)
    got = [next(it) for _ in range(12)]
    compaction.compact(str(path), sealed(path), now_ns=T0)
    for seg in r._segs:
        seg.unload()                                # as the LRU of open segments would
    got += list(it)
    seqs = [x.sequence for x in got]
    assert seqs == sorted(set(seqs))
    by_seq = {x.sequence: x for x in before}
    assert all(by_seq[x.sequence] == x for x in got)
    assert {x.sequence for x in records(path)} <= set(seqs)
    r.close()


def test_damage_in_a_compacted_segment_is_still_corruption(tmp_path):
    pytest.importorskip("pyarrow")
    from zeps.journal.columnar import read_columns
    path = tmp_path / "s"
    make_stream(path)
    res = compaction.compact(str(path), sealed(path), now_ns=T0)
    seg = next(q for q in res.segments
               if os.path.getsize(path / f"{q:020d}.log") > 100)
    log_path = path / f"{seg:020d}.log"
    data = bytearray(log_path.read_bytes())
    data[30] ^= 0xFF
    log_path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError):
        records(path)
    with pytest.raises(CorruptionError):
        r = JournalReader(path)
        list(read_columns(r, 1))


# ----------------------------------------------------------------------------- the writer

def test_the_writers_index_across_a_compaction(tmp_path):
    """The broker's journal stays open while compaction runs beside it (here in this thread):
    its index still gives every key's latest message (positions moved: the lookup finds them
    through the sparse index), it keeps appending, and reopening it rebuilds the same state."""
    path = tmp_path / "s"
    model, clock = make_stream(path)
    j = Journal.open(path, cfg(), clock)
    for k, (_s, body) in model.items():          # read before too: the last batch read is kept
        assert j.latest(k).body == body
    res = compaction.compact(str(path), j.segment_seqs()[:-1], now_ns=clock.t)
    j.reload_segments(res.segments)
    for k, (s, body) in model.items():
        rec = j.latest(k)
        assert (rec.sequence, rec.body) == (s, body)
    for i in range(300):
        r = j.append(f"k.{i % 4}", b"after%d" % i)
        model[f"k.{i % 4}"] = (r.sequence, b"after%d" % i)
    assert dict(j.snapshot()) == {k: s for k, (s, _) in model.items()}
    j.close()
    os.unlink(next(path / n for n in os.listdir(path) if n.endswith(".keys")))
    j = Journal.open(path, cfg(), Clock())               # rebuilt from the compacted log
    assert {k: (j.latest(k).sequence, j.latest(k).body) for k in model} == model
    assert j.key_count() == len(model)
    j.close()


def open_compacted(path, **config):
    """A new compacted stream's writer at ``path`` (``config``: :func:`cfg`'s), and its clock."""
    os.makedirs(path)
    stream_settings.write(str(path), stream_settings.StreamSettings(compact=True))
    clock = Clock()
    return Journal.open(path, cfg(**config), clock), clock


def test_retention_deletes_a_segment_compaction_emptied(tmp_path):
    path = tmp_path / "s"
    j, clock = open_compacted(path, segment_bytes=300, retention_ms=50)
    for i in range(40):
        j.append("same", b"v%d" % i)
    res = compaction.compact(str(path), j.segment_seqs()[:-1], now_ns=clock.t)
    j.reload_segments(res.segments)
    assert os.path.getsize(path / f"{j.first_seq:020d}.log") == 0
    clock.t += 10**6 * MS
    assert j.apply_retention() > 0
    assert j.latest("same").body == b"v39"
    j.close()


def test_a_second_compaction_waits_for_none(tmp_path):
    path = tmp_path / "s"
    make_stream(path)
    lock = compaction._take_lock(str(path))
    try:
        with pytest.raises(JournalError, match="is running"):
            compaction.compact(str(path), sealed(path))
        assert compaction.run(str(path), sealed(path)) is None
    finally:
        os.close(lock)


def test_the_writers_size_is_its_files_and_a_sealed_file_is_stat_ed_once(tmp_path,
                                                                         monkeypatch):
    """``info()`` stat'ed every unloaded sealed segment each time it was asked (for each
    stream of ``/streamz``, and for each consumer of ``/consumerz``, which now asks only
    ``newest_ts``). The writer stats each sealed file once; the size it reports is still the
    files', after a compaction rewrote them (``reload_segments``) and after appends."""
    path = tmp_path / "s"
    model, clock = make_stream(path)
    j = Journal.open(path, cfg(), clock)

    def on_disk():
        return sum(os.path.getsize(path / n) for n in os.listdir(path) if n.endswith(".log"))

    assert j.info().size_bytes == on_disk() and len(j.segment_seqs()) > 10
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: stats.append(p) or real_stat(p, *a, **k))
    size = j.info().size_bytes
    monkeypatch.setattr(os, "stat", real_stat)
    assert size == on_disk() and stats == []
    res = compaction.compact(str(path), j.segment_seqs()[:-1], now_ns=clock.t)
    j.reload_segments(res.segments)
    assert j.info().size_bytes == on_disk() < size
    for i in range(50):
        j.append(f"k.{i % 4}", b"after%d" % i)
    assert j.info().size_bytes == on_disk()
    newest = j.info().newest_ts
    assert j.newest_ts == newest > 0
    j.close()


def test_retention_waits_while_a_compaction_runs(tmp_path, monkeypatch):
    """A compaction runs in another process while the writer appends; a roll applies
    retention. Retention deleted a segment the compaction had read, and the compaction then
    put its files back: records retention had removed were read again (the writer's first
    sequence 28, on disk from 1). Retention now waits while the compaction holds its lock,
    and deletes at its next pass."""
    path = tmp_path / "s"
    j, clock = open_compacted(path, segment_bytes=300, retention_bytes=1500)
    for i in range(20):
        j.append("same", b"v%03d" % i)
    sealed = j.segment_seqs()[:-1]
    real_step = compaction._step

    def step(name):                     # the writer appends meanwhile (here, in its middle)
        if name == "map":
            for i in range(20, 60):
                j.append(f"other{i}", b"w%03d" % i)
        real_step(name)

    monkeypatch.setattr(compaction, "_step", step)
    res = compaction.compact(str(path), sealed, now_ns=clock.t)
    monkeypatch.setattr(compaction, "_step", real_step)
    j.reload_segments(res.segments)
    on_disk = sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".log"))
    assert on_disk == j.segment_seqs()                    # nothing put back
    assert j.apply_retention() > 0                        # its next pass
    assert j.info().size_bytes <= 1500 + 300
    on_disk = sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".log"))
    assert on_disk == j.segment_seqs()
    j.close()


def test_a_deleted_key_stays_deleted_in_the_index_rebuilt_after_a_crash(tmp_path):
    """A key's tombstone after the last-value checkpoint, removed by compaction (older than
    the delete retention): the index rebuilt after a crash from that checkpoint still held the
    key (``latest_seq``, the snapshot's keys, ``key_count``), and its next checkpoint kept it
    for good. Compaction keeps the tombstones a checkpoint on disk has not seen."""
    import shutil
    path = tmp_path / "s"
    os.makedirs(path)
    stream_settings.write(str(path), stream_settings.StreamSettings(compact=True,
                                                                    delete_retention_ms=1))
    clock = Clock()
    config = cfg(segment_bytes=300, index_interval_bytes=100)
    j = Journal.open(path, config, clock)
    j.append("K", b"value-of-K")
    for i in range(10):
        j.append(f"f{i}", b"filler%d" % i)
    j.close()                                   # a clean close: a key checkpoint
    clock.t += 10**12
    j = Journal.open(path, config, clock)
    j.append("K", b"")                          # K deleted, after the checkpoint
    for i in range(30):
        j.append(f"g{i}", b"filler%d" % i)
    res = compaction.compact(str(path), j.segment_seqs()[:-1], now_ns=clock.t + 10**12)
    j.reload_segments(res.segments)
    assert res.removed > 0 and j.latest_seq("K") is None
    crashed = tmp_path / "crashed"               # the files as a crash leaves them
    shutil.copytree(path, crashed, ignore=shutil.ignore_patterns("LOCK"))
    j.close()
    j = Journal.open(crashed, config, clock)
    try:
        assert j.latest_seq("K") is None and j.latest("K") is None
        assert [k for k, _ in j.snapshot("K")] == []
        assert j.key_count() == 40
    finally:
        j.close()


def test_a_bounded_read_of_a_compacted_stream_stops_at_its_end(tmp_path):
    """``read_from(start, end_seq)`` over a compacted stream's gaps: it asked for as many
    records as the range has sequences and yielded them all, from beyond the range (``zeps
    replay --to-seq 5`` printed sequences 12 to 57). Every range now yields exactly the kept
    records within it."""
    path = tmp_path / "s"
    _model, clock = make_stream(path)
    j = Journal.open(path, cfg(), clock)
    compaction.compact(str(path), j.segment_seqs()[:-1], now_ns=clock.t + 10**15)
    j.close()
    r = JournalReader(path)
    every = [x.sequence for x in r.read_from(1)]
    assert len(every) < every[-1]                       # gaps
    for start, end in ((1, 5), (1, 40), (15, 35), (every[3], every[3]), (every[3], every[9])):
        got = [x.sequence for x in r.read_from(start, end_seq=end)]
        assert got == [s for s in every if start <= s <= end], (start, end)
    r.close()
