"""Crashes while a durable consumer's file is written (zeps.journal.consumers, issue 19), each a
real SIGKILL of a child process: a child saving states in a loop, killed at a few points, and a
child killed just before and just after the rename that replaces the file. What load_all
returns afterwards is always the previous state or the new one, whole, never a torn one; a
leftover temporary file is removed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from zeps.journal import consumers as cs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The states written: the k-th has a size of its own (a torn one cannot pass for another).
STATES = r"""
from zeps.journal.consumers import ConsumerConfig, ConsumerState
def config():
    return ConsumerConfig("orders", patterns=("a.", "b."), max_deliver=5)
def make(k):
    n = 200 + (k * 37) % 3000
    return ConsumerState(next=10**6 + k, outstanding={k + 3 * i: i % 7 for i in range(n)},
                         skipped=k % 5, counters={"acked": k, "redelivered": 2 * k,
                                                  "dead_lettered": 0, "bad_acks": 1})
"""
namespace: dict = {}
exec(STATES, namespace)   # noqa: S102 - the same code as the child's, defined once
make, config = namespace["make"], namespace["config"]

CHILD = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from zeps.journal import consumers
""" + STATES + r"""
stream, mode, k = sys.argv[2], sys.argv[3], int(sys.argv[4])
if mode != "loop":                  # kill ourselves at the rename of the save of state k
    step = mode
    real = os.replace
    def replace(src, dst):
        if step == "after-rename":
            real(src, dst)
        os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
    consumers.save(stream, config(), make(k))
    raise SystemExit("not killed")
while True:
    consumers.save(stream, config(), make(k))
    print(k, flush=True)
    k += 1
"""


def child(stream, mode, k):
    return subprocess.Popen([sys.executable, "-c", CHILD, REPO, str(stream), mode, str(k)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def loaded_k(stream):
    """The k of the state on disk (checking it is exactly make(k)), and the other consumer."""
    got = cs.load_all(stream)
    assert set(got) == {"orders", "other"}
    c, s = got["orders"]
    assert c == config()
    k = s.next - 10**6
    assert s == make(k)
    assert got["other"] == (cs.ConsumerConfig("other"), make(0))
    return k


def test_sigkill_while_saving_in_a_loop_leaves_the_previous_or_the_new_state(tmp_path):
    """A child saves states k, k+1, ... (each whole, fsynced) and prints k after each; it is
    SIGKILLed once it printed a few more, three times. The file then holds the last state it
    printed or the one after (being written at the kill), exactly; no temporary file stays."""
    cs.save(tmp_path, cs.ConsumerConfig("other"), make(0))
    cs.save(tmp_path, config(), make(0))
    k = 0
    for more in (1, 7, 30):
        p = child(tmp_path, "loop", k + 1)
        last = k
        deadline = time.monotonic() + 60
        while last < k + more:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            last = int(line)
            assert time.monotonic() < deadline
        os.kill(p.pid, signal.SIGKILL)
        rest = p.stdout.read().split()
        p.wait()
        p.stdout.close()
        p.stderr.close()
        assert p.returncode == -signal.SIGKILL
        if rest:
            last = int(rest[-1])
        k = loaded_k(tmp_path)
        assert k in (last, last + 1)
        assert sorted(os.listdir(cs.consumers_dir(tmp_path))) == ["orders.json", "other.json"]


@pytest.mark.parametrize("step", ["before-rename", "after-rename"])
def test_sigkill_at_the_rename(tmp_path, step):
    """Killed with the new state whole in the temporary file, just before the rename: the old
    state is loaded and the temporary file removed. Just after it: the new state is loaded."""
    cs.save(tmp_path, cs.ConsumerConfig("other"), make(0))
    cs.save(tmp_path, config(), make(4))
    p = subprocess.run([sys.executable, "-c", CHILD, REPO, str(tmp_path), step, "5"],
                       capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    tmp = os.path.join(cs.consumers_dir(tmp_path), "orders.json.tmp")
    assert os.path.exists(tmp) == (step == "before-rename")
    assert loaded_k(tmp_path) == (4 if step == "before-rename" else 5)
    assert not os.path.exists(tmp)
