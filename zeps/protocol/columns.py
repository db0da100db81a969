"""The columnar batch layout (issue 20, design step): N messages as Arrow-style columns.

Today's batches (:mod:`.batch`) lay messages out as *rows* (``keylen | key | bodylen | body``
per message): reading one means a Python step per message. This layout keeps the same
messages as two offset arrays and two data buffers, so that pyarrow
(``pa.Array.from_buffers``) and numpy (``np.frombuffer``) wrap them in place, without copying
and without a Python step per message. It is not yet on the wire: see docs/columns.md for
the negotiated commands (PUBLISH-COLUMNS 93, DELIVER-COLUMNS 94) it is laid out for, and what
carrying it end to end would take. Plain ZEPS/1 and the row batches are unchanged.

A frame (every number little-endian, as Arrow's buffers are; ``pad8(x)`` = ``x`` rounded up to
a multiple of 8, the padding zero bytes)::

    offset 0    signature      AA A5
    offset 2    command id     93 (PUBLISH-COLUMNS) or 94 (DELIVER-COLUMNS)
    offset 3    version        u8 = 1
    offset 4    count          u32 LE   N >= 1 messages
    offset 8    timestamp      u64 LE   (0 in a PUBLISH-COLUMNS)
    offset 16   sequence       u64 LE   first message's (0 in a PUBLISH-COLUMNS; >= 1 else)
    offset 24   keys_size      u32 LE   K, bytes of all keys
    offset 28   bodies_size    u32 LE   B, bytes of all bodies
    offset 32   key offsets    N + 1 int32 LE: 0 = ko[0] <= ko[1] <= ... <= ko[N] = K,
                               ko[i+1] - ko[i] <= 255; padded to pad8(4 (N + 1))
    then        body offsets   N + 1 int32 LE: 0 = bo[0] <= ... <= bo[N] = B; padded likewise
    then        keys           K bytes: key i is keys[ko[i]:ko[i+1]], UTF-8; padded to pad8(K)
    then        bodies         B bytes: body i is bodies[bo[i]:bo[i+1]]; padded to pad8(B)

The frame's length is exactly ``32 + 2 pad8(4 (N + 1)) + pad8(K) + pad8(B)``, known from the
header alone: it is checked before anything after the header is read. Every section starts at
a multiple of 8 from the frame's start (a Python ``bytes`` object's data is 16-aligned), the
alignment Arrow asks of its buffers. Offsets are int32 as in Arrow's ``string``/``binary``
arrays: a frame carries less than 2 GiB of keys and of bodies (``large_binary``'s int64 offsets
are out of scope: a batch is at most ``max_batch`` bytes, 1 MiB by default).

Credit is counted per message as ZEPS/1 defines it, ``8 + 1 + len(key) + len(body)``: a frame
costs ``9 N + K + B`` (:func:`columns_cost`), what the same messages cost as DELIVERs or as a
DELIVER-BATCH.

:func:`decode_columns` checks everything before it trusts anything, with numpy when it is
installed and in plain Python otherwise (``use_numpy=False`` forces the fallback; both give
the same answers and the same errors): a :class:`BadColumns` names what is wrong. A frame
decodes only if it is exactly the encoding of the messages it is read as (one encoding per
batch: zero padding, reserved fields zero). Pure: no sockets; numpy and pyarrow are optional
(the ``spark`` extra): :func:`to_arrow` needs pyarrow, nothing else needs either.
"""
from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left
from codecs import utf_8_decode
from itertools import accumulate, chain, repeat
from operator import add, sub
from typing import List, NamedTuple, Optional, Sequence, Tuple

from .batch import (DELIVER_HEAD, DELIVER_HEAD_SIZE, MAX_BATCH_ENTRIES, PUBLISH_BATCH_ID,
                    PUBLISH_HEAD, PUBLISH_HEAD_SIZE, BadEntries, deliver_batch_head,
                    publish_batch_head, walk)
