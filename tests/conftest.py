"""Shared fixtures: a real broker *process* on 127.0.0.1 with an ephemeral port and a temp data dir."""
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

REPO = Path(__file__).resolve().parent.parent


class BrokerProcess:
    """A ``python -m zeps.broker`` child process. ``endpoint`` is known once it has started."""

    def __init__(self, data_dir: Path, extra_args=(), endpoint: Optional[str] = None,
                 log_path: Optional[Path] = None, max_file_bytes: Optional[int] = None):
        self.data_dir = Path(data_dir)
        self.extra_args = list(extra_args)
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
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._log = open(self.log_path, "ab")
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
            raise RuntimeError(f"broker did not start: {text!r}\n{self.log()}")
        self.endpoint = text.split("listening on ", 1)[1].split()[0]
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
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
