"""Peerings that end while their DELIVERs wait in the outbox (congestion.py ``_end_peering``),
driven in-process (tests/core_harness.py): what ending many at once costs, and that a DELIVER
of an ended peering handed back by the shell still gives nothing to the client's next one when
the command that ended it came from a congested client (whose replies are moved aside)."""
from __future__ import annotations

from tests.core_harness import Core, cost, make_fixture  # noqa: F401 (fixtures)
from zeps.protocol import commands as c, encode


class Visits(list):
    """The core's outbox, counting the entries read one at a time (iteration, an index)."""
    n = 0

    def __iter__(self):
        for entry in list.__iter__(self):
            Visits.n += 1
            yield entry

    def __getitem__(self, i):
        if isinstance(i, int):
            Visits.n += 1
        return list.__getitem__(self, i)


def test_a_stream_delete_reads_the_outbox_once_not_once_per_client(make):
    """STREAM-DELETE of a stream with 2,000 subscribers, a publish queued: each is sent its
    DELIVER, then DETACH. Each DETACH grew the outbox that the next client's peering end looked
    through: 6,003,000 entries read (8,000 clients: 5.6 s, every client waiting)."""
    n = 2000
    h: Core = make(max_clients=n + 10)
    h.core.outbox = Visits()                 # before any stream shares it
    h.send(b"pub", c.Attach("s"))
    for i in range(n):
        for cmd in (c.Attach("s"), c.Credit(1 << 20), c.Subscribe("", 0)):
            h.core.receive(b"c%d" % i, [encode(cmd)], h.now)
    h.collect()
    h.box.clear()
    h.core.receive(b"pub", [encode(c.Publish("k", b"x"))], h.now)      # queued
    Visits.n = 0
    h.core.receive(b"pub", [encode(c.StreamDelete("s"))], h.now)
    out = len(h.core.outbox)
    h.collect()
    assert out == 2 * n + 2                  # and the publisher's DETACH and DELETE-OK
    assert Visits.n <= 3 * out, Visits.n
    assert h.kinds(b"c7") == [c.Deliver, c.Detach]
    assert h.kinds(b"pub") == [c.Detach, c.StreamDeleteOk]


def test_a_deliver_of_a_peering_a_congested_client_ended_gives_nothing_to_the_next(make):
    """A congested client's STREAM-DELETE ends X's peering while X's DELIVER waits in the
    outbox (the deleting client's own replies are moved aside behind what it holds); X attaches
    again at once (the stream made again), and its pipe hands the old DELIVER back: it is not
    the new peering's, which granted the credit of one message."""
    h: Core = make(congestion_backoff=0.5)
    x, admin = b"x", b"admin"
    h.subscriber(x)
    h.send(admin, c.Attach("other"))
    h.take(admin)
    h.pipe[admin] = 0
    h.send(admin, c.StreamInfo())                      # its pipe is full: congested
    assert h.core.sessions[admin].congested_until
    h.send(b"pub", c.Attach("s"))
    h.core.receive(b"pub", [encode(c.Publish("k1", b"x"))], h.now)     # queued
    h.core.receive(admin, [encode(c.StreamDelete("s"))], h.now)        # routes k1 first
    h.pipe[x] = 0
    for cmd in (c.Attach("s"), c.Subscribe("", 0), c.Credit(cost("k1"))):
        h.core.receive(x, [encode(cmd)], h.now)
    h.open_streams()
    h.collect()
    del h.pipe[x], h.pipe[admin]
    assert [type(m) for i, m in h.unsent if i == x][:1] == [c.Deliver]
    h.publish("k2", "k3", ident=b"pub2")
    h.now += 1.0
    h.drain()
    assert h.delivered(x) == [(1, "k2")], "the new peering granted credit for one message"
    assert [type(m) for m in h.take(admin)][-1:] == [c.StreamDeleteOk]