from .deliver import SIGNATURE

try:                                  # optional: the vectorised checks
    import numpy as np
except ImportError:                   # pragma: no cover - numpy is in the test extra
    np = None

__all__ = ["BadColumns", "ColumnsHeader", "DecodedColumns", "encode_columns", "decode_columns",
           "to_arrow", "rows_from_columns", "columns_from_rows", "columns_cost",
           "columns_size", "PUBLISH_COLUMNS_ID", "DELIVER_COLUMNS_ID", "VERSION", "HEAD_SIZE"]

PUBLISH_COLUMNS_ID = 93
DELIVER_COLUMNS_ID = 94
#: Reserved for the negotiation docs/columns.md proposes (COLUMNS-SELECT, COLUMNS-SELECT-OK);
#: none of 93-96 is in zeps/protocol/commands.py yet: the codec answers "unknown command".
COLUMNS_SELECT_ID = 95
COLUMNS_SELECT_OK_ID = 96
VERSION = 1
#: signature, command id, version, count, timestamp, sequence, keys_size, bodies_size
HEAD = struct.Struct("<2sBBIQQII")
HEAD_SIZE = HEAD.size                # 32
MAX_KEY = 255
#: int32 offsets: at most this many bytes of keys, and of bodies, in one frame
MAX_BUFFER = 2**31 - 1
MAX_U64 = 2**64 - 1
#: credit per message besides its key and body (ZEPS/1: the sequence and the key length)
COST_PER_MESSAGE = 9
_LITTLE = sys.byteorder == "little"
_ZEROS = bytes(8)
_head_pack = HEAD.pack
_head_unpack = HEAD.unpack_from
_U32BE = struct.Struct(">I").pack
#: the bytes 0b10xxxxxx: UTF-8 continuation bytes, which never start a character
_CONTINUATION = bytes(range(0x80, 0xC0))
#: a row entry's key length octet, by length
_LEN_OCTET = [bytes((i,)) for i in range(MAX_KEY + 1)]


class BadColumns(ValueError):
    """A columnar frame that does not decode; ``str()`` says what is wrong (fit for an
    INVALID)."""


class ColumnsHeader(NamedTuple):
    command: int          # PUBLISH_COLUMNS_ID or DELIVER_COLUMNS_ID
    count: int
    timestamp: int
    sequence: int
    keys_size: int
    bodies_size: int


class DecodedColumns(NamedTuple):
    """What :func:`decode_columns` returns, all views of the frame (nothing copied):
    ``key_offsets`` / ``body_offsets`` are int32 numpy arrays (memoryviews of format ``i``
    in the fallback), ``keys`` / ``bodies`` memoryviews of the two data buffers."""
    key_offsets: object
    keys: memoryview
    body_offsets: object
    bodies: memoryview
    header: ColumnsHeader


def _pad(n: int) -> int:
    return (-n) & 7


def columns_size(count: int, keys_size: int, bodies_size: int) -> int:
    """The exact length of a frame of ``count`` messages with these buffer sizes."""
    off = 4 * (count + 1)
    return HEAD_SIZE + 2 * (off + _pad(off)) + keys_size + _pad(keys_size) + bodies_size \
        + _pad(bodies_size)


def columns_cost(header: ColumnsHeader) -> int:
    """Credit the messages of a frame cost (as their DELIVERs would)."""
    return COST_PER_MESSAGE * header.count + header.keys_size + header.bodies_size


# ------------------------------------------------------------------------------ encoding

def _key_bytes(key) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        kb = bytes(key)
        try:
            kb.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"key is not valid UTF-8: {kb[:40]!r}") from None
        return kb
    raise TypeError(f"key must be str or UTF-8 bytes, not {type(key).__name__}")


def _offsets(lengths: Sequence[int]) -> bytes:
    """The int32 LE offsets of these lengths (0 first), packed with one call."""
    return struct.pack(f"<{len(lengths) + 1}i", *accumulate(lengths, initial=0))


