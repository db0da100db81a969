"""Multicast end to end: a real broker, bridge and receivers in a private network namespace.

Each test runs one scenario of tests/multicast_scenario.py under ``unshare -n`` (loopback up,
224.0.0.0/4 routed to it), so no datagram ever reaches a shared interface, and asserts on what
the scenario's receivers handed to their applications, compared with the journal on disk.
Where the namespace cannot be created, the tests are skipped with the reason.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sessions import run_in_session

REPO = Path(__file__).resolve().parent.parent
NETNS = "ip link set lo up && ip route add 224.0.0.0/4 dev lo"


def _namespace_problem():
    """Why a private network namespace with multicast on loopback cannot be made, or None."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed"
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", NETNS], capture_output=True, text=True,
                           timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare -n failed: {e}"
    if p.returncode != 0:
        return (f"'unshare -n sh -c \"{NETNS}\"' failed with status {p.returncode}: "
                f"{p.stderr.strip()} (needs root or CAP_SYS_ADMIN + CAP_NET_ADMIN)")
    return None


@pytest.fixture(scope="module")
def netns():
    why = _namespace_problem()
    if why:
        pytest.skip(f"no private network namespace for multicast tests: {why}")


def scenario(name, tmp_path, timeout=240):
    """Run scenario ``name`` in a namespace and a session of its own; on timeout the whole
    session (its broker, bridges, children) is killed, and the test fails."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = f"{NETNS} && exec {sys.executable} tests/multicast_scenario.py {name} {tmp_path}"
    p = run_in_session(["unshare", "-n", "sh", "-c", cmd], timeout=timeout,
                       what=f"scenario {name}", env=env, cwd=str(REPO))
    assert p.returncode == 0, f"scenario {name} failed:\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def check_whole(receiver, journal):
    """What the application got is exactly the journal (sequence, key, body, timestamp)."""
    assert receiver["error"] is None
    got = receiver["messages"]
    assert [m[0] for m in got] == [m[0] for m in journal]        # no gap, no duplicate, in order
    assert got == journal


pytestmark = pytest.mark.usefixtures("netns")


def test_ordered_delivery_to_several_receivers_and_a_pattern(tmp_path):
    r = scenario("ordered", tmp_path)
    eu = r["journal_eu"]
    assert len(eu) == 400 and {m[1] for m in eu} == {"eu.fr"}
    assert r["cli_rc"] == [0, 0, 0]
    for lines, err in zip(r["cli"], r["cli_stderr"]):            # zeps subscribe --json lines
        assert [[x["sequence"], x["key"], x["body"], x["timestamp"]] for x in lines] == eu
        stats = dict(re.findall(r"(\w+)=(\d+)", err.splitlines()[-1]))
        assert int(stats["multicast"]) > 0                       # live data came by multicast
        assert int(stats["foreign"]) == 0
    # A receiver of another pattern takes none of that bridge's datagrams (counted as
    # foreign) and gets its messages from the broker.
    other = r["other"]
    check_whole(other, r["journal_us"])
    assert other["stats"]["foreign"] > 0 and other["stats"]["multicast"] == 0
    assert other["mode"] == "fallback" and other["fallback_reason"] == "pattern"
    assert other["stats"]["fallbacks_pattern"] == other["stats"]["fallbacks"] == 1
    # A receiver that stopped reading lost datagrams in its own buffer, cost the others nothing,
    # and still hands everything once it reads again.
    stalled = r["stalled"]
    check_whole(stalled, eu)
    assert stalled["stats"]["lost"] > 0 and stalled["stats"]["unicast"] > 0


def test_a_receiver_off_the_bridge_s_pattern_says_why_it_fell_back(tmp_path):
    """Issue 17 item 9: a bridge without --pattern, a receiver on eu.: it used to fall back to
    the broker silently. It warns once, naming both patterns, and -v's counters say it too."""
    r = scenario("pattern_mismatch", tmp_path)
    assert r["rc"] == 0, r["stderr"]
    assert [[x["sequence"], x["key"], x["body"], x["timestamp"]] for x in r["lines"]] == \
        r["journal_eu"]
    err = r["stderr"]
    assert err.count("falling back") == 1, err
    warning = next(line for line in err.splitlines() if "falling back" in line)
    assert "stream 's' pattern 'eu.' on 239.192.7.7:7777" in warning
    assert "(pattern): no datagram for pattern 'eu.'" in warning
    assert "from a bridge with pattern ''" in warning and "--pattern 'eu.'" in warning
    stats = dict(re.findall(r"(\w+)=(\d+)", err.splitlines()[-1]))
    assert stats["fallbacks_pattern"] == stats["fallbacks"] == "1"
    assert int(stats["other_pattern"]) > 0 and stats["multicast"] == "0"


def test_induced_loss_is_repaired_from_the_broker_also_at_the_tail(tmp_path):
    r = scenario("loss", tmp_path)
    check_whole(r["r"], r["journal"])
    assert len(r["journal"]) == 300
    st = r["r"]["stats"]
    assert st["repairs"] >= 1 and st["lost"] >= 3
    assert st["unicast"] >= 6            # at least the dropped ones, 298-300 after the last data
    assert st["multicast"] > 0


def test_the_asyncio_receiver_repairs_loss_too(tmp_path):
    r = scenario("asyncio_loss", tmp_path)
    check_whole(r["r"], r["journal"])
    assert len(r["journal"]) == 300
    st = r["r"]["stats"]
    assert st["repairs"] >= 1 and st["lost"] >= 3 and st["unicast"] >= 6 and st["multicast"] > 0


