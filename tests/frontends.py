"""Clients of the broker's CHP and Event BUS front ends for the process tests: raw ZeroMQ sockets
speaking the specs (``shared/spec/chp-12.txt``, ``shared/spec/event-bus.txt``) as their clients
do, three consecutive free ports (outside the ephemeral range: tests/ports.py), and the front
ends' counters from ``/varz``."""
from __future__ import annotations

import json
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

import zmq

from zeps.frontends import bus_codec as bc
from zeps.frontends import chp_codec as cc

from .measure import wait_for
from .ports import fixed_ports

TIMEOUT = 10.0


def start(start_broker, *args, data_dir=None):
    """A broker with ``args`` (``--chp P:S`` ...) and monitoring; ``b.monitor`` is its URL."""
    b = start_broker(data_dir, "--monitor", "127.0.0.1:0", *args)
    line = b.proc.stdout.readline().decode().strip()
    assert line.startswith("monitoring on "), line
    b.monitor = line.split("monitoring on ", 1)[1]
    return b


def start_frontend(start_broker, flag: str, stream: str, *args, data_dir=None, tries: int = 5):
    """A broker serving front end ``flag`` (``--chp``/``--bus``) for ``stream`` on three free
    consecutive ports (``b.port`` the first), outside the ephemeral range, so that no other
    connection takes them while :func:`restart` has the broker down. The ports are free when
    probed, but another program may bind one before the broker does: that start fails (the
    front end cannot be opened: "Address already in use"), and is tried again on other ports."""
    for attempt in range(tries):
        port = fixed_ports(3)
        try:
            b = start(start_broker, flag, f"{port}:{stream}", *args, data_dir=data_dir)
        except RuntimeError as exc:
            if "cannot open a front end: Address already in use" not in str(exc) \
                    or attempt == tries - 1:
                raise
            continue
        b.port = port
        return b
    raise AssertionError("unreachable")


def restart(b):
    b.restart()
    line = b.proc.stdout.readline().decode().strip()
    b.monitor = line.split("monitoring on ", 1)[1]
    return b


def varz(b) -> dict:
    with urllib.request.urlopen(b.monitor + "/varz", timeout=5) as r:
        return json.loads(r.read())


def counters(b, name: str) -> Dict[str, int]:
    """The counters of the front end ``name`` (``"chp:PORT"``), fresh (``/varz`` is cached for
    a short while, so a condition on them is waited for)."""
    return varz(b)["frontends"][name]["counters"]


def wait_counter(b, name: str, counter: str, at_least: int = 1, timeout: float = TIMEOUT) -> dict:
    got = wait_for(lambda: counters(b, name), lambda c: c.get(counter, 0) >= at_least, timeout)
    assert got.get(counter, 0) >= at_least, (counter, got)
    return got


def wait_position(b, name: str, sequence: int, timeout: float = TIMEOUT) -> None:
    """Until the front end has taken the stream up to ``sequence``."""
    wait_counter(b, name, "zeps.position", sequence, timeout)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def never_reading(port: int, request: List[bytes], n: int, each: int = 1) -> List[zmq.Socket]:
    """``n`` connections to the snapshot socket on ``port`` that send ``request`` ``each`` times
    and never read (one message and 4 KiB of receive buffer each): readers that hold their
    snapshots' pipes. The caller closes them."""
    ctx = zmq.Context.instance()
    socks = []
    for _ in range(n):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVHWM, 1)
        s.setsockopt(zmq.RCVBUF, 4096)
        s.connect(f"tcp://127.0.0.1:{port}")
        for _ in range(each):
            s.send_multipart(request)
        socks.append(s)
    return socks


def recv(sock, timeout: float = TIMEOUT) -> List[bytes]:
    if not sock.poll(int(timeout * 1000)):
        raise TimeoutError(f"nothing within {timeout}s")
    return sock.recv_multipart()


