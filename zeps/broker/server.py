"""The broker's I/O shell: one ZeroMQ ROUTER socket driven by gevent around :class:`BrokerCore`.

Kept thin on purpose; every decision lives in the pure core. The shell:

* waits for readability *once* through gevent (the socket's edge-triggered ZMQ_FD), then drains
  with NOBLOCK until empty or until ``DRAIN_MAX`` messages — per-message ``zmq.green`` calls are
  several times slower — so publishes arrive in batches and each batch costs one journal write;
* sends the core's outbox; ``ROUTER_MANDATORY`` tells it when a client is gone (it is forgotten);
  ``SNDHWM`` is unlimited because credit already bounds what the broker queues for a client;
* runs the timers in a second greenlet: group fsync (``fsync=interval``) in gevent's thread pool
  followed by CONFIRMs, expiry of silent clients, and retention.

Back-pressure on publishers comes from ZeroMQ: the broker reads only as fast as it journals, the
ROUTER's receive high-water mark fills, and the publishers' DEALER sockets block.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Optional

import gevent
import gevent.select
import structlog
import zmq

from zeps import units
from zeps.journal import DataDir, JournalConfig, JournalError, JournalLockedError

from zeps.units import DEFAULT_DATA_DIR, DEFAULT_ENDPOINT

from .core import BrokerCore, CoreConfig

DRAIN_MAX = 500           # messages read per round; then journal, route, replay and yield
IDLE_WAIT = 0.25          # seconds to wait for input when there is no other work

# The hot path calls pyzmq's Cython socket methods directly with plain int flags: the Python
# "sugar" layer (send_multipart/recv_multipart, enum flag arithmetic) cost more per message
# than journalling it (measured with cProfile in bench/bench_broker.py runs).
_send_raw = zmq.backend.Socket.send
_recv_raw = zmq.backend.Socket.recv
_getsockopt = zmq.backend.Socket.get
_NB = int(zmq.NOBLOCK)
_MORE_NB = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)


class Broker:
    def __init__(self, endpoint: str, datadir: DataDir, core_config: CoreConfig, *,
                 fsync: str = "interval", fsync_interval_ms: int = 50,
                 retention_check_s: float = 10.0, log=None, context: Optional[zmq.Context] = None):
        self.log = log or structlog.get_logger("zeps.broker")
        self.datadir = datadir
        self.core = BrokerCore(datadir, core_config, log=self._core_log)
        self.fsync = fsync
        self.fsync_interval = fsync_interval_ms / 1000.0
        self.retention_check_s = retention_check_s
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 10000)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.fd = self.sock.getsockopt(zmq.FD)
        self._stopping = False
        self._timers: Optional[gevent.Greenlet] = None

    def _core_log(self, event: str, **kw) -> None:
        self.log.warning(event, **kw)

    # ------------------------------------------------------------------ main loop
    def serve_forever(self) -> None:
        self._timers = gevent.spawn(self._run_timers)
        try:
            while not self._stopping:
                if not self._round():
                    self._wait_readable(IDLE_WAIT)
                else:
                    gevent.sleep(0)      # let the timer greenlet in between busy rounds
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stopping = True

    def _round(self) -> bool:
        """Read what is there, journal and route it, replay a batch, send. True if busy."""
        sock, core = self.sock, self.core
        now = time.monotonic()
        receive = core.receive
        n = 0
        while n < DRAIN_MAX:
            try:
                ident = _recv_raw(sock, _NB)
            except zmq.Again:
                break
            frames = [_recv_raw(sock, _NB)]            # a ROUTER message is delivered whole
            while _getsockopt(sock, _RCVMORE):
                frames.append(_recv_raw(sock, _NB))
            receive(ident, frames, now)
            n += 1
        core.flush()
        self._send()
        more = core.pump()
        self._send()
        return n > 0 or more

    def _wait_readable(self, timeout: float) -> None:
        # ZMQ_FD is edge-triggered: only wait once ZMQ_EVENTS says nothing is readable.
        if self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            return
        gevent.select.select([self.fd], [], [], timeout)

    def _send(self) -> None:
        out = self.core.take_outbox()
        if not out:
            return
        sock = self.sock
        for ident, frame in out:
            try:
                _send_raw(sock, ident, _MORE_NB)
                _send_raw(sock, frame, _NB)
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EHOSTUNREACH:      # the client's connection is gone
                    self.core.forget(ident)
                elif exc.errno == zmq.EAGAIN:
                    self._send_blocking(ident, frame)
                else:
                    raise

    def _send_blocking(self, ident: bytes, frame: bytes) -> None:
        for _ in range(1000):
            gevent.sleep(0.001)
            try:
                self.sock.send_multipart((ident, frame), zmq.NOBLOCK)
                return
            except zmq.Again:
                continue
            except zmq.ZMQError:
                break
        self.log.warning("client_unwritable_forgotten", client=ident.hex())
        self.core.forget(ident)

    # ------------------------------------------------------------------ timers
    def _run_timers(self) -> None:
        pool = gevent.get_hub().threadpool
        next_expiry = next_retention = time.monotonic()
        while not self._stopping:
            gevent.sleep(self.fsync_interval if self.fsync == "interval" else 0.25)
            now = time.monotonic()
            if self.fsync == "interval":
                synced = False
                for st in list(self.core.streams.values()):
                    j = st.journal
                    if j.durable_seq < j.last_seq:
                        try:
                            pool.apply(j.sync)
                            synced = True
                        except Exception as exc:   # keep serving; confirms simply wait
                            self.log.error("fsync_failed", stream=st.name, error=str(exc))
                if synced:
                    self.core.confirm()
                    self._send()
            if now >= next_expiry:
                next_expiry = now + 1.0
                for ident in self.core.expire(now):
                    self.log.info("client_expired", client=ident.hex())
            if now >= next_retention:
                next_retention = now + self.retention_check_s
                for st in list(self.core.streams.values()):
                    try:
                        dropped = st.journal.apply_retention()
                    except Exception as exc:       # the timers must go on (fsync, expiry)
                        self.log.error("retention_failed", stream=st.name, error=str(exc))
                        continue
                    if dropped:
                        self.log.info("retention", stream=st.name, segments_deleted=dropped,
                                      first_seq=st.journal.first_seq)

    def _shutdown(self) -> None:
        if self._timers is not None:
            self._timers.kill()
        try:
            self.core.flush()
            for st in self.core.streams.values():
                st.journal.sync()
            self.core.confirm()
            self._send()
        finally:
            self.sock.close()
            self.datadir.close()


# ---------------------------------------------------------------------- command line

def _arg(parse):
    """An argparse type from a :mod:`zeps.units` parser (ValueError -> ArgumentTypeError)."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


