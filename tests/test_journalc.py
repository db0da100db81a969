"""The optional C loops of the columnar journal reader (``zeps.journal._journalc``, issue 20)
against their numpy definitions: for any block, valid or damaged, the same result.

- ``walk``: the positions and end of :func:`zeps.journal.walk.walk_py` (with or without index
  hints);
- ``kinds``: :func:`zeps.journal.columnar._kinds_py`;
- ``check_plain``: the valid prefix and every field of ``_Block._init_py`` for a run of plain
  records, CRC verified or not, any expected sequence and previous timestamp;
- ``fused_columns``: the walk, kinds, checks (``_Block``'s, and ``BatchRun``'s for batch
  records) and compaction above fused, for a block's leading run of plain and batch records
  without extensions, cut at any ``last`` and read from any ``want``;
- ``first_bad_crc``, ``compact``, ``crc32c`` (SSE4.2 or table-driven; the table-driven one is
  checked also where the CPU has SSE4.2): their numpy/pyarrow/google_crc32c twins;
- ``read_columns`` over a damaged journal, whole or a range of it: the same columns, then the
  same CorruptionError (file, byte, message), with the C loops and without them;
- positions that are not records of the buffer, and arrays not aligned to their items (a
  caller's bug), give ValueError, never a crash;
- ``ZEPS_PURE_PYTHON=1`` makes zeps use the numpy loops (a fresh interpreter says so).

The C module is built by ``setup.py`` wherever there is a C compiler; these tests skip only on a
machine without one (then zeps runs on the numpy loops, which every other test exercises).
"""
from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")
import google_crc32c  # noqa: E402

from zeps.journal import CorruptionError, Journal, JournalConfig, JournalReader  # noqa: E402
from zeps.journal import batchcols, blockcrc, columnar, plainrun, walk as walkmod  # noqa: E402
from zeps.journal.record.encoder import encode_batch  # noqa: E402
from zeps.protocol.batch import encode_entries  # noqa: E402
from zeps.protocol.commands import PublishBatch  # noqa: E402
from zeps.protocol.headers import encode_block  # noqa: E402

from . import compiled  # noqa: E402
from .property_examples import examples  # noqa: E402

journalc = compiled.c_module(
    "zeps.journal._journalc", "numpy loops",
    pure_python_skip="zeps runs on its numpy loops here, which every other journal test exercises")


@contextlib.contextmanager
def numpy_loops():
    """The reader without the C loops (as with ZEPS_PURE_PYTHON=1)."""
    mods = (columnar, walkmod, blockcrc)
    saved = [m.journalc for m in mods]
    for m in mods:
        m.journalc = None
    try:
        yield
    finally:
        for m, s in zip(mods, saved):
            m.journalc = s


# ----------------------------------------------------------------------------- blocks

keys_st = st.text(max_size=6)
bodies_st = st.binary(max_size=40)
message_st = st.tuples(keys_st, bodies_st)
item_st = st.one_of(
    message_st, message_st,
    st.builds(lambda k, b, h: (k, b, encode_block(h)), keys_st, bodies_st,
              st.lists(st.tuples(st.text(min_size=1, max_size=4), st.binary(max_size=5)),
                       min_size=1, max_size=2)),
    st.lists(message_st, min_size=2, max_size=4).map(
        lambda ms: PublishBatch(len(ms), encode_entries(ms))))
group_st = st.tuples(
    st.lists(item_st, min_size=1, max_size=6),
    st.sampled_from([None, "p", "ü" * 3, "x" * 40]),      # producer of the group's records
    st.integers(-2, 3))                                    # timestamp step (may go back)
damage_st = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255), st.booleans()),
                     max_size=3)                           # (where, xor, then re-CRC it)


