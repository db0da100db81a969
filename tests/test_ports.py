"""The tests' port helper (tests/ports.py): the ports it gives are free and outside the kernel's
ephemeral range, where no connection of any process is given them while a test restarts a
broker on them."""
import socket

import pytest

from . import ports
from .ports import bind_all, ephemeral_range, fixed_ports


def test_fixed_ports_are_free_and_outside_the_ephemeral_range(monkeypatch):
    low, high = ephemeral_range()
    assert 0 < low <= high <= 65535
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (32768, 60999))   # Linux's default
    for _ in range(20):
        base = fixed_ports(3)
        assert all(not 32768 <= p <= 60999 for p in range(base, base + 3))
        bind_all(base, 3)


def test_where_the_ephemeral_range_is_every_port_fixed_ports_are_still_free(monkeypatch):
    """A host tuned to hand out ports 1024-65535: no port is outside; free ones all the same."""
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    for _ in range(20):
        base = fixed_ports(3)
        assert 1024 <= base <= 65533
        bind_all(base, 3)


def test_a_connection_is_never_given_a_fixed_port():
    """What the helper is for: outgoing connections take their local port from the ephemeral
    range, so a restarted broker finds its port free."""
    low, high = ephemeral_range()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        clients = [socket.create_connection(server.getsockname()) for _ in range(50)]
        try:
            assert all(low <= c.getsockname()[1] <= high for c in clients)
        finally:
            for c in clients:
                c.close()


def test_a_broker_whose_port_was_taken_meanwhile_starts_on_another_and_keeps_it(
        start_broker, monkeypatch):
    """The port the test's broker was given is bound by someone else before the broker binds it:
    the start is tried again on another port, and a restart keeps that one."""
    from . import conftest
    taken = socket.socket()
    taken.bind(("127.0.0.1", fixed_ports()))
    taken.listen()
    lost = taken.getsockname()[1]
    given = []

    def pick(n=1):
        given.append(lost if not given else fixed_ports(n))
        return given[-1]
    monkeypatch.setattr(conftest, "fixed_ports", pick)
    try:
        b = start_broker()
    finally:
        taken.close()
    assert len(given) == 2 and b.endpoint == f"tcp://127.0.0.1:{given[1]}"
    b.restart()
    assert b.running and b.endpoint == f"tcp://127.0.0.1:{given[1]}"


def test_a_broker_that_fails_for_another_reason_is_not_started_again(start_broker, monkeypatch):
    from . import conftest
    given = []

    def pick(n=1):
        given.append(fixed_ports(n))
        return given[-1]
    monkeypatch.setattr(conftest, "fixed_ports", pick)
    with pytest.raises(RuntimeError, match="broker did not start"):
        start_broker(None, "--max-clients", "nope")
    assert len(given) == 1
