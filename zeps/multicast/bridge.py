"""The multicast bridge process: a broker client that multicasts what it receives.

:class:`Bridge` subscribes to one stream (and pattern) of a broker with the SDK's
:class:`~zeps.clients.Client`, hands each message to the pure :class:`~zeps.multicast.sender.
Sender` and sends the datagrams it produces to the group. Where it starts:

1. after the sequence in ``state_file`` if that file exists (the bridge writes there, at every
   HEAD and when it stops, the last sequence it sent: a restarted bridge resumes without a gap);
2. else at ``from_seq``;
3. else live: after the stream's last sequence when it starts (the bridge's first HEAD
   announces it, so receivers fetch whatever was published while no bridge ran).

A broker restart is the SDK's business: the client re-attaches and resubscribes from the last
message it handed to the bridge, so the multicast stream goes on without a gap. Receivers cost
the bridge nothing: it sends each datagram once, whoever listens.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable

from zeps.clients import Client, ZepsError
from zeps.clients.defaults import DEFAULT_HEARTBEAT

from .datagram import MAX_SEQUENCE
from .sender import DEFAULT_DATAGRAM, DEFAULT_HEAD_INTERVAL, Sender
from .transport import check_interface, open_sender, parse_group, zmq_multicast

__all__ = ["Bridge", "BridgeError"]

log = logging.getLogger("zeps.bridge")

#: Messages the bridge takes from the broker before it flushes a partly filled datagram.
_BATCH = 1000
#: Longest wait on the broker before the bridge looks at its stop flag.
_MAX_WAIT = 0.2
_STATE_VERSION = 1


class BridgeError(Exception):
    """The bridge cannot start or go on (unusable state file, group that cannot be reached)."""


class Bridge:
    """Multicasts the messages of ``stream`` matching ``pattern`` to ``group``.

    Args:
        endpoint: the broker's endpoint.
        stream, pattern: what to read (``pattern`` as in :meth:`Client.subscribe`).
        group: ``"239.x.y.z:PORT"`` (IPv4 multicast).
        interface: IPv4 address of the interface to send from (default: the route's).
        ttl: multicast TTL (default 1: this network only).
        from_seq: where to start when there is no state file (default: live).
        max_datagram: largest datagram in bytes (default 1472: a 1500-byte MTU).
        head_interval: seconds between HEAD announcements.
        state_file: where to keep the last sequence sent across restarts.
        timeout, heartbeat: passed to the :class:`Client`.
        outgoing: a test hook. Called with each datagram, it returns the datagrams to send in
            its place (none to drop it, two to duplicate it, a held one later to reorder).
    """

    def __init__(self, endpoint: str, stream: str, group, pattern: str = "", *,
                 interface: str | None = None, ttl: int = 1, from_seq: int | None = None,
                 max_datagram: int = DEFAULT_DATAGRAM,
                 head_interval: float = DEFAULT_HEAD_INTERVAL, state_file: str | None = None,
                 timeout: float = 10.0, heartbeat: float = DEFAULT_HEARTBEAT,
                 outgoing: Callable[[bytes], Iterable[bytes]] | None = None, curve=None):
        self.endpoint = endpoint
        self.stream = stream
        self.pattern = pattern
        self.group = parse_group(group)
        self.interface = check_interface(interface)
        self.ttl = ttl
        if from_seq is not None and (isinstance(from_seq, bool) or not isinstance(from_seq, int)
                                     or not 1 <= from_seq <= MAX_SEQUENCE):
            raise ValueError("from_seq must be an integer from 1 to 2^64-1")
        self.from_seq = from_seq
        self.max_datagram = max_datagram
        self.head_interval = head_interval
        self.state_file = state_file
        self.timeout = timeout
        self.heartbeat = heartbeat
        self.curve = curve                 # CurveKeys for the broker connection, or None
        self._outgoing = outgoing
        self._stop = False
        self._sock = None
        #: The :class:`Sender` of the running session (its counters are the bridge's stats).
        self.sender: Sender | None = None
        #: Datagrams the system refused to send (the receivers repair what they carried).
        self.send_errors = 0
        self._state_error: str | None = None     # why the state file was last not written
        # Checks the sizes now, so that a bad --max-datagram fails before anything starts.
        Sender(stream, pattern, session=0, start_after=0, max_datagram=max_datagram,
               head_interval=head_interval, now=0.0)

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler)."""
        self._stop = True

    # ------------------------------------------------------------------ state file

    def read_state(self) -> int | None:
        """The last sequence a previous run sent, from the state file; ``None`` if it has none."""
        if not self.state_file or not os.path.exists(self.state_file):
            return None
        try:
            with open(self.state_file, encoding="utf-8") as f:
                state = json.load(f)
            head = state["head"]
            ok = (state.get("version") == _STATE_VERSION and type(head) is int
                  and 0 <= head <= MAX_SEQUENCE)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BridgeError(f"cannot read state file {self.state_file}: {e}") from None
        if not ok:
            raise BridgeError(f"state file {self.state_file} is not a bridge state (version "
                              f"{_STATE_VERSION})")
        if (state.get("stream"), state.get("pattern")) != (self.stream, self.pattern):
            raise BridgeError(f"state file {self.state_file} belongs to stream "
                              f"{state.get('stream')!r} pattern {state.get('pattern')!r}, not "
                              f"stream {self.stream!r} pattern {self.pattern!r}")
        return head

    def _write_state(self, head: int) -> None:
        """Keep ``head`` in the state file (at every HEAD and at the end). A write that fails
        is said once, not at every HEAD, and again only when the reason changes; a write that
        works again after failures is said too."""
        if not self.state_file:
            return
        tmp = f"{self.state_file}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"version": _STATE_VERSION, "stream": self.stream,
                           "pattern": self.pattern, "head": head}, f)
            os.replace(tmp, self.state_file)
        except OSError as e:
            why = str(e)
            if why != self._state_error:
                log.warning("zeps bridge: cannot write state file %s: %s (said once, until it "
                            "works again)", self.state_file, why)
            self._state_error = why
            return
        if self._state_error is not None:
            log.warning("zeps bridge: state file %s written again (sequence %d)",
                        self.state_file, head)
            self._state_error = None

    # ------------------------------------------------------------------ running

    def run(self, on_ready: Callable[[Bridge], None] | None = None) -> None:
        """Bridge until :meth:`stop` is called. ``on_ready`` is called once the bridge is
        subscribed and its first HEAD is out. Raises :class:`BridgeError`, or the SDK's errors
        when the broker cannot be reached (:class:`~zeps.clients.ZepsTimeout`) or refuses."""
        start_after = self.read_state()
        if start_after is None and self.from_seq is not None:
            start_after = self.from_seq - 1
        try:
            self._sock = open_sender(self.group, self.interface, self.ttl)
        except OSError as e:
            raise BridgeError(f"cannot send to {self.group[0]}:{self.group[1]}: {e}") from None
        client = None
        try:
            client = Client(self.endpoint, self.stream, timeout=self.timeout,
                            heartbeat=self.heartbeat, curve=self.curve)
            last = client.info().last
            if start_after is None:
                start_after = last
            elif start_after > last:
                log.warning("zeps bridge: starting after sequence %d but stream %r ends at %d: "
                            "nothing is sent until the stream gets past it (a state file or "
                            "--from-seq from another data directory?)", start_after,
                            self.stream, last)
            sub = client.subscribe(self.pattern, from_seq=start_after + 1)
            sender = self.sender = Sender(
                self.stream, self.pattern, session=secrets.randbits(64), start_after=start_after,
                max_datagram=self.max_datagram, head_interval=self.head_interval,
                now=time.monotonic())
            try:
                self._sock.send(sender.tick(time.monotonic())[0])
            except OSError as e:
                raise BridgeError(f"cannot send to {self.group[0]}:{self.group[1]}: "
                                  f"{e}") from None
            self._write_state(sender.head)
            caps = zmq_multicast()
            log.info("zeps bridge: stream %r pattern %r from %s to %s:%d after sequence %d "
                     "(plain UDP; ZeroMQ epgm %s, norm %s)", self.stream, self.pattern,
                     self.endpoint, *self.group, start_after,
                     "available" if caps["epgm"] else "absent",
                     "available" if caps["norm"] else "absent")
            if on_ready is not None:
                on_ready(self)
            self._loop(sub, sender)
        finally:
            if self.sender is not None:
                self._write_state(self.sender.head)
            if client is not None:
                try:
                    client.close(timeout=1.0)
                except ZepsError as e:      # closing: nothing was published to lose
                    log.debug("zeps bridge: closing the client: %s", e)
            self._sock.close()

    def _loop(self, sub, sender: Sender) -> None:
        send = self._send
        while not self._stop:
            now = time.monotonic()
            msg = sub.poll(min(max(sender.next_deadline() - now, 0.0), _MAX_WAIT))
            if msg is not None:
                n = 0
                while msg is not None:
                    for d in sender.add(msg.sequence, msg.key, msg.body, msg.timestamp,
                                        msg.headers):
                        send(d)
                    n += 1
                    msg = sub.poll(0) if n < _BATCH else None
                d = sender.flush()
                if d is not None:
                    send(d)
            heads = sender.tick(time.monotonic())
            if heads:
                for d in heads:
                    send(d)
                self._write_state(sender.head)

    def _send(self, datagram: bytes) -> None:
        try:
            if self._outgoing is None:
                self._sock.send(datagram)
            else:
                for d in self._outgoing(datagram):
                    self._sock.send(d)
        except OSError as e:
            self.send_errors += 1
            if self.send_errors == 1 or self.send_errors % 1000 == 0:
                log.warning("zeps bridge: sending to %s:%d failed (%d so far): %s",
                            *self.group, self.send_errors, e)
