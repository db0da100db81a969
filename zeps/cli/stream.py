"""``zeps stream create | info | list | purge | delete``: stream administration through a broker."""
from __future__ import annotations

import json
import sys

from zeps import units

from .common import (MAX_NUMBER, UsageError, _add_common, _add_endpoint, _iso, _seq,
                     _stream_name)


def _size(text: str) -> int:
    import argparse
    try:
        value = units.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value > MAX_NUMBER:                 # the wire's u64 (a codec traceback)
        raise argparse.ArgumentTypeError(f"{text!r} is more than 2^64-1 bytes")
    return value


def _duration(text: str) -> float:
    import argparse
    try:
        value = units.parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not value * 1000 <= MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"{text!r} is more than 2^64-1 milliseconds")
    return value


def _ratio(text: str) -> float:
    import argparse
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a ratio from 0 to 1 (e.g. 0.5), not {text!r}")
    return value


def add_parser(sub) -> None:
    from .common import Parser
    p = sub.add_parser("stream", help="create, describe, list, purge and delete streams",
                       description="Stream administration. A stream made by 'create' keeps its "
                       "own settings (0 or absent: the broker's defaults); readers never create "
                       "streams ('zeps subscribe typo' says there is no such stream); publishers "
                       "create them on first use unless the broker runs with --auto-create no.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                               required=True)
    c = actions.add_parser("create", help="create a stream with its own settings")
    c.add_argument("stream", metavar="STREAM", type=_stream_name)
    c.add_argument("--retention-bytes", type=_size, default=0, metavar="SIZE",
                   help="keep at most this many bytes (whole old segments are deleted)")
    c.add_argument("--retention-age", type=_duration, default=0, metavar="DURATION",
                   help="delete segments whose newest message is older (e.g. 7d)")
    c.add_argument("--max-message", type=_size, default=0, metavar="SIZE",
                   help="largest message body (at most the broker's --max-message)")
    c.add_argument("--segment-bytes", type=_size, default=0, metavar="SIZE",
                   help="segment size (the unit retention deletes)")
    c.add_argument("--compact", action="store_true",
                   help="a compacted stream: the broker keeps at least the latest message of "
                        "every key and removes those a later one superseded (a replay skips "
                        "their sequences)")
    c.add_argument("--delete-retention", type=_duration, default=0, metavar="DURATION",
                   help="with --compact: how long a tombstone (an empty body) is kept "
                        "(default 1d)")
    c.add_argument("--min-dirty-ratio", type=_ratio, default=0, metavar="RATIO",
                   help="with --compact: compact once the bytes written since the last "
                        "compaction are this share of the sealed segments (0-1, default 0.5)")
    c.add_argument("--key-index", action="store_true",
                   help="keep the last-value index (for snapshots, 'zeps kv' and a --chp front "
                        "end) on a stream that keeps every message; a compacted stream always "
                        "has one")
    i = actions.add_parser("info", help="a stream's state and settings")
    i.add_argument("stream", metavar="STREAM", type=_stream_name)
    i.add_argument("--json", action="store_true",
                   help="one JSON object: 'settings' the stream's own (null: the broker's "
                        "default), 'in_force' what applies (null: no limit)")
    ls = actions.add_parser("list", help="the streams and their state")
    ls.add_argument("--json", action="store_true", help="one JSON object per stream and line")
    pg = actions.add_parser("purge", help="drop a stream's messages up to a sequence")
    pg.add_argument("stream", metavar="STREAM", type=_stream_name)
    pg.add_argument("--upto", type=_seq, required=True, metavar="N",
                    help="drop messages 1..N of those the stream holds now (never served "
                         "again; whole segments deleted); messages published later are kept")
    pg.add_argument("--yes", action="store_true",
                    help="really: required when N is at or past the stream's last message "
                         "(every message it holds is dropped)")
    d = actions.add_parser("delete", help="delete a stream and all its messages")
    d.add_argument("stream", metavar="STREAM", type=_stream_name)
    d.add_argument("--yes", action="store_true", help="really (required)")
    for q in (c, i, ls, pg, d):
        _add_endpoint(q)
        _add_common(q)
        q.set_defaults(func=cmd_stream)


def _settings(d) -> dict:
    """A description's settings by their CLI names (None for 0)."""
    return {"retention_bytes": d.retention_bytes or None,
            "retention_age_s": d.retention_ms / 1000 if d.retention_ms else None,
            "max_message": d.max_message or None,
            "segment_bytes": d.segment_bytes or None}


def _describe_json(d, defaults=None) -> dict:
    """``settings``: the stream's own (None: the broker's default); ``in_force``: what applies,
    its own or the broker's (None: no limit), or None if the broker cannot say its defaults."""
    own = _settings(d)
    in_force = None
    if defaults is not None:
        base = _settings(defaults)
        in_force = {k: v if v is not None else base[k] for k, v in own.items()}
    return {"stream": d.stream, "first": d.first, "last": d.last, "messages": d.count,
            "size": d.size, "oldest_time": _iso(d.oldest), "newest_time": _iso(d.newest),
            "settings": own, "in_force": in_force}


def _defaults(ep, t, curve):
    """The broker's defaults (``admin.describe_defaults``); None from a broker too old to say."""
    from zeps.clients import InvalidError, admin
    try:
        return admin.describe_defaults(ep, timeout=t, curve=curve)
    except InvalidError:
        return None


def _compaction(ep, stream, t, curve):
    """A compacted stream's settings, or a key-indexed one's (None: neither, or a broker too old
    to say)."""
    from zeps.clients import admin
    try:
        own = admin.stream_settings(ep, stream, timeout=t, curve=curve)
    except admin.Unsupported:
        return None
    if not own.compact:
        return {"compact": False, "key_index": True} if own.key_index else None
    return {"compact": True, "key_index": own.key_index,
            "delete_retention_s": (own.delete_retention_ms or 86_400_000) / 1000,
            "min_dirty_ratio": own.min_dirty_ratio or 0.5}


def _number(v) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def cmd_stream(args) -> int:
    from zeps.clients import admin, list_streams

    ep, t = args.endpoint, args.connect_timeout
    if args.action == "create":
        if not args.compact and (args.delete_retention or args.min_dirty_ratio):
            raise UsageError("--delete-retention and --min-dirty-ratio are settings of a "
                             "compacted stream: add --compact")
        try:
            admin.create_stream(ep, args.stream, retention_bytes=args.retention_bytes,
                                retention_age=args.retention_age, max_message=args.max_message,
                                segment_bytes=args.segment_bytes, compact=args.compact,
                                key_index=args.key_index, delete_retention=args.delete_retention,
                                min_dirty_ratio=args.min_dirty_ratio, timeout=t,
                                curve=args.curve)
        except admin.Unsupported as e:
            raise UsageError(f"the broker at {ep} cannot make a compacted or key-indexed stream "
                             f"(it predates them): {e.reason}") from None
        return 0
    if args.action == "info":
        d = admin.describe_stream(ep, args.stream, timeout=t, curve=args.curve)
        obj = _describe_json(d, _defaults(ep, t, args.curve))
        obj["compaction"] = _compaction(ep, args.stream, t, args.curve)
        if args.json:
            print(json.dumps(obj))
            return 0
        in_force = obj.pop("in_force")
        compaction = obj.pop("compaction")
        obj["settings"].update(compaction or {"compact": False})
        for k, v in obj.items():
            if k != "settings":
                print(f"{k:16} {v if v is not None else '-'}")
                continue
            for sk, sv in v.items():        # its own value, else the broker's (and says so)
                if isinstance(sv, bool):
                    shown = "yes" if sv else "no"
                elif sv is not None:
                    shown = _number(sv)
                elif in_force is None:
                    shown = "(broker default)"
                else:
                    shown = (f"{_number(in_force[sk]) if in_force[sk] is not None else 'none'}"
                             " (broker default)")
                print(f"{sk:16} {shown}")
        return 0
    if args.action == "list":
        from zeps.clients import InvalidError
        defaults = _defaults(ep, t, args.curve) if args.json else None
        status = 0
        for name in list_streams(ep, timeout=t, curve=args.curve):
            try:
                d = admin.describe_stream(ep, name, timeout=t, curve=args.curve)
            except InvalidError as e:        # this stream's (damaged): the others are listed
                print(f"zeps: stream {name!r}: {e.reason}", file=sys.stderr)
                status = 1
                continue
            if args.json:
                print(json.dumps(_describe_json(d, defaults)))
            else:
                print(f"{name}  {d.count} messages  {d.first}..{d.last}")
        return status
    if args.action == "purge":
        d = admin.describe_stream(ep, args.stream, timeout=t, curve=args.curve)
        if d.count and args.upto >= d.last and not args.yes:
            raise UsageError(f"purging stream {args.stream!r} up to {args.upto} drops every "
                             f"message it holds ({d.first}..{d.last}): add --yes")
        first = admin.purge_stream(ep, args.stream, args.upto, timeout=t, curve=args.curve)
        print(f"stream {args.stream!r}: messages up to {min(args.upto, first - 1)} purged; the "
              f"first kept is now {first}")
        return 0
    if not args.yes:
        raise UsageError(f"deleting stream {args.stream!r} removes all its messages: add --yes")
    admin.delete_stream(ep, args.stream, timeout=t, curve=args.curve)
    return 0
