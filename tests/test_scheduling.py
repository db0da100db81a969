"""ZeroMQ's I/O thread of the broker runs under SCHED_BATCH so that it does not preempt the
loop (zeps.broker.scheduling, issue 20); the loop itself keeps the normal policy. What a user
checks: each thread's policy, as the system reports it (the latency it buys is a benchmark,
docs/benchmarks.md)."""
import os
import sys
import threading
from pathlib import Path

import pytest

from zeps.broker import scheduling

from .rawclient import RawClient

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="SCHED_BATCH and /proc/<pid>/task are Linux's")


def _policies(pid: int) -> dict:
    """Each thread's name (several may share one) -> the set of their policies."""
    out: dict = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        policy = os.sched_getscheduler(int(tid))
        out.setdefault("loop" if int(tid) == pid else name, set()).add(policy)
    return out


def _machine_allows_batch() -> bool:
    """Whether this machine lets a thread of ours switch to SCHED_BATCH, asked on a thread of
    its own (independently of the code under test)."""
    if not hasattr(os, "SCHED_BATCH"):
        return False
    ok = []

    def attempt():
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=attempt)
    t.start()
    t.join()
    return bool(ok)


needs_batch = pytest.mark.skipif(not _machine_allows_batch(),
                                 reason="this machine refuses SCHED_BATCH (a sandbox rule): "
                                        "the broker keeps the normal policy there")


def test_the_probe_says_what_the_machine_allows_and_leaves_the_thread_as_it_was():
    before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    assert scheduling.batch_allowed() is _machine_allows_batch()
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before


def _io_threads(policies: dict) -> set:
    io = [p for name, p in policies.items() if name.startswith("ZMQbg/IO")]
    assert io, f"no ZeroMQ I/O thread among {sorted(policies)}"
    return set().union(*io)


@needs_batch
def test_the_brokers_io_thread_yields_and_its_loop_does_not(broker):
    RawClient(broker.endpoint).attach("sched").close()    # the broker serves
    policies = _policies(broker.proc.pid)
    assert _io_threads(policies) == {os.SCHED_BATCH}
    assert policies["loop"] == {os.SCHED_OTHER}
    assert "io_scheduling=batch" in broker.log()          # what the operator reads


def test_io_scheduling_normal_keeps_the_systems_policy(start_broker, tmp_path):
    b = start_broker(tmp_path / "data", "--io-scheduling", "normal")
    RawClient(b.endpoint).attach("sched").close()
    policies = _policies(b.proc.pid)
    assert _io_threads(policies) == {os.SCHED_OTHER}
    assert policies["loop"] == {os.SCHED_OTHER}
    assert "io_scheduling=normal" in b.log()


def test_an_unknown_io_scheduling_is_refused_before_anything_starts():
    from zeps.broker.core import CoreConfig
    from zeps.broker.server import Broker
    with pytest.raises(ValueError, match="io_scheduling must be one of"):
        Broker("tcp://127.0.0.1:*", None, CoreConfig(), io_scheduling="fast")