def _block(groups, first_seq=5):
    """Record bytes of ``groups`` (and each record's start and sequence), as the journal
    writes them."""
    parts, starts, seqs, at, seq, ts = [], [], [], 0, first_seq, 1000
    for items, producer, step in groups:
        ts += step
        prods = None if producer is None else [(producer, 1 + i * 10) for i in range(len(items))]
        raw, recs = encode_batch(items, seq, ts, 1 << 20, prods)
        data = b"".join(raw)
        pos = 0
        for r in recs:
            starts.append(at + pos)
            seqs.append(seq)
            seq += getattr(r, "count", 1)
            pos += columnar.record_span(data, pos, len(data))
        parts.append(data)
        at += len(data)
    return b"".join(parts), starts, seqs


def _damage(buf, starts, damage, cut):
    b = bytearray(buf)
    for where, xor, recrc in damage:
        if not b:
            break
        i = where % len(b)
        b[i] ^= xor
        if recrc:        # a forged record under a valid CRC: the other checks must catch it
            k = max((s for s in starts if s <= i), default=0)
            end = min((s for s in starts if s > k), default=len(b))
            if end - k >= 16:
                b[k + 4:k + 8] = google_crc32c.value(bytes(b[k + 8:end])).to_bytes(4, "big")
    return bytes(b[:len(b) - cut] if cut else b)


def _fields(blk):
    f = [blk.n] + [a.tolist() for a in (blk.pos, blk.seq, blk.ts, blk.kstart, blk.kend,
                                         blk.bend)]
    if blk.flagged is None or not blk.flagged.any():
        return f + [None]
    m = blk.flagged
    return f + [m.tolist(), blk.pstart[m].tolist(), blk.pend[m].tolist(), blk.pseq[m].tolist()]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(group_st, min_size=1, max_size=8), damage_st, st.integers(0, 30),
       st.sampled_from([0, 0, 0, -1, 1]), st.sampled_from([None, None, 0, 999, 1001, 1 << 70]),
       st.booleans())
