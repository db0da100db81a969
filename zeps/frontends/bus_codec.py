"""Event BUS protocol (``shared/spec/event-bus.txt``, micro-toolkit/event-bus-zeromq) wire codec.
Pure.

=========  ==========  ===============================================================
SYNCSTART  C: snapshot  ``"SYNCSTART" | subtrees | sequence``
SYNC       S: snapshot  ``"SYNC" | topic | sequence | producer | timestamp | UUID | data``
SYNCEND    S: snapshot  ``"SYNCEND" | subtrees | sequence``
BROADCAST  S: publisher ``topic | sequence | producer | timestamp | UUID | data``
PUB        C: collector ``topic | sequence | producer | timestamp | UUID | data``
=========  ==========  ===============================================================

Strings are UTF-8; ``timestamp`` is ISO-8601 (``2016-11-18T14:36:49.007Z``); ``data`` a blob.

**Two dialects.** The RFC joins several subtrees with ``;`` and sends sequences as 8 bytes in
network order. The reference implementation (Node) joins subtrees with ``,`` and sends
sequences as decimal strings (``String(n)``; its publisher, which sets no sequence, sends the
four letters ``null``). Input accepts both: a sequence frame of 1 to 20 ASCII digits is
decimal, one of 8 other bytes is network order, an empty one is 0; SYNCSTART's subtrees are
split by its sequence's form, on ``;`` after an 8-byte one (the RFC's), on ``,`` after a decimal
or empty one (the other separator is then part of a subtree); a list whose sender's form
nothing else tells (SYNCEND, read by a client) on ``;`` if it holds one, otherwise on ``,``.
(An 8-byte binary sequence whose every byte is an ASCII digit is at least 0x3030303030303030,
about 3.5 * 10^18: no stream gets there.) Output speaks one :class:`Dialect`: :data:`RFC`
(the default) or :data:`REFERENCE`, which the Node subscriber needs (it compares sequences as
decimal text).

An empty subtree matches every topic (the reference's ``"".split(",")`` is ``[""]``, and every
topic starts with ``""``); matching is by prefix, as the reference's ``startsWith``.
"""
from __future__ import annotations

import re
import uuid as _uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from .wire import (DEFAULT_LIMITS, MAX_KEY, Buffer, Limits, Malformed, check_count, check_size,
                   decode_decimal, encode_u64, text)

SYNCSTART = b"SYNCSTART"
SYNC = b"SYNC"
SYNCEND = b"SYNCEND"
#: What the reference's publisher sends as the sequence of a PUB (``String(null)``).
NULL = b"null"
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_ISO8601 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
                      r"(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
                      r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?")


@dataclass(frozen=True)
class Dialect:
    """How the server writes subtree lists and sequences."""
    name: str
    separator: str
    decimal: bool

    def sequence(self, value: int) -> bytes:
        return str(value).encode("ascii") if self.decimal else encode_u64(value)


RFC = Dialect("rfc", ";", False)
REFERENCE = Dialect("reference", ",", True)
DIALECTS = {d.name: d for d in (RFC, REFERENCE)}


@dataclass(frozen=True)
class SyncStart:
    """C: SYNCSTART: every event above ``sequence`` whose topic starts with one of ``subtrees``
    (as the client listed them, the order kept for SYNCEND's echo)."""
    subtrees: Tuple[str, ...] = ("",)
    sequence: int = 0


@dataclass(frozen=True)
class SyncEnd:
    """S: SYNCEND, as a client reads it."""
    subtrees: Tuple[str, ...]
    sequence: int


@dataclass(frozen=True)
class Event:
    """One event: PUB from a producer (its ``sequence`` ignored), SYNC and BROADCAST to clients."""
    topic: str
    sequence: int = 0
    producer: str = ""
    timestamp: str = ""
    uuid: str = ""
    data: bytes = b""


# --------------------------------------------------------------------------- fields

def decode_sequence(frame: Buffer) -> int:
    """Either form: 1 to 20 ASCII digits (decimal), 8 bytes (network order), or empty (0)."""
    if not len(frame):
        return 0
    value = decode_decimal(frame)
    if value is not None:
        return value
    if len(frame) == 8:
        return int.from_bytes(bytes(frame), "big")
    raise Malformed("bad sequence", f"{len(frame)} bytes, neither 8 nor decimal digits")


