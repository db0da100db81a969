"""The columnar reader (zeps/journal/columnar.py) on its own: same records as JournalReader for
every range, block size and index state, while a writer appends and after retention; its
one-call CRC check; and zeps.journal importing without numpy/pyarrow. Damaged journals are in
test_journal_damage.py."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import google_crc32c
import pytest

from zeps.journal import BatchRecord, CorruptionError, Journal, JournalConfig, JournalReader
from zeps.protocol.batch import encode_entries
from zeps.protocol.commands import PublishBatch

pytest.importorskip("numpy")
pytest.importorskip("pyarrow")
from zeps.journal.blockcrc import block_crc_ok, first_bad_crc  # noqa: E402
from zeps.journal.columnar import read_columns  # noqa: E402
from zeps.journal.walk import walk  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rows_of(columns):
    out = []
    for c in columns:
        out += zip(c.sequence.tolist(), c.timestamp_ns.tolist(), c.key.to_pylist(),
                   c.body.to_pylist(), c.producer.to_pylist(), c.pseq.to_pylist())
    return out


def rows_from_reader(r, first=1, last=None):
    return [(x.sequence, x.timestamp, x.key, x.body, x.producer, x.pseq)
            for x in r.read_from(first, end_seq=last)]


def random_journal(path, seed=3, batches=40, cfg=None, producers=False, batch_records=False,
                   split=False):
    """Random records; with ``producers``, batches of plain records, of records with producer
    extensions (ids of 1 to 255 bytes, pseqs up to 2^64-1) and of both. With
    ``batch_records``, runs of the messages are appended as PublishBatch (one batch record
    each) between plain records; ``split`` appends the same messages one record each (the
    reference). Timestamps come from a clock that steps once per append."""
    rnd = random.Random(seed)
    cfg = cfg or JournalConfig(segment_bytes=1 << 16, index_interval_bytes=512, fsync="never")
    clock = iter(range(10**18, 2 * 10**18, 1000))
    with Journal.open(path, cfg, clock=lambda: next(clock)) as j:
        for _ in range(batches):
            items = [("é" * rnd.randint(0, 15),
                      bytes(rnd.getrandbits(8) for _ in range(rnd.choice([0, 1, 7, 100, 3000]))))
                     for _ in range(rnd.randint(1, 150))]
            share = rnd.choice([0, 0.5, 1]) if producers else 0
            prods = [(rnd.choice(["p", "ü" * 20, "x" * 255]), rnd.choice([1, 77, (1 << 64) - 1]))
                     if rnd.random() < share else None for _ in items]
            if batch_records:
                grouped, i = [], 0
                while i < len(items):
                    k = rnd.choice([1, 1, 3, 40, 150])
                    run = items[i:i + k]
                    grouped.append(PublishBatch(len(run), encode_entries(run))
                                   if k > 1 and not split else run[0])
                    if split:
                        grouped += run[1:]
                    i += k
                items, prods = grouped, None
            j.append_batch(items, prods if producers else None)


@pytest.mark.parametrize("kind", ["plain", "producers", "batches"])
def test_same_records_as_journal_reader(tmp_path, kind):
    """Odd sizes (empty keys and bodies, records bigger than the block), many segments, any
    range, any block size, records with and without producer extensions, batch records mixed
    with plain ones: exactly the records JournalReader returns (for batch records: the records
    of a journal holding the same messages one record each)."""
    d = tmp_path / "s"
    producers = kind == "producers"
    random_journal(d, producers=producers, batch_records=kind == "batches")
    r = JournalReader(d)
    n = r.last_seq
    assert r.info().segments > 5
    want = rows_from_reader(r)
    if kind == "batches":
        assert sum(isinstance(c, BatchRecord) for c in r.read_chunks(1, n, 1 << 62)) > 20
        random_journal(tmp_path / "ref", batch_records=True, split=True)
        assert rows_from_reader(JournalReader(tmp_path / "ref")) == want
    firsts = r.segment_seqs()
    ranges = [(1, None), (1, n), (7, 123), (firsts[2], firsts[3] - 1), (firsts[2] - 1, firsts[2]),
              (n, None), (n, n), (n + 1, None), (0, 3)]
    for block in (32 << 20, 5000, 64):
        for first, last in ranges:
            got = rows_of(read_columns(r, first, last, block_bytes=block))
            assert got == [w for w in want if w[0] >= first and (last is None or w[0] <= last)], \
                (block, first, last)
    # verifyCrc=false reads the same records from an intact journal
    assert rows_of(read_columns(r, 1, verify_crc=False)) == want
    assert any(w[4] is not None for w in want) == producers
    assert all(w[4] is not None for w in want) is False


def test_runs_of_equal_length_fields_with_different_producer_ids(tmp_path):
    """Records whose length fields are equal but whose producer ids differ in length (so their
    sizes differ): the walker's vectorised run check must not take them for equal-sized."""
    d = tmp_path / "s"
    cfg = JournalConfig(fsync="never", index_interval_bytes=1 << 20)   # no hints: walk alone
    recs = []
    with Journal.open(d, cfg) as j:
        for pid in ("aa", "aaa", None, "a" * 200, "b"):
            recs += j.append_batch([("k", b"v" * 10)] * 300,
                                   None if pid is None else [(pid, i + 1) for i in range(300)])
    (log,) = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".log")]
    buf = open(log, "rb").read()
    pos, after = walk(buf, len(buf))
    starts = [sum(r.size for r in recs[:i]) for i in range(len(recs))]
    assert pos.tolist() == starts and after == len(buf)
    r = JournalReader(d)
    want = rows_from_reader(r)
    assert len(want) == 1500 and len({w[4] for w in want}) == 5
    for block in (32 << 20, 4096, 100):
        assert rows_of(read_columns(r, 1, block_bytes=block)) == want


