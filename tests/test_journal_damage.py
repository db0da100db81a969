"""Both readers of a journal - JournalReader (records) and the columnar reader (Arrow columns,
what Spark reads) - against the same damaged journals.

Each case damages a copy of one journal, states what the journal's rules say a reader must
return (the good records, then the end or a CorruptionError naming file and byte offset), and
checks that each reader returns exactly that. A reader whose torn-tail or corruption rule
drifted from the other's fails here. The rules (zeps/journal/view.py):

* in the last segment, a short or bad record after the last index entry is the end for now (a
  torn tail); before it, it is corruption;
* in a sealed segment, a short or bad record is corruption;
* an index is only a hint: a missing, short or wrong one changes nothing but speed.

Every case runs on three journals: one of plain records; one where most records carry a
producer extension (pid, pseq between the timestamp and the frame, flagged in the length's top
bit) mixed with plain ones; one where most records are batch records (a DELIVER-BATCH of
several messages under one header and CRC) mixed with plain ones. In the second and third, the
damaged record is one with an extension / a batch record.
"""
from __future__ import annotations

import os
import shutil

import google_crc32c
import pytest

from zeps.journal import BatchRecord, CorruptionError, Journal, JournalConfig, JournalReader
from zeps.journal.record import (CRC_OFFSET, HEADER_SIZE, LENGTH_MASK, PID_LEN_OFFSET,
                                 PRODUCER_FLAG, TS_OFFSET, encode_batch)
from zeps.protocol.batch import DELIVER_HEAD_SIZE, encode_entries
from zeps.protocol.commands import PublishBatch

pytest.importorskip("numpy")
pytest.importorskip("pyarrow")
from zeps.journal.columnar import read_columns  # noqa: E402

CFG = JournalConfig(segment_bytes=1024, index_interval_bytes=100, fsync="never")


def producer_of(seq):
    """Mixed journal: every record but each fifth has a producer (ids of varying lengths)."""
    return None if seq % 5 == 0 else ("p" * (1 + seq % 7) + "é", seq * 3)


