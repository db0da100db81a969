"""Batch records (issue 11): a PublishBatch appended as ONE journal record holding its
DELIVER-BATCH frame. The reference is a journal written with the same messages one record each:
every reader (read_batch, read_from, read_chunks expanded, seq_at, info, producers, a reopen, a
read-only reader) must see the same messages in both. Real files in tmp dirs, no mocks.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import google_crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeps.journal import (BatchRecord, DataDir, InvalidRecordError, Journal, JournalConfig,
                          JournalReader, Record, RecordTooLargeError)
from zeps.journal.columnar import read_columns
from zeps.journal.record import HEADER_SIZE
from zeps.protocol import codec
from zeps.protocol.batch import BadEntries, encode_entries, encode_publish_batch, entry_key, walk
from zeps.protocol.commands import DeliverBatch, PublishBatch
from .property_examples import examples

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = JournalConfig(segment_bytes=1500, index_interval_bytes=200, fsync="never")


class StepClock:
    """A clock that moves 1000 ns each time the journal asks (once per append)."""

    def __init__(self, now=1_700_000_000_000_000_000):
        self.now = now

    def __call__(self):
        self.now += 1000
        return self.now


def batch(pairs) -> PublishBatch:
    return PublishBatch(len(pairs), encode_entries(pairs))


def messages(n, tag="m", size=7):
    return [(f"{tag}.{i}", (b"%05d" % i) * (size // 5 + 1)) for i in range(n)]


def expand(chunks, seq):
    """The per-message Records of read_chunks' answer from ``seq``."""
    out = []
    for c in chunks:
        if isinstance(c, BatchRecord):
            out += c.records(max(0, seq - c.sequence))
        else:
            out.append(c)
    return out


def as_tuples(recs):
    return [(r.sequence, r.timestamp, r.frame, r.producer, r.pseq) for r in recs]


# ---------------------------------------------------------------------------- writer

def test_append_batch_returns_a_batch_record_parallel_to_items(tmp_path):
    with Journal.open(tmp_path / "s", SMALL, clock=StepClock()) as j:
        pairs = messages(10)
        out = j.append_batch([("a", b"1"), batch(pairs), ("b", b"2")], [None, None, ("p", 4)])
        assert [isinstance(r, BatchRecord) for r in out] == [False, True, False]
        assert isinstance(out[0], Record) and isinstance(out[2], Record)
        b = out[1]
        assert (b.sequence, b.count, b.last_sequence) == (2, 10, 11)
        assert out[2].sequence == 12 and j.next_seq == 13
        assert b.timestamp == out[0].timestamp == out[2].timestamp
        # the stored frame is the DELIVER-BATCH a batching subscriber gets, entries verbatim
        assert codec.decode(b.frame) == DeliverBatch(b.timestamp, 2, 10, encode_entries(pairs))
        assert [b.key(i) for i in range(10)] == [k for k, _ in pairs]
        assert [b.body(i) for i in range(10)] == [v for _, v in pairs]
        assert b.frame[b.offsets[3]:b.offsets[4]] == encode_entries(pairs[3:4])
        assert b.offsets[-1] == len(b.frame)
        assert b.size == HEADER_SIZE + len(b.frame)
        recs = b.records()
        assert [(r.sequence, r.key, r.body) for r in recs] == \
            [(2 + i, k, v) for i, (k, v) in enumerate(pairs)]
        assert [r.frame for r in recs] == [codec.encode_deliver(2 + i, k.encode(), v)
                                          for i, (k, v) in enumerate(pairs)]
        assert j.producers() == {"p": (4, 12)}


def test_a_producer_batch_is_one_record_whose_messages_take_consecutive_pseqs(tmp_path):
    """A PublishBatch appended with (pid, first pseq) is one flagged batch record: its messages
    read back with pseq, pseq+1, ...; the producer state keeps the last one at the batch's last
    sequence, also rebuilt from the log alone (snapshots deleted) and via the columnar reader."""
    pairs = messages(6)
    with Journal.open(tmp_path / "s", SMALL, clock=StepClock()) as j:
        out = j.append_batch([("a", b"1"), batch(pairs)], [("p", 3), ("p", 10)])
        b = out[1]
        assert isinstance(b, BatchRecord) and (b.producer, b.pseq, b.last_pseq) == ("p", 10, 15)
        assert b.size == HEADER_SIZE + 1 + 1 + 8 + len(b.frame)
        assert j.producers() == {"p": (15, 7)}
        j.append_batch([batch(messages(2, "n"))], [("q", 2**64 - 2)])     # ends at 2^64-1
    for name in os.listdir(tmp_path / "s"):
        if name.endswith(".producers"):
            os.unlink(tmp_path / "s" / name)
    with Journal.open(tmp_path / "s", SMALL) as j:
        assert j.producers() == {"p": (15, 7), "q": (2**64 - 1, 9)}
        recs = j.read_batch(3)
        assert [(r.sequence, r.key, r.producer, r.pseq) for r in recs] == \
            [(3 + i, k, "p", 11 + i) for i, (k, _) in enumerate(pairs[1:])] + \
            [(8, "n.0", "q", 2**64 - 2), (9, "n.1", "q", 2**64 - 1)]
        chunks = j.read_chunks(4)
        assert [(c.sequence, c.producer, c.pseq) for c in chunks] == [(2, "p", 10),
                                                                      (8, "q", 2**64 - 2)]
        assert chunks[0] == b
        cols = list(read_columns(j, 1))
        assert sum((c.pseq.to_pylist() for c in cols), []) == \
            [3] + list(range(10, 16)) + [2**64 - 2, 2**64 - 1]
        assert set(sum((c.producer.to_pylist() for c in cols), [])) == {"p", "q"}


