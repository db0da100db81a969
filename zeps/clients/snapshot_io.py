"""The I/O of a snapshot (:mod:`zeps.clients.snapshot`): a DEALER socket of its own, blocking
(:class:`SnapshotIterator`) or asyncio (:class:`AsyncSnapshotIterator`). Both hand out entries
as they arrive and grant credit back only for those handed out, so iterating slowly (or
stopping) holds the broker back instead of filling memory; ``seq`` is set once the iteration
ends. ``timeout``: the most seconds without a frame from the broker (:class:`ZepsTimeout`).
An iteration resumed in a child of ``os.fork()`` raises
:class:`~zeps.clients.errors.ClientForked` (its socket is the parent's; the child leaves it
alone)."""
from __future__ import annotations

import os
from typing import Sequence

import zmq

from . import lifetime
from .errors import ZepsTimeout, forked
from .snapshot import SNAPSHOT_WINDOW, Snapshot, SnapshotReader
from .transport import asend_within, check_endpoint, send_within, zmq_for

__all__ = ["SnapshotIterator", "AsyncSnapshotIterator", "read_snapshot", "aread_snapshot"]


class _Base:
    def __init__(self, endpoint: str, stream: str, prefixes: Sequence[str] = ("",), *,
                 timeout: float = 10.0, context=None, curve=None, window: int = SNAPSHOT_WINDOW):
        self.endpoint = check_endpoint(endpoint)
        self.reader = SnapshotReader(stream, prefixes, window)
        self.timeout = float(timeout)
        self.context = context
        self.curve = curve

    @property
    def seq(self) -> int:
        """The sequence the snapshot is consistent at (once iterated to the end)."""
        return self.reader.seq

    def _socket(self, asyncio: bool):
        _, ctx = zmq_for(self.context, asyncio=asyncio)
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            self.curve.apply(sock)
        try:
            sock.connect(self.endpoint)
        except zmq.ZMQError as e:
            sock.close()
            raise ValueError(f"bad endpoint {self.endpoint!r}: {e}") from None
        return sock

    def _outgoing(self, pid: int) -> list:
        """A turn's first step: the reader's frames to send (the caller clears them once sent);
        :class:`~zeps.clients.errors.ClientForked` in a child of ``os.fork()``."""
        if os.getpid() != pid:
            raise forked("snapshot", pid)
        return self.reader.outgoing

    def _ready(self):
        """The next step, once the frames were sent: the entries to hand out now (a list; empty
        once the snapshot ended), or None: wait for the broker. The reader's error raised."""
        r = self.reader
        if r.buffered:
            return r.take()
        if r.error is not None:
            raise r.error
        return [] if r.done else None

    def _timed_out(self) -> ZepsTimeout:
        return ZepsTimeout(f"snapshot of stream {self.reader.stream!r}: nothing from the broker "
                           f"at {self.endpoint} for {self.timeout:g}s")


class SnapshotIterator(_Base):
    """Blocking: ``for message in SnapshotIterator(...)``; then ``.seq``."""

    def __iter__(self):
        r = self.reader
        sock = self._socket(False)
        pid = os.getpid()
        try:
            while True:
                frames = self._outgoing(pid)
                for frame in frames:
                    if not send_within(sock, frame, self.timeout):
                        raise self._timed_out()
                frames.clear()
                ready = self._ready()
                if ready is not None:
                    if not ready:
                        return
                    yield from ready
                    continue
                if not sock.poll(int(self.timeout * 1000) + 1, zmq.POLLIN):
                    raise self._timed_out()
                while r.error is None:         # (a broker beyond its credit: no more)
                    try:
                        r.receive(sock.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
        finally:
            _let_go(sock, pid)


class AsyncSnapshotIterator(_Base):
    """asyncio: ``async for message in AsyncSnapshotIterator(...)``; then ``.seq``."""

    async def __aiter__(self):
        import asyncio
        r = self.reader
        sock = self._socket(True)
        pid = os.getpid()
        try:
            while True:
                frames = self._outgoing(pid)
                for frame in frames:
                    if not await asend_within(sock, frame, self.timeout):
                        raise self._timed_out()
                frames.clear()
                ready = self._ready()
                if ready is not None:
                    if not ready:
                        return
                    for m in ready:
                        yield m
                    continue
                try:
                    frame = await asyncio.wait_for(sock.recv(), self.timeout)
                except asyncio.TimeoutError:
                    raise self._timed_out() from None
                r.receive(frame)
        finally:
            _let_go(sock, pid)


def _let_go(sock, pid: int) -> None:
    """An iteration's socket once it ends: closed; in a child of ``os.fork()`` (``pid`` the
    parent's) the parent's, kept and never finalized here (an asyncio one disowned first:
    :func:`~zeps.clients.lifetime.disown`; a blocking one has no loop to leave)."""
    if os.getpid() == pid:
        sock.close()
    else:
        lifetime.disown(sock)
        lifetime.keep(sock)


def read_snapshot(endpoint: str, stream: str, prefixes: Sequence[str] = ("",), **kw) -> Snapshot:
    """The whole snapshot as a :class:`~zeps.clients.snapshot.Snapshot` (a list with ``seq``)."""
    it = SnapshotIterator(endpoint, stream, prefixes, **kw)
    out = list(it)
    return Snapshot(out, it.seq)


async def aread_snapshot(endpoint: str, stream: str, prefixes: Sequence[str] = ("",),
                         **kw) -> Snapshot:
    it = AsyncSnapshotIterator(endpoint, stream, prefixes, **kw)
    out = [m async for m in it]
    return Snapshot(out, it.seq)


