"""Multicast scenarios, run by tests/test_multicast_net.py inside a private network namespace.

    python tests/multicast_scenario.py NAME WORKDIR

Starts a real broker (tests/conftest.py's BrokerProcess), bridges (``zeps bridge multicast``
or tests/multicast_bridge_child.py) and receivers (MulticastSubscriber in threads, or
``zeps subscribe --multicast`` processes), drives the scenario, and prints one JSON
object on its last stdout line: what each receiver handed to its application, its counters, the
stream as the journal on disk holds it, and scenario facts. The test file asserts on it; this
script only waits for conditions (each with a deadline) and never judges.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import BrokerProcess
from zeps.clients import Client, MulticastSubscriber, admin
from zeps.journal import JournalReader, stream_dir_name
from zeps.matching import compile_pattern
from zeps.multicast import ReceiverConfig
from zeps.multicast import datagram as dg
from zeps.multicast.transport import open_receiver, parse_group

REPO = Path(__file__).resolve().parent.parent

GROUP = "239.192.7.7:7777"
STREAM = "s"
ENV = dict(os.environ, PYTHONPATH=str(REPO))
DEADLINE = 60.0
FAST_HEAD = "0.2"


class ScenarioError(Exception):
    pass


def wait_until(cond, what: str, timeout: float = DEADLINE) -> None:
    """Poll ``cond`` until it is true; raise naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise ScenarioError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Reader:
    """A MulticastSubscriber (``sub``, or made from the arguments) read by a thread, as an
    application would."""

    def __init__(self, *args, sub=None, **kwargs):
        self.sub = sub or MulticastSubscriber(*args, **kwargs)
        self.got = []
        self.error = None
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self._stop:
                m = self.sub.poll(0.05)
                if m is not None:
                    self.got.append(m)
        except Exception as e:  # noqa: BLE001  (any error is part of the result: the test judges)
            self.error = repr(e)

    def wait(self, n: int, what: str = "") -> None:
        wait_until(lambda: len(self.got) >= n or self.error is not None,
                   what or f"{n} messages at the receiver (has {len(self.got)})")

    def result(self):
        self._stop = True
        self.thread.join(10)
        self.sub.close()
        return {"messages": [[m.sequence, m.key, m.body.decode(), m.timestamp] for m in self.got],
                "stats": dataclasses.asdict(self.sub.stats), "mode": self.sub.mode,
                "fallback_reason": self.sub.fallback_reason, "error": self.error}


class AsyncReader:
    """An AsyncMulticastSubscriber read by an asyncio application in its own thread's loop."""

    def __init__(self, *args, **kwargs):
        import asyncio

        from zeps.multicast.aio import AsyncMulticastSubscriber
        self.got = []
        self.error = None
        self._stop = False
        self.stats = self.mode = None
        self._started = threading.Event()

        self.sub = None

        async def run():
            try:
                async with AsyncMulticastSubscriber(*args, **kwargs) as sub:
                    self.sub = sub
                    self._started.set()
                    while not self._stop:
                        m = await sub.poll(0.05)
                        if m is not None:
                            self.got.append(m)
                    self.stats, self.mode = dataclasses.asdict(sub.stats), sub.mode
            except Exception as e:  # noqa: BLE001  (any error is part of the result)
                self.error = repr(e)
                self._started.set()

        self.thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
        self.thread.start()
        wait_until(self._started.is_set, "the asyncio receiver started")

    wait = Reader.wait

    def result(self):
        self._stop = True
        self.thread.join(10)
        return {"messages": [[m.sequence, m.key, m.body.decode(), m.timestamp] for m in self.got],
                "stats": self.stats, "mode": self.mode, "error": self.error}


class Proc:
    """A child process whose stdout lines are collected by a thread."""

    def __init__(self, args, name: str, work: Path):
        self.err_path = work / f"{name}.err"
        with open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, env=ENV,
                                      cwd=str(REPO))
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.decode().rstrip("\n"))

    def wait_line(self, what: str) -> str:
        wait_until(lambda: self.lines or self.p.poll() is not None, what)
        if not self.lines:
            raise ScenarioError(f"{what}: exited {self.p.returncode}: "
                                f"{self.err_path.read_text()[-2000:]}")
        return self.lines[0]

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self.p.wait(30)

    def stderr(self) -> str:
        return self.err_path.read_text()


