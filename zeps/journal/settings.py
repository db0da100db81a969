"""A stream's own settings, kept with the stream: ``<stream dir>/SETTINGS.json``.

Streams made by the first PUBLISH (or ATTACH) use the broker's defaults and have no file. A
stream created with ``STREAM-CREATE`` / ``zeps stream create`` keeps what it was given (0 = the
broker's default): retention by bytes and by age, the largest message, the segment size. A purge
(``STREAM-PURGE``) records ``purged_to``: no sequence at or below it is served again, even while
the segment that holds it is still on disk (the segments wholly below it are deleted at once).

A *compacted* stream (``compact``, ``zeps stream create --compact``; issue 18 item 2) keeps at
least the latest message of every key: :mod:`.compaction` rewrites its sealed segments without
the messages a later one of the same key superseded, keeping a tombstone (an empty body: the key
was deleted) for ``delete_retention_ms`` (0: one day, as Kafka's ``delete.retention.ms``), and
runs once the bytes written since the last compaction are at least
``min_cleanable_dirty_ratio`` of the sealed segments' (0: one half, as Kafka's
``min.cleanable.dirty.ratio``). Its journal has the last-value index (:mod:`.lastvalue`).
Sequences never change: its readers skip the removed ones.

A stream created with ``key_index`` (``zeps stream create --key-index``, without ``--compact``)
keeps every message, as any stream, and has the last-value index too, whatever the broker's
``--key-index`` says: SNAPSHOT (and the CHP front end) serve it. A compacted stream always has
the index, so its settings never say ``key_index`` as well (one stream, one way to write it).

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
#: Kafka's defaults for ``delete.retention.ms`` and ``min.cleanable.dirty.ratio``.
DEFAULT_DELETE_RETENTION_MS = 86_400_000
DEFAULT_DIRTY_RATIO = 0.5
INCARNATION_FILE = "INCARNATION"


@dataclass(frozen=True)
class StreamSettings:
    retention_bytes: int = 0          # 0: the broker's default (``--retention-bytes``)
    retention_ms: int = 0             # 0: the broker's default (``--retention-age``)
    max_message: int = 0              # 0: the broker's ``--max-message``
    segment_bytes: int = 0            # 0: the broker's ``--segment-bytes``
    purged_to: int = 0                # messages up to this sequence were purged
    compact: bool = False             # a compacted stream (keeps the latest message per key)
    delete_retention_ms: int = 0      # 0: one day; how long compaction keeps a tombstone
    min_cleanable_dirty_ratio: float = 0.0   # 0: 0.5; compaction runs from this dirty ratio
    key_index: bool = False           # a last-value index without compaction (compact has one)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("compact", "key_index"):
                if not isinstance(v, bool):
                    raise ValueError(f"{f.name} must be true or false, not {v!r}")
            elif f.name == "min_cleanable_dirty_ratio":
                if (not isinstance(v, (int, float)) or isinstance(v, bool)
                        or not 0.0 <= v <= 1.0):
                    raise ValueError(f"min_cleanable_dirty_ratio must be a number from 0 to 1 "
                                     f"(0: the default, 0.5), not {v!r}")
            elif not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**64:
                raise ValueError(f"{f.name} must be an integer from 0, not {v!r}")
        if not self.compact and (self.delete_retention_ms or self.min_cleanable_dirty_ratio):
            raise ValueError("delete_retention_ms and min_cleanable_dirty_ratio are settings "
                             "of a compacted stream (compact)")
        if self.compact and self.key_index:
            raise ValueError("a compacted stream has a key index: key_index is for a stream "
                             "that is not compacted")

    @property
    def delete_retention_ns(self) -> int:
        """How long compaction keeps a tombstone, in ns (the default if 0)."""
        return (self.delete_retention_ms or DEFAULT_DELETE_RETENTION_MS) * 1_000_000

    @property
    def dirty_ratio(self) -> float:
        """The dirty ratio from which compaction runs (the default if 0)."""
        return self.min_cleanable_dirty_ratio or DEFAULT_DIRTY_RATIO

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
        if self.compact:
            changes["compact"] = changes["key_index"] = True
        if self.key_index:
            changes["key_index"] = True
        if self.max_message:
            changes["max_record_bytes"] = max(base.max_record_bytes, self.max_message + overhead)
        return dataclasses.replace(base, **changes) if changes else base


def read(stream_dir: str) -> Optional[StreamSettings]:
    """The stream's settings, or None when it has no file (broker defaults)."""
    path = os.path.join(stream_dir, FILE)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        values = {}
        for f in dataclasses.fields(StreamSettings):
            v = data.get(f.name, f.default)
            if f.name in ("compact", "key_index"):
                values[f.name] = v if isinstance(v, bool) else bool(int(v))
            elif f.name == "min_cleanable_dirty_ratio":
                values[f.name] = float(v)
            else:
                values[f.name] = int(v)
        return StreamSettings(**values)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise JournalError(f"unreadable stream settings {path}: {exc}") from None


def is_compact(stream_dir: str) -> bool:
    """Whether the stream's own settings make it a compacted stream (False if it has none, or
    if they cannot be read: reading it then reports any gap as corruption)."""
    try:
        own = read(stream_dir)
    except JournalError:
        return False
    return own is not None and own.compact


def has_key_index(stream_dir: str) -> bool:
    """Whether the stream's own settings give it the last-value index (``compact`` or
    ``key_index``); False if it has none or they cannot be read."""
    try:
        own = read(stream_dir)
    except JournalError:
        return False
    return own is not None and (own.compact or own.key_index)


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
