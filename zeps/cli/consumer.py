"""``zeps consumer add|info|ls|rm STREAM ...`` and ``zeps consume STREAM NAME``: durable
consumers (issue 19, docs/consumers.md).

A consumer is a named reader of one stream that the broker remembers (its patterns, where it
starts, how it acknowledges, how far it got). ``zeps consume`` joins one as a member: it prints
the messages it is given as ``zeps subscribe`` does and acknowledges each once printed (unless
``--no-ack``, or the consumer acknowledges on delivery: ``--ack none``); several ``zeps
consume`` of one consumer share its messages. Every command needs the stream to exist (exit 2
otherwise) and the right to subscribe to it.
"""
from __future__ import annotations

import json
import sys

from zeps.units import TIME_FORMS

from .common import (UsageError, _add_common, _add_endpoint, _int_upto, _iso, _pattern,
                     _positive_int, _say, _seconds, _seconds_upto, _seq, _stream_name,
                     connection_reporter, message_printer, parse_time)

_ACK_NAMES = {0: "explicit", 1: "all", 2: "none"}
_START_NAMES = {0: "all", 1: "sequence", 2: "time", 3: "new"}


def _name(text: str) -> str:
    import argparse

    from zeps.protocol.consumer import bad_consumer_name
    why = bad_consumer_name(text)
    if why:
        raise argparse.ArgumentTypeError(f"bad consumer name {text!r}: {why}")
    return text


def _count(text: str) -> int:
    import argparse
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return v


def _pending(text: str) -> int:
    import argparse
    v = _positive_int(text)
    if v > 65_536:
        raise argparse.ArgumentTypeError(f"at most 65536: {text!r}")
    return v


def add_parser(sub) -> None:
    from .common import Parser
    p = sub.add_parser("consumer", help="durable consumers: add, info, ls, rm",
                       description="Durable consumers of a stream: the broker remembers each "
                       "one's position and shares its messages among the clients that join "
                       "it ('zeps consume'). See docs/consumers.md.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                               required=True)
    a = actions.add_parser("add", help="create a consumer (the same settings again: nothing "
                                       "changes); prints its first sequence")
    a.add_argument("stream", metavar="STREAM", type=_stream_name)
    a.add_argument("name", metavar="NAME", type=_name)
    a.add_argument("--pattern", action="append", type=_pattern, metavar="P", dest="patterns",
                   help="only keys matching P (a prefix, or ~regex); repeat for several "
                        "(default: every key)")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--from", type=_seq, metavar="SEQ", dest="from_seq",
                   help="start at sequence SEQ (default: the first message kept)")
    g.add_argument("--since", type=parse_time, metavar="TIME",
                   help=f"start at the first message at or after TIME ({TIME_FORMS})")
    g.add_argument("--new", action="store_true",
                   help="only messages published after the consumer is made")
    a.add_argument("--ack", choices=("explicit", "all", "none"), default="explicit",
                   help="explicit: each message; all: an ack covers every earlier one the "
                        "member holds; none: acknowledged when handed out (default explicit)")
    a.add_argument("--ack-wait", type=_seconds_upto((2**32 - 1) / 1000), default=30.0,
                   metavar="S",                     # the wire's field (the broker takes a day)
                   help="a message not acknowledged S seconds after it was handed out is "
                        "given again (default 30)")
    a.add_argument("--max-deliver", type=_int_upto((1 << 32) - 1, _count), default=0, metavar="N",
                   help="after N deliveries an unacknowledged message goes to the dead-letter "
                        "stream (0: no limit, the default)")
    a.add_argument("--max-ack-pending", type=_pending, default=1000, metavar="N",
                   help="the most unacknowledged messages one member holds (default 1000)")
    a.add_argument("--dead-letter", type=_stream_name, metavar="STREAM",
                   help="where messages go after --max-deliver (default: dropped, counted)")
    a.add_argument("--key-order", action="store_true",
                   help="a key's messages go to one member at a time, in order")
    i = actions.add_parser("info", help="a consumer's settings and state")
    i.add_argument("stream", metavar="STREAM", type=_stream_name)
    i.add_argument("name", metavar="NAME", type=_name)
    i.add_argument("--json", action="store_true", help="the broker's JSON object")
    ls = actions.add_parser("ls", help="the stream's consumers")
    ls.add_argument("stream", metavar="STREAM", type=_stream_name)
    ls.add_argument("--json", action="store_true",
                    help="one JSON object (as 'info --json') per consumer and line")
    rm = actions.add_parser("rm", help="delete a consumer and its position")
    rm.add_argument("stream", metavar="STREAM", type=_stream_name)
    rm.add_argument("name", metavar="NAME", type=_name)
    for q in (a, i, ls, rm):
        _add_endpoint(q)
        _add_common(q)
        q.set_defaults(func=cmd_consumer)

    c = sub.add_parser("consume", help="print a durable consumer's messages, acknowledging "
                                       "each",
                       description="Join consumer NAME of STREAM ('zeps consumer add') and print "
                       "the messages it is given as 'SEQ KEY BODY' lines or JSON lines, "
                       "acknowledging each once printed. Several 'zeps consume' of one consumer "
                       "share its messages; a message not acknowledged is given again.")
    c.add_argument("stream", metavar="STREAM", type=_stream_name)
    c.add_argument("name", metavar="NAME", type=_name)
    c.add_argument("--count", type=_positive_int, metavar="N", help="stop after N messages")
    c.add_argument("--no-ack", action="store_true",
                   help="do not acknowledge (the messages are given again after the ack wait "
                        "or once this command ends)")
    c.add_argument("--json", action="store_true", help="print JSON lines")
    c.add_argument("--timeout", type=_seconds, metavar="S",
                   help="stop after S seconds without a message")
    _add_endpoint(c)
    _add_common(c)
    c.set_defaults(func=cmd_consume)


