"""Work the broker's loop hands to gevent's thread pool (a journal opened, a sync, a
compaction waited for), this greenlet waiting: :func:`in_pool`."""
from __future__ import annotations

import time
from typing import Callable

import gevent


def timed(fn: Callable[[], object]) -> float:
    """Run ``fn`` and return how long it took, in seconds (run in a pool thread)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _returning(fn: Callable, args: tuple) -> tuple:
    """``fn(*args)`` (run in a pool thread) as ``(True, result)``, or ``(False, exception)``."""
    try:
        return True, fn(*args)
    except Exception as exc:                           # raised again by in_pool
        return False, exc


def in_pool(fn: Callable, *args):
    """``fn(*args)`` in gevent's thread pool, this greenlet waiting; its exception is raised
    here. A task that raises in the pool has its traceback printed on stderr by gevent's hub,
    raw, before the caller gets it: with ``--log-json``, lines of text among the JSON for every
    failed fsync, stream opening or compaction, which the caller logs anyway (found by
    review)."""
    ok, value = gevent.get_hub().threadpool.apply(_returning, (fn, args))
    if not ok:
        raise value
    return value
