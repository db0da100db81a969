"""A fake ZEPS broker for client tests: a raw ROUTER socket on an ephemeral tcp port of
127.0.0.1, served by a thread, that answers the SDK's session set-up (REASONS-SELECT,
STREAM-EXPECT, ATTACH, LIMITS, ...) with zeps.protocol's codec and lets the test send whatever
it likes (:meth:`FakeBroker.send`): a broker that lies.

What it heard is kept (:attr:`FakeBroker.heard`, the commands of every connection, and
:attr:`FakeBroker.credits`); wait on it with :meth:`FakeBroker.wait`, which has a deadline.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, List, Optional, Tuple

import zmq

from zeps.protocol import commands as c
from zeps.protocol import decode, encode

MB = 1 << 20


class FakeBroker:
    """Answers the set-up commands; ``limits``: LIMITS-OK's (max_message, max_credit), or None
    for an older broker's INVALID. BATCH-SELECT, STREAM-DESCRIBE and HEADERS-SELECT are
    refused (plain DELIVER frames); SUBSCRIBE, STREAM-INFO, PING and DETACH are answered."""

    def __init__(self, limits: Optional[Tuple[int, int]] = (MB, 64 * MB)):
        self.limits = limits
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.heard: List[Tuple[bytes, c.Command]] = []     # (routing id, command), in order
        self.credits: List[int] = []
        self.idents: List[bytes] = []                     # the connections that ATTACHed
        self._out: "queue.Queue[Tuple[int, bytes]]" = queue.Queue()
        self._next: Optional[Tuple[int, bytes]] = None
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True, name="fake-broker")
        self._thread.start()

    # ------------------------------------------------------------------ the test's side

    def send(self, frame: bytes, after_credits: int = 1) -> None:
        """Send ``frame`` to the last connection that attached, once ``after_credits`` CREDIT
        commands came (the first connection's grant, with 1; a reconnected one's, with 2)."""
        self._out.put((after_credits, frame))

    def wait(self, ok: Callable[["FakeBroker"], bool], timeout: float = 10.0) -> bool:
        """Wait until ``ok(self)`` (under the lock), at most ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: ok(self), timeout)

    def count(self, cls) -> int:
        return sum(isinstance(cmd, cls) for _, cmd in self.heard)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close(0)
        self.ctx.term()

    def __enter__(self) -> "FakeBroker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the broker's side

    def _answer(self, cmd: c.Command) -> Optional[c.Command]:
        cls = type(cmd)
        if cls is c.Limits and self.limits is not None:
            return c.LimitsOk(*self.limits)
        if cls is c.Limits:
            return c.Invalid("unknown command")
        if cls in (c.BatchSelect, c.StreamDescribe, c.HeadersSelect):
            return c.Invalid("unknown command")
        if cls is c.StreamInfo:
            return c.StreamInfoOk(0, 0, 0, 0, 0)
        return {c.ReasonsSelect: c.ReasonsSelectOk(), c.StreamExpect: c.StreamExpectOk(),
                c.Attach: c.AttachOk(), c.StreamId: c.StreamIdOk(1),
                c.Subscribe: c.SubscribeOk(), c.Ping: c.PingOk(), c.Detach: c.DetachOk(),
                c.DeliverTimestamps: c.DeliverTimestampsOk()}.get(cls)

    def _serve(self) -> None:
        sock = self.sock
        while not self._stop:
            while True:
                if self._next is None and not self._out.empty():
                    self._next = self._out.get()
                if self._next is None or len(self.credits) < self._next[0]:
                    break
                sock.send_multipart([self.idents[-1], self._next[1]])
                self._next = None
            if not sock.poll(10):
                continue
            ident, frame = sock.recv_multipart()
            cmd = decode(frame)
            with self._cond:
                self.heard.append((ident, cmd))
                if isinstance(cmd, c.Attach):
                    self.idents.append(ident)
                elif isinstance(cmd, c.Credit):
                    self.credits.append(cmd.credit)
                self._cond.notify_all()
            reply = self._answer(cmd)
            if reply is not None:
                sock.send_multipart([ident, encode(reply)])
