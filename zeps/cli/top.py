"""``zeps top``: a broker's streams and clients in the terminal, refreshed every second.

It reads the broker's monitoring port (``zeps broker --monitor``): ``/varz``, ``/streamz``,
``/connz`` and ``/consumerz``, the documents the dashboard draws, and computes rates from two
polls. The consumers (the :data:`CONSUMERS` most behind) are shown when the broker has any. The frame is
made by :func:`render`, a pure function of two samples, so what it shows can be tested
without a terminal.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence
from urllib.parse import urlsplit

from zeps.broker.monitor import MODES, read_token
from zeps.units import DEFAULT_MONITOR

from .common import _add_common, _int_upto, _seconds, monitor_address
from .stats import _human_size

_MODE_NAMES = {"live": "live", "catching_up": "catching up", "historical": "historical",
               "congested": "congested", "not_subscribed": "not subscribed",
               "unattached": "unattached"}
_CLEAR = "\x1b[H\x1b[2J"
#: Consumers listed, most behind first.
CONSUMERS = 20


def monitor_url(text: str) -> str:
    """``PORT``, ``HOST:PORT``, ``[IPv6]:PORT`` (the forms of ``zeps broker --monitor``) or a
    URL ``http(s)://HOST:PORT[/PATH]`` -> the base URL, without a trailing slash."""
    t = text.strip()
    if "://" not in t:
        try:
            host, port = monitor_address(t)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    parts = urlsplit(t)
    try:
        port_ok = parts.port is None or parts.port >= 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(f"not a monitoring URL: {text!r} (use e.g. "
                                         f"http://{DEFAULT_MONITOR})")
    return t.rstrip("/")


#: The most clients ``--clients`` lists (the monitoring port's largest page, ``/connz?limit``).
MAX_CLIENTS_SHOWN = 100_000


def add_parser(sub) -> None:
    p = sub.add_parser("top", help="watch a broker's streams and clients live (needs "
                       "'zeps broker --monitor')",
                       description="Show a broker's streams (head, size, rates) and clients "
                       "(mode, credit, lag), refreshed every --interval seconds, from its "
                       "monitoring port (zeps broker --monitor HOST:PORT). Ctrl-C quits.")
    # The default is parsed as an argument only when 'top' runs (argparse converts a string
    # default): a bad $ZEPS_MONITOR is then top's one-line error, not every command's traceback.
    p.add_argument("--monitor", metavar="ADDRESS", type=monitor_url,
                   default=os.environ.get("ZEPS_MONITOR", DEFAULT_MONITOR),
                   help=f"the broker's monitoring address: PORT, HOST:PORT or a URL, as "
                        f"'zeps broker --monitor' takes it (default $ZEPS_MONITOR or "
                        f"http://{DEFAULT_MONITOR})")
    p.add_argument("--interval", type=_seconds, default=1.0, metavar="S",
                   help="seconds between refreshes (default 1)")
    p.add_argument("--once", action="store_true",
                   help="print one frame (rates over one --interval) and exit")
    p.add_argument("--clients", type=_int_upto(MAX_CLIENTS_SHOWN), default=20, metavar="N",
                   help="clients listed, most behind first (default 20)")
    p.add_argument("--monitor-token", metavar="FILE",
                   default=os.environ.get("ZEPS_MONITOR_TOKEN_FILE"),
                   help="the file holding the broker's monitoring token (zeps broker "
                        "--monitor-token; default $ZEPS_MONITOR_TOKEN_FILE)")
    _add_common(p)
    p.set_defaults(func=cmd_top, interrupt_rc=130)


class MonitorError(Exception):
    """The monitoring port did not answer, or not as expected (one line for the user)."""


@dataclass
class Sample:
    """One poll: the documents and when they were read (the poller's clock); ``consumerz`` is
    None from a broker without ``/consumerz``."""
    t: float
    varz: dict
    streamz: dict
    connz: dict
    consumerz: Optional[dict] = None


