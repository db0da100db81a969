"""Batching, the client's part: natural batching of publishes and the decoding of DELIVER-BATCH.

After each ATTACH the peering asks ``BATCH-SELECT`` (pipelined with ``LIMITS``): a broker
that knows batching answers ``BATCH-SELECT-OK max_batch`` and from then on sends this
peering's messages as DELIVER-BATCH and takes PUBLISH-BATCH frames of up to ``max_batch``
bytes; an older one answers INVALID and the peering stays on plain PUBLISH / DELIVER (ZEPS/1).

The broker refuses a whole PUBLISH-BATCH (one INVALID per entry) when one of its bodies is
over the stream's limit, where a PUBLISH refuses that message alone. So a message whose body
is over the limit (the broker's ``LIMITS`` ``max_message``, lowered by the stream's own, which
the peering asks with ``STREAM-DESCRIBE`` right after ``BATCH-SELECT``) is never batched: it
goes as a plain PUBLISH and is refused alone, as without batches. Batching starts once both
answers are in.

**Natural batching** (:class:`PublishQueue`): a publish leaves at once, as a plain PUBLISH,
when nothing waits for the socket. Publishes made while something waits (the socket's
high-water mark refused a frame) join the queue, and whatever the queue holds goes out as *one*
PUBLISH-BATCH as soon as the socket takes frames again: no linger, so a lone publish at a low
rate has the latency it had, and a tight loop of publishes (faster than the socket drains)
goes out in frames as large as ``max_batch`` allows (and of at most ``MAX_BATCH_ENTRIES``
messages). A message whose entry alone would not fit
in ``max_batch`` goes as a plain PUBLISH, in its place. Each entry counts as one PUBLISH at the
broker (CONFIRM counts, producer sequences, one INVALID per refused entry), so the peering's
accounting per publish is the same with or without batches.

The queue holds the publishes' PUBLISH frames (each receipt keeps its own to re-send after a
reconnect); a batch's entries are those frames without their 3-octet head
(:func:`zeps.protocol.batch.encode_entries` lays entries out exactly like PUBLISH's fields).

Pure: no sockets, no clock. :class:`~zeps.clients.peering.Peering` owns one queue and
decides when it is sealed (:meth:`PublishQueue.seal`, whenever anything else is sent, so that
order is kept, and whenever the socket is free).
"""
from __future__ import annotations

import struct
from itertools import islice
from typing import List, Optional

from ..protocol.batch import (DELIVER_BATCH_ID, DELIVER_HEAD, DELIVER_HEAD_SIZE, MAX_BATCH_ENTRIES,
                              ENTRY_COST_EXTRA, PUBLISH_BATCH_ID, PUBLISH_HEAD, PUBLISH_HEAD_SIZE,
                              BadEntries, publish_batch_head, walk)
from ..protocol.commands import Publish
from ..protocol.deliver import SIGNATURE
from ..protocol.headers import PUBLISH_H_ID
from ..protocol.speedups import batchc as _batchc

__all__ = ["PublishQueue", "batch_frames", "batch_frames_py", "decode_deliver_batch", "unbatch",
           "DELIVER_BATCH_HEAD", "MAX_BATCH_BYTES", "PUBLISH_BATCH_HEAD", "ENTRY_COST_EXTRA", "BadEntries"]

#: The first three octets of a PUBLISH-BATCH frame and of a DELIVER-BATCH frame.
PUBLISH_BATCH_HEAD = SIGNATURE + bytes((PUBLISH_BATCH_ID,))
DELIVER_BATCH_HEAD = SIGNATURE + bytes((DELIVER_BATCH_ID,))
_PUBLISH = SIGNATURE + bytes((Publish.ID,))
#: The largest PUBLISH-BATCH the client builds, whatever the broker offers: what a publisher
#: may queue while the socket is busy before ``publish`` blocks (a broker that offers more
#: cannot make the client buffer without bound).
MAX_BATCH_BYTES = 4 << 20
#: Octets of a PUBLISH frame before its entry (signature and command id).
_PUBLISH_PREFIX = 3
#: Octets of an entry besides its key and body (key length, body length).
_ENTRY_FIXED = 5
_deliver_head_unpack = DELIVER_HEAD.unpack_from
_u32_pack = struct.Struct(">I").pack


