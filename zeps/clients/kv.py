"""A key-value view of a stream (issue 18 item 4): :class:`KVMap` (blocking) and
:class:`AsyncKVMap` (asyncio), a local ``dict`` kept in sync with a stream's keys, as NATS's
KV buckets or a Kafka compacted topic read into a table.

**How it stays in sync.** It takes a snapshot of the keys under its ``prefix`` (SNAPSHOT: every
live key's latest message, consistent at a sequence ``seq``), then subscribes from ``seq + 1``
and applies every message in order: a body sets its key, an empty body (a tombstone) deletes it.
No gap, no duplicate. Across reconnects the client's subscription resumes from the last
sequence applied + 1 (the SDK's position), so nothing is taken twice or missed and no new
snapshot is needed. The stream needs the last-value index (a compacted stream, or a broker run
with ``--key-index``). A map made from an endpoint attaches creating its stream if it does not
exist yet (``create=True``, as a NATS KV bucket is created): an empty map.

**Keys** are the stream's keys, whole (the prefix only selects them). **Values** are bytes.

**TTL.** ``put(key, value, ttl=seconds)`` publishes the message with a ``ttl`` header (seconds,
decimal text: CHP's ephemeral values use the same header). The broker stores it like any
message and never expires it; every KVMap hides the key once ``ttl`` seconds passed since the
message was journalled (its timestamp), by the map's ``clock`` (``time.time`` unless injected),
until a newer message of the key comes. (The CHP front end honours ``ttl`` for its own streams
by publishing a tombstone when it is due; a plain ZEPS stream has no such writer.) An expiry is
local: it is not a change of the stream, so :meth:`KVMap.watch` does not report it.

**Writes** (``put``, ``delete``) go through the stream: with confirms (the map's own client has
them) each waits for its message to be durable and then for the map to have applied it, so a
``get`` after a ``put`` sees it (read your writes).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

from ..protocol.ttl import TTL_HEADER, ttl_seconds, ttl_text
from .errors import NoStream
from .message import Message

__all__ = ["KVMap", "AsyncKVMap", "Change", "KVState", "TTL_HEADER"]

Value = Union[bytes, bytearray, memoryview, str]


@dataclass(frozen=True)
class Change:
    """One change of the map: ``value`` None for a delete (``deleted`` True)."""
    key: str
    value: Optional[bytes]
    sequence: int
    deleted: bool = False
    expires: Optional[float] = None     # when it expires (the clock's seconds), or None


def ttl_of(msg: Message) -> Optional[float]:
    """The message's ``ttl`` header in seconds, or None (absent, zero, or not a number: read as
    the CHP front end reads it, :func:`zeps.protocol.ttl.ttl_seconds`)."""
    raw = msg.headers.get(TTL_HEADER) if msg.headers else None
    if raw is None:
        return None
    try:
        return ttl_seconds(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


class KVState:
    """The pure part: the dict, the sequence each key was set at, the expiry times, and the
    last sequence applied. ``clock()``: seconds, comparable to message timestamps / 1e9."""

    def __init__(self, prefix: str = "", clock: Callable[[], float] = time.time):
        self.prefix = prefix
        self.clock = clock
        self.values: Dict[str, Tuple[bytes, int, Optional[float]]] = {}   # value, seq, expires
        self.seq = 0                    # the last sequence applied (snapshot's, then stream's)

    def load(self, messages, seq: int) -> None:
        self.values.clear()
        for m in messages:
            self._set(m)
        self.seq = seq

    def apply(self, msg: Message) -> Optional[Change]:
        """Apply one message of the stream (in order); the change, or None if it is not one
        (another prefix, or a sequence already applied)."""
        if msg.sequence <= self.seq:
            return None
        self.seq = msg.sequence
        if not msg.key.startswith(self.prefix):
            return None
        if not msg.body:
            self.values.pop(msg.key, None)
            return Change(msg.key, None, msg.sequence, True)
        return self._set(msg)

    def _set(self, msg: Message) -> Change:
        ttl = ttl_of(msg)
        expires = None
        if ttl is not None:
            base = msg.timestamp / 1e9 if msg.timestamp else self.clock()
            expires = base + ttl
        self.values[msg.key] = (bytes(msg.body), msg.sequence, expires)
        return Change(msg.key, bytes(msg.body), msg.sequence, False, expires)

    def expire(self) -> List[str]:
        """Drop the keys whose ttl passed; their names."""
        now = self.clock()
        gone = [k for k, (_v, _s, exp) in self.values.items() if exp is not None and exp <= now]
        for k in gone:
            del self.values[k]
        return gone

    def get(self, key: str, default=None):
        got = self.values.get(key)
        if got is None:
            return default
        if got[2] is not None and got[2] <= self.clock():
            del self.values[key]
            return default
        return got[0]


def _body(value: Value) -> bytes:
    if isinstance(value, str):
        value = value.encode("utf-8")
    value = bytes(value)
    if not value:
        raise ValueError("an empty value is a delete: use delete(key)")
    return value


def _headers(ttl: Optional[float]):
    return None if ttl is None else {TTL_HEADER: ttl_text(ttl)}


def _own_client_options(stream: Optional[str], options: dict) -> dict:
    """The options of the client a map made from an endpoint makes for itself: the stream
    must be given, and it is created if missing (``create=True`` unless said otherwise)."""
    if stream is None:
        raise ValueError("give the stream with an endpoint")
    options.setdefault("create", True)
    return options


class _Base:
    def _bind(self, client, own: bool, prefix: str, clock: Callable[[], float],
              timeout: float) -> None:
        """The map's client (``own``: made by the map, closed with it) and empty state."""
        self.client = client
        self._own = own
        self.stream = client.stream
        self.timeout = timeout
        self._state = KVState(prefix, clock)

    def _present(self, items) -> Iterator[Change]:
        """The present values (``items``, as ``items()`` gives them) as changes."""
        for k, v in items:
            _v, seq, exp = self._state.values[k]
            yield Change(k, v, seq, False, exp)

    def _left(self, deadline: float, key: str, seq: int) -> float:
        """Seconds left to see a put of ``key`` (at ``seq``) applied; ZepsTimeout once none."""
        left = deadline - time.monotonic()
        if left <= 0:
            from .errors import ZepsTimeout
            raise ZepsTimeout(f"put of {key!r} (sequence {seq}) not seen back within "
                              f"{self.timeout:g}s")
        return left

    def __len__(self) -> int:
        self.refresh()
        self._state.expire()
        return len(self._state.values)

    @property
    def seq(self) -> int:
        """The last sequence of the stream the map has applied."""
        return self._state.seq

    def _in_prefix(self, key: str) -> None:
        if not key.startswith(self._state.prefix):
            raise KeyError(f"{key!r} is not under this map's prefix {self._state.prefix!r}")


