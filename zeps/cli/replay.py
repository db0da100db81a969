"""``zeps replay``: dump a range of a stream, from the journal directory or through a broker."""
from __future__ import annotations

import json
import sys

from .common import (
    MAX_NUMBER,
    UsageError,
    _add_common,
    _add_source,
    _add_stream_patterns,
    _matcher,
    _say,
    _separator,
    _seq,
    _stream_dir,
    env_endpoint,
    message_json,
    messages_upto,
    parse_time,
)


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="dump a range of a stream, from the journal or a broker",
                       description="Write STREAM's messages matching any PATTERN (prefix or "
                       "~regex) from a start to an end (both inclusive). With --data-dir it "
                       "reads the journal directory directly (the broker may be stopped or "
                       "running); otherwise it reads through the broker at --endpoint. Without "
                       "--to-seq/--to-time it stops at the stream's last message at the time "
                       "it started.")
    _add_stream_patterns(p)
    _add_source(p, "read through this broker", "read the journal in data directory D")
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
                   help="what follows each body with --format raw (default '\\n'; backslash "
                        "escapes allowed, e.g. '\\0', or '' for nothing)")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    _add_common(p)
    p.set_defaults(func=cmd_replay)


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
        """Flush and close (idempotent: an interrupted replay closes it on the way out)."""
        if self.f.closed:
            return
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
        args.endpoint = env_endpoint()
    return _replay_broker(args, match)


def _deleted(first: int, upto: int) -> None:
    """Say that messages ``first..upto`` of the range asked for are no longer in the stream
    (the same line whether the command reads a broker or a data directory)."""
    print(f"zeps: warning: messages {first}..{upto} were deleted (retention or a purge)",
          file=sys.stderr)


def _range_end(args, last: int, seq_at):
    """``(end, to_end)``: the range's last sequence, from the stream's ``last`` and the
    command's ``--to-seq`` / ``--to-time`` (``seq_at``: the reader's or the broker's), and where
    ``--to-time`` alone ends it (None: it does not). ``--to-time`` at the last time the wire
    carries (2^64-1 ns) is no end (asked for 2^64, the codec would fail)."""
    end = last if args.to_seq is None else min(last, args.to_seq)
    to_end = None
    if args.to_time is not None and args.to_time < MAX_NUMBER:
        to_end = seq_at(args.to_time + 1) - 1
        end = min(end, to_end)
    return end, to_end


def _unknown_by_time(to_end, first: int) -> bool:
    """``--to-time`` ends the range (at ``to_end``) before the first kept message ``first``:
    the time of the deleted messages is not known (retention deleted them with their
    timestamps; a data directory's reader skips a purge's), so none is said to be in the
    range (a range ending in 1970 was said to have lost every deleted message)."""
    return to_end is not None and to_end < first


def _replay_journal(args, match) -> int:
    import logging

    from zeps.clients import Message
    from zeps.journal import JournalReader
    logging.getLogger("zeps.journal.gaps").setLevel(logging.ERROR)   # said by _deleted

    reader = JournalReader(str(_stream_dir(args.data_dir, args.stream)))
    try:
        start = args.from_seq if args.from_seq is not None else (
            reader.seq_at(args.from_time) if args.from_time is not None else 1)
        start = max(start, 1)
        end, to_end = _range_end(args, reader.last_seq, reader.seq_at)
        out = _Output(args)
        bar = _progress(end - max(start, reader.first_seq) + 1)
        try:
            if start <= end:
                it = reader.read_from(start, end_seq=end)
                last = start - 1
                for rec in it:
                    if match(rec.key):
                        out.write(Message(rec.sequence, rec.key, rec.body, rec.timestamp,
                                          args.stream, rec.headers))
                    if bar is not None:
                        bar.update(rec.sequence - last)
                    last = rec.sequence
                if it.gap and not _unknown_by_time(to_end, it.first_available):
                    _deleted(it.requested, min(it.skipped_to - 1, end))
        finally:
            if bar is not None:
                bar.close()
            out.close()
    finally:
        reader.close()
    _say(args, f"{out.count} message(s) from {args.data_dir}, sequences {start}..{end}")
    return 0


def _replay_broker(args, match) -> int:
    from zeps.clients import Client

    from .subscribe import _must_exist
    _must_exist(args)

    with Client(args.endpoint, args.stream, timeout=args.connect_timeout,
                curve=args.curve) as client:
        info = client.info()
        end, to_end = _range_end(args, info.last, client.seq_at)
        if args.from_seq is not None:
            start = max(args.from_seq, 1)
        elif args.from_time is not None:
            start = client.seq_at(args.from_time)
        else:
            start = 1
        out = _Output(args)
        kept = max(start, info.first)       # (a purge or retention deleted those before)
        bar = _progress(end - kept + 1)
        last = start - 1
        if start < kept and start <= end and not _unknown_by_time(to_end, info.first):
            _deleted(start, min(kept - 1, end))
        try:
            if kept <= end:
                for msg in messages_upto(client, args, kept, end, "replay"):
                    if match(msg.key):
                        out.write(msg)
                    if bar is not None:
                        bar.update(msg.sequence - last)
                    last = msg.sequence
        except KeyboardInterrupt:
            out.close()
            client.close(timeout=1.0)
            raise
        finally:
            if bar is not None:
                bar.close()
            out.close()
    _say(args, f"{out.count} message(s) from {args.endpoint}, sequences {start}..{end}")
    return 0