def test_a_decoded_publish_batch_is_stored_with_the_codecs_offsets(tmp_path):
    pairs = messages(5, size=30)
    cmd = codec.decode(encode_publish_batch(pairs))
    assert cmd.offsets                        # the codec walked it
    with Journal.open(tmp_path / "s", SMALL, clock=StepClock()) as j:
        b, = j.append_batch([cmd])
        assert [b.key(i) for i in range(5)] == [k for k, _ in pairs]
        assert j.read_batch(1) == b.records()


@pytest.mark.parametrize("item, producer, error", [
    (PublishBatch(3, encode_entries(messages(2))), None, InvalidRecordError),
    (PublishBatch(0, b""), None, InvalidRecordError),
    (PublishBatch(1, b"\x02\xff\xfe\x00\x00\x00\x00"), None, InvalidRecordError),   # key not UTF-8
    (PublishBatch(2, encode_entries(messages(2)), (0, 5)), None, InvalidRecordError),
    (batch(messages(2)), ("p", 2**64 - 1), InvalidRecordError),    # pseq 2^64-1, 2^64 passes
    (batch(messages(2)), ("p", 0), InvalidRecordError),
    (batch(messages(2)), ("", 1), InvalidRecordError),
    (batch(messages(40, size=60)), None, RecordTooLargeError),
    (PublishBatch(2**32 - 1, encode_entries(messages(2))), None, InvalidRecordError),
])
def test_a_bad_batch_appends_nothing(tmp_path, item, producer, error):
    cfg = JournalConfig(max_record_bytes=2000, fsync="never")
    with Journal.open(tmp_path / "s", cfg, clock=StepClock()) as j:
        j.append_batch([("before", b"x")])
        with pytest.raises(error):
            j.append_batch([("k", b"v"), item], [None, producer])
        assert j.next_seq == 2
        assert [r.key for r in j.read_batch(1)] == ["before"]
        j.append_batch([batch(messages(2))])
        assert j.next_seq == 4
    with Journal.open(tmp_path / "s", cfg) as j:
        assert j.next_seq == 4


def test_read_inside_a_batch_starts_exactly_there(tmp_path):
    with Journal.open(tmp_path / "s", SMALL, clock=StepClock()) as j:
        j.append_batch([("a", b"1"), ("b", b"2")])
        base = j.next_seq
        j.append_batch([batch(messages(20))])
        got = j.read_batch(base + 5, max_records=4)
        assert [r.sequence for r in got] == [base + 5, base + 6, base + 7, base + 8]
        assert [r.key for r in got] == ["m.5", "m.6", "m.7", "m.8"]
        assert [r.sequence for r in j.read_from(base + 5)] == list(range(base + 5, base + 20))
        chunks = j.read_chunks(base + 5)
        assert len(chunks) == 1 and chunks[0].sequence == base and chunks[0].count == 20
        # an iterator reading 3 at a time resumes inside the batch without a gap or duplicate
        it = j.read_from(base + 1, batch_records=3)
        assert [r.sequence for r in it] == list(range(base + 1, base + 20))
        assert not it.gap


def test_read_chunks_limits_count_messages_and_bytes(tmp_path):
    with Journal.open(tmp_path / "s", SMALL, clock=StepClock()) as j:
        for _ in range(5):
            j.append_batch([batch(messages(10)), ("x", b"y")])       # 11 messages per append
        assert [c.sequence for c in j.read_chunks(1, max_records=20)] == [1, 11]
        assert [c.sequence for c in j.read_chunks(1, max_records=21)] == [1, 11, 12]
        assert [c.sequence for c in j.read_chunks(1, max_records=1)] == [1]   # at least one
        assert [c.sequence for c in j.read_chunks(5, max_records=7)] == [1, 11]
        first = j.read_chunks(1)[0]
        assert [c.sequence for c in j.read_chunks(1, max_bytes=len(first.frame))] == [1]
        assert j.read_chunks(56) == []