def decode_subtrees(frame: Buffer, limits: Limits = DEFAULT_LIMITS,
                    separator: Optional[bytes] = None) -> Tuple[str, ...]:
    """``;``-joined (RFC) or ``,``-joined (reference) subtrees; sizes and count checked before
    the frame is split. ``separator``: the one the sender's dialect uses (None: ``;`` if the
    frame holds one, else ``,``, for a frame whose dialect nothing else tells)."""
    check_size(frame, limits.max_subtrees_bytes, "subtrees")
    raw = bytes(frame)
    sep = separator if separator is not None else b";" if b";" in raw else b","
    if raw.count(sep) >= limits.max_subtrees:
        raise Malformed("too many subtrees", f"{raw.count(sep) + 1}, at most {limits.max_subtrees}")
    return tuple(text(part, "subtree", MAX_KEY) for part in raw.split(sep))


def encode_subtrees(subtrees: Sequence[str], dialect: Dialect = RFC) -> bytes:
    return dialect.separator.join(subtrees).encode("utf-8")


def check_timestamp(value: str) -> str:
    if not _ISO8601.fullmatch(value):
        raise Malformed("bad timestamp", "not ISO-8601")
    return value


def check_uuid(value: str) -> str:
    """A UUID is text (RFC 4122's form, not checked further): no control character. So a
    ``uuid`` header of 16 bytes holding one is told apart from CHP's binary UUID."""
    if _CONTROL.search(value):
        raise Malformed("bad uuid", "a control character")
    return value


