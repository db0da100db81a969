"""A compacted stream under a real broker (issue 18, items 1 and 2): the broker's journal keeps
the last-value index as clients publish, a SIGKILL and restart of the broker keeps the state, a
compaction run beside the live broker (another process's writer, as the broker will run it off
its loop) loses nothing, and a subscriber replaying through the broker gets the compacted log
with its gaps as normal: increasing sequences, the current state.

The stream is made compacted through the data directory (``DataDir.create``: what
STREAM-CREATE-X does), and the broker's own compaction is kept out of the way (a
``--compaction-check`` of a day) so that the test's compaction is the only one
(tests/test_compaction_broker.py has the broker's)."""
from __future__ import annotations

import time

from zeps.clients import Client
from zeps.journal import DataDir, Journal, JournalReader, compaction
from zeps.journal.settings import StreamSettings

STREAM = "kv"


def publish(endpoint, n, start, model, batching=True):
    """``n`` messages over 40 keys, every 9th a tombstone; without ``batching``, one record
    each, else as the SDK batches them (batch records)."""
    with Client(endpoint, STREAM, confirms=True, timeout=30, batching=batching) as c:
        for i in range(start, start + n):
            key = f"cfg.{i % 40}"
            body = b"" if i % 9 == 4 else b"value %d" % i
            c.publish(key, body)
            if body:
                model[key] = body
            else:
                model.pop(key, None)
            if not batching and i % 10 == 9:
                c.wait_for_confirms()       # small appends: many segments
        c.wait_for_confirms()


def replay(endpoint):
    """Every message through the broker from sequence 1: (sequences, state)."""
    seqs, state = [], {}
    with Client(endpoint, STREAM, timeout=30) as c:
        last = c.info().last
        sub = c.subscribe("", from_seq=1)
        deadline = time.monotonic() + 60
        while (not seqs or seqs[-1] < last) and time.monotonic() < deadline:
            msg = sub.poll(1.0)
            if msg is None:
                continue
            seqs.append(msg.sequence)
            if msg.body:
                state[msg.key] = msg.body
            else:
                state.pop(msg.key, None)
    return seqs, state


def test_a_broker_restart_and_a_compaction_beside_it_keep_the_current_state(start_broker,
                                                                              tmp_path):
    data = tmp_path / "data"
    dd = DataDir(data)
    dd.create(STREAM, StreamSettings(segment_bytes=4096, compact=True))
    path = dd.stream_path(STREAM)
    dd.close()
    b = start_broker(data, "--compaction-check", "86400")
    model: dict = {}
    publish(b.endpoint, 600, 0, model, batching=False)
    b.kill()                                          # SIGKILL: no close, no checkpoint
    b.restart()
    publish(b.endpoint, 300, 600, model)
    seqs_before, state = replay(b.endpoint)
    assert state == model and seqs_before == list(range(1, 901))
    r = JournalReader(path)
    sealed = r.segment_seqs()[:-1]
    r.close()
    assert len(sealed) > 10
    res = compaction.compact(path, sealed)            # beside the live broker
    assert res.removed > 0
    # the broker (not told: its own compaction would call reload_segments) reads the files
    # it has open, the old ones, or the new ones: the same state either way
    seqs, state = replay(b.endpoint)
    assert state == model
    assert seqs == sorted(set(seqs)) and set(seqs) <= set(seqs_before) and seqs[-1] == 900
    publish(b.endpoint, 100, 900, model)
    b.kill()
    b.restart()
    seqs, state = replay(b.endpoint)                  # the compacted files, with their gaps
    assert state == model
    assert seqs == sorted(set(seqs)) and len(seqs) < 1000 and seqs[-1] == 1000
    b.stop()
    j = Journal.open(path)
    assert {k: j.latest(k).body for k in model} == model
    assert dict(j.snapshot("cfg.")).keys() == model.keys()
    assert j.key_count() == len(model)
    j.close()
