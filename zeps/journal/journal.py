"""The one writer of a stream.

Decisions and why:

* **One ``os.write`` per batch.** A batch is encoded into one buffer and written with one
  system call (looping only on a short write), so a batch is one unit for the OS and a
  concurrent reader sees it grow record by record, never interleaved with anything else.
* **All or nothing.** Invalid items (key too long, frame over ``max_record_bytes``, wrong
  types) are refused before anything is written. A failed write (ENOSPC, EFBIG, EDQUOT, EIO)
  is undone by truncating the file back to its pre-batch size; the in-memory state is only
  updated after the write succeeded, so the journal stays usable and the sequence has no hole.
  Under ``fsync="always"`` a failing ``fdatasync`` is undone the same way.
* **Timestamps** are taken once per batch, ``max(clock(), last timestamp)``, so they never
  decrease within a stream even if the clock steps back (``seq_at`` relies on it). The clock
  (ns since the epoch, :func:`time.time_ns` by default) is injected with ``Journal.open(...,
  clock=)``; retention by age asks the same clock unless it is given ``now_ns``.
* **Durability.** ``durable_seq`` is what the broker confirms to publishers.
  ``"always"``: ``fdatasync`` before ``append_batch`` returns. ``"interval"`` (default): the
  broker calls :meth:`Journal.sync` (group commit) on its own timer, typically from a worker
  thread. ``"never"``: ``durable_seq`` follows what was written to the OS (it survives the
  process, not the machine). ``sync()`` captures the target sequence
  and duplicates the fds to sync under a lock, syncs without the lock, and raises
  ``durable_seq`` monotonically, so it is safe beside appends from the owning thread. A failed
  ``sync()`` is final for this opening of the stream (:mod:`.durability`).
  Index files are never synced: they are rebuilt from the log after a crash.
* **Rolling.** Before a batch that would take the active segment over ``segment_bytes`` (and
  if it is not empty) a new segment named by the next sequence is created; the old one is
  ``fdatasync``'ed (except under ``"never"``) together with the directory. A batch is never
  split, so a segment may exceed ``segment_bytes`` by one batch.
* **Retention** deletes whole old segments, never the active one, by total size and by age
  (of a segment's newest record; rule in :mod:`.retention`), on each roll and whenever the
  caller calls :meth:`Journal.apply_retention`.
* **Locking.** One writer per stream directory (:mod:`.lock`).
* **Producer state.** Records appended with ``producers=`` carry ``(pid, pseq)`` in the log;
  :meth:`Journal.producers` is the last of each id over the records the journal holds. It is
  rebuilt on open from the newest valid ``.producers`` snapshot plus the records after it, and
  a snapshot is written at each roll (after the sealed segment is synced, before the new
  segment exists; if it cannot be written the roll, and so the batch, fails with
  :class:`JournalFullError` and nothing changes), and, unsynced, every
  ``snapshot_interval_bytes`` of log and at close. Details in :mod:`.producers`.
* **Last-value index and compaction** (``key_index``/``compact``): each append updates the
  index (:mod:`.lastvalue`, API in :mod:`.kv`), rebuilt on open from its checkpoint (written at
  close, and at a roll by a short-lived thread of its own) plus the records after it. A
  compacted stream's sealed segments may have gaps; opening it first finishes or discards what
  an interrupted compaction left (:func:`.compaction.recover`).
"""
from __future__ import annotations

import errno as _errno
import logging
import os
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import compaction, lastvalue
from . import settings as stream_settings
from .config import JournalConfig
from .errors import InvalidRecordError, JournalError, JournalFullError, JournalNotFoundError
from .index import FileIndex, MemIndex, encode_entries, entries_for
from .lock import release_lock, take_lock
from .producers import ProducerState, rebuild, remove_snapshot, write_snapshot
from .kv import KEY_CHECKPOINT_MIN, KeyCheckpointWriter, KeyValues
from .record import Record, encode_batch, encode_plain
from .recovery import load_sealed, recover
from .durability import Durability
from .retention import Retention
from .segment import Segment, fsync_dir, list_segment_seqs
from .view import StreamView