def test_follows_a_growing_journal(tmp_path):
    """Beside a live writer (rolling segments), each read returns whole records up to the
    end as it is, and the next read continues where that one ended."""
    d = tmp_path / "s"
    cfg = JournalConfig(segment_bytes=4096, index_interval_bytes=256, fsync="never")
    with Journal.open(d, cfg) as j:
        r = JournalReader(d)
        seen = []
        for b in range(30):
            j.append_batch([(f"k{b}", b"x" * (b * 13 % 200))] * (1 + b % 7))
            seen += rows_of(read_columns(r, len(seen) + 1))
            assert [s[0] for s in seen] == list(range(1, j.next_seq))
        assert seen == rows_from_reader(r)
        assert r.info().segments > 3


def test_records_deleted_by_retention_are_skipped(tmp_path, caplog):
    d = tmp_path / "s"
    cfg = JournalConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never",
                        retention_bytes=6000)
    with Journal.open(d, cfg) as j:
        for b in range(60):
            j.append_batch([(f"k{b}", b"y" * 40)] * 5)
        first = j.first_seq
        assert first > 1
        r = JournalReader(d)
        with caplog.at_level("WARNING", logger="zeps.journal"):
            got = rows_of(read_columns(r, 1, first + 2))
        assert [g[0] for g in got] == [first, first + 1, first + 2]
        assert f"records 1..{first - 1} were deleted by retention" in caplog.text
        assert rows_of(read_columns(r, 1, first - 1)) == []       # all of it deleted