def bridge_cli(endpoint, work, name="bridge", *extra):
    p = Proc([sys.executable, "-m", "zeps", "bridge", "multicast", "--endpoint", endpoint,
              "--stream", STREAM, "--group", GROUP, "--head-interval", FAST_HEAD, *extra],
             name, work)
    return p, p.wait_line("the bridge's ready line")


def bridge_child(endpoint, work, *extra, name="bridge"):
    p = Proc([sys.executable, str(REPO / "tests" / "multicast_bridge_child.py"), endpoint,
              STREAM, GROUP, *extra], name, work)
    return p, p.wait_line("the test bridge's ready line")


def publish(endpoint, items):
    """Publish ``(key, body)`` items and wait until they are durable."""
    with Client(endpoint, STREAM, confirms=True, timeout=10) as c:
        for key, body in items:
            c.publish(key, body)
        c.wait_for_confirms(timeout=30)


def numbered(start, n, key="k"):
    return [(key(i) if callable(key) else key, f"m{i}") for i in range(start, start + n)]


def journal(broker, pattern=""):
    """The stream's messages matching ``pattern``, as the journal on disk holds them."""
    match = compile_pattern(pattern, timeout=1.0).matches
    r = JournalReader(str(broker.data_dir / stream_dir_name(STREAM)))
    try:
        return [[x.sequence, x.key, x.body.decode(), x.timestamp] for x in r.read_from(1)
                if match(x.key)]
    finally:
        r.close()


def start_broker(work):
    """The broker, with the stream made: bridges and receivers are readers, which do not create
    streams, and the scenarios start them before the first publish."""
    b = BrokerProcess(work / "data", log_path=work / "broker.log").start()
    admin.create_stream(b.endpoint, STREAM, timeout=10)
    return b


# ---------------------------------------------------------------------------- scenarios

def ordered(work):
    """Three CLI receivers and a bridge with a pattern; a receiver of another pattern."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work, "bridge", "--pattern", "eu.")
    def key(i):
        return "eu.fr" if i % 3 else "us.ny"
    first = numbered(0, 30, key)
    rest = numbered(30, 570, key)
    n_eu = sum(1 for k, _ in first + rest if k.startswith("eu."))
    subs = [Proc([sys.executable, "-m", "zeps", "subscribe", STREAM, "eu.",
                  "--multicast", GROUP, "--endpoint", b.endpoint, "--from-seq", "1", "--json",
                  "--count", str(n_eu), "--timeout", "30", "-v"], f"sub{i}", work)
            for i in range(3)]
    other = Reader(GROUP, b.endpoint, STREAM, "us.", from_seq=1,
                   config=ReceiverConfig(silence=0.5))
    # An application that stops reading, with a tiny socket buffer that overflows
    stalled = MulticastSubscriber(GROUP, b.endpoint, STREAM, "eu.", from_seq=1, rcvbuf=4096)
    publish(b.endpoint, first)
    for s in subs:                      # each has joined and printed the first messages
        s.wait_line("a CLI receiver's first message")
    publish(b.endpoint, rest)
    other.wait(len(first + rest) - n_eu)
    rcs = [s.p.wait(DEADLINE) for s in subs]
    late = Reader(sub=stalled)          # ... and reads again once the others are done
    late.wait(n_eu)
    out = {"cli": [[json.loads(line) for line in s.lines] for s in subs], "cli_rc": rcs,
           "cli_stderr": [s.stderr() for s in subs], "other": other.result(),
           "stalled": late.result(),
           "journal_eu": journal(b, "eu."), "journal_us": journal(b, "us.")}
    bridge.stop()
    b.stop()
    return out


def pattern_mismatch(work):
    """Issue 17 item 9: a bridge without --pattern and a CLI receiver on ``eu.`` (-v): the
    receiver falls back to the broker and its stderr says why, before any message is published."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work, "bridge")
    sub = Proc([sys.executable, "-m", "zeps", "subscribe", STREAM, "eu.", "--multicast", GROUP,
                "--endpoint", b.endpoint, "--from-seq", "1", "--json", "--count", "20",
                "--timeout", "30", "-v"], "sub", work)
    wait_until(lambda: "falling back" in sub.stderr() or sub.p.poll() is not None,
               "the receiver to say it fell back")
    items = numbered(0, 40, lambda i: "eu.fr" if i % 2 else "us.ny")
    publish(b.endpoint, items)
    rc = sub.p.wait(DEADLINE)
    out = {"rc": rc, "stderr": sub.stderr(), "lines": [json.loads(x) for x in sub.lines],
           "journal_eu": journal(b, "eu.")}
    bridge.stop()
    b.stop()
    return out


