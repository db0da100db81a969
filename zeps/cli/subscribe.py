"""``zeps subscribe``: print a stream's messages, history then live."""
from __future__ import annotations

import sys

from .common import (
    UsageError,
    _add_common,
    _add_endpoint,
    _add_stream_patterns,
    _positive_int,
    _say,
    _seconds,
    _seq,
    connection_reporter,
    message_printer,
    parse_time,
)
from zeps.units import TIME_FORMS


def add_parser(sub) -> None:
    p = sub.add_parser("subscribe", help="print messages: live, or history then live",
                       description="Print STREAM's messages whose key matches any PATTERN (a "
                       "prefix, or ~regex; default: every key) as 'SEQ KEY BODY' lines (the body "
                       "on one line: newlines and bytes that are not UTF-8 escaped) or JSON lines. "
                       "Like Kafka's and NATS's consumers it starts with what is published from "
                       "now on; --all, --from-seq, --from-time or --last N start in the history "
                       "and go on live.")
    _add_stream_patterns(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--all", action="store_true", help="start at the first message kept")
    g.add_argument("--from-seq", type=_seq, metavar="N", help="start at sequence N")
    g.add_argument("--from-time", type=parse_time, metavar="T",
                   help=f"start at the first message at or after T ({TIME_FORMS})")
    g.add_argument("--last", type=_positive_int, metavar="N",
                   help="start with the stream's last N messages (counted before PATTERN "
                        "filtering)")
    g.add_argument("--live", action="store_true",
                   help="only messages published from now on (the default)")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N messages")
    p.add_argument("--timeout", type=_seconds, metavar="S",
                   help="stop after S seconds without a message")
    _add_endpoint(p)
    _add_common(p)
    from .multicast import add_subscribe_multicast_arguments
    add_subscribe_multicast_arguments(p.add_argument_group(
        "multicast (live data from a 'zeps bridge multicast' group; history and repairs from "
        "the broker)"))
    p.set_defaults(func=cmd_subscribe)


def cmd_subscribe(args) -> int:
    from zeps.clients import Client

    if args.multicast is not None:
        _must_exist(args)
        return _multicast(args)
    _must_exist(args)
    out = sys.stdout
    with Client(args.endpoint, args.stream, timeout=args.connect_timeout,
                curve=args.curve,
                on_connection=connection_reporter(args)) as client:
        from_seq, live = args.from_seq, False
        if args.all:
            from_seq = 0
        elif args.last is not None:
            from_seq = max(client.info().last - args.last + 1, 0)
        elif from_seq is None and args.from_time is None:
            live = True
        else:
            _past_the_head(args, client)
        sub = client.subscribe(args.patterns or [""], from_seq=from_seq,
                               from_time=args.from_time, live=live)
        n = 0
        fmt = message_printer(args.stream, args.json)
        try:
            while args.count is None or n < args.count:
                if not sub.buffered:
                    out.flush()
                msg = sub.poll(args.timeout)
                if msg is None:
                    _say(args, f"no message for {args.timeout:g}s: stopping")
                    break
                out.write(fmt(msg) + "\n")
                n += 1
            out.flush()
        except KeyboardInterrupt:
            out.flush()
            client.close(timeout=1.0)
            _say(args, f"interrupted after {n} message(s)")
            raise
    _say(args, f"{n} message(s)")
    return 0


def _past_the_head(args, client) -> None:
    """``--from-seq`` beyond the next message: say where the stream ends (one line on stderr,
    with or without ``-v``), or the wait looks like a hang."""
    if args.from_seq is None:
        return
    head = client.info().last
    if args.from_seq > head + 1:
        print(f"zeps: waiting: stream {args.stream!r} ends at seq {head}; --from-seq "
              f"{args.from_seq} is past it", file=sys.stderr, flush=True)


def _multicast(args) -> int:
    from .multicast import run_subscribe_multicast

    if args.all:
        args.from_seq = 0
    elif args.last is not None:
        from zeps.clients import Client
        with Client(args.endpoint, args.stream, timeout=args.connect_timeout,
                    curve=args.curve) as client:
            args.from_seq = max(client.info().last - args.last + 1, 0)
    elif args.from_seq is None and args.from_time is None:
        args.live = True
    return run_subscribe_multicast(args)


def _must_exist(args) -> None:
    """A reader never creates a stream: say so when there is none (a broker older than the
    STREAM-DESCRIBE extension answers INVALID to it: then attach as before)."""
    from zeps.clients import InvalidError, admin
    try:
        admin.describe_stream(args.endpoint, args.stream, timeout=args.connect_timeout,
                              curve=args.curve)
    except admin.NoStream:
        raise UsageError(f"no stream {args.stream!r} at {args.endpoint} (see 'zeps stream "
                         f"list'; publishing to a stream creates it)") from None
    except InvalidError:
        pass
