"""``zeps publish``: one message, or one per stdin line.

Every message is published with confirms (its receipt says whether the broker stored it): a
line the broker refuses (over its ``--max-message``, not allowed, ...) is reported as
``zeps: line N: reason`` on stderr and the command exits 1; the other lines are published.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from typing import Deque, Iterable, Tuple

from .common import (  # noqa: F401
    _utf8,
    UsageError,
    _add_common,
    _add_endpoint,
    _endpoint,
    _iso,
    _matcher,
    _say,
    _stream_name,
    connection_reporter,
    key_problem,
)

#: Receipts kept before the oldest settled ones are looked at (and let go of).
_KEEP = 10000


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="publish a message, or one message per stdin line",
                       description="Publish BODY (UTF-8) with routing KEY to STREAM. With BODY "
                       "'-', or no BODY and stdin not a terminal, every stdin line is a message "
                       "(without its newline); with --body-file, the whole of a file or of "
                       "stdin is one message, byte for byte. Prints nothing on success, except "
                       "the last sequence with --confirm. A line the broker refuses is reported "
                       "as 'line N: reason' on stderr (exit status 1); the others are published.")
    p.add_argument("stream", metavar="STREAM", type=_stream_name)
    p.add_argument("key", metavar="KEY", nargs="?",
                   help="the routing key (not with --key-separator / --key-field)")
    p.add_argument("body", metavar="BODY", nargs="?")
    p.add_argument("--confirm", action="store_true",
                   help="wait until the broker says the messages are durable; print the last "
                        "sequence")
    p.add_argument("--body-file", metavar="FILE",
                   help="publish the whole of FILE ('-': stdin) as one message, its bytes as "
                        "they are (binary is fine; no line splitting)")
    k = p.add_mutually_exclusive_group()
    k.add_argument("--key-separator", metavar="SEP", type=_key_separator,
                   help="each stdin line is KEY<SEP>BODY (Kafka's parse.key / key.separator)")
    k.add_argument("--key-field", metavar="NAME",
                   help="each stdin line is a JSON object; the key is its field NAME and the "
                        "body the whole line")
    _add_endpoint(p)
    _add_common(p)
    p.set_defaults(func=cmd_publish)


def _check_key(key: str, where: str = "KEY") -> str:
    why = key_problem(key, where)
    if why is not None:
        raise UsageError(why)
    return key


def _lines():
    for line in sys.stdin.buffer:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


def _read_body(path: str) -> bytes:
    """The whole of ``path`` (``-``: stdin) as bytes (``--body-file``)."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None


def _key_separator(text: str) -> str:
    """``--key-separator``: some UTF-8 (an empty or undecodable one was a traceback after the
    stream was made; found by review)."""
    if not text:
        raise argparse.ArgumentTypeError("the key separator is empty")
    _utf8(text, "key separator")
    return text


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
    if args.body_file is not None:
        if keyed or args.body is not None or args.key is None:
            raise UsageError("--body-file FILE is the body of one message: give STREAM KEY and "
                             "no BODY (nor --key-separator / --key-field)")
        items: Iterable[Tuple[str, bytes]] = [(_check_key(args.key), _read_body(args.body_file))]
    elif keyed:
        if args.body is not None or args.key not in (None, "-"):
            raise UsageError("with --key-separator or --key-field the messages come from stdin: "
                             "give no KEY or BODY (or '-')")
        items = _keyed(args)
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
    # create=True: a publisher creates its stream at once (a refusal -- --auto-create no, an
    # ACL without the right to publish -- is said before anything is read from stdin)
    with Client(args.endpoint, args.stream, confirms=True, timeout=args.connect_timeout,
                curve=args.curve, create=True,
                on_connection=connection_reporter(args)) as client:
        n, failed, last = _publish_all(client, items)
        if args.confirm and n > len(failed):
            print(last)                    # the last confirmed sequence
        elif args.confirm and n == 0:
            print(0)                       # nothing to publish: nothing is stored
    for line, err in failed:
        print(f"zeps: line {line}: {getattr(err, 'reason', err)}" if n > 1 else f"zeps: error: {err}",
              file=sys.stderr)
    _say(args, f"published {n - len(failed)} message(s) to stream {args.stream!r} at "
               f"{args.endpoint}" + (f"; {len(failed)} refused" if failed else ""))
    return 1 if failed else 0


def _publish_all(client, items: Iterable[Tuple[str, bytes]]) -> Tuple[int, list, int]:
    """Publish ``items`` (numbered from 1, the stdin lines) and wait for every confirm. Returns
    how many were published, ``(line, InvalidError)`` of each the broker refused, and the last
    confirmed sequence. A refusal raised by a later publish (the client's way of saying it) is
    read from the receipts, and that later message is published again."""
    from zeps.clients import InvalidError

    pending: Deque = deque()           # (line, receipt), oldest first
    failed: list = []
    n = 0
    for n, (key, body) in enumerate(items, 1):
        receipt = None
        while True:
            try:
                receipt = client.publish(key, body)
                break
            except InvalidError:
                _settle(pending, failed, everything=True)
            except ValueError as e:    # over what the broker reads at all: not sent (it was a
                failed.append((n, e))  # traceback, and the lines after it were not published)
                break
        if receipt is None:
            continue
        pending.append((n, receipt))
        if len(pending) > _KEEP:
            _settle(pending, failed)
    while True:
        try:
            last = client.wait_for_confirms()
            break
        except InvalidError:
            continue
    _settle(pending, failed, everything=True)
    failed.sort(key=lambda f: f[0])
    return n, failed, last


def _settle(pending: Deque, failed: list, everything: bool = False) -> None:
    """Move the refusals among settled receipts to ``failed``: the oldest settled ones (all of
    them with ``everything``), letting go of the receipts."""
    keep: Deque = deque()
    while pending:
        line, receipt = pending.popleft()
        if not receipt.done():
            if not everything:
                pending.appendleft((line, receipt))
                break
            keep.append((line, receipt))
            continue
        err = receipt.exception()
        if err is not None:
            failed.append((line, err))
    keep.extend(pending)
    pending.clear()
    pending.extend(keep)
