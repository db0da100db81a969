"""A :class:`~zeps.clients.Client`'s life outside the program's calls: what becomes of one the
program does not close, and of its copy in a forked child.

``publish()`` returns once ZeroMQ or the client's queue has the message (natural batching,
issue 20), so a loop of publishes ends with some of them still in the client, and its socket
closes with linger 0. Without this module a script that ended after such a loop lost what was
still queued, silently (tests/test_client_lifetime.py).

* **At interpreter exit** every client still open is closed as ``Client.close()`` does: what it
  queued is sent and the broker has processed it (DETACH-OK). All of them share one deadline,
  the longest of their ``timeout``: a program with many clients and a broker that never
  answers waits that long, not the sum. A close that cannot finish (no broker, a thread still
  inside a call) logs a warning, and the exit goes on. As kafka-python's producer closes itself
  at exit.
* **Collected without close()** while the program runs, a client drops what it still held and
  logs how many (its ``__del__``; it does not send: ``__del__`` may run in the client's own
  sender thread, :mod:`zeps.clients.flusher`, which a close would wait for).
* **In a child of os.fork()** (``multiprocessing``'s default start method on Linux) the
  parent's clients are copies whose ZeroMQ sockets belong to the parent's context: a call on
  one in the child spun for ever inside ZeroMQ, and closing them at the child's exit did too.
  Right after the fork (``os.register_at_fork``) each copy is closed without a call on its
  socket, and a call on it raises :class:`~zeps.clients.errors.ClientForked`, which says to
  make a new client in the child. The parent's clients go on unaffected. The same holds for
  the other objects that own a socket across calls (:func:`watch_fork`): a durable consumer's
  member (whose copy also held the parent's prefetched messages, which the child would have
  handed out a second time) and an :class:`~zeps.clients.AsyncClient`.
"""
from __future__ import annotations

import atexit
import logging
import os
import time
import weakref

from .peering import CLOSED

__all__ = ["opened", "closed", "warn_dropped", "watch_fork", "unwatch", "disown", "keep"]

log = logging.getLogger("zeps.client")

#: The clients not closed yet (weakly: a client collected without close() leaves by itself).
_open = weakref.WeakSet()
#: The other owners of sockets made in this process (consumers, asyncio clients), weakly.
_fork_watched = weakref.WeakSet()


def opened(client) -> None:
    """``client`` is connected: close it at exit unless it is closed first."""
    client._pid = os.getpid()
    _open.add(client)


def watch_fork(owner) -> None:
    """``owner`` holds a ZeroMQ socket made in this process across calls: in a forked child,
    its ``_forked()`` is called at once (it forgets the socket without a call on it, and
    every call on it raises :class:`~zeps.clients.errors.ClientForked`). ``owner._pid`` is
    this process's id."""
    owner._pid = os.getpid()
    _fork_watched.add(owner)


def unwatch(owner) -> None:
    """``owner`` was closed: its copy in a forked child stays as it is (closed)."""
    _fork_watched.discard(owner)


def disown(*socks) -> None:
    """In a forked child, the parent's asyncio sockets (``zmq.asyncio``): closed or finalized
    there, such a socket unregisters its descriptor from its event loop's epoll, which the child
    shares with the parent (the parent's socket then went unwatched: a delivery waited 1 s).
    Without their loop they leave it alone (pyzmq itself closes no socket of another process).
    The owners keep them referenced too (``_abandoned``)."""
    for sock in socks:
        if getattr(sock, "_current_loop", None) is not None:
            sock._current_loop = None


#: In a forked child: the parent's ZeroMQ objects that no owner holds any more (:func:`keep`).
_parents: list = []


def keep(*objs) -> None:
    """In a forked child: hold the parent's ZeroMQ objects (sockets, contexts) for the life of
    the process, so that nothing in the child finalizes them."""
    _parents.extend(objs)


def closed(client) -> None:
    """``client`` was closed."""
    _open.discard(client)


@atexit.register
def close_open_clients() -> None:
    """Close the clients of this process still open (see the module's documentation)."""
    pid = os.getpid()      # a child forked by C code, without Python's fork hooks, has copies
    clients = [c for c in list(_open) if c._pid == pid]
    if not clients:
        return
    deadline = time.monotonic() + max(c.timeout for c in clients)
    for client in clients:
        try:
            client.close(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as e:        # a thread inside a call on it, an INVALID, ...
            log.warning("zeps: closing the client of stream %r at exit: %s", client.stream, e)


def warn_dropped(client) -> None:
    """From ``client.__del__``: log the publishes it drops, if it still held any (its socket,
    closed with linger 0, may hold a few more)."""
    try:
        p = client._p
        if p.state is CLOSED or client._pid != os.getpid():   # a forked child's copy
            return
        n = p.unfinished_publishes()
        if n:
            log.warning("zeps: a client of stream %r was garbage-collected without close(): "
                        "%d publish(es) it still held were dropped; call close() (or use it "
                        "as a context manager) to send them", client.stream, n)
    except Exception:                  # half-built, or the interpreter is shutting down
        pass


def _forked_child() -> None:
    """Right after ``os.fork()``, in the child: the parent's clients (and consumers, ...) are
    unusable copies."""
    owners = list(_open) + list(_fork_watched)
    _open.clear()
    _fork_watched.clear()
    for owner in owners:
        try:
            owner._forked()
        except Exception as e:         # one copy's failure must not leave the others usable
            log.warning("zeps: disabling a forked copy of %r: %s", owner, e)


os.register_at_fork(after_in_child=_forked_child)