class Layout:
    """The undamaged journal: its messages (``recs``), its records as stored (``stored``: a
    batch record is one) and where each stored record lies. ``kind``: "plain"; "producers"
    (most records carry a producer extension, and the last one does); "batches" (most records
    are batch records of 2 to 5 messages, every other one with a producer extension, mixed
    with plain ones, and the last one is one)."""

    def __init__(self, path, kind="plain"):
        self.path = str(path)
        self.kind = kind
        producers = kind == "producers"
        clock = iter(range(10**12, 10**13, 1000))
        with Journal.open(self.path, CFG, clock=lambda: next(clock)) as j:
            self.stored = []
            b = 0

            def add(items, batch_producer=False):
                prods = [producer_of(j.next_seq + i) for i in range(len(items))]
                if batch_producer:           # the batch (first item) only
                    prods = [("b" * (1 + b % 4), 1 + 7 * b)] + [None] * (len(items) - 1)
                self.stored.extend(j.append_batch(items, prods if producers or batch_producer
                                                  else None))

            def batch(pairs):
                return PublishBatch(len(pairs), encode_entries(pairs))
            # about 6 segments, the last one holding at least 8 records
            while len(self.stored) < 80 or len(self.segment_of(j.segment_seqs()[-1])) < 8:
                pairs = [(f"k.{b}.{i}", bytes([b, i]) * (3 + (7 * b + i) % 29))
                         for i in range(1 + b % 3)]
                if kind == "batches":
                    pairs = [batch(pairs + [("x", bytes([b]) * (b % 11))])] + (
                        [("plain", b"p" * (b % 5))] if b % 4 == 0 else [])
                add(pairs, kind == "batches" and b % 2 == 1)
                b += 1
            if producers and self.stored[-1].producer is None:
                add([("last", b"with a producer")])
            if kind == "batches" and not isinstance(self.stored[-1], BatchRecord):
                add([batch([("last", b"batch"), ("of", b"two")])])
        self.recs = []
        for r in self.stored:
            self.recs += r.records() if isinstance(r, BatchRecord) else [r]
        if producers:
            assert self.stored[-1].producer is not None
            assert sum(r.producer is None for r in self.recs) >= 10
        if kind == "batches":
            assert isinstance(self.stored[-1], BatchRecord)
            assert sum(not isinstance(r, BatchRecord) for r in self.stored) >= 10
            assert sum(isinstance(r, BatchRecord) and r.producer is not None
                       for r in self.stored) >= 10
        self.logs = sorted(os.path.join(self.path, f) for f in os.listdir(self.path)
                           if f.endswith(".log"))
        self.firsts = [int(os.path.basename(p)[:-4]) for p in self.logs]
        self.where = {}                       # first seq of a stored record -> (log, position)
        for k, log in enumerate(self.logs):
            pos = 0
            for r in self.segment_of(self.firsts[k], self.firsts[k + 1]
                                     if k + 1 < len(self.logs) else None):
                self.where[r.sequence] = (log, pos)
                pos += r.size
        with open(self.logs[-1][:-4] + ".index", "rb") as f:
            data = f.read()
        self.last_index_pos = [int.from_bytes(data[i + 8:i + 16], "big")
                               for i in range(0, len(data), 16)]

    def segment_of(self, first, nxt=None):
        """The stored records from sequence ``first`` to before ``nxt``."""
        return [r for r in self.stored if r.sequence >= first and (nxt is None or r.sequence < nxt)]

    def record(self, seq):
        """The stored record that starts at ``seq``."""
        return next(r for r in self.stored if r.sequence == seq)

    def rows(self, upto):
        """The first ``upto`` messages as (sequence, timestamp, key, body, producer, pseq)."""
        return [(r.sequence, r.timestamp, r.key, r.body, r.producer, r.pseq)
                for r in self.recs[:upto]]

    def damaged(self, seq, step=1):
        """The stored record to damage near the one starting at ``seq``: in the mixed
        journal, the nearest one with a producer extension, in the batch journal the nearest
        batch record (moving by ``step`` records)."""
        i = self.stored.index(self.record(seq))
        while (self.kind == "producers" and self.stored[i].producer is None
               or self.kind == "batches" and not isinstance(self.stored[i], BatchRecord)):
            i += step
        return self.stored[i].sequence

    def segment_records(self, k):
        """First sequences of the stored records of segment ``k``."""
        nxt = self.firsts[k + 1] if k + 1 < len(self.firsts) else None
        return [r.sequence for r in self.segment_of(self.firsts[k], nxt)]


@pytest.fixture(scope="module", params=["plain", "producers", "batches"])
def base(tmp_path_factory, request):
    lay = Layout(tmp_path_factory.mktemp("journal") / "s", request.param)
    assert len(lay.logs) >= 4
    last = lay.segment_records(len(lay.logs) - 1)
    assert len(last) >= 6
    # a middle record of the last segment lies before its last index entry
    assert lay.where[last[2]][1] < lay.last_index_pos[-1]
    return lay


def outcome_records(d):
    rows, err = [], None
    with JournalReader(d) as r:
        try:
            for x in r.read_from(1, batch_records=7):
                rows.append((x.sequence, x.timestamp, x.key, x.body, x.producer, x.pseq))
        except CorruptionError as e:
            err = (e.path, e.offset)
    return rows, err


def outcome_columns(d, block_bytes):
    rows, err = [], None
    with JournalReader(d) as r:
        try:
            for c in read_columns(r, 1, block_bytes=block_bytes):
                rows += zip(c.sequence.tolist(), c.timestamp_ns.tolist(), c.key.to_pylist(),
                            c.body.to_pylist(), c.producer.to_pylist(), c.pseq.to_pylist())
        except CorruptionError as e:
            err = (e.path, e.offset)
    return rows, err


def check(d, rows, err, note):
    """Every reader returns ``rows`` then ``err`` ((path, offset) or None); an undamaged
    tail also gives a matching last_seq."""
    want = (rows, err)
    assert outcome_records(d) == want, f"JournalReader, {note}"
    assert outcome_columns(d, 32 << 20) == want, f"columnar reader, {note}"
    assert outcome_columns(d, 64) == want, f"columnar reader, 64-byte blocks, {note}"
    if err is None:
        with JournalReader(d) as r:
            assert r.last_seq == (rows[-1][0] if rows else 0), note