def iso8601(ns: int) -> str:
    """A journal timestamp (ns since the epoch) as JavaScript's ``toISOString`` writes one
    (``2016-11-18T14:36:49.007Z``): the timestamp of an event published by a plain ZEPS client."""
    ms = ns // 1_000_000
    seconds, millis = divmod(ms, 1000)
    dt = datetime.fromtimestamp(seconds, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


# --------------------------------------------------------------------------- decoding

def decode_syncstart(frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS) -> SyncStart:
    """The snapshot socket's one command (identity frame removed)."""
    if not frames or len(frames[0]) != len(SYNCSTART) or bytes(frames[0]) != SYNCSTART:
        raise Malformed("bad command")
    check_count(frames, 3, "SYNCSTART")
    sequence = decode_sequence(frames[2])
    # The sequence's form tells the dialect, and so the separator: a subtree may hold the
    # other one ("/a,b/" from an RFC client was split into "/a" and "b/"; found by review).
    rfc = len(frames[2]) == 8 and decode_decimal(frames[2]) is None
    return SyncStart(decode_subtrees(frames[1], limits, RFC.separator.encode() if rfc
                                     else REFERENCE.separator.encode()), sequence)


def _event(frames: Sequence[Buffer], limits: Limits, sequence: int) -> Event:
    topic_f, _, producer_f, ts_f, uuid_f, data_f = frames
    check_size(data_f, limits.max_value, "data")
    return Event(text(topic_f, "topic", MAX_KEY, empty=False), sequence,
                 text(producer_f, "producer", limits.max_producer),
                 check_timestamp(text(ts_f, "timestamp", limits.max_timestamp)),
                 check_uuid(text(uuid_f, "uuid", limits.max_uuid)), bytes(data_f))


def decode_pub(frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS) -> Event:
    """The collector's one command. The sequence is the server's to give: any of its forms (and
    the reference publisher's ``null``) is accepted and dropped."""
    check_count(frames, 6, "PUB")
    seq_f = frames[1]
    if not (len(seq_f) == 8 or bytes(seq_f) == NULL):
        decode_sequence(seq_f)
    return _event(frames, limits, 0)


def decode_broadcast(frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS) -> Event:
    """A client's reading of BROADCAST (either dialect)."""
    check_count(frames, 6, "BROADCAST")
    return _event(frames, limits, decode_sequence(frames[1]))


def decode_snapshot_reply(frames: Sequence[Buffer],
                          limits: Limits = DEFAULT_LIMITS) -> Union[Event, SyncEnd]:
    """A client's reading of SYNC or SYNCEND (either dialect)."""
    head = bytes(frames[0]) if frames and len(frames[0]) <= len(SYNCEND) else b""
    if head == SYNC:
        check_count(frames, 7, "SYNC")
        return decode_broadcast(frames[1:], limits)
    if head == SYNCEND:
        check_count(frames, 3, "SYNCEND")
        return SyncEnd(decode_subtrees(frames[1], limits), decode_sequence(frames[2]))
    raise Malformed("bad command")


# --------------------------------------------------------------------------- encoding

def _fields(event: Event, dialect: Dialect) -> List[bytes]:
    return [event.topic.encode("utf-8"), dialect.sequence(event.sequence),
            event.producer.encode("utf-8"), event.timestamp.encode("utf-8"),
            event.uuid.encode("utf-8"), event.data]


def encode_syncstart(start: SyncStart, dialect: Dialect = RFC) -> List[bytes]:
    return [SYNCSTART, encode_subtrees(start.subtrees, dialect), dialect.sequence(start.sequence)]


def encode_sync(event: Event, dialect: Dialect = RFC) -> List[bytes]:
    return [SYNC, *_fields(event, dialect)]


def encode_syncend(subtrees: Sequence[str], sequence: int, dialect: Dialect = RFC) -> List[bytes]:
    return [SYNCEND, encode_subtrees(subtrees, dialect), dialect.sequence(sequence)]


def encode_broadcast(event: Event, dialect: Dialect = RFC) -> List[bytes]:
    return _fields(event, dialect)


def encode_pub(event: Event, dialect: Dialect = RFC) -> List[bytes]:
    """C: a producer's PUB (its sequence: the event's, usually 0)."""
    return _fields(event, dialect)


# --------------------------------------------------------------------------- on the stream

#: The ZEPS headers that keep a PUB's fields on the stream.
PRODUCER_HEADER, TIMESTAMP_HEADER, UUID_HEADER = "producer", "timestamp", "uuid"


def to_headers(event: Event) -> Tuple[Tuple[str, bytes], ...]:
    """The ZEPS headers of a PUB's event: ``producer``, ``timestamp``, ``uuid``, in UTF-8, each
    only if not empty (the topic is the message's key, the data its body)."""
    return tuple((name, value.encode("utf-8")) for name, value in (
        (PRODUCER_HEADER, event.producer), (TIMESTAMP_HEADER, event.timestamp),
        (UUID_HEADER, event.uuid)) if value)


#: What a PUB's timestamp and UUID must be (:func:`check_timestamp`, :func:`check_uuid`): a
#: ZEPS publisher's headers that are not (``timestamp=yesterday``) are not passed on, where a
#: client reading them as the RFC's would fail (found by review).
_FIELD_OK = {TIMESTAMP_HEADER: _ISO8601.fullmatch, UUID_HEADER: lambda v: not _CONTROL.search(v)}


def from_message(sequence: int, key: str, value: bytes, timestamp_ns: int,
                 headers: Iterable[Tuple[str, bytes]] = ()) -> Event:
    """The event of a message of the stream: producer, timestamp and UUID from its headers (the
    first of each name, if UTF-8; a ``uuid`` of 16 bytes that are not text - not UTF-8, or
    with a control character, which a PUB's UUID never has - is a binary UUID, as CHP keeps
    one, given in its text form); a message without a ``timestamp`` header has its journal
    timestamp (:func:`iso8601`)."""
    fields = {}
    for name, raw in headers:
        if name in fields or name not in (PRODUCER_HEADER, TIMESTAMP_HEADER, UUID_HEADER):
            continue
        try:
            field: Optional[str] = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            field = None
        if name == UUID_HEADER and len(raw) == 16 and (field is None or _CONTROL.search(field)):
            field = str(_uuid.UUID(bytes=bytes(raw)))
        elif field is not None and name != PRODUCER_HEADER and not _FIELD_OK[name](field):
            field = None                 # what a PUB could not carry: the journal's, or none
        if field is not None:
            fields[name] = field
    return Event(key, sequence, fields.get(PRODUCER_HEADER, ""),
                 fields.get(TIMESTAMP_HEADER) or iso8601(timestamp_ns),
                 fields.get(UUID_HEADER, ""), value)