def test_reordered_and_duplicated_datagrams(tmp_path):
    r = scenario("reorder_dup", tmp_path)
    check_whole(r["r"], r["journal"])
    st = r["r"]["stats"]
    assert st["duplicates"] >= 2 and st["reordered"] >= 2
    assert st["repairs"] == 0 and st["unicast"] == 0              # all by multicast


def test_a_late_receiver_gets_history_then_live(tmp_path):
    r = scenario("late_join", tmp_path)
    check_whole(r["r"], r["journal"])
    assert len(r["journal"]) == 800
    history, end = r["after_history"], r["r"]["stats"]
    assert history["unicast"] == 400 and history["multicast"] == 0
    assert end["multicast"] > 0                                  # live data by multicast


def test_bridge_restart_with_and_without_state(tmp_path):
    r = scenario("bridge_restart", tmp_path)
    check_whole(r["r"], r["journal"])
    assert len(r["journal"]) == 450
    assert r["rc"][0] == 0 and r["saved"]["head"] == 100          # clean stop wrote its state
    assert r["ready"][0].endswith("after sequence 0")
    assert r["ready"][1].endswith("after sequence 100")           # resumed from the state file
    assert r["ready"][2].endswith("after sequence 350")           # no state: live


def test_broker_restart_under_a_running_bridge(tmp_path):
    r = scenario("broker_restart", tmp_path)
    check_whole(r["r"], r["journal"])
    assert len(r["journal"]) == 200
    assert r["bridge_alive"] and r["bridge_rc"] == 0
    assert "error" not in r["bridge_stderr"].lower()


def test_foreign_and_malformed_datagrams_are_counted_and_ignored(tmp_path):
    r = scenario("hostile", tmp_path)
    check_whole(r["r"], r["journal"])
    assert len(r["journal"]) == 200
    st = r["r"]["stats"]
    assert st["foreign"] == r["sent_foreign"] and st["malformed"] == r["sent_malformed"]


def test_forged_datagrams_beside_the_bridge_cost_no_gap_no_stall_no_lasting_fallback(tmp_path):
    """Issue 15 #7: an entry 2^64-1 was handed and nothing came after it; an entry 50 ahead
    skipped 49 real messages; forged HEADs kept receivers on the broker for good."""
    r = scenario("forged", tmp_path)
    check_whole(r["r"], r["journal"])           # no forged message, no gap, nothing after stalled
    assert len(r["journal"]) == r["busy"]["batches"] * 10 + 70
    assert r["after_first"]["forged"] >= 3 and r["after_first"]["multicast"] == 20
    busy = r["busy"]
    assert busy["returned_after"] < 300, busy   # back on multicast, feed closed, while forging
    assert busy["returned"]["fallbacks"] <= 1   # the HEAD in the bridge's session, once
    assert busy["modes"] == [["multicast", False]] * 30     # 30 forged batches: no effect
    assert busy["end"]["fallbacks"] == busy["returned"]["fallbacks"]
    assert busy["end"]["forged"] >= busy["returned"]["forged"] + 30
    st = r["r"]["stats"]
    assert st["checks"] > 0 and st["deceived"] == 0
    assert r["r"]["mode"] == "multicast"


def test_sustained_loss_falls_back_to_the_broker_and_returns(tmp_path):
    r = scenario("fallback", tmp_path)
    check_whole(r["r"], r["journal"])
    during, end = r["during"], r["r"]["stats"]
    assert during["fallbacks"] >= 1 and during["unicast"] == 200   # all from the broker
    assert end["returns"] >= 1 and r["r"]["mode"] == "multicast"
    assert end["multicast"] > 0                                    # back on multicast


def test_messages_too_large_for_a_datagram_come_from_the_broker(tmp_path):
    r = scenario("oversize", tmp_path)
    check_whole(r["r"], r["journal"])
    assert r["r"]["stats"]["refs"] == r["big"] == 15
    assert f"{r['big']} by reference (0 with headers, the rest too large)" in r["bridge_stderr"]


def test_a_receiver_made_before_a_fork_raises_client_forked_in_the_child(tmp_path):
    """Before, the child's copy handed out what the parent held ready, then read datagrams
    from the socket it shares with the parent."""
    r = scenario("fork_child", tmp_path)
    assert r["child"] == ["next: ClientForked", "for: ClientForked", "close: returned",
                          "async next: ClientForked", "async for: ClientForked",
                          "async close: returned"]
    assert len(r["journal"]) == 200
    check_whole(r["r"], r["journal"])
    check_whole(r["ar"], r["journal"])


def test_a_stream_created_again_under_a_receiver_is_an_error_not_its_continuation(tmp_path):
    """A receiver's feed and head checks are new clients, which attached to whatever stream
    had the name: after a delete and create, the receivers handed the new stream's messages
    6, 7, 8 after the old 1..5 (its 1..5 skipped), silently. They raise StreamRecreated, as a
    subscription of the SDK does."""
    r = scenario("recreated", tmp_path)
    assert r["bridge_rc"] == 1
    for name in ("r", "ar"):
        got = r[name]
        assert [(m[0], m[2]) for m in got["messages"]] == [(i + 1, f"m{i}") for i in range(5)]
        assert got["error"] is not None and got["error"].startswith("StreamRecreated("), got
