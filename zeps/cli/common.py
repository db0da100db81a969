"""What every ``zeps`` command shares: the argument parser class, argument types, output helpers."""
from __future__ import annotations

import argparse
import base64
import codecs
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from zeps import units
from zeps.units import DEFAULT_ENDPOINT


class UsageError(Exception):
    """A bad argument found after parsing (exit status 2)."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr and exit status 2 (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"zeps: error: {message}\n")
        sys.exit(2)


# --------------------------------------------------------------------------- argument types

#: The largest number the wire carries (``number-8``): sequences, times in ns.
MAX_NUMBER = (1 << 64) - 1


def parse_time(text: str, now_ns: Optional[int] = None) -> int:
    """A time argument -> ns since the epoch (forms: :data:`zeps.units.TIME_FORMS`), within
    what the wire carries (a traceback at the codec otherwise: epoch milliseconds given as
    seconds are past the year 2554)."""
    try:
        v = units.parse_time(text, now_ns)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 <= v <= MAX_NUMBER:
        raise argparse.ArgumentTypeError(
            f"time {text!r} is out of range: from 1970 to the year 2554 (a bare number is "
            f"seconds since the epoch; milliseconds take the unit: {text}ms)")
    return v


def _endpoint(text: str) -> str:
    from zeps.units import check_endpoint
    try:
        return check_endpoint(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seq(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a sequence number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"sequence must be >= 0: {text!r}")
    if v > MAX_NUMBER:                 # (the codec's traceback otherwise)
        raise argparse.ArgumentTypeError(f"sequence must be at most 2^64-1: {text[:40]!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than zero: {text!r}")
    return v


#: The longest time in seconds an option takes (about 115 days): a finite wait that
#: time.sleep and the sockets' timeouts can hold.
MAX_SECONDS = 10_000_000


def _seconds(text: str, most: float = MAX_SECONDS) -> float:
    """Seconds: a duration as every option takes one (``500ms``, ``30s``, ``1m``, ``2h``:
    :func:`zeps.units.parse_duration`; ``1m`` was refused here and ``1ss`` taken for 1 s; found
    by review), or a number as Python writes one (``.5``, ``1e-3``)."""
    try:
        v = units.parse_duration(text)
    except ValueError:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be more than zero seconds: {text!r}")
    if not v <= most:                                # inf too
        raise argparse.ArgumentTypeError(f"must be at most {most:g} seconds: {text!r}")
    return v


def _seconds_upto(most: float):
    """An option's type: seconds (as :func:`_seconds`), at most ``most``."""
    def parse(text: str) -> float:
        return _seconds(text, most)
    return parse


def _int_upto(most: int, least: Optional[Callable[[str], int]] = None):
    """An option's type: a whole number from 1 (or as ``least`` parses it: its own lower
    bound) to ``most``."""
    def parse(text: str) -> int:
        v = (least or _positive_int)(text)
        if v > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}: {text!r}")
        return v
    return parse


def _separator(text: str) -> bytes:
    try:
        return codecs.escape_decode(text.encode("utf-8"))[0]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad --raw-separator {text!r}: {e}") from None


def _utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8; an argument that is not (bytes that do not decode reach Python as
    lone surrogates, which no encoder takes: a traceback where they were sent) is a usage
    error."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape")[:40]
        raise argparse.ArgumentTypeError(f"{what} {shown!r} is not valid UTF-8") from None


def _stream_name(text: str) -> str:
    raw = _utf8(text, "stream name")
    if not text or len(raw) > 255 or "\x00" in text:
        raise argparse.ArgumentTypeError(f"bad stream name {text!r}: 1 to 255 bytes, no NUL")
    return text


def key_problem(text: str, what: str = "key") -> Optional[str]:
    """Why ``text`` is no routing key (at most 255 bytes of UTF-8), or None."""
    try:
        raw = _utf8(text, what)
    except argparse.ArgumentTypeError as e:
        return str(e)
    return f"{what} longer than 255 bytes: {text[:40]!r}..." if len(raw) > 255 else None