def _get(url: str, timeout: float, token: Optional[bytes] = None) -> dict:
    headers = {"Authorization": f"Bearer {token.decode('ascii')}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=timeout) as r:
            return json.load(r)
    except urllib.error.HTTPError as exc:
        try:
            reason = json.load(exc).get("error", exc.reason)
        except (ValueError, AttributeError):
            reason = exc.reason
        raise MonitorError(f"{url}: HTTP {exc.code}: {reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise MonitorError(f"cannot reach {url}: {why} (is the broker running with "
                           f"--monitor?)") from None
    except ValueError as exc:
        raise MonitorError(f"{url} did not answer JSON ({exc}): is it a ZEPS broker's "
                           f"monitoring port?") from None


def fetch(base: str, clients: int, timeout: float, clock=time.monotonic,
          token: Optional[bytes] = None) -> Sample:
    """Poll ``/varz``, ``/streamz``, ``/connz`` (the ``clients`` most behind) and
    ``/consumerz`` (the :data:`CONSUMERS` most behind) once, with the monitoring ``token`` if
    given."""
    varz = _get(f"{base}/varz", timeout, token)
    streamz = _get(f"{base}/streamz", timeout, token)
    connz = _get(f"{base}/connz?sort=lag&limit={clients}", timeout, token)
    consumerz = None
    if "consumers" in varz:                  # a broker that has /consumerz
        consumerz = _get(f"{base}/consumerz?sort=lag&limit={CONSUMERS}", timeout, token)
    return Sample(clock(), varz, streamz, connz, consumerz)


# --------------------------------------------------------------------------- rendering

def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def _rate(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}".rstrip("0").rstrip(".")


def _per_s(now, before, dt: float) -> Optional[float]:
    if before is None or now is None or dt <= 0:
        return None
    return max(now - before, 0) / dt


def _bytes(v: Optional[float]) -> str:
    return "-" if v is None else _human_size(int(v))


def _duration(s: Optional[float]) -> str:
    if s is None:
        return "-"
    s = int(s)
    d, h, m = s // 86400, s // 3600 % 24, s // 60 % 60
    return f"{d}d{h}h" if d else f"{h}h{m}m" if h else f"{m}m{s % 60}s" if m else f"{s}s"


def _modes(modes: Dict[str, int]) -> str:
    return ", ".join(f"{modes[m]} {_MODE_NAMES[m]}" for m in MODES if modes.get(m)) or "none"


def _table(header: Sequence[str], rows: List[Sequence[str]], left: Sequence[int]) -> List[str]:
    """Columns as wide as their widest cell; columns in ``left`` left-aligned, the rest right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in [header, *rows]]


def render(cur: Sample, prev: Optional[Sample] = None, width: int = 200) -> str:
    """One frame of ``zeps top``: the broker, its streams, its clients most behind first.
    Rates are per second between ``prev`` and ``cur`` ("-" without ``prev``); lines are cut to
    ``width`` characters."""
    v = cur.varz
    dt = cur.t - prev.t if prev is not None else 0.0
    pv = prev.varz if prev is not None else {}
    rate_in = _per_s(v.get("in_msgs"), pv.get("in_msgs"), dt)
    rate_out = _per_s(v.get("out_msgs"), pv.get("out_msgs"), dt)
    bytes_in = _per_s(v.get("in_bytes"), pv.get("in_bytes"), dt)
    bytes_out = _per_s(v.get("out_bytes"), pv.get("out_bytes"), dt)
    invalid = v.get("invalid", {})
    lines = [
        f"ZEPS {v.get('endpoint', '')}  v{v.get('version') or '?'}  "
        f"up {_duration(v.get('uptime_s'))}",
        f"clients {_n(v.get('clients'))}: {_modes(v.get('modes', {}))}    "
        f"streams: {_n(v.get('streams_open'))} open, {_n(v.get('streams'))} on disk",
        f"in {_rate(rate_in)} msg/s {_bytes(bytes_in)}/s ({_n(v.get('in_msgs'))} total)    "
        f"out {_rate(rate_out)} msg/s {_bytes(bytes_out)}/s ({_n(v.get('out_msgs'))} total)    "
        f"confirms pending {_n(v.get('confirms_pending'))}    "
        f"INVALIDs {_n(sum(invalid.values()))}",
        "",
    ]
    before = {s["name"]: s for s in prev.streamz["streams"]} if prev is not None else {}
    rows = []
    for st in cur.streamz["streams"]:
        old = before.get(st["name"], {})
        modes = st.get("modes", {})
        rows.append((st["name"], _n(st.get("head_seq")), _n(st.get("messages")),
                     _bytes(st.get("size_bytes")),
                     _rate(_per_s(st["in_msgs"], old.get("in_msgs"), dt)),
                     _rate(_per_s(st["out_msgs"], old.get("out_msgs"), dt)),
                     *(str(modes.get(m, 0)) for m in MODES[:4]),
                     _n(st.get("max_lag")), _n(st.get("confirms_pending"))))
    lines += _table(("STREAM", "HEAD SEQ", "MESSAGES", "SIZE", "IN/S", "OUT/S", "LIVE",
                     "CATCHUP", "HIST", "CONG", "MAX LAG", "UNCONFIRMED"), rows, left=(0,))
    if not rows:
        lines.append("(no open streams)")
    lines.append("")
    rows = [(c["client"], c["stream"] or "-", _MODE_NAMES.get(c["mode"], c["mode"]),
             _human_size(c["credit"]), _n(c["next_seq"]), _n(c["lag"]), _n(c["delivered"]),
             _n(c["published"]), _duration(c["idle_s"])) for c in cur.connz["connections"]]
    lines += _table(("CLIENT", "STREAM", "MODE", "CREDIT", "NEXT SEQ", "LAG", "DELIVERED",
                     "PUBLISHED", "IDLE"), rows, left=(0, 1, 2))
    shown, total = len(rows), cur.connz.get("total", len(rows))
    if not rows:
        lines.append("(no clients)")
    elif total > shown:
        lines.append(f"({shown} most behind of {total} clients)")
    lines += _consumer_lines(cur, prev, dt)
    return "\n".join(line[:width] for line in lines)


def _consumer_lines(cur: Sample, prev: Optional[Sample], dt: float) -> List[str]:
    """The consumers section: nothing when the broker has none (or no ``/consumerz``)."""
    doc = cur.consumerz
    if not doc or not doc.get("consumers"):
        return []
    before = {(g["stream"], g["name"]): g for g in prev.consumerz["consumers"]} \
        if prev is not None and prev.consumerz else {}
    rows = []
    for g in doc["consumers"]:
        old = before.get((g["stream"], g["name"]), {})
        rows.append((g["stream"], g["name"], _n(g["members"]), _n(g["lag"]),
                     f"{g['lag_seconds']:.1f}", _n(g["pending"]),
                     _rate(_per_s(g["acked"], old.get("acked"), dt)),
                     _n(g["redelivered"]), _n(g["dead_lettered"])))
    lines = [""] + _table(("STREAM", "CONSUMER", "MEMBERS", "LAG", "LAG S", "PENDING",
                           "ACKS/S", "REDELIVERED", "DEAD"), rows, left=(0, 1))
    shown, total = len(rows), doc.get("total", len(rows))
    if total > shown:
        lines.append(f"({shown} most behind of {total} consumers)")
    return lines


# --------------------------------------------------------------------------- command

def _width(out) -> int:
    """A terminal's width; no limit when the output is not a terminal."""
    return shutil.get_terminal_size().columns if out.isatty() else 1 << 16


def cmd_top(args) -> int:
    out = sys.stdout
    timeout = args.connect_timeout
    token = None
    if args.monitor_token:
        try:
            token = read_token(args.monitor_token)
        except ValueError as exc:
            sys.stderr.write(f"zeps: error: {exc}\n")
            return 2
    try:
        cur = fetch(args.monitor, args.clients, timeout, token=token)
    except MonitorError as exc:
        sys.stderr.write(f"zeps: error: {exc}\n")
        return 1
    prev: Optional[Sample] = None
    if args.once:
        time.sleep(args.interval)
        try:
            prev, cur = cur, fetch(args.monitor, args.clients, timeout, token=token)
        except MonitorError as exc:
            sys.stderr.write(f"zeps: error: {exc}\n")
            return 1
        out.write(render(cur, prev, _width(out)) + "\n")
        return 0
    tty = out.isatty()
    note = ""
    while True:
        frame = render(cur, prev, _width(out))
        out.write((_CLEAR if tty else "\n") + frame + (f"\n\n{note}" if note else "") + "\n")
        out.flush()
        time.sleep(args.interval)
        try:
            prev, cur = cur, fetch(args.monitor, args.clients, timeout, token=token)
            note = ""
        except MonitorError as exc:          # the broker went away: say so, keep trying
            note = f"broker not answering: {exc}"
