"""A well-behaved publisher/subscriber pair that the fault tests keep running beside hostile
clients, to show what those cost everyone else.

The publisher publishes on its own stream at a steady pace; each body carries the message's
number and the monotonic time it was sent. The subscriber (a thread, credit far beyond what it
needs) records, for every DELIVER, the publish->deliver latency, and checks that sequences and
bodies arrive in order with no gap and no duplicate.
"""
from __future__ import annotations

import struct
import threading
import time
from typing import List, Optional, Tuple

import zmq

from zeps.protocol import commands as c

from .measure import percentile, wait_for
from .rawclient import RawClient

_BODY = struct.Struct(">QQ")          # message number, time.monotonic_ns() at publish


class Pair:
    def __init__(self, endpoint: str, stream: str = "calm", key: str = "calm.k"):
        self.ctx = zmq.Context()
        self.key = key
        self.sub = RawClient(endpoint, self.ctx).attach(stream).subscribe("", 0, credit=1 << 26)
        self.pub = RawClient(endpoint, self.ctx).attach(stream)
        # A send never blocks for long: a writer thread blocked in send() when the test ends
        # would have its socket closed under it, which aborts the whole test process in libzmq.
        self.pub.sock.setsockopt(zmq.SNDTIMEO, 200)
        self.sent = 0
        #: (message number, sent at ns, latency in s), in delivery order
        self.received: List[Tuple[int, int, float]] = []
        self.problems: List[str] = []
        self._stop = threading.Event()
        self._pacing = threading.Event()
        self._interval = 0.0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._writer: Optional[threading.Thread] = None
        self._reader.start()

    # ------------------------------------------------------------------ publishing
    def publish(self, n: int) -> None:
        """Publish ``n`` messages now (from the calling thread)."""
        done = 0
        while done < n:
            done += self._publish_one()

    def _publish_one(self) -> bool:
        """Publish the next message; False if the socket could not take it within SNDTIMEO."""
        try:
            self.pub.send(c.Publish(self.key, _BODY.pack(self.sent, time.monotonic_ns())))
        except zmq.Again:
            return False
        self.sent += 1
        return True

    def start_paced(self, interval: float) -> None:
        """Publish one message every ``interval`` seconds from a thread until :meth:`stop_paced`."""
        self._interval = interval
        self._pacing.set()
        self._writer = threading.Thread(target=self._paced, daemon=True)
        self._writer.start()

    def stop_paced(self) -> None:
        self._pacing.clear()
        if self._writer is not None:
            self._writer.join(30)
            if not self._writer.is_alive():
                self._writer = None

    def _paced(self) -> None:
        nxt = time.monotonic()
        while self._pacing.is_set():
            self._publish_one()
            nxt += self._interval
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)          # pacing only: nothing is asserted on timing here

    # ------------------------------------------------------------------ receiving
    def _read(self) -> None:
        sock = self.sub.sock
        while not self._stop.is_set():
            if not sock.poll(100):
                continue
            cmd = self.sub.recv(0)
            now = time.monotonic_ns()
            if not isinstance(cmd, c.Deliver):
                self.problems.append(f"unexpected {cmd!r}")
                continue
            number, sent_at = _BODY.unpack(cmd.body)
            expected = len(self.received)
            if cmd.sequence != expected + 1 or number != expected:
                self.problems.append(f"got sequence {cmd.sequence} / message {number}, "
                                     f"expected {expected + 1} / {expected}")
            self.received.append((number, sent_at, (now - sent_at) / 1e9))

    def wait_all(self, timeout: float = 30.0) -> bool:
        """Wait until every message published so far was received (True) or ``timeout``."""
        deadline = time.monotonic() + timeout
        while len(self.received) < self.sent and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.received) >= self.sent

    def latencies(self, since_ns: int = 0, until_ns: Optional[int] = None) -> List[float]:
        """Latencies (s) of the messages published in ``[since_ns, until_ns)`` (monotonic ns)."""
        end = until_ns if until_ns is not None else 1 << 63
        return [lat for _n, at, lat in self.received if since_ns <= at < end]

    def close(self) -> None:
        self.stop_paced()
        self._stop.set()
        self._reader.join(5)
        if self._reader.is_alive() or self._writer is not None:
            return        # a thread still uses a socket: leave them to the process's exit
        self.sub.close()
        self.pub.close()
        self.ctx.term()


def pair_running(endpoint: str) -> Pair:
    """A pair publishing every 5 ms on the broker at ``endpoint``, once 50 came back: the calm
    client beside an attack."""
    pair = Pair(endpoint)
    pair.start_paced(0.005)
    assert wait_for(lambda: len(pair.received), lambda n: n >= 50, timeout=30) >= 50
    return pair


def pair_unharmed(pair: Pair, since_ns: int) -> dict:
    """Assert that ``pair`` still receives, then stop it: everything sent came back, in order;
    the figures of its latencies since ``since_ns`` (for the report)."""
    want = len(pair.received) + 100
    assert wait_for(lambda: len(pair.received), lambda n: n >= want, timeout=30) >= want, \
        "the pair stopped receiving"
    pair.stop_paced()
    assert pair.wait_all(30), f"{len(pair.received)} of {pair.sent}"
    assert not pair.problems, pair.problems[:3]
    lat = pair.latencies(since_ns)
    return dict(pair_messages=len(lat), pair_p50_ms=round(percentile(lat, 50) * 1000, 2),
                pair_p99_ms=round(percentile(lat, 99) * 1000, 2))
