"""The counters of a front end: what it served, and what it ignored and why.

One flat mapping of ``"<socket>.<event>"`` names to integers, e.g. ``snapshot.served``,
``snapshot.malformed.frame count``, ``snapshot.frames discarded`` (:mod:`.capped`),
``collector.published``. The names are bounded: the events are fixed strings and the reasons
those of :class:`~zeps.frontends.wire.Malformed`, never a peer's bytes.
"""
from __future__ import annotations

from typing import Dict


class Counters:
    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: Dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        self._values[name] = self._values.get(name, 0) + n

    def set(self, name: str, value: int) -> None:
        """A gauge among the counters (``zeps.position``: the last sequence taken)."""
        self._values[name] = value

    def malformed(self, socket: str, reason: str) -> None:
        self.add(f"{socket}.malformed")
        self.add(f"{socket}.malformed.{reason}")

    def __getitem__(self, name: str) -> int:
        return self._values.get(name, 0)

    def live(self) -> Dict[str, int]:
        """The counters themselves (not a copy), for a report that reads them when it is made
        (the monitor's ``/varz``). Not to be changed by the caller."""
        return self._values

    def as_dict(self) -> Dict[str, int]:
        return dict(sorted(self._values.items()))
