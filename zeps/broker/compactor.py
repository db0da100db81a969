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
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Optional

from zeps.journal import compaction


class CompactionFailed(RuntimeError):
    """The compaction's process failed; the text says how."""


def run(job) -> Optional[compaction.Result]:
    """Compact ``job``'s stream in a child process if its dirty ratio says so (blocking): None
    if it was not due, else what it did."""
    arg = json.dumps({"path": job.path, "sealed": list(job.sealed), "interval": job.interval,
                      "fsync": job.fsync})
    proc = subprocess.run([sys.executable, "-m", "zeps.broker.compactor", arg],
                          stdin=subprocess.DEVNULL, capture_output=True, check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        how = (f"exit status {proc.returncode}" if proc.returncode > 0
               else f"signal {-proc.returncode}")
        raise CompactionFailed(f"the compaction process ended with {how}"
                               + (f": {err[-1]}" if err else ""))
    data = json.loads(proc.stdout.decode("utf-8"))
    return None if data is None else compaction.Result(**data)


def main(argv=None) -> int:
    arg = json.loads((argv if argv is not None else sys.argv[1:])[0])
    result = compaction.run(arg["path"], arg["sealed"], interval=arg["interval"],
                            fsync=arg["fsync"])
    print(json.dumps(None if result is None else dataclasses.asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
