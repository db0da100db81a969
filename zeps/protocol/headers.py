"""Message headers, defined once: the headers block of PUBLISH-H, DELIVER-H and the journal's
headers extension, its limits, and the one parser of it.

Headers are an ordered list of ``(name, value)`` pairs, as Kafka's record headers and NATS
message headers: names are short text (1 to 255 bytes of UTF-8), values are bytes, a name may
repeat, and the order is kept. They give a message's metadata a home beside its key and body:
the UUID and the ``name=value`` properties of CHP's KVSET (``shared/spec/chp-12.txt``), the
producer id, producer timestamp and UUID of the Event BUS (``shared/spec/event-bus.txt``),
trace ids, content types.

The **block** (the same bytes on the wire and in the journal)::

    block = size u32 BE | count u16 BE | count * pair
    pair  = namelen u8 (1..255) | name (UTF-8) | valuelen u16 BE | value

``size`` is the octets of the pairs (not counting ``size`` and ``count``); the pairs fill
exactly ``size`` octets. Limits, rules of the extension like ``MAX_BATCH_ENTRIES``:
``1 <= count <= MAX_HEADERS`` (255) and ``size <= MAX_HEADERS_BYTES`` (64 KiB). A reader checks
them in the block's 6-octet head before it walks a single pair (:func:`check_head`), so a
declared count or size over a limit costs nothing to refuse.

A headered message's credit cost is its DELIVER's plus the block's length (``6 + size``), and
its size against a body limit is ``len(body) + 6 + size``.
"""
from __future__ import annotations

import struct
from typing import Iterable, List, Optional, Sequence, Tuple, Union

HEADERS_SELECT_ID = 70
HEADERS_SELECT_OK_ID = 71
PUBLISH_H_ID = 72
DELIVER_H_ID = 73

#: The most pairs a block may hold.
MAX_HEADERS = 255
#: The most octets the pairs of a block may take (``size``).
MAX_HEADERS_BYTES = 64 << 10
#: size u32, count u16: the block's head.
BLOCK_HEAD = struct.Struct(">IH")
BLOCK_HEAD_SIZE = BLOCK_HEAD.size          # 6
#: The smallest pair: a 1-byte name and an empty value (namelen, name, valuelen).
MIN_PAIR = 4
#: The largest block: its head and MAX_HEADERS_BYTES of pairs.
MAX_BLOCK = BLOCK_HEAD_SIZE + MAX_HEADERS_BYTES

_U16 = struct.Struct(">H")
_u16_from = _U16.unpack_from
_U16_pack = _U16.pack
_head_from = BLOCK_HEAD.unpack_from
_head_pack = BLOCK_HEAD.pack

Pairs = Tuple[Tuple[str, bytes], ...]
HeadersLike = Union[None, dict, Iterable[Tuple[str, Union[bytes, bytearray, memoryview, str]]]]


class BadHeaders(ValueError):
    """A block that does not parse, or headers that cannot be sent; ``str()`` says why (fit
    for an INVALID)."""


def check_head(buf, pos: int, end: int) -> Tuple[int, int]:
    """``(count, size)`` of the block at ``buf[pos:end]`` from its head alone: raises
    :class:`BadHeaders` for a count or size over the limits, a count of 0, a count that
    cannot fit in ``size``, or a block that runs past ``end`` - before any pair is read."""
    if end - pos < BLOCK_HEAD_SIZE:
        raise BadHeaders("truncated headers")
    size, count = _head_from(buf, pos)
    if count > MAX_HEADERS:
        raise BadHeaders(f"{count} headers, over the limit of {MAX_HEADERS}")
    if size > MAX_HEADERS_BYTES:
        raise BadHeaders(f"headers of {size} bytes, over the limit of {MAX_HEADERS_BYTES}")
    if count == 0:
        raise BadHeaders("a headers block holds at least one header")
    if count * MIN_PAIR > size:
        raise BadHeaders(f"{count} headers cannot fit in {size} bytes")
    if pos + BLOCK_HEAD_SIZE + size > end:
        raise BadHeaders("truncated headers")
    return count, size


