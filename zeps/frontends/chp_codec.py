"""CHP (``shared/spec/chp-12.txt``, RFC 12, the Guide's Clone pattern) wire codec. Pure.

Every CHP message but ICANHAZ has the Guide's kvmsg shape, five frames::

    key | sequence (8 bytes, network order) | UUID (16 bytes or empty) | properties | value

``properties`` is zero or more ``name=value`` lines, each ending in a newline. The commands:

=========  ==========  ===============================================================
ICANHAZ    C: snapshot ``"ICANHAZ?" | subtree``
KVSYNC     S: snapshot ``key | sequence | "" | "" | value``
KTHXBAI    S: snapshot ``"KTHXBAI" | sequence | "" | "" | subtree``
KVPUB      S: publisher ``key | sequence | UUID | properties | value``
HUGZ       S: publisher ``"HUGZ" | 00000000 | "" | "" | ""`` (eight zero bytes)
KVSET      C: collector ``key | sequence | UUID | properties | value``
=========  ==========  ===============================================================

Decoding checks the frame count and every frame's size before it decodes anything, and is
strict where the spec is precise: the sequence is 8 bytes, a UUID 16 bytes or none, every
property line ends in a newline and has a ``=`` after a name of 1 to 255 bytes, no name twice,
none named ``uuid`` (the header that keeps the UUID on the stream), a ``ttl`` is a number of
seconds. A key is a ZEPS key: 1 to 255 bytes of UTF-8, and not one of the command
words (``KTHXBAI``, ``HUGZ``, ``ICANHAZ?``), which would end a client's snapshot early or pass for
a heartbeat. Anything else raises :class:`~zeps.frontends.wire.Malformed`.
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

from ..protocol import ttl as _ttl
from .wire import (DEFAULT_LIMITS, MAX_KEY, Buffer, Limits, Malformed, check_count, check_size, decode_u64,
                   encode_u64, text)

ICANHAZ = b"ICANHAZ?"
KTHXBAI = b"KTHXBAI"
HUGZ = b"HUGZ"
#: Keys a CHP client would take for a command; never stored, sent or accepted as keys.
RESERVED_KEYS = frozenset({"ICANHAZ?", "KTHXBAI", "HUGZ"})
UUID_SIZE = 16
#: The property the server acts on: the key is deleted this many seconds after its update
#: (kept on the stream as the ``ttl`` header: :mod:`zeps.protocol.ttl`).
TTL = _ttl.TTL_HEADER
#: The ZEPS header that holds a KVSET's UUID (16 bytes); so no property may be named so.
UUID_HEADER = "uuid"
_EMPTY = b""
_ZERO = encode_u64(0)

Properties = Tuple[Tuple[str, str], ...]


@dataclass(frozen=True)
class IcanHaz:
    """C: ICANHAZ?: a snapshot of the keys starting with ``subtree`` (empty: every key)."""
    subtree: str = ""


@dataclass(frozen=True)
class KvMsg:
    """The five-frame CHP message: a KVSET from a client, a KVPUB to clients (also how a client
    reads KVSYNC, KTHXBAI and HUGZ). An empty ``value`` deletes the key."""
    key: str
    sequence: int = 0
    uuid: bytes = b""
    properties: Properties = ()
    value: bytes = b""

    def prop(self, name: str) -> Optional[str]:
        for k, v in self.properties:
            if k == name:
                return v
        return None

    @property
    def ttl(self) -> Optional[float]:
        """Seconds to live (a ``ttl`` property above zero), or None."""
        return ttl_seconds(self.properties)


# --------------------------------------------------------------------------- properties

def encode_properties(properties: Properties) -> bytes:
    return b"".join(f"{k}={v}\n".encode("utf-8") for k, v in properties)


def decode_properties(frame: Buffer, limits: Limits = DEFAULT_LIMITS) -> Properties:
    """``name=value\\n`` lines, strictly; the frame's size is checked first, then the count."""
    check_size(frame, limits.max_properties_bytes, "properties")
    if not len(frame):
        return ()
    raw = bytes(frame)
    if not raw.endswith(b"\n"):
        raise Malformed("bad properties", "the last line has no newline")
    lines = raw[:-1].split(b"\n")
    if len(lines) > limits.max_properties:
        raise Malformed("too many properties", f"{len(lines)}, at most {limits.max_properties}")
    out: List[Tuple[str, str]] = []
    seen = set()
    for line in lines:
        name, eq, value = line.partition(b"=")
        if not eq or not name:
            raise Malformed("bad properties", "a line is not name=value")
        try:
            pair = (name.decode("utf-8"), value.decode("utf-8"))
        except UnicodeDecodeError:
            raise Malformed("properties not UTF-8") from None
        if len(name) > MAX_KEY:
            raise Malformed("bad properties", "a name over 255 bytes")
        if pair[0] in seen:
            raise Malformed("bad properties", "a name given twice")
        if pair[0] == UUID_HEADER:
            raise Malformed("reserved property", UUID_HEADER)
        seen.add(pair[0])
        out.append(pair)
    props = tuple(out)
    for name, value in props:                # a bad ttl makes the whole command malformed
        if name == TTL and not _ttl.TTL_TEXT.fullmatch(value):
            raise Malformed("bad ttl", "not a number of seconds")
    return props


