"""Every benchmark runs and reports (tiny counts): ``make bench`` must not rot between runs.

The figures themselves are measured by ``make bench``, never asserted here. Each scenario of
the suite runs once (``--quick``) and must print a figure for ZEPS; each peer's figures must be
there too, and a peer that is not installed on this machine skips its test with the reason the
report gives. Without any peer on the PATH the report must say so instead of leaving a blank.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import peers
from bench.suite import SCENARIOS

REPO = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"\d[\d,.]*( \([\d,.]+–[\d,.]+\))? (msg/s|ms|MiB)")

#: scenario -> {peer (bench.peers.NEEDS key): label of its column or row in the report}
PEERS = {
    "ingest": {"redis": "Redis, redis-py pipeline of 100 XADD (every XADD answered)",
               "nats": "JetStream, nats-py nc.publish() (core, no ack)",
               "redis-benchmark": "redis-benchmark -P 100 XADD, one connection per publisher"},
    "fanout": {"redis": "Redis, redis-py XREAD by 1000",
               "nats": "JetStream, nats-py ordered push consumer"},
    "replay": {"redis": "Redis, redis-py XREAD by 1000",
               "nats": "JetStream, nats-py ordered push consumer"},
    "latency": {"redis": "Redis, redis-py", "nats": "JetStream, nats-py"},
    "zero_credit": {},
    "routing": {},
    "replay_start": {"redis-benchmark": "Redis", "nats": "JetStream"},
    "clients_rss": {"redis": "Redis", "nats": "JetStream"},
}
ZEPS = {"ingest": "ZEPS SDK, publish_batch(100), no confirms", "fanout": "ZEPS SDK, next()",
        "replay": "ZEPS SDK, next()", "latency": "ZEPS SDK", "zero_credit": "SDK publish rate",
        "routing": "delivered msg/s", "replay_start": "ZEPS", "clients_rss": "ZEPS"}


@pytest.mark.parametrize("name", ["bench_codec", "bench_columns", "bench_journal", "bench_broker",
                                  "bench_client", "bench_redis_py", "bench_latency", "bench_wakeup",
                                  "bench_roll", "bench_stages", "bench_cold", "bench_timers",
                                  "bench_fanout", "bench_busy",
                                  "bench_single",
                                  "bench_kv_index", "bench_kv_snapshot", "bench_consumers"])
def test_benchmark_runs_and_reports_a_table(name, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--only", name],
                          cwd=str(REPO), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = [line for line in proc.stdout.splitlines()
               if re.search(r"\|\s*[\d,.]+\s*\|", line) or re.search(r"\d[\d,.]*\s*\w+/s\b", line)]
    assert figures, "no figure in the output:\n" + proc.stdout[-3000:]
    assert f"=== {name}: exit 0" in proc.stdout


def test_bench_hiccups_gives_each_cpu_and_all_at_once_in_each_mode():
    """bench_hiccups runs and reports a row for each CPU and for all CPUs at once, in both
    modes (``SCHED_FIFO`` where the system allows it, else a row saying why not)."""
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--only",
                           "bench_hiccups"], cwd=str(REPO), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    for cpu in sorted(os.sched_getaffinity(0)):
        assert any(re.match(rf"\| normal \| {cpu} \|( ([\d.]+%?|—) \|){{7}}$", r) for r in rows), rows
    assert any(r.startswith("| normal | all at once | ") for r in rows), rows
    assert any(r.startswith("| fifo | all at once | ") or r.startswith("| fifo | — | not measured")
               for r in rows), rows


def test_bench_sub_cost_gives_every_subscriber_its_figures():
    """bench_sub_cost runs and reports (in place of the generic check above, whose figure pattern
    its ``median (min–max)`` cells without a unit do not match: it passed on the heading's rate
    alone): each of its three subscribers has a row whose five cells are figures."""
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--only",
                           "bench_sub_cost"], cwd=str(REPO), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {row["subscriber"]: row for t in tables(proc.stdout) for row in t
            if "subscriber" in row}
    assert "=== bench_sub_cost: exit 0" in proc.stdout
    assert set(rows) == {"raw", "raw + 15 µs burnt per message", "sdk"}, proc.stdout[-3000:]
    cell = re.compile(r"\d[\d,.]* \([\d,.]+–[\d,.]+\)")
    for name, row in rows.items():
        figures = [v for k, v in row.items() if k != "subscriber"]
        assert len(figures) == 5 and all(cell.fullmatch(v) for v in figures), (name, row)


def test_bench_tail_gives_every_system_its_row():
    """bench_tail runs and reports (the generic check above would pass on its heading's rate
    alone): a row for each of the three systems, with its percentiles and stall figures."""
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--only",
                           "bench_tail"], cwd=str(REPO), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "=== bench_tail: exit 0" in proc.stdout
    rows = {row["system"]: row for t in tables(proc.stdout) for row in t if "system" in row}
    assert set(rows) == {"ZEPS SDK", "ZEPS, raw pyzmq", "ZeroMQ XSUB/XPUB proxy"}, proc.stdout
    for name, row in rows.items():
        assert row["run"] == "1", row
        for column in ("p99", "p99.9", "stalls per s"):
            assert re.fullmatch(r"\d+\.\d+", row[column]), (name, column, row)
        assert re.fullmatch(r"\d+\.\d\d%", row["messages in stalls"]), (name, row)


FLOOR_PATHS = {"ZEPS SDK", "ZEPS, raw pyzmq", "forwarder in pyzmq + gevent",
               "forwarder in the broker's loop style (hub callbacks)",
               "forwarder in pyzmq + gevent, +10 µs CPU per message",
               "forwarder in pyzmq + gevent, +20 µs CPU per message", "ZeroMQ XSUB/XPUB proxy"}
STALLS_PATHS = {"ZEPS SDK", "ZeroMQ XSUB/XPUB proxy"}
CLIENTS_PATHS = {"ZEPS SDK", "ZEPS, raw pyzmq", "ZEPS, SDK publisher, raw subscriber",
                 "ZEPS, raw publisher, SDK subscriber", "ZeroMQ XSUB/XPUB proxy"}
WRITE_PATHS = {"ZEPS SDK", "forwarder in the broker's loop style (hub callbacks)",
               "the same forwarder, writing each message to a file", "ZeroMQ XSUB/XPUB proxy"}
POLL_PATHS = {"ZEPS SDK", "forwarder waiting on the hub per message",
              "forwarder in the broker's loop style (hub callbacks)",
              "forwarder waiting in zmq_poll", "ZeroMQ XSUB/XPUB proxy"}


@pytest.mark.parametrize("name, paths", [("bench_stages_floor", FLOOR_PATHS),
                                         ("bench_stages_poll", POLL_PATHS),
                                         ("bench_stages_stalls", STALLS_PATHS),
                                         ("bench_stages_clients", CLIENTS_PATHS),
                                         ("bench_stages_write", WRITE_PATHS)])
def test_bench_stages_tables_give_each_path_its_row(name, paths):
    """The tables of ``bench_stages --table``: a median row for each path it runs (the broker
    with the SDK's and raw clients; the forwarder in the broker's stack: in its loop style,
    waiting on the hub per message, waiting in zmq_poll, with zmq.green, and burning CPU; the
    broker with the SDK's publisher and a raw subscriber, and the other way round; the
    loop-style forwarder writing each message to a file; the proxy), each with figures, the
    proxy's p99 over its own 1.00."""
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--only", name],
                          cwd=str(REPO), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    medians = {row["path"]: row for t in tables(proc.stdout) for row in t
               if row.get("run") == "median"}
    assert set(medians) == paths, proc.stdout[-3000:]
    for path, row in medians.items():
        for column in ("p50", "p99", "p99.9", "CPU: middle", "its main thread",
                       "its ZeroMQ threads", "CPU: subscriber"):
            assert re.fullmatch(r"\d[\d,]*(\.\d)?", row[column]), (path, column, row)
        assert re.fullmatch(r"\d+(\.\d+)? \(\d+\.\d\)",
                            row["publisher's stalls (longest, ms)"]), (path, row)
    assert medians["ZeroMQ XSUB/XPUB proxy"]["p99 ÷ proxy's"] == "1.00"


