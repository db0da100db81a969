"""ZEPS/1 commands as small immutable values.

Ids 1..12 are the spec's (``shared/spec/zeps.txt``) and never change. Ids 32 and up are
this implementation's extensions (13..31 are left unassigned); each one's bytes are written
down in ``docs/protocol.md``.

Note: over 600 lines, by design: it is the table of every command, one small frozen class per
command id (the codec's layouts are in ``codec.py``); splitting it would scatter the ids.

Text fields (stream, pattern, key, reason) are ``str`` and travel as UTF-8 in a ZEPS
``string`` (1-octet length, so at most 255 *bytes* once encoded); ERROR's texts have a 4-octet
length. Bodies are ``bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Tuple

#: ``latest`` value that means "live only, from now" (the TANK convention).
LATEST_LIVE = 2**64 - 1
#: ``latest`` value that means "from the first message kept".
LATEST_FIRST = 0

PROTOCOL = "ZEPS"
VERSION = 1


class Command:
    """Base class of every ZEPS command. ``ID`` is the command id byte, ``NAME`` its spec name."""

    __slots__ = ()
    ID: ClassVar[int]
    NAME: ClassVar[str]


def _command(cls):
    return dataclass(frozen=True, slots=True)(cls)


# --- the twelve commands of ZEPS/1 -------------------------------------------------------

@_command
class Attach(Command):
    """C: open a stream. ``protocol`` is always "ZEPS" and ``version`` always 1 on the wire."""
    ID: ClassVar[int] = 1
    NAME: ClassVar[str] = "ATTACH"
    stream: str
    protocol: str = PROTOCOL
    version: int = VERSION


@_command
class AttachOk(Command):
    ID: ClassVar[int] = 2
    NAME: ClassVar[str] = "ATTACH-OK"


@_command
class Subscribe(Command):
    """C: subscribe to keys matching ``pattern``; delivery starts at ``latest + 1``."""
    ID: ClassVar[int] = 3
    NAME: ClassVar[str] = "SUBSCRIBE"
    pattern: str
    latest: int = LATEST_FIRST


@_command
class SubscribeOk(Command):
    ID: ClassVar[int] = 4
    NAME: ClassVar[str] = "SUBSCRIBE-OK"


@_command
class Credit(Command):
    """C: grant the broker ``credit`` more bytes of DELIVER (cost 8 + len(key) + 1 + len(body))."""
    ID: ClassVar[int] = 5
    NAME: ClassVar[str] = "CREDIT"
    credit: int


@_command
class Publish(Command):
    ID: ClassVar[int] = 6
    NAME: ClassVar[str] = "PUBLISH"
    key: str
    body: bytes


@_command
class Deliver(Command):
    ID: ClassVar[int] = 7
    NAME: ClassVar[str] = "DELIVER"
    sequence: int
    key: str
    body: bytes


@_command
class Ping(Command):
    ID: ClassVar[int] = 8
    NAME: ClassVar[str] = "PING"


@_command
class PingOk(Command):
    ID: ClassVar[int] = 9
    NAME: ClassVar[str] = "PING-OK"


@_command
class Detach(Command):
    ID: ClassVar[int] = 10
    NAME: ClassVar[str] = "DETACH"


@_command
class DetachOk(Command):
    ID: ClassVar[int] = 11
    NAME: ClassVar[str] = "DETACH-OK"


@_command
class Invalid(Command):
    ID: ClassVar[int] = 12
    NAME: ClassVar[str] = "INVALID"
    reason: str


# --- extensions (ids 32 and up; 13..31 stay unassigned so that a ZEPS/1 reference peer's
# 'unknown command 13' stays true; see docs/protocol.md) ---------------------------------

@_command
class SeqAtTime(Command):
    """C: which sequence was current at ``timestamp`` (ns since the epoch)?"""
    ID: ClassVar[int] = 32
    NAME: ClassVar[str] = "SEQ-AT-TIME"
    timestamp: int


@_command
class SeqAtTimeOk(Command):
    """S: ``sequence`` is the first message with timestamp >= the asked time (last + 1 if none)."""
    ID: ClassVar[int] = 33
    NAME: ClassVar[str] = "SEQ-AT-TIME-OK"
    sequence: int


@_command
class ConfirmSelect(Command):
    """C: opt in to publisher confirms for the rest of this peering."""
    ID: ClassVar[int] = 34
    NAME: ClassVar[str] = "CONFIRM-SELECT"


@_command
class ConfirmSelectOk(Command):
    """S: confirms are on; ``published`` is how many PUBLISH the broker counted before this."""
    ID: ClassVar[int] = 35
    NAME: ClassVar[str] = "CONFIRM-SELECT-OK"
    published: int = 0


@_command
class Confirm(Command):
    """S: the first ``count`` PUBLISH of this peering are durable; the last of them got ``sequence``."""
    ID: ClassVar[int] = 36
    NAME: ClassVar[str] = "CONFIRM"
    count: int
    sequence: int


@_command
class StreamInfo(Command):
    """C: describe the attached stream."""
    ID: ClassVar[int] = 37
    NAME: ClassVar[str] = "STREAM-INFO"


@_command
class StreamInfoOk(Command):
    """S: first/last sequence kept (0/0 if empty), bytes on disk, oldest/newest timestamp (ns)."""
    ID: ClassVar[int] = 38
    NAME: ClassVar[str] = "STREAM-INFO-OK"
    first: int
    last: int
    size: int
    oldest: int
    newest: int


@_command
class ListStreams(Command):
    """C: which streams does the broker hold? Allowed before ATTACH."""
    ID: ClassVar[int] = 39
    NAME: ClassVar[str] = "LIST-STREAMS"


@_command
class ListStreamsOk(Command):
    ID: ClassVar[int] = 40
    NAME: ClassVar[str] = "LIST-STREAMS-OK"
    streams: Tuple[str, ...] = field(default=())


@_command
class DeliverTimestamps(Command):
    """C: from now on, send DELIVER-TS (DELIVER plus the journal timestamp) instead of DELIVER."""
    ID: ClassVar[int] = 41
    NAME: ClassVar[str] = "DELIVER-TIMESTAMPS"


@_command
class DeliverTimestampsOk(Command):
    ID: ClassVar[int] = 42
    NAME: ClassVar[str] = "DELIVER-TIMESTAMPS-OK"


@_command
class DeliverTs(Command):
    """S: a DELIVER with the time (ns since the epoch) the broker journalled the message."""
    ID: ClassVar[int] = 43
    NAME: ClassVar[str] = "DELIVER-TS"
    timestamp: int
    sequence: int
    key: str
    body: bytes


@_command
class Limits(Command):
    """C: what are the broker's limits? Allowed before ATTACH. (An SDK sizes its credit window
    so that the largest message the broker accepts always fits.)"""
    ID: ClassVar[int] = 44
    NAME: ClassVar[str] = "LIMITS"


@_command
class LimitsOk(Command):
    ID: ClassVar[int] = 45
    NAME: ClassVar[str] = "LIMITS-OK"
    max_message: int          # largest body a PUBLISH may carry
    max_credit: int           # the largest credit window the broker advises


@_command
class Producer(Command):
    """C: from now on this peering's PUBLISHes carry producer sequences ``next``, ``next + 1``,
    ... for producer ``producer`` (idempotent publishing: docs/protocol.md)."""
    ID: ClassVar[int] = 46
    NAME: ClassVar[str] = "PRODUCER"
    producer: str
    next: int


@_command
class ProducerOk(Command):
    """S: the highest producer sequence of ``producer`` the stream holds (0: none)."""
    ID: ClassVar[int] = 47
    NAME: ClassVar[str] = "PRODUCER-OK"
    last: int


@_command
class StreamCreate(Command):
    """C: create a stream with its own settings (0 = the broker's default). Allowed before
    ATTACH; creating an existing stream with the same settings is fine, with others INVALID."""
    ID: ClassVar[int] = 48
    NAME: ClassVar[str] = "STREAM-CREATE"
    stream: str
    retention_bytes: int = 0
    retention_ms: int = 0
    max_message: int = 0
    segment_bytes: int = 0


@_command
class StreamCreateOk(Command):
    ID: ClassVar[int] = 49
    NAME: ClassVar[str] = "STREAM-CREATE-OK"


@_command
class StreamDelete(Command):
    """C: delete a stream and every message of it; its attached clients get DETACH."""
    ID: ClassVar[int] = 50
    NAME: ClassVar[str] = "STREAM-DELETE"
    stream: str


@_command
class StreamDeleteOk(Command):
    ID: ClassVar[int] = 51
    NAME: ClassVar[str] = "STREAM-DELETE-OK"


@_command
class StreamPurge(Command):
    """C: drop a stream's messages up to and including sequence ``upto``."""
    ID: ClassVar[int] = 52
    NAME: ClassVar[str] = "STREAM-PURGE"
    stream: str
    upto: int


@_command
class StreamPurgeOk(Command):
    ID: ClassVar[int] = 53
    NAME: ClassVar[str] = "STREAM-PURGE-OK"
    first: int                # the stream's first sequence now


@_command
class StreamDescribe(Command):
    """C: a stream's state and settings, without attaching (or creating it). Allowed before
    ATTACH; INVALID "no stream: ..." when there is none."""
    ID: ClassVar[int] = 54
    NAME: ClassVar[str] = "STREAM-DESCRIBE"
    stream: str


@_command
class StreamDescribeOk(Command):
    ID: ClassVar[int] = 55
    NAME: ClassVar[str] = "STREAM-DESCRIBE-OK"
    first: int
    last: int
    size: int
    oldest: int
    newest: int
    retention_bytes: int      # the stream's own settings; 0 = the broker's default
    retention_ms: int
    max_message: int
    segment_bytes: int


# --- compacted streams (ids 78-79; issue 18 item 2) -------------------------------------------

#: STREAM-CREATE-X ``flags``: a compacted stream (the latest message per key kept); a key
#: index (implied by ``COMPACT``; alone, a stream that keeps every message and has the index).
#: Other bits: INVALID.
FLAG_COMPACT = 1
FLAG_KEY_INDEX = 2


@_command
class StreamCreateX(Command):
    """C: STREAM-CREATE with the settings of a compacted stream too: ``flags`` (``FLAG_*``),
    ``delete_retention_ms`` (how long compaction keeps a tombstone; 0: one day) and
    ``min_dirty_permille`` (compaction runs from this dirty ratio, in thousandths; 0: 500).
    Answered by STREAM-CREATE-OK. S: the answer to STREAM-SETTINGS (the stream's own
    settings, i.e. the STREAM-CREATE-X that makes it as it is)."""
    ID: ClassVar[int] = 78
    NAME: ClassVar[str] = "STREAM-CREATE-X"
    stream: str
    retention_bytes: int = 0
    retention_ms: int = 0
    max_message: int = 0
    segment_bytes: int = 0
    flags: int = 0
    delete_retention_ms: int = 0
    min_dirty_permille: int = 0


@_command
class StreamSettingsGet(Command):
    """C: a stream's own settings, without attaching: answered by STREAM-CREATE-X (the empty
    name: the broker's defaults, as STREAM-DESCRIBE). Allowed before ATTACH."""
    ID: ClassVar[int] = 79
    NAME: ClassVar[str] = "STREAM-SETTINGS"
    stream: str


# --- batching (an extension: zeps/protocol/batch.py has the layouts) -----------------------

@_command
class BatchSelect(Command):
    """C: from now on, send this peering's messages as DELIVER-BATCH (runs of consecutive
    sequences, one frame each). The reply also says how large a PUBLISH-BATCH may be."""
    ID: ClassVar[int] = 56
    NAME: ClassVar[str] = "BATCH-SELECT"


@_command
class BatchSelectOk(Command):
    ID: ClassVar[int] = 57
    NAME: ClassVar[str] = "BATCH-SELECT-OK"
    max_batch: int            # the largest PUBLISH-BATCH frame (bytes) the broker takes


@_command
class PublishBatch(Command):
    """C: ``count`` messages in one frame; each counts as one PUBLISH (confirms, limits,
    refusals). ``entries``: see zeps/protocol/batch.py. ``offsets`` (decoded frames only): where
    each entry starts in ``entries``, plus its length."""
    ID: ClassVar[int] = 58
    NAME: ClassVar[str] = "PUBLISH-BATCH"
    count: int
    entries: bytes
    offsets: Tuple[int, ...] = field(default=(), compare=False, repr=False)


@_command
class DeliverBatch(Command):
    """S: messages ``sequence`` .. ``sequence + count - 1``, journalled at ``timestamp``."""
    ID: ClassVar[int] = 59
    NAME: ClassVar[str] = "DELIVER-BATCH"
    timestamp: int
    sequence: int
    count: int
    entries: bytes
    offsets: Tuple[int, ...] = field(default=(), compare=False, repr=False)


# --- stream incarnations (a stream deleted and created again is another stream) -------------

@_command
class StreamId(Command):
    """C: the incarnation of the attached stream (after ATTACH): STREAM-ID-OK."""
    ID: ClassVar[int] = 66
    NAME: ClassVar[str] = "STREAM-ID"


@_command
class StreamIdOk(Command):
    """S: the stream's ``incarnation``: random, never 0, chosen when the stream is created (by
    STREAM-CREATE or a first ATTACH) and kept with it. The same name created again after a
    delete has another one (as Kafka's topic ids)."""
    ID: ClassVar[int] = 67
    NAME: ClassVar[str] = "STREAM-ID-OK"
    incarnation: int


@_command
class StreamExpect(Command):
    """C: before ATTACH: the next ATTACH of this client attaches only to a stream whose
    incarnation is ``incarnation`` (0: no condition) and never creates one; otherwise it is
    refused with INVALID ``no stream: `` (it was deleted) or ``stream recreated: ``."""
    ID: ClassVar[int] = 68
    NAME: ClassVar[str] = "STREAM-EXPECT"
    incarnation: int


@_command
class StreamExpectOk(Command):
    ID: ClassVar[int] = 69
    NAME: ClassVar[str] = "STREAM-EXPECT-OK"


# --- message headers (zeps/protocol/headers.py has the block and the limits) -------------------

@_command
class HeadersSelect(Command):
    """C: from now on, send this client's messages that have headers as DELIVER-H (with their
    headers and timestamp). Allowed in any state; lasts for the connection."""
    ID: ClassVar[int] = 70
    NAME: ClassVar[str] = "HEADERS-SELECT"


@_command
class HeadersSelectOk(Command):
    """S: headers are on; a block may hold ``max_headers`` pairs taking ``max_bytes``."""
    ID: ClassVar[int] = 71
    NAME: ClassVar[str] = "HEADERS-SELECT-OK"
    max_headers: int
    max_bytes: int


@_command
class PublishHeaders(Command):
    """C: PUBLISH with ``headers`` (``(name, value)`` pairs, at least one). ``block`` (decoded
    frames only): the headers' bytes as received, stored verbatim."""
    ID: ClassVar[int] = 72
    NAME: ClassVar[str] = "PUBLISH-H"
    key: str
    body: bytes
    headers: Tuple[Tuple[str, bytes], ...]
    block: bytes = field(default=b"", compare=False, repr=False)


@_command
class DeliverHeaders(Command):
    """S: a message that has headers, to a client that sent HEADERS-SELECT: DELIVER-TS's
    fields and the headers. ``block`` (decoded frames only): the headers' bytes."""
    ID: ClassVar[int] = 73
    NAME: ClassVar[str] = "DELIVER-H"
    timestamp: int
    sequence: int
    key: str
    body: bytes
    headers: Tuple[Tuple[str, bytes], ...]
    block: bytes = field(default=b"", compare=False, repr=False)


# --- paged stream listing --------------------------------------------------------------------

@_command
class ListStreamsPage(Command):
    """C: the streams whose names sort after ``after`` (``""``: from the first). Allowed before
    ATTACH. The broker answers from memory, one page at a time: LIST-STREAMS-PAGE-OK."""
    ID: ClassVar[int] = 60
    NAME: ClassVar[str] = "LIST-STREAMS-PAGE"
    after: str = ""


@_command
class ListStreamsPageOk(Command):
    """S: a page of stream names, in order; ``next`` is where the next page starts (send it as
    ``after``), ``""`` when this was the last page. A page may hold fewer names than fit (even
    none, where the client may read none of those the broker looked at) and still not be the
    last: only ``next == ""`` ends the listing."""
    ID: ClassVar[int] = 61
    NAME: ClassVar[str] = "LIST-STREAMS-PAGE-OK"
    streams: Tuple[str, ...] = field(default=())
    next: str = ""


# --- structured reasons (zeps/protocol/reasons.py has the codes) -----------------------------

@_command
class ReasonsSelect(Command):
    """C: from now on, refuse this client's requests with ERROR (a code, its fields and the text,
    none of them cut) instead of INVALID. Allowed in any state; lasts for the connection."""
    ID: ClassVar[int] = 62
    NAME: ClassVar[str] = "REASONS-SELECT"


@_command
class ReasonsSelectOk(Command):
    ID: ClassVar[int] = 63
    NAME: ClassVar[str] = "REASONS-SELECT-OK"


@_command
class Error(Command):
    """S: an INVALID for a client that sent REASONS-SELECT: ``code`` (a
    :class:`zeps.protocol.reasons.Code`), ``fields`` (what the code says they are) and ``text``
    (the INVALID's reason, for people). Texts are UTF-8 with a 4-octet length: never cut."""
    ID: ClassVar[int] = 64
    NAME: ClassVar[str] = "ERROR"
    code: int
    fields: Tuple[str, ...] = field(default=())
    text: str = ""


# --- key snapshots (ids 74-77; zeps/protocol/snapshot.py has the entry frames) ---------------

@_command
class Snapshot(Command):
    """C: the latest message of every live key under any of ``prefixes`` (1 to 16 prefixes, no
    regex) of a stream with a key index: SNAPSHOT-ENTRY (or -H) per key, under the client's
    credit, then SNAPSHOT-END. Attached, not subscribed, one at a time."""
    ID: ClassVar[int] = 74
    NAME: ClassVar[str] = "SNAPSHOT"
    prefixes: Tuple[str, ...] = field(default=("",))


@_command
class SnapshotEntry(Command):
    """S: one key's latest message (DELIVER-TS's layout, its own id)."""
    ID: ClassVar[int] = 75
    NAME: ClassVar[str] = "SNAPSHOT-ENTRY"
    timestamp: int
    sequence: int
    key: str
    body: bytes


@_command
class SnapshotEntryH(Command):
    """S: one key's latest message, with its headers (DELIVER-H's layout, its own id)."""
    ID: ClassVar[int] = 76
    NAME: ClassVar[str] = "SNAPSHOT-ENTRY-H"
    timestamp: int
    sequence: int
    key: str
    body: bytes
    headers: Tuple[Tuple[str, bytes], ...]
    block: bytes = field(default=b"", compare=False, repr=False)


@_command
class SnapshotEnd(Command):
    """S: the snapshot is complete and consistent at ``sequence`` (subscribe from it: SUBSCRIBE
    with latest = ``sequence``); ``count`` entries were sent."""
    ID: ClassVar[int] = 77
    NAME: ClassVar[str] = "SNAPSHOT-END"
    sequence: int
    count: int


# --- durable consumers and groups (ids 80-92; zeps/protocol/consumer.py, docs/consumers.md) --

#: CONSUMER-ADD ``ack``: each message acknowledged by its own sequence (JetStream's explicit).
ACK_EXPLICIT = 0
#: ``ack``: an ACK of sequence S acknowledges every message the member holds up to S.
ACK_ALL = 1
#: ``ack``: a message is acknowledged when it is handed to a member (a durable position only).
ACK_NONE = 2
#: CONSUMER-ADD ``start``: from the first message kept / from ``start_value`` (a sequence) /
#: from the first message at or after ``start_value`` (ns since the epoch) / new messages only.
START_ALL, START_SEQUENCE, START_TIME, START_NEW = 0, 1, 2, 3
#: CONSUMER-ADD ``flags``: a key's messages go to one member at a time (per-key order).
CONSUMER_KEY_ORDER = 1


@_command
class ConsumerAdd(Command):
    """C: create the durable consumer ``name`` on the attached stream (idempotent: the same
    settings again is OK, other settings are refused). Answered by CONSUMER-ADD-OK."""
    ID: ClassVar[int] = 80
    NAME: ClassVar[str] = "CONSUMER-ADD"
    name: str
    patterns: Tuple[str, ...] = field(default=("",))
    start: int = START_ALL
    start_value: int = 0
    ack: int = ACK_EXPLICIT
    ack_wait_ms: int = 30_000
    max_deliver: int = 0           # 0: no limit
    max_ack_pending: int = 1000    # per member
    dead_letter: str = ""          # a stream, or "" (none: the message is dropped, counted)
    flags: int = 0


@_command
class ConsumerAddOk(Command):
    """S: the consumer exists; ``start`` is the first sequence it hands out."""
    ID: ClassVar[int] = 81
    NAME: ClassVar[str] = "CONSUMER-ADD-OK"
    start: int


@_command
class Consume(Command):
    """C: this peering joins consumer ``name`` as a member (instead of subscribing): it is sent
    the consumer's messages as DELIVER (DELIVER-H, -TS, -BATCH as chosen) under its credit."""
    ID: ClassVar[int] = 82
    NAME: ClassVar[str] = "CONSUME"
    name: str


@_command
class ConsumeOk(Command):
    """S: joined. ``floor``: every sequence up to it is acknowledged; ``next``: the next
    sequence the consumer reads; ``skipped``: messages retention removed before they were
    acknowledged (since the last CONSUME-OK of this consumer)."""
    ID: ClassVar[int] = 83
    NAME: ClassVar[str] = "CONSUME-OK"
    floor: int
    next: int
    skipped: int = 0


@_command
class Ack(Command):
    """C: acknowledge; ``ranges`` is n pairs of u64 (first, last), at most 1024 pairs
    (:func:`zeps.protocol.consumer.pack_ranges`). Not answered."""
    ID: ClassVar[int] = 84
    NAME: ClassVar[str] = "ACK"
    ranges: bytes


@_command
class Nak(Command):
    """C: give ``sequence`` back, to be delivered again after ``delay_ms``. Not answered."""
    ID: ClassVar[int] = 85
    NAME: ClassVar[str] = "NAK"
    sequence: int
    delay_ms: int = 0


@_command
class Progress(Command):
    """C: still working on ``sequence``: its ack timeout starts again. Not answered."""
    ID: ClassVar[int] = 86
    NAME: ClassVar[str] = "PROGRESS"
    sequence: int


@_command
class ConsumerInfo(Command):
    """C: the state of consumer ``name`` of the attached stream, as JSON."""
    ID: ClassVar[int] = 87
    NAME: ClassVar[str] = "CONSUMER-INFO"
    name: str


@_command
class ConsumerInfoOk(Command):
    ID: ClassVar[int] = 88
    NAME: ClassVar[str] = "CONSUMER-INFO-OK"
    info: str


@_command
class ConsumerList(Command):
    """C: the names of the attached stream's consumers."""
    ID: ClassVar[int] = 89
    NAME: ClassVar[str] = "CONSUMER-LIST"


@_command
class ConsumerListOk(Command):
    ID: ClassVar[int] = 90
    NAME: ClassVar[str] = "CONSUMER-LIST-OK"
    names: Tuple[str, ...] = field(default=())


@_command
class ConsumerDelete(Command):
    """C: delete consumer ``name`` (its members are sent DETACH)."""
    ID: ClassVar[int] = 91
    NAME: ClassVar[str] = "CONSUMER-DELETE"
    name: str


@_command
class ConsumerDeleteOk(Command):
    ID: ClassVar[int] = 92
    NAME: ClassVar[str] = "CONSUMER-DELETE-OK"


ALL_COMMANDS = (
    Attach, AttachOk, Subscribe, SubscribeOk, Credit, Publish, Deliver, Ping, PingOk,
    Detach, DetachOk, Invalid,
    StreamId, StreamIdOk, StreamExpect, StreamExpectOk,      # (ids 66-69)
    SeqAtTime, SeqAtTimeOk, ConfirmSelect, ConfirmSelectOk, Confirm, StreamInfo,
    StreamInfoOk, ListStreams, ListStreamsOk, DeliverTimestamps, DeliverTimestampsOk, DeliverTs,
    Limits, LimitsOk, Producer, ProducerOk, StreamCreate, StreamCreateOk, StreamDelete,
    StreamDeleteOk, StreamPurge, StreamPurgeOk, StreamDescribe, StreamDescribeOk,
    StreamCreateX, StreamSettingsGet,                                    # (ids 78-79)
    BatchSelect, BatchSelectOk, PublishBatch, DeliverBatch, ListStreamsPage, ListStreamsPageOk,
    ReasonsSelect, ReasonsSelectOk, Error,
    HeadersSelect, HeadersSelectOk, PublishHeaders, DeliverHeaders,      # (ids 70-73)
    Snapshot, SnapshotEntry, SnapshotEntryH, SnapshotEnd,                # (ids 74-77)
    ConsumerAdd, ConsumerAddOk, Consume, ConsumeOk, Ack, Nak, Progress,  # (ids 80-92)
    ConsumerInfo, ConsumerInfoOk, ConsumerList, ConsumerListOk, ConsumerDelete, ConsumerDeleteOk,
)
BY_ID = {c.ID: c for c in ALL_COMMANDS}
assert len(BY_ID) == len(ALL_COMMANDS), "two commands share an id"
BY_NAME = {c.NAME: c for c in ALL_COMMANDS}

from .deliver import deliver_cost  # noqa: E402,F401  (defined with the DELIVER layout)