def encode_columns(keys: Sequence, bodies: Sequence, *, sequence: int = 0,
                   timestamp: int = 0) -> bytes:
    """The columnar frame of messages ``(keys[i], bodies[i])``: a PUBLISH-COLUMNS when
    ``sequence`` is 0 (``timestamp`` must be 0 too), else a DELIVER-COLUMNS of messages
    ``sequence .. sequence + N - 1`` journalled at ``timestamp``. Keys are ``str`` (or UTF-8
    bytes) of at most 255 bytes, bodies bytes-like (or ``str``, sent as UTF-8). Built with
    joins and C-level maps: no bytes are concatenated per message, ASCII keys are encoded
    with one call, the bodies are copied once, into the frame. Raises ValueError /
    TypeError."""
    n = len(keys)
    if n != len(bodies):
        raise ValueError(f"{n} keys but {len(bodies)} bodies")
    if not 1 <= n <= 2**32 - 1:
        raise ValueError("a columnar batch holds from 1 to 2^32-1 messages")
    if sequence == 0:
        if timestamp != 0:
            raise ValueError("a PUBLISH-COLUMNS carries no timestamp (sequence 0)")
        command = PUBLISH_COLUMNS_ID
    else:
        if not 1 <= sequence <= MAX_U64 - (n - 1) or not 0 <= timestamp <= MAX_U64:
            raise ValueError("sequence or timestamp out of range for a DELIVER-COLUMNS")
        command = DELIVER_COLUMNS_ID
    try:
        joined = "".join(keys)
    except TypeError:                        # not all str: bytes keys, or refused below
        joined = None
    if joined is not None and joined.isascii():       # (O(1) for a str) one encode for all
        kbuf, klens = joined.encode("ascii"), list(map(len, keys))
    else:
        kb = list(map(str.encode, keys)) if joined is not None else list(map(_key_bytes, keys))
        kbuf, klens = b"".join(kb), list(map(len, kb))
    try:
        return _assemble(command, kbuf, klens, bodies, sequence, timestamp)
    except TypeError:
        if not any(isinstance(b, str) for b in bodies):
            raise
    bodies = [b.encode("utf-8") if isinstance(b, str) else b for b in bodies]
    return _assemble(command, kbuf, klens, bodies, sequence, timestamp)


def _assemble(command: int, kbuf: bytes, klens: List[int], bodies: Sequence, sequence: int,
              timestamp: int) -> bytes:
    """The frame of the joined UTF-8 keys ``kbuf`` (key ``i`` ``klens[i]`` bytes long) and
    ``bodies``; TypeError for a body that is not bytes-like of bytes."""
    n = len(klens)
    if max(klens) > MAX_KEY:
        i = next(i for i, k in enumerate(klens) if k > MAX_KEY)
        raise ValueError(f"key {i} is longer than {MAX_KEY} bytes")
    blens = list(map(len, bodies))
    k_size, b_size = len(kbuf), sum(blens)
    if b_size > MAX_BUFFER or k_size > MAX_BUFFER:
        raise ValueError("keys or bodies over 2 GiB do not fit int32 offsets")
    opad = _ZEROS[:_pad(4 * (n + 1))]
    parts = [_head_pack(SIGNATURE, command, VERSION, n, timestamp, sequence, k_size, b_size),
             _offsets(klens), opad, _offsets(blens), opad, kbuf, _ZEROS[:_pad(k_size)]]
    parts += bodies
    parts.append(_ZEROS[:_pad(b_size)])
    frame = b"".join(parts)
    if len(frame) != columns_size(n, k_size, b_size):     # len() of a memoryview of non-bytes
        raise TypeError("bodies must be bytes-like objects of bytes")
    return frame


# ------------------------------------------------------------------------------ decoding

