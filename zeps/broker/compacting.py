"""Compacted streams in the broker core (issue 18, item 2): when to compact, and what to do
once a compaction is done. Pure, like the rest of the core: it compacts nothing itself.

Every ``compaction_check`` seconds (:class:`~zeps.broker.timers.Timers`) the core looks at its
open compacted streams in turn, a slice of the open streams per round
(:mod:`zeps.broker.sweeps`), for one whose sealed segments changed since it last looked (a
segment was sealed: new dirty bytes; nothing else can make the dirty ratio grow) and names it
in the round's ``to_compact`` as a :class:`CompactionJob`, one at a time. The shell runs
:func:`zeps.journal.compaction.run` over it off the loop (in a child process,
:mod:`zeps.broker.compactor`, waited for in gevent's thread pool), which compacts only if the
stream's dirty ratio says so, and hands the result back to
:meth:`Compacting.compacted` on the loop: the journal is told which segments were rewritten
(``reload_segments``; reads under way keep the old files, later ones open the new ones).

While a compaction runs on a stream, the things that delete its segments wait: its retention
pass is skipped (the next one does it), STREAM-PURGE and STREAM-DELETE are refused with "being
compacted: retry" (they would delete files the compaction is rewriting, or a rewrite could put
back a segment they deleted). The core's harness (tests/core_harness.py) runs the jobs at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .session import Session


@dataclass(frozen=True)
class CompactionJob:
    """What the shell runs off the loop: ``compaction.run(path, sealed, interval=, fsync=)``."""
    stream: str
    path: str                    # the stream's directory
    sealed: Tuple[int, ...]      # the first sequences of its sealed segments, at the time
    interval: int                # the journal's index interval
    fsync: bool


class Compacting:
    """The core's side of compaction (see the module docstring). State is made on first use."""

    #: The job under way (at most one), or None.
    compacting: Optional[CompactionJob] = None
    #: Compactions done, and the bytes they removed, since start.
    compactions = 0
    compaction_bytes_removed = 0

    def _compaction_state(self) -> Tuple[Dict[str, Tuple[int, int]], List[CompactionJob]]:
        st = self.__dict__.get("_compaction")
        if st is None:
            st = self.__dict__["_compaction"] = ({}, [])
        return st

    def check_compaction(self, now: float) -> None:
        """Name the next compacted stream of the slice due whose sealed segments changed since
        it was last looked at (the timer calls it; :meth:`take_compactions` hands the job to the
        shell). While a compaction runs, the slice is passed over: its streams wait for the
        next pass, as they did for the next check."""
        names = self._compaction_sweep.take(now, self.streams.keys)
        if self.compacting is not None:
            return
        looked, jobs = self._compaction_state()
        streams = self.streams
        for name in names:
            st = streams.get(name)
            if st is None or not st.settings.compact or name in self.opening:
                continue
            seqs = st.journal.segment_seqs()
            sealed = tuple(seqs[:-1])
            mark = (len(sealed), sealed[-1] if sealed else 0)
            if not sealed or looked.get(name) == mark:
                continue
            looked[name] = mark
            cfg = st.journal.config
            self.compacting = CompactionJob(name, self.datadir.stream_path(name), sealed,
                                            cfg.index_interval_bytes, cfg.fsync != "never")
            jobs.append(self.compacting)
            return

    def take_compactions(self) -> Tuple[CompactionJob, ...]:
        """The jobs named since the last round (emptied)."""
        _, jobs = self._compaction_state()
        if not jobs:
            return ()
        out = tuple(jobs)
        jobs.clear()
        return out

    def compacted(self, job: CompactionJob, result, error: Optional[BaseException]) -> None:
        """The shell ran ``job``: ``result`` is :func:`zeps.journal.compaction.run`'s (None: it
        was not due), ``error`` what it raised."""
        if self.compacting is job:
            self.compacting = None
        if error is not None:
            self.log("compaction_failed", stream=job.stream, error=f"{type(error).__name__}: "
                     f"{error}")
            return
        if result is None:
            return
        st = self.streams.get(job.stream)
        if st is not None and result.segments:
            try:
                st.journal.reload_segments(result.segments)
            except Exception as exc:      # a closed journal opens the new files anyway
                self.log("compaction_reload_failed", stream=job.stream, error=str(exc))
        self.compactions += 1
        self.compaction_bytes_removed += max(0, result.bytes_before - result.bytes_after)
        self.log("compacted", stream=job.stream, segments=len(result.segments),
                 bytes_before=result.bytes_before, bytes_after=result.bytes_after,
                 removed=result.removed, tombstones_removed=result.tombstones_removed,
                 keys=result.keys)

    def _being_compacted(self, s: Session, name: str) -> bool:
        """STREAM-PURGE and STREAM-DELETE wait for a compaction of the stream to end."""
        job = self.compacting
        if job is None or job.stream != name:
            return False
        self._invalid(s.identity, f"stream {name!r} is being compacted: retry")
        return True

    def _forget_compaction(self, name: str) -> None:
        self._compaction_state()[0].pop(name, None)
