"""Idempotent producers in the pure core: PRODUCER, duplicates dropped but counted and confirmed,
every PUBLISH after PRODUCER uses up one producer sequence, and the state is the journal's."""
from __future__ import annotations

from zeps.protocol import commands as c

from .core_harness import Core, make_fixture  # noqa: F401 (the make fixture)

P = b"producer"


def stored(h):
    return h.core.streams["s"].journal.last_seq


def test_a_retry_of_what_the_stream_holds_is_confirmed_not_stored(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-1", 1))
    assert h.take(P)[-1] == c.ProducerOk(0)
    for i in range(3):
        h.send(P, c.Publish("k", b"%d" % i))
    h.round()
    assert stored(h) == 3
    assert h.take(P)[-1] == c.Confirm(3, 3)
    # the same producer reconnects and re-sends 2 and 3 (it did not see their CONFIRM)
    h.send(P, c.Detach())
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-1", 2))
    assert h.take(P)[-1] == c.ProducerOk(3)
    h.send(P, c.Publish("k", b"1"), c.Publish("k", b"2"), c.Publish("k", b"3"))
    h.round()
    assert stored(h) == 4, "only the new one (producer sequence 4) is stored"
    assert h.take(P)[-1].count == 3          # all three counted and confirmed


def test_a_rejected_publish_uses_up_its_producer_sequence(make):
    h = make(fsync="always", max_message=4)
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-2", 1))
    h.send(P, c.Publish("k", b"toolong"), c.Publish("k", b"ok"))     # sequences 1 and 2
    h.round()
    assert [type(m) for m in h.take(P)][-2:] == [c.Invalid, c.Confirm]
    h.send(P, c.Producer("app-2", 2))
    assert h.take(P)[-1] == c.ProducerOk(2), "the stored one had producer sequence 2"


def test_producer_state_survives_a_restart_of_the_core(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.Producer("app-3", 10), c.Publish("k", b"x"))
    h.round()
    path = h.datadir.path
    h.close()
    h2 = Core(path, fsync="always")          # a new core on the same data: the journal's state
    try:
        h2.send(P, c.Attach("s"), c.Producer("app-3", 10))
        assert h2.take(P)[-1] == c.ProducerOk(10)
    finally:
        h2.close()