class ChpClient:
    """RFC 12's client: a snapshot DEALER to P, a SUB to P+1 and (``collector``) a PUB - or the
    Guide's clone.py's PUSH - to P+2. Keeps its hashmap as the RFC says a client does."""

    def __init__(self, port: int, *, subtree: str = "", collector: int = zmq.PUB,
                 ctx: Optional[zmq.Context] = None):
        self.ctx = ctx or zmq.Context.instance()
        self.port = port
        self.subtree = subtree
        self.snapshot = self._socket(zmq.DEALER, port)
        self.sub = self._socket(zmq.SUB, port + 1)
        self.sub.setsockopt(zmq.SUBSCRIBE, subtree.encode())
        self.sub.setsockopt(zmq.SUBSCRIBE, b"HUGZ")
        self.pub = self._socket(collector, port + 2)
        self.kvmap: Dict[str, bytes] = {}
        self.sequence = 0
        #: the KVPUB sequences applied, in order, and the last KVPUB of each key
        self.applied: List[int] = []
        self.last: Dict[str, cc.KvMsg] = {}

    def _socket(self, kind: int, port: int):
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://127.0.0.1:{port}")
        return s

    def subscribed(self, timeout: float = TIMEOUT) -> None:
        """Wait for a HUGZ (or any KVPUB): the subscription is in place at the publisher."""
        recv(self.sub, timeout)

    def sync(self, timeout: float = TIMEOUT) -> List[cc.KvMsg]:
        """ICANHAZ?, then KVSYNC... KTHXBAI: the snapshot applied; its messages returned."""
        self.snapshot.send_multipart(cc.encode_icanhaz(self.subtree))
        got = []
        while True:
            msg = cc.decode_kvmsg(recv(self.snapshot, timeout))
            got.append(msg)
            if msg.key == "KTHXBAI":
                self.sequence = msg.sequence
                return got
            self.kvmap[msg.key] = msg.value

    def set(self, key: str, value: bytes, properties: Tuple[Tuple[str, str], ...] = (),
            uuid: bytes = b"") -> None:
        self.pub.send_multipart(cc.encode_kvset(cc.KvMsg(key, 0, uuid, properties, value)))

    def update(self, timeout: float = TIMEOUT) -> Optional[cc.KvMsg]:
        """The next KVPUB above the last sequence taken, applied (HUGZ and older ones skipped);
        None if nothing came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sub.poll(int(left * 1000)):
                return None
            msg = cc.decode_kvmsg(self.sub.recv_multipart())
            if msg.key == "HUGZ" or msg.sequence <= self.sequence:
                continue
            self.sequence = msg.sequence
            self.applied.append(msg.sequence)
            self.last[msg.key] = msg
            if msg.value:
                self.kvmap[msg.key] = msg.value
            else:
                self.kvmap.pop(msg.key, None)
            return msg

    def until(self, cond, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not cond(self):
            left = deadline - time.monotonic()
            assert left > 0, f"not reached: {self.kvmap!r:.300}"
            self.update(left)

    def close(self) -> None:
        for s in (self.snapshot, self.sub, self.pub):
            s.close(0)


class BusClient:
    """The Event BUS client: a snapshot DEALER to P, a SUB to P+1, a producer DEALER to P+2."""

    def __init__(self, port: int, *, subtrees=("",), ctx: Optional[zmq.Context] = None,
                 dialect: bc.Dialect = bc.RFC):
        self.ctx = ctx or zmq.Context.instance()
        self.port = port
        self.subtrees = tuple(subtrees)
        self.dialect = dialect
        self.snapshot = self._socket(zmq.DEALER, port)
        self.sub = self._socket(zmq.SUB, port + 1)
        for s in self.subtrees:
            self.sub.setsockopt(zmq.SUBSCRIBE, s.encode())
        self.producer = self._socket(zmq.DEALER, port + 2)
        self.sequence = 0
        self.events: List[bc.Event] = []

    def _socket(self, kind: int, port: int):
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://127.0.0.1:{port}")
        return s

    def pub(self, topic: str, data: bytes, producer: str = "p1",
            timestamp: str = "2016-11-18T14:36:49.007Z", uuid: str = "") -> None:
        self.producer.send_multipart(bc.encode_pub(bc.Event(topic, 0, producer, timestamp,
                                                            uuid, data), self.dialect))

    def sync(self, after: int = 0, timeout: float = TIMEOUT) -> Tuple[List[bc.Event], bc.SyncEnd]:
        self.snapshot.send_multipart(bc.encode_syncstart(bc.SyncStart(self.subtrees, after),
                                                         self.dialect))
        got = []
        while True:
            reply = bc.decode_snapshot_reply(recv(self.snapshot, timeout))
            if isinstance(reply, bc.SyncEnd):
                self.sequence = reply.sequence
                self.events += got
                return got, reply
            got.append(reply)

    def broadcast(self, timeout: float = TIMEOUT) -> Optional[bc.Event]:
        """The next BROADCAST above the last sequence taken (older ones skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sub.poll(int(left * 1000)):
                return None
            ev = bc.decode_broadcast(self.sub.recv_multipart())
            if ev.sequence <= self.sequence:
                continue
            self.sequence = ev.sequence
            self.events.append(ev)
            return ev

    def close(self) -> None:
        for s in (self.snapshot, self.sub, self.producer):
            s.close(0)
