"""ZEPS journal: a segmented, CRC-checked, indexed append-only log per stream.

See docs/architecture.md ("Journal contract") for the on-disk format and the API the broker,
the replay tool and the Spark reader rely on. Module map:

* :mod:`.config`  - :class:`JournalConfig`
* :mod:`.errors`  - :class:`JournalError` and subclasses
* :mod:`.names`   - stream name <-> directory name
* :mod:`.record`  - record format, :class:`Record`, encoding and parsing
* :mod:`.index`   - sparse offset index and time index files
* :mod:`.segment` - one segment: log + indexes, block reads, recovery
* :mod:`.reader`  - read logic shared by writer and readers, :class:`JournalReader`
* :mod:`.journal` - :class:`Journal`, the one writer of a stream
* :mod:`.datadir` - :class:`DataDir`, the broker's data directory

Decisions and known limits (details in each module's docstring):

* The log is the truth; indexes are rebuilt from it whenever missing, short or wrong, and are
  never fsync'ed. Recovery (writer open) verifies the last segment from its last index entry and
  truncates at the first short/bad record; older segments are checked lazily when read, and a bad
  record there raises :class:`CorruptionError` (file, byte offset) after the good records before
  it were returned.
* Readers never take a lock and never write; they treat a bad/short record past the last index
  entry of the last segment as "not written yet" (a torn tail the writer will cut).
* A failed batch is truncated away. A reader in *another* process that happened to read the
  failed batch's first whole records in the instant between the failed ``write()`` and the
  truncation could have seen sequences that are later reused; the writer's own reads never can.
  (Closing that window would need a commit marker in the format, which is fixed by the contract.)
* At most ``reader.MAX_OPEN_SEALED`` (32) sealed segments per Journal/JournalReader keep their
  files open (LRU), so long replays and long-running followers do not run out of descriptors.
* A stream name whose encoded directory name would exceed 255 bytes is refused
  (:class:`InvalidStreamNameError`), never shortened.
"""
from .config import JournalConfig
from .datadir import DataDir
from .errors import (CorruptionError, InvalidRecordError, JournalClosedError, JournalError,
                     JournalFullError, JournalLockedError, JournalNotFoundError,
                     KeyTooLongError, RecordTooLargeError)
from .journal import Journal
from .names import InvalidStreamNameError, list_streams, stream_dir_name, stream_from_dir_name
from .reader import JournalReader, RecordIterator
from .record import Record, StreamStats

__all__ = [
    "DataDir", "Journal", "JournalReader", "JournalConfig", "Record", "StreamStats",
    "RecordIterator",
    "JournalError", "JournalLockedError", "JournalFullError", "RecordTooLargeError",
    "CorruptionError", "JournalNotFoundError", "JournalClosedError", "InvalidRecordError",
    "KeyTooLongError", "InvalidStreamNameError",
    "stream_dir_name", "stream_from_dir_name", "list_streams",
]