def tables(report: str):
    """Every markdown table of a report as a list of {column: cell} rows."""
    out = []
    lines = report.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            cols = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("| "):
                    break
                rows.append(dict(zip(cols, (c.strip() for c in row.strip("|").split("|")))))
            out.append(rows)
    return out


def figures_of(report: str, label: str):
    """Cells holding a figure in a column named ``label``, or in a row whose first cells name it."""
    found = []
    for rows in tables(report):
        for row in rows:
            cells = list(row.items())
            named_row = any(v == label for _, v in cells[:2])
            found += [v for k, v in cells if (k == label or named_row) and FIGURE.fullmatch(v)]
    return found


_runs = {}


def run_suite(name, tmp_path_factory, env=None, key=None):
    """``python -m bench.suite --quick --only NAME --summary`` once per test session: (exit
    code, output, report)."""
    key = key or name
    if key not in _runs:
        out = tmp_path_factory.mktemp(f"suite-{key}")
        proc = subprocess.run([sys.executable, "-m", "bench.suite", "--quick", "--only", name,
                               "--out", str(out), "--summary"], cwd=str(REPO),
                              capture_output=True, text=True, timeout=600, env=env)
        report = (out / "suite-latest.md").read_text() if (out / "suite-latest.md").exists() \
            else ""
        _runs[key] = (proc.returncode, proc.stdout[-4000:] + proc.stderr[-4000:], report)
    return _runs[key]


