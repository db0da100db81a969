"""INTERIM: the CHP front end's own index of the live keys of its stream. Pure.

CHP's snapshot is the latest value of every key under a subtree. The journal's last-value
index (``zeps/journal/lastvalue.py``, issue 18 item 1) and SNAPSHOT, the wire extension that
serves it (ids 74-77), landed after this front end was written, and SNAPSHOT needs a peering
per snapshot and a stream with a key index (``--key-index`` or a compacted stream); until the
front end uses it, it keeps this index itself, for any stream, built from the stream as its
ZEPS subscription delivers it (from sequence 1 at start, then live). It maps each live key to
the sequence of its latest message (the value stays in the journal; the shell reads it when a
KVSYNC is sent), so it costs about 150 bytes a key, bounded by ``max_keys`` (a key beyond is
not indexed, and counted: snapshots then miss it, which the shell logs). Replacing it changes
only the shell's snapshot source (:meth:`KeyIndex.snapshot` has the meaning of
``lastvalue.KeySnapshot``, but yields the keys it skips too, so that a session's budget counts
them).

**A snapshot without a copy.** :meth:`KeyIndex.snapshot` iterates the keys under a prefix in
key order, a chunk at a time, finding its place again by key after each chunk, so updates in
between cannot disturb it. It is consistent at ``S`` (the index's position when it was made):
it gives every key whose latest message is at or below ``S`` with that message's sequence, and
skips a key changed or created after ``S`` and a key deleted since; all of those come after
``S`` on the PUB socket, which a client applies after the snapshot.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Dict, Iterator, List, Optional, Tuple

#: Keys of a snapshot looked up per chunk.
CHUNK = 64


class SortedKeys:
    """Keys in order, as a list of sorted lists of at most ``2 * load`` keys (the idea of
    ``sortedcontainers.SortedList``): adding or removing a key costs O(log n + load)."""
    __slots__ = ("load", "_lists", "_maxes", "_len")

    def __init__(self, load: int = 512):
        self.load = load
        self._lists: List[List[str]] = []
        self._maxes: List[str] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, key: str) -> None:
        lists, maxes = self._lists, self._maxes
        if not lists:
            lists.append([key])
            maxes.append(key)
            self._len = 1
            return
        i = bisect_left(maxes, key)
        if i == len(maxes):
            i -= 1
            lists[i].append(key)
            maxes[i] = key
        else:
            lst = lists[i]
            j = bisect_left(lst, key)
            if j < len(lst) and lst[j] == key:
                return
            lst.insert(j, key)
        self._len += 1
        lst = lists[i]
        if len(lst) > 2 * self.load:
            half = lst[self.load:]
            del lst[self.load:]
            lists.insert(i + 1, half)
            maxes[i] = lst[-1]
            maxes.insert(i + 1, half[-1])

    def discard(self, key: str) -> None:
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            return
        lst = self._lists[i]
        j = bisect_left(lst, key)
        if j == len(lst) or lst[j] != key:
            return
        del lst[j]
        self._len -= 1
        if not lst:
            del self._lists[i]
            del maxes[i]
        else:
            maxes[i] = lst[-1]

    def chunk_from(self, key: str, inclusive: bool, n: int) -> List[str]:
        """Up to ``n`` keys from ``key`` on (``key`` itself only if ``inclusive``), in order."""
        maxes, lists = self._maxes, self._lists
        i = bisect_left(maxes, key) if inclusive else bisect_right(maxes, key)
        out: List[str] = []
        while i < len(lists) and len(out) < n:
            lst = lists[i]
            j = bisect_left(lst, key) if inclusive else bisect_right(lst, key)
            out.extend(lst[j:j + n - len(out)])
            i += 1
        return out

    def __iter__(self) -> Iterator[str]:
        for lst in self._lists:
            yield from lst


class KeyIndex:
    """Live key -> the sequence of its latest message, fed in sequence order."""
    __slots__ = ("max_keys", "position", "_seqs", "_keys")

    def __init__(self, max_keys: int = 1_000_000):
        self.max_keys = max_keys
        #: the last sequence applied (0: none)
        self.position = 0
        self._seqs: Dict[str, int] = {}
        self._keys = SortedKeys()

    def __len__(self) -> int:
        return len(self._seqs)

    def get(self, key: str) -> Optional[int]:
        return self._seqs.get(key)

    def apply(self, sequence: int, key: str, deleted: bool) -> bool:
        """The message ``sequence`` set ``key`` (or, ``deleted``, removed it). False if the key
        is new and the index is full: it is not indexed."""
        self.position = sequence
        seqs = self._seqs
        if deleted:
            if seqs.pop(key, None) is not None:
                self._keys.discard(key)
            return True
        if key in seqs:
            seqs[key] = sequence
            return True
        if len(seqs) >= self.max_keys:
            return False
        seqs[key] = sequence
        self._keys.add(key)
        return True

    def clear(self) -> None:
        self.position = 0
        self._seqs = {}
        self._keys = SortedKeys()

    def snapshot(self, prefix: str) -> Tuple[int, Iterator[Tuple[str, Optional[int]]]]:
        """``(S, entries)``: ``S`` the position now, ``entries`` every key under ``prefix`` in
        key order with the sequence of its latest message, or None for a key to skip (changed
        or deleted after ``S``; it is still yielded, so that the caller's budget counts it)."""
        return self.position, self._entries(prefix, self.position)

    def _entries(self, prefix: str, upto: int) -> Iterator[Tuple[str, Optional[int]]]:
        keys = self._keys
        start, inclusive = prefix, True
        while True:
            chunk = keys.chunk_from(start, inclusive, CHUNK)
            if not chunk:
                return
            for key in chunk:
                if not key.startswith(prefix):
                    return
                seq = self._seqs.get(key)
                yield key, (seq if seq is not None and seq <= upto else None)
            start, inclusive = chunk[-1], False
            if keys is not self._keys:          # cleared (the stream was made again)
                return