def copy(base, tmp_path, name):
    d = str(tmp_path / name)
    shutil.copytree(base.path, d)
    return d


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5A]))


def moved(base, d, path):
    return os.path.join(d, os.path.basename(path))


def drop_index(d, log):
    for suffix in (".index", ".timeindex"):
        os.unlink(log[:-4] + suffix)


def test_undamaged(base, tmp_path):
    d = copy(base, tmp_path, "ok")
    check(d, base.rows(len(base.recs)), None, "undamaged")


def test_torn_tail_at_every_byte_of_the_last_record(base, tmp_path):
    last = base.stored[-1]
    log, pos = base.where[last.sequence]
    for cut in range(pos, pos + last.size):
        d = copy(base, tmp_path, f"cut{cut}")
        os.truncate(moved(base, d, log), cut)
        check(d, base.rows(last.sequence - 1), None, f"cut at byte {cut}")
        shutil.rmtree(d)


@pytest.mark.parametrize("index", ["kept", "missing"])
def test_flipped_byte_in_the_last_record_is_a_torn_tail(base, tmp_path, index):
    last = base.stored[-1]
    log, pos = base.where[last.sequence]
    for off in range(pos, pos + last.size):
        d = copy(base, tmp_path, f"f{off}")
        flip(moved(base, d, log), off)
        if index == "missing":
            drop_index(d, moved(base, d, log))
        check(d, base.rows(last.sequence - 1), None, f"byte {off} flipped")
        shutil.rmtree(d)


@pytest.mark.parametrize("index", ["kept", "missing"])
def test_flipped_byte_before_the_last_index_entry_of_the_last_segment(base, tmp_path, index):
    """Corruption - unless the index is missing: then the entries rebuilt from the log stop
    at the bad record, so it is past the last entry, a torn tail (where the writer's recovery
    would cut)."""
    seq = base.damaged(base.segment_records(len(base.logs) - 1)[2])
    assert base.where[seq][1] < base.last_index_pos[-1]
    log, pos = base.where[seq]
    size = base.record(seq).size
    for off in range(pos, pos + size):
        d = copy(base, tmp_path, f"f{off}")
        flip(moved(base, d, log), off)
        if index == "kept":
            check(d, base.rows(seq - 1), (moved(base, d, log), pos), f"byte {off} flipped")
        else:
            drop_index(d, moved(base, d, log))
            check(d, base.rows(seq - 1), None, f"byte {off} flipped, index missing")
        shutil.rmtree(d)


