"""What the broker is doing, as JSON-able documents (in the manner of NATS's ``/varz``,
``/connz`` and ``/jsz``). Pure: each function reads a :class:`~zeps.broker.core.BrokerCore`
and the times it is given, changes nothing and reads no clock.

* :func:`varz` — the broker: uptime, clients by mode, traffic totals, INVALIDs by reason, limits;
* :func:`connz` — its clients (sessions): stream, mode, credit, position, lag, traffic;
* :func:`streamz` — its open streams: journal head and size, traffic, clients by mode, confirms;
* :func:`consumerz` — the durable consumers of its open streams: lag (messages and seconds),
  pending acknowledgements, members, redeliveries, dead letters (docs/consumers.md).

A subscriber's *mode* (:func:`mode_of`) is one of :data:`MODES`:

``live``
    fed from the live flow as messages are published;
``catching_up``
    historical with credit: the journal is replaying to it (``Stream.catching_up``);
``historical``
    behind the head and out of credit: only its position is kept until it grants more;
``congested``
    its connection's send pipe was full: nothing is produced for it until the back-off ends;
``not_subscribed``
    attached to a stream without a subscription (a publisher, say);
``unattached``
    connected (it spoke) but attached to no stream.

A subscriber's *lag* is the number of messages between its position and the journal head
(``head - next_seq + 1``; 0 when it has everything). Traffic is counted by the streams
(``zeps.broker.stream.COUNTERS``): messages in are appended records, messages out are DELIVERs
produced, bytes are what ZEPS/1 counts as credit (sequence, key and body).

A consumer's *lag* is the number of messages between its floor (everything up to it
acknowledged) and the journal head (``head - floor``); its *lag_seconds* how much older the first
message above its floor is than the newest one (0 when it has everything). Only consumers the
broker has loaded are listed: those of streams a consumer command named since the broker
started (``zeps.broker.consuming``), and of these the ones whose stream is open.

Given a :class:`Redactor`, the documents name no stream, consumer, client routing id, CurveZMQ
key, pattern or path: each is replaced by a keyed hash, stable while the key is (a monitoring
reader can still tell the streams and clients apart and follow them from poll to poll, not
learn or confirm a name the ACL hides from it); error texts are reduced to their kind.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections import Counter
from typing import Any, Dict, Optional

from zeps.protocol.reasons import LABELS

from .session import Session
from .stream import COUNTERS, Stream

MODES = ("live", "catching_up", "historical", "congested", "not_subscribed", "unattached")
#: How :func:`connz` can order clients (``lag``: most behind first).
SORTS = ("lag", "client", "stream", "idle", "credit")
#: How :func:`consumerz` can order consumers (``lag``, ``pending``: the most first).
CONSUMER_SORTS = ("lag", "pending", "outstanding", "stream")
#: JSON names of the stream counters, in the order of ``COUNTERS``.
_TRAFFIC = dict(zip(COUNTERS, ("in_msgs", "out_msgs", "in_bytes", "out_bytes")))


class Redactor:
    """Stands for names in the monitoring documents: ``kind:`` and 16 hex digits of an
    HMAC-SHA256 under ``key``, so the same name always reads the same, and nobody without the
    key can compute (or test a guess of) a name's stand-in. :data:`PATHS` are the entries of
    the broker's ``about`` (``/varz``) that hold file system paths: they are left out."""

    PATHS = ("data_dir",)

    def __init__(self, key: bytes):
        if len(key) < 16:
            raise ValueError("a redaction key needs at least 16 bytes")
        self._key = key
        self._memo: Dict[tuple, str] = {}

    def _hash(self, kind: str, value: bytes) -> str:
        memo = self._memo.get((kind, value))
        if memo is None:
            if len(self._memo) >= 65536:          # bounded however many names come and go
                self._memo.clear()
            digest = hmac.new(self._key, kind.encode() + b"\0" + value, hashlib.sha256)
            memo = self._memo[(kind, value)] = f"{kind}:{digest.hexdigest()[:16]}"
        return memo

    def stream(self, name: Optional[str]) -> Optional[str]:
        return None if name is None else self._hash("stream", name.encode("utf-8", "replace"))

    def client(self, identity: bytes) -> str:
        return self._hash("client", identity)

    def key(self, user: Optional[str]) -> Optional[str]:
        return None if user is None else self._hash("key", user.encode("utf-8", "replace"))

    def pattern(self, text: str) -> str:
        return self._hash("pattern", text.encode("utf-8", "replace"))

    def consumer(self, name: str) -> str:
        return self._hash("consumer", name.encode("utf-8", "replace"))

    @staticmethod
    def error(exc: BaseException) -> str:
        return type(exc).__name__                 # messages name files and streams


