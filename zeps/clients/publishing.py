"""The publisher's half of a :class:`~zeps.clients.peering.Peering`: publishes out, in order.

Pure (no socket, no clock), as the rest of the peering. The shell hands each publish to the
peering before (or instead of) sending it:

* :meth:`Publishing.publish` accounts for one PUBLISH the shell sends straight away, if it may
  (attached, nothing waiting before it, no error to raise first, not after a silence): with
  confirms its receipt joins the :class:`~zeps.clients.confirms.ConfirmTracker`;
* :meth:`Publishing.queue_publish` queues one the socket did not take, or that would overtake
  frames still waiting: it leaves with the next PUBLISH-BATCH when the broker takes batches
  (natural batching, :mod:`zeps.clients.batching`), else as itself, in order;
* :meth:`Publishing.publish_frame` accounts for publishes the shell laid out into one frame
  itself (``publish_batch`` without confirms).

Every other frame the peering sends goes through ``_send``, behind the publishes queued before
it, into :attr:`~zeps.clients.peering.Peering.outbox` (sent now) or, while not attached,
:attr:`~zeps.clients.peering.Peering.deferred` (sent after the next ATTACH-OK). The shell sends
from the outbox's left, asking :meth:`Publishing.next_frame` (which seals the queue into one
batch when nothing else waits) until the socket refuses.

When the connection is replaced, publishes that never left reached no broker: without confirms
they are kept and sent after the next ATTACH-OK (``_keep_unsent``, ``_send_deferred``); with
confirms every unconfirmed publish is re-sent from its receipt (``_resend``).

:class:`Publishing` is a mixin of :class:`~zeps.clients.peering.Peering`, which owns the state
it uses (``outbox``, ``deferred``, ``queue``, ``tracker``, ``confirms``, ``state``, ``error``,
``need_reconnect``, ``producer_sync``, ``last_send``, ``heartbeat``, ``pubs_since_request``).
"""
from __future__ import annotations

import struct
from typing import List, Optional

from ..protocol import commands as c
from ..protocol.deliver import SIGNATURE
from .batching import MAX_BATCH_BYTES, PUBLISH_BATCH_HEAD, unbatch
from .states import ABSENT, ATTACHED

__all__ = ["Publishing", "BACKLOG_FRAMES"]

#: Frames ``publish_batch`` may leave waiting for the socket before it waits for room.
BACKLOG_FRAMES = 64

_PUBLISH_HEAD = SIGNATURE + bytes((c.Publish.ID,))
_PUBLISH_H_HEAD = SIGNATURE + bytes((c.PublishHeaders.ID,))
_U32_unpack_from = struct.Struct(">I").unpack_from


