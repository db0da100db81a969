"""Publisher confirms, the broker's part: CONFIRMs once messages are durable, and the refusals of
a confirming publisher's PUBLISHes in order with them.

A session that sent CONFIRM-SELECT keeps ``unconfirmed``, a queue of ``(count, sequence)``: its
``count``-th stored publish on this peering was the stream's ``sequence``. :func:`confirm` sends
``CONFIRM count sequence`` for the newest entry the journal made durable (one CONFIRM covers
every entry before it).

**Refusals come in order.** A refused PUBLISH is not counted, and which publish a refusal
answers is not on the wire. A client that keeps its publishes awaiting CONFIRM in order can
name it only if the refusal comes after the CONFIRMs of every publish it sent before it: the
refused one is then its oldest unconfirmed publish. So a refusal for a confirming session with
entries not yet durable waits in the same queue, behind them, as a *marker* ``(count,
sequence, frame, n)`` (``n`` refusals of the same frame, one after the other, share one
marker): :func:`confirm` sends the CONFIRM of the entries before it, then its frames.
(Without this, a publish refused on a full disk while the one before it waited for the group
fsync was answered first, and the SDK failed the stored one and confirmed the lost one.) A
refusal also comes after the append of what the round queued before the refused publish:
:meth:`Publishing._reject <zeps.broker.publishing.Publishing._reject>` appends the round's
queue first, as a PING does.

A marker holds a frame no longer than a refusal's and stands for as many refusals as the client
sent in a row, so a client flooding refused publishes keeps one marker per run of them, and a
marker is sent once the entry before it is durable.
"""
from __future__ import annotations

from zeps.journal.errors import JournalError
from zeps.protocol import commands as c
from zeps.protocol import encode
from zeps.protocol.reasons import Reason

from .congestion import behind_held


def out(stream, s, frames) -> None:
    """Send ``frames`` to session ``s`` of ``stream``: behind the replies it holds, if it holds
    any (:func:`zeps.broker.congestion.behind_held`)."""
    behind_held(stream.outbox, s, frames)


def refuse(stream, pub, frame: bytes, n: int = 1) -> None:
    """``n`` refusals (``frame``: the INVALID or ERROR) of ``pub``'s publishes on ``stream``:
    sent now, or, for a confirming session with entries not yet durable, behind them."""
    q = pub.unconfirmed
    if not q:
        out(stream, pub, [frame] * n)
        return
    last = q[-1]
    if len(last) == 4 and last[2] == frame:           # the same refusal again: one marker
        q[-1] = (last[0], last[1], frame, last[3] + n)
    else:
        q.append((last[0], last[1], frame, n))
    stream.awaits_confirm(pub)


def fail_unconfirmed(stream, reason) -> None:
    """``stream``'s sync failed, for good (zeps/journal/durability.py): what its confirming
    sessions wait for will never be confirmed by this opening of the stream. Each publish not
    confirmed gets a refusal with ``reason`` (a :class:`~zeps.protocol.reasons.Reason`; it may
    or may not be on disk: not known durable), and the refusals that waited behind them are
    sent, in order. (They waited for ever, and so did the publishers.)

    The refused publishes are not counted any more, as no publish that got INVALID is (the
    count of a later CONFIRM, or CONFIRM-SELECT-OK, went on with them), and those counted
    before CONFIRM-SELECT, which await no CONFIRM, get no refusal (they got one each, for
    publishes the client did not count).
    """
    for s in list(stream.confirming.values()):
        frame = reason.frame(s.reasons)
        done = s.confirmed
        for entry in s.unconfirmed:
            if len(entry) == 4:
                out(stream, s, [entry[2]] * entry[3])
            elif entry[0] > done:
                out(stream, s, [frame] * (entry[0] - done))
                stream.invalids[reason.label] += entry[0] - done
                done = entry[0]
        s.published -= done - s.confirmed
        s.unconfirmed.clear()
    stream.confirming.clear()


def confirm(stream, sessions=None) -> None:
    """Send CONFIRM to the publishers whose messages became durable (of ``sessions``, a dict
    identity -> session, where given: :meth:`Stream.confirm`), and the refusals that
    waited for them (see the module docs). On a stream whose sync failed, what is left is
    refused at once (:func:`fail_unconfirmed`): a retry of a record written but not durable
    (confirmed at its sequence), or what a failed roll left waiting, waited for a sync that
    never comes (the failed stream was synced again every interval, logging each time)."""
    journal = stream.journal
    durable = journal.durable_seq
    confirming = stream.confirming
    outbox = stream.outbox
    for ident, s in list((confirming if sessions is None else sessions).items()):
        if sessions is not None and confirming.get(ident) is not s:
            continue                         # confirmed since, or its peering ended
        q = s.unconfirmed
        last = None
        while q and q[0][1] <= durable:
            entry = q.popleft()
            if len(entry) == 2:
                last = entry
                continue
            if last is not None:
                out(stream, s, (encode(c.Confirm(last[0], last[1])),))
                s.confirmed = last[0]
                last = None
            out(stream, s, [entry[2]] * entry[3])
        if last is not None:                 # (the common case: one CONFIRM, inline)
            frame = encode(c.Confirm(last[0], last[1]))
            if s.held:
                s.held.append(frame)
            else:
                outbox.append((ident, frame))
            s.confirmed = last[0]
        if not q:
            del confirming[ident]
    if confirming and journal.sync_error is not None:    # what waits can never be durable
        fail_unconfirmed(stream, sync_refusal(journal.sync_error))


def sync_refusal(error) -> Reason:
    """The refusal of a publish awaiting CONFIRM on a stream whose sync failed (``error``: the
    exception, or the journal's :attr:`~zeps.journal.Journal.sync_error`)."""
    return Reason.publish_rejected(Reason.failed("journal sync failed", error if
                                                 isinstance(error, BaseException)
                                                 else JournalError(error)))
