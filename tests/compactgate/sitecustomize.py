"""A compaction that lasts as long as a test holds it (tests/test_compaction_broker.py).

A broker started with this directory on its ``PYTHONPATH`` imports this module at start-up
(Python's ``sitecustomize``), and so does each compaction process it starts (they inherit its
environment). With ``ZEPS_COMPACT_GATE`` naming a directory, in a compaction process only (its
``__main__`` is ``zeps.broker.compactor``), ``os.fdatasync`` while the file ``hold`` exists there
first writes the process's id to ``started`` (so the test knows a compaction is under way, and
which process runs it), then waits until the test removes ``hold``, then does the real
``fdatasync``. The broker's own syncs, and every sync while ``hold`` does not exist, are the real
ones, untouched. Nothing of the broker is replaced.
"""
import os
import sys
import time

_GATE = os.environ.get("ZEPS_COMPACT_GATE")

if _GATE:
    _real_fdatasync = os.fdatasync
    _HOLD = os.path.join(_GATE, "hold")
    _STARTED = os.path.join(_GATE, "started")

    def _in_compactor():
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        return getattr(spec, "name", None) == "zeps.broker.compactor"

    def _gated_fdatasync(fd):
        if os.path.exists(_HOLD) and _in_compactor():
            with open(_STARTED + ".tmp", "w") as f:
                f.write(f"{os.getpid()}\n")
            os.replace(_STARTED + ".tmp", _STARTED)
            while os.path.exists(_HOLD):
                time.sleep(0.002)      # the compaction is under way: the test decides how long
        return _real_fdatasync(fd)

    os.fdatasync = _gated_fdatasync
