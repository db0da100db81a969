"""A disk whose data syncs fail while a test says so (tests/test_broker.py).

A broker started with this directory on its ``PYTHONPATH`` imports this module at start-up
(Python's ``sitecustomize``). With ``ZEPS_SYNC_FAIL`` naming a file, ``os.fdatasync`` fails with
EIO, as a failing disk's does, while that file exists; otherwise, and without the variable, it
is the real one, untouched. A real failed sync needs a device that fails (a loop device on a
full disk, device-mapper's error target): root-only mounts the tests do not make. Nothing of
the broker is replaced.
"""
import errno
import os

_FLAG = os.environ.get("ZEPS_SYNC_FAIL")

if _FLAG:
    _real_fdatasync = os.fdatasync

    def _failing_fdatasync(fd):
        if os.path.exists(_FLAG):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return _real_fdatasync(fd)

    os.fdatasync = _failing_fdatasync