def loss(work):
    """Chosen datagrams dropped, the last ones just before the stream goes idle."""
    b = start_broker(work)
    bridge, _ = bridge_child(b.endpoint, work, "--drop-seqs", "50,51,120,298,299,300")
    r = Reader(GROUP, b.endpoint, STREAM, live=True)
    for i in range(0, 300, 10):         # in small batches: many datagrams
        publish(b.endpoint, numbered(i, 10))
    r.wait(300)
    out = {"r": r.result(), "journal": journal(b)}
    bridge.stop()
    b.stop()
    return out


def asyncio_loss(work):
    """The asyncio receiver: dropped datagrams, also just before idle, repaired from the broker."""
    b = start_broker(work)
    bridge, _ = bridge_child(b.endpoint, work, "--drop-seqs", "50,51,120,298,299,300")
    r = AsyncReader(GROUP, b.endpoint, STREAM, live=True)
    for i in range(0, 300, 10):
        publish(b.endpoint, numbered(i, 10))
    r.wait(300)
    out = {"r": r.result(), "journal": journal(b)}
    bridge.stop()
    b.stop()
    return out


def reorder_dup(work):
    """Datagrams duplicated and held back behind the next one (the test bridge)."""
    b = start_broker(work)
    bridge, _ = bridge_child(b.endpoint, work, "--dup-seqs", "10,40", "--hold-seqs", "20,60")
    r = Reader(GROUP, b.endpoint, STREAM, live=True,
               config=ReceiverConfig(reorder_wait=30.0, silence=30.0))     # never repairs
    for i in range(100):                # one by one: one message per datagram
        publish(b.endpoint, numbered(i, 1))
    r.wait(100)
    out = {"r": r.result(), "journal": journal(b)}
    bridge.stop()
    b.stop()
    return out


def late_join(work):
    """A receiver joining late gets history from the broker, then live data by multicast."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work)
    publish(b.endpoint, numbered(0, 400))
    r = Reader(GROUP, b.endpoint, STREAM, from_seq=1,
               config=ReceiverConfig(silence=30.0))    # a stalled bridge is not the subject
    r.wait(400)
    wait_until(lambda: not r.sub.feed_open, "the history feed to close")
    history = dataclasses.asdict(r.sub.stats)
    publish(b.endpoint, numbered(400, 400))
    r.wait(800)
    out = {"r": r.result(), "after_history": history, "journal": journal(b)}
    bridge.stop()
    b.stop()
    return out


def bridge_restart(work):
    """Clean stop + restart from the state file; SIGKILL + restart without one (live)."""
    b = start_broker(work)
    state = str(work / "bridge.state")
    r = Reader(GROUP, b.endpoint, STREAM, from_seq=1)
    bridge, ready1 = bridge_cli(b.endpoint, work, "bridge1", "--state-file", state)
    publish(b.endpoint, numbered(0, 100))
    r.wait(100)
    rc1 = bridge.stop()
    saved = json.loads(Path(state).read_text())
    publish(b.endpoint, numbered(100, 100))          # while no bridge runs
    bridge, ready2 = bridge_cli(b.endpoint, work, "bridge2", "--state-file", state)
    r.wait(200)
    publish(b.endpoint, numbered(200, 50))
    r.wait(250)
    rc2 = bridge.stop(signal.SIGKILL)
    publish(b.endpoint, numbered(250, 100))          # while no bridge runs
    bridge, ready3 = bridge_cli(b.endpoint, work, "bridge3")
    publish(b.endpoint, numbered(350, 100))
    r.wait(450)
    out = {"r": r.result(), "journal": journal(b), "ready": [ready1, ready2, ready3],
           "rc": [rc1, rc2], "saved": saved}
    bridge.stop()
    b.stop()
    return out


def broker_restart(work):
    """The broker restarts under a running bridge."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work)
    r = Reader(GROUP, b.endpoint, STREAM, live=True)
    publish(b.endpoint, numbered(0, 100))
    r.wait(100)
    b.restart()
    publish(b.endpoint, numbered(100, 100))
    r.wait(200)
    alive = bridge.p.poll() is None
    result = r.result()
    rc = bridge.stop()
    out = {"r": result, "journal": journal(b), "bridge_alive": alive, "bridge_rc": rc,
           "bridge_stderr": bridge.stderr()}
    b.stop()
    return out


