"""The broker's I/O shell: one ZeroMQ ROUTER socket driven by gevent around :class:`BrokerCore`.

Thin on purpose: the shell moves bytes and time, the core decides. The loop runs in gevent's
hub, from its watchers' callbacks (no greenlet of its own, no wait to set up per message):

1. the socket's, the monitor's and a wake-up pipe's descriptors are watched from start to stop,
   and one timer is armed for the core's next deadline (:meth:`BrokerCore.next_deadline`);
   whichever fires runs a turn;
2. a turn drains up to ``DRAIN_MAX`` messages with NOBLOCK into :meth:`BrokerCore.receive`
   (per-message ``zmq.green`` calls are several times slower, and a batch of publishes costs one
   journal write), and no more once they published ``DRAIN_PUBLISHED`` messages (a
   PUBLISH-BATCH counts its entries) or came to ``DRAIN_BYTES``: the work and the memory of a
   turn, and so the wait of every other client, are bounded; a message of more than one frame
   (no ZEPS command) has its other frames read and dropped, ``SKIP_CHUNK`` a turn and none
   kept, before the core refuses it by its length (:class:`~zeps.broker.sockio.Parts`);
3. :meth:`BrokerCore.round`: the core's steps in their one order (journal and route, replay,
   confirm, timers), calling back the shell's ``_send`` between them; it names the journals to
   fsync;
4. more to do at once: the next turn comes after the hub has polled its descriptors (the sync
   greenlet, signal handlers, the HTTP port get their turn between two); else the hub sleeps
   until a descriptor or the timer fires.

Sending: a frame that cannot go out because the client's pipe is full (``SNDHWM``) is handed
back with :meth:`BrokerCore.unsent`, as is every later frame for that client in the batch; a
client whose connection is gone (``ROUTER_MANDATORY``: EHOSTUNREACH) is reported with
:meth:`BrokerCore.gone`. The core decides what that means (replay later, hold, forget).

Sessions belong to their connection. A peer may choose its own ROUTER routing id, so a new
connection could claim the id of a client whose connection just closed and receive what was
meant for it. The shell learns each id's connection (the ``SRCFD`` of the id's first message,
read once per id) and watches the socket's monitor for ``DISCONNECTED`` (which names the closed
descriptor); the sessions of a closed connection are forgotten (:meth:`BrokerCore.gone`) once the
messages it sent before closing have been read, so an id claimed later meets a fresh, unattached
session. The same monitor reports handshakes that fail (``HANDSHAKE_FAILED_*``: a plaintext client
at a CurveZMQ broker, a wrong server key, a key the authenticator refused): the loop watches it
too and logs them, rate-limited (:mod:`zeps.broker.handshakes`).

Compaction of a compacted stream (:mod:`zeps.broker.compacting`) runs the same way: the round
names a job, a greenlet runs it in the thread pool (one at a time) - in a child process
(:mod:`zeps.broker.compactor`: the rewrite's Python work would share the loop's GIL in a
thread) - and the loop hands the result to :meth:`BrokerCore.compacted`. A broker that stops
kills the compaction under way and waits for its process (:meth:`compactor.Runner.stop`).

fsync (``--fsync interval``) runs ``Journal.sync`` in gevent's thread pool from a greenlet that
never touches the socket (a send from another greenlet can consume the edge-triggered
ZMQ_FD signal and leave the loop asleep); it wakes the loop through a pipe, and the loop sends the
CONFIRMs; with ``on_fsync`` set (the metrics' fsync histogram) each sync is timed in its thread.
ZeroMQ's I/O thread runs under ``SCHED_BATCH`` on Linux (:mod:`zeps.broker.scheduling`): it
does not preempt the loop mid-round when a send wakes it.
Back-pressure on publishers comes from ZeroMQ: the broker reads only as fast as it journals, the
ROUTER's receive high-water mark fills, and the publishers' DEALER sockets block.
"""
from __future__ import annotations

import gc
import math
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import gevent
from gevent.hub import Waiter
import structlog
import zmq
from zmq.utils.monitor import recv_monitor_message

from zeps.journal import consumers

from . import compactor, scheduling
from .core import BrokerCore, CoreConfig
from .handshakes import HANDSHAKE_EVENTS, HandshakeRefusals
from .pool import in_pool as _in_pool, timed as _timed
from .sockio import DRAINED, NEW, PARTS, Parts, SocketLoops
from .stream import Stream

