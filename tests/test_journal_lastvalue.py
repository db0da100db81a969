"""The last-value index (issue 18, item 1): key -> latest sequence and position, maintained at
append, checkpointed beside the journal and rebuilt after a crash; tombstones; prefix snapshots
consistent at a sequence. Real files in a temp dir; the crash (a real SIGKILL of a child) is in
tests/test_journal_kv_crash.py."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from zeps.journal import Journal, JournalConfig, JournalError
from zeps.journal import lastvalue, settings as stream_settings
from zeps.journal.lastvalue import KeyIndex, SortedKeys
from zeps.protocol.batch import encode_entries
from zeps.protocol.commands import PublishBatch
from .property_examples import examples



class Clock:
    def __init__(self):
        self.t = 1_700_000_000 * 10**9

    def __call__(self):
        self.t += 1000
        return self.t


def cfg(**kw):
    base = dict(segment_bytes=2048, fsync="never", key_index=True, index_interval_bytes=256)
    base.update(kw)
    return JournalConfig(**base)


def batch(items):
    raw = encode_entries(list(items))
    return PublishBatch(len(items), raw)


def replay_state(view):
    """key -> (seq, body) of the latest message of each live key, by replaying the log."""
    state = {}
    for r in view.read_from(1):
        if r.body:
            state[r.key] = (r.sequence, r.body)
        else:
            state.pop(r.key, None)
    return state


def check_index(j, model):
    assert j.key_count() == len(model)
    for k, (s, body) in model.items():
        assert j.latest_seq(k) == s
        rec = j.latest(k)
        assert rec is not None and (rec.sequence, rec.key, rec.body) == (s, k, body)
    assert [k for k, _ in j.snapshot()] == sorted(model, key=lambda k: k.encode())
    assert dict(j.snapshot()) == {k: s for k, (s, _) in model.items()}


# ----------------------------------------------------------------------------- pure parts

@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=3)), max_size=300),
       st.integers(1, 5))
def test_sorted_keys_against_a_sorted_set(ops, load):
    sk = SortedKeys(load=load)
    model = set()
    for add, key in ops:
        if add:
            if key not in model:
                sk.add(key)
                model.add(key)
        else:
            sk.discard(key)
            model.discard(key)
        assert len(sk) == len(model)
    assert sk.flat() == sorted(model)
    # chunked iteration from any key finds exactly the keys from there on
    for start in [b""] + sorted(model)[:5]:
        got, s, inc = [], start, True
        while True:
            part = sk.chunk_from(s, inc)
            if not part:
                break
            got += part
            s, inc = part[-1], False
        assert got == [k for k in sorted(model) if k >= start]


keys = st.sampled_from(["a", "a.b", "a.c", "b", "b.a", "ab", "z", "é", ""])


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(keys, st.sampled_from([b"", b"x", b"yy"])), max_size=200))
def test_key_index_against_a_dict(msgs):
    """Applying messages in order gives a dict model's state: the latest sequence of each key,
    tombstones (empty bodies) deleting it; a snapshot lists the live keys in byte order."""
    idx = KeyIndex()
    model = {}
    pos = 0
    for seq, (k, body) in enumerate(msgs, start=1):
        idx.observe(k.encode(), seq, pos, body == b"")
        if body:
            model[k] = (seq, pos)
        else:
            model.pop(k, None)
        pos += 10
    assert len(idx) == len(model)
    for k, v in model.items():
        assert idx.get(k.encode()) == v
    assert [k.decode() for k, _ in idx.items()] == sorted(model, key=lambda k: k.encode())
    snap = lastvalue.KeySnapshot(idx, "a", len(msgs), lambda: 1, None)
    assert [k for k, _ in snap] == sorted((k for k in model if k.startswith("a")),
                                          key=lambda k: k.encode())


def test_checkpoint_round_trip_and_damage():
    idx = KeyIndex()
    for i in range(3000):
        idx.observe(b"k%05d" % (i % 1200), i + 1, i * 40, i % 17 == 0)
    keys, d = idx.copy_state()
    data = lastvalue.encode(3001, keys, d)
    back = lastvalue.decode(data, 3001)
    assert back.items() == idx.items()
    with pytest.raises(ValueError, match="CRC"):
        lastvalue.decode(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:], 3001)
    with pytest.raises(ValueError, match="before sequence 3001"):
        lastvalue.decode(data, 3002)
    with pytest.raises(ValueError):
        lastvalue.decode(data[:10], 3001)
    # entries below first_seq (deleted by retention) are not written
    part = lastvalue.decode(lastvalue.encode(3001, keys, d, first_seq=2500), 3001)
    assert all(v >> lastvalue.SHIFT >= 2500 for _, v in part.items())


# ----------------------------------------------------------------------------- the journal

def test_index_follows_appends_batches_and_tombstones(tmp_path):
    j = Journal.open(tmp_path / "s", cfg(), Clock())
    model = {}
    for i in range(400):
        k = f"k.{i % 37}"
        body = b"" if i % 9 == 0 else b"v%d" % i
        if i % 50 == 7:      # a batch record: its messages share a position
            items = [(f"b.{i}.{n}", b"w%d" % n) for n in range(5)] + [(k, body)]
            first = j.append_batch([batch(items)])[0].sequence
            for n, (bk, bb) in enumerate(items):
                if bb:
                    model[bk] = (first + n, bb)
                else:
                    model.pop(bk, None)
            continue
        r = j.append(k, body)
        if body:
            model[k] = (r.sequence, body)
        else:
            model.pop(k, None)
    assert len(j.segment_seqs()) > 5
    check_index(j, model)
    assert j.keys_seq == j.last_seq
    assert replay_state(j) == model
    assert j.latest("nothing") is None and j.latest_seq("nothing") is None
    j.close()


def test_clean_restart_keeps_the_state_from_the_checkpoint(tmp_path):
    path = tmp_path / "s"
    j = Journal.open(path, cfg(), Clock())
    model = {}
    for i in range(300):
        r = j.append(f"k{i % 50}", b"v%d" % i)
        model[f"k{i % 50}"] = (r.sequence, b"v%d" % i)
    j.close()
    names = [n for n in os.listdir(path) if n.endswith(".keys")]
    assert names == [f"{j.next_seq:020d}.keys"]
    j = Journal.open(path, cfg(), Clock())
    check_index(j, model)
    j.close()


def test_a_bad_or_stale_checkpoint_is_ignored_and_the_index_rebuilt_from_the_log(tmp_path):
    path = tmp_path / "s"
    j = Journal.open(path, cfg(), Clock())
    model = {}
    for i in range(200):
        r = j.append(f"k{i % 30}", b"v%d" % i if i % 7 else b"")
        if i % 7:
            model[f"k{i % 30}"] = (r.sequence, b"v%d" % i)
        else:
            model.pop(f"k{i % 30}", None)
    j.close()
    (name,) = [n for n in os.listdir(path) if n.endswith(".keys")]
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[:len(data) // 2])              # torn
    (path / f"{10**9:020d}.keys").write_bytes(data)                # past the log
    j = Journal.open(path, cfg(), Clock())
    check_index(j, model)
    assert [n for n in os.listdir(path) if n.endswith(".keys")] == []
    j.close()


def test_checkpoint_at_a_roll_covers_the_log_before_it(tmp_path):
    """At a roll, once as many messages as keys were appended since the last checkpoint, one is
    written (by a thread); reopening after a crash then applies only the records after it."""
    path = tmp_path / "s"
    j = Journal.open(path, cfg(segment_bytes=64 << 10), Clock())
    for i in range(6000):
        j.append(f"k{i % 10}", b"v%d" % i)
    j._key_writer.join()
    found = lastvalue.list_checkpoints(str(path))
    assert found and found[0] > 4096 and found[0] in j.segment_seqs()
    # a crash: the process dies without close (no final checkpoint); reopen a copy
    copy = tmp_path / "copy"
    os.mkdir(copy)
    for n in os.listdir(path):
        if n != "LOCK":
            (copy / n).write_bytes((path / n).read_bytes())
    seen = []
    orig = lastvalue.apply_log

    def spy(view, index, seq, next_seq):
        seen.append(seq)
        return orig(view, index, seq, next_seq)
    lastvalue.apply_log = spy
    try:
        j2 = Journal.open(copy, cfg(segment_bytes=64 << 10), Clock())
    finally:
        lastvalue.apply_log = orig
    assert seen == [found[0]]
    check_index(j2, replay_state(j2))
    assert j2.key_count() == 10
    j2.close()
    j.close()


def test_snapshot_is_consistent_at_its_sequence_and_resumable(tmp_path):
    j = Journal.open(tmp_path / "s", cfg(), Clock())
    for i in range(50):
        j.append(f"p.{i:02d}", b"v")
    j.append("q.0", b"v")
    snap = j.snapshot("p.")
    assert snap.seq == j.last_seq
    it = iter(snap)
    first = [next(it) for _ in range(10)]
    assert [k for k, _ in first] == [f"p.{i:02d}" for i in range(10)]
    j.append("p.30", b"changed")         # after the snapshot: left to the stream after .seq
    j.append("p.05", b"changed")         # already yielded
    j.append("p.999", b"new")            # created after: not in it
    j.append("p.40", b"")                # deleted after: not in it
    rest = list(it)
    keys = [k for k, _ in first + rest]
    # a key changed, created or deleted after .seq is skipped (p.05 was yielded before)
    assert "p.30" not in keys and "p.999" not in keys and "p.40" not in keys
    assert keys == sorted(keys) and len(keys) == 48
    assert all(s <= snap.seq for _, s in first + rest)
    # the snapshot and the stream after it give the current state
    state = {k: s for k, s in first + rest}
    for r in j.read_from(snap.seq + 1):
        if r.key.startswith("p."):
            if r.body:
                state[r.key] = r.sequence
            else:
                state.pop(r.key, None)
    assert state == dict(j.snapshot("p."))
    # resuming after a key
    assert [k for k, _ in j.snapshot("p.", after="p.47")] == ["p.48", "p.49", "p.999"]
    # many keys: the later chunks see the changes made while iterating, and skip them
    for i in range(3000):
        j.append(f"m.{i:04d}", b"v")
    snap = j.snapshot("m.")
    it = iter(snap)
    assert next(it)[0] == "m.0000"
    j.append("m.2999", b"changed")
    j.append("m.2998", b"")
    j.append("m.5000", b"new")
    keys = ["m.0000"] + [k for k, _ in it]
    assert keys == [f"m.{i:04d}" for i in range(2998)]
    j.close()


def test_retention_hides_keys_whose_message_it_deleted(tmp_path):
    j = Journal.open(tmp_path / "s", cfg(retention_bytes=4096), Clock())
    j.append("old", b"x" * 100)
    for i in range(200):
        j.append(f"k{i % 5}", b"v%d" % i)
    assert j.first_seq > 1
    assert j.latest("old") is None and j.latest_seq("old") is None
    assert "old" not in dict(j.snapshot())
    assert j.latest("k1").body == b"v196"
    j.close()
    j = Journal.open(tmp_path / "s", cfg(retention_bytes=4096), Clock())
    assert j.latest("old") is None and j.key_count() == 5
    j.close()


def test_no_index_unless_configured(tmp_path):
    j = Journal.open(tmp_path / "s", JournalConfig(), Clock())
    j.append("k", b"v")
    with pytest.raises(JournalError, match="no key index"):
        j.latest("k")
    j.close()
    assert not [n for n in os.listdir(tmp_path / "s") if n.endswith(".keys")]


def test_a_compacted_streams_settings_turn_the_index_on(tmp_path):
    path = tmp_path / "s"
    path.mkdir()
    stream_settings.write(str(path), stream_settings.StreamSettings(compact=True))
    j = Journal.open(path, JournalConfig(), Clock())
    j.append("k", b"v")
    assert j.latest("k").body == b"v"
    j.close()


def test_a_key_indexed_streams_settings_turn_the_index_on_without_compaction(tmp_path):
    """``key_index`` in a stream's settings (``zeps stream create --key-index``): the journal
    has the index whatever its configuration says, persisted and found again on open, and the
    stream is not compacted (its readers do not take gaps as normal)."""
    path = tmp_path / "s"
    path.mkdir()
    own = stream_settings.StreamSettings(key_index=True)
    stream_settings.write(str(path), own)
    assert stream_settings.read(str(path)) == own
    assert stream_settings.has_key_index(str(path))
    assert not stream_settings.is_compact(str(path))
    config = own.journal_config(JournalConfig())
    assert config.key_index and not config.compact
    j = Journal.open(path, config, Clock())
    j.append("k", b"v1")
    j.append("k", b"v2")
    j.append("gone", b"x")
    j.append("gone", b"")
    assert j.latest("k").body == b"v2" and j.latest("gone") is None
    j.close()
    j = Journal.open(path, JournalConfig(), Clock())     # the settings say so, as compact's
    assert j.latest("k").body == b"v2" and j.latest("k").sequence == 2
    j.close()
    with pytest.raises(ValueError, match="key_index"):
        stream_settings.StreamSettings(compact=True, key_index=True)
    with pytest.raises(ValueError, match="key_index"):
        stream_settings.StreamSettings(key_index=1)
