"""Crash recovery, corruption reporting and index rebuilding, on real files."""
from __future__ import annotations

import bisect
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeps.journal import CorruptionError, Journal, JournalConfig, JournalReader
from zeps.journal.record import encode_batch
from .property_examples import examples

CFG = JournalConfig(segment_bytes=4096, index_interval_bytes=64, fsync="never")


def items(n, start=0, size=20):
    return [(f"k.{i}", (b"%06d" % i) * (size // 6 + 1)) for i in range(start, start + n)]


def build(path, batches=40, per=5, cfg=CFG):
    recs = []
    with Journal.open(path, cfg) as j:
        for b in range(batches):
            recs += j.append_batch(items(per, b * per, 20 + b % 17))
    return recs


def logs(path):
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))


def positions(recs, first_seq):
    """Byte position of each record of the segment starting at first_seq."""
    out, pos = {}, 0
    for r in recs:
        if r.sequence >= first_seq:
            out[r.sequence] = pos
            pos += r.size
    return out


def check_recovered(path, recs, n_whole, cfg=CFG):
    with Journal.open(path, cfg) as j:
        assert j.next_seq == n_whole + 1
        assert j.read_batch(1, 10**6, 1 << 40) == recs[:n_whole]
        new = j.append_batch(items(2, 999))
        assert [r.sequence for r in new] == [n_whole + 1, n_whole + 2]   # never reused
    with Journal.open(path, cfg) as j:                  # and the result is stable
        assert j.read_batch(1, 10**6, 1 << 40) == recs[:n_whole] + new


def test_torn_tail_at_every_byte(tmp_path):
    """Cut the last batch (3 records) at every byte offset: recovery keeps exactly the
    records that are whole, truncates the rest, and the sequence continues after them."""
    orig = tmp_path / "orig"
    recs = build(orig)
    with Journal.open(orig, CFG) as j:
        recs += j.append_batch(items(3, 500, 30))
    last_log = logs(orig)[-1]
    first = int(os.path.basename(last_log)[:-4])
    pos = positions(recs, first)
    size = os.path.getsize(last_log)
    ends = [pos[r.sequence] + r.size for r in recs if r.sequence >= first]
    start = pos[recs[-3].sequence]
    assert ends[-1] == size
    for cut in range(start, size):
        d = tmp_path / f"c{cut}"
        shutil.copytree(orig, d)
        log = os.path.join(d, os.path.basename(last_log))
        os.truncate(log, cut)
        n_whole = first - 1 + bisect.bisect_right(ends, cut)
        with Journal.open(d, CFG) as j:
            assert j.next_seq == n_whole + 1, cut
            assert os.path.getsize(log) == ends[n_whole - first] if n_whole >= first else 0
            assert j.read_batch(n_whole - 2, 10) == recs[n_whole - 3:n_whole]
        shutil.rmtree(d)
    check_recovered(orig, recs, len(recs))


def test_flipped_byte_in_last_record_is_cut(tmp_path):
    orig = tmp_path / "orig"
    recs = build(orig)
    last_log = logs(orig)[-1]
    size = os.path.getsize(last_log)
    start = size - recs[-1].size
    for off in range(start, size):
        d = tmp_path / f"f{off}"
        shutil.copytree(orig, d)
        log = os.path.join(d, os.path.basename(last_log))
        with open(log, "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x5A]))
        with Journal.open(d, CFG) as j:
            assert j.last_seq == len(recs) - 1, off
            assert os.path.getsize(log) == start
        shutil.rmtree(d)
    # and the full check once
    d = tmp_path / "again"
    shutil.copytree(orig, d)
    with open(logs(d)[-1], "r+b") as f:
        f.seek(size - 1)
        f.write(b"\x00" if recs[-1].frame[-1] else b"\x01")
    check_recovered(d, recs, len(recs) - 1)


def test_valid_record_with_wrong_sequence_is_cut(tmp_path):
    d = tmp_path / "s"
    recs = build(d)
    parts, _ = encode_batch(items(1), len(recs) + 5, recs[-1].timestamp, 1 << 20)
    with open(logs(d)[-1], "ab") as f:                 # CRC-valid, but not the next sequence
        f.write(b"".join(parts))
    check_recovered(d, recs, len(recs))


def test_garbage_and_zeros_after_tail(tmp_path):
    d = tmp_path / "s"
    recs = build(d)
    with open(logs(d)[-1], "ab") as f:
        f.write(b"\x00" * 5000)                       # preallocated / zero-filled tail
    check_recovered(d, recs, len(recs))
    d2 = tmp_path / "s2"
    recs2 = build(d2)
    with open(logs(d2)[-1], "ab") as f:
        f.write(os.urandom(3000))
    check_recovered(d2, recs2, len(recs2))


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_corruption_in_old_segment_is_reported(tmp_path, which):
    d = tmp_path / "s"
    recs = build(d)
    seg_logs = logs(d)
    assert len(seg_logs) >= 4
    victim = seg_logs[1]
    first = int(os.path.basename(victim)[:-4])
    nxt = int(os.path.basename(seg_logs[2])[:-4])
    in_seg = list(range(first, nxt))
    bad = {"first": in_seg[0], "middle": in_seg[len(in_seg) // 2], "last": in_seg[-1]}[which]
    pos = positions(recs, first)[bad]
    with open(victim, "r+b") as f:                    # flip a byte of the body
        f.seek(pos + recs[bad - 1].size - 2)
        b = f.read(1)
        f.seek(pos + recs[bad - 1].size - 2)
        f.write(bytes([b[0] ^ 0xFF]))
    for view in (Journal.open(d, CFG), JournalReader(d)):
        got = []
        with pytest.raises(CorruptionError) as ei:
            for r in view.read_from(1, batch_records=4):
                got.append(r)
        assert got == recs[:bad - 1]                   # the good part before it reads fine
        e = ei.value
        assert e.path == victim and e.offset == pos
        assert victim in str(e) and f"byte offset {pos}" in str(e)
        with pytest.raises(CorruptionError):
            view.read_batch(bad, 1)
        for s in in_seg:                               # before it: readable one by one
            if s == bad:
                break
            assert view.read_batch(s, 1) == [recs[s - 1]]
        assert view.read_batch(nxt, 3) == recs[nxt - 1:nxt + 2]   # later segments fine
        assert view.read_batch(len(recs), 1) == [recs[-1]]
        if isinstance(view, Journal):
            assert view.append_batch(items(1))[0].sequence == len(recs) + 1
            view.close()


def test_torn_sealed_segment_is_reported(tmp_path):
    d = tmp_path / "s"
    build(d)
    victim = logs(d)[1]
    first = int(os.path.basename(victim)[:-4])
    size = os.path.getsize(victim)
    os.truncate(victim, size - 5)                      # a sealed segment lost its tail
    with Journal.open(d, CFG) as j:
        with pytest.raises(CorruptionError, match="byte offset") as ei:
            list(j.read_from(first))
        assert ei.value.path == victim


def _index_files(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))
            if f.endswith((".index", ".timeindex"))}


def _check_all(view, recs):
    for s in range(1, len(recs) + 1, 3):
        assert view.read_batch(s, 2) == recs[s - 1:s + 1]
    tss = [r.timestamp for r in recs]
    for r in recs[::5]:
        for t in (r.timestamp - 1, r.timestamp, r.timestamp + 1):
            assert view.seq_at(t) == bisect.bisect_left(tss, t) + 1


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage", "odd_size", "stale"])
def test_index_damage_is_rebuilt(tmp_path, damage):
    d = tmp_path / "s"
    recs = build(d)
    originals = _index_files(d)
    assert len(originals) >= 8
    for name, data in originals.items():
        p = os.path.join(d, name)
        if damage == "delete":
            os.unlink(p)
        elif damage == "truncate":
            os.truncate(p, (len(data) // 32) * 16)
        elif damage == "garbage":
            with open(p, "wb") as f:
                f.write(os.urandom(len(data)))
        elif damage == "odd_size":
            os.truncate(p, len(data) - 7)
        elif damage == "stale":                      # entries past the end of the log
            with open(p, "ab") as f:
                f.write((10**9).to_bytes(8, "big") * 4)
    # a read-only reader copes without writing anything
    r = JournalReader(d)
    _check_all(r, recs)
    r.close()
    with Journal.open(d, CFG) as j:
        _check_all(j, recs)
        assert j.info().last_seq == len(recs)
    assert _index_files(d) == originals               # rebuilt exactly as written


def test_empty_last_segment(tmp_path):
    d = tmp_path / "s"
    recs = build(d)
    empty = os.path.join(d, f"{len(recs) + 1:020d}.log")
    open(empty, "wb").close()                           # crash right after a roll
    with Journal.open(d, CFG) as j:
        assert (j.next_seq, j.last_seq) == (len(recs) + 1, len(recs))
        assert j.info().newest_ts == recs[-1].timestamp
        assert j.read_batch(len(recs), 5) == [recs[-1]]
        assert j.append_batch(items(1))[0].sequence == len(recs) + 1
        assert os.path.getsize(empty) > 0
    assert JournalReader(d).last_seq == len(recs) + 1


def test_reader_sees_torn_tail_as_end(tmp_path):
    d = tmp_path / "s"
    recs = build(d)
    with open(logs(d)[-1], "ab") as f:
        f.write(os.urandom(100))                      # a writer died mid-write
    r = JournalReader(d)
    assert r.last_seq == len(recs)
    assert list(r.read_from(1)) == recs               # the end, not corruption
    with Journal.open(d, CFG) as j:                    # the next writer cuts it
        j.append_batch(items(2))
    assert [x.sequence for x in r.read_from(len(recs))] == [len(recs), len(recs) + 1,
                                                            len(recs) + 2]


batches_st = st.lists(st.integers(1, 12), min_size=1, max_size=30)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=batches_st, cut_frac=st.floats(0, 1), seg=st.sampled_from([600, 4096]),
       junk=st.binary(max_size=40))
def test_property_random_truncation_recovers_a_prefix(sizes, cut_frac, seg, junk):
    cfg = JournalConfig(segment_bytes=seg, index_interval_bytes=100, fsync="never")
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "s")
        recs = []
        with Journal.open(d, cfg) as j:
            for i, n in enumerate(sizes):
                recs += j.append_batch(items(n, len(recs), 5 + 7 * (i % 5)))
        last_log = logs(d)[-1]
        first = int(os.path.basename(last_log)[:-4])
        pos = positions(recs, first)
        ends = [pos[r.sequence] + r.size for r in recs if r.sequence >= first]
        cut = int(cut_frac * os.path.getsize(last_log))
        os.truncate(last_log, cut)
        with open(last_log, "ab") as f:
            f.write(junk)                               # whatever was half written
        n_whole = first - 1 + bisect.bisect_right(ends, cut)
        # (junk that happens to equal the original bytes would be a whole record again)
        with Journal.open(d, cfg) as j:
            got = j.read_batch(1, 10**6, 1 << 40)
            assert got == recs[:len(got)]
            assert len(got) >= n_whole
            assert j.next_seq == len(got) + 1
            assert j.append_batch(items(1))[0].sequence == len(got) + 1