def test_block_crc_check_finds_every_flipped_bit(tmp_path):
    """The one-call block check finds every flipped bit the per-record check finds, and the
    record-by-record fallback names the bad record."""
    d = tmp_path / "s"
    rnd = random.Random(5)
    with Journal.open(d, JournalConfig(fsync="never")) as j:
        j.append_batch([(f"k{i}", bytes(rnd.getrandbits(8) for _ in range(i % 300)))
                        for i in range(400)],
                       [None if i % 3 else (f"producer-{i}", i + 1) for i in range(400)])
    (log,) = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".log")]
    buf = open(log, "rb").read()
    pos, after = walk(buf, len(buf))
    assert len(pos) == 400 and after == len(buf)
    assert block_crc_ok(buf, pos, after) and block_crc_ok(buf, pos[3:7], int(pos[7]))
    assert first_bad_crc(buf, pos, after) == 400
    starts = pos.tolist()
    checked = 0
    for _ in range(300):
        i = rnd.randrange(len(buf))
        k = max(j for j, p in enumerate(starts) if p <= i)
        if i - starts[k] < 8:
            continue                          # length and crc: not covered by the CRC itself
        bad = bytearray(buf)
        bad[i] ^= 1 << rnd.randrange(8)
        assert not block_crc_ok(bytes(bad), pos, after)
        assert first_bad_crc(bytes(bad), pos, after) == k
        checked += 1
    assert checked > 200


def test_walk_ignores_hints_that_are_not_record_starts(tmp_path):
    d = tmp_path / "s"
    with Journal.open(d, JournalConfig(fsync="never")) as j:
        j.append_batch([(f"k{i}", b"z" * (i % 50)) for i in range(300)])
    (log,) = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".log")]
    buf = open(log, "rb").read()
    pos, after = walk(buf, len(buf))
    import numpy as np
    for hints in (pos[10::20] + 1, pos[::-7], np.array([len(buf) - 3]), pos[5::30]):
        p2, a2 = walk(buf, len(buf), hints.astype(np.int64))
        assert p2.tolist() == pos.tolist() and a2 == after


def test_journal_imports_without_numpy_and_pyarrow(tmp_path):
    """numpy and pyarrow belong to the spark extra: zeps.journal works without them; only the
    columnar module needs them."""
    d = tmp_path / "s"
    with Journal.open(d, JournalConfig(fsync="never")) as j:
        j.append_batch([("k", b"v")] * 3)
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "pyarrow"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, {REPO!r})
import zeps.journal
from zeps.journal import JournalReader
print(len(JournalReader({str(d)!r}).read_batch(1)))
try:
    import zeps.journal.columnar
except ImportError as e:
    print("columnar:", e)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "pyarrow")))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["3", "columnar: blocked: numpy", "[]"]


