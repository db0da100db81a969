"""ZEPS/1 wire codec: ``encode(command) -> bytes`` and ``decode(frame) -> command``.

Pure functions, no sockets. Every command is exactly one ZeroMQ frame:

    signature (0xAA 0xA5) | command id (1 octet) | fields in network byte order

``string`` = 1-octet length + bytes (UTF-8 here, at most 255 bytes); ``chunk`` = 4-octet
length + bytes; ``text`` = a chunk of UTF-8 (ERROR's texts, never cut); numbers are unsigned
big-endian. Like the reference codec (zproto's
zeps_msg), bytes after the last field are ignored (``aaa508ff`` decodes as PING).

Every decoding failure raises :class:`ProtocolError` whose message is a reason fit to send
back to the peer in INVALID.
"""
from __future__ import annotations

import struct
from typing import Union

from . import commands as c
from . import batch as _b
from . import deliver as _d
from . import headers as _h
from . import snapshot as _s

SIGNATURE = _d.SIGNATURE
_SIG0, _SIG1 = 0xAA, 0xA5
MAX_STRING = 255
MAX_CHUNK = 2**32 - 1
#: What a broker reads of a client's frame beyond its limits, so that a frame just over one is
#: refused with a reason (INVALID); a longer frame makes it drop the connection unread (its
#: socket's ``ZMQ_MAXMSGSIZE``). Every broker reads at least this much.
FRAME_SLACK = 64 << 10


def publish_frame_limit(max_message: int) -> int:
    """The longest PUBLISH frame a broker whose ``max_message`` is that surely reads (and
    refuses with a reason if its body is over the limit): the head, a 255-byte key, the body's
    length and ``max_message`` of body, then :data:`FRAME_SLACK`. Its socket reads at least this
    (more where its PUBLISH-BATCH limit is larger); the SDK sends no longer PUBLISH."""
    return 3 + 1 + MAX_STRING + 4 + max_message + FRAME_SLACK

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

Buffer = Union[bytes, bytearray, memoryview]


class ProtocolError(ValueError):
    """A frame that is not valid ZEPS/1. ``str(err)`` is the reason for INVALID."""