@pytest.mark.suite
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_runs_and_reports_zeps_figures(name, tmp_path_factory):
    rc, output, report = run_suite(name, tmp_path_factory)
    assert rc == 0, output
    assert "`uptime` before:" in report and "cores" in report and "pyzmq" in report
    assert f"--only {name}" in report                      # the exact command
    assert figures_of(report, ZEPS[name]), report


@pytest.mark.suite
def test_the_suites_summary_line_gives_the_latency_figures_of_its_report(tmp_path_factory):
    """``--summary``: a latency run prints a line of its report's figures as ``name=value``
    (the SDK's, the raw clients' and the proxy's, and the p99s over the proxy's), those
    ``bench.ab`` pairs."""
    from bench.ab import FIGURE
    from bench.targets import latency_summary
    rc, output, report = run_suite("latency", tmp_path_factory)
    assert rc == 0, output
    line = latency_summary(report)
    assert line and line in output.splitlines(), output
    names = {m[1] for m in FIGURE.finditer(line)}
    for name in ("sdk", "raw", "proxy"):
        assert any(n.startswith(f"{name}_") and n.endswith("_p99_ms") for n in names), names
    assert any(n.startswith("sdk_") and n.endswith("_p99_over_proxy") for n in names), names


@pytest.mark.suite
@pytest.mark.parametrize("name,peer", [(n, p) for n, ps in PEERS.items() for p in ps])
def test_scenario_reports_the_peer_figures(name, peer, tmp_path_factory):
    why = peers.missing(peer)
    if why:
        pytest.skip(f"{peer}: {why}")
    rc, output, report = run_suite(name, tmp_path_factory)
    assert rc == 0, output
    assert figures_of(report, PEERS[name][peer]), report


@pytest.mark.suite
def test_a_peer_that_is_not_installed_is_reported_not_left_blank(tmp_path, tmp_path_factory):
    # No program on the PATH: redis-server, redis-benchmark and nats-server are all absent.
    env = dict(os.environ, PATH=str(tmp_path))
    rc, output, report = run_suite("latency", tmp_path_factory, env=env, key="latency-no-peers")
    assert rc == 0, output
    assert "redis: not installed here (redis-server" in report
    assert "nats: not installed here (nats-server" in report
    rows = [r for t in tables(report) for r in t if r.get("system") in
            ("Redis, redis-py", "JetStream, nats-py")]
    assert len(rows) == 2 and all(r["p50"].startswith("not installed here") for r in rows), rows
    assert figures_of(report, "ZEPS SDK"), report