log = logging.getLogger("zeps.journal")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Journal(StreamView, KeyValues, Retention, Durability):
    """The single writer of one stream directory. Create with :meth:`Journal.open`."""

    def __init__(self, stream_dir: str, config: JournalConfig, _lock_fd: int,
                 clock: Callable[[], int] = time.time_ns):
        self._dir = stream_dir
        self.config = config
        self._clock = clock
        self._interval = config.index_interval_bytes
        self._lock_fd = _lock_fd
        self._closed = False
        self._segs: List[Segment] = []
        self._firsts: List[int] = []
        self._active: Optional[Segment] = None
        self._next_seq = 1
        self._last_ts = 0
        self._written_seq = 0
        self._durable_seq = 0
        self._sync_lock = threading.Lock()
        self._sync_error: Optional[str] = None   # a failed sync(): final (module docs)
        self._unsynced: List[Segment] = []   # rolled segments not yet synced ("never")
        self._last_entry_pos = 0
        self._pending_truncate: Optional[int] = None
        self._producers = ProducerState(config.max_producers, self._producer_max_age_ns())
        self._loose_snapshot: Optional[int] = None   # the snapshot not at a segment start
        self._snapshot_pos = 0        # position in the active segment of the last snapshot
        self._gaps = config.compact or stream_settings.is_compact(stream_dir)
        self._keys: Optional[lastvalue.KeyIndex] = (
            lastvalue.KeyIndex() if config.key_index or self._gaps
            or stream_settings.has_key_index(stream_dir) else None)
        self._keys_upto = 0           # the sequence before which the last checkpoint is
        self._key_writer = KeyCheckpointWriter(stream_dir)

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, stream_dir, config: Optional[JournalConfig] = None,
             clock: Callable[[], int] = time.time_ns) -> "Journal":
        """Open (creating it if needed) the stream directory as its one writer: take the
        stream lock, recover the tail of the last segment, and continue after the last whole
        record. ``clock()`` gives the time in ns since the epoch (record timestamps,
        retention by age)."""
        config = config or JournalConfig()
        stream_dir = os.fspath(stream_dir)
        try:
            os.makedirs(stream_dir, exist_ok=True)
        except FileExistsError:
            raise JournalNotFoundError(f"{stream_dir!r} exists and is not a directory") from None
        except OSError as e:
            raise JournalError(f"cannot create stream directory {stream_dir!r}: "
                               f"{e.strerror}") from None
        if not os.path.isdir(stream_dir):
            raise JournalNotFoundError(f"{stream_dir!r} is not a directory")
        lock_fd = take_lock(stream_dir, "stream")
        j = cls(stream_dir, config, lock_fd, clock)
        try:
            j._recover()
        except BaseException:
            j._release()
            raise
        return j

    def _recover(self) -> None:
        compaction.recover(self._dir)
        seqs = list_segment_seqs(self._dir)
        if not seqs:
            seg = self._create_segment(1)
            self._segs, self._firsts = [seg], [1]
            self._active = seg
            self._next_seq = 1
            self._last_entry_pos = 0
            self._load_producers()
            self._load_keys()
            return
        self._segs = [Segment(self._dir, q, self._gaps) for q in seqs]
        self._firsts = list(seqs)
        last = self._segs[-1]
        self._next_seq = recover(last, self._interval).seq
        self._active = last
        idx = last.index
        self._last_entry_pos = idx.last_pos() if len(idx) else 0
        if last.last_ts is not None:
            self._last_ts = last.last_ts
        elif len(self._segs) > 1:
            prev = self._segs[-2]
            self._prepare(prev)
            self._last_ts = prev.last_ts or 0
        if self.config.fsync != "never":
            # what a crashed process left in the page cache is only durable once synced
            os.fdatasync(last.fd)
        self._written_seq = self._durable_seq = self._next_seq - 1
        self._load_producers()
        self._load_keys()

    def _producer_max_age_ns(self) -> Optional[int]:
        ms = self.config.producer_max_age_ms
        return None if ms is None else ms * 1_000_000

    def _load_producers(self) -> None:
        self._producers, upto = rebuild(self, self._dir, self._firsts, self._next_seq,
                                        self.config.max_producers, self._producer_max_age_ns(),
                                        self._clock())
        if upto not in self._firsts:
            self._loose_snapshot = upto
        if upto == self._next_seq:
            self._snapshot_pos = self._active.size

    def _load_keys(self) -> None:
        if self._keys is not None:
            self._keys, self._keys_upto = lastvalue.rebuild(self, self._dir, self._firsts[0],
                                                            self._next_seq)

    def _create_segment(self, first_seq: int) -> Segment:
        """Create the files of a new segment (index files first: a reader that sees the log
        finds its index) and make the directory entries durable (except under "never")."""
        seg = Segment(self._dir, first_seq, self._gaps)
        created = []
        try:
            for path in (seg.index_path, seg.time_path, seg.log_path):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o644)
                os.close(fd)
                created.append(path)
            seg.open_log(writable=True)
            seg.open_index_writers()
            if self.config.fsync != "never":
                fsync_dir(self._dir)
        except OSError as e:
            seg.close()
            for path in created:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise JournalFullError(f"cannot create segment {seg.log_path}: {e.strerror} "
                                   f"({_errno.errorcode.get(e.errno, e.errno)})", e) from None
        seg.index = MemIndex()
        seg.size = 0
        seg.loaded = True
        return seg

    # ------------------------------------------------------------------ state

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def durable_seq(self) -> int:
        """Highest sequence known durable under the fsync policy (what publishers may be
        confirmed up to)."""
        return self._durable_seq

    @property
    def closed(self) -> bool:
        return self._closed

    def _end_seq(self) -> int:
        return self._next_seq

    def _newest_ts(self) -> int:
        return self._last_ts

    def _seg_bytes(self, seg: Segment) -> int:
        """A sealed segment's size is stat'ed once, and again after a compaction rewrote it
        (``info`` stat'ed every unloaded one each time it was asked)."""
        if seg is self._active:
            return super()._seg_bytes(seg)
        n = seg.sealed_bytes
        if n is None:
            n = seg.sealed_bytes = super()._seg_bytes(seg)
        return n

    def _load(self, seg: Segment) -> None:
        load_sealed(seg, self._interval, persist=True)

    def _why_not_torn(self, seg: Segment) -> str:
        if seg is self._active:
            return "the writer recovered this segment's tail when it opened the stream"
        return "a later segment exists, so it is not a torn tail"

    def _can_unload(self, seg: Segment) -> bool:
        # never close what a concurrent sync() may still have to fdatasync
        with self._sync_lock:
            return seg is not self._active and seg not in self._unsynced

    def __repr__(self):
        return f"Journal({self._dir!r}, next_seq={self._next_seq})"

    def producers(self) -> Dict[str, Tuple[int, int]]:
        """``{producer id: (last pseq, stream sequence of that record)}`` over the records the
        journal holds (a copy, least recently used id first; at most
        ``config.max_producers`` ids). Survives restarts and retention."""
        self._check_open()
        return self._producers.as_dict()

    def producer(self, pid: str) -> Optional[Tuple[int, int, int, Optional[str]]]:
        """``(last pseq, stream sequence of that record, its timestamp, bound key or None)`` of
        one producer id, or None if the journal does not know it (never seen, dropped as least
        recently used, or older than ``config.producer_max_age_ms`` by the journal's clock).
        O(1): what the broker asks on PRODUCER and for each producer's publish."""
        return self._producers.get(pid, self._clock())

    def bind_producer(self, pid: str, key: str) -> None:
        """Bind a known producer id that is not bound yet to ``key`` (the CurveZMQ key of the
        client whose records made it); kept in the snapshots (:mod:`.producers`)."""
        self._producers.bind(pid, key)

    def producers_bound_to(self, key: str) -> Tuple[int, Optional[str]]:
        """``(ids bound to key, the least recently used of them or None)``. O(1)."""
        return self._producers.bound_to(key)

    def producer_in_use(self, key: str, pid: str) -> None:
        """``pid`` (bound to ``key``) is in use: the last of the key's ids. O(1)."""
        self._producers.to_back(key, pid)

    def forget_producer(self, pid: str) -> None:
        """Forget ``pid`` as if dropped as least recently used (from the next snapshot on)."""
        self._producers.forget(pid)

    # ------------------------------------------------------------------ appending

    def append(self, key: str, body: bytes) -> Record:
        """Append one record: ``append_batch(((key, body),))[0]``, the same bytes and effects.
        A plain one (the broker's round of one PUBLISH) is written without the batch's lists
        (issue 20); what :func:`encode_plain` does not take goes through :meth:`append_batch`,
        which stores or refuses it."""
        if type(key) is not str or type(body) is not bytes:    # before the clock is read
            return self.append_batch(((key, body),))[0]
        self._check_open()
        if self._pending_truncate is not None:
            self._retry_truncate()
        ts = max(self._clock(), self._last_ts)
        seq = self._next_seq
        one = encode_plain(key, body, seq, ts, self.config.max_record_bytes)
        if one is None:                                # refused there: no timestamp is kept
            return self.append_batch(((key, body),))[0]
        buf, rec = one
        seg, pre = self._write(buf, 1)
        if pre - self._last_entry_pos >= self._interval or (pre == 0 and not len(seg.index)):
            self._add_entries(seg, ((seq, pre, ts),), pre)    # entries_for's rule, for one
        self._advance(seg, pre + len(buf), ts, seq)
        if self._keys is not None:
            self._keys.observe_records((rec,), pre)
        if seg.size - self._snapshot_pos >= self.config.snapshot_interval_bytes:
            self._write_loose_snapshot()
        return rec

    def append_batch(self, items: Sequence,
                     producers: Optional[Sequence[Optional[Tuple[str, int]]]] = None
                     ) -> List:
        """Append ``items`` as consecutive records with one ``write()``; return a list parallel
        to ``items``. An item is a ``(key, body)`` pair - one record, returned as a
        :class:`Record` (``.frame`` is the DELIVER frame to route) - or a ``(key, body,
        header_block)`` triple - the same with a headers block (:mod:`zeps.protocol.headers`;
        None: none) in the record's headers extension, a :class:`HeadersRecord` - or a
        :class:`~zeps.protocol.commands.PublishBatch` - one batch record holding its entries
        verbatim under one header and CRC, taking ``count`` sequences, returned as a
        :class:`BatchRecord` (``.frame`` is the DELIVER-BATCH frame). ``producers``: None, or a
        list parallel to ``items`` of None or ``(producer id, pseq)`` (1 to 255 bytes of UTF-8,
        1 to 2^64-1; for a PublishBatch the pseq of its first message, its messages taking
        ``pseq .. pseq + count - 1``, which must not pass 2^64-1), stored in the record (inside
        its CRC) and reflected in :meth:`producers`. All or nothing: :class:`RecordTooLargeError` (a frame,
        a batch's whole frame included, over ``max_record_bytes``) / :class:`KeyTooLongError` /
        :class:`InvalidRecordError` before writing anything, :class:`JournalFullError` if the
        write failed (rolled back)."""
        self._check_open()
        if not items:
            if producers:
                raise InvalidRecordError("producers given for an empty batch")
            return []
        if self._pending_truncate is not None:
            self._retry_truncate()
        ts = max(self._clock(), self._last_ts)
        parts, records = encode_batch(items, self._next_seq, ts, self.config.max_record_bytes,
                                      producers)
        buf = b"".join(parts)
        seg, pre = self._write(buf, len(records))
        entries, last_entry = entries_for(records, pre, self._last_entry_pos, self._interval,
                                          pre == 0 and not len(seg.index))
        if entries:
            self._add_entries(seg, entries, last_entry)
        self._advance(seg, pre + len(buf), ts, records[-1].last_sequence)
        if producers is not None:
            self._producers.observe_records(records)
        if self._keys is not None:
            self._keys.observe_records(records, pre)
        if seg.size - self._snapshot_pos >= self.config.snapshot_interval_bytes:
            self._write_loose_snapshot()
        return records

    def _write_loose_snapshot(self) -> bool:
        """Snapshot the producer state at the end of the log (not synced: it only shortens the
        next open's scan) in place of the previous such snapshot. False if it failed."""
        upto = self._next_seq
        self._snapshot_pos = self._active.size
        try:
            write_snapshot(self._dir, self._producers, upto, False)
        except OSError as e:
            log.warning("journal %s: cannot write a producer snapshot (%s); the next open "
                        "scans more records", self._dir, e)
            return False
        if self._loose_snapshot is not None and self._loose_snapshot != upto:
            remove_snapshot(self._dir, self._loose_snapshot)
        self._loose_snapshot = upto
        return True

    def _write(self, buf: bytes, n: int) -> Tuple[Segment, int]:
        """Write the ``n`` records ``buf`` at the end of the active segment (rolled first if
        they would pass ``segment_bytes``), synced if ``fsync="always"``: ``(segment, their
        position)``. All or nothing: :class:`JournalFullError` once rolled back."""
        if self._sync_error is not None:
            raise JournalError(self._sync_error)
        seg = self._active
        if seg.size > 0 and seg.size + len(buf) > self.config.segment_bytes:
            self._roll()
            seg = self._active
        pre = seg.size
        self._write_all(seg, buf, pre, n)
        if self.config.fsync == "always":
            try:
                os.fdatasync(seg.fd)
            except OSError as e:
                self._undo(seg, pre)
                raise JournalFullError(
                    f"fdatasync of {seg.log_path} failed: {e.strerror} "
                    f"({_errno.errorcode.get(e.errno, e.errno)}); the batch of {n} "
                    f"records was rolled back", e) from None
        return seg, pre

    def _advance(self, seg: Segment, size: int, ts: int, last: int) -> None:
        """Records up to sequence ``last`` (timestamp ``ts``) were written: ``seg`` now ends
        at ``size``."""
        with self._sync_lock:
            seg.size = size
            seg.last_ts = ts
            if seg.first_ts is None:
                seg.first_ts = ts
            self._next_seq = last + 1
            self._last_ts = ts
            self._written_seq = last
            if self.config.fsync != "interval":
                self._durable_seq = last

    def _write_all(self, seg: Segment, buf: bytes, pre: int, n: int) -> None:
        off = 0
        try:
            while off < len(buf):            # one write, and the rest of a short one
                written = os.write(seg.fd, buf[off:] if off else buf)
                if written <= 0:
                    raise OSError(_errno.EIO, "write returned 0")
                off += written
        except OSError as e:
            self._undo(seg, pre)
            name = _errno.errorcode.get(e.errno, str(e.errno))
            raise JournalFullError(
                f"append of {n} records ({len(buf)} bytes) to {seg.log_path} failed after "
                f"{off} bytes: {e.strerror} ({name}); the batch was rolled back, nothing of it "
                f"is in the journal", e) from None

    def _undo(self, seg: Segment, pre: int) -> None:
        self._batch_read = None
        try:
            os.ftruncate(seg.fd, pre)
        except OSError as e:
            # retried before the next append; until then the bytes past `pre` are ignored by
            # this writer (seg.size) and cut by recovery on the next open
            log.error("journal: cannot truncate %s back to %d bytes: %s", seg.log_path, pre, e)
            self._pending_truncate = pre

    def _retry_truncate(self) -> None:
        seg = self._active
        try:
            os.ftruncate(seg.fd, self._pending_truncate)
        except OSError as e:
            raise JournalFullError(f"{seg.log_path} still holds the bytes of a failed batch "
                                   f"and cannot be truncated: {e.strerror}", e) from None
        self._pending_truncate = None

    def _add_entries(self, seg: Segment, entries, last_pos: int) -> None:
        """Index ``entries`` (``(seq, pos, ts)``, the last at byte ``last_pos``) of records just
        written to ``seg``: in memory, then in its index files."""
        idx = seg.index
        for e in entries:
            idx.append(*e)
        self._last_entry_pos = last_pos
        if not seg.index_file_ok:
            return
        ib, tb = encode_entries(entries)
        try:
            os.write(seg.ifd_w, ib)
            os.write(seg.tfd_w, tb)
        except OSError as e:
            # the in-memory index stays right; the file is rebuilt from the log on next open
            seg.index_file_ok = False
            log.warning("journal: cannot write index of %s (%s); it will be rebuilt from the "
                        "log", seg.log_path, e)

    def _roll(self) -> None:
        old = self._active
        sync = self.config.fsync != "never"
        if sync:
            try:
                os.fdatasync(old.fd)
            except OSError as e:                  # final, as a failed sync() (.durability)
                why = self._sync_failed(f"fdatasync of {old.log_path} while rolling", e)
                raise JournalFullError(why, e) from None
        try:
            write_snapshot(self._dir, self._producers, self._next_seq, sync)
        except OSError as e:
            raise JournalFullError(f"cannot write the producer snapshot of {self._dir} while "
                                   f"rolling: {e.strerror}", e) from None
        if self._loose_snapshot is not None and self._loose_snapshot != self._next_seq:
            remove_snapshot(self._dir, self._loose_snapshot)
        self._loose_snapshot = None
        self._snapshot_pos = 0
        new = self._create_segment(self._next_seq)
        for attr in ("ifd_w", "tfd_w"):
            fd = getattr(old, attr)
            if fd >= 0:
                os.close(fd)
                setattr(old, attr, -1)
        # the sealed segment's index moves from memory to its files if they are complete
        if old.index_file_ok:
            try:
                old.index = FileIndex(old.index_path, old.time_path, fixed=True)
            except OSError:
                pass
        old.sealed = True
        old.end_pos = old.size
        self._prepare(old)                    # into the LRU of open sealed segments
        with self._sync_lock:
            if self.config.fsync == "never":
                self._unsynced.append(old)
                # "never" promises nothing beyond the OS: keep only the recent ones for an
                # explicit sync(), so that they do not pin open file descriptors forever
                del self._unsynced[:-8]
            else:
                # everything written so far is in the synced old segment
                if self._written_seq > self._durable_seq:
                    self._durable_seq = self._written_seq
            self._segs.append(new)
            self._firsts.append(new.first_seq)
            self._active = new
        self._last_entry_pos = 0
        if self.config.retention_bytes is not None or self.config.retention_ms is not None:
            self.apply_retention()
        k = self._keys
        if k is not None and self._next_seq - self._keys_upto >= max(k.kept, KEY_CHECKPOINT_MIN):
            if self._key_writer.start(k, self._next_seq, self._firsts[0]):
                self._keys_upto = self._next_seq

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Sync (unless ``fsync="never"``), close files and release the stream lock."""
        if self._closed:
            return
        try:
            synced = True
            if self.config.fsync != "never" and self._active is not None:
                try:
                    self.sync()
                except JournalError as e:
                    synced = False
                    log.error("journal %s: final sync failed: %s", self._dir, e)
            # the state at the end of the log, unless a snapshot of it exists (a loose one, or
            # the empty active segment's own, which must not be replaced by an unsynced copy)
            if synced and self._active is not None and self._loose_snapshot != self._next_seq \
                    and self._next_seq != self._active.first_seq:
                self._write_loose_snapshot()
            self._key_writer.join()
            if synced and self._keys is not None and self._active is not None \
                    and (self._keys_upto != self._next_seq or self._key_writer.error):
                self._write_key_checkpoint()
        finally:
            with self._sync_lock:
                self._closed = True
            for seg in self._segs:
                seg.close()
            self._release()

    def _release(self) -> None:
        fd, self._lock_fd = self._lock_fd, -1
        release_lock(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True) and getattr(self, "_lock_fd", -1) >= 0:
            try:
                self.close()
            except Exception:
                pass
