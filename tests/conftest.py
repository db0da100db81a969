"""Shared fixtures: a real broker *process* on 127.0.0.1 with a free port (outside the ephemeral
range: tests/ports.py) and a temp data dir."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest
from hypothesis import HealthCheck, settings

from .property_examples import examples
from .ports import fixed_ports

REPO = Path(__file__).resolve().parent.parent

# No test depends on the clock: Hypothesis's two wall-clock limits are off for every property
# test. Its deadline (200 ms an example by default, outside CI) failed a codec test whose
# example the machine had stalled for 300 ms ("Unreliable test timings", FlakyFailure: the
# test, not the code), and its too_slow health check is the same limit on drawing data.
# A property that names no count draws Hypothesis's default (100), scaled as every named count is
# (tests/property_examples.py: all of them in `make test`, a quarter in `make check`).
settings.register_profile("zeps", deadline=None, max_examples=examples(100),
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("zeps")


class BrokerProcess:
    """A ``python -m zeps.broker`` child process. ``endpoint`` is known once it has started."""

    def __init__(self, data_dir: Path, extra_args=(), endpoint: Optional[str] = None,
                 log_path: Optional[Path] = None, max_file_bytes: Optional[int] = None):
        self.data_dir = Path(data_dir)
        self.extra_args = list(extra_args)
        #: No endpoint given: a port outside the ephemeral range (tests/ports.py), chosen at
        #: the first start, so that no connection takes it while a restart has the broker down.
        self._choose_port = endpoint is None
        self.endpoint = endpoint or "tcp://127.0.0.1:*"
        self.log_path = log_path or self.data_dir.parent / f"broker-{os.getpid()}-{id(self)}.log"
        self.proc: Optional[subprocess.Popen] = None
        self.max_file_bytes = max_file_bytes

    def _limits(self) -> None:
        # A real "disk full" for the broker: writes past this size fail with EFBIG (Python
        # ignores SIGXFSZ), exactly where ENOSPC would fail them.
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.max_file_bytes, self.max_file_bytes))

    def start(self, timeout: float = 20.0) -> "BrokerProcess":
        if not self._choose_port:
            return self._start(timeout)
        for attempt in range(5):
            self.endpoint = f"tcp://127.0.0.1:{fixed_ports()}"
            try:
                self._start(timeout)
            except RuntimeError as exc:   # bound by another program since it was probed
                if f"cannot bind {self.endpoint}: Address already in use" not in str(exc) \
                        or attempt == 4:
                    raise
                continue
            self._choose_port = False     # a restart keeps the port
            return self

    def _start(self, timeout: float) -> "BrokerProcess":
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._log = open(self.log_path, "ab")
        since = self._log.tell()                  # this start's part of the log begins here
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zeps.broker", "--endpoint", self.endpoint,
             "--data-dir", str(self.data_dir), *self.extra_args],
            stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=str(REPO),
            preexec_fn=self._limits if self.max_file_bytes else None)
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        text = line.decode().strip()
        if "listening on " not in text:
            self.kill()
            raise RuntimeError(f"broker did not start: {text!r}\n{self.log(since)}")
        self.endpoint = text.split("listening on ", 1)[1].split()[0]
        return self

    def log(self, since: int = 0) -> str:
        """The end of the broker's log (of what it logged from byte ``since`` on)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait: the broker syncs its journals and exits 0."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._closed()

    def kill(self) -> int:
        """SIGKILL: no chance to flush or sync anything."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self._closed()

    def _closed(self) -> int:
        rc = self.proc.returncode
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()
        return rc

    def restart(self) -> "BrokerProcess":
        """Start again on the same endpoint and data dir (after stop() or kill())."""
        if self.running:
            self.stop()
        deadline = time.monotonic() + 10
        while True:
            try:
                return self.start()
            except RuntimeError:
                if time.monotonic() > deadline:   # the port may need a moment to be free
                    raise
                time.sleep(0.2)


@pytest.fixture
def start_broker(tmp_path):
    started: List[BrokerProcess] = []

    def start(data_dir=None, *extra_args, endpoint=None, max_file_bytes=None) -> BrokerProcess:
        data_dir = Path(data_dir) if data_dir is not None else tmp_path / f"data{len(started)}"
        b = BrokerProcess(data_dir, extra_args, endpoint=endpoint,
                          log_path=tmp_path / f"broker{len(started)}.log",
                          max_file_bytes=max_file_bytes)
        started.append(b)
        return b.start()

    yield start
    for b in started:
        b.kill() if b.running else None


@pytest.fixture
def broker(start_broker, tmp_path) -> BrokerProcess:
    return start_broker(tmp_path / "data")


# ------------------------------------------------------------------ levels
# Every test has a level a reader can see with `pytest --markers` and select with -m:
#   (none)    unit and in-process core: pure code, real files in a temp dir; `make check` runs these
#   process   starts a real broker (or another process: the CLI, a second broker, a namespace)
#   fault     crash, damage and soak scenarios (heavy even in-process: every byte of a record)
#   spark     a local Spark session
# `process` and `fault` are applied here, by the fixtures a test uses or the module it is in, so
# that no test has to remember its marker.
PROCESS_FIXTURES = frozenset({
    "broker", "start_broker", "secure_broker", "allow_broker", "mbroker", "clients",
    "clients_factory", "keys", "netns", "ram_dir", "small_disk", "spark"})
#: Modules whose tests start processes themselves (subprocess, BrokerProcess, the CLI).
PROCESS_MODULES = frozenset({
    "test_bench_smoke", "test_cli", "test_cli_resilience", "test_makefile",
    "test_journal_processes", "test_multicast_net", "test_multicast_cli", "test_exactly_once",
    "test_reliability", "test_spark", "test_monitor", "test_security", "test_key_revocation",
    "test_client", "test_client_asyncio", "test_client_batching_broker", "test_client_producer",
    "test_client_receipts", "test_large_messages", "test_streams", "test_broker",
    "test_isolation", "test_hostile_commands", "test_journal_batch", "test_journal_columnar",
    "test_multicast_receiver", "test_cli_consistency", "test_journal_kv_crash",
    "test_chp_frontend", "test_bus_frontend", "test_journal_consumers_crash"})
#: In-process, but each test walks every byte of a record: the damage suite; and crashes (the
#: SIGKILLed compaction at each of its steps).
FAULT_MODULES = frozenset({"test_journal_damage", "test_journal_kv_crash",
                           "test_journal_consumers_crash"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if module in FAULT_MODULES:
            item.add_marker(pytest.mark.fault)
        if module in PROCESS_MODULES or PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
        # pytest-timeout's default method raises inside the test, and Hypothesis catches that
        # and runs the example again to shrink it: a test that loops for ever then hangs the
        # run, past any timeout (a run of make check did, for 10 minutes). The thread method
        # dumps every thread's stack and ends the process instead: the run fails at once.
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.timeout(method="thread"))
