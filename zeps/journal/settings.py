"""A stream's own settings, kept with the stream: ``<stream dir>/SETTINGS.json``.

Streams made by the first PUBLISH (or ATTACH) use the broker's defaults and have no file. A
stream created with ``STREAM-CREATE`` / ``zeps stream create`` keeps what it was given (0 = the
broker's default): retention by bytes and by age, the largest message, the segment size. A purge
(``STREAM-PURGE``) records ``purged_to``: no sequence at or below it is served again, even while
the segment that holds it is still on disk (the segments wholly below it are deleted at once).

The file is replaced atomically (write, fsync, rename), so it is either the old or the new one.

Every stream also has an *incarnation* (``<stream dir>/INCARNATION``: 16 hex digits), random and
never 0, written when the stream is made (by :func:`write` for a created one, by the data
directory when a first ATTACH makes one) and never changed: a stream deleted and created again
under the same name has another one, so a client can tell it is not the stream it knew (as
Kafka's topic ids; STREAM-ID in docs/protocol.md).
"""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
from dataclasses import dataclass
from typing import Optional

from .config import JournalConfig
from .errors import JournalError

FILE = "SETTINGS.json"
INCARNATION_FILE = "INCARNATION"


@dataclass(frozen=True)
class StreamSettings:
    retention_bytes: int = 0          # 0: the broker's default (``--retention-bytes``)
    retention_ms: int = 0             # 0: the broker's default (``--retention-age``)
    max_message: int = 0              # 0: the broker's ``--max-message``
    segment_bytes: int = 0            # 0: the broker's ``--segment-bytes``
    purged_to: int = 0                # messages up to this sequence were purged

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**64:
                raise ValueError(f"{f.name} must be an integer from 0, not {v!r}")

    def same_limits(self, other: "StreamSettings") -> bool:
        """The settings a creator chooses are equal (``purged_to`` is the stream's state)."""
        return dataclasses.replace(self, purged_to=0) == dataclasses.replace(other, purged_to=0)

    def journal_config(self, base: JournalConfig, overhead: int = 512) -> JournalConfig:
        """The broker's journal configuration with this stream's own settings applied."""
        changes = {}
        if self.retention_bytes:
            changes["retention_bytes"] = self.retention_bytes
        if self.retention_ms:
            changes["retention_ms"] = self.retention_ms
        if self.segment_bytes:
            changes["segment_bytes"] = self.segment_bytes
        if self.max_message:
            changes["max_record_bytes"] = max(base.max_record_bytes, self.max_message + overhead)
        return dataclasses.replace(base, **changes) if changes else base


def read(stream_dir: str) -> Optional[StreamSettings]:
    """The stream's settings, or None when it has no file (broker defaults)."""
    path = os.path.join(stream_dir, FILE)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
        return StreamSettings(**{k: int(data.get(k, 0)) for k in
                                 (f.name for f in dataclasses.fields(StreamSettings))})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise JournalError(f"unreadable stream settings {path}: {exc}") from None


def write(stream_dir: str, settings: StreamSettings) -> None:
    path = os.path.join(stream_dir, FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps(dataclasses.asdict(settings), sort_keys=True).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    ensure_incarnation(stream_dir)


def read_incarnation(stream_dir: str) -> Optional[int]:
    """The stream's incarnation, or None when it has none yet (made before they existed, or a
    crash between making its directory and writing it)."""
    path = os.path.join(stream_dir, INCARNATION_FILE)
    try:
        with open(path, "rb") as f:
            text = f.read(64)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JournalError(f"unreadable stream incarnation {path}: {exc}") from None
    try:
        value = int(text.strip(), 16)
    except ValueError:
        value = 0
    if not 0 < value < 2**64:
        raise JournalError(f"unreadable stream incarnation {path}: {text[:20]!r}")
    return value


def ensure_incarnation(stream_dir: str) -> int:
    """The stream's incarnation, chosen now (random, never 0) and written atomically (write,
    fsync, rename, directory fsync) if it has none."""
    value = read_incarnation(stream_dir)
    if value is not None:
        return value
    value = secrets.randbits(64) or 1
    path = os.path.join(stream_dir, INCARNATION_FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(f"{value:016x}\n".encode("ascii"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(stream_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return value
