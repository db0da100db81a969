"""The monitoring port under a flood of requests that arrive at once (not slowly: the
slowloris test is in tests/test_monitor.py): a holder of the monitoring token is still
served."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gevent
import pytest

from zeps.broker.http import MAX_CONNECTIONS

from .test_monitor import Core, Wsgi, get, monitor_url

FLOOD = Path(__file__).resolve().parent / "http_flood.py"
TOKEN = "s3cr3t-token-0123456789abcdef"


def test_a_flood_without_the_token_does_not_shut_out_its_holder(start_broker, tmp_path):
    """More kept-alive connections than the monitor keeps, each with 200 requests pipelined
    (no token): every request waits for its turn (100 a second), and those waiting held every
    connection's place, so each new connection was closed at once, the token's holder's too
    (10 of 10 requests: connection reset). A request waiting for its turn has cost nothing
    yet: its connection may be closed to make room, as one waiting for its request head."""
    token = tmp_path / "monitor.token"
    token.write_text(TOKEN + "\n")
    b = start_broker(None, "--monitor", "127.0.0.1:0", "--monitor-token", str(token))
    url = monitor_url(b)
    good = {"Authorization": "Bearer " + TOKEN}
    assert get(url + "/varz", headers=good)[0] == 200
    host, port = url[len("http://"):].split(":")
    flood = subprocess.Popen([sys.executable, str(FLOOD), host, port,
                              str(MAX_CONNECTIONS + 6), "200"], stdout=subprocess.PIPE)
    try:
        assert flood.stdout.readline().strip() == b"flooding"
        answers = []
        for _ in range(10):
            try:
                answers.append(get(url + "/varz", headers=good)[0])
            except OSError as exc:            # closed to make room for nobody: reset
                answers.append(type(exc).__name__)
        assert answers == [200] * 10
        assert flood.poll() is None                  # (it flooded until the end)
    finally:
        flood.kill()
        flood.wait()


def test_requests_closed_while_they_wait_do_not_push_back_the_turns_after_them(tmp_path):
    """A request waiting for its turn may be closed to make room (each new connection of a
    flood closes the one waiting longest), but it had taken its turn: 10,000 of them pushed
    the schedule 100 s ahead, so a request (``/healthz``, or any page without a token) came
    a second after the flood and waited 99 s. At most ``MAX_CONNECTIONS`` wait at once: a
    request waits at most that many turns."""
    core = Core(tmp_path / "data")
    w = Wsgi(core.core, max_rate=100, burst=20)

    def closed(seconds):                      # its connection closed for a new one meanwhile
        raise gevent.GreenletExit

    w.server.sleep = closed
    for _ in range(20):                       # the burst: served at once
        assert w.get("/healthz")[0] == 200
    for _ in range(10_000):
        with pytest.raises(gevent.GreenletExit):
            w.get("/healthz")
    w.server.sleep = w.slept.append
    w.now += 1.0
    assert w.get("/healthz")[0] == 200
    assert sum(w.slept) <= MAX_CONNECTIONS * w.server.interval, w.slept
    core.datadir.close()
