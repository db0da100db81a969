"""How the blocking client waits (zeps/clients/waiting.py): by reading, with the socket
serviced (monitor, timers, credit, reconnecting) when something is to be done and otherwise
every SERVICE_SPACING seconds. A real broker process; the read timeouts are pure."""
from __future__ import annotations

import time

import pytest

from zeps.clients import Client, ZepsTimeout
from zeps.clients import transport
from zeps.clients.states import LOST, RECONNECTED
from zeps.clients.transport import READ_SPACING_MS, SERVICE_SPACING
from zeps.clients.waiting import read_ms

FAST = dict(timeout=5.0, heartbeat=1.0)


def test_a_read_waits_until_the_deadline_rounded_up_and_no_longer_than_the_spacing():
    assert read_ms(None) == READ_SPACING_MS == int(SERVICE_SPACING * 1000)
    assert read_ms(10.0) == READ_SPACING_MS          # a long wait: the same RCVTIMEO each read
    assert read_ms(0.0104) == 11                     # rounded up: never before the deadline
    assert read_ms(0.0) == 0 and read_ms(-1.0) == 0  # due: a read that does not wait


def test_a_subscriber_read_message_by_message_is_serviced_when_due_not_per_message(
        start_broker, monkeypatch):
    """Published one at a time and each read before the next is published (a subscriber woken
    once per message), 300 messages of 1000 bytes arrive in order through a credit window of
    16 KiB, so the credit goes back about 40 times, while the socket is serviced (monitor,
    timers) only when due, not once per message: with the spacing made an hour, the few
    services left are the heartbeat's."""
    monkeypatch.setattr(transport, "SERVICE_SPACING", 3600.0)
    b = start_broker(None, "--max-message", "1024")
    n = 300
    with Client(b.endpoint, "s", create=True, credit_window=16 << 10) as sub_client, \
            Client(b.endpoint, "s") as pub:
        sub = sub_client.subscribe()
        conn = sub_client._conn
        calls = []
        service = conn.service

        def counted():
            calls.append(1)
            service()
        conn.service = counted
        got = []
        for i in range(n):
            pub.publish("k", b"%04d" % i + b"x" * 996)
            m = sub.next(timeout=10)
            got.append((m.sequence, m.body[:4]))
        assert got == [(i + 1, b"%04d" % i) for i in range(n)]
        assert sub_client._p.credit_window == 16 << 10    # so the credit went back ~40 times
        assert len(calls) < n // 10, f"serviced {len(calls)} times for {n} messages"


def test_a_subscriber_waiting_for_its_next_message_hears_the_connection_lost_and_resumes(
        start_broker, tmp_path):
    """The broker killed while the subscriber waits in next(): its monitor's event is seen by
    the next service (the reads in between do not block it for longer than the spacing), the
    application hears LOST, and once the broker is back the subscriber resumes after the last
    message it was handed."""
    b = start_broker(tmp_path / "data")
    events = []
    with Client(b.endpoint, "s", create=True, on_connection=events.append, **FAST) as c, \
            Client(b.endpoint, "s", confirms=True, **FAST) as pub:
        sub = c.subscribe()
        pub.publish("k", b"1")
        pub.wait_for_confirms()
        assert sub.next(timeout=10).body == b"1"
        b.kill()
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            with pytest.raises(ZepsTimeout):
                sub.next(timeout=0.1)
        assert [e.kind for e in events] == [LOST]
        b.restart()
        pub.publish("k", b"2")
        pub.wait_for_confirms(timeout=10)
        m = sub.next(timeout=10)
        assert (m.sequence, m.body) == (2, b"2")
        assert [e.kind for e in events] == [LOST, RECONNECTED]
