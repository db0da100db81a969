"""The broker shell's socket loops: reading a round's messages off the ROUTER (:func:`drain_py`),
sending the outbox (:func:`send_all_py`), and the question before sleeping
(:func:`readable_py`). The loops here are the definition and the fallback; where the optional
extension ``zeps.broker._sockc`` is built (``_sockc.c``, by ``setup.py``), :class:`SocketLoops`
runs the same loops in C, one call a chunk of a round's reads and one an outbox (issue 20: four
pyzmq calls a message, each building a ``SocketOption`` enum or checking its arguments before
libzmq ran; docs/benchmarks.md, "The socket loops in C").

The C loops take libzmq's functions from the library pyzmq loaded in this process (found in
``/proc/self/maps``, its version checked against pyzmq's), so a socket's handle is only ever
used with the library that made it; where that library cannot be found or told apart (not
Linux, several copies loaded, a pyzmq without ``Socket.underlying``) or ``ZEPS_PURE_PYTHON=1``
is set, the Python loops run.
``tests/test_sockio.py`` checks over real sockets that both read the same messages in the same
order, stop for the same reasons and send the same frames.
"""
from __future__ import annotations

import ctypes
import os
from functools import partial
from typing import Callable, Container, List, Optional, Tuple

import zmq

_send_raw = zmq.backend.Socket.send
_recv_raw = zmq.backend.Socket.recv
_getsockopt = zmq.backend.Socket.get
_NB = int(zmq.NOBLOCK)
_MORE_NB = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)

#: Why :func:`drain_py` returned: the socket had nothing more, a limit was reached, the next
#: message comes from an identity not in ``known`` (its frames are left to the caller), or the
#: message just read has more than one frame (the rest is left to :func:`skip_py`).
DRAINED, LIMIT, NEW, PARTS = 0, 1, 2, 3

Message = Tuple[bytes, List[bytes]]


class Parts:
    """A message of ``count`` frames (more than one) as the core sees it: its ``first`` frame
    and its length, by which the core refuses it (a ZEPS command is one frame). The other
    frames were read off the socket and dropped, a chunk at a time (:func:`skip_py`), never
    kept: a client can send one message of millions of frames (docs/operations.md, Findings).
    """

    __slots__ = ("first", "count")

    def __init__(self, first: bytes, count: int):
        self.first = first
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> bytes:
        if i != 0:
            raise IndexError("only the first frame of a message of several is kept")
        return self.first


def drain_py(sock, known: Container[bytes], max_n: int, max_bytes: int, ask_first: int,
             readable: bool, by_key: bool = False) -> Tuple[List[Message], int, object]:
    """Read whole messages off the ROUTER ``sock`` without waiting: up to ``max_n``, fewer once
    their first frames came to ``max_bytes``. The first ``ask_first`` reads ask ZMQ_EVENTS
    before reading (a read that finds nothing costs more than the question), except the first
    when ``readable`` (the socket said so just now). With ``by_key``, ``known`` maps each
    identity to the CurveZMQ key (``User-Id``) its connection had, and a message of a known
    identity from another key is :data:`NEW` too: another connection claimed the identity
    (a peer picks its own) after the one that had it closed, before the broker read that
    close (docs/operations.md, Security).

    Returns ``(messages, status, ident)``: ``messages`` the ``(identity, [frame])`` read (each
    of one frame); ``status`` :data:`DRAINED` (nothing more was there), :data:`LIMIT`
    (``max_n`` or ``max_bytes`` reached), :data:`NEW`: the next message's identity ``ident`` is
    not in ``known``, and its frames are still on the socket (the caller reads the first with
    its metadata: a connection's first message tells which connection it is), or
    :data:`PARTS`: the next message has more than one frame; ``ident`` is ``(identity, first
    frame)`` and its other frames are still on the socket (the caller drops them with
    :func:`skip_py`, a chunk at a time)."""
    out: List[Message] = []
    n = size = 0
    while n < max_n and size < max_bytes:
        if n < ask_first and not (n == 0 and readable) and not (
                _getsockopt(sock, _EVENTS) & _POLLIN):
            return out, DRAINED, None
        try:
            if by_key:
                frame = _recv_raw(sock, _NB, False)
                ident = frame.bytes
                if known.get(ident, frame) != frame.get("User-Id"):
                    return out, NEW, ident
            else:
                ident = _recv_raw(sock, _NB)
        except zmq.Again:
            return out, DRAINED, None
        if ident not in known:
            return out, NEW, ident
        first = _recv_raw(sock, _NB)               # a ROUTER message is delivered whole
        if _getsockopt(sock, _RCVMORE):
            return out, PARTS, (ident, first)
        size += len(first)
        out.append((ident, [first]))
        n += 1
    return out, LIMIT, None


def skip_py(sock, max_n: int) -> Tuple[int, bool]:
    """Read and drop up to ``max_n`` frames of the message being read (the last frame read
    said more were coming), keeping none. Returns ``(frames read, more to come)``."""
    n = 0
    while n < max_n:
        _recv_raw(sock, _NB, False)
        n += 1
        if not _getsockopt(sock, _RCVMORE):
            return n, False
    return n, True