# ---------------------------------------------------------------------------- the property

pair_st = st.tuples(st.text(max_size=6), st.binary(max_size=40))
item_st = st.one_of(
    st.tuples(st.just("pair"), pair_st, st.none()),
    st.tuples(st.just("pair"), pair_st,
              st.tuples(st.sampled_from(["p", "q"]), st.integers(1, 1000))),
    st.tuples(st.just("batch"), st.lists(pair_st, min_size=1, max_size=25), st.none()),
    st.tuples(st.just("batch"), st.lists(pair_st, min_size=1, max_size=25),
              st.tuples(st.sampled_from(["p", "q", "\u00e9t\u00e9"]),
                        st.integers(1, 1000) | st.just(2**64 - 25))),
)
appends_st = st.lists(st.lists(item_st, min_size=1, max_size=4), min_size=1, max_size=12)


def write_both(adir, bdir, appends):
    """Journal a: the appends as given; journal b: every message as its own record."""
    with Journal.open(adir, SMALL, clock=StepClock()) as a, \
            Journal.open(bdir, SMALL, clock=StepClock()) as b:
        for items in appends:
            ai, ap, bi, bp = [], [], [], []
            for kind, x, prod in items:
                if kind == "pair":
                    ai.append(x)
                    bi.append(x)
                    ap.append(prod)
                    bp.append(prod)
                else:
                    ai.append(batch(x))
                    ap.append(prod)
                    bi += x
                    bp += [None if prod is None else (prod[0], prod[1] + i)
                           for i in range(len(x))]
            ra = a.append_batch(ai, ap)
            rb = b.append_batch(bi, bp)
            flat = []
            for r in ra:
                flat += r.records() if isinstance(r, BatchRecord) else [r]
            assert as_tuples(flat) == as_tuples(rb)


def check_same(a, b, seqs, max_records, max_bytes):
    assert (a.first_seq, a.last_seq) == (b.first_seq, b.last_seq)
    ia, ib = a.info(), b.info()
    assert (ia.first_seq, ia.last_seq, ia.oldest_ts, ia.newest_ts) == \
        (ib.first_seq, ib.last_seq, ib.oldest_ts, ib.newest_ts)
    every = as_tuples(b.read_from(1))
    assert as_tuples(a.read_from(1)) == every
    for ts in sorted({t for _, t, _, _, _ in every}):
        for probe in (ts - 1, ts, ts + 1):
            assert a.seq_at(probe) == b.seq_at(probe)
    for seq in seqs:
        assert as_tuples(a.read_batch(seq, max_records, max_bytes)) == \
            as_tuples(b.read_batch(seq, max_records, max_bytes))
        chunks = a.read_chunks(seq, max_records, max_bytes)
        got = as_tuples(expand(chunks, seq))
        want = [t for t in every if t[0] >= seq]
        assert got == want[:len(got)]
        assert bool(chunks) == bool(want)
    assert columns(a) == columns(b)


def columns(view):
    """Every row the columnar reader gives, small blocks (runs of batch records and of plain
    records cut anywhere)."""
    rows = []
    for cols in read_columns(view, 1, block_bytes=256):
        rows += zip(cols.sequence.tolist(), cols.timestamp_ns.tolist(), cols.key.to_pylist(),
                    cols.body.to_pylist(), cols.producer.to_pylist(), cols.pseq.to_pylist())
    return rows


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(appends=appends_st, seqs=st.lists(st.integers(0, 200), max_size=6),
       max_records=st.integers(1, 30), max_bytes=st.integers(1, 600))
def test_batch_records_read_like_one_record_per_message(appends, seqs, max_records, max_bytes):
    with tempfile.TemporaryDirectory() as d:
        adir, bdir = f"{d}/a", f"{d}/b"
        write_both(adir, bdir, appends)
        for sd in (adir, bdir):       # the producer state is rebuilt from the records alone
            for name in os.listdir(sd):
                if name.endswith(".producers"):
                    os.unlink(os.path.join(sd, name))
        with Journal.open(adir, SMALL) as a, Journal.open(bdir, SMALL) as b:   # reopened
            check_same(a, b, seqs, max_records, max_bytes)
            assert a.producers() == b.producers()
        with JournalReader(adir) as a, JournalReader(bdir) as b:
            check_same(a, b, seqs, max_records, max_bytes)


# ---------------------------------------------------------------------------- damage

