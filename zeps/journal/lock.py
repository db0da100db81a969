"""The one-writer lock of a stream directory (and the one-broker lock of a data directory).

``flock(LOCK_EX | LOCK_NB)`` on ``<dir>/LOCK``, holder pid written into it; the kernel drops the
lock when the process dies, so there is no stale lock to clean up. A second writer fails at once
with :class:`JournalLockedError` naming the directory and the holder's pid.
"""
from __future__ import annotations

import errno as _errno
import fcntl
import os

from .errors import JournalError, JournalLockedError, JournalNotFoundError

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def take_lock(dirpath: str, what: str) -> int:
    """flock ``dirpath/LOCK`` (non-blocking) and write our pid into it. Returns the fd.
    ``what`` is ``"stream"`` or ``"data"`` (for the error message)."""
    path = os.path.join(dirpath, "LOCK")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
    except FileNotFoundError:
        raise JournalNotFoundError(f"{what} directory {dirpath!r} does not exist") from None
    except PermissionError as e:
        raise JournalError(f"cannot open lock file {path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = None
        try:
            txt = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            holder = int(txt) if txt.isdigit() else None
        except OSError:
            pass
        os.close(fd)
        if e.errno in (_errno.EWOULDBLOCK, _errno.EAGAIN, _errno.EACCES):
            who = f"process {holder}" if holder else "another process"
            raise JournalLockedError(
                f"{what} directory {dirpath} is locked by {who} ({path}); only one "
                f"{'writer' if what == 'stream' else 'broker'} may use it at a time",
                dirpath, holder) from None
        raise JournalError(f"cannot lock {path}: {e.strerror}") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass     # the pid is informative only
    return fd


def release_lock(fd: int) -> None:
    """Release and close a lock taken by :func:`take_lock` (no-op for -1)."""
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
