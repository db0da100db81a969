"""``zeps consumer add|info|ls|rm`` and ``zeps consume`` (issue 19): bad arguments (in process:
one line, exit 2), then against a real broker: add, ls, info as a table and as JSON, consume
acknowledging each message (a second consume goes on after them), --no-ack (they come again),
rm, and a missing stream (exit 2)."""
from __future__ import annotations

import json

import pytest

from tests.measure import wait_for
from tests.test_cli import zeps
from zeps.cli import main
from zeps.clients import Client


def run_in_process(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args", [
    ["consumer", "add", "s", "bad name"],
    ["consumer", "add", "s", ".hidden"],
    ["consumer", "add", "s", "w", "--from", "3", "--new"],
    ["consumer", "add", "s", "w", "--since", "whenever"],
    ["consumer", "add", "s", "w", "--ack", "some"],
    ["consumer", "add", "s", "w", "--ack-wait", "0"],
    ["consumer", "add", "s", "w", "--max-deliver", "-1"],
    ["consumer", "add", "s", "w", "--max-ack-pending", "70000"],
    ["consumer", "add", "s", "w", "--pattern", "~("],
    ["consumer", "add", "s"],
    ["consumer", "info", "s"],
    ["consumer", "frob", "s", "w"],
    ["consumer"],
    ["consume", "s"],
    ["consume", "s", "w", "--count", "0"],
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, args):
    code, out, err = run_in_process(capsys, *args)
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("zeps: error:"), err
    assert out == ""


def test_add_info_ls_consume_rm(start_broker):
    b = start_broker()
    ep = ("--endpoint", b.endpoint)
    r = zeps("consumer", "add", "s", "w", *ep)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "no stream" in r.stderr
    with Client(b.endpoint, "s", confirms=True) as pub:
        for i in range(5):
            pub.publish(f"k.{i}", f"v{i}".encode())
        pub.publish("other", b"x")
        pub.wait_for_confirms(10)
    r = zeps("consumer", "add", "s", "w", "--pattern", "k.", "--ack-wait", "20", "--key-order",
             *ep)
    assert (r.returncode, r.stdout) == (0, "1\n"), r.stderr
    assert zeps("consumer", "add", "s", "late", "--new", *ep).stdout == "7\n"
    assert zeps("consumer", "ls", "s", *ep).stdout == "late\nw\n"
    table = zeps("consumer", "info", "s", "w", *ep).stdout
    assert "ack_wait_s       20\n" in table and "key_order        yes\n" in table
    assert "patterns         'k.'\n" in table and "lag              6\n" in table
    r = zeps("consume", "s", "w", "--count", "2", *ep)
    assert (r.returncode, r.stdout) == (0, "1 k.0 v0\n2 k.1 v1\n"), r.stderr
    r = zeps("consume", "s", "w", "--count", "1", "--no-ack", "--json", *ep)
    assert [json.loads(x)["sequence"] for x in r.stdout.splitlines()] == [3]
    r = zeps("consume", "s", "w", "--count", "3", *ep)     # 3 again: it was not acknowledged
    assert r.stdout.splitlines() == ["3 k.2 v2", "4 k.3 v3", "5 k.4 v4"], r.stderr
    info = json.loads(zeps("consumer", "info", "s", "w", "--json", *ep).stdout)
    assert info["floor"] >= 5 and info["config"]["patterns"] == ["k."]
    assert zeps("consumer", "rm", "s", "late", *ep).returncode == 0
    assert zeps("consumer", "ls", "s", *ep).stdout == "w\n"
    r = zeps("consumer", "info", "s", "late", *ep)
    assert r.returncode == 1 and "no consumer" in r.stderr and len(r.stderr.splitlines()) == 1


def test_consume_ctrl_c_exits_130_and_the_message_printed_is_acknowledged(start_broker):
    import signal
    import subprocess
    import sys

    from tests.test_cli import ENV, REPO, _sigint_as_a_terminal_sends_it
    b = start_broker()
    ep = ("--endpoint", b.endpoint)
    assert zeps("publish", "s", "k", "first", *ep).returncode == 0
    assert zeps("consumer", "add", "s", "w", *ep).returncode == 0
    p = subprocess.Popen([sys.executable, "-m", "zeps", "consume", "s", "w", *ep],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=str(REPO), env=ENV, preexec_fn=_sigint_as_a_terminal_sends_it)
    assert p.stdout.readline() == "1 k first\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    # acknowledged once printed, sent on leaving (a loaded broker may read it a moment after
    # the CLI gave up waiting for DETACH-OK: it lingers, it does not drop it)
    info = wait_for(lambda: json.loads(zeps("consumer", "info", "s", "w", "--json", *ep).stdout),
                    lambda i: i["floor"] == 1, 10)
    assert info["floor"] == 1