class KVMap(_Base):
    """A blocking key-value map over ``stream`` (see the module docs). ``client_or_endpoint``:
    a :class:`~zeps.clients.Client` (its stream; it must not be subscribed yet: the map
    subscribes it) or an endpoint (the map makes its own client, with confirms, creating the
    stream if missing, and closes it).
    ``clock``: for TTLs (seconds, as ``time.time``)."""

    def __init__(self, client_or_endpoint, stream: Optional[str] = None, prefix: str = "", *,
                 clock: Callable[[], float] = time.time, timeout: float = 10.0, **options):
        from .client import Client
        if isinstance(client_or_endpoint, str):
            self._bind(Client(client_or_endpoint, stream, confirms=True, timeout=timeout,
                              **_own_client_options(stream, options)),
                       True, prefix, clock, timeout)
        else:
            self._bind(client_or_endpoint, False, prefix, clock, timeout)
        try:
            snap = self.client.snapshot(prefix, timeout=timeout)
            self._state.load(snap, snap.seq)
        except NoStream:
            pass                        # an empty map; the first put creates the stream
        self._sub = self.client.subscribe(prefix, from_seq=self._state.seq + 1)

    # ------------------------------------------------------------------ reading
    def refresh(self, timeout: float = 0.0) -> List[Change]:
        """Apply what arrived (waiting up to ``timeout`` for the first message); the changes."""
        out = []
        msg = self._sub.poll(timeout)
        while msg is not None:
            ch = self._state.apply(msg)
            if ch is not None:
                out.append(ch)
            msg = self._sub.poll(0)
        return out

    def get(self, key: str, default=None) -> Optional[bytes]:
        self.refresh()
        return self._state.get(key, default)

    def __getitem__(self, key: str) -> bytes:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def keys(self) -> List[str]:
        self.refresh()
        self._state.expire()
        return sorted(self._state.values)

    def items(self) -> List[Tuple[str, bytes]]:
        return [(k, self._state.values[k][0]) for k in self.keys()]

    def to_dict(self) -> Dict[str, bytes]:
        return dict(self.items())

    def watch(self, timeout: Optional[float] = None, current: bool = False) -> Iterator[Change]:
        """The changes as they are applied (``current``: the present values first); ends when
        none comes within ``timeout`` seconds (None: never)."""
        if current:
            yield from self._present(self.items())
        while True:
            changes = self.refresh(timeout if timeout is not None else 3600.0)
            if not changes and timeout is not None:
                return
            yield from changes

    # ------------------------------------------------------------------ writing
    def put(self, key: str, value: Value, ttl: Optional[float] = None) -> Optional[int]:
        """Set ``key`` (``ttl``: seconds until every map hides it); its sequence (None when
        unknown). Waits until the map has applied it."""
        self._in_prefix(key)
        return self._write(key, _body(value), _headers(ttl))

    def delete(self, key: str) -> Optional[int]:
        """Delete ``key`` (a tombstone: an empty body)."""
        self._in_prefix(key)
        return self._write(key, b"", None)

    def __setitem__(self, key: str, value: Value) -> None:
        self.put(key, value)

    def __delitem__(self, key: str) -> None:
        self.delete(key)

    def _write(self, key: str, body: bytes, headers) -> Optional[int]:
        receipt = self.client.publish(key, body, headers=headers)
        seq = receipt.result(self.timeout)
        if seq is None:                 # no confirms, or not exact: flush and apply it here
            self.client.flush(self.timeout)
            self.refresh()
            return None
        deadline = time.monotonic() + self.timeout
        while self._state.seq < seq:
            self.refresh(self._left(deadline, key, seq))
        return seq

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __enter__(self) -> "KVMap":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KVMap({self.stream!r}, prefix={self._state.prefix!r}, seq={self.seq})"


