"""A bare ZEPS peer for protocol tests: a DEALER socket that speaks commands, not the SDK."""
from __future__ import annotations

import time
from typing import List, Type

import zmq

from zeps.protocol import commands as c
from zeps.protocol import decode, encode


class RawClient:
    def __init__(self, endpoint: str, ctx: zmq.Context = None):
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, *cmds: c.Command) -> None:
        for cmd in cmds:
            self.sock.send(encode(cmd))

    def send_raw(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames))

    def recv(self, timeout: float = 5.0) -> c.Command:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError(f"nothing from the broker in {timeout}s")
        return decode(self.sock.recv())

    def expect(self, cls: Type[c.Command], timeout: float = 5.0) -> c.Command:
        cmd = self.recv(timeout)
        assert isinstance(cmd, cls), f"expected {cls.NAME}, got {cmd!r}"
        return cmd

    def nothing(self, timeout: float = 0.3) -> bool:
        return not self.sock.poll(int(timeout * 1000))

    def attach(self, stream: str) -> "RawClient":
        self.send(c.Attach(stream))
        self.expect(c.AttachOk)
        return self

    def subscribe(self, pattern: str = "", latest: int = 0, credit: int = 0) -> "RawClient":
        self.send(c.Subscribe(pattern, latest))
        self.expect(c.SubscribeOk)
        if credit:
            self.send(c.Credit(credit))
        return self

    def delivers(self, n: int, timeout: float = 10.0) -> List[c.Deliver]:
        out: List[c.Deliver] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"got {len(out)} of {n} DELIVER")
            cmd = self.recv(left)
            assert isinstance(cmd, c.Deliver), f"expected DELIVER, got {cmd!r}"
            out.append(cmd)
        return out

    def close(self) -> None:
        self.sock.close(0)
