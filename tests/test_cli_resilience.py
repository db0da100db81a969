"""``zeps`` commands under adversity, end to end against a real broker process: ``-v`` says
when the client loses and regains the broker; ``zeps publish`` from stdin with lines the broker
refuses says which, exits 1, and publishes the others."""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from zeps.clients import Client

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
ENV.pop("ZEPS_ENDPOINT", None)


def read_line(stream, deadline: float) -> bytes:
    """One line from a child's pipe, or b"" once ``deadline`` (monotonic) passes."""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.1)
        if ready:
            return stream.readline()
    return b""


def test_verbose_subscribe_says_when_it_loses_and_regains_the_broker(broker):
    with Client(broker.endpoint, "s", confirms=True) as c:
        c.publish("k", b"one")
        c.wait_for_confirms()
    p = subprocess.Popen([sys.executable, "-m", "zeps", "subscribe", "s", "--all", "-v",
                          "--count", "2", "--timeout", "60", "--endpoint", broker.endpoint],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(REPO), env=ENV)
    try:
        assert read_line(p.stdout, time.monotonic() + 30) == b"1 k one\n"
        broker.stop()
        broker.restart()
        with Client(broker.endpoint, "s", confirms=True) as c:
            c.publish("k", b"two")
            c.wait_for_confirms()
        assert read_line(p.stdout, time.monotonic() + 30) == b"2 k two\n"
        assert p.wait(30) == 0
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lost = [x for x in err.splitlines() if x.startswith(f"zeps: lost the broker at {broker.endpoint} (")]
    back = [x for x in err.splitlines() if x.startswith(f"zeps: reconnected to {broker.endpoint}")]
    assert len(lost) == 1 and len(back) == 1, err
    assert err.index(lost[0]) < err.index(back[0])


def test_publish_from_stdin_reports_each_refused_line_and_publishes_the_others(start_broker):
    b = start_broker(None, "--max-message", "100")
    lines = [b"ok1", b"x" * 200, b"ok3", b"y" * 101, b"ok5", b"z" * 100]
    r = subprocess.run([sys.executable, "-m", "zeps", "publish", "s", "k", "-", "--confirm",
                        "--endpoint", b.endpoint], input=b"\n".join(lines) + b"\n",
                       capture_output=True, timeout=60, cwd=str(REPO), env=ENV)
    assert r.returncode == 1, r.stderr
    err = [x for x in r.stderr.decode().splitlines() if "rejected" in x]
    assert len(err) == 2, r.stderr
    assert err[0].startswith("zeps: line 2: PUBLISH rejected: body of 200 bytes")
    assert err[1].startswith("zeps: line 4: PUBLISH rejected: body of 101 bytes")
    assert r.stdout.decode().strip() == "4"               # the last confirmed sequence
    with Client(b.endpoint, "s") as c:
        sub = c.subscribe("", timeout=10)
        got = [next(sub) for _ in range(4)]
        assert c.info().last == 4
    assert [m.body for m in got] == [b"ok1", b"ok3", b"ok5", b"z" * 100]


def test_publish_of_one_refused_message_says_why_and_exits_1(start_broker):
    b = start_broker(None, "--max-message", "10")
    r = subprocess.run([sys.executable, "-m", "zeps", "publish", "s", "k", "x" * 11,
                        "--endpoint", b.endpoint], capture_output=True, timeout=60,
                       cwd=str(REPO), env=ENV, text=True)
    assert r.returncode == 1 and r.stdout == ""
    err = [x for x in r.stderr.splitlines() if "rejected" in x]
    assert err == ["zeps: error: broker rejected PUBLISH: body of 11 bytes is over the broker's "
                   "limit of 10"]
