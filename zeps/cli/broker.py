"""``zeps broker``: the broker's command line — flags, logging set-up, start and signals.

The broker itself (``zeps.broker``) takes configuration objects; every flag, its default and its
parsing live here.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys

import gevent
import structlog
import zmq

from zeps import units
from zeps.broker.acl import AclError, load_acl
from zeps.broker.core import CoreConfig
from zeps.broker.scheduling import POLICIES
from zeps.broker.security import CurveServer, SecurityError
from zeps.broker.server import Broker
from zeps.journal import DataDir, JournalConfig, JournalError, JournalLockedError
from zeps.journal.record import MAX_FRAME
from zeps.units import DEFAULT_DATA_DIR, DEFAULT_ENDPOINT, DEFAULT_MONITOR

from .common import MAX_NUMBER, MAX_SECONDS, Parser, monitor_address


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


#: What a journal record holds beside a message's body (its key, headers block, frame head).
RECORD_SLACK = 512


def _positive(parse, most=None):
    """A number more than zero, finite (``nan`` and ``inf`` passed, and broke the broker: a
    traceback from ``--admin-rate nan``, every regex timing out at once with
    ``--regex-timeout-ms inf``), and at most ``most`` where the broker cannot take more (a
    traceback from ``--client-queue 3000000000``); found by review."""
    def check(text):
        value = parse(text)
        if isinstance(value, float) and not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a number more than zero: {text!r}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}: {text!r}")
        return value
    check.__name__ = parse.__name__
    return check


def _frontend_spec(kind):
    def parse(text):
        from zeps.frontends.spec import parse_spec
        return parse_spec(kind, text)
    parse.__name__ = f"{kind} PORT:STREAM"
    return parse


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``zeps broker``; defaults also come from ZEPS_ENDPOINT / ZEPS_DATA_DIR."""
    parser.add_argument("--endpoint", default=os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT),
                        help=f"ZeroMQ endpoint to bind (default {DEFAULT_ENDPOINT}; "
                             "tcp://127.0.0.1:* picks a free port and prints it)")
    parser.add_argument("--data-dir", default=os.environ.get("ZEPS_DATA_DIR", DEFAULT_DATA_DIR),
                        help=f"journal directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--fsync", choices=("always", "interval", "never"), default="interval",
                        help="durability policy (default interval: group commit)")
    parser.add_argument("--fsync-interval-ms", type=_positive(int, MAX_SECONDS * 1000),
                        default=50,
                        help="group-commit interval for --fsync interval (default 50; at most "
                             f"{MAX_SECONDS * 1000}, about 115 days)")
    parser.add_argument("--segment-bytes", type=_positive(parse_size), default=256 << 20,
                        help="roll journal segments at this size (default 256M)")
    parser.add_argument("--retention-bytes", type=_positive(parse_size), default=None,
                        help="keep at most this many bytes per stream (whole segments are deleted)")
    parser.add_argument("--retention-age", type=_positive(parse_duration), default=None,
                        help="delete segments whose newest message is older than this (e.g. 7d)")
    parser.add_argument("--key-index", action="store_true",
                        help="keep a last-value index (key -> latest message) for every stream, "
                             "for SNAPSHOT and zeps kv (memory grows with the distinct keys; a "
                             "compacted stream has one anyway)")
    parser.add_argument("--expiry", type=_positive(parse_duration), default=60.0,
                        help="forget a client silent for this long (default 60s)")
    parser.add_argument("--compaction-check", type=_positive(parse_duration), default=30.0,
                        help="look for compacted streams to compact this often (default 30s; "
                             "each is compacted once its dirty ratio says so)")
    parser.add_argument("--max-message", type=_positive(parse_size, MAX_FRAME - RECORD_SLACK),
                        default=1 << 20,
                        help="largest message body accepted (default 1M)")
    parser.add_argument("--regex-timeout-ms", type=_positive(float), default=5.0,
                        help="time limit of one regex match (default 5)")
    parser.add_argument("--auto-create", choices=("yes", "no"), default="yes",
                        help="yes (default): ATTACH creates a missing stream (publishers create "
                             "streams on first use); no: only 'zeps stream create' does")
    limits = parser.add_argument_group("limits (each refusal is an INVALID naming the limit)")
    limits.add_argument("--max-clients", type=_positive(int), default=10_000,
                        help="clients served at once (default 10000)")
    limits.add_argument("--max-streams", type=_positive(int), default=10_000,
                        help="streams in use at once (default 10000)")
    limits.add_argument("--max-total-streams", type=_positive(int), default=100_000,
                        help="streams stored at once: creating one more is refused (default "
                             "100000)")
    limits.add_argument("--max-total-consumers", type=_positive(int), default=100_000,
                        help="durable consumers held at once, of every stream: adding one more "
                             "is refused (default 100000)")
    limits.add_argument("--max-total-outstanding", type=_positive(int), default=4_194_304,
                        help="messages handed out and not yet acknowledged, over all durable "
                             "consumers (a few hundred bytes each): beyond, consumers get no new "
                             "messages until acknowledgements free room (default 4194304)")
    limits.add_argument("--admin-rate", type=_positive(float), default=20.0,
                        help="listing and stream administration commands a second per client, "
                             "after a burst of as many (default 20)")
    limits.add_argument("--max-open-streams", type=_positive(int), default=1000,
                        help="journals kept open; idle ones beyond are closed (default 1000)")
    limits.add_argument("--max-subscriptions", type=_positive(int), default=1024,
                        help="patterns per client (default 1024)")
    limits.add_argument("--max-regex-subscriptions", type=_positive(int), default=16,
                        help="regex patterns per client (default 16)")
    limits.add_argument("--max-regex-per-stream", type=_positive(int), default=128,
                        help="distinct regexes per stream (default 128)")
    limits.add_argument("--max-producer-ids", type=_positive(int), default=16,
                        help="distinct idempotent producer ids one connection may register "
                             "(PRODUCER; default 16)")
    limits.add_argument("--max-producer-ids-per-key", type=_positive(int), default=1000,
                        help="with --curve-secret, producer ids one client key keeps per stream: "
                             "beyond it a new id of the key takes the place of its least "
                             "recently used one (default 1000)")
    limits.add_argument("--producer-max-age", type=_positive(parse_duration), default=86400.0,
                        help="an idempotent producer whose last message is older than this is "
                             "forgotten: its retries are no longer de-duplicated (default 1d; "
                             "at most 10,000 producers per stream are kept in any case)")
    limits.add_argument("--max-credit", type=_positive(parse_size, MAX_NUMBER),
                        default=64 << 20,
                        help="the largest credit window the broker advises clients (LIMITS); "
                             "memory per client is bounded by --client-queue (default 64M)")
    limits.add_argument("--client-queue", type=_positive(int, (1 << 31) - 1), default=1000,
                        help="messages queued per client connection before it is switched to "
                             "replay from the journal (ZeroMQ SNDHWM; default 1000)")
    sec = parser.add_argument_group("security (docs/operations.md, Security)")
    sec.add_argument("--curve-secret", metavar="FILE",
                     help="the broker's key pair (a .key_secret file from 'zeps keys new'): "
                          "clients must use CurveZMQ with its public key")
    sec.add_argument("--allow", metavar="DIR",
                     help="allow-list: a directory of client public keys (*.key); with "
                          "--curve-secret, only these keys (and those of the ACL's [clients]) "
                          "may connect")
    sec.add_argument("--acl", metavar="FILE",
                     help="per-stream rights (TOML); reloaded on SIGHUP")
    parser.add_argument("--io-scheduling", choices=POLICIES, default="batch",
                        help="batch (default): ZeroMQ's I/O thread runs under Linux's "
                             "SCHED_BATCH and does not preempt the broker's loop mid-message "
                             "(its latency tail); normal: the system's default policy")
    parser.add_argument("--monitor", metavar="HOST:PORT", nargs="?", const=DEFAULT_MONITOR,
                        type=_arg(monitor_address), default=None,
                        help="serve the dashboard, /varz /connz /streamz (JSON) and /metrics "
                             f"(Prometheus) over HTTP here (default off; alone: {DEFAULT_MONITOR};"
                             " also PORT or http://HOST:PORT, as 'zeps top --monitor'; port 0 "
                             "picks a free one). Plain HTTP that shows stream names, "
                             "client keys and patterns (even those the ACL hides from "
                             "LIST-STREAMS) unless --monitor-redact: keep it private, see "
                             "--monitor-token")
    parser.add_argument("--monitor-token", metavar="FILE",
                        default=os.environ.get("ZEPS_MONITOR_TOKEN_FILE"),
                        help="a file holding a token (16 to 1024 visible ASCII characters): "
                             "every monitoring page but /healthz and the dashboard's files then "
                             "needs 'Authorization: Bearer TOKEN' (401 without; the dashboard "
                             "takes it as /#token=TOKEN). Default $ZEPS_MONITOR_TOKEN_FILE")
    parser.add_argument("--monitor-redact", choices=("auto", "yes", "no"), default="auto",
                        help="yes: monitoring pages and metrics show stable hashes instead of "
                             "stream names, client ids, keys and patterns, and no paths; auto "
                             "(default): yes with --curve-secret unless --monitor-token is given")
    fe = parser.add_argument_group("front ends: other protocols over a stream's journal "
                                   "(docs/protocol.md, Front ends)")
    fe.add_argument("--chp", metavar="PORT:STREAM", action="append", default=[],
                    type=_arg(_frontend_spec("chp")),
                    help="serve STREAM to CHP (RFC 12, the Guide's Clone) clients: snapshot "
                         "ROUTER on PORT, publisher PUB on PORT+1, collector on PORT+2, bound on "
                         "the --endpoint's host (repeatable). Not with --curve-secret: CHP has "
                         "no security")
    fe.add_argument("--chp-collector", choices=("sub", "pull"), default="sub",
                    help="the CHP collector's socket: sub (default, as RFC 12 says: clients "
                         "connect a PUB) or pull (for clients that connect a PUSH, as the "
                         "Guide's Python clone.py does)")
    fe.add_argument("--bus", metavar="PORT:STREAM", action="append", default=[],
                    type=_arg(_frontend_spec("bus")),
                    help="serve STREAM to Event BUS clients: snapshot ROUTER on PORT, publisher "
                         "PUB on PORT+1, collector ROUTER on PORT+2 (repeatable). Not with "
                         "--curve-secret")
    fe.add_argument("--bus-dialect", choices=("rfc", "reference"), default="rfc",
                    help="how the BUS front end writes sequences and subtree lists: rfc "
                         "(default: 8 bytes in network order, ';') or reference (decimal text, "
                         "',': what the Node reference client reads); both are accepted on input")
    parser.add_argument("--log-json", action="store_true", help="log JSON lines instead of text")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")