DRAIN_MAX = 500           # messages read per round; then journal, route, replay and yield
DRAIN_PUBLISHED = 8192    # ... or fewer, once they published this many (batches count each entry)
DRAIN_BYTES = 4 << 20     # ... or once their first frames came to this many bytes
DRAIN_CHUNK = 32          # messages read per call of the socket loop (sockio.py); the
                          # published count is checked between two (the bytes within one)
SKIP_CHUNK = 16384        # frames of messages of several dropped per turn, all together
                          # (docs/operations.md, Findings 10)
IDLE_WAIT = 1.0           # longest sleep when nothing is due (the core's deadlines come sooner)
SNDHWM = 1000             # messages queued per client connection before the broker stops sending

# The round's reads, its sends and the question before sleeping are sockio.py's loops (in C where
# built). What remains here calls pyzmq's Cython socket methods directly with plain int flags:
# the Python "sugar" layer (send_multipart/recv_multipart, enum flag arithmetic) cost more per
# message than journalling it (measured with cProfile in bench/bench_broker.py runs).
_recv_raw = zmq.backend.Socket.recv
_getsockopt = zmq.backend.Socket.get
_NB = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_SRCFD = zmq.SRCFD
#: What fired (the index of its watcher in ``Broker._watchers``, or the timer).
_SOCKET, _MONITOR, _WAKE, _TIMED_OUT = 0, 1, 2, -1
_ASK_FIRST = 8            # reads of a round that ask ZMQ_EVENTS before reading (_round)


def _libc_malloc_trim():
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):          # not glibc: nothing to trim
        return None


_malloc_trim = _libc_malloc_trim()
_EAGAIN = zmq.EAGAIN
_EHOSTUNREACH = zmq.EHOSTUNREACH


def _freeze_heap() -> None:
    """After start-up, move every object alive (the imports', the broker's own) out of the
    garbage collector's sight (``gc.freeze``): a full collection then looks only at what was
    made since. A full collection of the started broker, all of it seen, takes 9-13 ms on the
    project's machine (``python -m bench.bench_stages``, issue 20): a stall every message
    routed meanwhile would wait for. Python's thresholds stay: at 10k messages/s the broker
    makes about one young collection a second (0.1-0.2 ms each); a higher first threshold
    would make them rarer and proportionally longer."""
    gc.collect()
    gc.freeze()


