"""The blocking client's sender: sends what the application's calls left queued (issue 20).

A :class:`~zeps.clients.Client` does its I/O inside the application's calls. A loop of
``publish()`` faster than ZeroMQ's I/O thread finds the socket busy after a few frames (its
send high-water mark, ``transport.BATCH_SNDHWM``) and queues the next publishes in the client,
to leave together as one PUBLISH-BATCH (natural batching, :mod:`zeps.clients.batching`). What
is still queued when the loop stops must not wait for the application's next call, which may
never come: a :class:`Flusher` sends it, as the linger of Kafka's producer or the flusher of
NATS's client do, from a daemon thread of its own.

* **Lazy and quiet.** The thread starts the first time a call returns with frames waiting
  for the socket (:meth:`Flusher.arm`), and sleeps on an event whenever nothing waits; a lone
  publish on an idle socket goes out from the caller's thread, at once, as without it.
* **The application first.** Armed, the thread looks every :data:`LINGER` seconds whether the
  application made a call since it last looked (``Client._calls``); only when it did not, and
  frames still wait, does it take the client's guard and send them. A loop of publishes sends
  its own queue (it is faster at it: no thread switch), so the thread costs it a look each
  :data:`LINGER` seconds.
* **One at a time.** The thread takes the client's guard (the lock every call takes) without
  waiting, and says so first (:attr:`Flusher.busy`): a call that finds the guard taken while
  the thread holds it waits for it (:meth:`Flusher.wait_guard`; the thread holds it for at most
  one poll of :data:`HOLD_MS`, less once a caller waits) instead of raising
  :class:`~zeps.clients.errors.ConcurrentUseError`, which a call from a second application
  thread still gets. ZeroMQ sockets may be used from several threads one at a time, with a
  full memory barrier between: the guard is that.
* **Only sending.** The thread sends frames and nothing else: it reads nothing, runs no timers,
  never reconnects and calls no application callback (all of which the application's calls
  do, as before). It sends only while the peering is attached and not about to reconnect; a
  socket that stays busy (a broker that does not read) gets a look at growing intervals, up to
  :data:`MAX_BACKOFF` seconds, until the application's next call.
* **Never in the way.** It holds the client only weakly (a client dropped without ``close()``
  is collected, and the thread ends), stops at :meth:`Flusher.stop` (``close()``), and is a
  daemon: it never keeps the process alive.

Under gevent (``zmq.green``) the client has no thread: an OS thread must not touch a green
socket, and its send high-water mark stays at 64 frames (:data:`NO_FLUSHER`, see
``transport.GREEN_BATCH_SNDHWM``).
"""
from __future__ import annotations

import logging
import threading
import time
import weakref

import zmq

__all__ = ["Flusher", "NO_FLUSHER", "LINGER", "HOLD_MS", "MAX_BACKOFF"]

log = logging.getLogger("zeps.client")

#: How long (s) the application may leave frames queued without a call before the thread
#: sends them; also how often an armed thread looks.
LINGER = 0.0005
#: The longest poll (ms) for a busy socket while the thread holds the client's guard.
HOLD_MS = 1
#: The longest interval (s) between two looks at a socket that stays busy.
MAX_BACKOFF = 0.05

_POLLOUT = int(zmq.POLLOUT)


class _NoFlusher:
    """The flusher of a client without one (gevent): always "armed", never busy."""

    __slots__ = ()
    armed = True
    busy = False

    def arm(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def wait_guard(self) -> bool:
        return False


NO_FLUSHER = _NoFlusher()


class Flusher:
    """Sends what a :class:`~zeps.clients.Client` left queued (see the module docs).

    The client calls :meth:`arm` when one of its calls returns with frames waiting (cheap
    once armed: the client tests :attr:`armed` first), :meth:`wait_guard` when its guard is
    taken, and :meth:`stop` on close.
    """

    def __init__(self, client) -> None:
        self._client = weakref.ref(client)
        self._guard = client._guard
        self._wake = threading.Event()
        #: Set by :meth:`arm`, cleared by the thread once nothing waits.
        self.armed = False
        #: The thread holds the client's guard, or is about to try.
        self.busy = False
        #: A call waits for the guard: the thread lets go as soon as it can.
        self.wanted = False
        self.stopped = False
        self._thread = None

    # ------------------------------------------------------------------ the client's side

    def arm(self) -> None:
        """Frames wait for the socket as a call returns: send them unless the application
        does first (starts the thread the first time)."""
        if self.stopped:
            return
        self.armed = True
        if self._thread is None:
            client = self._client()
            name = f"zeps-flusher-{client.stream if client is not None else '?'}"
            self._thread = threading.Thread(target=_run, args=(self,), name=name, daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """The client is closing: the thread ends (it does not wait for it)."""
        self.stopped = True
        self._wake.set()

    def wait_guard(self) -> bool:
        """Take the client's guard, which was taken, if the thread holds it (then it lets go
        within a poll of :data:`HOLD_MS`): True once taken. False at once if another caller
        holds it (a second application thread)."""
        guard = self._guard
        while self.busy:
            self.wanted = True
            if guard.acquire(timeout=HOLD_MS / 1000):
                self.wanted = False
                return True
        self.wanted = False
        return guard.acquire(False)

    # ------------------------------------------------------------------ the thread's side

    def _idle(self, client) -> None:
        """Nothing waits: disarm, and sleep until the next :meth:`arm`."""
        self._wake.clear()
        self.armed = False
        if client._p.waiting:          # queued meanwhile, before the call saw armed == False
            self.armed = True
            self._wake.set()

    def _send(self, client) -> bool:
        """Send what waits, holding the guard: True when the socket took everything, False
        when something still waits (the socket stays busy, the application is inside a call,
        the peering is not attached: look again later)."""
        guard = self._guard
        self.busy = True
        try:
            if not guard.acquire(False):     # the application is inside a call
                return False
            try:
                p, conn = client._p, client._conn
                if (client.closed or conn.sock is None or not p.attached
                        or p.need_reconnect is not None):
                    return False             # the application's next call sees to it
                if not p.waiting:
                    return True
                if not conn.writable():
                    if self.wanted or not zmq.zmq_poll([(conn.sock, _POLLOUT)], HOLD_MS):
                        return False
                conn.send_queued()
                return not p.waiting
            finally:
                guard.release()
        finally:
            self.busy = False


def _run(flusher: Flusher) -> None:
    """The thread: wait to be armed, then look every LINGER seconds; send when the application
    made no call since the last look, at growing intervals while that does not empty the
    queue."""
    wake = flusher._wake
    backoff = LINGER
    calls = -1
    while not flusher.stopped:
        wake.wait()
        if flusher.stopped:
            break
        time.sleep(backoff)
        client = flusher._client()
        if client is None or flusher.stopped:
            break
        try:
            if not client._p.waiting:
                backoff, calls = LINGER, -1
                flusher._idle(client)
            elif client._calls != calls:      # the application made a call: its turn
                calls = client._calls
                backoff = LINGER
            elif flusher._send(client):
                backoff, calls = LINGER, -1
            else:
                backoff = min(backoff * 2, MAX_BACKOFF)
        except Exception:                    # never silently: the application's calls go on
            log.exception("zeps: the client's sender stopped (stream %r)", client.stream)
            break
        finally:
            client = None
    flusher.stopped = True
    flusher.armed = True                     # the client's calls stop arming it
