"""A round's one plain PUBLISH: journalled and routed without the batch machinery (issue 20).

At a low rate, a stream's round holds one PUBLISH (the latency scenario's 10k msg/s is one per
round). :meth:`Stream.append_queued <zeps.broker.stream.Stream.append_queued>` is written for
a round of many: the producers' duplicates are split out, the journal items built, the records
appended as a batch and routed through :class:`~zeps.broker.batching.Runs`, which gathers each
batching subscriber's messages into one DELIVER-BATCH. For one plain message (no producer
sequence, no headers) all of that is lists of one: :func:`append_lone` appends it with
:meth:`Journal.append <zeps.journal.Journal.append>` and routes it with
:meth:`Stream._route <zeps.broker.stream.Stream._route>` without runs (its batching
subscribers share one DELIVER-BATCH of it).

The effects are the general path's: the same journal bytes, frames, outbox order, credit,
positions, counters and CONFIRMs (``tests/test_lone.py`` runs both on the same rounds). The
core's step for one PUBLISH to one batching subscriber: docs/benchmarks.md, "A round's one
PUBLISH".
"""
from __future__ import annotations

from zeps.protocol.deliver import frame_cost


def is_lone(item) -> bool:
    """Does :func:`append_lone` take this queued publish ``(publisher, key, body)`` alone in
    its round? (A plain PUBLISH: not a PUBLISH-BATCH, whose key is None, nor a PUBLISH-H,
    whose body is not bytes; not an idempotent producer's, whose duplicates are split out.)"""
    pub, key, body = item
    return key is not None and type(body) is bytes and pub.producer is None


def append_lone(stream, pub, key: str, body: bytes) -> None:
    """Append and route ``stream``'s one queued publish of the round (see :func:`is_lone`), as
    ``Stream.append_queued`` does."""
    try:
        rec = stream.journal.append(key, body)
    except Exception as exc:  # JournalFullError, OSError...: nothing was appended
        stream._refuse([(pub, key, body)], [], exc)
        return
    if stream.journal.config.fsync == "interval":
        stream.work.unsynced[stream.name] = stream        # the sync timer names it
    stream.count_published(pub, 1, frame_cost(rec.frame), rec.sequence)
    stream._route(rec, None)
    if stream.bad_regexes:
        stream._drop_bad_regexes()
    stream.confirm()
