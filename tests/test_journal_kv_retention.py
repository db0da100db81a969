"""The last-value index under retention (found by review): the entries of keys whose latest
message retention deleted leave the in-memory index (the checkpoint writer thread hands them to
the appending thread, which prunes a bounded number per append), so a key-indexed stream with
retention and ever-new keys (ids, UUIDs) holds about the live keys, not every key ever
published. Real files in a temp dir; the writer thread is joined after each append, so that
what it hands over is there at the next one (no timing)."""
from __future__ import annotations

import os

from zeps.journal import Journal
from zeps.journal.kv import KEY_CHECKPOINT_MIN
from zeps.journal.lastvalue import SHIFT, KeyIndex

from .test_journal_lastvalue import Clock, batch, cfg, check_index, replay_state


def test_prune_removes_only_entries_unchanged_since_they_were_handed_over():
    idx = KeyIndex()
    for seq, k in enumerate([b"a", b"b", b"c", b"d", b"e"], start=1):
        idx.observe(k, seq, 10 * seq, False)
    keys, d = idx.checkpoint_state()
    idx.checkpointed(1, ([b"a", b"b", b"c", b"d"], [d[b"a"], d[b"b"], d[b"c"], d[b"d"]]))
    assert idx.kept == 1
    idx.observe(b"b", 6, 60, False)          # written again: live, stays
    idx.observe(b"c", 7, 70, True)           # deleted by a tombstone meanwhile
    idx.prune(3)                             # a bounded step: a, b, c looked at
    assert [k for k, _ in idx.items()] == [b"b", b"d", b"e"] and idx.dead is not None
    idx.prune(3)
    assert idx.dead is None
    assert [(k, v >> SHIFT) for k, v in idx.items()] == [(b"b", 6), (b"e", 5)]
    idx.checkpointed(2, ([], []))            # nothing to prune: none handed over
    assert idx.dead is None
    idx.checkpointed(2, ([b"b"], [d[b"b"]]))
    idx.checkpoint_state()                   # the next checkpoint finds them again
    assert idx.dead is None and len(idx) == 2


def state_seqs(model):
    return {k: s for k, (s, _) in model.items()}


def test_retention_with_ever_new_keys_keeps_the_index_bounded(tmp_path):
    """40,000 messages, nearly all to keys never seen before (plus keys rewritten now and then,
    some after retention deleted their previous message, tombstones and batch records), in
    2 KiB segments with 16 KiB retention (about 360 messages kept): the index's key count stays
    within the live keys plus two checkpoint periods (4,096 messages each), where it grew with
    every new key (to 40,000) before; the live keys read, snapshotted, reopened from the
    checkpoint and rebuilt from the log alone are the log's."""
    path = tmp_path / "s"
    conf = cfg(retention_bytes=16 << 10)
    j = Journal.open(path, conf, Clock())
    most = most_live = 0
    for i in range(40_000):
        if i % 500 == 7:
            j.append_batch([batch([(f"b.{i}.{n}", b"x" * 8) for n in range(4)])])
        elif i % 97 == 0:
            j.append(f"slow.{i % 7}", b"s%d" % i)       # often dead in between, then live again
        elif i % 251 == 0:
            j.append(f"n.{i - 3:06d}", b"")             # a tombstone
        else:
            j.append(f"n.{i:06d}", b"v%d" % i)
        j._key_writer.join()
        most = max(most, j.key_count())
        if i % 4000 == 3999:
            live = len(replay_state(j))
            most_live = max(most_live, live)
    assert j._key_writer.error is None
    model = replay_state(j)
    first = j.first_seq
    assert first > 30_000 and 0 < len(model) < 1000
    assert most <= most_live + 2 * KEY_CHECKPOINT_MIN, (most, most_live)
    # the served view is the log's; what the index still holds beside it is dead
    assert dict(j.snapshot()) == state_seqs(model)
    for k, (s, body) in model.items():
        assert j.latest_seq(k) == s and j.latest(k).body == body
    held = {k.decode(): v >> SHIFT for k, v in j._keys.items()}
    assert {k: held[k] for k in model} == state_seqs(model)
    assert all(s < first for k, s in held.items() if k not in model)
    assert j.latest_seq("n.000001") is None and j.latest("n.000001") is None
    j.close()
    j = Journal.open(path, conf, Clock())          # from the checkpoint written at close
    check_index(j, model)
    j.close()
    for n in os.listdir(path):
        if n.endswith(".keys"):
            os.unlink(path / n)
    j = Journal.open(path, conf, Clock())          # from the log alone
    check_index(j, model)
    j.close()