class AsyncKVMap(_Base):
    """:class:`KVMap` for asyncio: ``kv = await AsyncKVMap.open(...)``; ``get``, ``put``,
    ``delete``, ``refresh``, ``keys``, ``items`` are coroutines and ``watch`` an async
    iterator."""

    @classmethod
    async def open(cls, client_or_endpoint, stream: Optional[str] = None, prefix: str = "", *,
                   clock: Callable[[], float] = time.time, timeout: float = 10.0,
                   **options) -> "AsyncKVMap":
        from .aio import AsyncClient
        self = cls()
        if isinstance(client_or_endpoint, str):
            client = AsyncClient(client_or_endpoint, stream, confirms=True, timeout=timeout,
                                 **_own_client_options(stream, options))
            self._bind(await client.connect(), True, prefix, clock, timeout)
        else:
            self._bind(client_or_endpoint, False, prefix, clock, timeout)
        try:
            snap = await self.client.snapshot(prefix, timeout=timeout)
            self._state.load(snap, snap.seq)
        except NoStream:
            pass
        self._sub = await self.client.subscribe(prefix, from_seq=self._state.seq + 1)
        return self

    def __len__(self) -> int:
        self._state.expire()
        return len(self._state.values)

    async def refresh(self, timeout: float = 0.0) -> List[Change]:
        out = []
        msg = await self._sub.poll(timeout)
        while msg is not None:
            ch = self._state.apply(msg)
            if ch is not None:
                out.append(ch)
            msg = await self._sub.poll(0)
        return out

    async def get(self, key: str, default=None) -> Optional[bytes]:
        await self.refresh()
        return self._state.get(key, default)

    async def keys(self) -> List[str]:
        await self.refresh()
        self._state.expire()
        return sorted(self._state.values)

    async def items(self) -> List[Tuple[str, bytes]]:
        return [(k, self._state.values[k][0]) for k in await self.keys()]

    async def watch(self, timeout: Optional[float] = None, current: bool = False):
        if current:
            for ch in self._present(await self.items()):
                yield ch
        while True:
            changes = await self.refresh(timeout if timeout is not None else 3600.0)
            if not changes and timeout is not None:
                return
            for ch in changes:
                yield ch

    async def put(self, key: str, value: Value, ttl: Optional[float] = None) -> Optional[int]:
        self._in_prefix(key)
        return await self._write(key, _body(value), _headers(ttl))

    async def delete(self, key: str) -> Optional[int]:
        self._in_prefix(key)
        return await self._write(key, b"", None)

    async def _write(self, key: str, body: bytes, headers) -> Optional[int]:
        receipt = await self.client.publish(key, body, headers=headers)
        seq = await receipt.result(self.timeout)
        if seq is None:
            await self.client.flush(self.timeout)
            await self.refresh()
            return None
        deadline = time.monotonic() + self.timeout
        while self._state.seq < seq:
            await self.refresh(self._left(deadline, key, seq))
        return seq

    async def close(self) -> None:
        if self._own:
            await self.client.close()

    async def __aenter__(self) -> "AsyncKVMap":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