def test_block_loops_match_numpy(groups, damage, cut, seq_off, last_ts, verify):
    clean, starts, seqs = _block(groups)
    buf = _damage(clean, starts, damage, cut)
    pos, after = walkmod.walk(buf, len(buf))
    want_pos, want_after = walkmod.walk_py(buf, len(buf))
    assert (pos.tolist(), after) == (want_pos.tolist(), want_after)
    if len(pos) > 2:        # hints (every other true start) change nothing
        hinted = walkmod.walk_py(buf, len(buf), pos[1::2].copy())
        assert (hinted[0].tolist(), hinted[1]) == (want_pos.tolist(), want_after)
    if not len(pos):
        return
    kinds = columnar._kinds(buf, pos)
    assert kinds.tolist() == columnar._kinds_py(buf, pos).tolist()
    assert blockcrc.first_bad_crc(buf, pos, after) == blockcrc.first_bad_crc_py(buf, pos, after)
    # every run of plain records, as the reader hands it to _Block
    edges = [0] + (np.flatnonzero(np.diff(kinds)) + 1).tolist() + [len(pos)]
    for i, j in zip(edges[:-1], edges[1:]):
        if kinds[i] != 0:
            continue
        run = pos[i:j]
        k = starts.index(int(run[0])) if int(run[0]) in starts else 0
        expect = seqs[k] + seq_off
        c = columnar._Block.__new__(columnar._Block)
        c._init_c(buf, run, expect, last_ts, verify)
        p = columnar._Block.__new__(columnar._Block)
        p._init_py(buf, run, expect, last_ts, verify)
        assert _fields(c) == _fields(p)
        event("run: all valid" if c.n == len(run) else "run: stops at record 0" if c.n == 0
              else "run: stops inside")
        if c.flagged is not None:
            event("run: with producer extensions")
        if c.n:
            data = pa.py_buffer(buf)
            for s, e in ((c.kstart, c.kend), (c.kend + 4, c.bend)):
                got = columnar._compact(data, s, e)
                assert got.equals(columnar._compact_py(data, s, e))


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _fused_definition(buf, expect, last_ts, verify, want, last):
    """What ``fused_columns`` must give, from the numpy loops: the walk, the kinds, the leading
    run of unflagged plain and batch records, each part checked by ``_Block`` (plain) or
    ``BatchRun`` (batch; with every key of the record valid UTF-8, as the general path checks
    them), the rows from ``want`` on, cut after ``last`` (a batch record holding ``last`` and
    more gives its messages up to ``last`` and is not passed), a record that would pass the
    outputs' rows not taken. Returns ``(n, after, next_seq, last_t, stopped,
    rows)``, rows as (seq, ts, key bytes, body bytes)."""
    pos, walked = walkmod.walk_py(buf, len(buf))
    cap = len(buf) // 32 + 1
    n, after, nseq, last_t, rows = 0, 0, expect, 0, []
    if not len(pos):
        return n, after, nseq, last_t, False, rows
    kinds = columnar._kinds_py(buf, pos)
    flagged = columnar.be_view(buf, 4)[pos] > columnar.LENGTH_MASK
    k = columnar._first((kinds == 2) | flagged)
    edges = [0] + (np.flatnonzero(np.diff(kinds[:k])) + 1).tolist() + [k]
    prev = last_ts
    for i, j in zip(edges[:-1], edges[1:]):
        if kinds[i] == 0:
            blk = columnar._Block.__new__(columnar._Block)
            blk._init_py(buf, pos[i:j], nseq, prev, verify)
            recs = [(int(blk.seq[r]), int(blk.ts[r]), 1, [(int(blk.kstart[r]), int(blk.kend[r]),
                                                           int(blk.bend[r]))])
                    for r in range(blk.n)]
            valid = blk.n
        else:           # (a batch record's keys are all checked, taken or not)
            run = batchcols.BatchRun(buf, pos[i:j], 0, nseq, prev, verify)
            recs = []
            for r in range(run.n):
                lo, c = int(run.row0[r]), int(run.count[r])
                msgs = [(int(run.kstart[x]), int(run.kend[x]), int(run.bend[x]))
                        for x in range(lo, lo + c)]
                if not all(_utf8(buf[ks:ke]) for ks, ke, _ in msgs):
                    break
                recs.append((int(run.seq[r]), int(run.ts[r]), c, msgs))
            valid = len(recs)
        for s, t, c, msgs in recs:
            if last is not None and s > last:
                return n, after, nseq, last_t, True, rows
            if len(rows) + c > cap:
                return n, after, nseq, last_t, False, rows
            cut = last is not None and s + c - 1 > last
            for x, (ks, ke, be) in enumerate(msgs[:last - s + 1] if cut else msgs):
                if s + x >= want:
                    rows.append((s + x, t, buf[ks:ke], buf[ke + 4:be]))
            if cut:
                return n, after, nseq, last_t, True, rows
            n, after, nseq, last_t = n + 1, msgs[-1][2], s + c, t
            prev = t
        if valid < j - i:
            break
    return n, after, nseq, last_t, False, rows


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(group_st, min_size=1, max_size=8), damage_st, st.integers(0, 30),
       st.sampled_from([0, 0, 0, -1, 1]), st.sampled_from([None, None, 0, 999, 1001, 1 << 70]),
       st.booleans(), st.integers(-2, 12), st.one_of(st.none(), st.integers(0, 20)),
       st.sampled_from([True, True, True, False]))
