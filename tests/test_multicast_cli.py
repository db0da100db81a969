"""Bad arguments to the multicast commands and to MulticastSubscriber: one clear line, exit 2
(ValueError in Python), and nothing sent -- every case here fails before a socket is opened,
or (a stopped bridge) before the broker answers, and a bridge sends nothing before that."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zeps.clients import MulticastSubscriber
from zeps.multicast import parse_group

from .multicast_scenario import wait_until

REPO = Path(__file__).resolve().parent.parent
BRIDGE = ["bridge", "--stream", "s", "--endpoint", "tcp://127.0.0.1:1"]


def run(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "zeps.multicast", *args], capture_output=True,
                          text=True, env=env, cwd=str(REPO), timeout=60, check=False)


@pytest.mark.parametrize("args, message", [
    ([*BRIDGE, "--group", "10.1.2.3:5000"], "10.1.2.3 is not a multicast address"),
    ([*BRIDGE, "--group", "239.1.2.3"], "expected ADDRESS:PORT"),
    ([*BRIDGE, "--group", "239.1.2.3:70000"], "port must be from 1 to 65535"),
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--ttl", "300"], "TTL must be from 0 to 255"),
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--interface", "eth0"], "bad interface 'eth0'"),
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--max-datagram", "20"],
     "datagram size must be from 42 (for this stream and pattern)"),
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--pattern", "~(("], "bad regular expression"),
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--head-interval", "0s"], "must be more than zero"),
    # past 2^64-1: the codec's traceback, exit 1 (2^64 itself: a bridge that never sent)
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--from-seq", str(2**64)],
     "argument --from-seq: must be at most 18446744073709551615"),
    ([*BRIDGE, "--group", "239.1.2.3:5000", "--from-seq", "0"], "must be more than zero"),
    (["bridge", "--group", "239.1.2.3:5000"], "the following arguments are required: --stream"),
    (["subscribe", "s", "--multicast", "1.2.3.4:5"], "1.2.3.4 is not a multicast address"),
    (["subscribe", "s", "a.", "b.", "--multicast", "239.1.2.3:5000"],
     "--multicast takes one PATTERN (the bridge's)"),
    (["subscribe", "s", "--endpoint", "tcp://127.0.0.1:1"], "--multicast ADDR:PORT is required"),
    (["subscribe", "s", "--multicast", "239.1.2.3:5000", "--live", "--from-seq", "3"],
     "not allowed with argument"),
    (["launch"], "a command is required: bridge, subscribe"),
])
def test_bad_arguments_one_line_exit_2(args, message):
    p = run(*args)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("zeps: error: ")
    assert message in p.stderr
    assert p.stdout == ""


def test_unusable_state_file_exit_1(tmp_path):
    state = tmp_path / "state"
    state.write_text("not json")
    p = run(*BRIDGE, "--group", "239.1.2.3:5000", "--state-file", str(state))
    assert p.returncode == 1 and p.stderr.startswith("zeps: error: cannot read state file")
    state.write_text(json.dumps({"version": 1, "stream": "other", "pattern": "", "head": 5}))
    p = run(*BRIDGE, "--group", "239.1.2.3:5000", "--state-file", str(state))
    assert p.returncode == 1
    assert "belongs to stream 'other' pattern '', not stream 's' pattern ''" in p.stderr
    state.write_text(json.dumps({"version": 1, "stream": "s", "pattern": "", "head": 2**64}))
    p = run(*BRIDGE, "--group", "239.1.2.3:5000", "--state-file", str(state))
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert "is not a bridge state" in p.stderr


def test_bridge_from_seq_within_the_wire():
    from zeps.multicast import Bridge
    for bad in (0, 2**64, True, "3"):
        with pytest.raises(ValueError, match="from_seq must be an integer from 1 to 2"):
            Bridge("tcp://127.0.0.1:1", "s", "239.1.2.3:5000", from_seq=bad)
    assert Bridge("tcp://127.0.0.1:1", "s", "239.1.2.3:5000", from_seq=2**64 - 1).from_seq


def test_a_state_file_that_cannot_be_written_is_said_once_not_at_every_head(tmp_path, caplog):
    """The bridge writes its state file at every HEAD (each second by default): one that could
    not be written logged a warning each time. Now once, again when the reason changes, and
    once more when it can be written again."""
    from zeps.multicast import Bridge
    where = tmp_path / "gone"
    b = Bridge("tcp://127.0.0.1:1", "s", "239.1.2.3:5000", state_file=str(where / "state"))
    said = lambda: [r.getMessage() for r in caplog.records]  # noqa: E731
    with caplog.at_level("WARNING", logger="zeps.bridge"):
        for head in range(1, 6):
            b._write_state(head)
        assert len(said()) == 1 and "cannot write state file" in said()[0]
        where.mkdir()
        b._write_state(6)
        b._write_state(7)
        assert len(said()) == 2 and "written again (sequence 6)" in said()[1]
        assert json.loads((where / "state").read_text())["head"] == 7
        (where / "state.tmp").mkdir()             # the next write's file: a directory
        b._write_state(8)
        b._write_state(9)
        assert len(said()) == 3 and "cannot write state file" in said()[2]


@pytest.mark.parametrize("kwargs, message", [
    ({"group": "239.1.2.3"}, "expected ADDRESS:PORT"),
    ({"pattern": "~(("}, "bad regular expression"),
    ({"from_seq": 3, "live": True}, "at most one of from_seq, from_time, live"),
    ({"from_seq": -1}, "from_seq must be an integer from 0 to 2^64-1"),
    ({"from_seq": 2**64}, "from_seq must be an integer from 0 to 2^64-1"),
    ({"interface": "lo"}, "bad interface 'lo'"),
])
def test_subscriber_arguments(kwargs, message):
    args = {"group": "239.1.2.3:5000", "endpoint": "tcp://127.0.0.1:1", "stream": "s"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        MulticastSubscriber(**args)


def test_parse_group():
    assert parse_group("239.1.2.3:5000") == ("239.1.2.3", 5000)
    assert parse_group(("224.0.0.251", 5353)) == ("224.0.0.251", 5353)
    with pytest.raises(ValueError, match="not an IPv4 address"):
        parse_group("[ff02::1]:5000")


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (Python has none by default: the
    bridge's own is installed)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            caught = next(line for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_bridge_stops_at_once_while_waiting_for_the_broker(sig, status):
    """Ctrl-C (or SIGTERM) while the bridge waited for a broker that does not answer was
    ignored until --connect-timeout ran out, then the bridge exited 1 with the timeout's
    error. Nothing is sent: the bridge sends nothing before the broker answers."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "zeps", "bridge", "multicast", "--stream", "s",
                          "--group", "239.1.2.3:5000", "--interface", "127.0.0.1",
                          "--endpoint", "tcp://127.0.0.1:1", "--connect-timeout", "600"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=str(REPO))
    try:
        wait_until(lambda: _catches_sigterm(p.pid) or p.poll() is not None,
                   "the bridge's signal handlers", 60)
        assert p.poll() is None, p.communicate()
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == status, err
    assert err == "zeps bridge: stopped before it started sending\n" and out == ""
