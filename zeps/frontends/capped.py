"""How the front ends' shell reads a socket: one message at a time, at most ``cap`` frames of it
kept, and the rest of a longer message discarded at most :data:`DISCARD_MAX` frames a turn.

A peer chooses how many frames its message has, and libzmq hands the application a message
only once all of it has come, so a message of 2,000,000 empty frames (4 MB on the wire, sent
by anyone who reaches a front end's port) is there to be read whole. Reading it to its end in
one go took about 11 us a frame: 30 s in which the front end's greenlet never yielded, and so
neither did the broker's, whose ZEPS clients all waited (found by review). Now its first
``cap`` frames are handed on at once (one more than the largest command has: the parser
counts the message as malformed, once, before its rest is read), and the rest is read and
dropped a bounded number of frames per call: the shell's round yields between calls, and the
socket's next message is not read until the rest is gone (a socket delivers a message's
frames in order, so nothing else of that socket can be read in between; its other peers
wait, the broker and the other sockets do not). The frames dropped are counted
(``<socket>.frames discarded``). The memory libzmq holds for a message that is never finished
is its own ("Findings", 9, ``docs/operations.md``).
"""
from __future__ import annotations

from typing import Callable, List, Optional

import zmq.green as zmq

from .counters import Counters

#: Frames of a longer message's rest read and dropped per call (about 11 ms of work at most).
DISCARD_MAX = 1024

_NB = zmq.NOBLOCK


class CappedReader:
    """The messages of ``sock``, NOBLOCK, at most ``cap`` frames of each kept. ``name`` is the
    socket's part of the counters' names (``snapshot``, ``collector``, ``zeps``)."""

    __slots__ = ("sock", "cap", "name", "counters", "discarding")

    def __init__(self, sock, cap: int, name: str, counters: Counters):
        self.sock = sock
        self.cap = cap
        self.name = name
        self.counters = counters
        #: the last message had more than ``cap`` frames and some of them are still to be read
        self.discarding = False

    def recv(self) -> Optional[List[bytes]]:
        """The next message's first ``cap`` frames (zmq.Again if there is none); or None while
        the rest of a longer one is being discarded: up to :data:`DISCARD_MAX` of its frames
        were dropped by this call, and the caller yields before it reads again."""
        if self.discarding:
            self._discard()
            return None
        sock = self.sock
        frames = [sock.recv(_NB)]
        while len(frames) < self.cap and sock.getsockopt(zmq.RCVMORE):
            frames.append(sock.recv(_NB))
        self.discarding = len(frames) == self.cap and bool(sock.getsockopt(zmq.RCVMORE))
        return frames

    def read_turn(self, handle: Callable[[List[bytes]], None], most: int,
                  held: Optional[Callable[[], object]] = None) -> bool:
        """A turn of reading: each message (as :meth:`recv` returns it) handed to ``handle``,
        ``most`` at the most. False when the socket is empty, or ``held()`` (asked before each
        read) is true: done for now; True when the turn was used up or went to discarding the
        rest of a message of too many frames: busy (the caller yields, then goes on)."""
        for _ in range(most):
            if held is not None and held():
                return False
            try:
                frames = self.recv()
            except zmq.Again:
                return False
            if frames is None:
                return True
            handle(frames)
        return True

    def _discard(self) -> None:
        sock = self.sock
        n = 0
        more = True
        while n < DISCARD_MAX and more:
            sock.recv(_NB)                       # the message is delivered whole: it is there
            n += 1
            more = bool(sock.getsockopt(zmq.RCVMORE))
        self.discarding = more
        self.counters.add(f"{self.name}.frames discarded", n)
