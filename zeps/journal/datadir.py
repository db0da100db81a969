"""A broker's data directory: one sub-directory per stream, and a ``LOCK`` so that only one
broker uses it at a time (a second one fails at start with :class:`JournalLockedError` naming
the directory and the holder's pid, instead of two writers corrupting each other's streams)."""
from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from typing import Callable, Dict, List, Optional

from .config import JournalConfig
from .errors import JournalClosedError, JournalError
from .journal import Journal
from .lock import release_lock, take_lock
from .names import NAME_FILE, is_hashed, list_streams, stream_dir_name
from . import settings as stream_settings
from .reader import JournalReader
from .segment import fsync_dir
from .settings import StreamSettings


#: Prefix of the temporary directory a stream is made in before it is renamed into place.
CREATING = ".creating-"


class DataDir:
    """``DataDir(path, cfg)`` creates ``path`` if needed and takes ``path/LOCK``. Its journals
    take their timestamps from ``clock()`` (ns since the epoch)."""

    def __init__(self, path, config: Optional[JournalConfig] = None,
                 clock: Callable[[], int] = time.time_ns):
        self.path = os.fspath(path)
        self.config = config or JournalConfig()
        self._clock = clock
        try:
            os.makedirs(self.path, exist_ok=True)
        except FileExistsError:
            raise JournalError(f"data directory {self.path!r} exists and is not a directory") \
                from None
        except OSError as e:
            raise JournalError(f"cannot create data directory {self.path!r}: {e.strerror}") \
                from None
        if not os.path.isdir(self.path):
            raise JournalError(f"data directory {self.path!r} is not a directory")
        self._lock_fd = take_lock(self.path, "data")
        self.remove_leftovers()
        self._journals: Dict[str, Journal] = {}
        self._incarnations: Dict[str, int] = {}       # of the open journals' streams
        self._mutex = threading.Lock()
        self._closed = False

    def stream_path(self, name: str) -> str:
        """The directory of a stream (the name is encoded: it never escapes ``path``)."""
        return os.path.join(self.path, stream_dir_name(name))

    def journal(self, name: str) -> Journal:
        """The Journal of a stream, created on first use, cached. Thread-safe: the broker opens
        journals in a thread (the disk may be slow), while its loop uses the open ones; the
        lock is not held while a journal opens, so the loop never waits for that disk work.
        The caller opens a given stream from one thread at a time (its journal lock would
        refuse a second writer)."""
        with self._mutex:
            if self._closed:
                raise JournalClosedError(f"DataDir {self.path} is closed")
            j = self._journals.get(name)
        if j is not None:
            return j
        path = self.stream_path(name)
        own = stream_settings.read(path) if os.path.isdir(path) else None
        config = own.journal_config(self.config) if own is not None else self.config
        j = Journal.open(path, config, self._clock)
        try:
            if is_hashed(os.path.basename(path)):
                self._write_name(path, name)
            # a stream a first ATTACH made gets its incarnation here
            incarnation = stream_settings.ensure_incarnation(path)
            with self._mutex:
                if self._closed:
                    raise JournalClosedError(f"DataDir {self.path} is closed")
                self._journals[name] = j
                self._incarnations[name] = incarnation
        except BaseException:
            j.close()
            raise
        return j

    def is_open(self, name: str) -> bool:
        """True if the stream's journal is open (:meth:`journal` returns it at once)."""
        with self._mutex:
            return name in self._journals

    def incarnation(self, name: str) -> int:
        """The stream's incarnation (settings.py): chosen when it was made, another one if it is
        deleted and made again. Opens the stream (creating it) if it is not open."""
        with self._mutex:
            value = self._incarnations.get(name)
        if value is None:
            self.journal(name)
            with self._mutex:
                value = self._incarnations[name]
        return value

    @staticmethod
    def _write_name(path: str, name: str) -> None:
        """A long name's directory keeps the real name in ``NAME`` (see names.py)."""
        target = os.path.join(path, NAME_FILE)
        if os.path.exists(target):
            return
        tmp = target + ".tmp"
        with open(tmp, "wb") as f:
            f.write(name.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    # ------------------------------------------------------------------ stream life cycle
    def settings(self, name: str) -> StreamSettings:
        """A stream's own settings (all 0: the broker's defaults)."""
        return stream_settings.read(self.stream_path(name)) or StreamSettings()

    def create(self, name: str, settings: StreamSettings) -> bool:
        """Create a stream with its own settings; True if it was created, False if it existed
        with the same settings; :class:`JournalError` if it exists with others, or if its
        settings could not make a journal (nothing is left behind then).

        Atomic, and it opens nothing: the settings are checked first (the journal
        configuration they make must be valid), the directory is made under a hidden temporary
        name (``.creating-<dir>``: no stream name starts with a dot, so it is never listed),
        its ``SETTINGS.json`` (and ``NAME``) written and synced, then it is renamed into place
        and the data directory synced. A crash or a full disk on the way leaves either no
        stream or the whole one; a leftover temporary directory is removed when the data
        directory is next opened (:meth:`remove_leftovers`). The journal's files are made when
        the stream is first opened (the broker opens it on ATTACH, under its open-stream
        limit)."""
        path = self.stream_path(name)
        if self.has_stream(name):
            current = self.settings(name)
            if not current.same_limits(settings):
                raise JournalError(f"stream {name!r} exists with other settings")
            return False
        try:
            settings.journal_config(self.config)
        except ValueError as exc:
            raise JournalError(f"stream {name!r} cannot be created with these settings: {exc}") \
                from None
        tmp = os.path.join(self.path, CREATING + os.path.basename(path))
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            os.mkdir(tmp)
            stream_settings.write(tmp, settings)
            if is_hashed(os.path.basename(path)):
                self._write_name(tmp, name)
            fsync_dir(tmp)
            os.rename(tmp, path)
            fsync_dir(self.path)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return True

    def remove_leftovers(self) -> List[str]:
        """Remove the temporary directories of creations a crash interrupted; their names."""
        gone = []
        for entry in os.listdir(self.path):
            if entry.startswith(CREATING):
                shutil.rmtree(os.path.join(self.path, entry), ignore_errors=True)
                gone.append(entry)
        return gone

    def purge(self, name: str, upto: int) -> int:
        """Drop the messages up to ``upto``: no reader gets them again (the broker's, and a
        :class:`JournalReader`, which follows the settings' ``purged_to``), and the whole
        segments below are deleted. Returns the stream's first sequence now."""
        j = self.journal(name)
        upto = min(upto, j.last_seq)
        current = self.settings(name)
        if upto > current.purged_to:
            stream_settings.write(self.stream_path(name),
                                  dataclasses.replace(current, purged_to=upto))
        j.drop_before(upto + 1)
        return max(j.first_seq, self.settings(name).purged_to + 1)

    def delete(self, name: str) -> None:
        """Close and remove a stream with every message of it."""
        self.release(name)
        path = self.stream_path(name)
        if os.path.isdir(path):
            shutil.rmtree(path)

    def release(self, name: str) -> None:
        """Sync and close a stream's Journal and drop it from the cache (its descriptors are
        freed); the next :meth:`journal` call opens it again."""
        with self._mutex:
            j = self._journals.pop(name, None)
            self._incarnations.pop(name, None)
        if j is not None:
            try:
                j.sync()
            finally:
                j.close()

    def reader(self, name: str) -> JournalReader:
        """A read-only reader of an existing stream (JournalNotFoundError if absent)."""
        return JournalReader(self.stream_path(name), self.config)

    def open_journals(self) -> Dict[str, Journal]:
        """The journals opened so far (name -> Journal)."""
        with self._mutex:
            return dict(self._journals)

    def streams(self) -> List[str]:
        """Names of the streams present on disk."""
        return list_streams(self.path)

    def has_stream(self, name: str) -> bool:
        return os.path.isdir(self.stream_path(name))

    def sync_all(self) -> None:
        for j in self.open_journals().values():
            j.sync()

    def apply_retention(self, now_ns: Optional[int] = None) -> int:
        return sum(j.apply_retention(now_ns) for j in self.open_journals().values())

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            journals = list(self._journals.values())
            self._journals.clear()
        try:
            for j in journals:
                j.close()
        finally:
            fd, self._lock_fd = self._lock_fd, -1
            release_lock(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