def test_ab_says_which_side_gave_no_figures_and_fails():
    """``bench.ab`` with a benchmark that fails on one tree (as an A/B whose 'before' tree
    cannot start the broker): the failing side is named with what its run said, and the
    command fails instead of printing a table without that side's figures."""
    fails_before = ("import os, sys; sys.exit('no broker here') if 'zeps-ab-' in "
                    "os.environ['PYTHONPATH'] else print('x=1')")
    done = subprocess.run([sys.executable, "-m", "bench.ab", "--before", "HEAD", "--runs", "1",
                           "--", "-c", fails_before], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 1, done.stderr
    assert "before: 1 of 1 runs gave no figures; the last one said: no broker here" in done.stderr
    assert "after:" not in done.stderr


def test_ab_sets_each_sides_variables_for_its_runs_only():
    """``--after-env`` (and ``--before-env``) set a variable for that side's runs only, and the
    table's first line names it: the same revision on both sides pairs an option of the
    benchmark against its default."""
    prints_knob = "import os; print('knob=' + os.environ.get('ZEPS_BENCH_KNOB', '1'))"
    done = subprocess.run([sys.executable, "-m", "bench.ab", "--before", "HEAD", "--after",
                           "HEAD", "--after-env", "ZEPS_BENCH_KNOB=3", "--runs", "2", "--",
                           "-c", prints_knob], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "before = HEAD, after = HEAD with `ZEPS_BENCH_KNOB=3`;" in done.stdout
    assert "| knob | 1 (1–1) | 3 (3–3) | 3.00 | 3.00–3.00–3.00 |" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "bench.ab", "--before", "HEAD",
                          "--after-env", "ZEPS_BENCH_KNOB", "--", "-c", prints_knob],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not NAME=VALUE: 'ZEPS_BENCH_KNOB'" in bad.stderr


def test_the_sdk_systems_give_their_clients_the_options_of_the_environment(tmp_path_factory):
    """``ZEPS_BENCH_SDK_PUBLISHER`` / ``_SUBSCRIBER`` reach the SDK systems' ``Client(...)``
    calls (an option the Client does not have fails the run, named), a value that is not a
    literal stops it before anything runs, and a report made with them names them."""
    def quick(key, **knobs):
        return run_suite("latency", tmp_path_factory, env=dict(os.environ, **knobs), key=key)
    rc, output, _ = quick("latency-unknown-option", ZEPS_BENCH_SDK_PUBLISHER="no_such_option=1")
    assert rc != 0 and "unexpected keyword argument 'no_such_option'" in output, output
    rc, output, _ = quick("latency-typo", ZEPS_BENCH_SDK_SUBSCRIBER="batching=Flase")
    assert rc != 0 and "batching: not a Python literal: 'Flase'" in output, output
    rc, output, report = quick("latency-no-batches", ZEPS_BENCH_SDK_PUBLISHER="batching=False",
                               ZEPS_BENCH_SDK_SUBSCRIBER="batching=False")
    assert rc == 0, output
    assert ("* environment: `ZEPS_BENCH_SDK_PUBLISHER=batching=False`, "
            "`ZEPS_BENCH_SDK_SUBSCRIBER=batching=False`\n") in report
    assert figures_of(report, "ZEPS SDK"), report


def test_bench_stages_tells_how_many_messages_each_round_journalled():
    """The stage report's line on the broker's rounds (the stamped broker records the messages
    of each journalling): rounds that journalled nothing are not counted."""
    from bench.bench_stages import _rounds_text
    assert _rounds_text([0, 1, 2, 2, 5]) == (
        "the broker's rounds that journalled messages: 4, 2.50 messages each on average; one "
        "message: 25%, two: 50%, more: 25%")