# Field layouts: (attribute, kind). kind: "string", "chunk", "u16", "u64", "strings", "text"
# (4-octet length + UTF-8), "texts" (2-octet count + that many "text").
_LAYOUT = {
    c.Attach: (("protocol", "string"), ("version", "u16"), ("stream", "string")),
    c.Subscribe: (("pattern", "string"), ("latest", "u64")),
    c.Credit: (("credit", "u64"),),
    c.Publish: (("key", "string"), ("body", "chunk")),
    c.Deliver: (("sequence", "u64"), ("key", "string"), ("body", "chunk")),
    c.Invalid: (("reason", "string"),),
    c.SeqAtTime: (("timestamp", "u64"),),
    c.SeqAtTimeOk: (("sequence", "u64"),),
    c.ConfirmSelectOk: (("published", "u64"),),
    c.Confirm: (("count", "u64"), ("sequence", "u64")),
    c.StreamInfoOk: (("first", "u64"), ("last", "u64"), ("size", "u64"),
                     ("oldest", "u64"), ("newest", "u64")),
    c.ListStreamsOk: (("streams", "strings"),),
    c.ListStreamsPage: (("after", "string"),),
    c.ListStreamsPageOk: (("streams", "strings"), ("next", "string")),
    c.Error: (("code", "u16"), ("fields", "texts"), ("text", "text")),
    c.DeliverTs: (("timestamp", "u64"), ("sequence", "u64"), ("key", "string"), ("body", "chunk")),
    c.SnapshotEntry: (("timestamp", "u64"), ("sequence", "u64"), ("key", "string"),
                      ("body", "chunk")),
    c.Snapshot: (("prefixes", "strings"),),
    c.SnapshotEnd: (("sequence", "u64"), ("count", "u64")),
    c.LimitsOk: (("max_message", "u64"), ("max_credit", "u64")),
    c.Producer: (("producer", "string"), ("next", "u64")),
    c.ProducerOk: (("last", "u64"),),
    c.StreamCreate: (("stream", "string"), ("retention_bytes", "u64"), ("retention_ms", "u64"),
                     ("max_message", "u64"), ("segment_bytes", "u64")),
    c.StreamDelete: (("stream", "string"),),
    c.StreamPurge: (("stream", "string"), ("upto", "u64")),
    c.StreamPurgeOk: (("first", "u64"),),
    c.StreamDescribe: (("stream", "string"),),
    c.StreamCreateX: (("stream", "string"), ("retention_bytes", "u64"), ("retention_ms", "u64"),
                      ("max_message", "u64"), ("segment_bytes", "u64"), ("flags", "u16"),
                      ("delete_retention_ms", "u64"), ("min_dirty_permille", "u16")),
    c.StreamSettingsGet: (("stream", "string"),),
    c.BatchSelectOk: (("max_batch", "u64"),),
    c.StreamIdOk: (("incarnation", "u64"),),
    c.StreamExpect: (("incarnation", "u64"),),
    c.HeadersSelectOk: (("max_headers", "u16"), ("max_bytes", "u32")),
    c.ConsumerAdd: (("name", "string"), ("patterns", "strings"), ("start", "u16"),
                    ("start_value", "u64"), ("ack", "u16"), ("ack_wait_ms", "u64"),
                    ("max_deliver", "u32"), ("max_ack_pending", "u32"), ("dead_letter", "string"),
                    ("flags", "u16")),
    c.ConsumerAddOk: (("start", "u64"),),
    c.Consume: (("name", "string"),),
    c.ConsumeOk: (("floor", "u64"), ("next", "u64"), ("skipped", "u64")),
    c.Ack: (("ranges", "chunk"),),
    c.Nak: (("sequence", "u64"), ("delay_ms", "u64")),
    c.Progress: (("sequence", "u64"),),
    c.ConsumerInfo: (("name", "string"),),
    c.ConsumerInfoOk: (("info", "text"),),
    c.ConsumerListOk: (("names", "strings"),),
    c.ConsumerDelete: (("name", "string"),),
    c.StreamDescribeOk: (("first", "u64"), ("last", "u64"), ("size", "u64"), ("oldest", "u64"),
                         ("newest", "u64"), ("retention_bytes", "u64"), ("retention_ms", "u64"),
                         ("max_message", "u64"), ("segment_bytes", "u64")),
}


# --------------------------------------------------------------------------- encoding

def _enc_string(name: str, value: str) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError(f"{name} must be text, not {type(value).__name__}")
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING:
        raise ProtocolError(f"{name} longer than 255 bytes")
    return bytes((len(raw),)) + raw


def _enc_number(name: str, value: int, packer: struct.Struct, bits: int) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**bits:
        raise ProtocolError(f"{name} must be an integer from 0 to 2^{bits}-1")
    return packer.pack(value)


