"""``zeps publish``: one message, or one per stdin line."""
from __future__ import annotations

import sys
from typing import Iterable

from .common import (  # noqa: F401
    UsageError,
    _add_common,
    _add_endpoint,
    _endpoint,
    _iso,
    _matcher,
    _say,
    _stream_name,
)


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="publish a message, or one message per stdin line",
                       description="Publish BODY (UTF-8) with routing KEY to STREAM. With BODY "
                       "'-', or no BODY and stdin not a terminal, every stdin line is a message "
                       "(without its newline). Prints nothing on success, except the last "
                       "sequence with --confirm.")
    p.add_argument("stream", metavar="STREAM", type=_stream_name)
    p.add_argument("key", metavar="KEY")
    p.add_argument("body", metavar="BODY", nargs="?")
    p.add_argument("--confirm", action="store_true",
                   help="wait until the broker says the messages are durable; print the last "
                        "sequence")
    _add_endpoint(p)
    _add_common(p)
    p.set_defaults(func=cmd_publish, interrupt_rc=130)


def cmd_publish(args) -> int:
    from zeps.clients import Client

    try:
        if len(args.key.encode("utf-8")) > 255:
            raise UsageError(f"KEY longer than 255 bytes: {args.key[:40]!r}...")
    except UnicodeEncodeError:
        raise UsageError(f"KEY is not valid UTF-8: {args.key!r}") from None
    if args.body is None or args.body == "-":
        if args.body is None and sys.stdin.isatty():
            raise UsageError("no BODY given and stdin is a terminal: give a BODY, or '-' to "
                             "read one message per line from stdin")

        def bodies():
            for line in sys.stdin.buffer:
                if line.endswith(b"\n"):
                    line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
                yield line
        source: Iterable[bytes] = bodies()
    else:
        try:
            source = [args.body.encode("utf-8")]
        except UnicodeEncodeError:
            source = [args.body.encode("utf-8", "surrogateescape")]
    key = args.key
    with Client(args.endpoint, args.stream, confirms=args.confirm,
                timeout=args.connect_timeout) as client:
        n = client.publish_batch((key, body) for body in source)
        if args.confirm:
            last = client.wait_for_confirms()
            if n:
                print(last)
            else:
                print(0)
    _say(args, f"published {n} message(s) to stream {args.stream!r} at {args.endpoint}")
    return 0