def _key(text: str) -> str:
    """A routing key argument (:func:`key_problem`)."""
    why = key_problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def _pattern(text: str) -> str:
    if len(_utf8(text, "pattern")) > 255:
        raise argparse.ArgumentTypeError(f"pattern longer than 255 bytes: {text[:40]!r}...")
    from zeps.matching import PatternError, compile_pattern
    try:
        compile_pattern(text)
    except PatternError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def monitor_address(text: str) -> Tuple[str, int]:
    """A monitoring address as ``zeps broker --monitor`` and ``zeps top --monitor`` both take
    it: ``PORT`` (on 127.0.0.1), ``HOST:PORT``, ``[IPv6]:PORT`` or ``http://HOST:PORT[/]`` ->
    (host, port). ValueError with a one-line reason otherwise."""
    t = text.strip()
    scheme, sep, rest = t.partition("://")
    if sep:
        if scheme.lower() != "http":
            raise ValueError(f"the monitoring port speaks plain HTTP: {text!r} (use "
                             "http://HOST:PORT, HOST:PORT or PORT)")
        t = rest[:-1] if rest.endswith("/") else rest
        if "/" in t:
            raise ValueError(f"a monitoring address has no path: {text!r}")
    return units.parse_address(t)


def _env_timeout() -> float:
    """``$ZEPS_TIMEOUT``, the default ``--connect-timeout``: 10 unless it is a number of
    seconds ``--connect-timeout`` takes (``inf`` was a traceback in every command)."""
    try:
        v = float(os.environ.get("ZEPS_TIMEOUT", "10"))
    except ValueError:
        return 10.0
    return v if 0 < v <= MAX_SECONDS else 10.0


def env_endpoint() -> str:
    """``$ZEPS_ENDPOINT``, or the default endpoint; a bad one is a usage error (it was a
    traceback in the commands that read it themselves)."""
    try:
        return _endpoint(os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT))
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"$ZEPS_ENDPOINT: {e}") from None


def _add_endpoint(p: argparse.ArgumentParser, default=True) -> None:
    p.add_argument("--endpoint", type=_endpoint,
                   default=os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT) if default else None,
                   help="broker endpoint (default $ZEPS_ENDPOINT or tcp://127.0.0.1:7470)")