def hostile(work):
    """Foreign and malformed datagrams on the group, between real traffic."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work)
    r = Reader(GROUP, b.endpoint, STREAM, live=True)
    publish(b.endpoint, numbered(0, 50))
    r.wait(50)
    real = dg.encode_data(dg.header(dg.DATA, 99, 1, STREAM, ""),
                          [dg.encode_entry(51, 50, 0, b"k", b"forged?")])
    foreign = [b"", b"hello", b"\x00" + os.urandom(1200), b"\x00" + os.urandom(60000),
               bytes.fromhex("aaa507") + bytes(30),                         # a DELIVER frame
               real[:3] + b"\x02" + real[4:],                               # version 2
               dg.encode_head(5, 1, "another stream", "", 10**9, 1000),
               dg.encode_head(5, 1, STREAM, "other.", 10**9, 1000)]
    malformed = [real[:-1], real[:10], real[:-20] + b"\xff" * 20]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host, port = GROUP.split(":")
    for d in foreign + malformed:
        tx.sendto(d, (host, int(port)))
    tx.close()
    wait_until(lambda: r.sub.stats.foreign + r.sub.stats.malformed >= len(foreign + malformed),
               "the receiver to count the bad datagrams")
    publish(b.endpoint, numbered(50, 150))
    r.wait(200)
    out = {"r": r.result(), "journal": journal(b), "sent_foreign": len(foreign),
           "sent_malformed": len(malformed)}
    bridge.stop()
    b.stop()
    return out


class Forger:
    """Someone else on the group: reads the bridge's datagrams (to learn its session and
    numbers) and sends forged ones beside them."""

    SESSION = 0x0BAD

    def __init__(self):
        self.rx = open_receiver(parse_group(GROUP))
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        host, port = GROUP.split(":")
        self.addr = (host, int(port))
        self.bridge = None              # (session, highest number seen)
        self.number = 0
        self.sent = 0

    def sniff(self) -> bool:
        """Read what the group carried; True once the bridge's session is known."""
        while True:
            try:
                d = dg.decode(self.rx.recv(65536))
            except BlockingIOError:
                return self.bridge is not None
            except dg.DatagramError:
                continue
            if d.session != self.SESSION and (self.bridge is None or d.number > self.bridge[1]):
                self.bridge = (d.session, d.number)

    def send(self, payload: bytes) -> None:
        self.tx.sendto(payload, self.addr)
        self.sent += 1

    def data(self, sequence: int, after: int) -> None:
        self.number += 1
        self.send(dg.encode_data(dg.header(dg.DATA, self.SESSION, self.number, STREAM, ""),
                                 [dg.encode_entry(sequence, after, 0, b"k", b"forged")]))

    def head(self, head: int, *, in_bridge_session: bool = False, interval_ms: int = 1000):
        """A HEAD claiming ``head``; in the bridge's session, numbered 1000 past its datagrams."""
        self.sniff()
        if in_bridge_session:
            session, number = self.bridge[0], self.bridge[1] + 1000
        else:
            self.number += 1
            session, number = self.SESSION, self.number
        self.send(dg.encode_head(session, number, STREAM, "", head, interval_ms))

    def close(self):
        self.rx.close()
        self.tx.close()


