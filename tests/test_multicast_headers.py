"""Headers through the multicast bridge (issue 18 item 7): the datagram format (version 1) has no
room for them, so the bridge sends a message with headers as a REF entry (counted), and the
receiver fetches it from the broker, whose feed brings it with its headers: the application
gets every message once, in order, headers kept."""
from __future__ import annotations

from tests.test_multicast_receiver import receiver, serve
from zeps.clients.message import Headers, Message
from zeps.multicast import datagram as dg
from zeps.multicast.sender import Sender

H = Headers((("uuid", b"u" * 16), ("ttl", b"30")))


def test_a_message_with_headers_goes_by_reference_and_is_counted():
    s = Sender("s", "", session=1, start_after=0, now=0.0)
    s.tick(0.0)
    s.add(1, "a", b"1", 11)
    s.add(2, "b", b"2", 12, H)
    s.add(3, "c", b"3", 13, ())
    d = dg.decode(s.flush())
    assert [(e.sequence, e.after, e.ref) for e in d.entries] == [(1, 0, False), (2, 1, True),
                                                                  (3, 2, False)]
    assert (s.messages, s.refs, s.header_refs) == (2, 1, 1)


def test_the_receiver_hands_it_with_its_headers_from_the_feed():
    journal = [Message(1, "a", b"1", 11, "s"), Message(2, "b", b"2", 12, "s", H),
               Message(3, "c", b"3", 13, "s")]
    s = Sender("s", "", session=1, start_after=0, now=0.0)
    s.tick(0.0)
    for m in journal:
        s.add(m.sequence, m.key, m.body, m.timestamp, m.headers)
    r = receiver()
    r.on_datagram(s.flush(), 0.0)
    serve(r, journal, 0.0, lambda: len(r.ready) == 3)
    assert list(r.ready) == journal and r.ready[1].headers == H
    assert r.stats.refs == 1