@pytest.mark.parametrize("lie", [None, "count too small", "count too large", "key not UTF-8"])
def test_long_runs_of_batch_records(tmp_path, lie):
    """Hundreds of consecutive batch records of 1 to 60 messages (their entries walked in
    parallel, batches ending at different steps): the rows of a journal holding the same
    messages one record each, for any range and block size. A batch in the middle of the run
    forged under a valid CRC (a count its entries do not fill, a key that is not UTF-8) stops
    both readers at the same record with the same CorruptionError."""
    rnd = random.Random(11)
    cfg = JournalConfig(segment_bytes=1 << 22, index_interval_bytes=4096, fsync="never")
    groups = [[("k" * rnd.randint(1, 9), bytes(rnd.getrandbits(8) for _ in
                                               range(rnd.choice([0, 3, 50, 400]))))
               for _ in range(rnd.randint(1, 60))] for _ in range(300)]
    for name, split in (("s", False), ("ref", True)):
        clock = iter(range(10**18, 2 * 10**18, 1000)).__next__
        with Journal.open(tmp_path / name, cfg, clock=clock) as j:
            for g in groups:
                j.append_batch(g if split else [PublishBatch(len(g), encode_entries(g))])
    want = rows_from_reader(JournalReader(tmp_path / "ref"))
    err = None
    if lie is not None:
        (log,) = [p for p in (tmp_path / "s").iterdir() if p.suffix == ".log"]
        data = bytearray(log.read_bytes())
        with JournalReader(tmp_path / "s") as r:
            chunks = r.read_chunks(1, 1 << 30, 1 << 62)
        pos = sum(c.size for c in chunks[:150])
        b = chunks[150]
        frame = pos + 16
        if lie == "key not UTF-8":
            data[frame + b.offsets[-2] + 1] = 0xFF
        else:
            data[frame + 19:frame + 23] = (b.count + (1 if lie == "count too large" else -1)
                                           ).to_bytes(4, "big")
        data[pos + 4:pos + 8] = google_crc32c.value(bytes(data[pos + 8:pos + b.size])
                                                    ).to_bytes(4, "big")
        log.write_bytes(bytes(data))
        want = [w for w in want if w[0] < b.sequence]
        err = (str(log), pos)
    r = JournalReader(tmp_path / "s")
    got, got_err = [], None
    try:
        for x in r.read_from(1):
            got.append((x.sequence, x.timestamp, x.key, x.body, x.producer, x.pseq))
    except CorruptionError as e:
        got_err = (e.path, e.offset)
    assert (got_err, got) == (err, want)
    n = len(want)
    for block in (32 << 20, 5000, 64):
        for first, last in ((1, None), (5, n - 3), (n // 2, n // 2), (n // 3, None)):
            rows, col_err = [], None
            try:
                for c in read_columns(r, first, last, block_bytes=block):
                    rows += rows_of([c])
            except CorruptionError as e:
                col_err = (e.path, e.offset)
            expect = [w for w in want if w[0] >= first and (last is None or w[0] <= last)]
            reaches_bad = err is not None and (last is None or last >= len(want) + 1)
            assert (rows, col_err) == (expect, err if reaches_bad else None), \
                (block, first, last)


@pytest.mark.parametrize("window", [4096, 64 << 20])
def test_a_sealed_segments_map_is_its_file(tmp_path, monkeypatch, window):
    """The columnar reader reads a sealed segment through a memory map (BlockBuffer.mapped), a
    window of the file at a time: the views give the bytes preadv gives, fewer at the end of
    the file, across windows, forwards and back, and a file that cannot be mapped (empty)
    gives None, which the reader takes as 'read it'."""
    from types import SimpleNamespace

    from zeps.journal import blockbuffer
    monkeypatch.setattr(blockbuffer, "MAP_WINDOW", window)
    data = bytes(random.Random(5).getrandbits(8) for _ in range(40_000))
    (tmp_path / "a.log").write_bytes(data)
    (tmp_path / "empty.log").write_bytes(b"")
    bb = blockbuffer.BlockBuffer()
    reads = [(3000, p) for p in range(0, 40_000, 3000)] + [
        (4096, 4096), (100, 39_990), (10, 40_000), (9000, 100), (20_000, 12_345), (1, 0)]
    for name in ("a.log", "empty.log", "a.log"):
        fd = os.open(tmp_path / name, os.O_RDONLY)
        try:
            seg = SimpleNamespace(log_path=str(tmp_path / name), ino=os.fstat(fd).st_ino, fd=fd)
            for size, pos in reads:
                view = bb.mapped(seg, size, pos)
                if name == "empty.log" or pos >= len(data):
                    assert view is None
                else:
                    assert bytes(view) == bytes(bb.read(fd, size, pos)) == data[pos:pos + size]
        finally:
            os.close(fd)


def test_a_journal_whose_sequences_pass_2_63_is_read_to_its_end(tmp_path):
    """Sequences are u64 on disk and int64 in the columns (past 2^63-1 they wrap, as
    test_journalc documents). A journal (forged: one segment based at 2^63-2) whose sequences
    cross 2^63 was read again and again from its first record (the read went on at the wrapped,
    negative, sequence): the columns end with its last record, once each (found by review)."""
    from zeps.journal.record import encode_batch
    first = (1 << 63) - 2
    parts, _ = encode_batch([("k", b"v%d" % i) for i in range(4)], first, 1000, 1 << 20)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / f"{first:020d}.log").write_bytes(b"".join(parts))
    with Journal.open(str(tmp_path / "s"), JournalConfig()) as j:
        got = [s & 0xFFFF_FFFF_FFFF_FFFF for s, *_ in rows_of(read_columns(j, first))]
        assert got == [x for x, *_ in rows_from_reader(j, first)] == list(range(first, first + 4))