def forged(work):
    """Forged datagrams beside a real bridge: an entry 2^64-1, an entry 50 ahead, HEADs beyond
    the broker's head, HEADs numbered 1000 ahead in the bridge's own session; then one forged
    HEAD or entry with every batch published while the stream is busy."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work)
    r = Reader(GROUP, b.endpoint, STREAM, live=True)
    f = Forger()
    publish(b.endpoint, numbered(0, 20))
    r.wait(20)
    wait_until(f.sniff, "the forger to see the bridge's datagrams")
    f.data(2**64 - 1, 20)                                   # "the stream goes on at 2^64-1"
    f.data(70, 20)                                          # "nothing matches from 21 to 69"
    f.head(2**64 - 1)                                       # "the bridge has sent up to 2^64-1"
    f.head(20, in_bridge_session=True, interval_ms=2**32 - 1)   # numbers skipped, "49 days"

    def forged_seen():              # (a receiver that hands forged entries counts none)
        return getattr(r.sub.stats, "forged", 0)

    wait_until(lambda: forged_seen() >= 3 or len(r.got) > 20,
               "the receiver to see through the forgeries (or hand them)")
    after_first = dataclasses.asdict(r.sub.stats)
    n = 20
    batches = 0

    def batch():                    # 10 messages, one forgery, all 10 at the receiver
        nonlocal n, batches
        publish(b.endpoint, numbered(n, 10))
        n += 10
        kind = batches % 3
        if kind == 0:
            f.head(2**64 - 1, in_bridge_session=True)
        elif kind == 1:
            f.data(n + 50, n)
        else:
            f.head(2**64 - 1)
        batches += 1
        r.wait(n)

    # Busy, forging with every batch: the HEAD numbered 1000 past the bridge's pushes the
    # receiver into fallback once; it must come back while the forger goes on ...
    while not (r.sub.stats.returns and r.sub.mode == "multicast" and not r.sub.feed_open):
        if batches == 300:
            break
        batch()
    returned = dataclasses.asdict(r.sub.stats)
    returned_after = batches
    # ... and stay on multicast for 30 more batches.
    modes = []
    for _ in range(30):
        batch()
        modes.append((r.sub.mode, r.sub.feed_open))
    wait_until(lambda: forged_seen() >= returned.get("forged", 0) + 30,
               "the receiver to see through the last forgeries")
    busy = {"batches": batches, "returned_after": returned_after, "returned": returned,
            "modes": modes, "end": dataclasses.asdict(r.sub.stats)}
    publish(b.endpoint, numbered(n, 50))                    # the forger has stopped
    r.wait(n + 50)
    f.close()
    out = {"r": r.result(), "journal": journal(b), "after_first": after_first, "busy": busy,
           "forgeries": f.sent}
    bridge.stop()
    b.stop()
    return out


def fallback(work):
    """Sustained loss: the receiver falls back to the broker, then returns to multicast."""
    b = start_broker(work)
    lossy = work / "lossy"
    lossy.touch()
    bridge, _ = bridge_child(b.endpoint, work, "--head-interval", "0.05",
                             "--drop-file", str(lossy))
    r = Reader(GROUP, b.endpoint, STREAM, live=True, config=ReceiverConfig(
        loss_window=0.25, min_datagrams=3, return_windows=2, fallback_loss=0.3,
        return_loss=0.05))
    wait_until(lambda: r.sub.mode == "fallback", "the receiver to fall back")
    publish(b.endpoint, numbered(0, 200))
    r.wait(200)
    during = dataclasses.asdict(r.sub.stats)
    lossy.unlink()
    wait_until(lambda: r.sub.mode == "multicast" and not r.sub.feed_open,
               "the receiver to return to multicast")
    publish(b.endpoint, numbered(200, 200))
    r.wait(400)
    out = {"r": r.result(), "journal": journal(b), "during": during}
    bridge.stop()
    b.stop()
    return out


def oversize(work):
    """Messages too large for a datagram are fetched from the broker."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work, "bridge", "--max-datagram", "600")
    r = Reader(GROUP, b.endpoint, STREAM, live=True)
    items = [("k", f"big{i}-" * 300 if i % 7 == 0 else f"m{i}") for i in range(100)]
    for i in range(0, 100, 5):
        publish(b.endpoint, items[i:i + 5])
    r.wait(100)
    result = r.result()
    bridge.stop()
    out = {"r": result, "journal": journal(b), "big": sum(1 for i in range(100) if i % 7 == 0),
           "bridge_stderr": bridge.stderr()}
    b.stop()
    return out