def ttl_seconds(properties: Properties) -> Optional[float]:
    """The ``ttl`` property in seconds (``30``, ``0.5``), None if absent or zero (the Guide's
    servers treat ``ttl=0`` as no ttl); :class:`Malformed` ``bad ttl`` if not a number. Read as
    the KV client reads the header (:func:`zeps.protocol.ttl.ttl_seconds`), so that a ZEPS
    publisher's ttl counts the same for both; a CHP client's KVSET is held to the stricter
    grammar it is written in (:data:`~zeps.protocol.ttl.TTL_TEXT`) when it is decoded."""
    for name, value in properties:
        if name == TTL:
            try:
                return _ttl.ttl_seconds(value)
            except ValueError:
                raise Malformed("bad ttl", "not a number of seconds") from None
    return None


# --------------------------------------------------------------------------- decoding

def _key(frame: Buffer) -> str:
    key = text(frame, "key", MAX_KEY, empty=False)
    if key in RESERVED_KEYS:
        raise Malformed("reserved key", key)
    return key


def decode_icanhaz(frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS) -> IcanHaz:
    """The snapshot socket's one command (identity frame removed)."""
    if not frames or len(frames[0]) != len(ICANHAZ) or bytes(frames[0]) != ICANHAZ:
        raise Malformed("bad command")
    check_count(frames, 2, "ICANHAZ?")
    return IcanHaz(text(frames[1], "subtree", MAX_KEY))


def decode_kvset(frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS) -> KvMsg:
    """The collector's one command. Its sequence "has no significance" (it must still be 8
    bytes); the server gives the update its own."""
    check_count(frames, 5, "KVSET")
    key_f, seq_f, uuid_f, props_f, value_f = frames
    check_size(value_f, limits.max_value, "value")
    if len(uuid_f) not in (0, UUID_SIZE):
        raise Malformed("bad uuid", f"{len(uuid_f)} bytes, not 16 or 0")
    return KvMsg(_key(key_f), decode_u64(seq_f), bytes(uuid_f),
                 decode_properties(props_f, limits), bytes(value_f))


def decode_kvmsg(frames: Sequence[Buffer], limits: Limits = DEFAULT_LIMITS) -> KvMsg:
    """A client's reading of anything the server sends (KVSYNC, KTHXBAI, KVPUB, HUGZ): five
    frames, the command words allowed as keys. KTHXBAI's subtree is its ``value``."""
    check_count(frames, 5, "a CHP message")
    key_f, seq_f, uuid_f, props_f, value_f = frames
    check_size(value_f, limits.max_value, "value")
    if len(uuid_f) not in (0, UUID_SIZE):
        raise Malformed("bad uuid", f"{len(uuid_f)} bytes, not 16 or 0")
    return KvMsg(text(key_f, "key", MAX_KEY), decode_u64(seq_f), bytes(uuid_f),
                 decode_properties(props_f, limits), bytes(value_f))


# --------------------------------------------------------------------------- encoding

def encode_icanhaz(subtree: str = "") -> List[bytes]:
    return [ICANHAZ, subtree.encode("utf-8")]


def encode_kvsync(key: str, sequence: int, value: bytes) -> List[bytes]:
    """S: one key-value pair of a snapshot; frames 2 and 3 empty, as the RFC frames it."""
    return [key.encode("utf-8"), encode_u64(sequence), _EMPTY, _EMPTY, value]


