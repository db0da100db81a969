"""Running a test's helper process (a script, a scenario) so that nothing it starts outlives it.

The process gets a session of its own (``start_new_session``): what it forks or starts (a
child, a broker, a bridge) is in that session unless it makes one of its own. On timeout the
whole session is killed and the test fails, naming what did not end; after a normal end,
whatever it left behind is killed too. A hung helper once left its forked child spinning at a
whole core, with its broker and bridge, under every later test and benchmark.
"""
from __future__ import annotations

import os
import signal
import subprocess

import pytest


def run_in_session(args, *, timeout: float, what: str, **popen) -> subprocess.CompletedProcess:
    """Run ``args`` (text mode, stdout and stderr captured) in a session of its own; fail the
    test if it has not ended within ``timeout`` seconds (its session killed)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{what} did not end within {timeout}s:\n{err[-4000:]}")
    finally:
        try:                                  # whatever it started and left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
