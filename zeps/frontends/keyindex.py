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

from typing import Dict, Iterator, Optional, Tuple

from zeps.journal.lastvalue import SortedKeys     # the journal index's sorted keys (any order)



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
            chunk = keys.chunk_from(start, inclusive)     # a bounded piece, [] at the end
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