def test_fused_columns_is_the_loops_fused(groups, damage, cut, seq_off, last_ts, verify,
                                          want_off, last_off, unflagged):
    """``fused_columns`` (the reader's one-pass C loop for a block that starts with plain or
    batch records without extensions) against its definition in numpy: the walk, the kinds, the
    leading run of unflagged records that ``_Block`` and ``BatchRun`` accept, cut after
    ``last``, the rows from ``want`` on, and their keys and bodies compacted - for any block,
    valid or damaged."""
    if unflagged:       # (most blocks hold records without extensions only, as most journals)
        groups = [([i for i in items if not (isinstance(i, tuple) and len(i) == 3)]
                   or [("k", b"")], None, step) for items, _, step in groups]
    clean, starts, seqs = _block(groups)
    buf = _damage(clean, starts, damage, cut)
    expect = seqs[0] + seq_off
    want, last = expect + want_off, None if last_off is None else expect + last_off - 2
    n, after, nseq, last_t, stopped, seq, ts, koffs, keys, boffs, bodies = (
        plainrun.fused_columns(buf, len(buf), expect, last_ts, verify, want,
                               -1 if last is None else last))
    dn, dafter, dnseq, dlast_t, dstopped, drows = _fused_definition(
        buf, expect, last_ts, verify, want, last)
    assert (n, after, nseq, last_t, stopped) == (dn, dafter, dnseq, dlast_t, dstopped)
    m = len(drows)
    assert np.frombuffer(seq, np.int64).tolist() == [r[0] for r in drows]
    assert np.frombuffer(ts, np.int64).tolist() == [r[1] for r in drows]
    got_keys = pa.Array.from_buffers(pa.binary(), m, [None, koffs, keys])
    got_bodies = pa.Array.from_buffers(pa.binary(), m, [None, boffs, bodies])
    assert got_keys.to_pylist() == [r[2] for r in drows]
    assert got_bodies.to_pylist() == [r[3] for r in drows]
    event("fused run: none" if n == 0 else "fused run: to the end" if after == len(buf)
          else "fused run: stops inside")
    if n and any(c == 1 for c in columnar._kinds_py(buf, walkmod.walk_py(buf, after)[0])):
        event("fused run: with batch records")
    if stopped and nseq <= last:
        event("fused run: stops inside a batch at last")


def test_a_read_that_ends_inside_a_batch_record_stops_at_its_record():
    """``last`` inside a batch record: its messages up to ``last`` are rows, the record is not
    passed (the next read starts at it, as ``parse_records`` does), and the run says it
    stopped there; ``want`` inside the record drops its first messages."""
    four = PublishBatch(4, encode_entries([(f"k{i}", bytes([i]) * 3) for i in range(4)]))
    buf, starts, seqs = _block([([("a", b"x"), four, ("b", b"y")], None, 1)])
    assert seqs == [5, 6, 10]
    n, after, nseq, last_t, stopped, seq, ts, koffs, keys, boffs, bodies = (
        plainrun.fused_columns(buf, len(buf), 5, None, True, 7, 8))
    assert (n, after, nseq, stopped) == (1, starts[1], 6, True)
    assert np.frombuffer(seq, np.int64).tolist() == [7, 8]
    assert pa.Array.from_buffers(pa.binary(), 2, [None, boffs, bodies]).to_pylist() == [
        b"\x01" * 3, b"\x02" * 3]
    n, after, nseq, last_t, stopped, *_ = plainrun.fused_columns(buf, len(buf), 5, None, True,
                                                                  0, 9)
    assert (n, after, nseq, stopped) == (2, starts[2], 10, True)   # the batch whole, then b


@settings(max_examples=examples(500), deadline=None)
@given(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(lambda t: t.encode()),
                 st.tuples(st.text(min_size=1, max_size=4), st.integers(0, 15),
                           st.integers(0, 255)).map(
                     lambda a: _poke(a[0].encode("utf-8", "surrogatepass"), a[1], a[2]))))
def test_a_batch_keys_utf8_check_is_pythons(data):
    """The C pass's UTF-8 check of batch keys (``valid_utf8``) says what Python's decode says:
    overlong forms, surrogates, code points past U+10FFFF and cut sequences are refused."""
    assert journalc.valid_utf8(data) == _utf8(data)


def _poke(b: bytes, i: int, v: int) -> bytes:
    return b[:i % len(b)] + bytes([v]) + b[i % len(b) + 1:] if b else b


@pytest.mark.parametrize("bad_entry, first, last", [(0, 2, None), (2, 1, 1), (1, 4, None)],
                         ids=["bad key before want", "bad key after last",
                              "bad key in a batch wholly before want"])