@pytest.mark.parametrize("which", ["first", "middle", "last"])
@pytest.mark.parametrize("index", ["kept", "missing"])
def test_flipped_byte_in_an_older_segment_is_corruption(base, tmp_path, which, index):
    k = 1
    in_seg = base.segment_records(k)
    seq = {"first": in_seg[0], "middle": in_seg[len(in_seg) // 2], "last": in_seg[-1]}[which]
    seq = base.damaged(seq, -1 if which == "last" else 1)
    log, pos = base.where[seq]
    size = base.record(seq).size
    for off in range(pos, pos + size):
        d = copy(base, tmp_path, f"f{off}")
        flip(moved(base, d, log), off)
        if index == "missing":
            drop_index(d, moved(base, d, log))
        check(d, base.rows(seq - 1), (moved(base, d, log), pos), f"byte {off} flipped")
        shutil.rmtree(d)


@pytest.mark.parametrize("segment", ["older", "last"])
@pytest.mark.parametrize("lie", ["sequence", "timestamp"])
def test_valid_crc_with_a_wrong_sequence_or_timestamp_is_corruption(base, tmp_path, segment, lie):
    """A record whose CRC matches but that is not the next record (a writer bug, a duplicated
    record) or whose timestamp goes back: corruption, in a sealed segment as before the last
    index entry of the last one."""
    k = 1 if segment == "older" else len(base.logs) - 1
    in_seg = base.segment_records(k)
    seq = base.damaged(in_seg[len(in_seg) // 2] if segment == "older" else in_seg[2])
    r, prev = base.record(seq), base.recs[seq - 2]
    log, pos = base.where[seq]
    item = PublishBatch(r.count, r.frame[DELIVER_HEAD_SIZE:]) if isinstance(r, BatchRecord) \
        else (r.key, r.body)
    parts, _ = encode_batch([item], seq if lie == "timestamp" else seq - 1,
                            prev.timestamp - 1 if lie == "timestamp" else r.timestamp, 1 << 20,
                            None if r.producer is None else [(r.producer, r.pseq)])
    forged = b"".join(parts)
    assert len(forged) == r.size
    d = copy(base, tmp_path, "forged")
    with open(moved(base, d, log), "r+b") as f:
        f.seek(pos)
        f.write(forged)
    check(d, base.rows(seq - 1), (moved(base, d, log), pos), f"{lie} lie")


def test_a_record_too_long_before_a_known_bad_one_is_corruption_not_a_hang(base, tmp_path):
    """An older segment whose last record is damaged (opening finds it: scanned from the last
    index entry, it caps what may be read there) and an earlier record, before that entry,
    whose length field claims more bytes than are left: reading from the start stops at that
    record with corruption. Before, the readers saw an incomplete record, asked whether the
    segment had grown since (its file size, past the cap) and read it again, for ever."""
    k = 1
    log = base.logs[k]
    with open(log[:-4] + ".index", "rb") as f:
        data = f.read()
    last_entry = max(int.from_bytes(data[i + 8:i + 16], "big") for i in range(0, len(data), 16))
    in_seg = base.segment_records(k)
    seq = in_seg[1]
    _, pos = base.where[seq]
    _, last_pos = base.where[in_seg[-1]]
    assert pos < last_entry <= last_pos      # opening scans from the entry, not the record
    d = copy(base, tmp_path, "long")
    path = moved(base, d, log)
    flip(path, last_pos + HEADER_SIZE)
    with open(path, "r+b") as f:
        f.seek(pos)
        flags = int.from_bytes(f.read(4), "big") & ~LENGTH_MASK
        f.seek(pos)
        f.write((flags | (LENGTH_MASK - 15)).to_bytes(4, "big"))
    check(d, base.rows(seq - 1), (path, pos), "a length past the end, then a bad record")


def test_truncated_older_segment_is_corruption(base, tmp_path):
    k = 1
    seq = base.segment_records(k)[-1]
    log, pos = base.where[seq]
    for cut in (pos + 1, pos + HEADER_SIZE, pos + HEADER_SIZE + 1, pos + HEADER_SIZE + 9,
                pos + base.record(seq).size - 1):
        d = copy(base, tmp_path, f"cut{cut}")
        os.truncate(moved(base, d, log), cut)
        check(d, base.rows(seq - 1), (moved(base, d, log), pos), f"cut at byte {cut}")
        shutil.rmtree(d)


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage", "stale", "shifted"])
def test_damaged_index_changes_nothing(base, tmp_path, damage):
    d = copy(base, tmp_path, damage)
    for log in base.logs:
        for suffix in (".index", ".timeindex"):
            p = moved(base, d, log[:-4] + suffix)
            data = open(p, "rb").read()
            if damage == "missing":
                os.unlink(p)
            elif damage == "truncated":
                os.truncate(p, len(data) // 2 + 3)
            elif damage == "garbage":
                with open(p, "wb") as f:
                    f.write(bytes((i * 37 + 11) % 256 for i in range(len(data))))
            elif damage == "stale":                 # entries past the end of the log
                with open(p, "ab") as f:
                    f.write((10**9).to_bytes(8, "big") * 4)
            elif damage == "shifted" and suffix == ".index":
                # plausible (first and last entries right), every entry between one byte off
                entries = [data[i:i + 16] for i in range(0, len(data), 16)]
                with open(p, "wb") as f:
                    for i, e in enumerate(entries):
                        shift = 0 if i in (0, len(entries) - 1) else 1
                        f.write(e[:8] + (int.from_bytes(e[8:], "big") + shift).to_bytes(8, "big"))
    check(d, base.rows(len(base.recs)), None, f"index {damage}")


def _recrc(rec: bytearray) -> None:
    """Make the CRC of a forged record match it."""
    rec[CRC_OFFSET:TS_OFFSET] = google_crc32c.value(bytes(rec[TS_OFFSET:])).to_bytes(4, "big")

def _forge_target(base, tmp_path, segment: str):
    """A copy of ``base`` and the record to forge in it (in an older segment or the last):
    ``(sequence, record, copied data dir, its log path, position, the record's bytes)``."""
    k = 1 if segment == "older" else len(base.logs) - 1
    in_seg = base.segment_records(k)
    seq = base.damaged(in_seg[len(in_seg) // 2] if segment == "older" else in_seg[2])
    r = base.record(seq)
    log, pos = base.where[seq]
    d = copy(base, tmp_path, "forged")
    path = moved(base, d, log)
    with open(path, "rb") as f:
        f.seek(pos)
        rec = bytearray(f.read(r.size))
    return seq, r, d, path, pos, rec



@pytest.mark.parametrize("base", ["producers"], indirect=True)   # the journal with extensions
@pytest.mark.parametrize("segment", ["older", "last"])
@pytest.mark.parametrize("lie", ["pseq 0", "pid not UTF-8", "empty pid"])
def test_valid_crc_with_a_bad_producer_extension_is_corruption(base, tmp_path, segment, lie):
    """An extension the writer never writes (pseq 0, a producer id that is not UTF-8 or empty)
    under a matching CRC: corruption, like a wrong sequence."""
    seq, r, d, path, pos, rec = _forge_target(base, tmp_path, segment)
    plen = rec[PID_LEN_OFFSET]
    pid_at = PID_LEN_OFFSET + 1
    if lie == "pseq 0":
        rec[pid_at + plen:pid_at + plen + 8] = bytes(8)
    elif lie == "pid not UTF-8":
        rec[pid_at:pid_at + plen] = b"\xff" * plen
    else:       # the record shrinks: what follows it is misaligned, the reader stops before
        del rec[pid_at:pid_at + plen]
        rec[PID_LEN_OFFSET] = 0
    _recrc(rec)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(rec)
    check(d, base.rows(seq - 1), (path, pos), lie)


@pytest.mark.parametrize("base", ["batches"], indirect=True)     # the journal with batch records
@pytest.mark.parametrize("segment", ["older", "last"])
@pytest.mark.parametrize("lie", ["producer pseq 0", "producer pseq past 2^64-1",
                                 "producer id not UTF-8", "timestamp differs", "count too large",
                                 "count too small", "key not UTF-8"])
def test_valid_crc_with_a_bad_batch_record_is_corruption(base, tmp_path, segment, lie):
    """A batch record the writer never writes (a producer extension with pseq 0, with
    producer sequences ``pseq .. pseq + count - 1`` passing 2^64-1 or an id that is not UTF-8,
    a frame timestamp other than the header's, a count its entries do not match, a key that is
    not UTF-8) under a matching CRC: corruption."""
    seq, r, d, path, pos, rec = _forge_target(base, tmp_path, segment)
    frame = r.size - len(r.frame)                       # where the DELIVER-BATCH starts
    if lie.startswith("producer"):      # a (new) extension in front of the batch frame
        del rec[HEADER_SIZE:frame]
        frame = HEADER_SIZE
        pid = b"\xff" if lie == "producer id not UTF-8" else b"p"
        pseq = {"producer pseq 0": 0, "producer pseq past 2^64-1": (1 << 64) - r.count + 1
                }.get(lie, 1)
        assert r.count >= 2
        ext = bytes((len(pid),)) + pid + pseq.to_bytes(8, "big")
        rec[frame:frame] = ext
        rec[0:4] = ((len(rec) - HEADER_SIZE - len(ext)) | PRODUCER_FLAG).to_bytes(4, "big")
    elif lie == "timestamp differs":
        rec[frame + 3:frame + 11] = (r.timestamp + 1).to_bytes(8, "big")
    elif lie in ("count too large", "count too small"):
        rec[frame + 19:frame + 23] = (r.count + (1 if lie == "count too large" else -1)
                                      ).to_bytes(4, "big")
    else:
        key_at = frame + r.offsets[0] + 1
        assert rec[key_at - 1] > 0
        rec[key_at] = 0xFF
    _recrc(rec)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(rec)
    check(d, base.rows(seq - 1), (path, pos), lie)
