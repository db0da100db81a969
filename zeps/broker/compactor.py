"""The broker shell's compaction runner (issue 18, item 2): :func:`run` runs
:func:`zeps.journal.compaction.run` for a :class:`~zeps.broker.compacting.CompactionJob` in a
child process (``python -m zeps.broker.compactor``) and returns its result; the shell calls it
in its thread pool, whose thread waits for the child without the GIL.

Why a process, not the thread itself: the rewrite is mostly Python work (walking records,
deciding, building indexes), and a thread of the broker's process shares its GIL, so the loop
waited up to a switch interval each time it wanted it back. Measured with
``python -m bench.bench_compaction --messages 100000 --seconds 3`` (a calm pair, one message
every 2 ms, on a 2-core machine): the pair's p99 went from 0.56 ms to 12.8 ms while a thread
compacted; a process leaves it near its calm figure (docs/operations.md, Compacted streams).

The child takes the compaction lock and is crash-safe as the journal's compaction is at every
step (a broker killed meanwhile leaves the child to finish or to be recovered from). Its
failure (an exception: exit status 1 and the text on stderr; a signal) is raised here as
:class:`CompactionFailed`, which the core logs; the next compaction recovers what it left.

A broker that stops (SIGTERM, SIGINT) kills the child and waits for it (:meth:`Runner.stop`):
it went on rewriting the data directory after the broker had exited and released it, while the
directory was backed up or restored, or another broker opened it (found by review). Killed, it
leaves what a crash leaves, which the next compaction, or the next opening of the stream,
recovers.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from typing import Optional

from zeps.journal import compaction


class CompactionFailed(RuntimeError):
    """The compaction's process failed; the text says how."""


class Runner:
    """The broker's compaction processes: :meth:`run` in a pool thread, :meth:`stop` from the
    loop when the broker stops (no new child starts after it; the one running is killed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()      # a child is started, or stop() comes first
        self._proc: Optional[subprocess.Popen] = None
        self._stopped = False

    def run(self, job) -> Optional[compaction.Result]:
        """Compact ``job``'s stream in a child process if its dirty ratio says so (blocking):
        None if it was not due, else what it did."""
        arg = json.dumps({"path": job.path, "sealed": list(job.sealed),
                          "interval": job.interval, "fsync": job.fsync})
        with self._lock:
            if self._stopped:
                raise CompactionFailed("the broker is stopping")
            proc = self._proc = subprocess.Popen(
                [sys.executable, "-m", "zeps.broker.compactor", arg], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate()
        finally:
            with self._lock:
                self._proc = None
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            how = (f"exit status {proc.returncode}" if proc.returncode > 0
                   else f"signal {-proc.returncode}")
            raise CompactionFailed(f"the compaction process ended with {how}"
                                   + (f": {lines[-1]}" if lines else ""))
        data = json.loads(out.decode("utf-8"))
        return None if data is None else compaction.Result(**data)

    def stop(self) -> bool:
        """No compaction starts from now on; the one running, if any, is killed (SIGKILL: what
        the crash tests do at every step). True if one was. The thread of its :meth:`run`
        reaps it."""
        with self._lock:
            self._stopped = True
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return False
            proc.kill()
            return True


def main(argv=None) -> int:
    arg = json.loads((argv if argv is not None else sys.argv[1:])[0])
    result = compaction.run(arg["path"], arg["sealed"], interval=arg["interval"],
                            fsync=arg["fsync"])
    print(json.dumps(None if result is None else dataclasses.asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
