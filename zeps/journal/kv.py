"""The writer's current-state API (issue 18, item 1): what :class:`~zeps.journal.Journal` answers
from its last-value index (:mod:`.lastvalue`) - a key's latest message, the live keys under a
prefix in key order, the sequence that answer is consistent at - and its checkpoints: at close,
and at a roll by a thread (:class:`KeyCheckpointWriter`, which also finds the dead entries).

A mixin of :class:`~zeps.journal.Journal` (which owns ``_keys``, the index, and the read loop);
kept apart so that the journal module stays about appending and files.
"""
from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from typing import Iterable, List, Optional, Tuple

from . import lastvalue
from .errors import JournalError
from .record import BatchRecord, Record, expand

log = logging.getLogger("zeps.journal")

#: A checkpoint is due at a roll once this many messages (or as many as the last checkpoint
#: held keys, if more: ``KeyIndex.kept``) were appended since the last one.
KEY_CHECKPOINT_MIN = 4096


class KeyValues:
    """The last-value API of a writer whose config has ``key_index`` (or ``compact``)."""

    _keys: Optional[lastvalue.KeyIndex]
    #: The batch record :meth:`_read_at` read last, ``(segment, position, record)``: a snapshot
    #: reads keys in key order, and keys published together share a batch record, whose every
    #: read walks (and CRC-checks) all of it; kept until a rewrite or a truncation can change
    #: the bytes at that position (:meth:`reload_segments`, the writer's undo and close).
    _batch_read: Optional[tuple] = None

    def _key_index(self) -> lastvalue.KeyIndex:
        self._check_open()
        if self._keys is None:
            raise JournalError(f"journal {self._dir} has no key index (JournalConfig.key_index "
                               f"is off and the stream is not compacted)")
        return self._keys

    @property
    def keys_seq(self) -> int:
        """The sequence the key index is consistent at: it reflects every message up to it
        (the last one appended; the index is updated by each append)."""
        self._key_index()
        return self._next_seq - 1

    def key_count(self) -> int:
        """How many keys the index holds: the live ones, and those whose latest message
        retention (or a purge) deleted that are not pruned yet (they are not served; at most
        about two checkpoint periods' messages of them: see :mod:`.lastvalue`)."""
        return len(self._key_index())

    def latest_seq(self, key: str) -> Optional[int]:
        """The sequence of ``key``'s latest message, or None (never published, deleted by a
        tombstone, or its latest message removed by retention or a purge). O(1)."""
        got = self._key_index().get(key.encode("utf-8"))
        if got is None or got[0] < self._firsts[0]:
            return None
        return got[0]

    def latest(self, key: str) -> Optional[Record]:
        """``key``'s latest message as a :class:`~zeps.journal.Record` (a message of a batch
        record too), or None (as :meth:`latest_seq`). One read at the position the index keeps;
        if that position is stale (compaction moved the record), through the sparse index."""
        got = self._key_index().get(key.encode("utf-8"))
        if got is None or got[0] < self._firsts[0]:
            return None
        return self._read_at(*got)

    def latest_many(self, keys: Iterable[str]) -> List[Optional[Record]]:
        """:meth:`latest` of each key, in order."""
        return [self.latest(k) for k in keys]

    def snapshot(self, prefix: str = "", after: Optional[str] = None) -> lastvalue.KeySnapshot:
        """The live keys under ``prefix`` in key order (UTF-8 byte order), consistent at its
        ``.seq`` (= :attr:`keys_seq` now): iterating yields ``(key, sequence)`` a bounded chunk
        at a time, skipping keys changed since (they are in the stream after ``.seq``); see
        :class:`~zeps.journal.lastvalue.KeySnapshot`. ``after``: resume after that key.
        ``.records()`` gives the messages themselves (or :meth:`read_at` each sequence)."""
        index = self._key_index()
        return lastvalue.KeySnapshot(index, prefix, self._next_seq - 1,
                                     lambda: self._firsts[0], after, self._read_at)

    def read_at(self, seq: int) -> Optional[Record]:
        """The message ``seq`` (None if the journal does not hold it: removed by compaction or
        retention, or not written yet)."""
        self._check_open()
        if not self._firsts or seq < self._firsts[0] or seq >= self._next_seq:
            return None
        recs = self.read_batch(seq, 1)
        return recs[0] if recs and recs[0].sequence == seq else None

    def _read_at(self, seq: int, pos: int) -> Optional[Record]:
        """Message ``seq``, whose record the index says starts at byte ``pos`` of its segment:
        the record there is read and checked to hold ``seq`` (its sequence is in its
        CRC-checked frame); if it does not, :meth:`read_at`."""
        i = bisect_right(self._firsts, seq) - 1
        if i >= 0:
            seg = self._segs[i]
            cached = self._batch_read
            if cached is not None and cached[0] is seg and cached[1] == pos:
                r = cached[2]
                if r.sequence <= seq <= r.last_sequence:
                    k = seq - r.sequence
                    return expand(r.frame, r.offsets, r.sequence, r.timestamp, k, k + 1,
                                  r.producer, r.pseq)[0]
            self._prepare(seg)
            limit = self._limit(seg)
            if pos < limit:
                out: list = []
                seg.parse(pos, seg.first_seq, limit, out, max_records=1, chunks=True,
                          gaps=True, block=4096)
                if out and out[0].sequence <= seq <= out[0].last_sequence:
                    r = out[0]
                    if isinstance(r, BatchRecord):
                        self._batch_read = (seg, pos, r)
                        k = seq - r.sequence
                        return expand(r.frame, r.offsets, r.sequence, r.timestamp, k, k + 1,
                                      r.producer, r.pseq)[0]
                    return r
        return self.read_at(seq)

    def _write_key_checkpoint(self) -> None:
        """The checkpoint of the index at the end of the log, synced (at close)."""
        keys, d = self._keys.copy_state()
        try:
            lastvalue.write_file(self._dir, self._next_seq,
                                 lastvalue.encode(self._next_seq, keys, d, self._firsts[0]), True)
            self._keys_upto = self._next_seq
        except OSError as e:
            log.warning("journal %s: cannot write the key index checkpoint (%s); the next open "
                        "rebuilds more of it from the log", self._dir, e)

    def reload_segments(self, first_seqs: Iterable[int]) -> int:
        """Compaction rewrote these sealed segments (their first sequences): close them, so
        that their next read opens the new files (a read under way keeps the old ones; a
        cursor into an old file is found out by its inode and located again). Returns how
        many were open."""
        self._check_open()
        self._batch_read = None
        n = 0
        wanted = set(first_seqs)
        for seg in self._segs[:-1]:
            if seg.first_seq in wanted:
                seg.sealed_bytes = None               # its size is the new file's
            if seg.first_seq in wanted and seg.loaded and seg is not self._active:
                with self._sync_lock:   # the old file needs no fdatasync any more
                    if seg in self._unsynced:
                        self._unsynced.remove(seg)
                self._forget(seg)
                seg.unload()
                n += 1
        return n