def send_all_py(sock, out: List[Tuple[bytes, object]], start: int,
                blocked: Optional[Container[bytes]]) -> Tuple[int, int]:
    """Send ``out[start:]``, each ``(identity, frame)`` as one message without waiting, until a
    pair's identity is in ``blocked`` (or None) or a send fails. Returns ``(index, errno)``: the
    index of the pair not sent (``len(out)`` when all went) and the failed send's errno (0 when
    all went or the pair's identity is blocked)."""
    i, n = start, len(out)
    while i < n:
        ident, frame = out[i]
        if blocked is not None and ident in blocked:
            return i, 0
        try:
            _send_raw(sock, ident, _MORE_NB)
            _send_raw(sock, frame, _NB)
        except zmq.ZMQError as exc:
            return i, exc.errno
        i += 1
    return i, 0


def readable_py(sock) -> bool:
    """ZMQ_EVENTS says the socket has a message to read."""
    return bool(_getsockopt(sock, _EVENTS) & _POLLIN)


def _loaded_libzmq() -> Optional[str]:
    """The path of the libzmq pyzmq loaded in this process (``/proc/self/maps``), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = [line.rstrip("\n").split(None, 5)[-1] for line in f]
    except OSError:
        return None
    beside = os.path.dirname(os.path.dirname(os.path.abspath(zmq.__file__)))
    return pick_libzmq(paths, beside)


def pick_libzmq(paths: List[str], beside: str) -> Optional[str]:
    """Of the mapped files ``paths``, the libzmq whose sockets pyzmq makes: the only one, or,
    when several are loaded, the one under ``beside`` (the directory holding pyzmq: its
    wheel's ``pyzmq.libs``); None when there is none or it cannot be told (using a socket with
    another copy of the library would crash the broker, not raise)."""
    found = []
    for path in paths:
        if "/libzmq" in path and ".so" in path and path not in found:
            found.append(path)
    if len(found) == 1:
        return found[0]
    mine = [p for p in found if p.startswith(beside.rstrip(os.sep) + os.sep)]
    return mine[0] if len(mine) == 1 else None


_bound: list = []                   # load_c()'s answer, once


def load_c():
    """``(module, None)``: ``zeps.broker._sockc`` bound to the libzmq pyzmq loaded, or
    ``(None, why not)``. Also under ``ZEPS_PURE_PYTHON=1``, which only says that the broker does
    not use it (the tests hold it to the Python loops there too)."""
    if not _bound:
        _bound.append(_bind())
    return _bound[0]


def _bind():
    try:
        from . import _sockc
    except ImportError:
        return None, "zeps.broker._sockc is not built"
    path = _loaded_libzmq()
    if path is None or not hasattr(zmq.Socket, "underlying"):
        return None, "pyzmq's libzmq not found (or not told apart) in this process"
    lib = ctypes.CDLL(path)               # the library already loaded: the same instance
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.zmq_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    if (major.value, minor.value, patch.value) != zmq.zmq_version_info():
        return None, f"{path} is not the libzmq pyzmq uses"
    if (_NB, int(zmq.SNDMORE), _EVENTS, _POLLIN) != (1, 2, 15, 1):   # what _sockc.c compiles in
        return None, "libzmq's constants differ from zmq.h 4.x"
    names = ("zmq_getsockopt", "zmq_msg_init", "zmq_msg_recv", "zmq_msg_data", "zmq_msg_size",
             "zmq_msg_more", "zmq_msg_close", "zmq_send", "zmq_errno", "zmq_msg_gets")
    _sockc.bind(*(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names),
                zmq.ZMQError)
    return _sockc, None


if os.environ.get("ZEPS_PURE_PYTHON") == "1":
    sockc, C_LOOPS_WHY = None, "ZEPS_PURE_PYTHON=1"
else:
    sockc, C_LOOPS_WHY = load_c()
#: True when the broker's socket loops run in C (C_LOOPS_WHY says why not).
C_LOOPS = sockc is not None


class SocketLoops:
    """:func:`drain_py`, :func:`skip_py`, :func:`send_all_py` and :func:`readable_py` bound to
    one socket: the C loops (``compiled`` None: where the broker uses them, :data:`C_LOOPS`),
    else the Python ones.
    The socket must stay open while they are used (the C loops hold its handle)."""

    drain: Callable[..., Tuple[List[Message], int, object]]
    skip: Callable[[int], Tuple[int, bool]]
    send_all: Callable[..., Tuple[int, int]]
    readable: Callable[[], bool]

    def __init__(self, sock, compiled: Optional[bool] = None):
        self.compiled = C_LOOPS if compiled is None else compiled
        if self.compiled:
            c, why = load_c()
            if c is None:
                raise RuntimeError(f"the C socket loops are not available: {why}")
            handle = sock.underlying
            self.drain = partial(c.drain, handle)
            self.skip = partial(c.skip, handle)
            self.send_all = partial(c.send_all, handle)
            self.readable = partial(c.readable, handle)
        else:
            self.drain = partial(drain_py, sock)
            self.skip = partial(skip_py, sock)
            self.send_all = partial(send_all_py, sock)
            self.readable = partial(readable_py, sock)