def read_token(path: str) -> bytes:
    """The monitoring token in ``path`` (``--monitor-token FILE``; surrounding white space
    ignored); ValueError with a one-line reason if it cannot be read or is not 16 to 1024
    visible ASCII characters."""
    try:
        with open(path, "rb") as f:
            token = f.read(4096).strip()
    except OSError as exc:
        raise ValueError(f"--monitor-token: cannot read {path}: {exc.strerror or exc}") from None
    if not 16 <= len(token) <= 1024 or any(not 0x21 <= b <= 0x7E for b in token):
        raise ValueError(f"--monitor-token: {path} must hold one token of 16 to 1024 visible "
                         "ASCII characters (e.g. python3 -c 'import secrets; "
                         "print(secrets.token_urlsafe(32))')")
    return token


def _mode(s: Session, congested, catching_up) -> str:
    if s.stream is None:
        return "unattached"
    if s.identity in congested:
        return "congested"
    if not s.next_seq:
        return "not_subscribed"
    if s.live:
        return "live"
    return "catching_up" if s.identity in catching_up else "historical"


def mode_of(core, s: Session) -> str:
    """The client's mode (see the module's docstring)."""
    st = core.streams.get(s.stream) if s.stream is not None else None
    return _mode(s, core.congested, st.catching_up if st is not None else ())


def _head(st: Optional[Stream]) -> Optional[int]:
    """The stream's last sequence; None if it is not open or its journal cannot say."""
    if st is None:
        return None
    try:
        return st.journal.last_seq
    except Exception:                 # a closed or broken journal: no head to measure from
        return None


def _lag(s: Session, head: Optional[int]) -> Optional[int]:
    if not s.next_seq or head is None:
        return None
    return max(head - s.next_seq + 1, 0)


def lag_of(core, s: Session) -> Optional[int]:
    """Messages between the subscriber's position and its stream's head; None if it does not
    subscribe."""
    return _lag(s, _head(core.streams.get(s.stream)) if s.stream is not None else None)


