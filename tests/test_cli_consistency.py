"""The ``zeps`` commands agree with each other and say what they mean (issue 17, items 6 to 8):
one exit status for a missing stream, 130 after Ctrl-C, messages and help that read right, the
same monitoring address forms in ``broker`` and ``top``, and a whole file or stdin published as
one message. Real processes: the CLI against a real broker on 127.0.0.1."""
from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import time

from zeps.cli import _subcommands, build_parser
from zeps.cli import broker as broker_cli
from zeps.cli.top import monitor_url

from .conftest import REPO

ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
for _name in ("ZEPS_ENDPOINT", "ZEPS_MONITOR"):
    ENV.pop(_name, None)


def zeps(*args, input=None, text=True, timeout=60):
    return subprocess.run([sys.executable, "-m", "zeps", *map(str, args)], input=input,
                          capture_output=True, text=text, timeout=timeout, cwd=str(REPO), env=ENV)


def spawn(*args):
    return subprocess.Popen([sys.executable, "-m", "zeps", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(REPO), env=ENV)


_unread: dict = {}          # bytes read past the last line returned, by process


def read_line(p: subprocess.Popen, deadline_s: float = 30.0) -> str:
    """The process's next stdout line, waiting at most ``deadline_s`` (read with os.read: no
    buffered reader can hold a line select() does not see)."""
    buf = _unread.pop(p.pid, b"")
    deadline = time.monotonic() + deadline_s
    while b"\n" not in buf:
        assert time.monotonic() < deadline, "no line in time"
        ready, _, _ = select.select([p.stdout], [], [], 0.1)
        if ready:
            chunk = os.read(p.stdout.fileno(), 4096)
            assert chunk, f"exited: {p.wait()} {p.stderr.read()}"
            buf += chunk
    line, _, _unread[p.pid] = buf.partition(b"\n")
    return line.decode() + "\n"


def stop(p: subprocess.Popen, sig) -> int:
    p.send_signal(sig)
    try:
        p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode


# ------------------------------------------------------------------ item 6: exit statuses

MISSING = [
    ["subscribe", "nope", "--timeout", "0.2"],
    ["replay", "nope"],
    ["stats", "nope"],
    ["stream", "info", "nope"],
    ["stream", "purge", "nope", "--upto", "1"],
    ["stream", "delete", "nope", "--yes"],
    ["publish", "nope", "k", "v"],               # the broker runs with --auto-create no
    ["bridge", "multicast", "--stream", "nope", "--group", "239.9.9.9:5999",
     "--interface", "127.0.0.1"],
]


def test_a_missing_stream_is_exit_status_2_for_every_command(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--auto-create", "no")
    for args in MISSING:
        r = zeps(*args, "--endpoint", b.endpoint, "--connect-timeout", "5")
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and "no stream" in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("zeps: error: ") and r.stdout == "", (args, r.stderr)


def test_ctrl_c_stops_broker_and_bridge_with_130_and_sigterm_with_0(start_broker, tmp_path):
    def broker():
        p = spawn("broker", "--endpoint", "tcp://127.0.0.1:*", "--data-dir", tmp_path / "own")
        line = read_line(p)
        assert "listening on " in line, line
        return p, line.split("listening on ", 1)[1].split()[0]

    p, _ = broker()
    assert stop(p, signal.SIGINT) == 130
    p, _ = broker()
    assert stop(p, signal.SIGTERM) == 0

    b = start_broker(tmp_path / "d")
    assert zeps("stream", "create", "s", "--endpoint", b.endpoint).returncode == 0

    def bridge():
        p = spawn("bridge", "multicast", "--stream", "s", "--group", "239.9.9.9:5998",
                  "--interface", "127.0.0.1", "--endpoint", b.endpoint)
        assert read_line(p).startswith("zeps bridge: stream 's'")      # it is sending
        return p

    assert stop(bridge(), signal.SIGINT) == 130
    assert stop(bridge(), signal.SIGTERM) == 0


# ------------------------------------------------------------------ item 7: what the CLI says

def test_subscribe_and_replay_need_only_a_stream():
    for cmd in ("subscribe", "replay"):
        r = zeps(cmd)
        assert r.returncode == 2
        assert r.stderr == "zeps: error: the following arguments are required: STREAM\n"


def _parsers():
    parser = build_parser()
    commands = _subcommands(parser)
    bparser = broker_cli.Parser(prog="zeps broker")
    broker_cli.add_broker_arguments(bparser)
    commands["broker"] = bparser
    for name, p in commands.items():
        yield name, p
        for sub_name, sub in _subcommands(p).items():
            yield f"{name} {sub_name}", sub


def test_every_help_text_closes_its_brackets():
    for name, p in _parsers():
        texts = [p.description or ""] + [a.help or "" for a in p._actions]
        for text in texts:
            depth = 0
            for ch in text:
                depth += {"(": 1, ")": -1}.get(ch, 0)
                assert depth >= 0, (name, text)
            assert depth == 0, (name, text)


def test_stream_info_shows_the_values_in_force(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--retention-bytes", "5M", "--segment-bytes", "1M",
                     "--max-message", "64K")
    ep = b.endpoint
    assert zeps("stream", "create", "own", "--retention-age", "7d", "--endpoint", ep).returncode == 0
    r = zeps("stream", "info", "own", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in r.stdout.splitlines())
    assert rows["retention_bytes"] == "5242880 (broker default)"
    assert rows["retention_age_s"] == "604800"
    assert rows["max_message"] == "65536 (broker default)"
    assert rows["segment_bytes"] == "1048576 (broker default)"
    assert "(broker default)" not in rows["retention_age_s"]
    r = zeps("stream", "info", "own", "--json", "--endpoint", ep)
    obj = json.loads(r.stdout)
    assert obj["settings"]["retention_bytes"] is None                   # its own: none
    assert obj["in_force"] == {"retention_bytes": 5 << 20, "retention_age_s": 604800.0,
                               "max_message": 64 << 10, "segment_bytes": 1 << 20}


def test_stream_info_says_none_for_a_retention_the_broker_does_not_have(broker):
    zeps("publish", "s", "k", "v", "--endpoint", broker.endpoint)
    r = zeps("stream", "info", "s", "--endpoint", broker.endpoint)
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in r.stdout.splitlines())
    assert rows["retention_bytes"] == "none (broker default)"
    assert rows["retention_age_s"] == "none (broker default)"


def test_stream_purge_says_what_it_did(broker):
    ep = broker.endpoint
    zeps("publish", "s", "k", "-", "--endpoint", ep, input="1\n2\n3\n")
    r = zeps("stream", "purge", "s", "--upto", "2", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stream 's': messages up to 2 purged; the first kept is now 3\n"


def test_subscribe_past_the_head_says_where_the_head_is(broker):
    ep = broker.endpoint
    zeps("publish", "s", "k", "-", "--endpoint", ep, input="1\n2\n")
    for verbose in ([], ["-v"]):
        r = zeps("subscribe", "s", "--from-seq", "99999", "--timeout", "0.3", *verbose,
                 "--endpoint", ep)
        assert r.returncode == 0 and r.stdout == ""
        said = [line for line in r.stderr.splitlines() if "past" in line]
        assert said == ["zeps: waiting: stream 's' ends at seq 2; --from-seq 99999 is past it"]
    r = zeps("subscribe", "s", "--from-seq", "3", "--timeout", "0.3", "--endpoint", ep)
    assert r.returncode == 0 and r.stderr == ""          # the next message: nothing to say


def test_monitor_addresses_are_the_same_forms_in_broker_and_top(tmp_path):
    assert monitor_url("7471") == "http://127.0.0.1:7471"
    assert monitor_url("0.0.0.0:7471") == "http://0.0.0.0:7471"
    assert monitor_url("[::1]:7471") == "http://[::1]:7471"
    assert monitor_url("http://host:7471/") == "http://host:7471"
    p = spawn("broker", "--endpoint", "tcp://127.0.0.1:*", "--data-dir", tmp_path / "d",
              "--monitor", "http://127.0.0.1:0")
    try:
        assert "listening on " in read_line(p)
        line = read_line(p)
        assert line.startswith("monitoring on http://127.0.0.1:"), line
        port = line.strip().rsplit(":", 1)[1]
        for form in (port, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"):
            r = zeps("top", "--monitor", form, "--once", "--interval", "0.05")
            assert r.returncode == 0, (form, r.stderr)
            assert r.stdout.startswith("ZEPS "), (form, r.stdout)
    finally:
        assert stop(p, signal.SIGTERM) == 0


# ------------------------------------------------------------------ item 8: one message from a file

def test_a_file_or_stdin_is_published_as_one_message(broker, tmp_path):
    ep = broker.endpoint
    body = random.Random(17).randbytes(3000)
    assert body.count(b"\n") > 1                           # lines would have cut it
    r = zeps("publish", "bin", "k", "--body-file", "-", "--confirm", "--endpoint", ep,
             input=body, text=False)
    assert r.returncode == 0 and r.stdout.strip() == b"1", r.stderr
    f = tmp_path / "body.bin"
    f.write_bytes(body[::-1])
    r = zeps("publish", "bin", "k2", "--body-file", f, "--confirm", "--endpoint", ep)
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr
    r = zeps("publish", "bin", "k3", "--body-file", tmp_path / "empty", "--endpoint", ep)
    assert r.returncode == 2 and r.stderr.startswith("zeps: error: cannot read")
    r = zeps("publish", "bin", "k", "b", "--body-file", f, "--endpoint", ep)
    assert r.returncode == 2 and "--body-file" in r.stderr
    r = zeps("replay", "bin", "--format", "raw", "--raw-separator", "", "--endpoint", ep,
             text=False)
    assert r.returncode == 0 and r.stdout == body + body[::-1]
