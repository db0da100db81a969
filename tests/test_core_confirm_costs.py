"""What publisher confirms cost the broker (zeps/broker/confirms.py), driven in-process
(tests/core_harness.py): a command that appends its stream's queued publishes (PING, DETACH,
SUBSCRIBE, STREAM-INFO...) does not look at every publisher waiting for the group fsync."""
from __future__ import annotations

import zeps.broker.stream
from tests.core_harness import Core, make_fixture  # noqa: F401 (fixtures)
from zeps.protocol import commands as c, encode


def test_a_ping_flood_does_not_look_at_every_publisher_waiting_for_the_fsync(make, monkeypatch):
    """1,000 publishers wait for the group fsync; another client sends PUBLISH and PING 100
    times (each PING appends the PUBLISH before it: a barrier). Each append looked at every
    waiting publisher: 100,000 looks (5,000 publishers: 1.3 ms a pair, 340 ms of a
    500-message round). Then they are all confirmed by the sync, and a producer's retry,
    already durable, is confirmed at once, with no sync."""
    n = 1000
    h: Core = make(fsync="interval", max_clients=n + 10)
    looked = []
    plain = zeps.broker.stream.confirm

    def counting(stream, *sessions):
        looked.append(len(sessions[0] if sessions else stream.confirming))
        plain(stream, *sessions)

    monkeypatch.setattr(zeps.broker.stream, "confirm", counting)
    h.send(b"x", c.Attach("s"), c.ConfirmSelect())             # the stream is open
    for i in range(n):
        for cmd in (c.Attach("s"), c.ConfirmSelect(), c.Publish("k", b"x")):
            h.core.receive(b"p%d" % i, [encode(cmd)], h.now)
    h.round()
    st = h.core.streams["s"]
    assert len(st.confirming) == n and st.journal.durable_seq < n
    h.box.clear()
    looked.clear()
    for _ in range(100):
        h.core.receive(b"x", [encode(c.Publish("k", b"x"))], h.now)
        h.core.receive(b"x", [encode(c.Ping())], h.now)
    h.collect()
    assert sum(looked) <= 2 * 100, sum(looked)
    assert h.kinds(b"x") == [c.PingOk] * 100
    h.sync_and_confirm([st])
    assert h.take(b"p7") == [c.Confirm(1, 7 + 1)]
    assert h.take(b"x") == [c.Confirm(100, n + 100)]
    h.send(b"q", c.Attach("s"), c.ConfirmSelect(), c.Producer("app", 1), c.Publish("k", b"a"))
    h.round()
    h.sync_and_confirm([st])
    assert h.take(b"q")[-1] == c.Confirm(1, n + 101)
    h.send(b"q", c.Detach(), c.Attach("s"), c.ConfirmSelect(), c.Producer("app", 1))
    h.take(b"q")
    h.send(b"q", c.Publish("k", b"a"))                       # the retry: a duplicate
    h.send(b"p7", c.Publish("k", b"y"))                      # waits for the next sync
    h.round()
    assert h.take(b"q") == [c.Confirm(1, n + 101)]
    assert h.take(b"p7") == []