def test_a_batch_record_with_a_bad_key_is_corruption_even_where_none_of_it_is_read(
        bad_entry, first, last):
    """A batch record (valid CRC) with a key that is not UTF-8, in a message the read does not
    take: the C pass refuses the record as the numpy path does (it checks every key of a batch
    record), so both report the same corruption instead of the C pass handing out rows."""
    entries = encode_entries([("a", b"1" * 40), ("b", b"2" * 40), ("c", b"3" * 40)])
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "s")
        with Journal.open(d, JournalConfig(fsync="never", segment_bytes=300,
                                           index_interval_bytes=180)) as j:
            j.append_batch([PublishBatch(3, entries), ("d", b"4"), ("e", b"5")])
            for i in range(3):
                j.append_batch([("z", b"%d" % i)])
        log = os.path.join(d, sorted(f for f in os.listdir(d) if f.endswith(".log"))[0])
        with open(log, "rb") as f:
            b = bytearray(f.read())
        end = 16 + (int.from_bytes(b[0:4], "big") & columnar.LENGTH_MASK)
        q = 16 + 23                                 # the first record is the batch
        for _ in range(bad_entry):
            kend = q + 1 + b[q]
            q = kend + 4 + int.from_bytes(b[kend:kend + 4], "big")
        b[q + 1] = 0xFF                             # that entry's one-byte key
        b[4:8] = google_crc32c.value(bytes(b[8:end])).to_bytes(4, "big")
        with open(log, "wb") as f:
            f.write(b)
        got = _outcome(d, 1 << 20, True, first, last)
        with numpy_loops():
            want = _outcome(d, 1 << 20, True, first, last)
    assert got == want
    assert got[1] is not None and "UTF-8" in got[1][2]


def test_sequences_past_int64_are_left_to_the_general_path():
    """A batch record whose last sequence would pass 2^63-1 (a forged journal) is not taken by
    the C pass: its sequences are int64 there."""
    four = PublishBatch(4, encode_entries([("k", b"v" * 40)] * 4))
    for first, taken in ((2**63 - 6, 2), (2**63 - 4, 1)):
        buf, starts, seqs = _block([([("a", b"x"), four], None, 1)], first_seq=first)
        n, after, nseq, *_ = plainrun.fused_columns(buf, len(buf), seqs[0], None, True, 0, -1)
        assert (n, nseq) == (taken, first + 1 + 4 * (taken - 1))


def test_a_batch_record_that_would_pass_the_outputs_is_left_to_the_general_path():
    """Batch records of tiny messages can hold more rows than ``plain_capacity`` gives for
    their bytes (a plain record takes 32 bytes, a batch entry 5): the fused pass stops before
    such a record, and the reader reads it through the general path - every row there."""
    tiny = PublishBatch(200, encode_entries([("", b"")] * 200))
    buf, _, seqs = _block([([("k", b"v" * 40)] * 3 + [tiny], None, 1)])
    n, after, nseq, *_ = plainrun.fused_columns(buf, len(buf), seqs[0], None, True, 0, -1)
    assert (n, nseq) == (3, seqs[0] + 3)             # the plain records; not the batch
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "s")
        with Journal.open(d, JournalConfig(fsync="never")) as j:
            j.append_batch([("k", b"v" * 40)] * 3 + [tiny])
        rows, err = _outcome(d, 1 << 20)
    assert err is None
    assert [r[0] for r in rows] == list(range(1, 204))
    assert [r[2:4] for r in rows[3:]] == [("", b"")] * 200


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 7))
def test_crc32c_is_google_crc32c(data, skip):
    assert journalc.crc32c(data[skip:]) == google_crc32c.value(data[skip:])
    assert journalc.crc32c(memoryview(data)[skip:]) == google_crc32c.value(data[skip:])
    assert journalc.crc32c_table(data[skip:]) == google_crc32c.value(data[skip:])


# ----------------------------------------------------------------------------- the reader

def _outcome(d, block_bytes, verify=True, first=1, last=None):
    rows, err = [], None
    with JournalReader(d) as r:
        try:
            for c in columnar.read_columns(r, first, last, verify_crc=verify,
                                           block_bytes=block_bytes):
                rows += zip(c.sequence.tolist(), c.timestamp_ns.tolist(), c.key.to_pylist(),
                            c.body.to_pylist(), c.producer.to_pylist(), c.pseq.to_pylist(),
                            c.headers.to_pylist())
        except CorruptionError as e:
            err = (e.path, e.offset, str(e))
    return rows, err


