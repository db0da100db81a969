"""A message larger than the client's default credit window (8 MiB) is delivered: the SDK sizes
its window from the broker's LIMITS (or grows it on the broker's "credit window too small"
advice). End to end, against a real broker process with ``--max-message 16M``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from zeps.clients import DEFAULT_CREDIT_WINDOW, Client

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
BIG = 10 << 20


def big_stream(start_broker):
    b = start_broker(None, "--max-message", "16M")
    body = bytes(range(256)) * (BIG // 256)
    with Client(b.endpoint, "big", confirms=True) as pub:
        pub.publish("small", b"before")
        pub.publish("large", body)
        pub.publish("small", b"after")
        assert pub.wait_for_confirms(timeout=30) == 3
    return b, body


def test_a_10mb_message_reaches_client_subscribe_with_the_default_window(start_broker):
    b, body = big_stream(start_broker)
    assert BIG > DEFAULT_CREDIT_WINDOW
    with Client(b.endpoint, "big") as c:
        sub = c.subscribe("", timeout=30)
        got = [next(sub) for _ in range(3)]
        assert [(m.sequence, m.key) for m in got] == [(1, "small"), (2, "large"), (3, "small")]
        assert got[1].body == body
        assert c.credit_window > DEFAULT_CREDIT_WINDOW
        assert c.credit_window >= len(body) + 9 + len("large")


def test_a_10mb_message_reaches_zeps_subscribe(start_broker):
    b, _ = big_stream(start_broker)
    body = b"z" * BIG
    with Client(b.endpoint, "big", confirms=True) as pub:
        pub.publish("text", body)
        pub.wait_for_confirms(timeout=30)
    r = subprocess.run([sys.executable, "-m", "zeps", "subscribe", "big", "--from-seq", "4",
                        "--count", "1", "--timeout", "30", "--endpoint", b.endpoint],
                       capture_output=True, timeout=120, cwd=str(REPO), env=ENV)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout == b"4 text " + body + b"\n"