def encode_kthxbai(sequence: int, subtree: str) -> List[bytes]:
    """S: the end of a snapshot: the sequence it reflects, the subtree asked for."""
    return [KTHXBAI, encode_u64(sequence), _EMPTY, _EMPTY, subtree.encode("utf-8")]


def encode_kvmsg(msg: KvMsg) -> List[bytes]:
    """KVPUB (server) or KVSET (client): the five frames of ``msg``."""
    return [msg.key.encode("utf-8"), encode_u64(msg.sequence), msg.uuid,
            encode_properties(msg.properties), msg.value]


encode_kvpub = encode_kvmsg
encode_kvset = encode_kvmsg


def encode_hugz() -> List[bytes]:
    """S: the heartbeat, sequence eight zero bytes as the RFC frames it (a client discards it:
    it is never above the last sequence it took)."""
    return [HUGZ, _ZERO, _EMPTY, _EMPTY, _EMPTY]


# --------------------------------------------------------------------------- on the stream

def to_headers(msg: KvMsg) -> Tuple[Tuple[str, bytes], ...]:
    """The ZEPS headers that keep a KVSET's UUID and properties on the stream: ``uuid`` (its 16
    bytes) first if it has one, then one header per property, in order, its value in UTF-8.
    A ZEPS subscriber reads them as headers; :func:`from_message` gives them back unchanged."""
    out = [(UUID_HEADER, msg.uuid)] if msg.uuid else []
    out.extend((name, value.encode("utf-8")) for name, value in msg.properties)
    return tuple(out)


def _canonical_ttl(text: str) -> str:
    """A ``ttl`` header a CHP client's reading would refuse (an older KV writer's ``2.592e+06``)
    in the RFC's plain decimal seconds; one that is no ttl at all is left as it is (the front
    end counts it: ``publisher.bad ttl``)."""
    try:
        seconds = _ttl.ttl_seconds(text)
    except ValueError:
        return text
    return _ttl.ttl_text(seconds) if seconds is not None else "0"


def from_message(sequence: int, key: str, value: bytes,
                 headers: Iterable[Tuple[str, bytes]] = (),
                 limits: Limits = DEFAULT_LIMITS) -> Tuple[KvMsg, int]:
    """The KVPUB of a message of the stream, and how many of its headers CHP cannot carry.
    The UUID is the first ``uuid`` header of 16 bytes (a UUID in text, as a BUS event keeps
    one, is converted); the other headers become properties when they can be written as
    ``name=value`` lines (a name of 1 to 255 bytes without ``=`` or newline, UTF-8 without a
    newline in the value) within the rules :func:`decode_properties` holds a KVSET to (each
    name once, ``limits.max_properties`` of them in ``limits.max_properties_bytes``: a ZEPS
    message's repeated or many headers made KVPUBs a client's decoder refuses; found by
    review); the rest are left out. A ``ttl`` written with an exponent is given in plain
    decimal seconds (:func:`_canonical_ttl`). A plain ZEPS message has neither."""
    uuid = b""
    props: List[Tuple[str, str]] = []
    seen = set()
    size = 0
    dropped = 0
    for name, raw in headers:
        if name == UUID_HEADER and not uuid:
            if len(raw) == UUID_SIZE:
                uuid = bytes(raw)
                continue
            try:
                uuid = _uuid.UUID(bytes(raw).decode("ascii")).bytes
                continue
            except (UnicodeDecodeError, ValueError):
                pass
        try:
            text_value = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            text_value = "\n"
        if ("=" in name or "\n" in name or "\n" in text_value or name == UUID_HEADER
                or not name or len(name.encode("utf-8")) > MAX_KEY or name in seen):
            dropped += 1
            continue
        if name == TTL and not _ttl.TTL_TEXT.fullmatch(text_value):
            text_value = _canonical_ttl(text_value)
            if not _ttl.TTL_TEXT.fullmatch(text_value):    # not a number: a KVSET's is refused
                dropped += 1
                continue
        line = len(name.encode("utf-8")) + len(text_value.encode("utf-8")) + 2
        if len(props) == limits.max_properties or size + line > limits.max_properties_bytes:
            dropped += 1
            continue
        seen.add(name)
        size += line
        props.append((name, text_value))
    return KvMsg(key, sequence, uuid, tuple(props), value), dropped