def encode(cmd: c.Command) -> bytes:
    """Encode one command to the bytes of one ZeroMQ frame."""
    cls = type(cmd)
    if cls is c.Deliver:
        return encode_deliver(cmd.sequence, cmd.key.encode("utf-8"), cmd.body)
    if cls is c.Publish:
        return encode_publish(cmd.key, cmd.body)
    if cls is c.PublishBatch or cls is c.DeliverBatch:
        return _encode_batch(cmd)
    if cls is c.PublishHeaders or cls is c.DeliverHeaders or cls is c.SnapshotEntryH:
        return _encode_headers(cmd)
    layout = _LAYOUT.get(cls)
    if layout is None:
        if cls not in c.BY_ID.values():
            raise ProtocolError(f"not a ZEPS command: {cls.__name__}")
        return bytes((_SIG0, _SIG1, cls.ID))
    if cls is c.Attach:
        if cmd.protocol != c.PROTOCOL:
            raise ProtocolError("ATTACH protocol must be ZEPS")
        if cmd.version != c.VERSION:
            raise ProtocolError(f"ATTACH version {cmd.version} not supported (this is ZEPS/1)")
    parts = [bytes((_SIG0, _SIG1, cls.ID))]
    for attr, kind in layout:
        value = getattr(cmd, attr)
        if kind == "string":
            parts.append(_enc_string(attr, value))
        elif kind == "u64":
            parts.append(_enc_number(attr, value, _U64, 64))
        elif kind == "u16":
            parts.append(_enc_number(attr, value, _U16, 16))
        elif kind == "u32":
            parts.append(_enc_number(attr, value, _U32, 32))
        elif kind == "chunk":
            parts.append(_enc_chunk(attr, value))
        elif kind == "strings":
            if len(value) > 0xFFFF:
                raise ProtocolError(f"{attr}: more than 65535 entries")
            parts.append(_U16.pack(len(value)))
            parts.extend(_enc_string(attr, s) for s in value)
        elif kind == "text":
            parts.append(_enc_text(attr, value))
        elif kind == "texts":
            if isinstance(value, str) or len(value) > 0xFFFF:
                raise ProtocolError(f"{attr} must be a sequence of at most 65535 texts")
            parts.append(_U16.pack(len(value)))
            parts.extend(_enc_text(attr, s) for s in value)
    return b"".join(parts)


def _enc_text(name: str, value: str) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError(f"{name} must be text, not {type(value).__name__}")
    return _enc_chunk(name, value.encode("utf-8"))


def _enc_chunk(name: str, value: Buffer) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"{name} must be bytes, not {type(value).__name__}")
    if len(value) > MAX_CHUNK:
        raise ProtocolError(f"{name} longer than 2^32-1 bytes")
    return _U32.pack(len(value)) + bytes(value)


def encode_publish(key: str, body: Buffer) -> bytes:
    """Hot path: PUBLISH frame from a key (str) and a body (bytes)."""
    raw = key.encode("utf-8")
    if len(raw) > MAX_STRING:
        raise ProtocolError("key longer than 255 bytes")
    return b"".join((b"\xaa\xa5\x06", bytes((len(raw),)), raw, _U32.pack(len(body)), body))


def encode_deliver(sequence: int, key: bytes, body: Buffer) -> bytes:
    """Hot path: DELIVER frame from a sequence, an already-encoded key and a body."""
    if len(key) > MAX_STRING:
        raise ProtocolError("key longer than 255 bytes")
    if not 0 <= sequence < 2**64:
        raise ProtocolError("sequence must be an integer from 0 to 2^64-1")
    return _d.encode_deliver(sequence, key, body)


# --------------------------------------------------------------------------- decoding

def _need(frame: Buffer, end: int, name: str) -> None:
    if end > len(frame):
        raise ProtocolError(f"truncated {name}")


def _dec_string(frame: Buffer, pos: int, name: str, attr: str):
    _need(frame, pos + 1, name)
    n = frame[pos]
    end = pos + 1 + n
    _need(frame, end, name)
    try:
        return bytes(frame[pos + 1:end]).decode("utf-8"), end
    except UnicodeDecodeError:
        raise ProtocolError(f"{name} {attr} is not valid UTF-8") from None


def _dec_text(frame: Buffer, pos: int, name: str, attr: str):
    _need(frame, pos + 4, name)
    n = _U32.unpack_from(frame, pos)[0]
    end = pos + 4 + n
    _need(frame, end, name)
    try:
        return bytes(frame[pos + 4:end]).decode("utf-8"), end
    except UnicodeDecodeError:
        raise ProtocolError(f"{name} {attr} is not valid UTF-8") from None