def _client(args):
    from zeps.clients import Client
    return Client(args.endpoint, args.stream, timeout=args.connect_timeout, curve=args.curve,
                  on_connection=connection_reporter(args))


def _no_stream(args, e) -> UsageError:
    return UsageError(f"no stream {args.stream!r} at {args.endpoint} (see 'zeps stream list')")


def _table(info: dict) -> None:
    cfg = dict(info.get("config", {}))
    rows = [("name", info.get("name")), ("stream", info.get("stream"))]
    start = _START_NAMES.get(cfg.get("start"), cfg.get("start"))
    value = cfg.get("start_value", 0)
    if start == "sequence":
        start = f"sequence {value}"
    elif start == "time":
        start = f"time {_iso(value)}"
    rows += [("patterns", " ".join(repr(p) for p in cfg.get("patterns", []))),
             ("start", start), ("ack", _ACK_NAMES.get(cfg.get("ack"), cfg.get("ack"))),
             ("ack_wait_s", cfg.get("ack_wait_ms", 0) / 1000),
             ("max_deliver", cfg.get("max_deliver") or "no limit"),
             ("max_ack_pending", cfg.get("max_ack_pending")),
             ("dead_letter", cfg.get("dead_letter") or "-"),
             ("key_order", "yes" if cfg.get("flags", 0) & 1 else "no")]
    shown = {"name", "stream", "config"}
    rows += [(k, v) for k, v in info.items() if k not in shown]
    for k, v in rows:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        print(f"{k:16} {v if v is not None else '-'}")


def cmd_consumer(args) -> int:
    from zeps.clients import NoStream
    try:
        with _client(args) as c:
            return _run(args, c)
    except NoStream as e:
        raise _no_stream(args, e) from None


def _run(args, c) -> int:
    if args.action == "add":
        start = None
        if args.from_seq is not None:
            start = args.from_seq
        elif args.since is not None:
            start = args.since / 1e9
        elif args.new:
            start = "new"
        first = c.add_consumer(args.name, tuple(args.patterns or ("",)), start=start,
                               ack=args.ack, ack_wait=args.ack_wait,
                               max_deliver=args.max_deliver,
                               max_ack_pending=args.max_ack_pending,
                               dead_letter=args.dead_letter or "", key_order=args.key_order)
        print(first)
        return 0
    if args.action == "info":
        info = c.consumer_info(args.name)
        if args.json:
            print(json.dumps(info))
        else:
            _table(info)
        return 0
    if args.action == "ls":
        for name in c.consumers():
            if args.json:
                print(json.dumps(c.consumer_info(name)))
            else:
                print(name)
        return 0
    c.delete_consumer(args.name)
    _say(args, f"consumer {args.name!r} of stream {args.stream!r} deleted")
    return 0


def cmd_consume(args) -> int:
    from zeps.clients import NoStream
    out = sys.stdout
    fmt = message_printer(args.stream, args.json)
    n = 0
    try:
        with _client(args) as c:
            ack = not args.no_ack and c.consumer_info(args.name).get(
                "config", {}).get("ack") != 2          # "none": acknowledged when given
            with c.consume(args.name) as msgs:
                try:
                    while args.count is None or n < args.count:
                        if not msgs.member.buffered:
                            out.flush()
                        m = msgs.poll(args.timeout)
                        if m is None:
                            _say(args, f"no message for {args.timeout:g}s: stopping")
                            break
                        try:
                            out.write(fmt(m) + "\n")
                        except KeyboardInterrupt:    # a line-buffered stdout printed it first
                            if ack:
                                m.ack()
                            raise
                        if ack:
                            m.ack()
                        n += 1
                    out.flush()
                except KeyboardInterrupt:
                    out.flush()
                    msgs.close(timeout=1.0)
                    _say(args, f"interrupted after {n} message(s)")
                    raise
    except NoStream as e:
        raise _no_stream(args, e) from None
    _say(args, f"{n} message(s)")
    return 0
