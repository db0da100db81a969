"""Journal configuration.

Decisions:

* ``segment_bytes`` (256 MiB): a segment is the unit of retention and of recovery; big enough
  that a stream has few files, small enough that retention frees space in useful steps. A
  batch is never split across segments (it is one ``write()``), so a segment can exceed
  ``segment_bytes`` by at most one batch.
* ``index_interval_bytes`` (4 KiB): one sparse-index entry per ~4 KiB of log, so a lookup
  reads at most ~4 KiB (plus one record) after its binary search.
* ``fsync`` = ``"interval"`` by default: the broker calls :meth:`Journal.sync` on its own
  timer (``--fsync-interval-ms``, group commit) and confirms publishers up to ``durable_seq``.
  The journal has no timer.
* retention is off unless ``retention_bytes`` / ``retention_ms`` are set.
* ``max_producers`` (10,000): producer ids whose last sequence the journal keeps (least
  recently used dropped beyond it, :mod:`.producers`); a producer that retries after that many
  others published since its last record is not deduplicated.
* ``producer_max_age_ms`` (one day, as Kafka's ``producer.id.expiration.ms``): a producer id
  whose last record is older than that is forgotten too (None: only ``max_producers`` bounds
  them); a retry after that long is not deduplicated.
* ``snapshot_interval_bytes`` (8 MiB): the producer state is snapshotted every that many bytes
  of log (and at each roll and close), so opening after a crash applies at most that many
  bytes of records to rebuild it.
* ``compact`` (a compacted stream, :mod:`.compaction`): its sealed segments may have gaps
  between sequences (records removed by compaction), which its readers accept; it implies
  ``key_index``. A stream's ``SETTINGS.json`` saying ``compact`` makes it so whatever the
  configuration says (:mod:`.settings`).
* ``key_index`` (off by default: its memory grows with the number of distinct keys, about 130
  bytes each): the writer keeps the last-value index (:mod:`.lastvalue`), for
  :meth:`Journal.latest <zeps.journal.Journal.latest>` and
  :meth:`Journal.snapshot <zeps.journal.Journal.snapshot>`.
* ``max_record_bytes`` is at most 2^30-1: the record's length field has 30 bits for the frame
  and its headers (its top bits flag a producer extension and a headers extension).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .record import MAX_FRAME

FSYNC_POLICIES = ("always", "interval", "never")


@dataclass(frozen=True)
class JournalConfig:
    segment_bytes: int = 256 << 20
    index_interval_bytes: int = 4096
    fsync: str = "interval"
    max_record_bytes: int = 16 << 20
    retention_bytes: Optional[int] = None
    retention_ms: Optional[int] = None
    max_producers: int = 10_000
    snapshot_interval_bytes: int = 8 << 20
    producer_max_age_ms: Optional[int] = 24 * 3600 * 1000
    compact: bool = False
    key_index: bool = False

    def __post_init__(self) -> None:
        for name in ("compact", "key_index"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, not {getattr(self, name)!r}")
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, not {self.fsync!r}")
        for name in ("segment_bytes", "index_interval_bytes", "max_record_bytes",
                     "max_producers", "snapshot_interval_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if self.max_record_bytes > MAX_FRAME:
            raise ValueError(f"max_record_bytes must be at most {MAX_FRAME} (the record "
                             f"length's 30 frame-length bits)")
        v = self.producer_max_age_ms
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise ValueError(f"producer_max_age_ms must be None or a positive integer, not {v!r}")
        for name in ("retention_bytes", "retention_ms"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{name} must be None or an integer >= 0, not {v!r}")
