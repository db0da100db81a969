"""A round's one plain PUBLISH (zeps/broker/lone.py, ``Journal.append``): the same effects as
the general path (``Stream.append_queued`` over ``Journal.append_batch`` and ``Runs``).

Each property runs the same steps twice, once as the broker runs them and once with the lone
path switched off, and compares what a client and the disk see: every frame sent, in order, the
journal's files byte for byte, the sessions' credit and positions, the stream's counters.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core_harness import Core
from zeps.broker import stream as stream_module
from zeps.journal import Journal, JournalConfig
from zeps.journal.errors import JournalError
from zeps.protocol import commands as c
from zeps.protocol import encode
from .property_examples import examples

KEYS = st.sampled_from(["a", "a.b", "b", "é", "k" * 255])
#: Small bodies, and bodies around the 4 KiB where a DELIVER-BATCH of one is built with a view
#: instead of a slice, some over the journals' ``max_record_bytes`` of 4150 (refused there).
BODIES = st.one_of(st.binary(max_size=40), st.integers(4090, 4200).map(lambda n: b"y" * n))


def _files(path: str) -> dict:
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            if name in ("LOCK", "INCARNATION"):        # a process id, a random stamp
                continue
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), path)] = f.read()
    return out


def _outcome(j: Journal, lone: bool, key, body):
    """What appending ``(key, body)`` gave: the record's fields, or the error's name."""
    try:
        rec = j.append(key, body) if lone else j.append_batch(((key, body),))[0]
    except JournalError as exc:
        return type(exc).__name__
    return (rec.sequence, rec.timestamp, rec.frame, rec.key, rec.body)


# ---------------------------------------------------------------------- the journal
@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.one_of(st.tuples(st.one_of(KEYS, st.just("x" * 256)), BODIES),
                                st.tuples(KEYS, st.binary(max_size=9).map(bytearray))),
                      max_size=30),
       fsync=st.sampled_from(["never", "interval", "always"]),
       segment_bytes=st.sampled_from([300, 5000, 1 << 20]),
       interval=st.sampled_from([1, 200, 4096]),
       key_index=st.booleans(), snapshot_every=st.sampled_from([300, 8 << 20]))
def test_append_writes_what_append_batch_of_one_writes(tmp_path_factory, items, fsync,
                                                       segment_bytes, interval, key_index,
                                                       snapshot_every):
    """Records, rolls, sparse index entries, the key index, the producer snapshots and
    refusals (a key over 255 bytes, a frame over ``max_record_bytes``) are those of
    ``append_batch`` of the one item, file for file; a body that is not ``bytes`` goes the
    batch's way (stored the same, with the same timestamp)."""
    outcomes, files = [], []
    for lone in (True, False):
        path = str(tmp_path_factory.mktemp("j"))
        now = [1_000]                                  # the clock moves once per item
        cfg = JournalConfig(fsync=fsync, segment_bytes=segment_bytes, max_record_bytes=4150,
                            index_interval_bytes=interval, key_index=key_index,
                            snapshot_interval_bytes=snapshot_every)
        j = Journal.open(os.path.join(path, "s"), cfg, lambda now=now: now[0])
        got = []
        for k, b in items:
            now[0] += 1
            got.append(_outcome(j, lone, k, b))
        got.append((j.next_seq, j.durable_seq))
        if key_index:                                  # the key index, as the journal holds it
            got.append([(key, seq) for key, seq in j.snapshot()])
        before_close = _files(path)                    # loose producer snapshots included
        j.close()
        outcomes.append(got)
        files.append((before_close, _files(path)))
    assert outcomes[0] == outcomes[1]
    assert files[0] == files[1]


@pytest.mark.parametrize("records_per_entry", [1, 2, 3])
def test_the_sparse_index_rule_at_its_boundary(tmp_path, records_per_entry):
    """An entry exactly ``index_interval_bytes`` after the previous one is written (records
    of one size, the interval a multiple of it)."""
    probe = Journal.open(str(tmp_path / "probe"), JournalConfig())
    size = probe.append("a", b"").size
    probe.close()
    files = []
    for lone in (True, False):
        cfg = JournalConfig(fsync="never", index_interval_bytes=records_per_entry * size)
        path = tmp_path / f"{lone}"
        j = Journal.open(str(path / "s"), cfg, lambda: 1_000)
        for _ in range(10):
            j.append("a", b"") if lone else j.append_batch((("a", b""),))
        j.close()
        files.append(_files(str(path)))
    index = [v for k, v in files[0].items() if k.endswith(".index")]
    assert len(index[0]) == 16 * len(range(0, 10, records_per_entry))   # (seq, pos) each
    assert files[0] == files[1]