parse_size = _arg(units.parse_size)
parse_duration = _arg(units.parse_duration)


def _positive(parse):
    def check(text):
        value = parse(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be more than zero: {text!r}")
        return value
    check.__name__ = parse.__name__
    return check


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``zeps broker``; defaults also come from ZEPS_ENDPOINT / ZEPS_DATA_DIR."""
    parser.add_argument("--endpoint", default=os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT),
                        help=f"ZeroMQ endpoint to bind (default {DEFAULT_ENDPOINT}; "
                             "tcp://127.0.0.1:* picks a free port and prints it)")
    parser.add_argument("--data-dir", default=os.environ.get("ZEPS_DATA_DIR", DEFAULT_DATA_DIR),
                        help=f"journal directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--fsync", choices=("always", "interval", "never"), default="interval",
                        help="durability policy (default interval: group commit)")
    parser.add_argument("--fsync-interval-ms", type=_positive(int), default=50,
                        help="group-commit interval for --fsync interval (default 50)")
    parser.add_argument("--segment-bytes", type=_positive(parse_size), default=256 << 20,
                        help="roll journal segments at this size (default 256M)")
    parser.add_argument("--retention-bytes", type=_positive(parse_size), default=None,
                        help="keep at most this many bytes per stream (whole segments are deleted)")
    parser.add_argument("--retention-age", type=_positive(parse_duration), default=None,
                        help="delete segments whose newest message is older than this (e.g. 7d)")
    parser.add_argument("--expiry", type=_positive(parse_duration), default=60.0,
                        help="forget a client silent for this long (default 60s)")
    parser.add_argument("--max-message", type=_positive(parse_size), default=1 << 20,
                        help="largest message body accepted (default 1M)")
    parser.add_argument("--regex-timeout-ms", type=_positive(float), default=5.0,
                        help="time limit of one regex match (default 5)")
    parser.add_argument("--log-json", action="store_true", help="log JSON lines instead of text")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")


def configure_logging(json_lines: bool, level: str) -> None:
    import logging
    renderer = (structlog.processors.JSONRenderer() if json_lines
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True)


def run_from_args(args: argparse.Namespace) -> int:
    configure_logging(args.log_json, args.log_level)
    log = structlog.get_logger("zeps.broker")
    jconf = JournalConfig(
        segment_bytes=args.segment_bytes, fsync=args.fsync, fsync_interval_ms=args.fsync_interval_ms,
        max_record_bytes=args.max_message + 512,
        retention_bytes=args.retention_bytes,
        retention_ms=int(args.retention_age * 1000) if args.retention_age else None)
    try:
        datadir = DataDir(args.data_dir, jconf)
    except JournalLockedError as exc:
        print(f"zeps: error: {exc}", file=sys.stderr)
        return 1
    except (JournalError, OSError) as exc:
        print(f"zeps: error: cannot use data directory {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    core_config = CoreConfig(expiry=args.expiry, max_message=args.max_message,
                             regex_timeout=args.regex_timeout_ms / 1000.0)
    try:
        broker = Broker(args.endpoint, datadir, core_config, fsync=args.fsync,
                        fsync_interval_ms=args.fsync_interval_ms, log=log)
    except zmq.ZMQError as exc:
        datadir.close()
        print(f"zeps: error: cannot bind {args.endpoint}: {exc}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, broker.stop)
    print(f"zeps broker listening on {broker.endpoint} (data dir {os.path.abspath(args.data_dir)})",
          flush=True)
    log.info("broker_started", endpoint=broker.endpoint, data_dir=os.path.abspath(args.data_dir),
             fsync=args.fsync, pid=os.getpid())
    broker.serve_forever()
    log.info("broker_stopped", endpoint=broker.endpoint)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="zeps broker", description="Run the ZEPS broker.")
    parser.error = lambda message: (print(f"zeps broker: error: {message}", file=sys.stderr),
                                    sys.exit(2))
    add_broker_arguments(parser)
    return run_from_args(parser.parse_args(argv))
