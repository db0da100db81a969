"""Ports for tests that must keep or reuse a port: chosen outside the kernel's ephemeral range.

A test that restarts a broker on the port it had, or that points a client at a port where
nothing listens, leaves that port free for a while. A port of the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``) can then be handed to any process's outgoing
connection or ``bind(0)`` — among them the test's own clients, reconnecting to it, which may
even connect to themselves (TCP's simultaneous open on a local port equal to the remote one).
Below that range the kernel hands out no port by itself: only an explicit ``bind`` takes one
(another test's, which probes first and tries other ports if it loses the race at its start).
"""
from __future__ import annotations

import random
import socket
from typing import Tuple

#: The lowest port handed out here (above the well-known and most registered services' ports).
LOWEST = 20000


def ephemeral_range() -> Tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def fixed_ports(n: int = 1) -> int:
    """A port ``P`` with ``P .. P+n-1`` outside the ephemeral range and free on 127.0.0.1 now
    (bind-probed): what a test may bind, free and bind again. Where the ephemeral range leaves
    no room (e.g. ``1024 65535``), ports from it, free now, as ``bind(0)`` gives them."""
    low, high = ephemeral_range()
    spans = [(LOWEST, low - n)] if low - n >= LOWEST else []
    if high + 1 <= 65536 - n:
        spans.append((high + 1, 65536 - n))
    for _ in range(500):
        if spans:
            first, last = random.choice(spans)
            base = random.randint(first, last)
        else:                 # the ephemeral range is (nearly) all ports: take what bind(0) gives
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                base = s.getsockname()[1]
            if base + n - 1 > 65535:
                continue
        try:
            bind_all(base, n)
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {n} consecutive free ports")


def bind_all(base: int, n: int) -> None:
    """Bind ``base .. base+n-1`` on 127.0.0.1 at once, then free them; OSError if one is taken."""
    held = []
    try:
        for port in range(base, base + n):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", port))
    finally:
        for s in held:
            s.close()
