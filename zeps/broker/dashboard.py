"""The dashboard page as served: its first frame comes with it.

``dashboard.js`` polls ``/varz``, ``/streamz``, ``/connz`` and ``/consumerz`` every second, and a page that
waited for its first poll showed "connecting…" and "—" everywhere until then: what a screenshot
taken at the page's ``load`` event (``chromium --headless --screenshot``) or a slow link shows.
So ``/`` carries the documents of a first poll inline, in
``<script id="snapshot" type="application/json">`` (data, not code: the page's Content Security
Policy runs no inline script), and the script draws them before the page has loaded.

The in/out rates need two samples: :class:`TrafficSampler` keeps the traffic totals of the last
``/varz`` documents made (and of the monitor's start), so the first frame shows the rates over the
last second or more, not "—". Not inlined with a monitoring token: the page itself is served
without it (``zeps.broker.http``), so it must show nothing of the broker.

Pure: times are given, nothing is read here.
"""
from __future__ import annotations

import json
from collections import deque
from typing import Dict, Optional

__all__ = ["TrafficSampler", "SLOT", "inline", "MIN_SPAN", "CLIENT_ROWS", "CONSUMER_ROWS"]

#: Clients the page lists (``CLIENT_ROWS`` in dashboard.js: its polls ask for as many).
CLIENT_ROWS = 200
#: Consumers the page lists, most behind first (``CONSUMER_ROWS`` in dashboard.js).
CONSUMER_ROWS = 100
#: What ``dashboard.html`` holds where the first poll's documents go.
SLOT = b'<script id="snapshot" type="application/json">null</script>'
#: Rates are taken over at least this many seconds when samples allow it.
MIN_SPAN = 1.0
#: The least span (s) a rate is taken over at all (a page loaded right after the broker started).
_LEAST_SPAN = 0.2
_KEYS = (("in", "in_msgs"), ("out", "out_msgs"), ("inBytes", "in_bytes"),
         ("outBytes", "out_bytes"))


class TrafficSampler:
    """The traffic totals (``monitor.traffic``) at the times ``/varz`` documents were made, the
    last ``keep`` of them (a document is made at most every ``MIN_REFRESH``, so they span a few
    seconds at least), and the rates between the newest and one at least :data:`MIN_SPAN` older."""

    def __init__(self, now: float, totals: Dict[str, int], keep: int = 32):
        self._samples: deque = deque([(now, dict(totals))], maxlen=keep)

    def add(self, now: float, totals: Dict[str, int]) -> None:
        self._samples.append((now, dict(totals)))

    def rates(self) -> Optional[Dict[str, float]]:
        """Messages and bytes per second in and out, as the page's rate cards show them, and
        ``span_s`` they were taken over; None if the samples span less than 0.2 s."""
        t1, last = self._samples[-1]
        base = None
        for t0, totals in reversed(self._samples):
            if t1 - t0 >= MIN_SPAN:
                base = (t0, totals)
                break
        if base is None:
            t0, totals = self._samples[0]
            if t1 - t0 < _LEAST_SPAN:
                return None
            base = (t0, totals)
        t0, first = base
        span = t1 - t0
        out: Dict[str, float] = {name: max(last[key] - first[key], 0) / span
                                 for name, key in _KEYS}
        out["span_s"] = round(span, 3)
        return out


def inline(html: bytes, varz: bytes, streamz: bytes, connz: bytes,
           rates: Optional[Dict[str, float]], consumerz: bytes = b"null") -> bytes:
    """``html`` with the documents (JSON bytes, as the pages serve them) in its snapshot slot.
    ``<``, ``>`` and ``&`` are escaped in the JSON (``\\u003c``...: they can only be inside its
    strings), so a stream name such as ``</script>`` stays data."""
    doc = (b'{"varz":' + varz + b',"streamz":' + streamz + b',"connz":' + connz +
           b',"consumerz":' + consumerz + b',"rates":' + json.dumps(rates).encode() + b"}")
    doc = doc.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")
    return html.replace(SLOT, SLOT.replace(b">null<", b">" + doc + b"<"), 1)
