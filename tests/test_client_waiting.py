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


def test_poll_0_hands_a_message_already_in_the_socket(start_broker, monkeypatch):
    """``sub.poll(0)`` with a message in the client's socket returns it. (It read nothing:
    the frame waited for the next service of the socket, up to ``SERVICE_SPACING``, here made
    an hour, so a loop of ``poll(0)`` saw arrivals every 50 ms at best.)"""
    import zmq
    monkeypatch.setattr(transport, "SERVICE_SPACING", 3600.0)
    b = start_broker(None)
    with Client(b.endpoint, "s", create=True) as c, Client(b.endpoint, "s") as pub:
        sub = c.subscribe(live=True)
        for i in range(5):
            pub.publish("k", b"%d" % i)
            pub.flush()
            assert c._conn.sock.poll(10_000, zmq.POLLIN), "the DELIVER did not arrive"
            m = sub.poll(0)
            assert m is not None and m.body == b"%d" % i


def test_wait_for_confirms_with_everything_confirmed_answers_while_reconnecting(
        start_broker, tmp_path):
    """Everything published is confirmed, and the broker is down: ``wait_for_confirms`` says
    so at once (it waited for the client to attach again, and raised ZepsTimeout "0 published
    message(s) not confirmed"); a request's timeout names the seconds it was given."""
    b = start_broker(tmp_path / "data")
    events = []
    with Client(b.endpoint, "s", create=True, confirms=True, on_connection=events.append,
                **FAST) as c:
        seq = c.publish("k", b"x").result(10)
        assert c.wait_for_confirms(timeout=10) == seq
        b.kill()
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:   # until the client knows
            with pytest.raises(ZepsTimeout):
                c.flush(timeout=0.1)
        assert [e.kind for e in events] == [LOST]
        assert c.wait_for_confirms(timeout=0.5) == seq
        with pytest.raises(ZepsTimeout, match=r"within 0\.5s"):
            c.info(timeout=0.5)


def test_publish_batch_on_a_closed_client_is_client_closed(start_broker):
    """A client closed without the broker's DETACH-OK (the broker stopped reading) keeps the
    frames it could not send; ``publish_batch`` then raised ``TypeError`` where ``publish``
    raises ``ClientClosed``."""
    import os
    import signal
    from zeps.clients import ClientClosed
    b = start_broker(None)
    c = Client(b.endpoint, "s", create=True, timeout=1)
    c.publish("k", b"x")
    c.flush()
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ZepsTimeout):
            for _ in range(100_000):
                c.publish("k", b"y" * 1000)
        c.close(timeout=0.3)
        assert c.closed and c._p.outbox
        with pytest.raises(ClientClosed):
            c.publish_batch([("k", b"z")] * 3)
        with pytest.raises(ClientClosed):
            c.publish("k", b"z")
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
