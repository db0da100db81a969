"""The tests' port helper (tests/ports.py): the ports it gives are free and outside the kernel's
ephemeral range, where no connection of any process is given them while a test restarts a
broker on them."""
import socket

from .ports import ephemeral_range, fixed_ports


def test_fixed_ports_are_free_and_outside_the_ephemeral_range():
    low, high = ephemeral_range()
    assert 0 < low <= high <= 65535
    for _ in range(20):
        base = fixed_ports(3)
        assert all(not low <= p <= high for p in range(base, base + 3))
        held = []
        try:
            for port in range(base, base + 3):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
        finally:
            for s in held:
                s.close()


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