def block_end(buf, pos: int, end: int) -> int:
    """Where the block at ``pos`` ends, after checking its head and walking its pairs (names
    UTF-8 and non-empty, the pairs filling ``size`` exactly). Raises :class:`BadHeaders`."""
    count, size = check_head(buf, pos, end)
    stop = pos + BLOCK_HEAD_SIZE + size
    p = pos + BLOCK_HEAD_SIZE
    try:
        for i in range(count):
            n = buf[p]
            if n == 0:
                raise BadHeaders(f"header {i} has an empty name")
            try:
                bytes(buf[p + 1:p + 1 + n]).decode("utf-8")
            except UnicodeDecodeError:
                raise BadHeaders(f"the name of header {i} is not valid UTF-8") from None
            p += 1 + n
            p += 2 + _u16_from(buf, p)[0]
            if p > stop:
                raise IndexError
    except (IndexError, struct.error):
        raise BadHeaders(f"header {i} of {count} runs past the end of the headers") from None
    if p != stop:
        raise BadHeaders(f"{stop - p} bytes after the last of {count} headers")
    return stop


def decode_block(block) -> Pairs:
    """The pairs of a block (already checked: the journal's and the codec's blocks are)."""
    _size, count = _head_from(block, 0)
    out = []
    p = BLOCK_HEAD_SIZE
    for _ in range(count):
        n = block[p]
        name = bytes(block[p + 1:p + 1 + n]).decode("utf-8")
        p += 1 + n
        vlen = _u16_from(block, p)[0]
        out.append((name, bytes(block[p + 2:p + 2 + vlen])))
        p += 2 + vlen
    return tuple(out)


def normalise(headers: HeadersLike) -> Pairs:
    """Pairs from what an application gives: None, a dict (name -> value, or name -> a list of
    values for a repeated name), or an iterable of ``(name, value)`` pairs. Values are bytes
    (``str`` is encoded as UTF-8). Raises TypeError / :class:`BadHeaders` (a ValueError) for
    what cannot be sent: a name that is not text or not 1 to 255 bytes of UTF-8, a value not
    bytes or text, more than :data:`MAX_HEADERS` pairs or :data:`MAX_HEADERS_BYTES` bytes."""
    if headers is None:
        return ()
    if isinstance(headers, dict):
        items: List = []
        for name, value in headers.items():
            if isinstance(value, (list, tuple)):
                items.extend((name, v) for v in value)
            else:
                items.append((name, value))
    elif isinstance(headers, (str, bytes)):
        raise TypeError("headers must be a dict or (name, value) pairs, not "
                        f"{type(headers).__name__}")
    else:
        items = list(headers)
    out = []
    size = 0
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (name, value) pair, not {item!r:.60}") from None
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, not {type(name).__name__}")
        nb = _name_bytes(name)
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        elif not isinstance(value, bytes):
            raise TypeError(f"header {name[:40]!r}: value must be bytes or str, not "
                            f"{type(value).__name__}")
        out.append((name, value))
        size += 3 + len(nb) + len(value)
    if len(out) > MAX_HEADERS:
        raise BadHeaders(f"{len(out)} headers, over the limit of {MAX_HEADERS}")
    if size > MAX_HEADERS_BYTES:
        raise BadHeaders(f"headers of {size} bytes, over the limit of {MAX_HEADERS_BYTES}")
    return tuple(out)


def _name_bytes(name: str) -> bytes:
    """A header name in UTF-8: 1 to 255 bytes (:class:`BadHeaders` otherwise)."""
    nb = name.encode("utf-8")
    if not 1 <= len(nb) <= 255:
        raise BadHeaders(f"header name {name[:40]!r} is {len(nb)} bytes in UTF-8; it must "
                         f"be 1 to 255")
    return nb


def encode_block(pairs: Sequence[Tuple[str, bytes]]) -> bytes:
    """The block of (already normalised) pairs, at least one. Raises :class:`BadHeaders`."""
    if not pairs:
        raise BadHeaders("a headers block holds at least one header")
    if len(pairs) > MAX_HEADERS:
        raise BadHeaders(f"{len(pairs)} headers, over the limit of {MAX_HEADERS}")
    parts = [b""]
    for name, value in pairs:
        if not isinstance(name, str):
            raise BadHeaders(f"header name must be str, not {type(name).__name__}")
        nb = _name_bytes(name)
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise BadHeaders(f"header {name[:40]!r}: value must be bytes, not "
                             f"{type(value).__name__}")
        if len(value) > 0xFFFF:
            raise BadHeaders(f"header {name[:40]!r}: value of {len(value)} bytes, over 65535")
        parts.append(bytes((len(nb),)))
        parts.append(nb)
        parts.append(_U16_pack(len(value)))
        parts.append(bytes(value))
    size = sum(len(p) for p in parts)
    if size > MAX_HEADERS_BYTES:
        raise BadHeaders(f"headers of {size} bytes, over the limit of {MAX_HEADERS_BYTES}")
    parts[0] = _head_pack(size, len(pairs))
    return b"".join(parts)


