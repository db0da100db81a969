"""The monitoring port (``zeps broker --monitor HOST:PORT``): a small gevent HTTP server in the
broker's process, beside the ZeroMQ loop.

=============  ==============================================================================
``/``          the live dashboard (``dashboard.html``, ``.js``, ``.css``: plain files, no build)
``/varz``      the broker (JSON, :func:`zeps.broker.monitor.varz`)
``/connz``     its clients; ``?sort=lag|client|stream|idle|credit&limit=N&offset=N&stream=S``
``/streamz``   its open streams; ``?limit=N&offset=N``
``/metrics``   Prometheus (:mod:`zeps.broker.metrics`)
``/healthz``   ``{"status": "ok"}`` while the broker runs
=============  ==============================================================================

Every request runs in a greenlet of the broker's own process, between two rounds of the broker's
loop, so a document is a consistent snapshot of the core; it is also work the loop does not do
meanwhile (with 10,000 clients: ~10 ms for ``/connz?limit=200``, ~30 ms for ``/metrics``). What
HTTP clients can cost the broker's ZeroMQ clients is bounded:

* requests are served at most :data:`MAX_RATE` per second (beyond a burst of
  :data:`BURST`): the others sleep until their turn before anything is done for them;
* a document is made at most once per :data:`MIN_REFRESH` seconds for a given query (clients
  polling in a loop get the same snapshot);
* making documents may take at most :data:`BUDGET` of each second (a flood of distinct queries
  gets ``503`` with ``Retry-After: 1`` beyond that);
* at most :data:`MAX_CONNECTIONS` connections are served at once (more wait in the kernel's
  accept queue), and one that sends or reads nothing for :data:`IDLE_TIMEOUT` seconds is closed;
* only GET and HEAD are served.

The port has no authentication: bind it to a loopback or private address (docs/operations.md,
Monitoring).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple
from urllib.parse import parse_qs

import gevent.pool
from gevent.pywsgi import WSGIHandler, WSGIServer

from . import monitor

MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 10.0
MIN_REFRESH = 0.25
BUDGET = 0.25
MAX_RATE = 100.0
BURST = 20
MAX_LIMIT = 100_000

_STATIC = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/index.html": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
_HERE = Path(__file__).resolve().parent
_JSON = "application/json"
#: The dashboard loads nothing but its own files and talks to nothing but this port: even a
#: stream name that smuggled markup past the page's escaping could not run a script.
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class BadRequest(ValueError):
    """A query the monitor does not understand (answered 400 with the reason)."""


class Busy(Exception):
    """This second's budget for making documents is spent (answered 503, Retry-After: 1)."""


def _int_arg(query: Dict[str, list], name: str, default: Optional[int]) -> Optional[int]:
    values = query.get(name)
    if not values:
        return default
    v = values[-1]
    if not v.isdigit() or int(v) > MAX_LIMIT:
        raise BadRequest(f"{name} must be a whole number from 0 to {MAX_LIMIT}, not {v!r}")
    return int(v)