def configure_logging(json_lines: bool, level: str) -> None:
    """structlog for the broker's own events, and the standard library's ``logging`` (the
    journal's ``zeps.journal`` logger) rendered by the same processors: with ``--log-json``
    every line on stderr is JSON."""
    import logging
    renderer = (structlog.processors.JSONRenderer() if json_lines
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    shared = [structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name,
              structlog.processors.TimeStamper(fmt="iso", utc=True)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True)
    gevent.get_hub().print_exception = _log_hub_error


def _log_hub_error(context, kind, value, tb) -> None:
    """What gevent's hub prints when a greenlet or a callback raises (a raw traceback on
    stderr, lines of text among ``--log-json``'s JSON; found by review): one line of the log,
    the traceback a field of it."""
    import traceback
    structlog.get_logger("zeps.broker").error(
        "unhandled_error", error=f"{getattr(kind, '__name__', kind)}: {value}",
        context=repr(context)[:200],
        traceback="".join(traceback.format_exception(kind, value, tb)))


#: Open files an open stream takes (its log and two index files, one being read) and the
#: broker itself (its sockets, libzmq's, the monitor's, the data directory's lock).
FILES_PER_STREAM = 4
FILES_OF_ITS_OWN = 64


def _raise_fd_limit() -> int:
    """Open files: as many as the hard limit allows (streams and connections each need some);
    the limit now in force."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 20), hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def files_needed(args) -> int:
    """The open files ``--max-clients`` connections and ``--max-open-streams`` streams take."""
    return (args.max_clients + FILES_PER_STREAM * args.max_open_streams + FILES_OF_ITS_OWN)


def acl_keys(acl):
    """The public keys an ACL names in ``[clients]`` (they are allowed to connect, also one
    that only ``clients = ["*"]`` covers)."""
    return acl.keys() if acl is not None else []


def _reload(args, broker, log) -> None:
    """SIGHUP: read the ACL and the allow-list again; a bad file keeps the old rules."""
    try:
        acl = load_acl(args.acl) if args.acl else None
        if broker.curve is not None:
            broker.curve.set_keys(acl_keys(acl))
    except (AclError, SecurityError, OSError) as exc:
        log.error("reload_failed", error=str(exc))
        return
    if broker.curve is not None:        # connections of keys no longer allowed are closed
        broker.core.set_allowed_keys(broker.curve.keys)
    if args.acl:
        broker.core.set_acl(acl)
    log.info("reloaded", acl=args.acl, allowed_keys=broker.curve.allowed_count()
             if broker.curve is not None else None)


def run_from_args(args: argparse.Namespace) -> int:
    configure_logging(args.log_json, args.log_level)
    log = structlog.get_logger("zeps.broker")
    monitor_token = None
    if args.monitor is not None and args.monitor_token:
        from zeps.broker.monitor import read_token
        try:
            monitor_token = read_token(args.monitor_token)
        except ValueError as exc:
            print(f"zeps: error: {exc}", file=sys.stderr)
            return 2
    jconf = JournalConfig(
        segment_bytes=args.segment_bytes, fsync=args.fsync,
        max_record_bytes=args.max_message + RECORD_SLACK,
        retention_bytes=args.retention_bytes,
        retention_ms=int(args.retention_age * 1000) if args.retention_age else None,
        producer_max_age_ms=max(1, int(args.producer_max_age * 1000)),
        key_index=args.key_index)
    try:
        datadir = DataDir(args.data_dir, jconf)
    except JournalLockedError as exc:
        print(f"zeps: error: {exc}", file=sys.stderr)
        return 1
    except (JournalError, OSError) as exc:
        print(f"zeps: error: cannot use data directory {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    core_config = CoreConfig(expiry=args.expiry, max_message=args.max_message,
                             regex_timeout=args.regex_timeout_ms / 1000.0, fsync=args.fsync,
                             fsync_interval=args.fsync_interval_ms / 1000.0,
                             max_clients=args.max_clients, max_streams=args.max_streams,
                             max_open_streams=args.max_open_streams,
                             max_subscriptions=args.max_subscriptions,
                             max_regex_subscriptions=args.max_regex_subscriptions,
                             max_regex_per_stream=args.max_regex_per_stream,
                             max_producer_ids=args.max_producer_ids,
                             max_producer_ids_per_key=args.max_producer_ids_per_key,
                             max_credit=args.max_credit, auto_create=args.auto_create == "yes",
                             max_total_streams=args.max_total_streams,
                             max_total_consumers=args.max_total_consumers,
                             max_total_outstanding=args.max_total_outstanding,
                             admin_rate=args.admin_rate,
                             admin_burst=max(1, int(args.admin_rate)),
                             compaction_check=args.compaction_check)
    files = _raise_fd_limit()
    try:
        acl = load_acl(args.acl) if args.acl else None
        curve = None
        if args.curve_secret:
            curve = CurveServer(args.curve_secret, args.allow, acl_keys(acl))
        elif args.allow or args.acl:
            raise SecurityError("--allow and --acl need --curve-secret (clients are identified "
                                "by their CurveZMQ keys)")
    except (AclError, SecurityError) as exc:
        datadir.close()
        print(f"zeps: error: {exc}", file=sys.stderr)
        return 2
    specs = [*args.chp, *args.bus]
    problem = _check_frontends(args, specs)
    if problem:
        datadir.close()
        print(f"zeps: error: {problem}", file=sys.stderr)
        return 2
    problem = _chp_streams(args, datadir)
    if problem:
        datadir.close()
        print(f"zeps: error: {problem}", file=sys.stderr)
        return 2
    try:
        broker = Broker(args.endpoint, datadir, core_config, log=log, sndhwm=args.client_queue,
                        curve=curve, io_scheduling=args.io_scheduling)
    except zmq.ZMQError as exc:
        datadir.close()
        print(f"zeps: error: cannot bind {args.endpoint}: {exc}", file=sys.stderr)
        return 1
    if curve is not None:
        broker.core.set_allowed_keys(curve.keys)
    if acl is not None:
        broker.core.set_acl(acl)
    try:
        frontends = _start_frontends(args, specs, broker, jconf, log)
    except zmq.ZMQError as exc:
        broker.stop()
        broker.serve_forever()              # stopped: returns at once, closing socket and journals
        print(f"zeps: error: cannot open a front end: {exc}", file=sys.stderr)
        return 1
    if files < files_needed(args):
        # At the limit, a new connection is not refused: libzmq tries accept() again at once,
        # the broker's I/O thread at 100% CPU while clients wait (found by review).
        log.warning("open_files_limit", limit=files, needed=files_needed(args),
                    detail="the open files limit (ulimit -n) is below what --max-clients and "
                           "--max-open-streams may take: raise it, or lower them")
    if curve is None:
        log.warning("broker_open", detail="no --curve-secret: traffic is plaintext and any "
                                          "client that reaches the endpoint may publish and read "
                                          "every stream")
    stopped_by = []                       # the signal that stopped it: SIGINT exits 130

    def stop(signum) -> None:
        stopped_by.append(signum)
        broker.stop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop, sig)
    gevent.signal_handler(signal.SIGHUP, lambda: _reload(args, broker, log))
    monitor = None
    if args.monitor is not None:
        try:
            monitor = _start_monitor(args, broker, log, monitor_token, frontends)
        except OSError as exc:
            for f in frontends:
                f.stop()
            broker.stop()
            broker.serve_forever()          # stopped: returns at once, closing socket and journals
            print(f"zeps: error: cannot serve monitoring on {args.monitor[0]}:{args.monitor[1]}: "
                  f"{exc}", file=sys.stderr)
            return 1
    print(f"zeps broker listening on {broker.endpoint} (data dir {os.path.abspath(args.data_dir)})",
          flush=True)
    if monitor is not None:
        print(f"monitoring on {monitor.url}", flush=True)
    log.info("broker_started", endpoint=broker.endpoint, data_dir=os.path.abspath(args.data_dir),
             fsync=args.fsync, pid=os.getpid(), monitor=monitor.url if monitor else None,
             io_scheduling="batch" if broker.io_batch else "normal",
             socket_loops=broker.socket_loops)
    try:
        broker.serve_forever()
    finally:
        for f in frontends:
            f.stop()
        if monitor is not None:
            monitor.stop()
    if broker.unsynced:                 # acknowledged messages may not be on disk: not a success
        log.error("broker_stopped", endpoint=broker.endpoint, unsynced=broker.unsynced,
                  detail="the last sync of these streams failed (fsync_failed): what they were "
                         "sent last may not be on disk")
        return 1
    log.info("broker_stopped", endpoint=broker.endpoint)
    return 130 if stopped_by[:1] == [signal.SIGINT] else 0     # Ctrl-C: 128 + SIGINT


def monitor_redactor(args, curve, token):
    """The :class:`~zeps.broker.monitor.Redactor` of ``--monitor-redact`` (None: names shown).
    Its key comes from the broker's CurveZMQ secret when there is one (the hashes stay the
    same across restarts), else it is random (they change at each start)."""
    import hashlib
    from zeps.broker.monitor import Redactor
    redact = args.monitor_redact
    if redact == "no" or (redact == "auto" and (curve is None or token is not None)):
        return None
    if curve is not None:
        return Redactor(hashlib.sha256(b"zeps monitor redaction\0" + curve.secret).digest())
    return Redactor(os.urandom(32))


def _check_frontends(args, specs) -> str:
    """Why ``--chp``/``--bus`` cannot be served as given ("" if they can)."""
    if not specs:
        return ""
    if args.curve_secret:
        return ("--chp and --bus cannot be used with --curve-secret: CHP and the Event BUS have "
                "no authentication or encryption, so their ports would open the stream to anyone "
                "(docs/protocol.md, Front ends)")
    from zeps.frontends.spec import check_specs
    try:
        check_specs(specs)
    except ValueError as exc:
        return str(exc)
    return ""


def _chp_streams(args, datadir) -> str:
    """A ``--chp`` stream must have a key index (its snapshots are SNAPSHOTs): a missing one is
    created now with one (``key_index``); an existing one without is refused, unless the broker
    runs with ``--key-index`` (every stream has one then). Why not ("" if fine)."""
    from zeps.journal.settings import StreamSettings
    for spec in args.chp:
        name = spec.stream
        try:
            if not datadir.has_stream(name):
                if not args.key_index:
                    datadir.create(name, StreamSettings(key_index=True))
                continue
            own = datadir.settings(name)
        except (JournalError, OSError) as exc:
            return f"--chp {spec.port}:{name}: cannot create or read stream {name!r}: {exc}"
        if not (own.compact or own.key_index or args.key_index):
            return (f"--chp {spec.port}:{name}: stream {name!r} has no key index, which CHP "
                    f"snapshots need: run the broker with --key-index, or serve a stream made "
                    f"with 'zeps stream create STREAM --key-index'")
    return ""


def _start_frontends(args, specs, broker, jconf, log):
    """The CHP and BUS front ends, bound and started (greenlets of this process, clients of the
    broker's own endpoint). zmq.ZMQError (a port taken) stops those already open."""
    if not specs:
        return []
    import zmq.green
    from zeps.frontends import bus_codec
    from zeps.frontends.bus_server import BusServer
    from zeps.frontends.chp_server import ChpServer
    from zeps.frontends.wire import Limits
    ctx = zmq.green.Context()
    common = dict(broker_endpoint=broker.endpoint, data_dir=args.data_dir, context=ctx,
                  journal_config=jconf, limits=Limits(max_value=args.max_message), log=log,
                  expiry=args.expiry, pub_hwm=args.client_queue)
    started = []
    try:
        for spec in specs:
            if spec.kind == "chp":
                f = ChpServer(spec, collector=args.chp_collector, **common)
            else:
                f = BusServer(spec, dialect=bus_codec.DIALECTS[args.bus_dialect], **common)
            started.append(f.open())
    except zmq.ZMQError:
        for f in started:
            f.close()
        raise
    for f in started:
        f.start()
        log.info("frontend_started", frontend=f.spec.kind, ports=f"{f.host}:{f.spec.port}-"
                 f"{f.spec.port + 2}", stream=f.spec.stream)
    return started


def _start_monitor(args, broker, log, token=None, frontends=()):
    """The monitoring HTTP server (``--monitor``), started; its fsync histogram is fed by the
    broker's sync greenlet."""
    from zeps.broker.http import MonitorServer
    from zeps.broker.metrics import Metrics
    from importlib.metadata import PackageNotFoundError, version
    try:
        zeps_version = version("zeps")
    except PackageNotFoundError:
        zeps_version = None
    redact = monitor_redactor(args, broker.curve, token)
    if token is None and redact is None and broker.curve is not None:
        log.warning("monitor_open", detail="--monitor-redact no without --monitor-token: "
                                           "whoever reaches the monitoring port sees every "
                                           "stream name, client key and pattern")
    metrics = Metrics(broker.core, redact)
    broker.on_fsync = metrics.observe_fsync
    host, port = args.monitor
    about = {"server": "zeps", "version": zeps_version, "pid": os.getpid(),
             "endpoint": broker.endpoint, "data_dir": os.path.abspath(args.data_dir),
             "fsync": args.fsync}
    if frontends:                       # counters read when /varz is made; names hidden if redacted
        about["frontends"] = {f.spec.name: {"port": f.spec.port, "counters": f.counters.live(),
                                            **({} if redact else {"stream": f.spec.stream})}
                              for f in frontends}
    log.info("monitor_access", token=token is not None, redacted=redact is not None)
    return MonitorServer(broker.core, host, port, metrics=metrics, clock=broker.clock,
                         about=about, log=log, token=token, redact=redact).start()


def main(argv=None) -> int:
    """``zeps broker`` (and ``python -m zeps.broker``)."""
    parser = Parser(prog="zeps broker", description="Run the ZEPS broker.")
    add_broker_arguments(parser)
    return run_from_args(parser.parse_args(argv))
