"""The broker's helper threads yield the CPU to its loop (issue 20).

The loop (:mod:`zeps.broker.server`) does each message's work from its read to its DELIVER in one
greenlet. ZeroMQ's I/O thread, which moves the bytes to and from the connections, wakes at every
message the loop sends. On Linux a thread that wakes takes the CPU from the one running
(wake-up preemption); on a small machine that was the loop, in the middle of its round, about
every other message at 10k msg/s (the loop's involuntary context switches, ``/proc``), and the
round's steps took several times their CPU time (``python -m bench.bench_stages``: the send and
the journal append). Under ``SCHED_BATCH`` (a policy of the normal class: the same share of the
CPU, no privileges needed) a waking thread does not preempt: the I/O thread runs on a free CPU,
or when the loop waits, at the latest at the scheduler's next tick, and the round runs through.

libzmq applies the policy when it starts a context's I/O threads (at its first socket), and
aborts the process if the system refuses it, so :func:`batch_allowed` first tries the same call.
A broker whose operator gave it a policy of its own (``chrt``) keeps it in every thread.
"""
from __future__ import annotations

import os
from typing import Optional

import zmq

#: The policy, where the system has it (Linux); None elsewhere.
SCHED_BATCH: Optional[int] = getattr(os, "SCHED_BATCH", None)
#: The choices of ``zeps broker --io-scheduling``.
POLICIES = ("batch", "normal")


def batch_allowed() -> bool:
    """Whether this thread runs under the normal policy and may switch to ``SCHED_BATCH``
    (Linux, and no sandbox rule against ``sched_setscheduler``): tried on this thread, which
    is then switched back."""
    if SCHED_BATCH is None or not hasattr(os, "sched_setscheduler"):
        return False
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return False
        normal = os.sched_getparam(0)
        os.sched_setscheduler(0, SCHED_BATCH, os.sched_param(0))
    except OSError:
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, normal)
    return True


def yield_io_threads(ctx: zmq.Context) -> bool:
    """Have ``ctx``'s I/O threads run under ``SCHED_BATCH``. Effective only before the
    context's first socket (libzmq starts its threads then). False where the system does not
    allow it (the threads keep the normal policy)."""
    if not batch_allowed():
        return False
    try:
        ctx.set(zmq.THREAD_SCHED_POLICY, SCHED_BATCH)
    except (zmq.ZMQError, AttributeError):        # a libzmq without the option
        return False
    return True