def _add_source(p: argparse.ArgumentParser, broker: str, data_dir: str) -> None:
    """``--endpoint`` or ``--data-dir``, one or the other, of a command that reads a broker or
    a data directory (``broker``, ``data_dir``: what the command does with it). No endpoint
    given and no data directory: the command takes :func:`env_endpoint` when it runs."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--endpoint", type=_endpoint, default=None,
                     help=f"{broker} (default $ZEPS_ENDPOINT or tcp://127.0.0.1:7470)")
    src.add_argument("--data-dir", metavar="D", help=data_dir)


def _add_stream_patterns(p: argparse.ArgumentParser) -> None:
    """STREAM and its keys' PATTERNs (prefixes or ~regexes; none: every key) of a command that
    reads a stream."""
    p.add_argument("stream", metavar="STREAM", type=_stream_name)
    p.add_argument("patterns", metavar="PATTERN", nargs="*", type=_pattern,
                   default=[])          # a default: argparse no longer calls it required


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--connect-timeout", type=_seconds, default=_env_timeout(), metavar="S",
                   help="seconds to wait for the broker (default $ZEPS_TIMEOUT or 10)")
    p.add_argument("-v", "--verbose", action="store_true", help="say what was done, on stderr")
    p.add_argument("--server-key", metavar="FILE",
                   help="CurveZMQ: the broker's public key (default $ZEPS_SERVER_KEY)")
    p.add_argument("--client-key", metavar="FILE",
                   help="CurveZMQ: this client's key pair, a .key_secret file "
                        "(default $ZEPS_CLIENT_KEY)")



# --------------------------------------------------------------------------- output helpers

def _iso(ns: int) -> Optional[str]:
    if not ns:
        return None
    dt = datetime.fromtimestamp(ns // 10**9, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns % 10**9) // 10**6:03d}Z"


def message_json(stream: str, msg) -> dict:
    """The JSON object of one message (``subscribe --json``, ``replay --format json``): the body
    is always in ``body``, as UTF-8 text (``"encoding": "utf8"``) or, when it is not valid
    UTF-8, as base64 (``"encoding": "base64"``); ``time`` is ``timestamp`` (ns) in ISO-8601.
    A message with headers has ``headers``: a list of ``{"name", "value", "encoding"}`` in
    order, each value encoded as a body is (one without headers has no such key)."""
    obj = {"stream": stream, "sequence": msg.sequence, "key": msg.key}
    obj["body"], obj["encoding"] = _text_or_base64(msg.body)
    obj["timestamp"] = msg.timestamp
    obj["time"] = _iso(msg.timestamp) if msg.timestamp else None
    headers = getattr(msg, "headers", ())
    if headers:
        obj["headers"] = [dict(zip(("name", "value", "encoding"), (n, *_text_or_base64(v))))
                          for n, v in headers]
    return obj


def _text_or_base64(raw: bytes):
    """``(text, "utf8")`` or, when ``raw`` is not UTF-8, ``(base64, "base64")``."""
    try:
        return raw.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _escape(body: bytes) -> str:
    """One line of text for any body: UTF-8 with newlines, tabs and backslashes escaped (``\\n``,
    ``\\t``, ``\\\\``), other control characters and bytes that are not UTF-8 as ``\\xNN``."""
    text = body.decode("utf-8", "surrogateescape")
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif 0xDC80 <= o <= 0xDCFF:              # a byte that is not UTF-8
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 32 or o == 127:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


def message_line(msg) -> str:
    """``SEQ KEY BODY`` on one line (the key and the body escaped: see :func:`_escape`; a key
    holding a newline printed a line that looked like another message)."""
    return f"{msg.sequence} {_escape(msg.key.encode('utf-8', 'surrogateescape'))} " \
           f"{_escape(msg.body)}"


def message_printer(stream: str, as_json: bool) -> Callable[..., str]:
    """How a command that prints a stream's messages (``subscribe``, its ``--multicast``,
    ``consume``) writes one, without the newline: its JSON object (:func:`message_json`) with
    ``--json``, else :func:`message_line`."""
    if as_json:
        return lambda m: json.dumps(message_json(stream, m), ensure_ascii=False)
    return message_line


def messages_upto(client, args, first: int, last: int, what: str):
    """The messages of ``client``'s stream from ``first`` to ``last`` (a generator), every key:
    the caller filters them. Subscribed with a pattern, no message after the last one it
    matches comes to say that ``last`` was passed, and the command would wait for ever (as
    ``zeps kv history`` did). :class:`~zeps.clients.ZepsTimeout` naming ``what`` if no message
    comes for 30 s (or ``--connect-timeout``, if longer).

    ``first`` must not be below the stream's first kept message (``client.info().first``):
    when a purge or retention deleted every message up to ``last``, none would come at all."""
    from zeps.clients import ZepsTimeout
    if first > last:
        return
    sub = client.subscribe("", from_seq=first)
    idle = max(30.0, args.connect_timeout)
    seq = first - 1
    while seq < last:
        try:
            msg = sub.next(timeout=idle)
        except ZepsTimeout:
            raise ZepsTimeout(f"{what} stalled at sequence {seq}: no message from "
                              f"{args.endpoint} for {idle:g}s") from None
        if msg.sequence > last:
            return
        seq = msg.sequence
        yield msg


def _matcher(patterns: List[str]) -> Callable[[str], bool]:
    if not patterns or "" in patterns:
        return lambda key: True
    from zeps.matching import compile_pattern
    checks = [compile_pattern(p, timeout=1.0).matches for p in patterns]
    return lambda key: any(ch(key) for ch in checks)


def _say(args, text: str) -> None:
    if getattr(args, "verbose", False):
        print(f"zeps: {text}", file=sys.stderr)


def connection_reporter(args) -> Optional[Callable]:
    """With ``-v``, the ``on_connection`` callback of a command's client: one line on stderr
    when the client loses the broker and when it is back. None without ``-v``."""
    if not getattr(args, "verbose", False):
        return None
    from zeps.clients.peering import LOST

    def report(event) -> None:
        if event.kind == LOST:
            _say(args, f"lost the broker at {args.endpoint} ({event.reason}); reconnecting")
        else:
            _say(args, f"reconnected to {args.endpoint} ({event.reason})")
    return report




def _stream_dir(data_dir: str, stream: str) -> Path:
    from zeps.journal import list_streams as journal_streams
    from zeps.journal import stream_dir_name

    root = Path(data_dir)
    if not root.is_dir():
        raise UsageError(f"no data directory {data_dir}")
    d = root / stream_dir_name(stream)
    if not d.is_dir():
        try:
            known = ", ".join(journal_streams(str(root))) or "none"
        except Exception:
            known = "?"
        raise UsageError(f"no stream {stream!r} in {data_dir} (streams: {known})")
    return d
