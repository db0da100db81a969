"""A durable consumer after a power loss (docs/consumers.md "What the broker stores"), driven
in-process (tests/core_harness.py): under ``fsync=interval`` the consumer's file, synced by
every save, can name messages past the journal's durable end; the journal comes back shorter,
and the new messages that take those sequences again are delivered, not skipped."""
from __future__ import annotations

import os
import shutil

from tests.core_harness import Core
from zeps.protocol import commands as c
from zeps.protocol.consumer import pack_ranges, ranges_of


def _lose_the_tail(sdir: str, durable) -> None:
    """Power loss: the stream's journal is what ``durable`` holds; its consumers' files stay."""
    for f in os.listdir(sdir):
        if f != "consumers":
            p = os.path.join(sdir, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    for f in os.listdir(durable):
        p = os.path.join(durable, f)
        (shutil.copytree if os.path.isdir(p) else shutil.copy2)(p, os.path.join(sdir, f))


def test_a_cursor_past_the_journal_after_a_power_loss_comes_back_to_its_end(tmp_path):
    h = Core(tmp_path / "d")
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g"),
           c.ConsumerAdd("later", start=c.START_SEQUENCE, start_value=100))
    h.take(b"admin")
    h.publish(*[f"k.{i}" for i in range(1, 6)])
    sdir = h.datadir.stream_path("s")
    durable = tmp_path / "durable"                  # what the disk holds: messages 1..5
    shutil.copytree(sdir, durable, ignore=shutil.ignore_patterns("consumers"))
    h.publish(*[f"k.{i}" for i in range(6, 11)])    # 6..10: not synced yet
    h.send(b"m", c.Attach("s"), c.Credit(1 << 20), c.Consume("g"))
    h.take(b"m")
    h.drain()
    assert [q for q, _ in h.delivered(b"m")] == list(range(1, 11))
    h.send(b"m", c.Ack(pack_ranges(ranges_of(range(1, 9)))))     # 9, 10 still held
    h.now += 1
    h.tick()                                        # the consumer's file: next 11, 9 and 10 out
    h.close()
    _lose_the_tail(sdir, durable)

    h = Core(tmp_path / "d")
    try:
        assert h.core.streams.get("s") is None or h.core.streams["s"].journal.next_seq == 6
        h.publish(*[f"new.{i}" for i in range(6, 11)])   # sent again: sequences 6..10
        h.send(b"m2", c.Attach("s"), c.Credit(1 << 20), c.Consume("g"))
        ok = h.take(b"m2")[1]
        assert isinstance(ok, c.ConsumeOk) and ok.floor == 5 and ok.next == 6, ok
        h.drain()
        assert h.delivered(b"m2") == [(q, f"new.{q}") for q in range(6, 11)]
        assert h.logged("consumer_rewound") == [
            {"stream": "s", "consumer": "g", "next": 11, "to": 6, "outstanding_dropped": 2}]
        group = h.core.consumers["s"]["g"]
        assert sorted(group.out) == list(range(6, 11)) and group.ready == []
        # a consumer told to start past the end lost nothing: it still waits for 100
        assert h.core.consumers["s"]["later"].next == 100
    finally:
        h.close()