def in_child(calls):
    """Fork; the child makes each ``(name, call)`` and says how it went ("name: returned",
    "name: ClientForked" or the error's type), through a pipe; the list, once it has ended."""
    import asyncio

    from zeps.clients import ClientForked
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        lines = []
        for name, call in calls:
            try:
                out = call()
                if asyncio.iscoroutine(out):
                    asyncio.run(out)
                lines.append(f"{name}: returned")
            except ClientForked:
                lines.append(f"{name}: ClientForked")
            except BaseException as e:  # noqa: BLE001  (what it raised is the result)
                lines.append(f"{name}: {type(e).__name__}")
        os.write(w, json.dumps(lines).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise ScenarioError(f"the child exited with {status}")
    return json.loads(data)


def fork_child(work):
    """Receivers made before os.fork(), blocking and asyncio, each holding messages not handed
    yet: the child's copies raise ClientForked (a read there would take the parent's datagrams
    from the socket they share, and hand what the parent held ready); the parents read on."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work)
    sub = MulticastSubscriber(GROUP, b.endpoint, STREAM, live=True)
    ar = AsyncReader(GROUP, b.endpoint, STREAM, live=True)
    publish(b.endpoint, numbered(0, 100))
    got = [sub.next(timeout=DEADLINE) for _ in range(50)]
    wait_until(lambda: sub._core.ready, "messages ready and not handed")
    ar.wait(50)
    asub = ar.sub
    child = in_child([("next", lambda: sub.next(timeout=1)), ("for", lambda: next(iter(sub))),
                      ("close", sub.close), ("async next", lambda: asub.next(timeout=1)),
                      ("async for", lambda: asub.__anext__()), ("async close", asub.close)])
    publish(b.endpoint, numbered(100, 100))
    got += [sub.next(timeout=DEADLINE) for _ in range(150)]
    ar.wait(200)
    out = {"child": child, "ar": ar.result(), "journal": journal(b),
           "r": {"messages": [[m.sequence, m.key, m.body.decode(), m.timestamp] for m in got],
                 "error": None}}
    sub.close()
    bridge.stop()
    b.stop()
    return out


def recreated(work):
    """The stream is deleted and created again under running receivers (its bridge fails: its
    client raises StreamDeleted); the new stream's messages must not follow the old ones."""
    b = start_broker(work)
    bridge, _ = bridge_cli(b.endpoint, work)
    r = Reader(GROUP, b.endpoint, STREAM, from_seq=1)
    ar = AsyncReader(GROUP, b.endpoint, STREAM, from_seq=1)
    publish(b.endpoint, numbered(0, 5))
    r.wait(5)
    ar.wait(5)
    admin.delete_stream(b.endpoint, STREAM, timeout=10)
    admin.create_stream(b.endpoint, STREAM, timeout=10)
    publish(b.endpoint, numbered(100, 8))
    wait_until(lambda: all(x.error is not None or len(x.got) > 5 for x in (r, ar)),
               "an error, or the new stream's messages, at both receivers")
    bridge.p.wait(DEADLINE)
    out = {"r": r.result(), "ar": ar.result(), "bridge_rc": bridge.p.returncode}
    b.stop()
    return out


SCENARIOS = {f.__name__: f for f in (ordered, pattern_mismatch, loss, asyncio_loss, reorder_dup,
                                     late_join, bridge_restart, broker_restart, hostile, forged,
                                     fallback, oversize, fork_child, recreated)}

if __name__ == "__main__":
    name, work = sys.argv[1], Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    result = SCENARIOS[name](work)
    sys.stdout.write(json.dumps(result) + "\n")
