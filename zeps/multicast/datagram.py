"""The multicast datagram format (version 1): pure encode/decode, no sockets.

Every datagram the bridge sends is one UDP payload::

    datagram  = signature kind version session number stream pattern payload
    signature = %xAA %xA5                  ; as every ZEPS frame
    kind      = %d48 (DATA) / %d49 (HEAD)  ; ids 48-49 are reserved for datagrams in ZEPS
    version   = %d1
    session   = number-8                   ; random, new at every bridge start
    number    = number-8                   ; 1, 2, 3 ... per session, DATA and HEAD alike
    stream    = string                     ; the stream the bridge reads
    pattern   = string                     ; the bridge's subscription pattern
    DATA payload = count 1*entry           ; count = number-2, entries by increasing sequence
    entry     = flags sequence after [timestamp key body]
    flags     = number-1                   ; bit 0 (REF): the message is too large for a
                                           ; datagram; timestamp, key and body are absent
    sequence  = number-8                   ; the message's stream sequence
    after     = number-8                   ; < sequence: no message matching `pattern` exists
                                           ; between `after` and `sequence` (both excluded)
    timestamp = number-8                   ; ns since the epoch, when the broker journalled it
    key       = string
    body      = chunk
    HEAD payload = head interval
    head      = number-8                   ; every message matching `pattern` up to `head` was
                                           ; sent (or none exists)
    interval  = number-4                   ; ms until the bridge's next HEAD

``string`` is a 1-octet length + UTF-8, ``chunk`` a 4-octet length + bytes, numbers unsigned
big-endian, as in ZEPS/1. Bytes after the last field are ignored, as in every ZEPS frame.

:func:`decode` raises :class:`ForeignDatagram` for a payload that is not a ZEPS datagram of this
version (another protocol sharing the group) and :class:`MalformedDatagram` for one that claims
to be but does not decode; receivers count both and carry on.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from zeps.protocol.deliver import SIGNATURE

__all__ = [
    "DATA",
    "HEAD",
    "MAX_SEQUENCE",
    "MAX_UDP_PAYLOAD",
    "REF",
    "REF_SIZE",
    "VERSION",
    "Data",
    "DatagramError",
    "Entry",
    "ForeignDatagram",
    "Head",
    "MalformedDatagram",
    "decode",
    "decode_entries",
    "encode_data",
    "encode_entry",
    "encode_head",
    "encode_ref",
    "entry_size",
    "header",
    "header_size",
    "peek",
]

DATA = 48
HEAD = 49
VERSION = 1
#: Entry flag: the message is not carried (too large); receivers fetch it from the broker.
REF = 0x01
#: The largest UDP payload over IPv4.
MAX_UDP_PAYLOAD = 65507
#: The largest sequence (a number-8, as in ZEPS/1).
MAX_SEQUENCE = (1 << 64) - 1

_PREFIX = struct.Struct(">2sBBQQ")         # signature kind version session number
_ENTRY = struct.Struct(">BQQQB")           # flags sequence after timestamp key-length
_REF_ENTRY = struct.Struct(">BQQ")         # flags sequence after
_HEAD_TAIL = struct.Struct(">QI")          # head interval
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
#: Bytes of one REF entry.
REF_SIZE = _REF_ENTRY.size

Buffer = bytes | bytearray | memoryview


class DatagramError(ValueError):
    """A payload that is not a usable ZEPS datagram; ``str(err)`` says why."""


class ForeignDatagram(DatagramError):
    """Not a ZEPS datagram of this version (wrong signature, kind or version)."""


class MalformedDatagram(DatagramError):
    """A ZEPS datagram that does not decode (truncated, inconsistent lengths or sequences)."""


class Entry(NamedTuple):
    """One message of a DATA datagram. ``ref`` entries have no timestamp, key or body.
    (A named tuple: receivers build one per message, and a tuple is the cheapest.)"""

    sequence: int
    after: int
    timestamp: int = 0
    key: str = ""
    body: bytes = b""
    ref: bool = False


@dataclass(frozen=True, slots=True)
class Data:
    session: int
    number: int
    stream: str
    pattern: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Head:
    session: int
    number: int
    stream: str
    pattern: str
    head: int
    interval_ms: int


def _string(text: str, what: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"{what} longer than 255 bytes")
    return bytes((len(raw),)) + raw


def header(kind: int, session: int, number: int, stream: str, pattern: str) -> bytes:
    """The bytes every datagram of ``kind`` starts with, up to (excluding) its payload."""
    return (_PREFIX.pack(SIGNATURE, kind, VERSION, session, number)
            + _string(stream, "stream name") + _string(pattern, "pattern"))


def header_size(stream: str, pattern: str) -> int:
    """Bytes of a DATA datagram before its first entry (the count included)."""
    return _PREFIX.size + 2 + len(stream.encode("utf-8")) + len(pattern.encode("utf-8")) + 2


def entry_size(key_len: int, body_len: int) -> int:
    """Bytes of one full entry with a key of ``key_len`` and a body of ``body_len`` bytes."""
    return _ENTRY.size + key_len + 4 + body_len


def encode_entry(sequence: int, after: int, timestamp: int, key: bytes, body: Buffer) -> bytes:
    """One full entry (``key`` already UTF-8, at most 255 bytes)."""
    return b"".join((_ENTRY.pack(0, sequence, after, timestamp, len(key)), key,
                     _U32.pack(len(body)), body))


def encode_ref(sequence: int, after: int) -> bytes:
    """One REF entry: the message exists but is too large to be carried."""
    return _REF_ENTRY.pack(REF, sequence, after)


def encode_data(head: bytes, entries: list[bytes]) -> bytes:
    """A DATA datagram from its :func:`header` and encoded entries (1 to 65535)."""
    return b"".join((head, _U16.pack(len(entries)), *entries))


def encode_head(session: int, number: int, stream: str, pattern: str, head: int,
                interval_ms: int) -> bytes:
    """A HEAD datagram."""
    return header(HEAD, session, number, stream, pattern) + _HEAD_TAIL.pack(head, interval_ms)


def _read_string(buf: Buffer, pos: int, what: str) -> tuple[str, int]:
    if pos >= len(buf):
        raise MalformedDatagram(f"truncated {what}")
    end = pos + 1 + buf[pos]
    if end > len(buf):
        raise MalformedDatagram(f"truncated {what}")
    try:
        return bytes(buf[pos + 1:end]).decode("utf-8"), end
    except UnicodeDecodeError:
        raise MalformedDatagram(f"{what} is not UTF-8") from None


def peek(buf: Buffer) -> tuple[int, int, int, str, str, int]:
    """``(kind, session, number, stream, pattern, payload offset)`` of a datagram: enough to
    drop a foreign or duplicated datagram before decoding its entries."""
    if len(buf) < _PREFIX.size:
        if bytes(buf[:2]) != SIGNATURE:
            raise ForeignDatagram("no ZEPS signature")
        raise MalformedDatagram(f"truncated header ({len(buf)} bytes)")
    sig, kind, version, session, number = _PREFIX.unpack_from(buf, 0)
    if sig != SIGNATURE:
        raise ForeignDatagram("no ZEPS signature")
    if kind not in (DATA, HEAD):
        raise ForeignDatagram(f"not a datagram kind: {kind}")
    if version != VERSION:
        raise ForeignDatagram(f"datagram version {version}, not {VERSION}")
    stream, pos = _read_string(buf, _PREFIX.size, "stream name")
    pattern, pos = _read_string(buf, pos, "pattern")
    return kind, session, number, stream, pattern, pos


def decode_entries(buf: Buffer, pos: int) -> tuple[Entry, ...]:
    """The entries of a DATA datagram whose payload starts at ``pos``."""
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    size = len(buf)
    if pos + 2 > size:
        raise MalformedDatagram("truncated entry count")
    count = _U16.unpack_from(buf, pos)[0]
    if count == 0:
        raise MalformedDatagram("DATA with no entry")
    pos += 2
    entries = []
    append = entries.append
    unpack_entry, unpack_u32 = _ENTRY.unpack_from, _U32.unpack_from
    fixed = _ENTRY.size
    previous = 0
    for i in range(count):
        if pos + REF_SIZE > size:
            raise MalformedDatagram(f"truncated entry {i + 1} of {count}")
        flags = buf[pos]
        if flags == 0:
            if pos + fixed > size:
                raise MalformedDatagram(f"truncated entry {i + 1} of {count}")
            _, seq, after, ts, klen = unpack_entry(buf, pos)
            kend = pos + fixed + klen
            if kend + 4 > size:
                raise MalformedDatagram(f"truncated entry {i + 1} of {count}")
            bpos = kend + 4
            end = bpos + unpack_u32(buf, kend)[0]
            if end > size:
                raise MalformedDatagram(f"entry {i + 1}: body runs past the datagram")
            try:
                key = buf[pos + fixed:kend].decode("utf-8")
            except UnicodeDecodeError:
                raise MalformedDatagram(f"entry {i + 1}: key is not UTF-8") from None
            entry = Entry(seq, after, ts, key, buf[bpos:end], False)
            pos = end
        elif flags == REF:
            _, seq, after = _REF_ENTRY.unpack_from(buf, pos)
            pos += REF_SIZE
            entry = Entry(seq, after, 0, "", b"", True)
        else:
            raise MalformedDatagram(f"entry {i + 1}: unknown flags {flags:#04x}")
        if after >= seq:
            raise MalformedDatagram(f"entry {i + 1}: after {after} is not below sequence {seq}")
        if after < previous:
            raise MalformedDatagram(f"entry {i + 1}: after {after} is below the previous "
                                    f"entry's sequence {previous}")
        previous = seq
        append(entry)
    return tuple(entries)


def decode(buf: Buffer) -> Data | Head:
    """Decode one datagram; raise :class:`ForeignDatagram` or :class:`MalformedDatagram`."""
    kind, session, number, stream, pattern, pos = peek(buf)
    if kind == HEAD:
        if pos + _HEAD_TAIL.size > len(buf):
            raise MalformedDatagram("truncated HEAD")
        head, interval = _HEAD_TAIL.unpack_from(buf, pos)
        return Head(session, number, stream, pattern, head, interval)
    return Data(session, number, stream, pattern, decode_entries(buf, pos))