class Headers(tuple):
    """A message's headers: a tuple of ``(name, value)`` pairs (``str``, ``bytes``) in the order
    they were published, names possibly repeated, with a few read-only look-ups (as NATS's
    ``Header.Get`` / ``Values`` and Kafka's ``lastHeader``). Empty for a message without
    headers. Being a tuple, it compares equal to the plain tuple of its pairs."""

    __slots__ = ()

    def get(self, name: str, default: Optional[bytes] = None) -> Optional[bytes]:
        """The first value of ``name``, or ``default``."""
        for n, v in self:
            if n == name:
                return v
        return default

    def getall(self, name: str) -> List[bytes]:
        """Every value of ``name``, in order (empty if none)."""
        return [v for n, v in self if n == name]

    def last(self, name: str, default: Optional[bytes] = None) -> Optional[bytes]:
        """The last value of ``name`` (Kafka's ``lastHeader``), or ``default``."""
        for n, v in reversed(self):
            if n == name:
                return v
        return default

    def names(self) -> List[str]:
        """The distinct names, in order of first appearance."""
        return list(dict.fromkeys(n for n, _ in self))

    def __repr__(self) -> str:
        return f"Headers({tuple(self)!r})"


NO_HEADERS = Headers()


def headers_of(block) -> Headers:
    """:class:`Headers` of a block (None: :data:`NO_HEADERS`)."""
    if block is None:
        return NO_HEADERS
    return Headers(decode_block(block))


__all__ = ["BadHeaders", "Headers", "NO_HEADERS", "MAX_HEADERS", "MAX_HEADERS_BYTES",
           "BLOCK_HEAD", "BLOCK_HEAD_SIZE", "MAX_BLOCK", "MIN_PAIR", "HEADERS_SELECT_ID",
           "HEADERS_SELECT_OK_ID", "PUBLISH_H_ID", "DELIVER_H_ID", "check_head", "block_end",
           "decode_block", "encode_block", "normalise", "headers_of"]


# --------------------------------------------------------------------------- the frames

#: PUBLISH-H: signature, id, then the block, then PUBLISH's fields (key, body).
PUBLISH_H_HEAD = b"\xaa\xa5" + bytes((PUBLISH_H_ID,))
#: DELIVER-H: signature, id, timestamp u64, sequence u64, the block, then key and body.
DELIVER_H_HEAD = b"\xaa\xa5" + bytes((DELIVER_H_ID,))
#: Where DELIVER-H's sequence is, and its block.
DELIVER_H_SEQ = 11
DELIVER_H_BLOCK = 19
#: A DELIVER-H frame's length minus the credit it costs: signature, id, timestamp, body length
#: (the timestamp is not charged, as in DELIVER-TS; the block is).
DELIVER_H_OVERHEAD = 15
_U64 = struct.Struct(">Q")
_U64_pack = _U64.pack


def publish_h_frame(block: bytes, key: bytes, body) -> bytes:
    """A PUBLISH-H frame from a checked block, an encoded key (<= 255 bytes) and a body."""
    return b"".join((PUBLISH_H_HEAD, block, bytes((len(key),)), key,
                     struct.pack(">I", len(body)), body))


def deliver_h_from_deliver(frame: bytes, timestamp: int, block: bytes) -> bytes:
    """The DELIVER-H frame for an encoded DELIVER frame (the journal's bytes), its time and
    its headers block: one concatenation of slices, nothing decoded."""
    return b"".join((DELIVER_H_HEAD, _U64_pack(timestamp), frame[3:11], block, frame[11:]))


def deliver_h_cost(frame) -> int:
    """Credit the message of an encoded DELIVER-H frame costs."""
    return len(frame) - DELIVER_H_OVERHEAD


def deliver_h_sequence(frame) -> int:
    return _U64.unpack_from(frame, DELIVER_H_SEQ)[0]


__all__ += ["PUBLISH_H_HEAD", "DELIVER_H_HEAD", "DELIVER_H_SEQ", "DELIVER_H_BLOCK",
            "DELIVER_H_OVERHEAD", "publish_h_frame", "deliver_h_from_deliver", "deliver_h_cost",
            "deliver_h_sequence"]