def _header(frame, max_count: int) -> Tuple[ColumnsHeader, int, int]:
    """The checked header, and where the body offsets and the keys start."""
    if len(frame) < HEAD_SIZE:
        raise BadColumns(f"truncated columnar frame: {len(frame)} bytes, the header alone is "
                         f"{HEAD_SIZE}")
    sig, cid, version, n, ts, seq, k_size, b_size = _head_unpack(frame)
    if sig != SIGNATURE or cid not in (PUBLISH_COLUMNS_ID, DELIVER_COLUMNS_ID):
        raise BadColumns("not a columnar frame (signature or command id)")
    if version != VERSION:
        raise BadColumns(f"columnar version {version} is not known (this side reads {VERSION})")
    if not 1 <= n <= max_count:
        raise BadColumns(f"count {n} is not from 1 to {max_count}")
    if k_size > MAX_KEY * n:
        raise BadColumns(f"{k_size} bytes of keys cannot be {n} keys of at most {MAX_KEY}")
    if b_size > MAX_BUFFER:
        raise BadColumns(f"bodies_size {b_size} is over the int32 offsets' {MAX_BUFFER}")
    if cid == PUBLISH_COLUMNS_ID:
        if ts or seq:
            raise BadColumns("a PUBLISH-COLUMNS has timestamp and sequence 0")
    elif not 1 <= seq <= MAX_U64 - (n - 1):
        raise BadColumns(f"sequences {seq}..{seq}+{n - 1} are not within 1..2^64-1")
    want = columns_size(n, k_size, b_size)
    if len(frame) != want:
        raise BadColumns(f"columnar frame of {len(frame)} bytes; its header says {want}")
    off = 4 * (n + 1)
    bo_at = HEAD_SIZE + off + _pad(off)
    return ColumnsHeader(cid, n, ts, seq, k_size, b_size), bo_at, bo_at + off + _pad(off)


def _check_padding(mv: memoryview, spans) -> None:
    for what, start, length in spans:
        end = start + length
        if mv[end:end + _pad(length)] != _ZEROS[:_pad(length)]:
            raise BadColumns(f"the padding after the {what} is not zero")


def _check_offsets_np(offs, size: int, what: str, limit: Optional[int]) -> None:
    """``offs`` (int64) run from 0 to ``size`` without going back (steps of at most
    ``limit``): one vectorised pass; the loops only find what to name in an error."""
    if offs[0] != 0 or offs[-1] != size:
        raise BadColumns(f"{what} offsets run from {int(offs[0])} to {int(offs[-1])}, "
                         f"not 0 to {size}")
    d = offs[1:] - offs[:-1]
    if limit is None:
        if not np.count_nonzero(d < 0):
            return
    elif not np.count_nonzero(d.view(np.uint64) > limit):   # a step < 0 is huge as uint64
        return
    _check_offsets_py(offs.tolist(), size, what, limit)     # (raises, naming the message)


def _check_offsets_py(offs: List[int], size: int, what: str, limit: Optional[int]) -> None:
    if offs[0] != 0 or offs[-1] != size:
        raise BadColumns(f"{what} offsets run from {offs[0]} to {offs[-1]}, not 0 to {size}")
    d = list(map(sub, offs[1:], offs[:-1]))        # one C loop, no bytecode per message
    if min(d) < 0:
        raise BadColumns(f"{what} offsets go back at {what} {next(i for i, x in enumerate(d) if x < 0)}")
    if limit is not None and max(d) > limit:
        raise BadColumns(f"{what} {next(i for i, x in enumerate(d) if x > limit)} is longer "
                         f"than {limit} bytes")


def _bad_key(keys: memoryview, offs: List[int]) -> BadColumns:
    """The error naming the first key that is not UTF-8 (the error path: a loop is fine)."""
    for i in range(len(offs) - 1):
        try:
            utf_8_decode(keys[offs[i]:offs[i + 1]], "strict", True)
        except UnicodeDecodeError:
            return BadColumns(f"key {i} is not valid UTF-8")
    return BadColumns("the keys are not valid UTF-8")    # pragma: no cover - unreachable


