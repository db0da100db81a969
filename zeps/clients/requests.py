"""The requests of a :class:`~zeps.clients.peering.Peering`: their kinds, and what answers each.

Replies come back in request order, so the peering keeps its outstanding requests in a queue
and matches each reply to the oldest: a :class:`Request` says what it asked (its
:class:`RequestKind`), and :data:`REPLY_KINDS` which kinds a reply command may answer (any
other is protocol confusion: the peering is re-established). What the peering does with an
answer depends on the kind: ``ATTACH-OK`` to an :attr:`~RequestKind.ATTACH` starts the session
set-up, ``STREAM-INFO-OK`` to an :attr:`~RequestKind.ANCHOR` anchors receipts, to a
:attr:`~RequestKind.PROBE` proves the broker still knows the client, to an
:attr:`~RequestKind.INFO` is the application's answer; an INVALID to each means something else
too (:mod:`zeps.clients.refusals`).

Pure: no sockets, no clock.
"""
from __future__ import annotations

from enum import Enum
from typing import Dict, FrozenSet, Optional, Tuple

from ..protocol import commands as c
from ..protocol.codec import decode
from ..protocol.reasons import Reason
from .errors import InvalidError, invalid_error

__all__ = ["RequestKind", "Request", "REPLY_KINDS", "list_streams_answer"]


class RequestKind(Enum):
    """Why a request was sent: what its answer is for."""

    #: ``REASONS-SELECT`` before each ATTACH: refusals as codes and fields (ERROR).
    REASONS_SELECT = "reasons_select"
    #: ``STREAM-EXPECT`` before an ATTACH: join that incarnation of the stream (0: whichever
    #: exists), never create it.
    STREAM_EXPECT = "stream_expect"
    #: ``ATTACH``: the peering itself.
    ATTACH = "attach"
    #: ``STREAM-ID`` after the first ATTACH: the incarnation every re-ATTACH expects.
    STREAM_ID = "stream_id"
    #: ``LIMITS`` after each ATTACH: sizes the credit window (:mod:`zeps.clients.window`).
    LIMITS = "limits"
    #: ``BATCH-SELECT`` after each ATTACH (:mod:`zeps.clients.batching`).
    BATCH_SELECT = "batch_select"
    #: ``STREAM-DESCRIBE`` after BATCH-SELECT: the stream's own body limit; batching starts.
    BATCH_LIMITS = "batch_limits"
    #: ``HEADERS-SELECT`` after each ATTACH: messages with headers come as DELIVER-H.
    HEADERS_SELECT = "headers_select"
    #: ``CONFIRM-SELECT`` after each ATTACH, with confirms.
    CONFIRM_SELECT = "confirm_select"
    #: ``STREAM-INFO`` after CONFIRM-SELECT: the stream's last sequence before any publish of
    #: ours, which lets receipts be exact (:mod:`zeps.clients.confirms`).
    ANCHOR = "anchor"
    #: ``PRODUCER`` (exactly-once publishing, :mod:`zeps.clients.producer`).
    PRODUCER = "producer"
    #: ``SUBSCRIBE`` asked by the application.
    SUBSCRIBE = "subscribe"
    #: ``SUBSCRIBE`` of a pattern again after a re-ATTACH.
    RESUBSCRIBE = "resubscribe"
    #: ``STREAM-INFO`` asked by the application (or by ``subscribe(live=True)``).
    INFO = "info"
    #: ``STREAM-INFO`` as a heartbeat, after a silence.
    PROBE = "probe"
    #: ``SEQ-AT-TIME`` asked by the application.
    SEQ_AT = "seq_at"
    #: ``LIST-STREAMS-PAGE`` asked by the application.
    LIST = "list"
    #: ``PING`` asked by the application (``flush()``): the broker processed every publish
    #: before it.
    PING = "ping"
    #: ``PING`` the peering sends before a request that follows publishes, so that an INVALID
    #: arriving before its PING-OK is known to answer a publish.
    BARRIER = "barrier"
    #: ``DETACH``, closing.
    DETACH = "detach"
    #: ``CONSUMER-ADD``, ``-INFO``, ``-LIST``, ``-DELETE`` (:mod:`zeps.clients.consumer_admin`).
    CONSUMER = "consumer"


_K = RequestKind

#: Reply command -> the request kinds it may answer.
REPLY_KINDS: Dict[type, FrozenSet[RequestKind]] = {
    c.AttachOk: frozenset((_K.ATTACH,)),
    c.SubscribeOk: frozenset((_K.SUBSCRIBE, _K.RESUBSCRIBE)),
    c.SeqAtTimeOk: frozenset((_K.SEQ_AT,)),
    c.StreamInfoOk: frozenset((_K.INFO, _K.PROBE, _K.ANCHOR)),
    c.ConfirmSelectOk: frozenset((_K.CONFIRM_SELECT,)),
    c.DetachOk: frozenset((_K.DETACH,)),
    c.PingOk: frozenset((_K.BARRIER, _K.PING)),
    c.ListStreamsOk: frozenset((_K.LIST,)),
    c.ListStreamsPageOk: frozenset((_K.LIST,)),
    c.LimitsOk: frozenset((_K.LIMITS,)),
    c.ProducerOk: frozenset((_K.PRODUCER,)),
    c.BatchSelectOk: frozenset((_K.BATCH_SELECT,)),
    c.StreamDescribeOk: frozenset((_K.BATCH_LIMITS,)),
    c.HeadersSelectOk: frozenset((_K.HEADERS_SELECT,)),
    c.ReasonsSelectOk: frozenset((_K.REASONS_SELECT,)),
    c.StreamIdOk: frozenset((_K.STREAM_ID,)),
    c.StreamExpectOk: frozenset((_K.STREAM_EXPECT,)),
    c.ConsumerAddOk: frozenset((_K.CONSUMER,)),
    c.ConsumerInfoOk: frozenset((_K.CONSUMER,)),
    c.ConsumerListOk: frozenset((_K.CONSUMER,)),
    c.ConsumerDeleteOk: frozenset((_K.CONSUMER,)),
}


class Request:
    """One request waiting for its reply: ``done`` with ``result`` (the reply command) or
    ``error`` (an :class:`InvalidError`), or ``cancelled`` (the peering was lost before the reply;
    ask again)."""

    __slots__ = ("kind", "name", "done", "cancelled", "result", "error", "sent_at", "arg")

    def __init__(self, kind: RequestKind, name: str, now: float, arg=None):
        self.kind = kind
        self.name = name
        self.done = False
        self.cancelled = False
        self.result = None
        self.error: Optional[InvalidError] = None
        self.sent_at = now
        self.arg = arg          # subscribe: (pattern, latest, the STREAM-INFO request of live=True)

    def __repr__(self) -> str:
        state = ("cancelled" if self.cancelled else "failed" if self.error is not None
                 else "done" if self.done else "outstanding")
        return f"<Request {self.name} {self.kind.name} {state}>"


def list_streams_answer(frame: bytes) -> Optional[Tuple[str, ...]]:
    """The stream names in a LIST-STREAMS-OK frame; raises :class:`InvalidError` for an INVALID
    or :class:`ProtocolError` for a frame that does not decode; None for anything else."""
    cmd = decode(frame)
    if isinstance(cmd, c.ListStreamsOk):
        return tuple(cmd.streams)
    if isinstance(cmd, (c.Invalid, c.Error)):
        raise invalid_error(Reason.received(cmd), "LIST-STREAMS")
    return None