class Publishing:
    """Publishes out, in order (see the module docs)."""

    __slots__ = ()

    @property
    def max_batch(self) -> Optional[int]:
        """The largest PUBLISH-BATCH (bytes) the broker takes on this connection; None while
        batching is off (not asked, not answered yet, or refused by an older broker)."""
        return self.queue.max_batch

    @property
    def waiting(self) -> bool:
        """Frames wait for the socket (queued ones or publishes to batch): the shell sends
        them (:meth:`next_frame`) as soon as it can."""
        return bool(self.outbox or self.queue.frames)

    def unfinished_publishes(self) -> int:
        """Publishes not finished: not yet handed to a broker (without confirms), not yet
        confirmed (with confirms)."""
        if self.confirms:
            return len(self.tracker.unconfirmed)
        return len(self.queue) + sum(_publishes_in(f) for f in (*self.outbox, *self.deferred))

    def publish(self, frame: bytes, now: float, receipt, checked: bool = True) -> bool:
        """Account for one PUBLISH the shell hands to its socket right after.

        With ``checked``, first return False (and do nothing) unless the publish may go straight
        out: attached, nothing queued, no error to raise first, not silent for ``heartbeat``
        seconds. The shell then waits for that (:meth:`heartbeat_probe`, :attr:`ready`, an
        empty :attr:`outbox`) and calls again with ``checked=False``. ``receipt`` is kept until its
        CONFIRM with confirms on."""
        if checked and (self.state is not ATTACHED or self.error is not None
                        or (self.outbox and (self.queue.max_batch is None or self.queue.size
                                             + len(frame) > self.queue.max_batch))
                        or self.need_reconnect is not None or self.producer_sync is not None
                        or now - self.last_send >= self.heartbeat):
            return False
        self.pubs_since_request += 1
        self.last_send = now
        if self.confirms:
            self.tracker.track(receipt)
        return True

    def may_publish(self, now: float, behind: bool = False) -> bool:
        """Whether publishes may go straight out now (see :meth:`publish`). With ``behind``,
        also while frames wait for the socket, up to ``BACKLOG_FRAMES`` frames and
        ``MAX_BATCH_BYTES`` (``publish_batch``: ZeroMQ takes ``transport.BATCH_SNDHWM`` frames
        ahead of its I/O thread; waiting for room after each frame made ``publish_batch`` 0.8x
        as fast with a smaller mark; issue 20)."""
        box = self.outbox
        return (self.state is ATTACHED and self.error is None
                and (not box or behind and len(box) < BACKLOG_FRAMES
                     and sum(map(len, box)) < MAX_BATCH_BYTES)
                and self.need_reconnect is None and self.producer_sync is None
                and now - self.last_send < self.heartbeat)

    def publish_frame(self, frame: bytes, count: int, now: float) -> None:
        """Account for ``count`` publishes without confirms that the shell built into one frame
        (``batching.batch_frames``: a PUBLISH-BATCH within ``max_batch``, or a PUBLISH) when
        :meth:`may_publish`: they go out behind what the queue holds, in order. Without
        batching (the broker changed meanwhile) a PUBLISH-BATCH goes as its PUBLISHes."""
        self.pubs_since_request += count
        self.last_send = now
        if self.queue.frames:
            self.outbox.append(self.queue.seal())
        if count > 1 and self.queue.max_batch is None:
            self.outbox.extend(unbatch(frame))
        else:
            self.outbox.append(frame)

    def queue_publish(self, frame: bytes) -> None:
        """Queue a PUBLISH frame the socket did not take (high-water mark), or that the shell
        did not try to send because frames wait (:attr:`waiting`): in order, behind them -- to
        leave with the next batch when the broker takes batches."""
        if self.queue.max_batch is None or self.state is not ATTACHED:
            self.outbox.append(frame)
        else:
            self.outbox.extend(self.queue.add(frame))

    def next_frame(self) -> Optional[bytes]:
        """The frame to send next (the shell pops it from :attr:`outbox` once the socket
        took it): the oldest of :attr:`outbox`, else what the queue holds, sealed into one
        PUBLISH-BATCH now that the socket is free (natural batching). None: nothing waits."""
        if self.outbox:
            return self.outbox[0]
        if self.queue.frames:
            self.outbox.append(self.queue.seal())
            return self.outbox[0]
        return None

    def _send(self, frame: bytes) -> None:
        """Send a frame after everything before it: now (:attr:`outbox`) or, while not
        attached, after the next ATTACH-OK (:attr:`deferred`)."""
        if self.queue.frames:            # publishes queued before this frame leave before it
            self.outbox.append(self.queue.seal())
        # ABSENT: only requests that need no ATTACH are made (LIST-STREAMS-PAGE): they go now
        (self.outbox if self.state is ATTACHED or self.state is ABSENT else self.deferred).append(frame)

    def _resend(self, receipts) -> None:
        """Send the frames of unconfirmed publishes again (after a re-ATTACH)."""
        for r in receipts:
            self._send(r.frame)
        self.pubs_since_request += len(receipts)

    def _send_deferred(self, frames) -> None:
        """After an ATTACH-OK, send the frames kept while not attached (publishes kept by
        :meth:`_keep_unsent`, frames sent while connecting); the publishes count as sent."""
        for frame in frames:
            self._send(frame)
            self.pubs_since_request += (frame.startswith(_PUBLISH_HEAD)
                                        or frame.startswith(_PUBLISH_H_HEAD))

    def _keep_unsent(self) -> None:
        """The connection is being replaced. Publishes never handed to the old socket reached
        no broker: keep them in :attr:`deferred` for the next ATTACH-OK, the rest of what
        waited is dropped (with confirms every unconfirmed publish is re-sent from the
        tracker's instead). Batching waits for the next broker's answer to BATCH-SELECT."""
        keep = [] if self.confirms else [p for f in (*self.outbox, *self.deferred)
                                         for p in _plain_publishes(f)] + self.queue.drain()
        self.queue.drain()              # with confirms, the tracker has them
        self.queue.max_batch = None     # until the next broker answers BATCH-SELECT
        self.queue.max_body = None
        self.outbox.clear()
        self.deferred.clear()
        self.deferred.extend(keep)


def _publishes_in(frame: bytes) -> int:
    """How many publishes a frame of the outbox carries (0: not a publish)."""
    if frame.startswith(_PUBLISH_HEAD) or frame.startswith(_PUBLISH_H_HEAD):
        return 1
    if frame.startswith(PUBLISH_BATCH_HEAD):
        return _U32_unpack_from(frame, 3)[0]
    return 0


def _plain_publishes(frame: bytes) -> List[bytes]:
    """The PUBLISH (or PUBLISH-H) frames an outbox frame carries (a batch unbatched), none for
    others."""
    if frame.startswith(_PUBLISH_HEAD) or frame.startswith(_PUBLISH_H_HEAD):
        return [frame]
    if frame.startswith(PUBLISH_BATCH_HEAD):
        return unbatch(frame)
    return []
