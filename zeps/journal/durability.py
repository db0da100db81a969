"""A journal's group commit: :meth:`Durability.sync`, and why a failed one is final.

Under ``fsync="interval"`` the broker calls :meth:`~Durability.sync` on its own timer, from a
worker thread while the owning thread appends: it captures the target sequence and duplicates
the fds to sync under the journal's ``_sync_lock``, syncs without the lock, and raises
``durable_seq`` monotonically.

**A failed sync is final for this opening.** When ``fdatasync`` fails (EIO, ENOSPC on some
filesystems), the kernel may have dropped the dirty pages it could not write, marking them
clean: a later ``fdatasync`` then succeeds without them (PostgreSQL's "fsyncgate", 2018). So
``durable_seq`` stays where it was, every later ``sync()`` raises the same error, and so does
every append (:meth:`Journal._write <zeps.journal.journal.Journal._write>`): what was written
since the last good sync is never confirmed by this opening of the stream, and nothing more is
written to it. Opening the stream again (a broker restart) recovers what the files hold. (Before,
the next successful sync confirmed the records whose sync had failed; found by review.)

A mixin of :class:`~zeps.journal.Journal`, which owns the state it uses.
"""
from __future__ import annotations

import os

from .errors import JournalError


class Durability:
    """:meth:`sync` (see the module docs)."""

    __slots__ = ()

    @property
    def sync_error(self):
        """Why a sync of this opening failed (final: the module docs), or None."""
        return self._sync_error

    def _sync_failed(self, what: str, e: OSError) -> str:
        """``what`` failed with ``e``: final for this opening (the module docs). Returns why,
        kept as :attr:`sync_error`."""
        self._sync_error = (f"{what} failed: {e.strerror}; records after {self._durable_seq} "
                            f"are not known durable, and the stream takes no more until it is "
                            f"opened again")
        return self._sync_error

    def sync(self) -> int:
        """``fdatasync`` what is written and return ``durable_seq``. Safe to call from a worker
        thread while the owning thread appends."""
        with self._sync_lock:
            if self._closed:
                return self._durable_seq
            if self._sync_error is not None:
                raise JournalError(self._sync_error)
            target = self._written_seq
            segs = self._unsynced + [self._active]
            self._unsynced = []
            fds = []
            try:
                for s in segs:
                    if s.fd >= 0:
                        fds.append(os.dup(s.fd))
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
        try:
            for fd in fds:
                os.fdatasync(fd)
        except OSError as e:
            raise JournalError(self._sync_failed(f"fdatasync in {self._dir}", e)) from None
        finally:
            for fd in fds:
                os.close(fd)
        with self._sync_lock:
            if target > self._durable_seq:
                self._durable_seq = target
            return self._durable_seq