def test_read_columns_takes_any_u64_bound_as_the_numpy_loops_do(tmp_path):
    """The C pass takes signed 64-bit sequences: ``last = 2**64 - 1`` ("to the end") or any
    bound past 2**63 raised OverflowError, where the numpy loops return the rows."""
    d = tmp_path / "s"
    j = Journal.open(d, JournalConfig(fsync="never"))
    j.append_batch([("k", b"v%d" % i) for i in range(5)])
    j.close()
    for first, last in ((1, 2**63), (1, 2**64 - 1), (2**63, None)):
        got = _outcome(d, 1 << 20, first=first, last=last)
        with numpy_loops():
            assert got == _outcome(d, 1 << 20, first=first, last=last)
        assert [r[0] for r in got[0]] == ([] if first > 5 else [1, 2, 3, 4, 5])


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(group_st, min_size=1, max_size=12), damage_st.filter(bool), st.integers(0, 40),
       st.sampled_from([1 << 20, 700, 64]), st.booleans(),
       st.sampled_from([(1, None)] * 3 + [(3, None), (1, 5), (4, 9), (2, 30)]))
def test_read_columns_matches_numpy_on_damaged_journals(groups, damage, cut, block, verify,
                                                        span):
    """A journal (several segments) damaged anywhere - flipped bytes, forged records under a
    valid CRC, a cut tail: the same rows and the same CorruptionError, C loops or not, for the
    whole journal or a range of it."""
    first, last = span
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "s")
        cfg = JournalConfig(segment_bytes=1024, index_interval_bytes=100, fsync="never")
        clock = iter(range(10**18, 2 * 10**18, 1000)).__next__
        with Journal.open(d, cfg, clock=clock) as j:
            for items, producer, _ in groups:
                j.append_batch(items, None if producer is None else
                               [(producer, 1 + i * 10) for i in range(len(items))])
        with JournalReader(d) as r:        # undamaged: the records JournalReader reads
            want = [(m.sequence, m.timestamp, m.key, m.body, m.producer, m.pseq,
                     None if m.header_block is None else
                     [{"key": k, "value": v} for k, v in m.headers]) for m in r.read_from(1)]
        assert _outcome(d, block, verify) == (want, None)
        assert _outcome(d, block, verify, first, last) == (
            [w for w in want if w[0] >= first and (last is None or w[0] <= last)], None)
        logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
        rnd = random.Random(len(logs) + cut)
        path = os.path.join(d, rnd.choice(logs))
        with open(path, "rb") as f:
            data = f.read()
        starts, p = [], 0
        while p < len(data):
            starts.append(p)
            p += columnar.record_span(data, p, len(data))
        with open(path, "wb") as f:
            f.write(_damage(data, starts, damage, cut if path == os.path.join(d, logs[-1])
                            else 0))
        try:
            got = _outcome(d, block, verify, first, last)
        except CorruptionError:          # the damage is found on opening: nothing to compare
            return
        with numpy_loops():
            want = _outcome(d, block, verify, first, last)
        assert got == want
        event("reader: corruption" if got[1] else "reader: whole")


def test_fused_columns_refuses_output_buffers_too_small():
    buf, _, seqs = _block([([("k", b"v" * 30)] * 3, None, 1)])
    outs = [bytearray(size) for size in plainrun.plain_capacity(len(buf))]
    assert journalc.fused_columns(buf, len(buf), seqs[0], None, True, 0, -1, *outs)[0] == 3
    outs[5] = bytearray(len(buf) - 1)
    with pytest.raises(ValueError, match="output buffer 5 holds"):
        journalc.fused_columns(buf, len(buf), seqs[0], None, True, 0, -1, *outs)
    with pytest.raises(TypeError):       # read-only memory is not an output
        journalc.fused_columns(buf, len(buf), seqs[0], None, True, 0, -1,
                               *([bytes(8 << 10)] * 6))