class PublishQueue:
    """Publishes waiting to leave together as one PUBLISH-BATCH (see the module docs).

    ``max_batch`` is the broker's (None: batching is off, :meth:`add` is never called);
    ``max_body`` the largest body the stream takes (None: not known), larger ones are never
    batched. :meth:`add` returns the frames that must be sent *before* the queue (a full queue sealed, a
    message too large for any batch); :meth:`seal` returns the queue as one frame.
    """

    __slots__ = ("frames", "size", "max_batch", "max_body")

    def __init__(self) -> None:
        self.frames: List[bytes] = []       # PUBLISH frames, in order
        self.size = PUBLISH_HEAD_SIZE       # the PUBLISH-BATCH frame the queue would make
        self.max_batch: Optional[int] = None
        self.max_body: Optional[int] = None

    def __len__(self) -> int:
        return len(self.frames)

    def add(self, frame: bytes) -> List[bytes]:
        """Queue one PUBLISH frame; returns the frames to send first, in order (empty mostly).
        A PUBLISH-H (a message with headers) is never batched: it goes alone, in its place."""
        entry = len(frame) - _PUBLISH_PREFIX
        alone = frame[2] == PUBLISH_H_ID or PUBLISH_HEAD_SIZE + entry > self.max_batch or (
            self.max_body is not None and entry - _ENTRY_FIXED - frame[_PUBLISH_PREFIX]
            > self.max_body)
        if not alone and self.size + entry <= self.max_batch and len(self.frames) < MAX_BATCH_ENTRIES:
            self.frames.append(frame)
            self.size += entry
            return []
        out = [self.seal()] if self.frames else []
        if alone:                          # too large for a batch or for the stream: PUBLISH
            out.append(frame)
        else:
            self.frames.append(frame)
            self.size += entry
        return out

    def seal(self) -> bytes:
        """Empty the queue into one frame: a plain PUBLISH for one message, else a
        PUBLISH-BATCH. Call only when the queue holds something."""
        frames = self.frames
        self.frames = []
        self.size = PUBLISH_HEAD_SIZE
        if len(frames) == 1:
            return frames[0]
        return publish_batch_head(len(frames)) + b"".join([f[_PUBLISH_PREFIX:] for f in frames])

    def drain(self) -> List[bytes]:
        """Empty the queue into its PUBLISH frames, unbatched (a reconnect keeps them)."""
        frames = self.frames
        self.frames = []
        self.size = PUBLISH_HEAD_SIZE
        return frames


def batch_frames(messages, max_batch: int, max_body: Optional[int]):
    """The frames that carry ``messages`` (``(key, body)`` pairs, in order), as
    ``Client.publish_batch`` sends them: ``(frame, count)``, PUBLISH-BATCH frames of at most
    ``max_batch`` bytes, and a plain PUBLISH (count 1) for a message that would not fit in any
    or whose body is over ``max_body`` (refused alone, as in :class:`PublishQueue`). Entries
    are laid out straight from the pairs, with no PUBLISH frame per message.

    A message that cannot be sent (a pair that does not unpack, a key that is not ``str`` or
    over 255 bytes in UTF-8, a body that is not bytes, bytearray, memoryview or str) raises
    TypeError / ValueError, after the frames of the messages before it were yielded: those are
    published, the rest are not.

    :func:`batch_frames_py` is the definition. With the optional C loops (:mod:`zeps.protocol.
    speedups`) each frame is built by one C call (``publish_frame``), no Python work per
    message: the same frames, the same errors at the same point (tests/test_batchc_frames.py).
    A list or tuple is read in place; any other iterable is read in chunks of
    ``_CHUNK`` messages (memory stays bounded for a huge generator), and a frame that reaches
    the end of a chunk is built again with the next one, so the frames are still those of
    :func:`batch_frames_py`. Differences, only for an iterable whose iteration raises: the
    messages taken in its last chunk are not published (:func:`batch_frames_py` publishes
    the frames it completed before the error)."""
    if (_c_frame is None or type(max_batch) is not int
            or (max_body is not None and type(max_body) is not int)):
        yield from batch_frames_py(messages, max_batch, max_body)
        return
    limit = max_batch if max_body is None else max_body
    # clamped to what a C size holds: no frame or body is 2**62 bytes, so the same decisions
    max_batch = -1 if max_batch < -1 else min(max_batch, _SIZE_CAP)
    limit = -1 if limit < -1 else min(limit, _SIZE_CAP)
    frame_of = _c_frame
    if type(messages) is list or type(messages) is tuple:
        start = 0
        while start < len(messages):
            frame, count = frame_of(messages, start, max_batch, limit, _pair)
            yield frame, count
            start += count
        return
    it = iter(messages)
    items: list = []
    while True:
        more = list(islice(it, _CHUNK))
        items = items + more if items else more
        last = len(more) < _CHUNK
        start = 0
        n = len(items)
        while start < n:
            frame, count = frame_of(items, start, max_batch, limit, _pair)
            if start + count == n and not last:
                break                      # the next chunk may still join this frame
            yield frame, count
            start += count
        if last:
            return
        items = items[start:]              # at most one frame's messages (MAX_BATCH_ENTRIES)


