"""Journal errors. Every failure the journal reports is a :class:`JournalError` subclass whose
message says what happened and where (directory, file, byte offset), so the broker can log it
verbatim and an operator can act on it without reading code."""
from __future__ import annotations

from typing import Optional


class JournalError(Exception):
    """Base class of every error raised by :mod:`zeps.journal`."""


class JournalNotFoundError(JournalError, FileNotFoundError):
    """A stream or data directory that does not exist (or is not a directory)."""


class JournalLockedError(JournalError):
    """Another writer (or broker) holds the flock on this stream (or data) directory."""

    def __init__(self, message: str, path: str = "", holder_pid: Optional[int] = None):
        super().__init__(message)
        self.path = path
        self.holder_pid = holder_pid


class JournalFullError(JournalError):
    """A write failed (ENOSPC, EFBIG, EDQUOT, EIO...). The batch was rolled back: nothing of it
    is in the journal and the journal stays usable. ``cause`` is the OSError, ``errno`` its
    errno."""

    def __init__(self, message: str, cause: Optional[OSError] = None):
        super().__init__(message)
        self.cause = cause
        self.errno = cause.errno if cause is not None else None


class JournalClosedError(JournalError):
    """Operation on a closed Journal / JournalReader / DataDir."""


class InvalidRecordError(JournalError, ValueError):
    """A record that cannot be appended (bad key or body type, key too long...)."""


class RecordTooLargeError(InvalidRecordError):
    """A record whose DELIVER frame exceeds ``max_record_bytes``. Nothing of the batch was
    appended."""


class KeyTooLongError(InvalidRecordError):
    """A key longer than 255 bytes once UTF-8 encoded (ZEPS/1 string limit)."""


class CorruptionError(JournalError):
    """Bytes on disk that are not a valid record where a record must be (CRC mismatch, bad
    frame, unexpected sequence, truncated record in a sealed segment). ``path`` and ``offset``
    name the file and the byte position of the bad record."""

    def __init__(self, message: str, path: str = "", offset: int = -1):
        super().__init__(message)
        self.path = path
        self.offset = offset
