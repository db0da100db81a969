"""``zeps publish``: one message, or one per stdin line."""
from __future__ import annotations

import json
import sys
from typing import Iterable, Tuple

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
    p.add_argument("key", metavar="KEY", nargs="?",
                   help="the routing key (not with --key-separator / --key-field)")
    p.add_argument("body", metavar="BODY", nargs="?")
    p.add_argument("--confirm", action="store_true",
                   help="wait until the broker says the messages are durable; print the last "
                        "sequence")
    k = p.add_mutually_exclusive_group()
    k.add_argument("--key-separator", metavar="SEP",
                   help="each stdin line is KEY<SEP>BODY (Kafka's parse.key / key.separator)")
    k.add_argument("--key-field", metavar="NAME",
                   help="each stdin line is a JSON object; the key is its field NAME and the "
                        "body the whole line")
    _add_endpoint(p)
    _add_common(p)
    p.set_defaults(func=cmd_publish)


def _check_key(key: str, where: str = "KEY") -> str:
    try:
        if len(key.encode("utf-8")) > 255:
            raise UsageError(f"{where} longer than 255 bytes: {key[:40]!r}...")
    except UnicodeEncodeError:
        raise UsageError(f"{where} is not valid UTF-8: {key!r}") from None
    return key


def _lines():
    for line in sys.stdin.buffer:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


def _keyed(args) -> Iterable[Tuple[str, bytes]]:
    """(key, body) per stdin line, the key taken from the line itself."""
    sep = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    for n, line in enumerate(_lines(), 1):
        if sep is not None:
            key, found, body = line.partition(sep)
            if not found:
                raise UsageError(f"line {n}: no key separator {args.key_separator!r}")
        else:
            try:
                obj = json.loads(line)
                key = obj[args.key_field]
            except (ValueError, UnicodeDecodeError):
                raise UsageError(f"line {n}: not a JSON object") from None
            except (KeyError, TypeError):
                raise UsageError(f"line {n}: no field {args.key_field!r}") from None
            if not isinstance(key, str):
                key = json.dumps(key)
            body = line
        if isinstance(key, bytes):
            try:
                key = key.decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"line {n}: the key is not valid UTF-8") from None
        yield _check_key(key, f"line {n}: the key"), body


def cmd_publish(args) -> int:
    from zeps.clients import Client

    keyed = args.key_separator is not None or args.key_field is not None
    if keyed:
        if args.body is not None or args.key not in (None, "-"):
            raise UsageError("with --key-separator or --key-field the messages come from stdin: "
                             "give no KEY or BODY (or '-')")
        items: Iterable[Tuple[str, bytes]] = _keyed(args)
    else:
        if args.key is None:
            raise UsageError("KEY is required (or --key-separator / --key-field with stdin)")
        key = _check_key(args.key)
        if args.body is None or args.body == "-":
            if args.body is None and sys.stdin.isatty():
                raise UsageError("no BODY given and stdin is a terminal: give a BODY, or '-' "
                                 "to read one message per line from stdin")
            items = ((key, body) for body in _lines())
        else:
            try:
                items = [(key, args.body.encode("utf-8"))]
            except UnicodeEncodeError:
                items = [(key, args.body.encode("utf-8", "surrogateescape"))]
    if keyed and sys.stdin.isatty():
        raise UsageError("--key-separator / --key-field read stdin, which is a terminal")
    with Client(args.endpoint, args.stream, confirms=args.confirm,
                timeout=args.connect_timeout) as client:
        n = client.publish_batch(items)
        if args.confirm:
            last = client.wait_for_confirms()
            print(last if n else 0)
    _say(args, f"published {n} message(s) to stream {args.stream!r} at {args.endpoint}")
    return 0
