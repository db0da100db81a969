"""The ``zeps`` command line: ``zeps broker | publish | subscribe | replay | stats``.

Run ``zeps COMMAND --help`` for each command's options. Common rules:

* ``--endpoint`` defaults to ``$ZEPS_ENDPOINT`` or ``tcp://127.0.0.1:7470``;
  ``--connect-timeout`` (default ``$ZEPS_TIMEOUT`` or 10 s) bounds every wait for the broker.
* Times (``--from-time``, ``--to-time``) are ISO-8601 (``2026-11-22T10:00:00Z``; without a zone
  it is UTC, like the times ``zeps stats`` prints), epoch seconds (``1795300000.5``), ``now``,
  or relative to now (``-30s``, ``-5m``, ``-2h``, ``-1d``, ``-500ms``).
* Bad arguments: one line on stderr (``zeps: error: ...``) and exit status 2. A broker that does
  not answer, or refuses a request: one line on stderr and exit status 1. Ctrl-C in
  ``subscribe`` / ``replay`` ends them cleanly with status 0.

Examples::

    zeps broker --data-dir ./zeps-data
    zeps publish orders eu.fr 'hello'                 # one message
    seq 10 | zeps publish --confirm orders eu.fr      # one message per line; prints last seq
    zeps subscribe orders eu. --json --count 10       # history, then live
    zeps replay orders --data-dir ./zeps-data --from-time -1h --format raw
    zeps stats --json
"""
from __future__ import annotations

import argparse
import base64
import codecs
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, List, Optional

from zeps import units
from zeps.units import DEFAULT_ENDPOINT
COMMANDS = ("broker", "publish", "subscribe", "replay", "stats")


