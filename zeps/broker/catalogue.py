"""The names of every stream the broker stores, in memory and in order: what LIST-STREAMS
answers from, and what the limit on the number of streams counts.

The data directory is scanned once, when the broker starts; from then on the broker keeps the
catalogue as it creates streams (STREAM-CREATE, or the first ATTACH of a new name) and deletes
them, so a listing costs no disk access, and its cost is bounded by the page it returns
(:meth:`page` looks at no more than ``scan`` names), never by how many streams exist.
"""
from __future__ import annotations

from bisect import bisect_right, insort
from typing import Callable, Iterable, List, Tuple


class StreamCatalogue:
    def __init__(self, names: Iterable[str] = ()):
        self._names: List[str] = sorted(set(names))
        self._set = set(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: str) -> bool:
        return name in self._set

    def add(self, name: str) -> None:
        if name not in self._set:
            self._set.add(name)
            insort(self._names, name)

    def remove(self, name: str) -> None:
        if name in self._set:
            self._set.discard(name)
            del self._names[bisect_right(self._names, name) - 1]

    def page(self, after: str, visible: Callable[[str], bool], *, scan: int,
             max_bytes: int, max_names: int = 65535) -> Tuple[Tuple[str, ...], str]:
        """The names after ``after`` (in order) that ``visible`` lets through, as many as fit
        in ``max_bytes`` (each name costs its UTF-8 length + 1) and ``max_names``, looking at
        ``scan`` names at most; and where the next page starts (the last name looked at), or
        ``""`` when no name is left."""
        names = self._names
        i = bisect_right(names, after) if after else 0
        end = min(len(names), i + scan)
        out: List[str] = []
        size = 0
        last = ""
        for k in range(i, end):
            name = names[k]
            if visible(name):
                cost = 1 + len(name.encode("utf-8"))
                if size + cost > max_bytes or len(out) == max_names:
                    return tuple(out), last
                out.append(name)
                size += cost
            last = name
        return tuple(out), (last if end < len(names) else "")