def _check_args(query: Dict[str, list], allowed: Tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise BadRequest(f"unknown parameter {unknown[0]!r}; this page takes "
                         f"{', '.join(allowed) or 'none'}")


class _Handler(WSGIHandler):
    """pywsgi's handler with a time limit on each read and write of the connection."""

    def handle(self):
        self.socket.settimeout(self.server.idle_timeout)
        super().handle()

    def _handle_client_error(self, ex):
        if isinstance(ex, OSError):        # timed out or reset while sending its request
            return None
        return super()._handle_client_error(ex)


class MonitorServer:
    """Serves the monitoring pages of one broker core. ``clock`` is the core's clock (uptime,
    idleness, the refresh, budget and rate schedules), ``wall_ns`` the time of day, ``timer``
    measures the work of making a document, ``sleep`` waits for a request's turn; ``about`` is
    shown at the top of ``/varz`` (version, endpoint, data dir...)."""

    def __init__(self, core, host: str, port: int, *, metrics=None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ns: Callable[[], int] = time.time_ns, about: Optional[dict] = None,
                 log=None, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout: float = IDLE_TIMEOUT, min_refresh: float = MIN_REFRESH,
                 budget: float = BUDGET, max_rate: float = MAX_RATE, burst: int = BURST,
                 sleep: Callable[[float], None] = gevent.sleep,
                 timer: Callable[[], float] = time.perf_counter):
        self.core = core
        self.metrics = metrics
        self.clock = clock
        self.wall_ns = wall_ns
        self.about = dict(about or {})
        self.log = log
        self.started = clock()
        self.min_refresh = min_refresh
        self.budget = budget
        self._cache: Dict[tuple, Tuple[float, bytes]] = {}
        self._second = float("-inf")          # start of the current budget second
        self._spent = 0.0                     # seconds spent making documents in it
        self.interval = 1.0 / max_rate
        self.burst = burst
        self.sleep = sleep
        self.timer = timer                    # measures the work of making documents
        self._next_turn = float("-inf")       # when the next request may be served
        self.server = WSGIServer((host, port), self.app, spawn=gevent.pool.Pool(max_connections),
                                 handler_class=_Handler, log=None, error_log=None)
        self.server.idle_timeout = idle_timeout
        self.url = ""

    def start(self) -> "MonitorServer":
        """Bind and serve (in the background, as gevent does); ``url`` says where."""
        self.server.start()
        host, port = self.server.address[:2]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        self.about["monitor"] = self.url
        return self

    def stop(self) -> None:
        """Stop serving (requests under way get a second to finish)."""
        self.server.stop(timeout=1)

    # ------------------------------------------------------------------ WSGI
    def _wait_turn(self) -> None:
        """Serve at most ``max_rate`` requests per second beyond a burst: each request takes
        the next turn, one ``interval`` after the previous one, and sleeps until it."""
        now = self.clock()
        turn = max(self._next_turn, now - (self.burst - 1) * self.interval)
        self._next_turn = turn + self.interval
        if turn - now > 1e-6:               # (not a rounding error's worth)
            self.sleep(turn - now)

    def app(self, environ, start_response):
        """The WSGI application: one request, one answer (JSON errors with a reason)."""
        self._wait_turn()
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        if method not in ("GET", "HEAD"):
            return self._reply(start_response, "405 Method Not Allowed",
                               self._error("only GET and HEAD are served"), _JSON,
                               extra=[("Allow", "GET, HEAD")], head=False)
        try:
            status, body, ctype = self._route(path, environ.get("QUERY_STRING", ""))
        except BadRequest as exc:
            status, body, ctype = "400 Bad Request", self._error(str(exc)), _JSON
        except Busy as exc:
            return self._reply(start_response, "503 Service Unavailable", self._error(str(exc)),
                               _JSON, extra=[("Retry-After", "1")], head=method == "HEAD")
        except Exception as exc:          # a bug here must not stop the broker: say it, go on
            if self.log is not None:
                self.log.error("monitor_failed", path=path, error=f"{type(exc).__name__}: {exc}")
            status, body, ctype = "500 Internal Server Error", self._error(
                f"{type(exc).__name__}: {exc}"), _JSON
        return self._reply(start_response, status, body, ctype, head=method == "HEAD")

    @staticmethod
    def _error(reason: str) -> bytes:
        return json.dumps({"error": reason}).encode()

    @staticmethod
    def _reply(start_response, status, body: bytes, ctype: str, extra=(), head=False):
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))),
                   ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                   *extra]
        if ctype.startswith("text/html"):
            headers.append(("Content-Security-Policy", _CSP))
        start_response(status, headers)
        return [b""] if head else [body]

    def _route(self, path: str, qs: str) -> Tuple[str, bytes, str]:
        if path in _STATIC:
            name, ctype = _STATIC[path]
            return "200 OK", (_HERE / name).read_bytes(), ctype
        query = parse_qs(qs, keep_blank_values=True)
        if path == "/healthz":
            _check_args(query, ())
            return "200 OK", b'{"status": "ok"}', _JSON
        if path == "/metrics":
            _check_args(query, ())
            if self.metrics is None:
                return "404 Not Found", self._error("metrics are off"), _JSON
            from .metrics import CONTENT_TYPE
            return "200 OK", self._cached(("metrics",), self.metrics.exposition), CONTENT_TYPE
        if path == "/varz":
            _check_args(query, ())
            return "200 OK", self._cached(("varz",), lambda: self._json(monitor.varz(
                self.core, self.clock(), started=self.started, wall_ns=self.wall_ns(),
                about=self.about))), _JSON
        if path == "/connz":
            _check_args(query, ("sort", "limit", "offset", "stream"))
            sort = (query.get("sort") or ["lag"])[-1]
            if sort not in monitor.SORTS:
                raise BadRequest(f"sort must be one of {', '.join(monitor.SORTS)}, not {sort!r}")
            stream = (query.get("stream") or [None])[-1]
            limit = _int_arg(query, "limit", 1024)
            offset = _int_arg(query, "offset", 0)
            return "200 OK", self._cached(("connz", sort, stream, limit, offset), lambda: self._json(
                monitor.connz(self.core, self.clock(), sort=sort, limit=limit, offset=offset,
                              stream=stream))), _JSON
        if path == "/streamz":
            _check_args(query, ("limit", "offset"))
            limit = _int_arg(query, "limit", None)
            offset = _int_arg(query, "offset", 0)
            return "200 OK", self._cached(("streamz", limit, offset), lambda: self._json(
                monitor.streamz(self.core, limit=limit, offset=offset))), _JSON
        return "404 Not Found", self._error(
            f"no page {path!r}: try /, /varz, /connz, /streamz, /metrics, /healthz"), _JSON

    @staticmethod
    def _json(doc) -> bytes:
        return json.dumps(doc, ensure_ascii=False).encode("utf-8")

    def _cached(self, key: tuple, make: Callable[[], bytes]) -> bytes:
        """The document for ``key``, made again only if the last one is older than
        ``min_refresh`` seconds (at most 64 keys are remembered) and if this second's
        ``budget`` is not spent (:class:`Busy` otherwise)."""
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.min_refresh:
            return hit[1]
        if now - self._second >= 1.0:
            self._second, self._spent = now, 0.0
        if self._spent >= self.budget:
            raise Busy(f"the broker spent its {self.budget:g} s per second on monitoring "
                       f"documents already: retry in a second")
        t0 = self.timer()
        body = make()
        self._spent += self.timer() - t0
        if len(self._cache) >= 64:
            self._cache.clear()
        self._cache[key] = (now, body)
        return body
