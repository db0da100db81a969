"""``zeps kv get|put|del|ls|watch|history STREAM ...``: a stream as a key-value store, as
``nats kv`` offers (issue 18 item 4).

The current values come from the broker's last-value index (SNAPSHOT: the stream must be
created with ``zeps stream create --key-index`` or ``--compact``, or the broker run with
``--key-index``); ``watch``
prints them, then every change after the snapshot's sequence (no gap, no duplicate);
``history`` replays one key's messages. A value is a message body; an empty body deletes the
key (a tombstone: ``del``). ``put --ttl S`` publishes a ``ttl`` header: readers (``get``,
``ls``, ``watch``'s current values, :class:`zeps.clients.KVMap`) hide the key once S seconds
passed since it was stored (the broker keeps the message).
Readers (``get``, ``ls``, ``watch``, ``history``) never create a stream; ``put`` and ``del`` do,
as ``zeps publish`` does.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ..protocol.ttl import TTL_HEADER, ttl_text
from .common import (UsageError, _add_common, _add_endpoint, _escape, _key, _positive_int,
                     _seconds, _stream_name, connection_reporter, message_json, messages_upto)


def _ttl(text: str) -> str:
    """``--ttl``: seconds (as the other options take them), as the ``ttl`` header's text."""
    try:
        return ttl_text(_seconds(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(sub) -> None:
    from .common import Parser
    p = sub.add_parser("kv", help="a stream as a key-value store: get, put, del, ls, watch, "
                                  "history",
                       description="A stream as a key-value store (as 'nats kv'): a key's value "
                       "is its latest message's body; an empty body deletes it. The current "
                       "values come from the broker's key index: the stream must have one "
                       "('zeps stream create --key-index' or '--compact') or the broker run "
                       "with --key-index.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                               required=True)

    def action(name, help_, key=True, value=False):
        a = actions.add_parser(name, help=help_)
        a.add_argument("stream", metavar="STREAM", type=_stream_name)
        if key:
            a.add_argument("key", metavar="KEY", type=_key)
        if value:
            a.add_argument("value", metavar="VALUE", nargs="?",
                           help="the value (UTF-8); '-' or absent: stdin, byte for byte")
        _add_endpoint(a)
        _add_common(a)
        a.set_defaults(func=run)
        return a

    g = action("get", "print a key's value (exit 1 if it has none)")
    g.add_argument("--json", action="store_true", help="the whole message as JSON")
    pt = action("put", "set a key's value; prints its sequence", value=True)
    pt.add_argument("--ttl", type=_ttl, metavar="S",
                    help="readers hide the key S seconds after it was stored (a 'ttl' header)")
    action("del", "delete a key (a tombstone); prints its sequence")
    ls = action("ls", "list the keys (under PREFIX) with a value", key=False)
    ls.add_argument("prefix", metavar="PREFIX", nargs="?", default="", type=_key)
    ls.add_argument("--values", action="store_true", help="print 'KEY VALUE' lines")
    ls.add_argument("--json", action="store_true", help="one JSON message per key and line")
    w = action("watch", "print the current values, then every change", key=False)
    w.add_argument("prefix", metavar="PREFIX", nargs="?", default="", type=_key)
    w.add_argument("--no-current", action="store_true",
                   help="only the changes after now, not the current values")
    w.add_argument("--count", type=_positive_int, metavar="N", help="stop after N lines")
    w.add_argument("--json", action="store_true", help="one JSON message per line")
    h = action("history", "every message of one key still in the stream, in order")
    h.add_argument("--json", action="store_true", help="one JSON message per line")


def _client(args, publisher: bool = False):
    from zeps.clients import Client
    return Client(args.endpoint, args.stream, confirms=publisher, timeout=args.connect_timeout,
                  curve=args.curve, create=publisher, on_connection=connection_reporter(args))


def _asked(prefix: str) -> str:
    """The prefix to ask the broker for ``prefix``: a key starting with ``~`` is a regular
    expression to the broker (SNAPSHOT refuses one, SUBSCRIBE matches by it), so such a key or
    prefix is read from the whole stream's, filtered here (it could be written, not read)."""
    return "" if prefix.startswith("~") else prefix


def alive(msg, now: float) -> bool:
    """Is ``msg`` (a current value) still shown at ``now`` (seconds since the epoch)? Not once
    its ``ttl`` header's seconds passed since it was stored, as :class:`zeps.clients.KVMap`
    hides it (get, ls and watch printed it on)."""
    from zeps.clients.kv import ttl_of
    ttl = ttl_of(msg)
    return ttl is None or not msg.timestamp or msg.timestamp / 1e9 + ttl > now


def _change(args, msg) -> str:
    if args.json:
        return json.dumps(message_json(args.stream, msg))
    if not msg.body:
        return f"{msg.sequence} DEL {msg.key}"
    return f"{msg.sequence} PUT {msg.key} {_escape(msg.body)}"


def run(args) -> int:
    from zeps.clients.snapshot_io import SnapshotIterator
    out = sys.stdout
    action = args.action
    if action in ("put", "del"):
        if action == "put":
            if args.value is None or args.value == "-":
                body = sys.stdin.buffer.read()
            else:
                body = args.value.encode("utf-8")
            if not body:
                raise UsageError("an empty value is a delete: use 'zeps kv del'")
            headers = {TTL_HEADER: args.ttl} if args.ttl else None
        else:
            body, headers = b"", None
        with _client(args, publisher=True) as c:
            seq = c.publish(args.key, body, headers=headers).result(args.connect_timeout)
        out.write(f"{seq}\n" if seq is not None else "")
        return 0
    opts = {"timeout": args.connect_timeout, "curve": args.curve}
    if action == "get":
        it = iter(SnapshotIterator(args.endpoint, args.stream, _asked(args.key), **opts))
        want = args.key.encode("utf-8")
        msg = next(it, None)                  # the key itself comes first under its prefix
        while msg is not None and msg.key.encode("utf-8") < want:       # (asked from "")
            msg = next(it, None)
        it.close()                            # the rest is not wanted: its socket closes
        if msg is None or msg.key != args.key or not alive(msg, time.time()):
            sys.stderr.write(f"zeps: {args.stream}: no value for key {args.key!r}\n")
            return 1
        if args.json:
            out.write(json.dumps(message_json(args.stream, msg)) + "\n")
        else:
            out.buffer.write(msg.body + b"\n")
        return 0
    if action == "ls":
        now = time.time()
        for msg in SnapshotIterator(args.endpoint, args.stream, _asked(args.prefix), **opts):
            if not alive(msg, now) or not msg.key.startswith(args.prefix):
                continue
            if args.json:
                out.write(json.dumps(message_json(args.stream, msg)) + "\n")
            elif args.values:
                out.write(f"{msg.key} {_escape(msg.body)}\n")
            else:
                out.write(msg.key + "\n")
        return 0
    if action == "watch":
        n = 0
        with _client(args) as c:
            snap = SnapshotIterator(args.endpoint, args.stream, _asked(args.prefix), **opts)
            now = time.time()
            for msg in snap:
                if not args.no_current and alive(msg, now) and msg.key.startswith(args.prefix):
                    out.write(_change(args, msg) + "\n")
                    n += 1
                    if args.count and n >= args.count:
                        return 0
            out.flush()
            for msg in c.subscribe(_asked(args.prefix), from_seq=snap.seq + 1):
                if not msg.key.startswith(args.prefix):
                    continue
                out.write(_change(args, msg) + "\n")
                out.flush()
                n += 1
                if args.count and n >= args.count:
                    return 0
        return 0
    if action == "history":
        with _client(args) as c:
            info = c.info()
            for msg in messages_upto(c, args, info.first, info.last, "history"):
                if msg.key == args.key:
                    out.write(_change(args, msg) + "\n")
        return 0
    raise UsageError(f"unknown action {action!r}")