def _check_keys(keys: memoryview, offs, vector: bool) -> None:
    """Every key is UTF-8: the keys buffer decodes as a whole (one call) and no key starts
    with a continuation byte (0b10xxxxxx). In valid UTF-8 every other byte starts a
    character, so each key is then a run of whole characters. As many characters as bytes:
    all ASCII, nothing more to check."""
    if not len(keys):
        return
    try:
        if len(utf_8_decode(keys, "strict", True)[0]) == len(keys):
            return
    except UnicodeDecodeError:
        raise _bad_key(keys, list(map(int, offs))) from None
    # (offsets are checked: non-decreasing, so those equal to len(keys), the starts of empty
    # last keys, are a suffix)
    if vector:
        kb = np.frombuffer(keys, dtype=np.uint8)
        starts = offs[:int(np.searchsorted(offs, len(kb)))]
        bad = np.count_nonzero((kb[starts] & 0xC0) == 0x80) > 0
    else:
        firsts = bytes(map(keys.__getitem__, offs[:bisect_left(offs, len(keys))]))
        bad = len(firsts.translate(None, _CONTINUATION)) != len(firsts)
    if bad:
        raise _bad_key(keys, list(map(int, offs)))


def decode_columns(frame, *, max_count: int = MAX_BATCH_ENTRIES,
                   use_numpy: Optional[bool] = None) -> DecodedColumns:
    """The columns of a PUBLISH-COLUMNS or DELIVER-COLUMNS ``frame`` (bytes-like), as views of
    it: see :class:`DecodedColumns`. Checked first, in this order: the length against the
    header's 32 bytes, signature, id, version, ``1 <= count <= max_count``, sizes that can
    hold the count, reserved or valid sequence and timestamp, the frame's exact length, zero
    padding, both offset arrays (0 first, the buffer's size last, never decreasing, keys of
    at most 255 bytes), the keys' UTF-8. ``use_numpy``: None uses numpy when it is installed,
    False forces the pure-Python checks. Raises :class:`BadColumns`, nothing else."""
    vector = np is not None if use_numpy is None else bool(use_numpy)
    if vector and np is None:
        raise ImportError("use_numpy=True but numpy is not installed")
    mv = memoryview(frame)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    header, bo_at, k_at = _header(mv, max_count)
    n, k_size, b_size = header.count, header.keys_size, header.bodies_size
    off = 4 * (n + 1)
    b_at = k_at + k_size + _pad(k_size)
    _check_padding(mv, (("key offsets", HEAD_SIZE, off), ("body offsets", bo_at, off),
                        ("keys", k_at, k_size), ("bodies", b_at, b_size)))
    keys, bodies = mv[k_at:k_at + k_size], mv[b_at:b_at + b_size]
    if vector:
        ko = np.frombuffer(mv, dtype="<i4", count=n + 1, offset=HEAD_SIZE)
        bo = np.frombuffer(mv, dtype="<i4", count=n + 1, offset=bo_at)
        # both offset arrays widened at once (int64: a forged int32 step cannot wrap)
        both = np.frombuffer(mv, dtype="<i4", count=(k_at - HEAD_SIZE) // 4,
                             offset=HEAD_SIZE).astype(np.int64)
        k64, b64 = both[:n + 1], both[(bo_at - HEAD_SIZE) // 4:][:n + 1]
        _check_offsets_np(k64, k_size, "key", MAX_KEY)
        _check_offsets_np(b64, b_size, "body", None)
        _check_keys(keys, k64, True)
    else:
        ko, bo = _int32s(mv, HEAD_SIZE, n + 1), _int32s(mv, bo_at, n + 1)
        kl, bl = ko.tolist(), bo.tolist()
        _check_offsets_py(kl, k_size, "key", MAX_KEY)
        _check_offsets_py(bl, b_size, "body", None)
        _check_keys(keys, kl, False)
    return DecodedColumns(ko, keys, bo, bodies, header)


def _int32s(mv: memoryview, at: int, count: int):
    """``count`` little-endian int32 at ``at``: a view where the host is little-endian."""
    part = mv[at:at + 4 * count]
    if _LITTLE:
        return part.cast("i")
    a = array("i", part)              # pragma: no cover - big-endian hosts
    a.byteswap()                      # pragma: no cover
    return memoryview(a)              # pragma: no cover


# ------------------------------------------------------------------------------ Arrow

def to_arrow(frame, *, max_count: int = MAX_BATCH_ENTRIES):
    """A ``pyarrow.RecordBatch`` of a checked frame, its ``key`` (string) and ``body``
    (binary) columns wrapping the frame's own buffers (nothing copied, no Python step per
    message). A DELIVER-COLUMNS also gets ``sequence`` (int64, ``sequence + i``) and
    ``timestamp`` (``timestamp[ns, UTC]``, the batch's), computed vectorised. Needs pyarrow
    and numpy (ImportError otherwise); raises :class:`BadColumns` for a bad frame, including
    sequences or a timestamp beyond int64."""
    import pyarrow as pa
    if np is None:
        raise ImportError("to_arrow needs numpy")
    d = decode_columns(frame, max_count=max_count, use_numpy=True)
    h = d.header
    n = h.count
    off = 4 * (n + 1)
    bo_at = HEAD_SIZE + off + _pad(off)
    k_at = bo_at + off + _pad(off)
    b_at = k_at + h.keys_size + _pad(h.keys_size)
    buf = pa.py_buffer(frame)
    key = pa.Array.from_buffers(pa.string(), n, [None, buf.slice(HEAD_SIZE, off),
                                                 buf.slice(k_at, h.keys_size)])
    body = pa.Array.from_buffers(pa.binary(), n, [None, buf.slice(bo_at, off),
                                                  buf.slice(b_at, h.bodies_size)])
    if h.command == PUBLISH_COLUMNS_ID:
        return pa.RecordBatch.from_arrays([key, body], names=["key", "body"])
    top = 2**63 - 1
    if h.sequence + n - 1 > top or h.timestamp > top:
        raise BadColumns("sequence or timestamp beyond int64 (Arrow's columns)")
    seq = pa.array(np.arange(h.sequence, h.sequence + n, dtype=np.int64))
    ts = pa.repeat(pa.scalar(h.timestamp, pa.timestamp("ns", tz="UTC")), n)
    return pa.RecordBatch.from_arrays([seq, ts, key, body],
                                      names=["sequence", "timestamp", "key", "body"])


# ------------------------------------------------------------------------------ rows <-> columns

def rows_from_columns(frame, *, max_count: int = MAX_BATCH_ENTRIES,
                      use_numpy: Optional[bool] = None) -> bytes:
    """The row frame of the same messages: a PUBLISH-BATCH for a PUBLISH-COLUMNS, a
    DELIVER-BATCH (same timestamp and first sequence) for a DELIVER-COLUMNS (what a
    subscriber that did not negotiate columns would be sent). From 256 messages, with numpy
    and pyarrow, Arrow lays the entries out (C++); else C-level maps over slices of the frame
    (``use_numpy=False`` forces that path; both give the same bytes). Raises
    :class:`BadColumns`."""
    d = decode_columns(frame, max_count=max_count, use_numpy=use_numpy)
    h = d.header
    if h.command == PUBLISH_COLUMNS_ID:
        head = publish_batch_head(h.count)
    else:
        head = deliver_batch_head(h.timestamp, h.sequence, h.count)
    if h.count >= _ARROW_ROWS_MIN and isinstance(d.key_offsets, _ndarray()) and _compute():
        return b"".join((head, _entries_arrow(d)))
    ko, bo = d.key_offsets.tolist(), d.body_offsets.tolist()
    # C-level maps: no bytecode per message
    parts = zip(map(_LEN_OCTET.__getitem__, map(sub, ko[1:], ko[:-1])),
                map(d.keys.__getitem__, map(slice, ko, ko[1:])),
                map(_U32BE, map(sub, bo[1:], bo[:-1])),
                map(d.bodies.__getitem__, map(slice, bo, bo[1:])))
    return head + b"".join(chain.from_iterable(parts))


#: from this many messages, rows_from_columns lets Arrow lay the entries out (below it, its
#: fixed cost is more than the Python maps')
_ARROW_ROWS_MIN = 256
_pc = None


def _ndarray():
    return np.ndarray if np is not None else ()


def _compute():
    """``pyarrow.compute``, or None if pyarrow is not installed."""
    global _pc
    if _pc is None:
        try:
            import pyarrow.compute as pc
        except ImportError:                   # pragma: no cover - pyarrow is in the test extra
            pc = False
        _pc = pc
    return _pc


def _entries_arrow(d: DecodedColumns) -> memoryview:
    """The row entries of checked columns, concatenated element-wise by Arrow (C++): the
    length octet, the key, the body length (u32 BE), the body; no Python step per message."""
    import pyarrow as pa
    n = d.header.count
    ko, bo = d.key_offsets, d.body_offsets
    klen = (ko[1:] - ko[:-1]).astype(np.uint8)
    blen = (bo[1:] - bo[:-1]).astype(">u4")
    octet = pa.FixedSizeBinaryArray.from_buffers(pa.binary(1), n, [None, pa.py_buffer(klen)])
    u32 = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, pa.py_buffer(blen)])
    key = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(ko), pa.py_buffer(d.keys)])
    body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(bo),
                                                  pa.py_buffer(d.bodies)])
    out = _pc.binary_join_element_wise(octet.cast(pa.binary()), key, u32.cast(pa.binary()),
                                       body, b"")
    return memoryview(out.buffers()[2])[:5 * n + d.header.keys_size + d.header.bodies_size]


