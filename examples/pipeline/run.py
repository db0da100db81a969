"""One command for the whole pipeline::

    python -m examples.pipeline.run            # from the repository root, in the venv

1. starts a ZEPS broker on 127.0.0.1 (free port, temporary data directory);
2. publishes JSON order events to stream ``orders`` (:mod:`.publisher`);
3. runs the Spark Structured Streaming job with ``trigger(availableNow=True)`` (:mod:`.job`):
   ZEPS -> 1-minute windowed aggregation per region -> ZEPS stream ``order-stats``;
4. prints the results with ``zeps subscribe order-stats --json``;
5. stops the broker (``--keep`` leaves the data directory for a look).
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """``python -m zeps broker`` as a child process."""

    def __init__(self, data_dir: str, port: int = 0):
        self.data_dir = data_dir
        self.endpoint = f"tcp://127.0.0.1:{port or free_port()}"
        self.proc = None

    def start(self, timeout: float = 20.0) -> "Broker":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zeps", "broker", "--endpoint", self.endpoint,
             "--data-dir", self.data_dir], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        from zeps.clients import ZepsError, list_streams
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                list_streams(self.endpoint, timeout=0.5)
                return self
            except ZepsError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"broker did not answer on {self.endpoint}") from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def subscribe_json(endpoint: str, stream: str, timeout: float = 2.0) -> str:
    """``zeps subscribe STREAM --json --all``: every message so far, stopping after ``timeout``
    seconds without one."""
    r = subprocess.run([sys.executable, "-m", "zeps", "subscribe", stream, "--json", "--all",
                        "--endpoint", endpoint, "--timeout", str(timeout)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"zeps subscribe failed ({r.returncode}): {r.stderr}")
    return r.stdout


def pipeline(workdir: str, count: int = 2000, spark=None, out=sys.stdout) -> str:
    """Run the whole pipeline in ``workdir``; return what ``zeps subscribe --json`` printed."""
    from . import job, publisher
    broker = Broker(os.path.join(workdir, "zeps-data")).start()
    own_spark = spark is None
    try:
        print(f"[1/4] broker on {broker.endpoint}, data in {broker.data_dir}", file=out)
        last = publisher.publish_orders(broker.endpoint, "orders",
                                        publisher.make_orders(count))
        print(f"[2/4] published {count} orders (last sequence {last})", file=out)
        t = time.monotonic()
        if own_spark:
            spark = job.build_session("local[2]")
        job.run_job(spark, broker.endpoint, os.path.join(workdir, "checkpoint"))
        print(f"[3/4] Spark job (availableNow) done in {time.monotonic() - t:.1f}s", file=out)
        text = subscribe_json(broker.endpoint, "order-stats")
        print("[4/4] zeps subscribe order-stats --json:", file=out)
        out.write(text)
        out.flush()
        return text
    finally:
        if own_spark and spark is not None:
            spark.stop()
        broker.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="ZEPS -> Spark windowed aggregation -> ZEPS")
    ap.add_argument("--count", type=int, default=2000, help="orders to publish")
    ap.add_argument("--workdir", help="where the broker data and the checkpoint go "
                    "(default: a temporary directory, removed unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = args.workdir or tempfile.mkdtemp(prefix="zeps-pipeline-")
    try:
        pipeline(workdir, args.count)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.keep:
            print(f"kept {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