class Broker:
    def __init__(self, endpoint: str, datadir, core_config: CoreConfig, *, log=None,
                 context: Optional[zmq.Context] = None, sndhwm: int = SNDHWM,
                 clock: Callable[[], float] = time.monotonic, curve=None,
                 io_scheduling: str = "batch"):
        if io_scheduling not in scheduling.POLICIES:
            raise ValueError(f"io_scheduling must be one of {scheduling.POLICIES}, not "
                             f"{io_scheduling!r}")
        self.log = log or structlog.get_logger("zeps.broker")
        self.datadir = datadir
        self.core = BrokerCore(datadir, core_config, log=self._core_log)
        #: Durable consumers' files are written off the loop (zeps.journal.consumers.Saver).
        self._consumer_saver = consumers.Saver(sync=core_config.fsync != "never")
        self.core.consumer_store = self._consumer_saver
        self.clock = clock
        self.ctx = context or zmq.Context.instance()
        # "batch": ZeroMQ's I/O thread does not preempt the loop (zeps.broker.scheduling), if
        # the context has not started it yet; io_batch says whether it was asked.
        self.io_batch = io_scheduling == "batch" and scheduling.yield_io_threads(self.ctx)
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, sndhwm)
        self.sock.setsockopt(zmq.RCVHWM, core_config.receive_hwm())
        self.sock.setsockopt(zmq.MAXMSGSIZE, core_config.max_frame())
        self.curve = curve
        if curve is not None:                          # zeps.broker.security.CurveServer
            curve.apply(self.sock)
        self.sock.bind(endpoint)
        #: The round's reads, the outbox's sends and the question before sleeping: in C where
        #: zeps.broker._sockc is built (sockio.py). They hold the socket's handle: _shutdown
        #: closes the socket after the last of them ran.
        self._loops = SocketLoops(self.sock)
        #: What broker_started reports: "c", or "python" (no extension, ZEPS_PURE_PYTHON=1).
        self.socket_loops = "c" if self._loops.compiled else "python"
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.fd = self.sock.getsockopt(zmq.FD)
        self._monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | HANDSHAKE_EVENTS)
        self._monitor_fd = self._monitor.getsockopt(zmq.FD)
        #: The question asked of the monitor (its events are few: read through pyzmq).
        self._monitor_readable = SocketLoops(self._monitor).readable
        #: Refused handshakes (wrong keys, plaintext clients), logged rate-limited.
        self._refusals = HandshakeRefusals(self.log.warning, curve is not None)
        self._ident_fd: Dict[bytes, int] = {}        # routing id -> its connection's descriptor
        #: With CurveZMQ, routing id -> its connection's key: the reads check each message's
        #: (a peer picks its id; another key could claim a closed client's before its close is
        #: read, and act in its session with its rights; found by review)
        self._ident_key: Dict[bytes, str] = {}
        self._known = self._ident_fd if curve is None else self._ident_key
        self._fd_idents: Dict[int, Set[bytes]] = {}
        self._closed_fds: Set[int] = set()           # DISCONNECTED seen, ids not yet forgotten
        self._dead: Set[bytes] = set()               # ids of closed connections, to forget
        #: [routing id, first frame, frames read] of a message of several frames being dropped
        #: (its other frames are the next on the socket: nothing else is read before them).
        self._partial: Optional[list] = None
        self._wake_r, self._wake_w = os.pipe()
        self._trimmed = 0.0
        os.set_blocking(self._wake_r, False)
        self._syncing: Optional[gevent.Greenlet] = None
        self.on_fsync: Optional[Callable[[float], None]] = None   # seconds one sync took
        self._synced = False
        #: The streams whose last sync, at shutdown, failed: what they were sent last may not
        #: be on disk (``zeps broker`` then exits 1).
        self.unsynced: List[str] = []
        self._opened: List[Tuple[str, Optional[BaseException]]] = []   # by _open, for the loop
        self._compacted: List[tuple] = []          # (job, result, error) by _compact, for the loop
        self._compactor = compactor.Runner()
        self._compacting: Optional[gevent.Greenlet] = None     # runs the compactions named
        self._stopping = False
        self._hub = gevent.get_hub()
        self._watchers = [self._hub.loop.io(fd, 1) for fd in (self.fd, self._monitor_fd,
                                                              self._wake_r)]
        self._monitor_check = True       # ask the monitor at the next drained round
        self._readable = False           # the socket said it is readable since its last read
        self._timer = None               # the hub's timer for the core's next deadline ...
        self._timer_at = math.inf        # ... and when it fires (self.clock)
        self._queued = False             # a turn is queued in the hub's callbacks
        #: A busy turn's next one: the hub polls its descriptors before it fires (see _turn).
        self._busy = self._hub.loop.timer(0.0)
        self._finished: Optional[Waiter] = None      # serve_forever waits on it while serving

    def _core_log(self, event: str, **kw) -> None:
        self.log.warning(event, **kw)

    # ------------------------------------------------------------------ main loop
    def serve_forever(self) -> None:
        """Serve until :meth:`stop`, then close (a broker stopped before it started closes at
        once). The turns run in the hub (see the module docstring); this greenlet waits for
        the end, and an exception of a turn is raised here."""
        _freeze_heap()
        hub = self._hub
        try:
            if self._stopping:
                return
            self._finished = Waiter(hub)
            for i, w in enumerate(self._watchers):
                w.start(self._ready, i)
            self._again()
            self._finished.get()
        finally:
            self._finished = None
            for w in self._watchers:
                w.stop()
            if self._timer is not None:
                self._timer.close()
                self._timer = None
            self._busy.close()
            self._shutdown()

    def stop(self) -> None:
        self._stopping = True
        os.write(self._wake_w, b"x")

    def _ready(self, which: int) -> None:
        """A descriptor's watcher or the timer fired (the hub calls it): a turn."""
        self._turn(which)

    def _again(self) -> None:
        """Queue a turn behind the hub's other callbacks (once)."""
        if not self._queued:
            self._queued = True
            self._hub.loop.run_callback(self._queued_turn)

    def _queued_turn(self) -> None:
        self._queued = False
        self._turn(None)

    def _turn(self, fired: Optional[int]) -> None:
        """What fired, if anything (:meth:`_fired`), one round, then the next turn if there is
        more to do at once, else the timer armed for the core's next deadline. A busy round's
        next turn comes from a zero timer, which fires after the hub has polled its descriptors:
        queued as a callback, it would run in the same pass of the hub's callbacks, and gevent
        runs 50 of them before it looks at its clock and its descriptors, so a flood's turns
        kept the HTTP port, the fsyncs' completions and the signals waiting (issue 20). In the
        hub: nothing here may block or switch, and an exception ends :meth:`serve_forever`
        (raised there)."""
        finished = self._finished
        if finished is None:                 # stopping: serve_forever closes the broker
            return
        try:
            if fired is not None:
                self._fired(fired)
            if self._stopping:
                self._finished = None
                finished.switch(None)
                return
            if self._round():
                if not self._busy.active:
                    self._busy.start(self._turn, None)
                return
            self._trim_memory()
            self._idle(self.core.next_deadline() - self.clock())
        except BaseException:
            self._finished = None
            finished.throw(*sys.exc_info())

    def _fired(self, which: int) -> None:
        """Note what fired. The monitor is asked only when its descriptor fired, or when what
        fired did not say (issue 20: two ZMQ_EVENTS questions, each a getpid and a poll in
        libzmq, on every message at 10k/s). Only _round's question and _read_monitor call into
        the monitor, and a yes is read until empty, so a new event always makes its descriptor
        readable; the watchers are level-triggered, so a descriptor ready together with the
        socket's fires in the same pass of the hub."""
        if which == _SOCKET:
            self._readable = True
            return
        self._monitor_check = True
        if which == _WAKE:
            try:
                os.read(self._wake_r, 4096)
            except BlockingIOError:
                pass
        elif which == _TIMED_OUT:
            self._timer_at = math.inf

    def _idle(self, timeout: float) -> None:
        """Nothing to do now: sleep until a descriptor fires or ``timeout`` seconds (at most
        ``IDLE_WAIT``) have passed. ZMQ_FD is edge-triggered: sleep only once ZMQ_EVENTS says
        nothing is readable (only the loop uses the socket, so no send elsewhere can consume
        the edge unseen). The timer armed for an earlier time is kept (it fires early, and
        that turn arms the next): at 10k messages/s the deadline rarely moves, and a timer
        made per message cost more than the message's routing (issue 20)."""
        if self._loops.readable():
            self._monitor_check = True     # not watched: ask it when the socket is drained
            self._readable = True
            self._again()      # more came meanwhile: the hub's other callbacks first
            return
        now = self.clock()
        timeout = min(max(timeout, 0.0), IDLE_WAIT)
        if now + timeout < self._timer_at:
            if self._timer is not None:
                self._timer.close()
            self._timer = self._hub.loop.timer(timeout)
            self._timer.start(self._ready, _TIMED_OUT)
            self._timer_at = now + timeout

    def _round(self) -> bool:
        """Read what is there, journal and route it, replay a batch, send, run due timers.
        True if there is more to do right away."""
        sock, core = self.sock, self.core
        now = self.clock()
        if self._opened:                              # journals opened since the last round
            opened, self._opened = self._opened, []
            for name, error in opened:
                core.opened(name, error, now)
        if self._compacted:                           # compactions finished since the last round
            compacted, self._compacted = self._compacted, []
            for job, result, error in compacted:
                core.compacted(job, result, error)
        receive = core.receive
        drain = self._loops.drain
        n = size = 0
        drained = False
        # The socket said it is readable just now (its descriptor fired, or the question before
        # sleeping said so): the first read does not ask again (issue 20). The first few reads
        # of a round ask ZMQ_EVENTS first: at a low rate a round is one message, and the read
        # that finds nothing raised zmq.Again, which cost more than the question; a busy round
        # reads on and meets one Again at its end.
        known, self._readable = self._readable, False
        skipped = 0               # frames of messages of several frames dropped this turn
        while n < DRAIN_MAX and core.queued < DRAIN_PUBLISHED and size < DRAIN_BYTES:
            if self._partial is not None:              # the rest of a message of many frames
                if skipped >= SKIP_CHUNK:
                    break                              # the turn's frames: more next turn
                read, done = self._skip(SKIP_CHUNK - skipped, now)
                skipped += read
                if not done:
                    break                              # more of it next turn
                n += 1
                continue
            got, status, new = drain(self._known, min(DRAIN_CHUNK, DRAIN_MAX - n),
                                     DRAIN_BYTES - size, _ASK_FIRST - n, n == 0 and known,
                                     self.curve is not None)
            for ident, frames in got:
                size += len(frames[0])
                receive(ident, frames, now)
            n += len(got)
            if status == DRAINED:
                drained = True
                break
            if status == PARTS:                        # new: (its id, its first frame)
                self._partial = [new[0], new[1], 1]
                size += len(new[1])                    # read: counted as any message's
            elif status == NEW:                        # first message of this id: its connection
                first = _recv_raw(sock, _NB, False)
                if new in self._ident_fd:              # another key: the id's old one closed
                    self._forget(new, claimed=True)
                self._learn(new, first.get(_SRCFD))
                if self.curve is not None:
                    user = self._ident_key[new] = first.get("User-Id") or ""
                    core.identify(new, user)
                size += len(first.bytes)
                if _getsockopt(sock, _RCVMORE):
                    self._partial = [new, first.bytes, 1]
                    continue
                receive(new, [first.bytes], now)
                n += 1
        if drained and (self._dead or self._closed_fds or (
                self._monitor_check and self._monitor_readable())):
            self._disconnects()
        if drained:
            self._monitor_check = False
        if self._refusals.unreported:
            self._refusals.tick(now)
        synced, self._synced = self._synced, False
        done = core.round(now, lambda: self._send(now), synced)
        if done.to_sync:
            self._start_sync(done.to_sync)
        for name in done.to_open:
            gevent.spawn(self._open, name)
        if done.to_compact:                           # the core names one at a time
            self._compacting = gevent.spawn(self._compact, done.to_compact)
        # A round that emptied the socket is followed by sleep, not by another round that
        # would find nothing (at a low rate, one message per round: that round cost as much
        # as the message's own; issue 20).
        return ((n > 0 and not drained) or done.more or bool(self._opened)
                or self._partial is not None)

    def _skip(self, max_n: int, now: float) -> Tuple[int, bool]:
        """Read and drop up to ``max_n`` more frames of the message of several frames being
        read (what is left of the turn's ``SKIP_CHUNK``: messages of a few thousand frames
        each, from many connections, are not ``SKIP_CHUNK`` a message); once its last is read,
        hand it to the core, which refuses it by its length (:class:`Parts`). Returns
        ``(frames read, done)``."""
        part = self._partial
        read, more = self._loops.skip(max_n)
        part[2] += read
        if more:
            return read, False
        self._partial = None
        self.core.receive(part[0], Parts(part[1], part[2]), now)
        return read, True

    def _send(self, now: float) -> None:
        out = self.core.take_outbox()
        if not out:
            return
        send_all = self._loops.send_all
        blocked = None
        i, n = 0, len(out)
        while i < n:
            i, errno = send_all(out, i, blocked)     # up to a failed send or a blocked client
            if i == n:
                break
            ident, frame = out[i]
            if errno:
                if blocked is None:
                    blocked = set()
                blocked.add(ident)
                if errno == _EAGAIN:                   # the client's pipe is full
                    self.core.unsent(ident, frame, now)
                elif errno == _EHOSTUNREACH:           # the client's connection is gone:
                    self._forget(ident)                # its next message is a new one's
                else:
                    raise zmq.ZMQError(errno)
            else:                                      # behind a frame that did not go out
                self.core.unsent(ident, frame, now)
            i += 1
        self.core.sent()
        if self.core.outbox:                           # e.g. a forgotten client's DETACH
            self._send(now)

    # ------------------------------------------------------------------ memory
    def _trim_memory(self) -> None:
        """When idle, at most once a second, hand freed heap back to the OS (glibc keeps what
        libzmq's per-connection buffers freed in its arenas: after a storm of clients the RSS
        would otherwise stay at its peak; docs/operations.md, Reliability)."""
        now = self.clock()
        if _malloc_trim is None or now - self._trimmed < 1.0:
            return
        self._trimmed = now
        _malloc_trim(0)

    # ------------------------------------------------------------------ connections
    def _learn(self, ident: bytes, fd: int) -> None:
        """A new routing id speaks on connection ``fd``. Descriptors are reused: if the
        connection that had ``fd`` before closed (its DISCONNECTED is queued ahead of this new
        connection's first message), the ids it carried are dead, whenever their last messages
        are read."""
        self._read_monitor()
        if fd in self._closed_fds:
            self._closed_fds.discard(fd)
            self._dead |= self._fd_idents.pop(fd, set())
        self._ident_fd[ident] = fd
        self._fd_idents.setdefault(fd, set()).add(ident)

    def _read_monitor(self) -> None:
        refusals = None
        while self._monitor_readable():
            event = recv_monitor_message(self._monitor)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self._closed_fds.add(event["value"])
            else:                                      # a handshake failed: logged, no session
                refusals = self._refusals
                refusals.monitor_event(event["event"], event["value"], self.clock())
        if refusals is not None and self.curve is not None:
            self._log_zap_refusals()

    def _log_zap_refusals(self) -> None:
        """The keys the ZAP authenticator refused (its replies come before the monitor's
        HANDSHAKE_FAILED_AUTH events), into the rate-limited log."""
        records, lost = self.curve.take_refusals()
        now = self.clock()
        for address, key, status, text in records:
            self._refusals.zap_refused(address, key, status, text, now)
        self._refusals.lost(lost, now)

    def _disconnects(self) -> None:
        """Forget the sessions of connections that closed (all they sent was read before)."""
        self._read_monitor()
        for fd in self._closed_fds:
            self._dead |= self._fd_idents.pop(fd, set())
        self._closed_fds.clear()
        dead, self._dead = self._dead, set()
        for ident in dead:
            self._forget(ident)

    def _forget(self, ident: bytes, claimed: bool = False) -> None:
        """Routing id ``ident``'s connection is gone: its session too (``claimed``: by another
        connection, which gets nothing made for the old one: :meth:`BrokerCore.claimed`). The
        id is forgotten here with it, so that a later connection on it is learnt and
        identified again (a send to it that failed forgot only the core's session, its key
        with it: the same key back on the id was served with none, found by review)."""
        fd = self._ident_fd.pop(ident, None)
        self._ident_key.pop(ident, None)
        if fd in self._fd_idents:
            self._fd_idents[fd].discard(ident)
        self._dead.discard(ident)
        (self.core.claimed if claimed else self.core.gone)(ident)

    # ------------------------------------------------------------------ opening streams
    def _open(self, name: str) -> None:
        """Open a stream's journal in the thread pool (a new stream's directory, files and
        fsyncs, or an existing one's recovery: as long as the disk likes), then wake the loop,
        which hands the result to the core (:meth:`BrokerCore.opened`)."""
        error = None
        try:
            _in_pool(self.datadir.journal, name)
        except Exception as exc:                       # that stream's ATTACHes get INVALID
            error = exc
        self._opened.append((name, error))
        os.write(self._wake_w, b"o")

    # ------------------------------------------------------------------ compaction
    def _compact(self, jobs) -> None:
        """Run the compactions a round named, each in a child process waited for in the thread
        pool (:mod:`zeps.broker.compactor`: the rewrite shares nothing with the loop, not even
        the GIL), then wake the loop, which hands each result to the core
        (:meth:`BrokerCore.compacted`)."""
        for job in jobs:
            result = error = None
            try:
                result = _in_pool(self._compactor.run, job)
            except Exception as exc:                   # logged by the core; the stream goes on
                error = exc
            self._compacted.append((job, result, error))
        os.write(self._wake_w, b"c")

    # ------------------------------------------------------------------ group fsync
    def _start_sync(self, streams: List[Stream]) -> None:
        if self._syncing is not None and not self._syncing.dead:
            return                                     # the previous sync is still running
        self._syncing = gevent.spawn(self._sync, streams)

    def _sync(self, streams: List[Stream]) -> None:
        on_fsync = self.on_fsync
        for st in streams:
            try:
                if on_fsync is None:
                    _in_pool(st.journal.sync)
                else:
                    on_fsync(_in_pool(_timed, st.journal.sync))
            except Exception as exc:                   # that stream's publishers wait; others go on
                self.core.sync_failed(st, exc)
        self._synced = True
        os.write(self._wake_w, b"s")

    def _shutdown(self) -> None:
        try:
            if self._compactor.stop():                 # the next compaction recovers and redoes it
                self.log.info("compaction_stopped", stream=getattr(self.core.compacting,
                                                                   "stream", None))
            if self._compacting is not None:
                self._compacting.join()                # its child is gone once this returns
            if self._syncing is not None:
                self._syncing.join()
            now = self.clock()
            self.core.append_queued()
            for st in self.core.streams.values():
                try:
                    st.journal.sync()
                except Exception as exc:
                    self.core.sync_failed(st, exc)
                    self.unsynced.append(st.name)
            self.core.confirm()
            self._send(now)
            self.core.save_consumers()
        finally:
            self._consumer_saver.close()
            for w in self._watchers:
                w.close()
            if self.curve is not None:
                self.curve.stop()
            self.sock.disable_monitor()
            self._monitor.close(0)
            self.sock.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.datadir.close()