class KeyCheckpointWriter:
    """The checkpoint written by a thread of its own from a copy of the index (at a roll):
    :meth:`start` takes the copy on the caller's thread and returns at once. When encoded, the
    thread sets the index's ``kept`` (the keys it holds) and hands it the entries it left out
    (``dead``: below ``first_seq``) to prune (see :mod:`.lastvalue`, "Retention")."""

    def __init__(self, stream_dir: str):
        self.stream_dir = stream_dir
        self._thread: Optional[threading.Thread] = None
        self.written: Optional[int] = None     # upto of the last checkpoint written
        self.error: Optional[BaseException] = None

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, index: lastvalue.KeyIndex, upto: int, first_seq: int) -> bool:
        """Write the checkpoint of ``index`` before ``upto`` in the background; False if the
        previous one is still being written (this one is skipped)."""
        if self.busy():
            return False
        keys, d = index.checkpoint_state()
        t = threading.Thread(target=self._run, args=(upto, keys, d, first_seq, index),
                             name=f"zeps-keys-{os.path.basename(self.stream_dir)}",
                             daemon=True)
        self._thread = t
        t.start()
        return True

    def _run(self, upto: int, keys: List[bytes], d: dict, first_seq: int, index) -> None:
        try:
            dead: Tuple[List[bytes], List[int]] = ([], [])
            gen = lastvalue.encode_steps(upto, keys, d, first_seq, dead)
            while True:
                try:
                    next(gen)
                except StopIteration as stop:
                    data = stop.value
                    break
            index.checkpointed(len(keys) - len(dead[0]), dead)  # the copy's d has every key
            lastvalue.write_file(self.stream_dir, upto, data, False)
            self.written = upto
        except BaseException as e:  # noqa: BLE001 - reported by the owner; the log is the truth
            self.error = e
            log.warning("journal %s: cannot write the key index checkpoint: %s",
                        self.stream_dir, e)

    def join(self) -> None:
        t = self._thread
        if t is not None:
            t.join()
            self._thread = None