def test_positions_that_are_not_records_are_refused():
    buf, starts, _ = _block([([("k", b"v" * 30)] * 3, None, 1)])
    pos = np.array(starts, dtype=np.int64)
    for bad in (pos + 1, np.array([len(buf) - 3]), np.array([-1]), pos[::-1] * 1000):
        with pytest.raises(ValueError):
            journalc.check_plain(buf, bad.astype(np.int64), 5, None, True)
    with pytest.raises(ValueError):
        journalc.kinds(buf, np.array([len(buf)], dtype=np.int64))
    # a position near 2**63: position + header wrapped (the interpreter's -fwrapv) and passed
    # the bounds check, and the read segfaulted
    huge = np.array([2**63 - 8], dtype=np.int64)
    with pytest.raises(ValueError):
        journalc.kinds(buf, huge)
    with pytest.raises(ValueError):
        journalc.first_bad_crc(buf, huge, len(buf))
    # records with headers (which the reader never hands to check_plain) at the very end of
    # the buffer, their length field forged: the run stops, nothing is read past the buffer
    for items in ([("k", b"v", encode_block([("h", b"x")]))],
                  [("k", b"v" * 300, encode_block([("h", b"x" * 200)]))]):
        hbuf, hstarts, _ = _block([(items, None, 1)])
        for plen in (0, 1, 255):
            forged = bytearray(hbuf)
            forged[16] = plen
            got = journalc.check_plain(bytes(forged), np.array(hstarts, dtype=np.int64), 5,
                                       None, True)
            assert got[0] == 0
    with pytest.raises(ValueError):
        journalc.first_bad_crc(buf, pos, len(buf) + 1)
    # an end near -2**63: end - header wrapped, the bounds check passed, and the CRC read
    # ~2**63 bytes from the buffer (a segfault)
    for after in (-2**63, -2**63 + 15, -1, 15):
        with pytest.raises(ValueError):
            journalc.first_bad_crc(buf, pos, after)
    with pytest.raises(ValueError):
        journalc.compact(buf, np.array([5], dtype=np.int64), np.array([len(buf) + 1],
                                                                      dtype=np.int64))
    with pytest.raises(ValueError):
        journalc.compact(buf, np.array([5], dtype=np.int64), np.array([4], dtype=np.int64))
    with pytest.raises(TypeError):
        journalc.kinds(buf, pos.astype(np.int32))


