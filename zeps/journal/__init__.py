"""ZEPS journal: a segmented, CRC-checked, indexed append-only log per stream.

See docs/architecture.md ("Journal contract") for the on-disk format and the API the broker,
the replay tool and the Spark reader rely on. This package is the one owner of that format: the
record layout (:mod:`.record`, the DELIVER frame from :mod:`zeps.protocol.deliver`), segment
naming (:mod:`.segment`), the index files and their rule (:mod:`.index`), and what a short or
bad record means (:mod:`.view`). Module map:

* :mod:`.config`        - :class:`JournalConfig`
* :mod:`.errors`        - :class:`JournalError` and subclasses
* :mod:`.names`         - stream name <-> directory name
* :mod:`.record`        - record format, :class:`Record`, :class:`BatchRecord`, encoding and
  parsing (what is valid)
* :mod:`.index`         - sparse offset index and time index files, the entry rule
* :mod:`.producers`     - the producer state (last pseq per producer id) and its snapshots
* :mod:`.lastvalue`     - the last-value index (key -> latest sequence and position), its
  sorted keys, prefix snapshots and checkpoint file; :mod:`.kv` - the writer's API over it
  (``latest``, ``snapshot``, ``keys_seq``)
* :mod:`.consumers`     - durable consumers' files (``consumers/<name>.json``: settings and
  state, written whole and atomically; :class:`~.consumers.Saver` writes them off the caller's
  thread); not re-exported: ``from zeps.journal import consumers``
* :mod:`.compaction`    - compacted streams: which segments to clean (a pure rule), the
  rewrite keeping the latest message per key, the crash-safe swap and its recovery
* :mod:`.segment`       - one segment: file naming, block reads, lookups
* :mod:`.recovery`      - checking/rebuilding a segment's index, recovering its tail
* :mod:`.open_segments` - the LRU of open sealed segments
* :mod:`.view`          - the read loop and its rules, shared by the writer and both readers
* :mod:`.iterator`      - :class:`RecordIterator` (``read_from``, follow mode)
* :mod:`.reader`        - :class:`JournalReader`, read-only, lock-free
* :mod:`.lock`          - the one-writer (and one-broker) lock
* :mod:`.retention`     - which old segments retention deletes (a pure rule)
* :mod:`.journal`       - :class:`Journal`, the one writer of a stream
* :mod:`.datadir`       - :class:`DataDir`, the broker's data directory
* :mod:`.columnar`      - :func:`~.columnar.read_columns`, the same records as Arrow columns
  (for Spark). It needs numpy and pyarrow (the ``spark`` extra), so it is not imported here:
  ``from zeps.journal.columnar import read_columns``. Its parts: :mod:`.walk` (record
  positions in a block), :mod:`.blockcrc` (all CRCs of a block in one call),
  :mod:`.plainrun` (runs of plain records checked at once, and the one-pass C loop for them),
  :mod:`.batchcols` (runs of batch records, their entries walked in parallel) and
  :mod:`.columns` (the :class:`~.columns.Columns` a run gives).

Decisions and known limits (details in each module's docstring):

* The log is the truth; indexes are rebuilt from it whenever missing, short or wrong, and are
  never fsync'ed. Recovery (writer open) verifies the last segment from its last index entry
  that points at a valid record and truncates at the first short/bad record after it; older
  segments are checked lazily when read, and a bad record there raises :class:`CorruptionError`
  (file, byte offset) after the good records before it were returned.
* Readers never take a lock and never write. In the last segment, a short or bad record after
  the last index entry is "not written yet" (a record being written, or a torn tail the writer
  will cut); before it, it is corruption. Both readers - :class:`JournalReader` and the
  columnar one - follow these rules through the same read loop, and are tested against the
  same damaged journals (tests/test_journal_damage.py).
* A failed batch is truncated away. A reader in *another* process that read the failed
  batch's whole records between the failed ``write()`` and the truncation could have seen
  sequences that are later reused; the writer's own reads never can. Under ``fsync="always"``
  that window is the whole failed ``fdatasync`` (the batch is whole in the file meanwhile).
  (Closing it would need a commit marker in the format, which is fixed by the contract.)
* At most ``open_segments.MAX_OPEN_SEALED`` (32) sealed segments per Journal/JournalReader keep
  their files open (LRU), so long replays and long-running followers do not run out of
  descriptors.
* No clock of its own: record timestamps come from the ``clock`` given to
  :meth:`Journal.open` / :class:`DataDir` (``time.time_ns`` by default), and ``read_from``'s
  follow mode takes ``clock``/``sleep``; the broker decides when to call :meth:`Journal.sync`.
* Producer sequences (idempotent publishers): ``append_batch(items, producers=)`` stores a
  ``(producer id, pseq)`` in a record's CRC-covered producer extension (flagged in the length's
  top bit; records without one are byte-identical to the original format; a PublishBatch's
  pseq is its first message's, message ``i`` having ``pseq + i``) and
  :meth:`Journal.producers` is the last pseq of each id over the records held - rebuilt on open
  from the newest valid ``.producers`` snapshot (written at each roll, every
  ``snapshot_interval_bytes`` of log and at close) plus the records after it, so it is exactly
  what the recovered log holds, survives retention, and costs at most
  ``snapshot_interval_bytes`` of records to rebuild after a crash. At most ``max_producers``
  ids are kept (LRU), none older than ``producer_max_age_ms`` (one day): a retry after that
  many other producers published, or that long, is not deduplicated. :meth:`Journal.producer`
  looks one id up (O(1)); :meth:`Journal.bind_producer` binds one to a CurveZMQ key.
* Current state (issue 18): with ``JournalConfig.key_index`` (and in every compacted stream)
  the writer keeps ``key -> (latest sequence, position)`` as it appends (an empty body, a
  tombstone, removes the key), checkpointed in ``<upto>.keys`` (at close, and at a roll once as
  many messages as keys were appended since the last one, written by a short-lived thread of
  the journal's own from a copy taken on the caller's thread) and rebuilt on open from the
  newest valid checkpoint plus the records after it (the whole log if there is none).
  :meth:`Journal.latest` reads a key's latest message; :meth:`Journal.snapshot` iterates the
  live keys under a prefix in key order, a chunk at a time, consistent at its ``seq``. A
  compacted stream (``SETTINGS.json``: ``compact``) has gaps between sequences in its sealed
  segments, which :mod:`.compaction` rewrote without the superseded messages; every reader
  accepts them there (and only there), a read of a removed sequence gets the next kept one, and
  ``read_from``'s iterator counts them in ``compacted``, not as a ``gap`` (a loss).
* Every valid stream name (1 to 255 bytes of UTF-8) has a directory: one whose escaped form
  would exceed 255 bytes is stored under a hashed directory name with the real name in its
  ``NAME`` file (``names.py``); the data directory's own ``LOCK`` is never a stream's name.
"""
from .config import JournalConfig
from .datadir import DataDir
from .errors import (CorruptionError, InvalidRecordError, JournalClosedError, JournalError,
                     JournalFullError, JournalLockedError, JournalNotFoundError,
                     KeyTooLongError, RecordTooLargeError)
from .journal import Journal
from .names import InvalidStreamNameError, list_streams, stream_dir_name, stream_from_dir_name
from .iterator import RecordIterator
from .reader import JournalReader
from .record import BatchRecord, Record, StreamStats
from .settings import StreamSettings

__all__ = [
    "StreamSettings",
    "DataDir", "Journal", "JournalReader", "JournalConfig", "Record", "BatchRecord", "StreamStats",
    "RecordIterator",
    "JournalError", "JournalLockedError", "JournalFullError", "RecordTooLargeError",
    "CorruptionError", "JournalNotFoundError", "JournalClosedError", "InvalidRecordError",
    "KeyTooLongError", "InvalidStreamNameError",
    "stream_dir_name", "stream_from_dir_name", "list_streams",
]
