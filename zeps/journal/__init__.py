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
