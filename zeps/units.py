"""Defaults and the parsers of sizes, durations, times and addresses, defined once for the project.

The broker's flags, the CLI, the SDK and the Spark options all read sizes (``64K``, ``256M``),
durations (``500ms``, ``60s``, ``7d``) and points in time from text. These functions are the
only parsers of those forms; each raises :class:`ValueError` with a one-line reason, which the
callers wrap in their own error type (argparse, Spark).
"""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Optional, Tuple, Union

#: The endpoint the broker binds and clients connect to when none is given.
DEFAULT_ENDPOINT = "tcp://127.0.0.1:7470"
#: The broker's data directory when none is given.
DEFAULT_DATA_DIR = "./zeps-data"
#: Where ``zeps broker --monitor`` (given no address) serves its monitoring pages, and where
#: ``zeps top`` looks for them.
DEFAULT_MONITOR = "127.0.0.1:7471"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.I)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|sec|secs|seconds?|m|min|mins|minutes?|"
                       r"h|hours?|d|days?|w|weeks?)?\s*$", re.I)
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0,
           "seconds": 1.0, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
           "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0,
           "days": 86400.0, "w": 604800.0, "week": 604800.0, "weeks": 604800.0}
_EPOCH_NUM = re.compile(r"^(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?$", re.I)
_AGO = re.compile(r"^(.+?)\s+ago$", re.I)
_NOW_REL = re.compile(r"^now\s*([+-])\s*(.+)$", re.I)
_ENDPOINT_RE = re.compile(r"^(tcp|ipc|inproc|ws|wss|pgm|epgm|norm|vmci|tipc|udp)://(.+)$")

TIME_FORMS = ("ISO-8601 (2026-11-22T10:00:00Z; without a zone it is local time, as date(1) "
              "has it), epoch seconds "
              "(1795300000.5, or with a unit: 1795300000000ms), 'now', or relative to now: "
              "-5m, 5m, 30s, now-5m, '5 minutes ago'")


def parse_address(text: str) -> Tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) or a bare ``PORT`` (on 127.0.0.1) -> (host,
    port); port 0 picks a free one. ValueError with a one-line reason otherwise."""
    t = text.strip()
    host, sep, port = t.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", t
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host:
        raise ValueError(f"no host in address {text!r} (use HOST:PORT)")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bad port in address {text!r} (use HOST:PORT, "
                         f"port 0 to 65535)")
    return host, int(port)


def check_endpoint(endpoint) -> str:
    """Return ``endpoint`` if it looks like a ZeroMQ endpoint, else raise :class:`ValueError`
    naming it (``tcp://host:port``, ``ipc://path``, ``inproc://name``, ...)."""
    if not isinstance(endpoint, str):
        raise ValueError(f"bad endpoint {endpoint!r}: must be a string like tcp://127.0.0.1:7470")
    m = _ENDPOINT_RE.match(endpoint)
    if not m:
        raise ValueError(f"bad endpoint {endpoint!r}: expected transport://address, "
                         f"e.g. tcp://127.0.0.1:7470")
    if m.group(1) in ("tcp", "ws", "wss"):
        addr = m.group(2).split("/", 1)[0].rsplit(";", 1)[-1]
        host, sep, port = addr.rpartition(":")
        if not sep or not host or host == "*" or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad endpoint {endpoint!r}: {m.group(1)} endpoints need host:port "
                             f"with a port from 1 to 65535")
    return endpoint


def parse_size(text: str) -> int:
    """'256M', '1GiB', '64k', '4096' -> bytes."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 4096, 64K, 256M, 1G)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]


def parse_duration(text: str) -> float:
    """'60', '60s', '500ms', '30m', '12h', '7d', '5 minutes' -> seconds (a bare number is seconds)."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 60s, 30m, 12h, 7d)")
    return float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]


def parse_time(text: str, now_ns: Optional[int] = None, *, bare_unit: str = "s") -> int:
    """A point in time -> ns since the epoch. ``now_ns`` is injected by tests (default: the clock).

    Forms (:data:`TIME_FORMS`): ISO-8601 with or without zone (local time when none, as ``date``
    reads it); a number since the
    epoch (``bare_unit`` when it has no unit: seconds for the CLI, milliseconds for Spark's
    ``startingTime``; ``ns``/``us``/``ms``/``s`` as an explicit unit, with more than six digits
    before its point: ``30s`` is a duration); ``now``; a duration before now as ``-5m``, ``5m``,
    ``30s``, ``now-5m`` or ``5 minutes ago``; ``now+5m`` after now.
    """
    t = str(text).strip()
    if not t:
        raise ValueError(f"bad time {text!r}: empty")
    now = time.time_ns() if now_ns is None else now_ns
    if t.lower() == "now":
        return now
    m = _EPOCH_NUM.match(t)
    # A time since the epoch has more than six digits before its point (or, without a unit, a
    # point): "3s" and "500ms" are before now, as "5m" is (they were read as 3 s after 1970,
    # and zeps replay --from-time 3s read the whole stream; found by review).
    digits = m.group(1).split(".")[0].lstrip("+") if m else ""
    if m and (len(digits) > 6 or (not m.group(2) and "." in t)):
        unit = (m.group(2) or bare_unit).lower()
        try:
            ns = int(Decimal(m.group(1)) * {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}[unit])
        except InvalidOperation:
            raise ValueError(f"bad time {text!r}") from None
        return ns
    rel = None
    sign = -1
    m = _NOW_REL.match(t)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        rel = m.group(2)
    elif t.startswith("-"):
        rel = t[1:]
    elif _AGO.match(t):
        rel = _AGO.match(t).group(1)
    elif _DURATION.match(t) and not t.isdigit():
        rel = t
    if rel is not None:
        try:
            seconds = parse_duration(rel)
        except ValueError:
            raise ValueError(f"bad time {text!r}: use {TIME_FORMS}") from None
        return max(now + sign * int(Decimal(str(seconds)) * 10**9), 0)
    if m is None and t.isdigit():       # a short bare number: epoch in bare_unit
        return int(t) * {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}[bare_unit]
    try:
        dt = datetime.fromisoformat(t[:-1] + "+00:00" if t[-1:] in "zZ" else t)
    except ValueError:
        raise ValueError(f"bad time {text!r}: use {TIME_FORMS}") from None
    ns = datetime_to_ns(dt)                   # a naive datetime is local time
    if ns < 0:
        raise ValueError(f"bad time {text!r}: before 1970")
    return ns


def datetime_to_ns(dt: datetime) -> int:
    """An aware datetime (a naive one is local time, as :meth:`datetime.timestamp` has it) -> ns."""
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return ((dt - _EPOCH) // timedelta(microseconds=1)) * 1000


TimeLike = Union[datetime, int, float]


def to_timestamp_ns(when: TimeLike) -> int:
    """A time given to the SDK -> ns since the epoch: a ``datetime`` (naive = local time), an
    ``int`` (already ns) or a ``float`` (seconds)."""
    if isinstance(when, datetime):
        return datetime_to_ns(when)
    if isinstance(when, bool):
        raise TypeError("time must be a datetime, an int (ns) or a float (s), not bool")
    if isinstance(when, int):
        if when < 0:
            raise ValueError(f"time {when} is before the epoch")
        return when
    if isinstance(when, float):
        if when < 0:
            raise ValueError(f"time {when} is before the epoch")
        return int(round(when * 1e9))
    raise TypeError(f"time must be a datetime, an int (ns) or a float (s), not {type(when).__name__}")
