"""The ``zeps`` command line: ``zeps broker | publish | subscribe | replay | stats | top | ...``
(``zeps --help`` lists every command).

Run ``zeps COMMAND --help`` for each command's options. Common rules:

* ``--endpoint`` defaults to ``$ZEPS_ENDPOINT`` or ``tcp://127.0.0.1:7470``;
  ``--connect-timeout`` (default ``$ZEPS_TIMEOUT`` or 10 s) bounds every wait for the broker.
* Times (``--from-time``, ``--to-time``) are ISO-8601 (``2026-11-22T10:00:00Z``; without a zone
  it is UTC, like the times ``zeps stats`` prints), epoch seconds (``1795300000.5``), ``now``,
  or relative to now (``-30s``, ``-5m``, ``-2h``, ``-1d``, ``-500ms``).
* Bad arguments, or a stream that does not exist: one line on stderr (``zeps: error: ...``) and
  exit status 2. A broker that does not answer, or refuses a request: one line on stderr and
  exit status 1. Ctrl-C (SIGINT) ends every command, ``broker`` and ``bridge`` included,
  with status 130; SIGTERM stops ``broker`` and ``bridge`` with 0.

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
import os
import sys
from typing import List, Optional

from . import (bench, bridge, broker, consumer, keys, kv, publish, replay, stats, stream,
               subscribe, top)
from .common import Parser, UsageError, message_json, message_line, parse_time  # noqa: F401

COMMANDS = ("broker", "publish", "subscribe", "replay", "stats", "stream", "top", "keys", "bridge",
            "bench", "kv", "consumer", "consume")


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
    for module in (publish, subscribe, replay, stats, stream, top, keys, bridge, bench, kv,
                   consumer):
        module.add_parser(sub)
    return parser


_TIME_OPTIONS = ("--from-time", "--to-time", "--since")


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


def _subcommands(parser) -> dict:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``zeps`` console script and ``python -m zeps``."""
    argv = _join_relative_times(list(sys.argv[1:] if argv is None else argv))
    if argv and argv[0] == "broker":
        return broker.main(argv[1:])
    parser = build_parser()
    commands = _subcommands(parser)
    if argv and argv[0] in commands and not _subcommands(commands[argv[0]]):
        args = commands[argv[0]].parse_intermixed_args(argv[1:])   # options anywhere
    else:
        args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.error("a command is required: " + ", ".join(COMMANDS) + " (see zeps --help)")
    from zeps.clients import NoStream, ZepsError
    from zeps.clients.curve import curve_from_env
    from zeps.journal import JournalError
    if hasattr(args, "server_key"):
        try:
            args.curve = curve_from_env(args.server_key, args.client_key)
        except ValueError as e:
            parser.error(str(e))
    try:
        return args.func(args)
    except (UsageError, NoStream) as e:      # a missing stream is the user's to fix: 2
        sys.stderr.write(f"zeps: error: {e}\n")
        return 2
    except (ZepsError, JournalError) as e:
        sys.stderr.write(f"zeps: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        return 130                        # interrupted, for every command (128 + SIGINT)
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