class UsageError(Exception):
    """A bad argument found after parsing (exit status 2)."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr and exit status 2 (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"zeps: error: {message}\n")
        sys.exit(2)


# --------------------------------------------------------------------------- argument types

def parse_time(text: str, now_ns: Optional[int] = None) -> int:
    """A time argument -> ns since the epoch (forms: :data:`zeps.units.TIME_FORMS`)."""
    try:
        return units.parse_time(text, now_ns)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _endpoint(text: str) -> str:
    from zeps.clients.client import check_endpoint
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
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than zero: {text!r}")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text.rstrip("s")) if text.endswith("s") and not text.endswith("ms") else (
            float(text[:-2]) / 1000 if text.endswith("ms") else float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be more than zero seconds: {text!r}")
    return v


def _separator(text: str) -> bytes:
    try:
        return codecs.escape_decode(text.encode("utf-8"))[0]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad --raw-separator {text!r}: {e}") from None


def _stream_name(text: str) -> str:
    raw = text.encode("utf-8", "surrogateescape")
    if not text or len(raw) > 255 or "\x00" in text:
        raise argparse.ArgumentTypeError(f"bad stream name {text!r}: 1 to 255 bytes, no NUL")
    return text


def _pattern(text: str) -> str:
    if len(text.encode("utf-8", "surrogateescape")) > 255:
        raise argparse.ArgumentTypeError(f"pattern longer than 255 bytes: {text[:40]!r}...")
    from zeps.matching import PatternError, compile_pattern
    try:
        compile_pattern(text)
    except PatternError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _env_timeout() -> float:
    try:
        v = float(os.environ.get("ZEPS_TIMEOUT", "10"))
        return v if v > 0 else 10.0
    except ValueError:
        return 10.0


# --------------------------------------------------------------------------- parser

def _add_endpoint(p: argparse.ArgumentParser, default=True) -> None:
    p.add_argument("--endpoint", type=_endpoint,
                   default=os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT) if default else None,
                   help="broker endpoint (default $ZEPS_ENDPOINT or tcp://127.0.0.1:7470)")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--connect-timeout", type=_seconds, default=_env_timeout(), metavar="S",
                   help="seconds to wait for the broker (default $ZEPS_TIMEOUT or 10)")
    p.add_argument("-v", "--verbose", action="store_true", help="say what was done, on stderr")


def build_parser() -> Parser:
    parser = Parser(prog="zeps", description="ZEPS: a journalled publish-subscribe broker "
                    "over ZeroMQ.", epilog="Run 'zeps COMMAND --help' for a command's options.")
    try:
        from importlib.metadata import version as _dist_version
        version = _dist_version("zeps")
    except Exception:
        version = "0.1.0"
    parser.add_argument("--version", action="version", version=f"zeps {version}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    sub.add_parser("broker", help="run the broker (zeps broker --help for its options)",
                   add_help=False)

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

    p = sub.add_parser("subscribe", help="print messages: history, then live",
                       description="Print STREAM's messages whose key matches any PATTERN (a "
                       "prefix, or ~regex; default: every key) as 'SEQ KEY BODY' lines or JSON "
                       "lines. Starts at the first kept message unless told otherwise.")
    p.add_argument("stream", metavar="STREAM", type=_stream_name)
    p.add_argument("patterns", metavar="PATTERN", nargs="*", type=_pattern)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from-seq", type=_seq, metavar="N", help="start at sequence N")
    g.add_argument("--from-time", type=parse_time, metavar="T",
                   help="start at the first message at or after time T")
    g.add_argument("--live", action="store_true", help="only messages published from now on")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N messages")
    p.add_argument("--timeout", type=_seconds, metavar="S",
                   help="stop after S seconds without a message")
    _add_endpoint(p)
    _add_common(p)
    p.set_defaults(func=cmd_subscribe, interrupt_rc=0)

    p = sub.add_parser("replay", help="dump a range of a stream, from the journal or a broker",
                       description="Write STREAM's messages matching any PATTERN (prefix or "
                       "~regex) from a start to an end (both inclusive). With --data-dir it "
                       "reads the journal directory directly (the broker may be stopped or "
                       "running); otherwise it reads through the broker at --endpoint. Without "
                       "--to-seq/--to-time it stops at the stream's last message at the time "
                       "it started.")
    p.add_argument("stream", metavar="STREAM", type=_stream_name)
    p.add_argument("patterns", metavar="PATTERN", nargs="*", type=_pattern)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--endpoint", type=_endpoint, default=None,
                     help="read through this broker (default $ZEPS_ENDPOINT or "
                          "tcp://127.0.0.1:7470)")
    src.add_argument("--data-dir", metavar="D", help="read the journal in data directory D")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from-seq", type=_seq, metavar="N", help="start at sequence N")
    g.add_argument("--from-time", type=parse_time, metavar="T",
                   help="start at the first message at or after T")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--to-seq", type=_seq, metavar="M", help="stop after sequence M")
    g.add_argument("--to-time", type=parse_time, metavar="T",
                   help="stop after the last message at or before T")
    p.add_argument("--format", choices=("json", "raw"), default="json",
                   help="json: JSON lines as 'subscribe --json'; raw: bodies only, each followed "
                        "by the separator (default json)")
    p.add_argument("--raw-separator", type=_separator, default=b"\n", metavar="SEP",
                   help="what follows each body with --format raw (backslash escapes allowed: "
                        "'\\n' default, '\\0', ''")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    _add_common(p)
    p.set_defaults(func=cmd_replay, interrupt_rc=0)

    p = sub.add_parser("stats", help="streams: first/last sequence, size, oldest/newest time",
                       description="Describe the streams of a broker (--endpoint) or of a data "
                       "directory (--data-dir); all of them, or the STREAMs named.")
    p.add_argument("streams", metavar="STREAM", nargs="*", type=_stream_name)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--endpoint", type=_endpoint, default=None,
                     help="ask this broker (default $ZEPS_ENDPOINT or tcp://127.0.0.1:7470)")
    src.add_argument("--data-dir", metavar="D", help="read data directory D")
    p.add_argument("--json", action="store_true", help="one JSON object per stream and line")
    _add_common(p)
    p.set_defaults(func=cmd_stats, interrupt_rc=130)
    return parser


# --------------------------------------------------------------------------- output helpers

def _iso(ns: int) -> Optional[str]:
    if not ns:
        return None
    dt = datetime.fromtimestamp(ns // 10**9, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns % 10**9) // 10**6:03d}Z"


def message_json(stream: str, msg) -> dict:
    """The JSON object of one message (``subscribe --json``, ``replay --format json``)."""
    obj = {"stream": stream, "sequence": msg.sequence, "key": msg.key}
    try:
        obj["body"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        obj["body_base64"] = base64.b64encode(msg.body).decode("ascii")
    obj["timestamp"] = msg.timestamp
    return obj


def message_line(msg) -> str:
    """``SEQ KEY BODY``: the body as UTF-8 text, or its Python repr if it is not UTF-8."""
    try:
        body = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        body = repr(msg.body)
    return f"{msg.sequence} {msg.key} {body}"


def _matcher(patterns: List[str]) -> Callable[[str], bool]:
    if not patterns or "" in patterns:
        return lambda key: True
    from zeps.matching import compile_pattern
    checks = [compile_pattern(p, timeout=1.0).matches for p in patterns]
    return lambda key: any(ch(key) for ch in checks)


def _say(args, text: str) -> None:
    if getattr(args, "verbose", False):
        print(f"zeps: {text}", file=sys.stderr)


# --------------------------------------------------------------------------- commands

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


def cmd_subscribe(args) -> int:
    from zeps.clients import Client

    out = sys.stdout
    with Client(args.endpoint, args.stream, timeout=args.connect_timeout) as client:
        sub = client.subscribe(args.patterns or [""], from_seq=args.from_seq,
                               from_time=args.from_time, live=args.live)
        n = 0
        fmt = ((lambda m: json.dumps(message_json(args.stream, m), ensure_ascii=False))
               if args.json else message_line)
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
            return 0
    _say(args, f"{n} message(s)")
    return 0


class _Output:
    """Where replay writes: bytes to a file or stdout; JSON lines or raw bodies."""

    def __init__(self, args):
        self.stream = args.stream
        self.raw = args.format == "raw"
        self.sep = args.raw_separator
        if args.output:
            try:
                self.f = open(args.output, "wb")
            except OSError as e:
                raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
            self.close_f = True
        else:
            self.f = sys.stdout.buffer
            self.close_f = False
        self.count = 0

    def write(self, msg) -> None:
        if self.raw:
            self.f.write(msg.body + self.sep)
        else:
            self.f.write(json.dumps(message_json(self.stream, msg), ensure_ascii=False)
                         .encode("utf-8") + b"\n")
        self.count += 1

    def close(self) -> None:
        self.f.flush()
        if self.close_f:
            self.f.close()


def _progress(total: int):
    if total <= 0 or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="msg", file=sys.stderr, dynamic_ncols=True, leave=False)


def cmd_replay(args) -> int:
    match = _matcher(args.patterns)
    if args.data_dir is not None:
        return _replay_journal(args, match)
    if args.endpoint is None:
        args.endpoint = _endpoint(os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT))
    return _replay_broker(args, match)


def _stream_dir(data_dir: str, stream: str) -> Path:
    from zeps.journal import stream_dir_name
    from zeps.journal import list_streams as journal_streams

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


def _replay_journal(args, match) -> int:
    from zeps.clients import Message
    from zeps.journal import JournalReader

    reader = JournalReader(str(_stream_dir(args.data_dir, args.stream)))
    try:
        start = args.from_seq if args.from_seq is not None else (
            reader.seq_at(args.from_time) if args.from_time is not None else 1)
        start = max(start, 1)
        end = reader.last_seq
        if args.to_seq is not None:
            end = min(end, args.to_seq)
        if args.to_time is not None:
            end = min(end, reader.seq_at(args.to_time + 1) - 1)
        out = _Output(args)
        bar = _progress(end - max(start, reader.first_seq) + 1)
        try:
            if start <= end:
                it = reader.read_from(start, end_seq=end)
                last = start - 1
                for rec in it:
                    if match(rec.key):
                        out.write(Message(rec.sequence, rec.key, rec.body, rec.timestamp,
                                          args.stream))
                    if bar is not None:
                        bar.update(rec.sequence - last)
                    last = rec.sequence
                if it.gap:
                    print(f"zeps: warning: messages {it.requested}..{it.skipped_to - 1} were "
                          f"deleted by retention", file=sys.stderr)
        except KeyboardInterrupt:
            return 0
        finally:
            if bar is not None:
                bar.close()
            out.close()
    finally:
        reader.close()
    _say(args, f"{out.count} message(s) from {args.data_dir}, sequences {start}..{end}")
    return 0


def _replay_broker(args, match) -> int:
    from zeps.clients import Client, ZepsTimeout

    with Client(args.endpoint, args.stream, timeout=args.connect_timeout) as client:
        info = client.info()
        end = info.last
        if args.to_seq is not None:
            end = min(end, args.to_seq)
        if args.to_time is not None:
            end = min(end, client.seq_at(args.to_time + 1) - 1)
        if args.from_seq is not None:
            start = max(args.from_seq, 1)
        elif args.from_time is not None:
            start = client.seq_at(args.from_time)
        else:
            start = 1
        out = _Output(args)
        bar = _progress(end - max(start, info.first) + 1)
        last = start - 1
        try:
            if start <= end:
                # Subscribe to everything and filter here: a message the pattern excludes must
                # still tell us that the end was passed.
                sub = client.subscribe("", from_seq=start)
                idle = max(30.0, args.connect_timeout)
                while last < end:
                    try:
                        msg = sub.next(timeout=idle)
                    except ZepsTimeout:
                        raise ZepsTimeout(f"replay stalled at sequence {last}: no message from "
                                          f"{args.endpoint} for {idle:g}s") from None
                    if msg.sequence > end:
                        break
                    if match(msg.key):
                        out.write(msg)
                    if bar is not None:
                        bar.update(msg.sequence - last)
                    last = msg.sequence
        except KeyboardInterrupt:
            out.close()
            client.close(timeout=1.0)
            return 0
        finally:
            if bar is not None:
                bar.close()
            out.close()
    _say(args, f"{out.count} message(s) from {args.endpoint}, sequences {start}..{end}")
    return 0


def _human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def cmd_stats(args) -> int:
    from zeps.clients import StreamInfo

    rows: List[StreamInfo] = []
    if args.data_dir is not None:
        from zeps.journal import JournalReader
        from zeps.journal import list_streams as journal_streams
        if not Path(args.data_dir).is_dir():
            raise UsageError(f"no data directory {args.data_dir}")
        names = args.streams or journal_streams(args.data_dir)
        for name in names:
            d = _stream_dir(args.data_dir, name)
            with JournalReader(str(d)) as r:
                st = r.info()
            rows.append(StreamInfo(st.first_seq, st.last_seq, st.size_bytes, st.oldest_ts or 0,
                                   st.newest_ts or 0, name))
    else:
        from zeps.clients import Client, list_streams
        endpoint = args.endpoint or _endpoint(os.environ.get("ZEPS_ENDPOINT", DEFAULT_ENDPOINT))
        known = list_streams(endpoint, timeout=args.connect_timeout)
        if args.streams:
            unknown = [s for s in args.streams if s not in known]
            if unknown:
                # ATTACH would create them: refuse instead.
                raise UsageError(f"no stream {unknown[0]!r} at {endpoint} "
                                 f"(streams: {', '.join(known) or 'none'})")
        for name in args.streams or known:
            with Client(endpoint, name, timeout=args.connect_timeout) as c:
                rows.append(c.info())
    if args.json:
        for r in rows:
            print(json.dumps({"stream": r.stream, "first": r.first, "last": r.last,
                              "messages": r.count, "size": r.size,
                              "oldest": r.oldest or None, "newest": r.newest or None,
                              "oldest_time": _iso(r.oldest), "newest_time": _iso(r.newest)},
                             ensure_ascii=False))
        return 0
    table = [("STREAM", "FIRST", "LAST", "MESSAGES", "SIZE", "OLDEST", "NEWEST")]
    for r in rows:
        table.append((r.stream, str(r.first), str(r.last), str(r.count), _human_size(r.size),
                      _iso(r.oldest) or "-", _iso(r.newest) or "-"))
    if not rows:
        print("no streams", file=sys.stderr)
        return 0
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) if i == 0 or i >= 5 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
    return 0


# --------------------------------------------------------------------------- entry point

def _broker(argv: List[str]) -> int:
    from zeps.broker.server import add_broker_arguments, run_from_args

    parser = Parser(prog="zeps broker", description="Run the ZEPS broker.")
    add_broker_arguments(parser)
    return run_from_args(parser.parse_args(argv))


_TIME_OPTIONS = ("--from-time", "--to-time")


def _join_relative_times(argv: List[str]) -> List[str]:
    """``--from-time -5m`` -> ``--from-time=-5m``: argparse would take ``-5m`` for an option."""
    out: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            break
        if a in _TIME_OPTIONS and i + 1 < len(argv) and argv[i + 1].strip().startswith("-"):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``zeps`` console script and ``python -m zeps``."""
    argv = _join_relative_times(list(sys.argv[1:] if argv is None else argv))
    if argv and argv[0] == "broker":
        return _broker(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.error("a command is required: " + ", ".join(COMMANDS) + " (see zeps --help)")
    from zeps.clients import InvalidError, ZepsError, ZepsTimeout
    try:
        return args.func(args)
    except UsageError as e:
        sys.stderr.write(f"zeps: error: {e}\n")
        return 2
    except ZepsTimeout as e:
        sys.stderr.write(f"zeps: error: {e}\n")
        return 1
    except InvalidError as e:
        sys.stderr.write(f"zeps: error: {e}\n")
        return 1
    except ZepsError as e:
        sys.stderr.write(f"zeps: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        return args.interrupt_rc
    except BrokenPipeError:
        # The reader went away (e.g. '| head'): stop quietly, without a flush error at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except OSError as e:
        sys.stderr.write(f"zeps: error: {e}\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
