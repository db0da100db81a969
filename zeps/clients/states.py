"""The states of a :class:`~zeps.clients.peering.Peering`, and the connection events it queues.

A peering is :data:`CONNECTING` (an ATTACH is on its way), :data:`ATTACHED`, :data:`ABSENT`
(its stream does not exist: a reader's ATTACH does not create it), :data:`FAILED` (final: the
broker refused it for good, or the shell's I/O failed) or :data:`CLOSED` (final: the shell
closed its socket). Losing and regaining the peering are queued as :class:`ConnectionEvent`
for the shell to hand to the application.

Pure: names and a record, nothing else.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["CONNECTING", "ATTACHED", "ABSENT", "FAILED", "CLOSED", "LOST", "RECONNECTED",
           "ConnectionEvent"]

CONNECTING, ATTACHED, FAILED, CLOSED = "connecting", "attached", "failed", "closed"
#: Not attached because the stream does not exist (a reader's ATTACH does not create it): the
#: next publish attaches creating it (:meth:`Peering.join`), the next read looks again.
ABSENT = "absent"
#: Kinds of :class:`ConnectionEvent`.
LOST, RECONNECTED = "lost", "reconnected"


class ConnectionEvent(NamedTuple):
    """The peering was lost (``kind`` :data:`LOST`, ``reason`` says why) or re-established
    (:data:`RECONNECTED`, ``reason`` says what was re-sent); ``reconnects`` counts the
    reconnects so far. A shell hands these to the application's ``on_connection`` callback."""
    kind: str
    reason: str
    reconnects: int