def decode(frame: Buffer) -> c.Command:
    """Decode one frame to a command, or raise :class:`ProtocolError` with the reason."""
    if len(frame) < 3:
        if len(frame) == 0:
            raise ProtocolError("empty frame")
        raise ProtocolError("truncated frame: shorter than signature and command id")
    if frame[0] != _SIG0 or frame[1] != _SIG1:
        raise ProtocolError("bad signature")
    cid = frame[2]
    if cid == 6:
        return decode_publish(frame)
    if cid == _b.PUBLISH_BATCH_ID or cid == _b.DELIVER_BATCH_ID:
        return decode_batch(frame)
    if cid == _h.PUBLISH_H_ID or cid == _h.DELIVER_H_ID or cid == _s.SNAPSHOT_ENTRY_H_ID:
        return decode_headers(frame)
    cls = c.BY_ID.get(cid)
    if cls is None:
        raise ProtocolError(f"unknown command {cid}")
    layout = _LAYOUT.get(cls)
    if layout is None:
        return cls()
    name = cls.NAME
    pos = 3
    values = {}
    for attr, kind in layout:
        if kind == "string":
            values[attr], pos = _dec_string(frame, pos, name, attr)
        elif kind == "u64":
            _need(frame, pos + 8, name)
            values[attr] = _U64.unpack_from(frame, pos)[0]
            pos += 8
        elif kind == "u16":
            _need(frame, pos + 2, name)
            values[attr] = _U16.unpack_from(frame, pos)[0]
            pos += 2
        elif kind == "u32":
            _need(frame, pos + 4, name)
            values[attr] = _U32.unpack_from(frame, pos)[0]
            pos += 4
        elif kind == "chunk":
            _need(frame, pos + 4, name)
            n = _U32.unpack_from(frame, pos)[0]
            pos += 4
            _need(frame, pos + n, name)
            values[attr] = bytes(frame[pos:pos + n])
            pos += n
        elif kind == "strings":
            _need(frame, pos + 2, name)
            count = _U16.unpack_from(frame, pos)[0]
            pos += 2
            items = []
            for _ in range(count):
                s, pos = _dec_string(frame, pos, name, attr)
                items.append(s)
            values[attr] = tuple(items)
        elif kind == "text":
            values[attr], pos = _dec_text(frame, pos, name, attr)
        elif kind == "texts":
            _need(frame, pos + 2, name)
            count = _U16.unpack_from(frame, pos)[0]
            pos += 2
            _need(frame, pos + 4 * count, name)     # a forged count allocates nothing
            items = []
            for _ in range(count):
                s, pos = _dec_text(frame, pos, name, attr)
                items.append(s)
            values[attr] = tuple(items)
    if cls is c.Attach:
        if values["protocol"] != c.PROTOCOL:
            raise ProtocolError("ATTACH protocol must be ZEPS")
        if values["version"] != c.VERSION:
            raise ProtocolError(f"ATTACH version {values['version']} not supported (this is ZEPS/1)")
    return cls(**values)


def decode_publish(frame: Buffer) -> c.Publish:
    """Hot path: decode a PUBLISH frame (signature already checked by :func:`decode`)."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    try:
        klen = frame[3]
        blen = _U32_unpack_from(frame, 4 + klen)[0]
    except (IndexError, struct.error):
        raise ProtocolError("truncated PUBLISH") from None
    bpos = 8 + klen
    end = bpos + blen
    if end > len(frame):
        raise ProtocolError("truncated PUBLISH")
    try:
        key = frame[4:4 + klen].decode()
    except UnicodeDecodeError:
        raise ProtocolError("PUBLISH key is not valid UTF-8") from None
    cmd = _new(c.Publish)           # the frozen dataclass's __init__, minus its call overhead
    _set(cmd, "key", key)
    _set(cmd, "body", frame[bpos:end])
    return cmd


def _encode_batch(cmd) -> bytes:
    count = cmd.count
    if not isinstance(count, int) or not 1 <= count <= _b.MAX_COUNT:
        raise ProtocolError(f"{cmd.NAME} count must be an integer from 1 to 2^32-1")
    entries = bytes(cmd.entries)
    try:
        _b.walk(entries, 0, len(entries), count)
    except _b.BadEntries as exc:
        raise ProtocolError(f"{cmd.NAME}: {exc}") from None
    if type(cmd) is c.PublishBatch:
        return _b.publish_batch_head(count) + entries
    for attr in ("timestamp", "sequence"):
        _enc_number(attr, getattr(cmd, attr), _U64, 64)
    return _b.deliver_batch_head(cmd.timestamp, cmd.sequence, count) + entries


def decode_batch(frame: Buffer):
    """PUBLISH-BATCH or DELIVER-BATCH (signature already checked). Unlike the other commands,
    no byte may follow the last entry: trailing bytes would be messages silently lost."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    if frame[2] == _b.PUBLISH_BATCH_ID:
        cls, head = c.PublishBatch, _b.PUBLISH_HEAD
    else:
        cls, head = c.DeliverBatch, _b.DELIVER_HEAD
    if len(frame) < head.size:
        raise ProtocolError(f"truncated {cls.NAME}")
    fields = head.unpack_from(frame)
    count = fields[-1]
    entries = frame[head.size:]
    try:
        offsets = _b.walk(entries, 0, len(entries), count)
    except _b.BadEntries as exc:
        raise ProtocolError(f"{cls.NAME}: {exc}") from None
    if cls is c.PublishBatch:
        return c.PublishBatch(count, entries, tuple(offsets))
    return c.DeliverBatch(fields[2], fields[3], count, entries, tuple(offsets))