def _journal_ending_in_a_batch(path, producer=None):
    with Journal.open(path, SMALL, clock=StepClock()) as j:
        for i in range(6):
            j.append_batch([batch(messages(4, f"b{i}")), (f"p{i}", b"plain")],
                           [("early", 1 + 4 * i), None])
        last, = j.append_batch([batch(messages(9, "tail", size=11))],
                               None if producer is None else [producer])
        before = as_tuples(j.read_batch(1, 1000))[:last.sequence - 1]
    log = sorted(p for p in path.iterdir() if p.suffix == ".log")[-1]
    size = log.stat().st_size        # the batch is the log's last record
    return last, log, size - last.size, before


@pytest.mark.parametrize("producer", [None, ("tail-producer", 100)])
@pytest.mark.parametrize("damage", ["cut", "flip"])
def test_writer_recovers_a_torn_or_flipped_batch_tail_at_every_byte(tmp_path, damage, producer):
    """The last record is a batch (with or without a producer extension): cut at every byte
    of it, or any one of its bytes flipped, the writer's recovery keeps exactly the records
    before it (and the producer state they give), and appends continue there."""
    src = tmp_path / "src"
    last, log, pos, before = _journal_ending_in_a_batch(src, producer)
    data = log.read_bytes()
    for off in range(pos, pos + last.size):
        d = tmp_path / f"{damage}{off}"
        shutil.copytree(src, d)
        damaged = d / log.name
        if damage == "cut":
            os.truncate(damaged, off)
        else:
            damaged.write_bytes(data[:off] + bytes([data[off] ^ 0x5A]) + data[off + 1:])
        with Journal.open(d, SMALL, clock=StepClock(2 * 10**18)) as j:
            assert j.next_seq == last.sequence, off
            assert as_tuples(j.read_from(1)) == before
            assert j.producers() == {"early": (24, last.sequence - 2)}
            again, = j.append_batch([batch(messages(3))])
            assert again.sequence == last.sequence
        assert damaged.stat().st_size == pos + again.size
        shutil.rmtree(d)


def test_a_forged_batch_count_is_refused_without_allocating_for_it(tmp_path):
    """A hostile file: a batch record whose CRC matches but whose count claims 2^32-1
    messages in a few bytes is a bad record (the tail recovery cuts), not a 4-billion-entry
    allocation."""
    d = tmp_path / "s"
    with Journal.open(d, SMALL, clock=StepClock()) as j:
        j.append_batch([("a", b"1")])
        forged, = j.append_batch([batch(messages(2))])
    log = next(p for p in d.iterdir() if p.suffix == ".log")
    data = bytearray(log.read_bytes())
    at = len(data) - forged.size + HEADER_SIZE
    data[at + 19:at + 23] = (2**32 - 1).to_bytes(4, "big")
    data[at - 12:at - 8] = google_crc32c.value(bytes(data[at - 8:])).to_bytes(4, "big")
    log.write_bytes(bytes(data))
    with JournalReader(d) as r:                      # a torn tail for a reader
        assert [x.key for x in r.read_from(1)] == ["a"]
        assert r.read_chunks(2) == []
    with Journal.open(d, SMALL) as j:                # cut by the writer's recovery
        assert j.next_seq == 2


def test_cli_replay_reads_batch_records_message_by_message(tmp_path):
    """``zeps replay --data-dir`` (the journal read directly, no broker) prints the messages of
    batch records one by one, from a start inside a batch."""
    dd = DataDir(tmp_path / "d", SMALL, clock=StepClock())
    j = dd.journal("orders")
    j.append_batch([("a", b"first"), batch([("eu.fr", b"x%d" % i) for i in range(6)])])
    j.append_batch([batch([("us", b"y")]), ("b", b"last")])
    dd.close()
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ZEPS_ENDPOINT", None)
    r = subprocess.run([sys.executable, "-m", "zeps", "replay", "orders", "--data-dir",
                        str(tmp_path / "d"), "--from-seq", "4", "--format", "raw"],
                       capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["x2", "x3", "x4", "x5", "y", "last"]


@settings(max_examples=examples(300), deadline=None)
@given(keys=st.lists(st.binary(max_size=6) | st.text(max_size=3).map(str.encode), min_size=1,
                     max_size=8))
def test_walk_refuses_exactly_the_first_key_that_is_not_utf8(keys):
    """batch.walk checks all keys with one decode of the keys joined by newlines; it must
    refuse a batch exactly when a key (alone) is not UTF-8, and name the first one."""
    entries = b"".join(bytes((len(k),)) + k + (1).to_bytes(4, "big") + b"b" for k in keys)
    bad = []
    for i, k in enumerate(keys):
        try:
            k.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    if bad:
        with pytest.raises(BadEntries, match=f"the key of entry {bad[0]} is not valid UTF-8"):
            walk(entries, 0, len(entries), len(keys))
    else:
        offsets = walk(entries, 0, len(entries), len(keys))
        assert [entry_key(entries, o) for o in offsets[:-1]] == [k.decode() for k in keys]