def test_pure_python_switch():
    code = "from zeps.journal.speedups import journalc; print(journalc is None)"
    env = dict(os.environ, ZEPS_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "True", out.stderr
    env["ZEPS_PURE_PYTHON"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_records_read_one_by_one_wrap_u64_as_the_vectorised_paths():
    """Sequences and timestamps are u64 on disk; the vectorised paths cast them to int64. A
    forged record (valid CRC) with a timestamp past int64 read by the one-by-one path (records
    with headers) gave OverflowError instead of the same column (found by
    test_read_columns_matches_numpy_on_damaged_journals)."""
    from zeps.journal.record.format import Record
    recs = [Record(4, (1 << 64) - 3, b"", key="k", body=b"b"),
            Record((1 << 63) + 1, 7, b"", key="l", body=b"c")]
    cols = columnar._record_columns(recs, ["k", "l"])
    assert cols.timestamp_ns.tolist() == [-3, 7]
    assert cols.sequence.tolist() == [4, -(1 << 63) + 1]


@pytest.mark.parametrize("chunks", [False, True])
def test_a_batch_record_whose_sequences_pass_u64_is_bad(chunks):
    """A forged batch record (valid CRC) at sequence 2^64-2 holding four messages: its last
    sequences would pass 2^64-1. The parser gave struct.error (messages one by one) or took it
    whole (in chunks); it is a bad record, as one whose producer sequences pass 2^64-1 (found
    by review)."""
    from zeps.journal.record.parser import BAD, parse_records
    four = PublishBatch(4, encode_entries([("k", b"v" * 40)] * 4))
    buf, _, _ = _block([([four], None, 1)], first_seq=5)
    b = bytearray(buf)
    first = 2**64 - 2
    b[27:35] = first.to_bytes(8, "big")              # the DELIVER-BATCH head's sequence
    b[4:8] = google_crc32c.value(bytes(b[8:])).to_bytes(4, "big")
    res = parse_records(bytes(b), 0, len(b), first, [], chunks=chunks)
    assert res.status == BAD and res.pos == 0
    assert res.info == f"batch sequences {first}..{first + 3} pass 2^64-1"


def test_arrays_not_aligned_to_their_items_are_refused():
    """An int64 array at an address that is not a multiple of 8 (numpy's, over bytes at an odd
    offset) was read as int64_t, the output offsets and sequences written as int32_t / int64_t
    at any address: undefined behaviour (UBSan: "load of misaligned address"). Refused as a
    caller's bug; the same values, aligned, are taken."""
    buf, starts, _ = _block([([("k", b"v" * 30)] * 3, None, 1)])
    raw = bytearray(8 * len(starts) + 1)
    odd = np.frombuffer(raw, dtype=np.int64, offset=1, count=len(starts))
    odd[:] = starts
    assert not odd.flags.aligned
    calls = (lambda p: journalc.kinds(buf, p),
             lambda p: journalc.check_plain(buf, p, 5, None, True),
             lambda p: journalc.first_bad_crc(buf, p, len(buf)),
             lambda p: journalc.compact(buf, p, np.full(len(p), len(buf), dtype=np.int64)),
             lambda p: journalc.compact(buf, np.zeros(len(p), dtype=np.int64), p))
    for call in calls:
        with pytest.raises(ValueError, match="aligned"):
            call(odd)
        call(odd.copy())
    sizes = plainrun.plain_capacity(len(buf))
    for k in (0, 1, 2, 4):                      # the int64 and int32 outputs
        outs = [memoryview(bytearray(size + 1))[:size] for size in sizes]
        outs[k] = memoryview(bytearray(sizes[k] + 1))[1:]
        with pytest.raises(ValueError, match=f"output buffer {k} is not aligned"):
            journalc.fused_columns(buf, len(buf), 5, None, True, 0, -1, *outs)
    outs = [memoryview(bytearray(size + 1))[:size] for size in sizes]
    outs[3], outs[5] = (memoryview(bytearray(sizes[3] + 1))[1:],
                        memoryview(bytearray(sizes[5] + 1))[1:])     # bytes: any address
    assert journalc.fused_columns(buf, len(buf), 5, None, True, 0, -1, *outs)[0] == 3


def test_a_failed_allocation_is_a_memory_error_never_a_crash():
    """Each function, its k-th allocation failing (CPython's test hook): the result, or
    MemoryError. check_plain's result tuple failing to be made released its nine arrays twice
    (Py_BuildValue's "N" takes them also when it fails): a double free, a segfault."""
    buf, starts, _ = _block([([("k", b"v" * 30)] * 3, None, 1),
                             ([PublishBatch(2, encode_entries([("a", b"1"), ("b", b"2")]))],
                              None, 1)])
    pos = np.array(starts, dtype=np.int64)
    sizes = plainrun.plain_capacity(len(buf))
    calls = {
        "walk": lambda: journalc.walk(buf, len(buf)),
        "kinds": lambda: journalc.kinds(buf, pos),
        "check_plain": lambda: journalc.check_plain(buf, pos[:3], 5, 999, True),
        "first_bad_crc": lambda: journalc.first_bad_crc(buf, pos, len(buf)),
        "compact": lambda: journalc.compact(buf, pos, pos + 10),
        "fused_columns": lambda: journalc.fused_columns(
            buf, len(buf), 5, None, True, 0, -1, *[bytearray(s) for s in sizes])[:8],
        "plain_record": lambda: journalc.plain_record(5, 6, b"key", b"body"),
    }
    compiled.each_allocation_failing(calls, 60)