def _encode_headers(cmd) -> bytes:
    try:
        block = _h.encode_block(cmd.headers)
    except _h.BadHeaders as exc:
        raise ProtocolError(f"{cmd.NAME}: {exc}") from None
    key = _enc_string("key", cmd.key)
    body = _enc_chunk("body", cmd.body)
    if type(cmd) is c.PublishHeaders:
        return b"".join((_h.PUBLISH_H_HEAD, block, key, body))
    head = _s.ENTRY_H_HEAD if type(cmd) is c.SnapshotEntryH else _h.DELIVER_H_HEAD
    return b"".join((head, _enc_number("timestamp", cmd.timestamp, _U64, 64),
                     _enc_number("sequence", cmd.sequence, _U64, 64), block, key, body))


def decode_headers(frame: Buffer):
    """PUBLISH-H, DELIVER-H or SNAPSHOT-ENTRY-H (signature already checked). The headers' head
    is checked against the limits before a single pair is read (:func:`zeps.protocol.headers.check_head`):
    a declared count or size over them is refused at once, whatever follows."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    if frame[2] == _h.PUBLISH_H_ID:
        cls, pos = c.PublishHeaders, 3
    else:
        cls = c.SnapshotEntryH if frame[2] == _s.SNAPSHOT_ENTRY_H_ID else c.DeliverHeaders
        pos = _h.DELIVER_H_BLOCK
        _need(frame, pos, cls.NAME)
    try:
        end = _h.block_end(frame, pos, len(frame))
    except _h.BadHeaders as exc:
        raise ProtocolError(f"{cls.NAME}: {exc}") from None
    block = frame[pos:end]
    key, kend = _dec_string(frame, end, cls.NAME, "key")
    _need(frame, kend + 4, cls.NAME)
    n = _U32.unpack_from(frame, kend)[0]
    _need(frame, kend + 4 + n, cls.NAME)
    body = frame[kend + 4:kend + 4 + n]
    headers = _h.decode_block(block)
    if cls is c.PublishHeaders:
        return c.PublishHeaders(key, body, headers, block)
    ts, seq = _U64.unpack_from(frame, 3)[0], _U64.unpack_from(frame, 11)[0]
    return cls(ts, seq, key, body, headers, block)


_U32_unpack_from = _U32.unpack_from
_new = object.__new__
_set = object.__setattr__


deliver_ts_from_deliver = _d.ts_from_deliver


def encode_invalid(reason: str) -> bytes:
    """An INVALID frame; a reason over 255 bytes of UTF-8 is cut to fit and ends with '...'."""
    raw = reason.encode("utf-8")
    if len(raw) > MAX_STRING:
        reason = raw[:MAX_STRING - 3].decode("utf-8", "ignore") + "..."
    return encode(c.Invalid(reason))


deliver_sequence = _d.sequence_of
