"""``zeps stats``: describe the streams of a broker or of a data directory."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Tuple

from .common import (UsageError, _add_common, _add_source, _iso, _stream_dir, _stream_name,
                     env_endpoint)


def add_parser(sub) -> None:
    p = sub.add_parser("stats", help="streams: first/last sequence, size, oldest/newest time",
                       description="Describe the streams of a broker (--endpoint) or of a data "
                       "directory (--data-dir); all of them, or the STREAMs named.")
    p.add_argument("streams", metavar="STREAM", nargs="*", type=_stream_name, default=[])
    _add_source(p, "ask this broker", "read data directory D")
    p.add_argument("--json", action="store_true", help="one JSON object per stream and line")
    _add_common(p)
    p.set_defaults(func=cmd_stats)


def _human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def cmd_stats(args) -> int:
    from zeps.clients import StreamInfo

    rows: List[StreamInfo] = []
    # A stream that cannot be read (damaged settings, a disk that fails) is a row saying why,
    # and the exit status 1: it made the command fail for every stream (found by review).
    failed: List[Tuple[str, str]] = []
    if args.data_dir is not None:
        from zeps.journal import JournalError, JournalReader
        from zeps.journal import list_streams as journal_streams
        if not Path(args.data_dir).is_dir():
            raise UsageError(f"no data directory {args.data_dir}")
        names = args.streams or journal_streams(args.data_dir)
        for name in names:
            d = _stream_dir(args.data_dir, name)
            try:
                with JournalReader(str(d)) as r:
                    st = r.info()
            except (JournalError, OSError) as e:
                failed.append((name, str(e)))
                continue
            rows.append(StreamInfo(st.first_seq, st.last_seq, st.size_bytes, st.oldest_ts or 0,
                                   st.newest_ts or 0, name))
    else:
        from zeps.clients import Client, InvalidError, list_streams
        endpoint = args.endpoint or env_endpoint()
        known = list_streams(endpoint, timeout=args.connect_timeout, curve=args.curve)
        if args.streams:
            unknown = [s for s in args.streams if s not in known]
            if unknown:
                # ATTACH would create them: refuse instead.
                raise UsageError(f"no stream {unknown[0]!r} at {endpoint} "
                                 f"(streams: {', '.join(known) or 'none'})")
        for name in args.streams or known:
            try:
                with Client(endpoint, name, timeout=args.connect_timeout,
                            curve=args.curve) as c:
                    rows.append(c.info())
            except InvalidError as e:                  # this stream's: the others go on
                failed.append((name, e.reason))
    status = 1 if failed else 0
    if args.json:
        for r in rows:
            print(json.dumps({"stream": r.stream, "first": r.first, "last": r.last,
                              "messages": r.count, "size": r.size,
                              "oldest": r.oldest or None, "newest": r.newest or None,
                              "oldest_time": _iso(r.oldest), "newest_time": _iso(r.newest)},
                             ensure_ascii=False))
        for name, why in failed:
            print(json.dumps({"stream": name, "error": why}, ensure_ascii=False))
        return status
    table = [("STREAM", "FIRST", "LAST", "MESSAGES", "SIZE", "OLDEST", "NEWEST")]
    for r in rows:
        table.append((r.stream, str(r.first), str(r.last), str(r.count), _human_size(r.size),
                      _iso(r.oldest) or "-", _iso(r.newest) or "-"))
    for name, why in failed:
        print(f"zeps: stream {name!r}: {why}", file=sys.stderr)
    if not rows:
        if not failed:
            print("no streams", file=sys.stderr)
        return status
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) if i == 0 or i >= 5 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
    return status