def test_append_refuses_what_append_batch_refuses(tmp_path):
    j = Journal.open(str(tmp_path / "s"), JournalConfig(fsync="never"))
    for key, body in ((b"bytes key", b"x"), ("k", "str body"), ("k" * 256, b"x")):
        with pytest.raises(Exception) as lone:
            j.append(key, body)
        with pytest.raises(Exception) as batch:
            j.append_batch(((key, body),))
        assert type(lone.value) is type(batch.value) and str(lone.value) == str(batch.value)
    assert j.next_seq == 1
    j.close()


# ---------------------------------------------------------------------- the core
STEP = st.one_of(
    st.tuples(st.just("publish"), st.sampled_from([b"p1", b"p2"]), KEYS, BODIES),
    st.tuples(st.just("two"), KEYS, KEYS),             # two PUBLISH in one round: the batch path
    st.tuples(st.just("credit"), st.sampled_from([b"s1", b"s2", b"s3", b"s4"]),
              st.integers(1, 20_000)),
    st.tuples(st.just("sync")),                        # a round: syncs what the last one named
    st.tuples(st.just("later")),                       # past fsync_interval: the sync timer
)


class _Recorded(Core):
    """The harness, keeping every frame the core sent, in order, with its recipient."""

    def __init__(self, path, **config):
        super().__init__(path, **config)
        self.datadir._clock = lambda: int(self.now * 1e6)   # the same timestamps in both runs
        self.sent: list[tuple] = []
        take = self.core.take_outbox

        def take_recorded():
            out = take()
            self.sent.extend((ident, bytes(frame)) for ident, frame in out)
            return out
        self.core.take_outbox = take_recorded


def _run(path, steps, fsync: str, key_index: bool):
    h = _Recorded(path, fsync=fsync, max_credit=1 << 20, max_record_bytes=4150,
                  key_index=key_index)
    for ident, first in ((b"s1", c.BatchSelect()), (b"s2", c.BatchSelect()),
                         (b"s4", c.DeliverTimestamps())):
        h.send(ident, first)
        h.take(ident)
    h.subscriber(b"s1", "", credit=5_000)                        # batching, every key
    h.subscriber(b"s2", "a", credit=20_000)                      # batching, a prefix
    h.subscriber(b"s3", "", credit=3_000)                        # ZEPS/1 DELIVER
    h.subscriber(b"s4", "", credit=9_000)                        # DELIVER-TS
    for ident in (b"p1", b"p2"):
        h.send(ident, c.Attach("s"))
    h.send(b"p1", c.ConfirmSelect())
    for step in steps:
        if step[0] == "publish":
            _, ident, key, body = step
            h.core.receive(ident, [encode(c.Publish(key, body))], h.now)
            h.round()
        elif step[0] == "two":
            for key in step[1:]:
                h.core.receive(b"p2", [encode(c.Publish(key, b"two"))], h.now)
            h.round()
        elif step[0] == "credit":
            h.send(step[1], c.Credit(step[2]))
            h.drain()
        else:
            if step[0] == "later":
                h.now += h.core.config.fsync_interval
            h.round()
        h.now += 0.001
    h.drain()
    st_ = h.core.streams["s"]
    state = {ident: (s.credit, s.next_seq, s.live, s.delivered, s.published)
             for ident, s in sorted(h.core.sessions.items())}
    counters = (st_.published_total, st_.published_bytes, st_.delivered_total,
                st_.delivered_bytes, dict(st_.invalids))
    sent = h.sent
    h.close()
    return sent, state, counters, _files(str(path))


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=25),
       fsync=st.sampled_from(["never", "interval", "always"]), key_index=st.booleans())
def test_a_lone_publish_has_the_general_paths_effects(tmp_path_factory, monkeypatch, steps,
                                                      fsync, key_index):
    taken = []
    is_lone = stream_module.is_lone

    def counted(item):
        taken.append(is_lone(item))
        return taken[-1]
    with monkeypatch.context() as m:
        m.setattr(stream_module, "is_lone", counted)
        lone = _run(tmp_path_factory.mktemp("lone"), steps, fsync, key_index)
    with monkeypatch.context() as m:
        m.setattr(stream_module, "is_lone", lambda item: False)
        general = _run(tmp_path_factory.mktemp("general"), steps, fsync, key_index)
    assert any(taken) == any(s[0] == "publish" for s in steps)   # the path ran where it applies
    assert lone[0] == general[0]          # every frame, to whom, in order
    assert lone[1:] == general[1:]        # credit and positions, counters, the journal's files
