"""The ``zeps`` command line, end to end: subprocesses against a real broker process."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ports import fixed_ports
from zeps.cli import parse_time

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
ENV.pop("ZEPS_ENDPOINT", None)


def zeps(*args, input=None, timeout=30, env=None):
    """Run ``python -m zeps ARGS``; return the CompletedProcess (text mode)."""
    return subprocess.run([sys.executable, "-m", "zeps", *map(str, args)], input=input,
                          capture_output=True, text=True, timeout=timeout, cwd=str(REPO),
                          env=env or ENV)


def zeps_bytes(*args, input=None, timeout=30):
    return subprocess.run([sys.executable, "-m", "zeps", *map(str, args)], input=input,
                          capture_output=True, timeout=timeout, cwd=str(REPO), env=ENV)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def free_endpoint():
    """Where nothing listens, outside the ephemeral range (the client cannot connect to itself)."""
    return f"tcp://127.0.0.1:{fixed_ports()}"


# ------------------------------------------------------------------ publish / subscribe

def test_publish_in_one_process_subscribe_in_another(broker):
    ep = broker.endpoint
    assert zeps("stream", "create", "orders", "--endpoint", ep).returncode == 0   # readers don't
    sub = subprocess.Popen([sys.executable, "-m", "zeps", "subscribe", "orders", "--json",
                            "--all", "--count", "3", "--endpoint", ep], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=str(REPO), env=ENV)
    for key, body in [("eu.fr", "hello"), ("us.ny", "wörld"), ("eu.de", "3")]:
        r = zeps("publish", "orders", key, body, "--endpoint", ep)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    out, err = sub.communicate(timeout=30)
    assert sub.returncode == 0, err
    rows = json_lines(out)
    assert [(r["sequence"], r["key"], r["body"]) for r in rows] == [
        (1, "eu.fr", "hello"), (2, "us.ny", "wörld"), (3, "eu.de", "3")]
    assert all(r["stream"] == "orders" and r["timestamp"] > 0 and r["encoding"] == "utf8"
               and r["time"].endswith("Z") for r in rows)
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)


def test_publish_stdin_lines_with_confirm_and_human_subscribe(broker):
    ep = broker.endpoint
    r = zeps("publish", "s", "k", "--confirm", "--endpoint", ep, input="a\nb b\r\n\nlast")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "4"                       # the last confirmed sequence
    r = zeps("publish", "s", "k2", "-", "-v", "--endpoint", ep, input="x\n")
    assert r.returncode == 0 and r.stdout == "" and "published 1 message" in r.stderr
    r = zeps("subscribe", "s", "--all", "--count", "5", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["1 k a", "2 k b b", "3 k ", "4 k last", "5 k2 x"]


def test_subscribe_options(broker):
    ep = broker.endpoint
    zeps("publish", "s", "eu.fr", "-", "--endpoint", ep, input="1\n2\n3\n")
    zeps("publish", "s", "us.ny", "-", "--endpoint", ep, input="4\n5\n")
    r = zeps("subscribe", "s", "us.", "--from-seq", "5", "--timeout", "0.3", "--endpoint", ep)
    assert r.returncode == 0 and r.stdout == "5 us.ny 5\n"
    r = zeps("subscribe", "s", "eu.", "~^us", "--all", "--timeout", "0.3", "--endpoint", ep)
    assert [line.split()[0] for line in r.stdout.splitlines()] == ["1", "2", "3", "4", "5"]
    r = zeps("subscribe", "s", "--live", "--timeout", "0.3", "--endpoint", ep)
    assert r.returncode == 0 and r.stdout == ""
    r = zeps("subscribe", "s", "--timeout", "0.3", "--endpoint", ep)     # live is the default
    assert r.returncode == 0 and r.stdout == ""
    r = zeps("subscribe", "s", "--last", "2", "--timeout", "0.3", "--endpoint", ep)
    assert r.stdout == "4 us.ny 4\n5 us.ny 5\n"
    r = zeps("subscribe", "s", "--last", "2", "eu.", "--timeout", "0.3", "--endpoint", ep)
    assert r.stdout == ""
    r = zeps("subscribe", "s", "--from-time", "-1h", "--count", "1", "--endpoint", ep)
    assert r.stdout == "1 eu.fr 1\n"
    r = zeps("subscribe", "s", "--from-time", "now", "--timeout", "0.3",
             "--endpoint", ep)
    assert r.returncode == 0 and r.stdout == ""


def test_binary_body_is_base64_in_json(broker):
    ep = broker.endpoint
    r = zeps_bytes("publish", "bin", "k", "--endpoint", ep, input=b"\xff\xfe\x00\n")
    assert r.returncode == 0, r.stderr
    r = zeps("subscribe", "bin", "--json", "--all", "--count", "1", "--endpoint", ep)
    row = json_lines(r.stdout)[0]
    assert (row["body"], row["encoding"]) == ("//4A", "base64")
    r = zeps("subscribe", "bin", "--all", "--count", "1", "--endpoint", ep)
    assert r.stdout == "1 k \\xff\\xfe\\x00\n"
    zeps("publish", "bin", "k", "two\nlines\\", "--endpoint", ep)
    r = zeps("subscribe", "bin", "--from-seq", "2", "--count", "1", "--endpoint", ep)
    assert r.stdout == "2 k two\\nlines\\\\\n"            # one line per message, always


def test_subscribe_ctrl_c_exits_130_without_traceback(broker):
    zeps("publish", "s", "k", "first", "--endpoint", broker.endpoint)
    p = subprocess.Popen([sys.executable, "-m", "zeps", "subscribe", "s", "--all", "--endpoint",
                          broker.endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=str(REPO), env=ENV,
                         preexec_fn=_sigint_as_a_terminal_sends_it)
    assert p.stdout.readline() == "1 k first\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_replay_to_a_file_ctrl_c_exits_130_without_traceback(broker, tmp_path):
    ep = broker.endpoint
    n = 100_000
    r = zeps("publish", "s", "k", "-", "--confirm", "--endpoint", ep, timeout=120,
             input="".join(f"{i}\n" for i in range(n)))
    assert r.stdout.strip() == str(n)
    out = tmp_path / "out.json"
    p = subprocess.Popen([sys.executable, "-m", "zeps", "replay", "s", "--endpoint", ep,
                          "-o", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=str(REPO), env=ENV,
                         preexec_fn=_sigint_as_a_terminal_sends_it)
    deadline = time.monotonic() + 30
    while not (out.exists() and out.stat().st_size > 0):    # it is writing: freeze the broker
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.01)
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        p.send_signal(signal.SIGINT)                       # Ctrl-C in the middle of the replay
        _, err = p.communicate(timeout=20)
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    assert p.returncode == 130 and "Traceback" not in err, err
    rows = json_lines(out.read_text())
    assert 0 < len(rows) < n and [x["sequence"] for x in rows] == list(range(1, len(rows) + 1))


def test_options_anywhere_and_a_key_per_line(broker):
    ep = broker.endpoint
    r = zeps("publish", "orders", "key", "--confirm", "-", "--endpoint", ep, input="a\n")
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    r = zeps("publish", "orders", "--key-separator", ":", "--confirm", "--endpoint", ep,
             input="eu.fr:x:1\nus:y\n")
    assert r.returncode == 0 and r.stdout.strip() == "3", r.stderr
    r = zeps("publish", "orders", "--key-field", "region", "--endpoint", ep,
             input='{"region": "eu.de", "n": 1}\n')
    assert r.returncode == 0, r.stderr
    r = zeps("subscribe", "--all", "orders", "--count", "4", "--endpoint", ep)
    assert r.stdout.splitlines() == ["1 key a", "2 eu.fr x:1", "3 us y",
                                     '4 eu.de {"region": "eu.de", "n": 1}']
    r = zeps("publish", "orders", "--key-separator", ":", "--endpoint", ep, input="nokey\n")
    assert r.returncode == 2 and r.stderr.strip() == "zeps: error: line 1: no key separator ':'"


# ------------------------------------------------------------------ replay and stats

def test_replay_from_journal_with_broker_stopped(broker):
    ep = broker.endpoint
    zeps("publish", "orders", "eu.fr", "-", "--endpoint", ep, input="a\nb\nc\n")
    zeps("publish", "orders", "us.ny", "-", "--endpoint", ep, input="d\ne\n")
    assert broker.stop() == 0
    dd = broker.data_dir
    r = zeps("replay", "orders", "--data-dir", dd)
    assert r.returncode == 0, r.stderr
    rows = json_lines(r.stdout)
    assert [(x["sequence"], x["key"], x["body"]) for x in rows] == [
        (1, "eu.fr", "a"), (2, "eu.fr", "b"), (3, "eu.fr", "c"), (4, "us.ny", "d"),
        (5, "us.ny", "e")]
    assert all(isinstance(x["timestamp"], int) and x["timestamp"] > 0 for x in rows)
    r = zeps("replay", "orders", "eu.", "--data-dir", dd, "--format", "raw", "--from-seq", "2")
    assert r.returncode == 0 and r.stdout == "b\nc\n"
    r = zeps("replay", "orders", "~y$", "--data-dir", dd, "--format", "raw",
             "--raw-separator", "\\0")
    assert r.stdout == "d\0e\0"
    r = zeps("replay", "orders", "--data-dir", dd, "--from-seq", "2", "--to-seq", "3")
    assert [x["sequence"] for x in json_lines(r.stdout)] == [2, 3]
    ts = [x["timestamp"] for x in rows]
    def epoch(ns):
        return f"{ns // 10**9}.{ns % 10**9:09d}"
    r = zeps("replay", "orders", "--data-dir", dd, "--from-time", epoch(ts[1]),
             "--to-time", epoch(ts[3]))
    # Both ends inclusive (a batch of publishes shares one timestamp).
    assert [x["sequence"] for x in json_lines(r.stdout)] == [
        i + 1 for i, t in enumerate(ts) if ts[1] <= t <= ts[3]]
    r = zeps("replay", "orders", "--data-dir", dd, "--from-time", epoch(ts[0] + 1),
             "--to-time", epoch(ts[4] - 1))
    assert [x["sequence"] for x in json_lines(r.stdout)] == [
        i + 1 for i, t in enumerate(ts) if ts[0] < t < ts[4]]
    out = broker.data_dir.parent / "out.txt"
    r = zeps("replay", "orders", "--data-dir", dd, "--format", "raw", "--output", out)
    assert r.returncode == 0 and r.stdout == "" and out.read_bytes() == b"a\nb\nc\nd\ne\n"


def test_replay_through_broker_stops_at_last_sequence(broker):
    ep = broker.endpoint
    zeps("publish", "s", "eu", "-", "--endpoint", ep, input="1\n2\n3\n4\n")
    zeps("publish", "s", "us", "-", "--endpoint", ep, input="5\n6\n")
    r = zeps("replay", "s", "--endpoint", ep, "--format", "raw")
    assert r.returncode == 0 and r.stdout == "1\n2\n3\n4\n5\n6\n"
    # the pattern excludes the last messages: it still stops at the end
    r = zeps("replay", "s", "eu", "--endpoint", ep, "--from-seq", "3")
    assert [x["body"] for x in json_lines(r.stdout)] == ["3", "4"]
    r = zeps("replay", "s", "--endpoint", ep, "--to-seq", "2", "--format", "raw")
    assert r.stdout == "1\n2\n"


def test_one_damaged_stream_is_a_line_of_stats_and_list_not_the_end_of_them(start_broker):
    """A stream whose settings are damaged cannot be opened: ``zeps stats`` and ``zeps stream
    list`` stopped at it, printing nothing of the healthy streams (found by review). It is a
    line saying why, the others are shown, and the exit status is 1."""
    b = start_broker()
    for name in ("good", "bad", "junk"):
        assert zeps("publish", name, "k", "x", "--endpoint", b.endpoint).returncode == 0
    b.stop()
    (b.data_dir / "bad" / "SETTINGS.json").write_text("{not json")
    b.start()
    for args in (("stats",), ("stats", "--json"), ("stream", "list")):
        r = zeps(*args, "--endpoint", b.endpoint)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "good" in r.stdout and "junk" in r.stdout, (args, r.stdout)
        assert "'bad'" in r.stderr or '"error"' in r.stdout, (args, r.stderr)
    b.stop()
    log = b.data_dir / "bad" / "00000000000000000001.log"     # the reader needs no settings:
    log.unlink()                                             # a log it cannot open instead
    log.mkdir()
    r = zeps("stats", "--data-dir", b.data_dir)
    assert r.returncode == 1 and "good" in r.stdout and "'bad'" in r.stderr, (r.stdout, r.stderr)


def test_stats_by_endpoint_and_data_dir(broker):
    ep = broker.endpoint
    zeps("publish", "a", "k", "-", "--endpoint", ep, input="1\n2\n3\n")
    zeps("publish", "b", "k", "x", "--endpoint", ep)
    r = zeps("stats", "--json", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    rows = {x["stream"]: x for x in json_lines(r.stdout)}
    assert (rows["a"]["first"], rows["a"]["last"], rows["a"]["messages"]) == (1, 3, 3)
    assert rows["b"]["last"] == 1 and rows["b"]["size"] > 0
    assert rows["a"]["oldest"] <= rows["a"]["newest"] and rows["a"]["newest_time"].endswith("Z")
    r = zeps("stats", "--endpoint", ep)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["STREAM", "FIRST", "LAST", "MESSAGES", "SIZE", "OLDEST", "NEWEST"]
    assert lines[1].split()[:4] == ["a", "1", "3", "3"]
    broker.stop()
    r = zeps("stats", "--json", "--data-dir", broker.data_dir)
    assert r.returncode == 0, r.stderr
    rows2 = {x["stream"]: x for x in json_lines(r.stdout)}
    assert rows2["a"]["last"] == 3 and rows2["b"]["messages"] == 1
    r = zeps("stats", "b", "--data-dir", broker.data_dir)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2


def test_broker_subcommand_runs_and_stops(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "zeps", "broker", "--endpoint",
                          "tcp://127.0.0.1:*", "--data-dir", str(tmp_path / "d")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=str(REPO), env=ENV)
    try:
        line = p.stdout.readline()
        assert "listening on " in line
        ep = line.split("listening on ", 1)[1].split()[0]
        r = zeps("publish", "s", "k", "v", "--confirm", "--endpoint", ep)
        assert r.stdout.strip() == "1"
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=15)
    assert p.returncode == 0


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("args", [
    ["publish", "s", "k", "v", "--endpoint", "not-an-endpoint"],
    ["publish", "s", "k", "v", "--endpoint", "tcp://127.0.0.1:99999"],
    ["subscribe", "s", "--from-time", "yesterday-ish"],
    ["subscribe", "s", "--from-time", "2026-13-45T99:00:00Z"],
    ["subscribe", "s", "--from-seq", "3", "--live"],
    ["subscribe", "s", "--count", "0"],
    ["subscribe", "s", "~("],
    ["subscribe"],
    ["frobnicate"],
    [],
    ["replay", "s", "--data-dir", "/nonexistent/zeps-data"],
    ["replay", "s", "--format", "xml"],
    ["replay", "s", "--endpoint", "tcp://127.0.0.1:1", "--data-dir", "x"],
    ["stats", "--data-dir", "/nonexistent/zeps-data"],
    ["broker", "--fsync", "sometimes"],
    # not finite, or more than the broker can take: tracebacks, or a broker that broke (review)
    ["broker", "--admin-rate", "nan"],
    ["broker", "--regex-timeout-ms", "inf"],
    ["broker", "--client-queue", "3000000000"],
    ["broker", "--max-message", "5T"],
    ["broker", "--max-credit", "99999999999999T"],
    ["broker", "--max-credit", "9" * 400],                    # past a float: OverflowError
    # tracebacks (and, for publish, a stream made before the error; found by review)
    ["publish", "ks", "--key-separator", "", "--endpoint", "tcp://127.0.0.1:1"],
    ["stream", "create", "x", "--retention-bytes", "99999999999T"],
    ["stream", "create", "x", "--retention-age", "999999999999d"],
    ["consumer", "add", "s", "c", "--max-deliver", "4294967296"],
    ["bench", "--msgs", "1", "--pub", "2"],       # a subscriber's TypeError, 600 s of waiting
    ["bench", "--pub", "100000"],
    ["broker", "--client-queue", "9" * 400],
    # no bound: 10^30 ms started a broker that never synced (no CONFIRM, ever), 10^400 was an
    # OverflowError after the data directory was opened (its --data-dir fails either at once)
    ["broker", "--fsync-interval-ms", "1" + "0" * 30, "--data-dir", "/dev/null/zeps-data"],
    ["broker", "--fsync-interval-ms", "9" * 400, "--data-dir", "/dev/null/zeps-data"],
    # seconds no wait can hold, and more clients than a page: each was a traceback or exit 1
    ["top", "--once", "--interval", "1e308"],
    ["stats", "--connect-timeout", "inf"],
    ["consumer", "add", "s", "g", "--ack-wait", "1e300"],
    ["top", "--once", "--clients", "200000"],
    # numbers past the wire's 2^64-1 (epoch milliseconds given as seconds): codec tracebacks
    ["subscribe", "s", "--from-time", "1714564800000"],
    ["replay", "s", "--endpoint", "tcp://127.0.0.1:1", "--to-time", "1714564800000"],
    ["subscribe", "s", "--from-seq", "99999999999999999999999"],
])
def test_bad_arguments_exit_2_with_one_line(args):
    r = zeps(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("zeps"), r.stderr
    assert "error" in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize("args", [
    ["subscribe", b"s\xff", "--all", "--endpoint", "tcp://127.0.0.1:1"],
    ["publish", "ks", "--key-separator", b"\xff", "--endpoint", "tcp://127.0.0.1:1"],
    ["publish", b"\xff", "k", "b", "--endpoint", "tcp://127.0.0.1:1"],
    ["subscribe", "s", "--all", b"~\xff", "--endpoint", "tcp://127.0.0.1:1"],
    ["replay", b"\xff", "--data-dir", "."],
    ["kv", "get", "s", b"k\xff", "--endpoint", "tcp://127.0.0.1:1"],
])
def test_arguments_that_are_not_utf8_exit_2_with_one_line(args):
    """Bytes that do not decode (a stream name, a pattern, a key): a UnicodeEncodeError
    traceback where they were sent, or exit status 1."""
    r = subprocess.run([sys.executable, "-m", "zeps", *args], capture_output=True, text=True,
                       timeout=30, cwd=str(REPO), env=ENV)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "not valid UTF-8" in r.stderr, r.stderr


def test_publish_goes_on_past_a_line_no_broker_reads(broker):
    """A line over the broker's --max-message by more than the 64 KiB it reads beyond it is
    refused by the client before it is sent: that was a traceback, and the lines after it were
    not published. It is reported as its line, and the others are published."""
    lines = b"a\n" + b"y" * (1 << 20) + b"z" * 70_000 + b"\nb\n"
    r = zeps_bytes("publish", "big", "k", "--confirm", "--endpoint", broker.endpoint, input=lines)
    assert r.returncode == 1, r.stderr
    err = r.stderr.decode()
    assert "Traceback" not in err and "line 2: " in err and "max-message" in err, err
    r = zeps("replay", "big", "--endpoint", broker.endpoint, "--format", "raw")
    assert r.returncode == 0 and r.stdout.split() == ["a", "b"], r.stderr


def test_a_bad_zeps_monitor_is_an_error_of_top_alone():
    """$ZEPS_MONITOR was parsed when the parser was made: every command died of it."""
    env = dict(ENV, ZEPS_MONITOR="bogus:xx")
    assert zeps("publish", "--help", env=env).returncode == 0
    r = zeps("top", "--once", env=env)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "bad port" in r.stderr


def test_unknown_stream_in_data_dir_exits_2(broker):
    zeps("publish", "real", "k", "v", "--endpoint", broker.endpoint)
    broker.stop()
    r = zeps("replay", "missing", "--data-dir", broker.data_dir)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"zeps: error: no stream 'missing' in {broker.data_dir} (streams: real)")
    r = zeps("stats", "missing", "--data-dir", broker.data_dir)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1


def test_publish_no_body_and_tty_stdin_is_usage_error():
    # Simulate "no BODY, stdin is a terminal" with a pty.
    import pty
    master, slave = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "zeps", "publish", "s", "k"], stdin=slave,
                           capture_output=True, text=True, timeout=30, cwd=str(REPO), env=ENV)
    finally:
        os.close(slave)
        os.close(master)
    assert r.returncode == 2 and "stdin is a terminal" in r.stderr
    assert len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize("cmd", [["publish", "s", "k", "v"], ["subscribe", "s"],
                                 ["stats"], ["replay", "s"]])
def test_unreachable_broker_exits_1_with_one_line(cmd):
    ep = free_endpoint()
    t = time.monotonic()
    r = zeps(*cmd, "--endpoint", ep, "--connect-timeout", "0.3")
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [f"zeps: error: no answer from a ZEPS broker at {ep} within "
                                     f"0.3s (is it running?)"]
    assert time.monotonic() - t < 10


def test_endpoint_from_environment(broker):
    env = dict(ENV, ZEPS_ENDPOINT=broker.endpoint)
    r = zeps("publish", "s", "k", "v", "--confirm", env=env)
    assert r.returncode == 0 and r.stdout.strip() == "1"


# ------------------------------------------------------------------ time arguments

def test_parse_time_forms():
    now = 1_800_000_000 * 10**9
    assert parse_time("now", now) == now
    assert parse_time("-30s", now) == now - 30 * 10**9
    assert parse_time("-5m", now) == now - 300 * 10**9
    assert parse_time("-2h", now) == now - 7200 * 10**9
    assert parse_time("-500ms", now) == now - 500 * 10**6
    assert parse_time("1700000000") == 1_700_000_000 * 10**9
    assert parse_time("1700000000.25") == 1_700_000_000_250_000_000
    assert parse_time("2026-11-22T10:00:00Z") == parse_time("2026-11-22T11:00:00+01:00")
    assert parse_time("5 minutes ago", now) == parse_time("now-5m", now) == now - 300 * 10**9
    assert parse_time("1970-01-01T00:00:01Z") == 10**9


def test_rejected_publish_exits_1_with_the_broker_reason(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--max-message", "10")
    for extra in ([], ["--confirm"]):
        r = zeps("publish", "s", "k", "this body is too long", *extra, "--endpoint", b.endpoint)
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.splitlines() == ["zeps: error: broker rejected PUBLISH: body of 21 bytes "
                                         "is over the broker's limit of 10"]


def test_cli_reference_is_generated_from_the_parsers():
    from zeps.cli.reference import render
    assert (REPO / "docs" / "cli.md").read_text() == render(), \
        "docs/cli.md is stale: run python -m zeps.cli.reference > docs/cli.md"


def test_bench_against_a_running_broker(broker):
    r = zeps("bench", "b", "--msgs", "2000", "--sub", "2", "--json", "--endpoint",
             broker.endpoint, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["messages"] == 2000 and report["publish_msgs_per_s"] > 0
    assert report["deliver_msgs_per_s"] > 0 and report["latency_ms"]["p50"] is not None
    r = zeps("stats", "b", "--json", "--endpoint", broker.endpoint)
    assert json_lines(r.stdout)[0]["last"] == 2000          # every message went through the broker


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv to drop root's file rights")
@pytest.mark.parametrize("cmd", [["stats"], ["replay", "s"]])
def test_an_unreadable_data_dir_is_one_line_and_exit_1(tmp_path, cmd):
    d = tmp_path / "d"
    (d / "s").mkdir(parents=True)
    d.chmod(0)
    try:        # root reads anything: drop the capabilities that let it (as the journal tests do)
        r = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
                            sys.executable, "-m", "zeps", *cmd, "--data-dir", str(d)],
                           capture_output=True, text=True, timeout=30, cwd=str(REPO), env=ENV)
    finally:
        d.chmod(0o755)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "Permission denied" in r.stderr and "Traceback" not in r.stderr


def _sigint_as_a_terminal_sends_it() -> None:
    """In the child, before exec: SIGINT back to its default, so that Python makes it
    KeyboardInterrupt even when this test run was started in the background (a shell without
    job control starts background commands with SIGINT ignored, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_the_broker_says_when_its_open_files_limit_is_too_low(tmp_path):
    """At the open files limit the broker does not refuse a connection: libzmq tries accept()
    again at once, its I/O thread at 100% CPU (found by review). The broker says at start that
    the limit is below what its options may take."""
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    for clients, warned in (("10000", True), ("100", False)):
        p = subprocess.Popen([sys.executable, "-m", "zeps", "broker", "--endpoint",
                              "tcp://127.0.0.1:*", "--data-dir", str(tmp_path / clients),
                              "--max-clients", clients, "--max-open-streams", "10"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=str(REPO), env=ENV, preexec_fn=low_limit)
        try:
            assert "listening on" in p.stdout.readline()
        finally:
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=30)
        assert ("open_files_limit" in err) == warned, err
        if warned:
            assert "limit=256" in err and "ulimit -n" in err, err


def test_bad_environment_defaults_are_one_line_or_the_default():
    """$ZEPS_ENDPOINT that is not an endpoint was a traceback in zeps stats and zeps replay, and
    $ZEPS_TIMEOUT=inf one in every command that connects (found by review)."""
    env = dict(ENV, ZEPS_ENDPOINT="foo")
    for args in (("stats",), ("replay", "s")):
        r = zeps(*args, env=env)
        assert r.returncode == 2 and r.stderr.startswith("zeps: error: $ZEPS_ENDPOINT"), r.stderr
        assert len(r.stderr.splitlines()) == 1
    from zeps.cli.common import _env_timeout
    for value, expected in (("inf", 10.0), ("1e300", 10.0), ("nan", 10.0), ("2.5", 2.5)):
        os.environ["ZEPS_TIMEOUT"] = value
        try:
            assert _env_timeout() == expected, value
        finally:
            del os.environ["ZEPS_TIMEOUT"]


def test_a_key_with_a_newline_is_one_line_of_text_output():
    """A key holding a newline printed a line that looked like another message."""
    from zeps.cli.common import message_line
    from zeps.clients.message import Message
    assert message_line(Message(1, "line1\nFAKE 999 x", b"body")) == "1 line1\\nFAKE 999 x body"


def test_bench_against_a_broker_that_is_down_says_so_in_one_line():
    """Each child printed its traceback, then the parent its own after 32 s (found by review)."""
    r = zeps("bench", "--endpoint", "tcp://127.0.0.1:1", "--connect-timeout", "1", "--msgs", "10")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "no answer from a ZEPS broker" in r.stderr and "Traceback" not in r.stderr


def test_seconds_options_take_durations_as_the_others_do():
    """--timeout 1m was refused ("not a number of seconds") where --retention-age 1m is taken,
    and --timeout 1ss was taken for 1 s (found by review)."""
    import argparse
    from zeps.cli.common import _seconds
    assert [_seconds(t) for t in ("1m", "30s", "500ms", ".5", "2")] == [60.0, 30.0, 0.5, 0.5, 2.0]
    for bad in ("1ss", "0", "nan", "inf", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            _seconds(bad)
