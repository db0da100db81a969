"""The servers the suite measures: the ZEPS broker, redis-server and nats-server.

Each runs as a child process in its own process group, bound to 127.0.0.1 on an ephemeral port,
with its data in a fresh temporary directory; :meth:`Server.stop` ends the whole group (SIGTERM,
then SIGKILL) and deletes the directory. Use them as context managers so that a failing scenario
still stops them::

    with zeps_broker(fsync="interval") as b:
        ...b.endpoint, b.rss()...

:func:`missing` says why a peer cannot be used on this machine (``None`` when it can), in the
words the report prints instead of a figure.
"""
from __future__ import annotations

import importlib.util
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0

#: peer -> (executables, Python modules) it needs
NEEDS = {
    "redis": (("redis-server",), ("redis", "hiredis")),
    "redis-benchmark": (("redis-server", "redis-benchmark"), ()),
    "nats": (("nats-server",), ("nats",)),
}


def missing(peer: str) -> Optional[str]:
    """Why ``peer`` ("redis", "redis-benchmark", "nats") cannot run here, or None if it can."""
    programs, modules = NEEDS[peer]
    absent = [p for p in programs if shutil.which(p) is None]
    absent += [f"Python package {m}" for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        return f"not installed here ({', '.join(absent)}; `make bench-peers` installs them)"
    return None


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


class Server:
    """A server child process in its own process group, with its temporary directory."""

    def __init__(self, name: str, argv: List[str], tmp: str, env=None):
        self.name = name
        self.tmp = tmp
        self.log_path = os.path.join(tmp, f"{name}.log")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, env=env,
                                     cwd=tmp, start_new_session=True)
        self.endpoint = ""
        self.port = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        """The server's resident set size in bytes."""
        return rss_bytes(self.proc.pid)

    def log_count(self, text: str) -> int:
        """How many lines of the server's log so far contain ``text``."""
        try:
            with open(self.log_path, errors="replace") as f:
                return sum(text in line for line in f)
        except OSError:
            return 0

    def log_tail(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after 15 s, delete the temporary directory."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _started(server: Server, ok: bool, what: str) -> Server:
    if not ok:
        tail = server.log_tail()
        server.stop()
        raise RuntimeError(f"{server.name} did not start ({what}): {tail}")
    return server


def zeps_broker(fsync: str = "interval", extra=(), data_dir: Optional[str] = None) -> Server:
    """``python -m zeps.broker`` of this checkout on ``tcp://127.0.0.1:*``.

    ``data_dir``: use this (existing) data directory instead of a fresh one; it is not deleted.
    """
    tmp = tempfile.mkdtemp(prefix="zeps-bench-broker-")
    # The caller's path first: under bench.ab it names the tree whose zeps is measured.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, (os.environ.get("PYTHONPATH"), str(REPO)))))
    argv = [sys.executable, "-m", "zeps.broker", "--endpoint", "tcp://127.0.0.1:*",
            "--data-dir", data_dir or os.path.join(tmp, "data"), "--fsync", fsync,
            "--log-level", "warning", *extra]
    server = Server("zeps-broker", argv, tmp, env)
    ready, _, _ = select.select([server.proc.stdout], [], [], START_TIMEOUT)
    line = server.proc.stdout.readline().decode() if ready else ""
    _started(server, "listening on " in line, repr(line))
    server.endpoint = line.split("listening on ", 1)[1].split()[0]
    server.port = int(server.endpoint.rsplit(":", 1)[1])
    return server


#: What redis-server logs when its AOF fsync lags (``everysec``: writes then wait for the disk).
REDIS_SLOW_FSYNC = "fsync is taking too long"
#: What it logs when it starts rewriting its AOF (a forked child writes the whole dataset).
REDIS_AOF_REWRITE = "Background append only file rewriting started"


def redis_server(appendfsync: str = "everysec") -> Server:
    """redis-server with the AOF on (``appendfsync`` everysec or always), no RDB snapshots; its
    log in its temporary directory (:meth:`Server.log_count`; on stdout, a pipe nobody reads,
    it would block the server once the pipe is full)."""
    tmp = tempfile.mkdtemp(prefix="zeps-bench-redis-")
    port = free_port()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", tmp,
            "--appendonly", "yes", "--appendfsync", appendfsync, "--save", "",
            "--daemonize", "no", "--logfile", os.path.join(tmp, "redis-server.log"),
            "--protected-mode", "yes",
            "--maxclients", "4064"]
    server = Server("redis-server", argv, tmp)
    server.port = port
    server.endpoint = f"127.0.0.1:{port}"
    return _started(server, _wait_port(port, server.proc, time.monotonic() + START_TIMEOUT),
                    f"port {port}")


def nats_server() -> Server:
    """nats-server with JetStream (file storage in the temporary directory)."""
    tmp = tempfile.mkdtemp(prefix="zeps-bench-nats-")
    port = free_port()
    argv = ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", tmp]
    server = Server("nats-server", argv, tmp)
    server.port = port
    server.endpoint = f"nats://127.0.0.1:{port}"
    return _started(server, _wait_port(port, server.proc, time.monotonic() + START_TIMEOUT),
                    f"port {port}")


def versions(servers: bool = True) -> dict:
    """Versions of everything the report names (a peer that is absent: 'not installed');
    without ``servers``, only Python's, pyzmq's and libzmq's."""
    import importlib.metadata as md

    import zmq
    out = {"python": sys.version.split()[0], "pyzmq": zmq.__version__,
           "libzmq": zmq.zmq_version()}
    if not servers:
        return out
    for pkg in ("redis", "hiredis", "nats-py"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    for prog, flag in (("redis-server", "--version"), ("nats-server", "--version")):
        if shutil.which(prog) is None:
            out[prog] = "not installed"
            continue
        text = subprocess.run([prog, flag], capture_output=True, text=True, timeout=10).stdout
        out[prog] = text.split("v=", 1)[1].split()[0] if "v=" in text else text.strip().split()[-1]
    return out
