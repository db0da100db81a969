"""The monitoring port (``zeps broker --monitor HOST:PORT``): a small gevent HTTP server in the
broker's process, beside the ZeroMQ loop.

=============  ==============================================================================
``/``          the live dashboard (``dashboard.html``, ``.js``, ``.css``: plain files, no build;
               the page comes with its first poll's documents, :mod:`zeps.broker.dashboard`)
``/varz``      the broker (JSON, :func:`zeps.broker.monitor.varz`)
``/connz``     its clients; ``?sort=lag|client|stream|idle|credit&limit=N&offset=N&stream=S``
``/streamz``   its open streams; ``?limit=N&offset=N`` (limit 1024 unless given)
``/consumerz`` the durable consumers; ``?sort=lag|pending|outstanding|stream&limit=N&``
               ``offset=N&stream=S`` (:func:`zeps.broker.monitor.consumerz`)
``/metrics``   Prometheus (:mod:`zeps.broker.metrics`)
``/healthz``   ``{"status": "ok"}`` while the broker runs
=============  ==============================================================================

Every request runs in a greenlet of the broker's own process, between two rounds of the broker's
loop, so a document is a consistent snapshot of the core; it is also work the loop does not do
meanwhile (with 10,000 clients: ~10 ms for ``/connz?limit=200``, ~30 ms for ``/metrics``). What
HTTP clients can cost the broker's ZeroMQ clients is bounded:

* requests are served at most :data:`MAX_RATE` per second (beyond a burst of
  :data:`BURST`): the others sleep until their turn before anything is done for them
  but the token's check; with a token, those that carry it have a schedule of their own;
* a document is made at most once per :data:`MIN_REFRESH` seconds for a given query (clients
  polling in a loop get the same snapshot); at most :data:`CACHE_KEYS` documents of
  :data:`CACHE_BYTES` in all (besides the newest) are remembered;
* making documents may take at most :data:`BUDGET` of each second, on average (a document
  that took longer is paid from the next seconds'); beyond that a query is answered with its
  last document, however old, or ``503`` with ``Retry-After: 1`` if there is none (a flood
  of distinct queries);
* the whole head of a request (request line and headers, at most :data:`MAX_HEAD` bytes) must
  arrive within :data:`HEAD_TIMEOUT` seconds of the server starting to wait for it (from the
  connection, or from the previous answer on a kept-alive one), however steadily its bytes
  trickle in; otherwise the connection is closed. Sending an answer to a client that does not
  read it may take at most :data:`IDLE_TIMEOUT` seconds;
* each connection is its own greenlet (no pool that slow clients could fill): at most
  :data:`MAX_CONNECTIONS` are kept, and when a new one arrives beyond that, the connection
  that has waited longest for a request head that is still incomplete (or for a client to
  read its answer, or for its turn without the token) is closed to make room; so a client
  sending its request at once is served, whatever slow clients hold, and a holder of the
  token whatever a flood without it holds. Only when every connection is in the middle of
  making its answer (one document) is the new one closed instead;
* a connection is taken from the kernel once its client has sent something, or after about
  :data:`DEFER_ACCEPT` seconds (Linux's ``TCP_DEFER_ACCEPT``; elsewhere at once). Without
  it, slow clients that reconnect as soon as they are closed displaced each other about
  4,000 times a second on 127.0.0.1 (tests/test_monitor.py's slowloris test: about 770 in
  0.15 to 0.23 s), and a client accepted before its request's bytes came (on a loaded
  machine) was displaced among them, 63 displacements later, within about 15 ms. Taken
  with its bytes, it reads its request before newer connections can displace it, and a
  reconnected slow client waits in the kernel until it sends (the same test: 1 displacement
  while the well-behaved client made its 20 requests);
* only GET and HEAD are served, and a request body is never read (the connection is closed
  after the answer).

What the port shows, and to whom (docs/operations.md, Monitoring): given a ``token``, every page
but ``/healthz`` and the dashboard's own files (which then show nothing of the broker: the
page comes without its first poll) needs
``Authorization: Bearer TOKEN`` (compared in constant time; ``401`` otherwise). Given a
``redact`` (:class:`zeps.broker.monitor.Redactor`), the documents and ``/metrics`` name no
stream, client, key, pattern or path, only stable hashes of them. Neither encrypts: bind the
port to a loopback or private address, or put it behind a TLS proxy.
"""
from __future__ import annotations

import hmac
import json
import re
import socket
import time
from http.client import HTTPException
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple
from urllib.parse import parse_qs