def client_doc(core, s: Session, now: float, head: Optional[int] = None,
               redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """One client's document (an entry of :func:`connz`); ``head`` is its stream's, if known;
    names hashed by ``redact`` if given."""
    st = core.streams.get(s.stream) if s.stream is not None else None
    if head is None:
        head = _head(st)
    patterns = [p.text for p, _start in s.subscriptions]
    g = s.consumer
    consumer = None if g is None else (redact.consumer(g.config.name) if redact
                                       else g.config.name)
    return {
        "client": redact.client(s.identity) if redact else s.identity.hex(),
        "user": redact.key(s.user) if redact else s.user,
        "stream": redact.stream(s.stream) if redact else s.stream,
        "mode": _mode(s, core.congested, st.catching_up if st is not None else ()),
        "credit": s.credit,
        "next_seq": s.next_seq or None,
        "lag": _lag(s, head),
        "subscriptions": [redact.pattern(p) for p in patterns] if redact else patterns,
        "delivered": s.delivered,
        "published": s.published,
        "confirms_pending": len(s.unconfirmed),
        "held": len(s.held),
        "idle_s": round(max(now - s.last_seen, 0.0), 3),
        "consumer": consumer,
    }


def stream_doc(core, st: Stream, redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """One open stream's document (an entry of :func:`streamz`); its name hashed and an error
    reduced to its kind by ``redact`` if given."""
    j = st.journal
    doc: Dict[str, Any] = {"name": redact.stream(st.name) if redact else st.name}
    try:
        info = j.info()
        doc.update(first_seq=info.first_seq, head_seq=info.last_seq,
                   messages=max(info.last_seq - info.first_seq + 1, 0),
                   size_bytes=info.size_bytes, segments=info.segments,
                   oldest_ts=info.oldest_ts or None, newest_ts=info.newest_ts or None,
                   durable_seq=j.durable_seq)
    except Exception as exc:          # a broken or closed journal: say so, show the rest
        doc["error"] = redact.error(exc) if redact else f"{type(exc).__name__}: {exc}"
    for counter, name in _TRAFFIC.items():
        doc[name] = getattr(st, counter)
    head = doc.get("head_seq")
    modes = dict.fromkeys(MODES[:-1], 0)
    max_lag = 0
    congested, catching_up = core.congested, st.catching_up
    for s in st.sessions.values():
        modes[_mode(s, congested, catching_up)] += 1
        lag = _lag(s, head)
        if lag is not None and lag > max_lag:
            max_lag = lag
    doc.update(clients=len(st.sessions), modes=modes, max_lag=max_lag,
               confirms_pending=sum(len(s.unconfirmed) for s in st.confirming.values()),
               publishers_waiting=len(st.confirming),
               consumers=len(core.consumers.get(st.name) or ()))
    return doc


def traffic(core) -> Dict[str, int]:
    """Traffic since the broker started: open streams plus those closed as idle."""
    totals = dict(core.released_counts)
    for st in core.streams.values():
        for counter in COUNTERS:
            totals[counter] += getattr(st, counter)
    return {_TRAFFIC[k]: v for k, v in totals.items()}


def varz(core, now: float, *, started: Optional[float] = None, wall_ns: Optional[int] = None,
         about: Optional[Dict[str, Any]] = None,
         redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """The broker as a whole. ``now`` and ``started`` are the core's clock (monotonic seconds);
    ``wall_ns`` the time of day to show; ``about`` what the shell knows (version, endpoint...),
    without its paths if ``redact`` is given; ``redacted`` says whether names are hashed."""
    modes = Counter(mode_of(core, s) for s in core.sessions.values())
    doc: Dict[str, Any] = {k: v for k, v in (about or {}).items()
                           if not (redact and k in Redactor.PATHS)}
    doc["redacted"] = redact is not None
    if wall_ns is not None:
        doc["now_ns"] = wall_ns
    if started is not None:
        doc["uptime_s"] = round(max(now - started, 0.0), 3)
    try:
        on_disk: Optional[int] = len(set(core.datadir.streams()) | set(core.streams))
    except OSError:
        on_disk = None
    doc.update(
        clients=len(core.sessions),
        modes={m: modes.get(m, 0) for m in MODES},
        streams_open=len(core.streams),
        streams=on_disk,
        **traffic(core),
        confirms_pending=sum(len(s.unconfirmed) for st in core.streams.values()
                             for s in st.confirming.values()),
        consumers=sum(len(gs) for n, gs in core.consumers.items() if n in core.streams),
        consumer_outstanding=core.outstanding.held,
        invalid={k: core.invalids.get(k, 0) for k in LABELS},
        invalid_frames=core.bad_frames_total,
        config=dataclasses.asdict(core.config),
    )
    return doc


def connz(core, now: float, *, sort: str = "lag", limit: Optional[int] = 1024, offset: int = 0,
          stream: Optional[str] = None, redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """The clients, ordered by ``sort`` (one of :data:`SORTS`), ``limit`` of them from
    ``offset`` (``limit=None``: all), only those attached to ``stream`` if given. Ordering
    looks at every client; documents are made for the page only. With ``redact``, names are
    hashed, ``stream`` is a hashed name and orders by name follow the hashes (the order of
    the names would tell something of them)."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
    sessions = list(core.sessions.values())
    ident = redact.client if redact else bytes
    name = redact.stream if redact else (lambda n: n)
    if stream is not None:
        sessions = [s for s in sessions if s.stream is not None and name(s.stream) == stream]
    heads = {n: _head(st) for n, st in core.streams.items()}
    if sort == "lag":                 # most behind first; clients that do not subscribe last
        def key(s):
            lag = _lag(s, heads.get(s.stream))
            return (1 if lag is None else -lag, ident(s.identity))
    elif sort == "client":
        def key(s):
            return ident(s.identity)
    elif sort == "stream":
        def key(s):
            return (name(s.stream) or "", ident(s.identity))
    elif sort == "idle":
        def key(s):
            return (s.last_seen, ident(s.identity))
    else:
        def key(s):
            return (-s.credit, ident(s.identity))
    sessions.sort(key=key)
    page = sessions[offset:] if limit is None else sessions[offset:offset + limit]
    return {"total": len(sessions), "offset": offset, "limit": limit, "sort": sort,
            "connections": [client_doc(core, s, now, heads.get(s.stream), redact)
                            for s in page]}


def streamz(core, *, limit: Optional[int] = None, offset: int = 0,
            redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """The open streams by name (by hashed name with ``redact``), ``limit`` of them from
    ``offset`` (``None``: all). Streams on disk that no client used lately are closed
    (``--max-open-streams``) and not listed; :func:`varz` counts them in ``streams``."""
    if redact:
        names = [n for _h, n in sorted((redact.stream(n), n) for n in core.streams)]
    else:
        names = sorted(core.streams)
    total = len(names)
    names = names[offset:] if limit is None else names[offset:offset + limit]
    return {"total": total, "offset": offset, "limit": limit,
            "streams": [stream_doc(core, core.streams[n], redact) for n in names]}


# ---------------------------------------------------------------------------- consumers

def _consumer_lag(g, head: Optional[int]) -> int:
    return 0 if head is None else max(head - g.floor, 0)


def consumer_doc(core, st: Stream, g, head: Optional[int] = None,
                 redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """One consumer's document (an entry of :func:`consumerz`): the fields of CONSUMER-INFO
    (``BrokerCore.consumer_info``), read without appending the stream's queued publishes;
    names (its own, its stream's, its dead-letter stream's, its patterns) hashed by
    ``redact`` if given. Reads at most one record of the journal (for ``lag_seconds``)."""
    if head is None:
        head = _head(st)
    floor = g.floor
    lag_seconds = 0.0
    if head is not None and floor < head:
        try:
            newest = st.journal.newest_ts
            recs = st.journal.read_batch(max(floor + 1, st.first_seq), max_records=1)
        except Exception:             # a broken journal or record: no age to tell
            recs = None
        if recs:                      # the first message above the floor (compaction gaps too)
            lag_seconds = max(0.0, (newest - recs[0].timestamp) / 1e9)
    config = g.config.to_json()
    name = g.config.name
    if redact:
        name = redact.consumer(name)
        config["name"] = name
        config["patterns"] = [redact.pattern(p) for p in config["patterns"]]
        if config.get("dead_letter"):
            config["dead_letter"] = redact.stream(config["dead_letter"])
    return {"name": name, "stream": redact.stream(st.name) if redact else st.name,
            "config": config, "floor": floor, "next": g.next, "last": head,
            "lag": _consumer_lag(g, head), "lag_seconds": round(lag_seconds, 3),
            "pending": g.pending, "outstanding": len(g.out), "members": len(g.members),
            "paused": core.outstanding.reason().text if g.held_back() else "",
            **g.counters}


def consumerz(core, *, sort: str = "lag", limit: Optional[int] = 1024, offset: int = 0,
              stream: Optional[str] = None,
              redact: Optional[Redactor] = None) -> Dict[str, Any]:
    """The consumers of the open streams, ordered by ``sort`` (one of
    :data:`CONSUMER_SORTS`: ``lag``, ``pending`` and ``outstanding`` the most first (the last
    finds those holding the broker's budget, members or not), ``stream`` by stream and
    name), ``limit`` of them from ``offset`` (``None``: all), only those of ``stream`` if given
    (a hashed name with ``redact``). Ordering looks at every consumer (O(1) each, O(members)
    for ``pending``); documents, each reading one journal record, are made for the page only."""
    if sort not in CONSUMER_SORTS:
        raise ValueError(f"sort must be one of {', '.join(CONSUMER_SORTS)}, not {sort!r}")
    sname = redact.stream if redact else (lambda n: n)
    cname = redact.consumer if redact else (lambda n: n)
    rows = []
    heads: Dict[str, Optional[int]] = {}
    for sn, gs in core.consumers.items():
        st = core.streams.get(sn)
        if st is None or not gs or (stream is not None and sname(sn) != stream):
            continue
        heads[sn] = _head(st)
        rows.extend((st, g) for g in gs.values())
    if sort == "lag":
        def key(r):
            st, g = r
            return (-_consumer_lag(g, heads[st.name]), sname(st.name), cname(g.config.name))
    elif sort == "pending":
        def key(r):
            st, g = r
            return (-g.pending, sname(st.name), cname(g.config.name))
    elif sort == "outstanding":
        def key(r):
            st, g = r
            return (-len(g.out), sname(st.name), cname(g.config.name))
    else:
        def key(r):
            st, g = r
            return (sname(st.name), cname(g.config.name))
    rows.sort(key=key)
    page = rows[offset:] if limit is None else rows[offset:offset + limit]
    return {"total": len(rows), "offset": offset, "limit": limit, "sort": sort,
            "consumers": [consumer_doc(core, st, g, heads[st.name], redact)
                          for st, g in page]}
