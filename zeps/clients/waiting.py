"""How the blocking :class:`~zeps.clients.Client` waits: it drives each operation of
:mod:`zeps.clients.operations` through its waits, doing the I/O of its
:class:`~zeps.clients.transport.Connection` in the application's thread.

* **Plain ZeroMQ: waiting is reading.** The client waits for the broker with ZeroMQ's own
  blocking read (:meth:`~zeps.clients.transport.Connection.recv_within`), as a raw reader does,
  and services the socket (the monitor's events, the peering's timers, reconnecting, sending
  what is queued, handing connection events on) when something is to be sent or handed on, and
  otherwise once every :data:`~zeps.clients.transport.SERVICE_SPACING` seconds. Polling the
  socket and its monitor and servicing after each wake-up cost a subscriber woken once per
  message about five ZeroMQ calls that each poll the socket's mailbox (a system call each),
  and its tail at 10k msg/s (issue 20, docs/benchmarks.md).
* **The subscriber's next message.** While the peering is only streaming (attached,
  subscribed, nothing buffered, to send or to say) and the socket was serviced lately,
  :meth:`Driver._fill` reads the next frame itself and hands what it brings, without building
  an operation: the path of a subscriber woken once per message.
* **gevent** (``zmq.green``): the client polls the socket and its monitor (the green poller
  lets other greenlets run) and services after each wake-up.

A lost connection is therefore noticed within a service interval or two (ZeroMQ itself waits
100 ms before reconnecting), and a timer fires up to a read's length late (the heartbeat's
probe: seconds); a deadline (a ``timeout``) is kept to the millisecond.
"""
from __future__ import annotations

import time
from threading import get_ident as _get_ident
from typing import Optional

from . import operations as ops
from .transport import READ_SPACING_MS, SERVICE_SPACING

__all__ = ["Driver", "read_ms"]

_monotonic = time.monotonic


def read_ms(wait: Optional[float]) -> int:
    """RCVTIMEO for a blocking read of up to ``wait`` seconds (None: no deadline): rounded up
    to the millisecond, and the same from read to read while the wait is long (setting it
    costs more than the read's own Python)."""
    if wait is None or wait >= SERVICE_SPACING:
        return READ_SPACING_MS
    return int(wait * 1000) + 1 if wait > 0 else 0


class Driver:
    """The blocking client's driving and waiting: a mixin of :class:`~zeps.clients.Client`,
    which owns ``_p`` (the peering), ``_conn`` (the connection), ``_blocking`` (plain ZeroMQ:
    waits by reading), ``green``, ``_guard``, ``_owner``, ``_flusher`` and ``_concurrent``."""

    __slots__ = ()

    def _fill(self, ready, timeout: Optional[float], batches: bool = False) -> bool:
        """Put the next messages (or batches) into ``ready`` (see :func:`operations.fill`);
        the subscription's wait. While the peering is only streaming and the socket was
        serviced lately, the next frame is read here and what it brings handed at once;
        anything else goes through the general operation."""
        if not self._guard.acquire(False):         # _guarded, inlined on the hot path
            self._concurrent("Subscription.next/poll")
        self._owner = _get_ident()
        try:
            p = self._p
            if self._blocking and not batches and not p.buffer and p.streaming:
                conn = self._conn
                now = _monotonic()
                if now < conn.service_due:             # poll(0): a read that does not wait
                    # (poll(0) read nothing here: a frame already in the socket waited for the
                    # next service, up to SERVICE_SPACING, 50 ms)
                    frame = conn.recv_within(READ_SPACING_MS if timeout is None
                                             else read_ms(timeout))
                    if frame is not None:
                        p.receive(frame, _monotonic())
                        if p.buffer and p.error is None:      # as operations.fill takes
                            ready.extend(p.take())
                            if p.outbox:                # credit granted back
                                conn.send_queued()
                            return True
                    if timeout is not None:             # what the read took counts
                        timeout = max(timeout - (_monotonic() - now), 0.0)
            return self._run(ops.fill(self, ready, timeout, batches))
        finally:
            self._guard.release()
            if self._p.waiting and not self._flusher.armed:
                self._flusher.arm()

    def _run(self, steps):
        """Drive an operation of :mod:`zeps.clients.operations` through each of its waits."""
        try:
            wait = next(steps)
            while True:
                wait = steps.send(self._pump(*wait))
        except StopIteration as done:
            return done.value

    def _send_queued(self) -> None:
        """Send what the peering queued, as far as the socket takes it (no waiting)."""
        if self._p.waiting and self._conn.sock is not None:
            self._conn.send_queued()

    def _pump(self, cond, deadline: Optional[float]) -> bool:
        """Do I/O until ``cond()`` is true (True) or ``deadline`` passes (False)."""
        conn, p = self._conn, self._p
        blocking = self._blocking
        while True:
            now = _monotonic()
            if (not blocking or now >= conn.service_due or p.waiting or p.events
                    or p.need_reconnect is not None or conn.handshakes is not None):
                conn.service()
                now = _monotonic()
                if blocking:
                    conn.serviced(now)
            if cond():
                return True
            if deadline is not None and now >= deadline:
                return False
            wait = 1.0 if deadline is None else deadline - now
            if conn.poller is None:
                self._sleep(max(min(wait, p.next_timer(now) - now), 0.0))
            elif (blocking and conn.handshakes is None and not p.waiting
                  and p.need_reconnect is None):
                frame = conn.recv_within(read_ms(min(wait, conn.service_due - now)))
                if frame is not None:
                    p.receive(frame, _monotonic())
                    if p.need_reconnect is None:    # and the frames behind it: a reader in
                        conn.drain()                # bulk takes all that are there at once
            else:
                wait = max(min(wait, p.next_timer(now) - now), 0.0)
                conn.arm().poll(int(wait * 1000) + (1 if wait > 0 else 0))

    def _sleep(self, seconds: float) -> None:
        if self.green:
            import gevent
            gevent.sleep(seconds)
        else:
            time.sleep(seconds)
