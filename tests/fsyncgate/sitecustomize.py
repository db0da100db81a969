"""A disk whose directory fsyncs last as long as a test holds them (tests/test_isolation.py).

A broker started with this directory on its ``PYTHONPATH`` imports this module at start-up
(Python's ``sitecustomize``). With ``ZEPS_FSYNC_GATE`` naming a directory, ``os.fsync`` of a
*directory* made while the file ``hold`` exists there first appends the calling thread's id to
``started`` (so the test knows an fsync is held), then waits until the test removes ``hold``,
then does the real fsync: a disk as slow as the test wants, for as long as it wants, with no
clock in the test. Every other fsync, and every fsync while ``hold`` does not exist, is the real
one, untouched. Nothing of the broker is replaced.
"""
import os
import stat
import threading
import time

_GATE = os.environ.get("ZEPS_FSYNC_GATE")

if _GATE:
    _real_fsync = os.fsync
    _HOLD = os.path.join(_GATE, "hold")
    _STARTED = os.path.join(_GATE, "started")

    def _gated_fsync(fd):
        if os.path.exists(_HOLD):
            num = fd if isinstance(fd, int) else fd.fileno()
            if stat.S_ISDIR(os.fstat(num).st_mode):
                with open(_STARTED, "a") as f:
                    f.write(f"{threading.get_ident()}\n")
                while os.path.exists(_HOLD):
                    time.sleep(0.002)      # the disk is busy: the test decides for how long
        return _real_fsync(fd)

    os.fsync = _gated_fsync