import gevent
from gevent.pywsgi import WSGIHandler, WSGIServer

from . import dashboard, monitor

MAX_CONNECTIONS = 64
DEFER_ACCEPT = 1
HEAD_TIMEOUT = 10.0
MAX_HEAD = 32 << 10
IDLE_TIMEOUT = 10.0
MIN_REFRESH = 0.25
BUDGET = 0.25
MAX_RATE = 100.0
BURST = 20
MAX_LIMIT = 100_000
DEFAULT_LIMIT = 1024           # a page's entries unless ?limit= says otherwise
CACHE_KEYS = 64
CACHE_BYTES = 32 << 20
_DIGITS = re.compile(r"[0-9]{1,7}")

_STATIC = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/index.html": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
#: Served without the token: they show nothing of the broker (the page asks for the token).
_OPEN = frozenset(_STATIC) | {"/healthz"}
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
    # ASCII digits only, and few of them, before int(): str.isdigit() takes "²", and int()
    # refuses more than 4,300 digits (both were a 500 and an error in the log)
    if not _DIGITS.fullmatch(v) or int(v) > MAX_LIMIT:
        raise BadRequest(f"{name} must be a whole number from 0 to {MAX_LIMIT}, not {v!r}")
    return int(v)


def _check_args(query: Dict[str, list], allowed: Tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise BadRequest(f"unknown parameter {unknown[0]!r}; this page takes "
                         f"{', '.join(allowed) or 'none'}")


class _HeadTooLarge(ValueError):
    """The request line and headers are more than MAX_HEAD bytes."""


def _raw_answer(status: str, reason: str) -> bytes:
    """A whole answer, for what is refused before the application sees it."""
    body = json.dumps({"error": reason}).encode()
    return (f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: {_JSON}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


_TOO_LARGE = _raw_answer("431 Request Header Fields Too Large",
                         f"request line and headers larger than {MAX_HEAD} bytes")
_BAD_HEAD = _raw_answer("400 Bad Request", "malformed request headers")


class _BoundedHead:
    """The connection's reader while headers are parsed: it hands out at most ``left`` bytes
    in all (``http.client`` alone would take 100 lines of 64 KiB each)."""

    def __init__(self, rfile, left: int):
        self.rfile, self.left = rfile, left

    def readline(self, limit: int = -1) -> bytes:
        if self.left <= 0:
            raise _HeadTooLarge(f"request head larger than {MAX_HEAD} bytes")
        line = self.rfile.readline(self.left if limit is None or limit < 0
                                   else min(limit, self.left))
        self.left -= len(line)
        if self.left <= 0 and not line.endswith(b"\n"):
            raise _HeadTooLarge(f"request head larger than {MAX_HEAD} bytes")
        return line


class _Connection:
    """What the server knows of one connection: its greenlet, whether it may be
    closed to make room for a new one (it waits for a request head, or for its client to
    read an answer: not while its answer is being made), and since when."""

    __slots__ = ("greenlet", "evictable", "since")

    def __init__(self, greenlet, since: float):
        self.greenlet, self.evictable, self.since = greenlet, True, since


class _Server(WSGIServer):
    """pywsgi's server with one greenlet per connection, at most ``max_connections`` of them:
    beyond, the connection evictable the longest is closed for the new one (the new one is
    closed only if none is evictable). Accepts at most half of that in one go, so that a
    connection accepted runs (and reads what its client sent) before newer ones can displace
    it."""

    def __init__(self, address, app, *, max_connections: int, head_timeout: float,
                 idle_timeout: float, clock: Callable[[], float]):
        self.connections: Dict[object, _Connection] = {}
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.evicted = 0
        super().__init__(address, app, spawn=self._spawn_connection, handler_class=_Handler,
                         log=None, error_log=None)
        self.max_accept = max(1, max_connections // 2)

    def init_socket(self):
        super().init_socket()
        if hasattr(socket, "TCP_DEFER_ACCEPT"):          # Linux (see DEFER_ACCEPT)
            try:
                self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT)
            except OSError:       # a network stack that refuses it: accepted at once, as elsewhere
                pass

    def _spawn_connection(self, func, *args):
        sock = args[-1][0]                 # (handle, close, (client socket, address))
        if len(self.connections) >= self.max_connections and not self._evict_one():
            sock.close()                   # every connection is being answered: come back
            return None
        g = gevent.Greenlet(func, *args)
        self.connections[g] = _Connection(g, self.clock())
        g.link(lambda _g: self._gone(g, sock))
        g.start()
        return g

    def _evict_one(self) -> bool:
        victims = [c for c in self.connections.values() if c.evictable]
        if not victims:
            return False
        victim = min(victims, key=lambda c: c.since)
        del self.connections[victim.greenlet]
        self.evicted += 1
        victim.greenlet.kill(block=False)  # its handler closes the socket (or _gone does)
        return True

    def _gone(self, g, sock) -> None:
        """A connection's greenlet ended (or was killed before it ran): forget it, and close
        its socket if its handler did not."""
        self.connections.pop(g, None)
        try:
            sock.close()
        except OSError:
            pass

    def stop(self, timeout=None):
        """Stop accepting; the connections get ``timeout`` seconds to finish, then are closed."""
        super().stop(timeout)
        running = list(self.connections)
        gevent.joinall(running, timeout=self.stop_timeout if timeout is None else timeout)
        gevent.killall([g for g in running if not g.dead], block=True, timeout=1)

    def phase(self, evictable: bool) -> None:
        """The calling connection's greenlet starts waiting (True) or working (False)."""
        conn = self.connections.get(gevent.getcurrent())
        if conn is not None:
            conn.evictable, conn.since = evictable, self.clock()


class _Handler(WSGIHandler):
    """pywsgi's handler with a deadline on each request head as a whole (not on each read: a
    client sending a byte now and then is still closed in time), a bound on its size, a time
    limit on each send, and no request body read."""

    _head_timer = None

    def handle(self):
        self.socket.settimeout(self.server.idle_timeout)
        try:
            super().handle()
        finally:
            if self._head_timer is not None:
                self._head_timer.cancel()

    def handle_one_request(self):
        server = self.server
        server.phase(True)                 # waiting for a request head
        self._head_timer = timer = gevent.Timeout(server.head_timeout)
        timer.start()
        try:
            return super().handle_one_request()
        except gevent.Timeout as t:
            if t is not timer:
                raise
            return None                    # too slow: closed without an answer
        finally:
            timer.cancel()

    def read_request(self, raw_requestline):
        rfile = self.rfile
        self.rfile = _BoundedHead(rfile, MAX_HEAD - len(raw_requestline))
        try:
            ok = super().read_request(raw_requestline)
        finally:
            self.rfile = rfile
            self._head_timer.cancel()      # the head is in: from here, answering
            self.server.phase(False)
        if ok and (self.content_length or "chunked" in self.headers.get(
                "transfer-encoding", "").lower()):
            # GET and HEAD have no body: none is read (a slow one would hold the connection).
            del self.headers["transfer-encoding"]
            del self.headers["content-length"]
            self.content_length = 0
            self.close_connection = True
        return ok

    def process_result(self):
        self.server.phase(True)            # sending: waits for the client to read
        super().process_result()

    def _handle_client_error(self, ex):
        if isinstance(ex, OSError):        # timed out or reset while sending its request
            return None
        if isinstance(ex, _HeadTooLarge):
            return ("431", _TOO_LARGE)
        if isinstance(ex, HTTPException):  # more than 100 header lines, say
            return ("400", _BAD_HEAD)
        return super()._handle_client_error(ex)


class MonitorServer:
    """Serves the monitoring pages of one broker core. ``clock`` is the core's clock (uptime,
    idleness, the refresh, budget and rate schedules), ``wall_ns`` the time of day, ``timer``
    measures the work of making a document, ``sleep`` waits for a request's turn; ``about`` is
    shown at the top of ``/varz`` (version, endpoint, data dir...). ``token`` (bytes): the
    bearer token every page but :data:`_OPEN` needs; ``redact``: a
    :class:`~zeps.broker.monitor.Redactor` that hashes names in every document (``metrics``
    is given its own)."""

    def __init__(self, core, host: str, port: int, *, metrics=None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ns: Callable[[], int] = time.time_ns, about: Optional[dict] = None,
                 log=None, max_connections: int = MAX_CONNECTIONS,
                 head_timeout: float = HEAD_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT, min_refresh: float = MIN_REFRESH,
                 budget: float = BUDGET, max_rate: float = MAX_RATE, burst: int = BURST,
                 cache_bytes: int = CACHE_BYTES,
                 sleep: Callable[[float], None] = gevent.sleep,
                 timer: Callable[[], float] = time.perf_counter,
                 token: Optional[bytes] = None, redact: Optional[monitor.Redactor] = None):
        if token is not None and not token:
            raise ValueError("an empty monitoring token")
        self.core = core
        self.token = token
        self.redact = redact
        self.metrics = metrics
        self.clock = clock
        self.wall_ns = wall_ns
        self.about = dict(about or {})
        self.log = log
        self.started = clock()
        self.min_refresh = min_refresh
        self.budget = budget
        self._cache: Dict[tuple, Tuple[float, bytes]] = {}   # the oldest made first
        self._cache_bytes = 0                 # the bodies' bytes in _cache
        self.cache_bytes = cache_bytes
        self._second = float("-inf")          # when the budget was last counted
        self._spent = 0.0                     # seconds spent making documents, not paid back
        self.interval = 1.0 / max_rate
        self.burst = burst
        self.sleep = sleep
        self.timer = timer                    # measures the work of making documents
        self._next_turn = float("-inf")       # when the next request may be served
        self._next_trusted = float("-inf")    # the same, for requests with the token
        self.sampler = dashboard.TrafficSampler(self.started, monitor.traffic(core))
        self.server = _Server((host, port), self.app, max_connections=max_connections,
                              head_timeout=head_timeout, idle_timeout=idle_timeout,
                              clock=time.monotonic)
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
    def _wait_turn(self, trusted: bool) -> None:
        """Serve at most ``max_rate`` requests per second beyond a burst: each request takes
        the next turn, one ``interval`` after the previous one, and sleeps until it. With a
        token, the requests that carry it have a schedule of their own: a flood without it
        (refused, or for the open pages) waits in the other one and delays no holder of the
        token (it was checked after the wait: each request without the token pushed back
        the turns of those with it)."""
        now = self.clock()
        which = "_next_trusted" if trusted else "_next_turn"
        turn = max(getattr(self, which), now - (self.burst - 1) * self.interval)
        if not trusted:
            # at most max_connections wait (a turn further ahead was taken by requests
            # closed since to make room: a flood's 10,000 pushed it 100 s ahead)
            turn = min(turn, now + self.server.max_connections * self.interval)
        setattr(self, which, turn + self.interval)
        if turn - now > 1e-6:               # (not a rounding error's worth)
            if trusted:
                self.sleep(turn - now)
                return
            # nothing was done for it yet: its connection may make room for a new one
            # meanwhile (those waiting their turn held every place, and each new
            # connection, the token holder's too, was closed at once)
            self.server.phase(True)
            self.sleep(turn - now)
            self.server.phase(False)

    def app(self, environ, start_response):
        """The WSGI application: one request, one answer (JSON errors with a reason). The
        token is checked before the request waits for its turn (:meth:`_wait_turn`)."""
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        closed = self.token is not None and path not in _OPEN
        authorized = closed and self._authorized(environ)
        self._wait_turn(authorized)
        if closed and not authorized:
            return self._reply(start_response, "401 Unauthorized", self._error(
                "this page needs the monitoring token: Authorization: Bearer TOKEN"), _JSON,
                extra=[("WWW-Authenticate", 'Bearer realm="zeps"')], head=method == "HEAD")
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
                monitor.Redactor.error(exc) if self.redact else f"{type(exc).__name__}: {exc}"
            ), _JSON
        return self._reply(start_response, status, body, ctype, head=method == "HEAD")

    def _authorized(self, environ) -> bool:
        """Whether the request carries ``Authorization: Bearer <the token>`` (the comparison
        takes the same time wherever the two differ)."""
        scheme, _, given = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode("latin-1", "replace"), self.token)

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
            if name == "dashboard.html":
                return "200 OK", self._page(), ctype
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
            return "200 OK", self._cached(("varz",), self._varz), _JSON
        if path == "/connz":
            _check_args(query, ("sort", "limit", "offset", "stream"))
            sort = (query.get("sort") or ["lag"])[-1]
            if sort not in monitor.SORTS:
                raise BadRequest(f"sort must be one of {', '.join(monitor.SORTS)}, not {sort!r}")
            stream = (query.get("stream") or [None])[-1]
            limit = _int_arg(query, "limit", DEFAULT_LIMIT)
            offset = _int_arg(query, "offset", 0)
            return "200 OK", self._cached(("connz", sort, stream, limit, offset), lambda: self._json(
                monitor.connz(self.core, self.clock(), sort=sort, limit=limit, offset=offset,
                              stream=stream, redact=self.redact))), _JSON
        if path == "/streamz":
            _check_args(query, ("limit", "offset"))
            limit = _int_arg(query, "limit", DEFAULT_LIMIT)
            offset = _int_arg(query, "offset", 0)
            return "200 OK", self._cached(("streamz", limit, offset), lambda: self._json(
                monitor.streamz(self.core, limit=limit, offset=offset,
                                redact=self.redact))), _JSON
        if path == "/consumerz":
            _check_args(query, ("sort", "limit", "offset", "stream"))
            sort = (query.get("sort") or ["lag"])[-1]
            if sort not in monitor.CONSUMER_SORTS:
                raise BadRequest(f"sort must be one of {', '.join(monitor.CONSUMER_SORTS)}, "
                                 f"not {sort!r}")
            stream = (query.get("stream") or [None])[-1]
            limit = _int_arg(query, "limit", DEFAULT_LIMIT)
            offset = _int_arg(query, "offset", 0)
            return "200 OK", self._cached(
                ("consumerz", sort, stream, limit, offset), lambda: self._json(
                    monitor.consumerz(self.core, sort=sort, limit=limit, offset=offset,
                                      stream=stream, redact=self.redact))), _JSON
        return "404 Not Found", self._error(
            f"no page {path!r}: try /, /varz, /connz, /streamz, /consumerz, /metrics, "
            f"/healthz"), _JSON

    def _varz(self) -> bytes:
        now = self.clock()
        doc = monitor.varz(self.core, now, started=self.started, wall_ns=self.wall_ns(),
                           about=self.about, redact=self.redact)
        self.sampler.add(now, doc)
        return self._json(doc)

    def _page(self) -> bytes:
        """The dashboard with the documents of its first poll inline (``zeps.broker.dashboard``):
        not with a token (the page is served without it), nor when the budget is spent."""
        html = (_HERE / "dashboard.html").read_bytes()
        if self.token is not None:
            return html
        try:
            varz = self._cached(("varz",), self._varz)
            streamz = self._cached(("streamz", DEFAULT_LIMIT, 0), lambda: self._json(
                monitor.streamz(self.core, limit=DEFAULT_LIMIT, offset=0, redact=self.redact)))
            connz = self._cached(("connz", "lag", None, dashboard.CLIENT_ROWS, 0),
                                 lambda: self._json(monitor.connz(
                                     self.core, self.clock(), sort="lag",
                                     limit=dashboard.CLIENT_ROWS, offset=0, redact=self.redact)))
            consumerz = self._cached(("consumerz", "lag", None, dashboard.CONSUMER_ROWS, 0),
                                     lambda: self._json(monitor.consumerz(
                                         self.core, sort="lag", limit=dashboard.CONSUMER_ROWS,
                                         offset=0, redact=self.redact)))
        except Busy:
            return html
        return dashboard.inline(html, varz, streamz, connz, self.sampler.rates(), consumerz)

    @staticmethod
    def _json(doc) -> bytes:
        return json.dumps(doc, ensure_ascii=False).encode("utf-8")

    def _cached(self, key: tuple, make: Callable[[], bytes]) -> bytes:
        """The document for ``key``, made again only if the last one is older than
        ``min_refresh`` seconds and if the ``budget`` of seconds a second is not spent; else
        the last one, however old, or :class:`Busy` if there is none. The budget is a
        bucket: a document that took longer than a second's budget is paid from the next
        seconds' (one slow document a second took 0.5 s of each, and the next request met a
        spent budget and no fresh copy: 503s only).

        At most :data:`CACHE_KEYS` documents are remembered, of at most ``cache_bytes`` in all
        besides the newest; the oldest made is forgotten first (a ``/connz`` page may list
        100,000 clients, and 64 such pages were kept whatever their size)."""
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.min_refresh:
            return hit[1]
        self._spent = max(0.0, self._spent - (now - self._second) * self.budget)
        self._second = now
        if self._spent >= self.budget:
            if hit is not None:
                return hit[1]
            raise Busy(f"the broker spent its {self.budget:g} s per second on monitoring "
                       f"documents already: retry in a second")
        t0 = self.timer()
        body = make()
        self._spent += self.timer() - t0
        cache = self._cache
        old = cache.pop(key, None)
        if old is not None:
            self._cache_bytes -= len(old[1])
        while cache and (len(cache) >= CACHE_KEYS
                         or self._cache_bytes + len(body) > self.cache_bytes):
            self._cache_bytes -= len(cache.pop(next(iter(cache)))[1])
        cache[key] = (self.clock(), body)              # as old as it is once made
        self._cache_bytes += len(body)
        return body
