"""A client flooding the monitoring port, for tests/test_monitor_flood.py: ``n`` kept-alive
connections, each sending ``per`` requests for ``/healthz`` at once (pipelined, no token) and
reading the answers as they come; run as a process of its own (``python tests/http_flood.py
HOST PORT N PER``), so that the test's client does not share its GIL. It prints ``flooding``
once every connection has sent its requests, then runs until it is killed."""
from __future__ import annotations

import select
import socket
import sys

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def main(host: str, port: int, n: int, per: int) -> None:
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port))
        s.sendall(REQUEST * per)
        s.setblocking(False)
        socks.append(s)
    print("flooding", flush=True)
    while socks:
        readable, _, _ = select.select(socks, [], [], 1.0)
        for s in readable:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                socks.remove(s)
                s.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