#: Messages :func:`batch_frames` takes at a time from an iterable that is not a list or tuple.
_CHUNK = 4096
_SIZE_CAP = 1 << 62
_c_frame = _batchc.publish_frame if _batchc is not None else None


def _pair(item):
    """``key, body = item``, for the C loop: an item that is not a 2-tuple or a 2-list is
    unpacked by Python itself (its errors word for word)."""
    key, body = item
    return key, body


def batch_frames_py(messages, max_batch: int, max_body: Optional[int]):
    """:func:`batch_frames` in Python: its definition, and what runs without the C loops."""
    parts: List[bytes] = []
    add = parts.append
    size = PUBLISH_HEAD_SIZE
    count = 0
    u32 = _u32_pack
    heads: dict = {}                 # key -> its length octet and UTF-8 (keys repeat)
    body_limit = max_batch if max_body is None else max_body
    for item in messages:
        try:
            key, body = item
            head = heads.get(key) if type(key) is str else None
            if head is None or type(body) is not bytes:
                head, body = _checked(key, body, heads)
        except (TypeError, ValueError):
            if count:                      # the messages before it are published
                yield _batch_of(parts, count), count
            raise
        blen = len(body)
        entry = len(head) + 4 + blen
        if blen > body_limit or PUBLISH_HEAD_SIZE + entry > max_batch:
            if count:                      # alone, in its place
                yield _batch_of(parts, count), count
                parts = []
                add = parts.append
                size, count = PUBLISH_HEAD_SIZE, 0
            yield b"".join((_PUBLISH, head, u32(blen), body)), 1
            continue
        if size + entry > max_batch or count == MAX_BATCH_ENTRIES:
            yield _batch_of(parts, count), count
            parts = []
            add = parts.append
            size, count = PUBLISH_HEAD_SIZE, 0
        add(head)
        add(u32(blen))
        add(body)
        size += entry
        count += 1
    if count:
        yield _batch_of(parts, count), count


def _checked(key, body, heads: dict):
    """``(head, body)`` of a message: its key's length octet and UTF-8 (kept in ``heads``), its
    body as bytes; TypeError / ValueError for what cannot be sent."""
    if type(body) is not bytes:
        if isinstance(body, str):
            body = str.encode(body, "utf-8")       # its value (a subclass's encode() aside)
        elif isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        else:
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if not isinstance(key, str):
        raise TypeError(f"key must be str, not {type(key).__name__}")
    head = heads.get(key) if type(key) is str else None
    if head is None:
        kb = str.encode(key, "utf-8")
        if len(kb) > 255:
            raise ValueError("key longer than 255 bytes")
        head = bytes((len(kb),)) + kb
        if type(key) is str:
            if len(heads) >= 4096:
                heads.clear()
            heads[key] = head
    return head, body


def _batch_of(parts: List[bytes], count: int) -> bytes:
    """One message: its PUBLISH frame; more: a PUBLISH-BATCH."""
    if count == 1:
        return _PUBLISH + b"".join(parts)
    return publish_batch_head(count) + b"".join(parts)


def unbatch(frame: bytes) -> List[bytes]:
    """The PUBLISH frames of a PUBLISH-BATCH frame this client built (kept across a
    reconnect, where the next broker may not take batches)."""
    count = PUBLISH_HEAD.unpack_from(frame)[2]
    offsets = walk(frame, PUBLISH_HEAD_SIZE, len(frame), count, check_keys=False)
    return [_PUBLISH + frame[offsets[i]:offsets[i + 1]] for i in range(count)]


def decode_deliver_batch(frame: bytes):
    """``(timestamp, first sequence, offsets)`` of a DELIVER-BATCH frame: entry ``i`` (message
    ``first + i``) is ``frame[offsets[i]:offsets[i + 1]]`` and costs
    ``offsets[i + 1] - offsets[i] + ENTRY_COST_EXTRA`` credit. Raises :class:`BadEntries` or
    ``struct.error`` for a frame that does not parse."""
    _sig, _id, timestamp, sequence, count = _deliver_head_unpack(frame)
    return timestamp, sequence, walk(frame, DELIVER_HEAD_SIZE, len(frame), count,
                                     check_keys=False)

