"""The slowloris attacker's process for tests/test_monitor.py (``Dribblers``): a module of its
own, so that the process spawned to run it imports only this."""
from __future__ import annotations

import select
import socket
import time
from typing import Dict


def dribble(address, n: int, pace: float, head: bytes, counts, reconnect, halt) -> None:
    """tests/test_monitor.py's ``Dribblers``' process: ``counts`` holds (rounds, closed, open)."""
    sent: Dict[socket.socket, int] = {}

    def open_one() -> None:
        s = socket.create_connection(address, timeout=5)
        s.setblocking(False)
        sent[s] = 0
        counts[2] = len(sent)

    def lost(s: socket.socket) -> None:
        del sent[s]
        counts[2] = len(sent)
        s.close()
        counts[1] += 1
        if reconnect.is_set() and not halt.is_set():
            open_one()

    for _ in range(n):
        open_one()
    next_byte = time.monotonic()
    while not halt.is_set():
        readable, _, _ = select.select(list(sent), [], [], pace)
        for s in readable:                         # the server answered or closed it
            try:
                if s.recv(65536):
                    continue                       # an answer: the close comes next
            except BlockingIOError:
                continue
            except OSError:
                pass
            lost(s)
        if time.monotonic() < next_byte:
            continue
        next_byte = time.monotonic() + pace
        for s in list(sent):
            try:
                s.send(head[sent[s]:sent[s] + 1])
                sent[s] += 1
            except BlockingIOError:
                pass
            except OSError:
                lost(s)
        counts[0] += 1
    for s in sent:
        s.close()
