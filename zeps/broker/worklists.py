"""The broker core's worklists: which streams a round or a timer must visit.

A broker may hold thousands of open streams, most of them idle at any moment. Visiting each of
them in every round (for queued publishes, for subscribers to replay to) or at every fsync tick
(for unsynced records, for publishers waiting for CONFIRM) made every message's way through the
broker grow with the streams it holds (issue 20: a round of one PUBLISH took 11 µs with one
stream open and 53 µs with 1,000). So each stream enters the list of the work it has when it
gets it, and the core visits only those:

* ``publishes``: a publish was queued (``Stream.publish``, ``Stream.publish_batch``); the round
  appends and routes them (``BrokerCore.append_queued``) and empties the list;
* ``replays``: a subscriber is catching up (``Stream.resume``); ``BrokerCore.pump`` keeps the
  stream listed until none is;
* ``confirms``: a publisher waits for CONFIRM (``Stream.awaits_confirm``);
  ``BrokerCore.confirm`` keeps it listed until none waits;
* ``unsynced``: records were appended under ``fsync=interval`` (``Stream.append_queued``); the
  sync timer (``Timers.tick``) names the stream until its records are durable.

A stream that is closed or deleted leaves every list (:meth:`Worklists.drop`). Each list is a
dict by stream name, in the order the streams entered it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict

if TYPE_CHECKING:
    from .stream import Stream


class Worklists:
    """The four lists of streams with work (see the module docstring)."""

    __slots__ = ("publishes", "replays", "confirms", "unsynced")

    def __init__(self) -> None:
        self.publishes: Dict[str, Stream] = {}
        self.replays: Dict[str, Stream] = {}
        self.confirms: Dict[str, Stream] = {}
        self.unsynced: Dict[str, Stream] = {}

    def drop(self, name: str, stream: Stream) -> None:
        """``stream`` (named ``name``) is closed or deleted: it leaves every list (a newer
        stream of the same name stays)."""
        for listed in (self.publishes, self.replays, self.confirms, self.unsynced):
            if listed.get(name) is stream:
                del listed[name]