def columns_from_rows(frame) -> bytes:
    """The columnar frame of a PUBLISH-BATCH or DELIVER-BATCH ``frame`` (parsed by the one
    walker of entries, :func:`zeps.protocol.batch.walk`, keys checked). Raises
    :class:`BadColumns` for a row frame that does not parse."""
    frame = bytes(frame)
    if len(frame) < PUBLISH_HEAD_SIZE or frame[:2] != SIGNATURE:
        raise BadColumns("not a batch frame")
    if frame[2] == PUBLISH_BATCH_ID:
        count, start, seq, ts = PUBLISH_HEAD.unpack_from(frame)[2], PUBLISH_HEAD_SIZE, 0, 0
    elif len(frame) >= DELIVER_HEAD_SIZE and frame[2] == PUBLISH_BATCH_ID + 1:
        _s, _i, ts, seq, count = DELIVER_HEAD.unpack_from(frame)
        start = DELIVER_HEAD_SIZE
        if not 1 <= seq <= MAX_U64 - (count - 1):
            raise BadColumns(f"sequences {seq}..{seq}+{count - 1} are not within 1..2^64-1")
    else:
        raise BadColumns("not a PUBLISH-BATCH or DELIVER-BATCH frame")
    try:
        offs = walk(frame, start, len(frame), count)
    except BadEntries as exc:
        raise BadColumns(str(exc)) from None
    starts = offs[:-1]
    k0 = list(map(add, starts, repeat(1)))
    k1 = list(map(add, k0, map(frame.__getitem__, starts)))       # + the key length octet
    keys = b"".join(map(frame.__getitem__, map(slice, k0, k1)))
    bodies = list(map(frame.__getitem__, map(slice, map(add, k1, repeat(4)), offs[1:])))
    command = PUBLISH_COLUMNS_ID if frame[2] == PUBLISH_BATCH_ID else DELIVER_COLUMNS_ID
    return _assemble(command, keys, list(map(sub, k1, k0)), bodies, seq, ts)
