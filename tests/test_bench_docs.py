"""The figures in the docs are generated from bench/results, and stay what their sources give.

Every block between ``<!-- bench:begin SOURCE [VIEW] -->`` and ``<!-- bench:end -->`` in
README.md, docs/benchmarks.md and docs/operations.md must be, byte for byte, what
:func:`bench.docs.render` makes of its source (a committed file of bench/results); a table of
figures on docs/benchmarks.md outside a block would be a figure no command produced. The rest
checks the generator itself on files of its own (pure: no process, no benchmark run).
"""
import re

import pytest

from bench import docs, targets

REPO = docs.REPO


@pytest.mark.parametrize("doc", docs.DOCS, ids=lambda p: p.name)
def test_every_generated_block_is_what_its_source_gives(doc):
    text = doc.read_text()
    for source, view, body in docs.blocks(text):
        assert source.startswith("bench/results/"), f"{doc.name}: {source} is not a result file"
        files = docs.sources(source)
        assert files and all(f.is_file() for f in files), f"{doc.name}: no {source}"
        assert body == docs.render(source, view), (
            f"{doc.name}: the block from {source} {view or ''} is not what it gives: run "
            f"`python -m bench.report`")
    n = len(docs.blocks(text))
    assert len(re.findall(r"^<!-- bench:begin", text, re.M)) == n, "a malformed block"
    assert len(re.findall(r"^<!-- bench:end -->", text, re.M)) == n, "a malformed block"


def test_the_benchmarks_page_has_its_blocks_and_no_table_of_figures_outside_them():
    text = (REPO / "docs" / "benchmarks.md").read_text()
    sources = {(s, v) for s, v, _ in docs.blocks(text)}
    assert ("bench/results/suite.md", None) in sources
    assert ("bench/results/suite.md", "targets") in sources
    outside = docs.BLOCK.sub("", text)
    rows = [line for line in outside.splitlines()
            if line.lstrip().startswith("|") and re.search(r"\d", line)]
    assert not rows, f"tables of figures no command generated: {rows}"


def _report(command, sections, load="0.50"):
    head = (f"Run of 2026-11-24 20:00 UTC, 5 min: `{command}`\n\n"
            f"* `uptime` before: load average: {load}\n")
    return head + "\n" + "".join(f"<!-- scenario {n} -->\n### {n}\n\n{body}\n\n"
                                 for n, body in sections)


def test_a_run_of_some_scenarios_replaces_only_theirs_each_under_its_own_header():
    base = _report("python -m bench.suite --reps 3",
                   [("ingest", "old ingest"), ("fanout", "old fanout"), ("routing", "FAILED")])
    part = _report("python -m bench.suite --only routing --reps 3", [("routing", "new routing")],
                   load="4.20")
    merged = docs.merge_suite(base, part)
    head, sections = docs.split_report(merged)
    assert head == docs.split_report(base)[0]
    assert list(sections) == ["ingest", "fanout", "routing"]
    assert sections["ingest"] == docs.split_report(base)[1]["ingest"]
    routing = sections["routing"]
    assert routing.startswith(docs.OTHER_RUN + "Run of 2026-11-24 20:00 UTC, 5 min: "
                              "`python -m bench.suite --only routing --reps 3`")
    assert "load average: 4.20" in routing and "new routing" in routing
    assert "FAILED" not in merged
    # taking it again changes nothing; a whole run replaces everything, headers included
    assert docs.merge_suite(merged, part) == merged
    whole = _report("python -m bench.suite", [("ingest", "new ingest")])
    assert docs.merge_suite(merged, whole) == whole


def test_a_quick_run_or_a_partial_run_with_nothing_to_merge_into_is_refused():
    with pytest.raises(ValueError, match="--quick"):
        docs.merge_suite(None, _report("python -m bench.suite --quick", [("ingest", "x")]))
    with pytest.raises(ValueError, match="some scenarios only"):
        docs.merge_suite(None, _report("python -m bench.suite --only ingest", [("ingest", "x")]))


def test_take_copies_full_outputs_and_regenerate_rewrites_stale_blocks(tmp_path):
    out, results = tmp_path / "out", tmp_path / "bench" / "results"
    out.mkdir()
    (out / "suite-latest.md").write_text(_report("python -m bench.suite", [("ingest", "| 1 |")]))
    (out / "bench_codec.md").write_text("Run of ...: `python -m bench.bench_codec`\n\n| 2 |\n")
    assert docs.take(out=out, results=results) == ["suite", "bench_codec"]
    assert (results / "bench_codec.md").read_text().endswith("| 2 |\n")
    with pytest.raises(ValueError, match="bench_spark"):
        docs.take(["bench_spark"], out=out, results=results)
    # a --quick suite run left in bench/out is skipped by a take of everything, refused by name
    (out / "suite-latest.md").write_text(_report("python -m bench.suite --quick", [("x", "| 3 |")]))
    assert docs.take(out=out, results=results) == ["bench_codec"]
    assert "| 1 |" in (results / "suite.md").read_text()
    with pytest.raises(ValueError, match="--quick"):
        docs.take(["suite"], out=out, results=results)
    doc = ("intro\n<!-- bench:begin bench/results/bench_codec.md -->\nstale | 9 |\n"
           "<!-- bench:end -->\nafter\n")
    new = docs.regenerate(doc, repo=tmp_path)
    assert new == ("intro\n<!-- bench:begin bench/results/bench_codec.md -->\nRun of ...: "
                   "`python -m bench.bench_codec`\n\n| 2 |\n<!-- bench:end -->\nafter\n")
    assert docs.regenerate(new, repo=tmp_path) == new


INGEST_COLUMNS = " | ".join(["body", "publishers", "fsync", *targets.SDK_BATCH[:1],
                             *targets.SDK_BATCH_C, *targets.REDIS_PIPE[:1]])
SUITE = """Run of 2026-11-24 20:00 UTC, 40 min: `python -m bench.suite`

<!-- scenario ingest -->
### Ingest — 100 messages per call (the Python user's view)

| """ + INGEST_COLUMNS + """ |
|---|---|---|---|---|---|
| 100 B | 1 | interval | 900,000 (800,000–950,000) msg/s | 300,000 msg/s | 150,000 msg/s |
| 100 B | 4 | interval | 1,100,000 msg/s | 400,000 msg/s | 160,000 msg/s |

<!-- scenario replay -->
### Replay of a 1,000,000-message stream from its first message

| body | ZEPS SDK, next() | ZEPS SDK, batches() | Redis, redis-py XREAD by 1000 |
|---|---|---|---|
| 100 B | 300,000 msg/s | 1,200,000 msg/s | 250,000 msg/s |
"""


def test_the_targets_view_copies_each_median_with_its_case_and_judges_it():
    rows = {t: (m, ok) for t, m, ok in targets.rows(targets.Results(SUITE))}
    measured, met = rows["SDK publish ≥ 1M msg/s (100 B, fsync interval, no confirms)"]
    assert "1 publisher(s): 900,000 msg/s" in measured and "4 publisher(s): 1,100,000" in measured
    assert met == "yes"
    measured, met = rows["SDK replay ≥ 2M msg/s (100 B)"]
    assert measured == "`batches()` 1,200,000 msg/s, `next()` 300,000 msg/s" and met == "no"
    measured, met = rows["fan-out to 10 SDK subscribers ≥ 3M delivered msg/s (100 B)"]
    assert (measured, met) == (targets.NOT_IN, "—")
    table = targets.render(SUITE)
    assert table.startswith("| target | measured") and table.count("\n") == len(rows) + 2


CAPACITY_COLUMNS = " | ".join(["body", "publishers", "fsync", targets.RAW[0], targets.RBENCH[0]])
SUITE20 = SUITE.replace("<!-- scenario replay -->", """### Ingest — server capacity

| """ + CAPACITY_COLUMNS + """ |
|---|---|---|---|---|
| 100 B | 1 | interval | 2,000,000 msg/s | 400,000 msg/s |
| 100 B | 4 | interval | 2,500,000 msg/s | 700,000 msg/s |

<!-- scenario fanout -->
**From another run than the one at the top:** """ + \
    """Run of 2026-11-25 01:00 UTC, 9 min: `python -m bench.suite --only fanout`

### Live fan-out

| body | subscribers | ZEPS SDK, batches() | ZEPS, raw pyzmq |
|---|---|---|---|
| 100 B | 10 | 4,000,000 msg/s | 4,400,000 msg/s |

<!-- scenario replay -->""") + """
<!-- scenario latency -->
### End-to-end latency at 10,000 msg/s

| body | system | p50 | p99 | p99.9 |
|---|---|---|---|---|
| 100 B | ZEPS SDK | 0.2 ms | 0.9 (0.8–1.1) ms | 3.5 ms |
| 100 B | ZeroMQ XSUB/XPUB proxy | 0.1 ms | 0.4 ms | 1.2 ms |
"""


def test_the_issue20_view_divides_by_redis_benchmark_of_the_same_run_only():
    rows = {t: (m, ok) for t, m, ok in targets.rows_issue20(targets.Results(SUITE20))}
    assert rows["SDK p99 ≤ 1 ms at 10k msg/s (100 B, fsync interval)"] == ("p99 0.9 ms", "yes")
    assert rows["SDK p99.9 ≤ 3 ms at 10k msg/s (100 B, fsync interval)"] == ("p99.9 3.5 ms", "no")
    assert rows["SDK p99 within 2.5× of the ZeroMQ proxy's p99, same run (100 B)"] == (
        "2.25× (0.9 ms ÷ 0.4 ms)", "yes")
    measured, met = rows["ingest ≥ 3× redis-benchmark -P 100 XADD (100 B)"]
    assert measured.startswith("SDK `publish_batch(100)`, no confirms 2.25× (900,000 msg/s ÷ "
                               "400,000 msg/s), raw pyzmq 5.00×") and met == "no"
    measured, met = rows["replay of 1M ≥ 6× redis-benchmark -P 100 XADD (100 B)"]
    assert measured == "SDK `batches()` 3.00× (1,200,000 msg/s ÷ 400,000 msg/s)" and met == "no"
    # fan-out's section was merged from another run: no ratio judged across runs
    measured, met = rows["fan-out to 10 ≥ 9× redis-benchmark -P 100 XADD (100 B)"]
    assert measured.endswith("not the same run as redis-benchmark's") and met == "—"
    without = {t: ok for t, _m, ok in targets.rows_issue20(targets.Results(SUITE))}
    assert set(without.values()) == {"—"}


def test_the_suites_latency_summary_is_one_line_of_figures_that_bench_ab_reads():
    """``bench.suite --summary``: the latency scenario's medians and ratios as ``name=value``,
    each of which ``bench.ab`` parses back; a system without a row gives no figure, a report
    without the scenario an empty line."""
    from bench.ab import FIGURE
    line = targets.latency_summary(SUITE20)
    figures = {m[1]: float(m[2]) for m in FIGURE.finditer(line)}
    assert figures == {"sdk_100B_p50_ms": 0.2, "sdk_100B_p99_ms": 0.9, "sdk_100B_p99.9_ms": 3.5,
                       "proxy_100B_p50_ms": 0.1, "proxy_100B_p99_ms": 0.4,
                       "proxy_100B_p99.9_ms": 1.2, "sdk_100B_p99_over_proxy": 2.25}, line
    assert len(line.split()) == len(figures)
    assert targets.latency_summary(SUITE) == ""


def _latency_report(when, command, rows):
    """A suite report holding only the latency scenario: ``rows`` as (body, system, p99,
    p99.9) in ms."""
    table = "".join(f"| {b} | {s} | 0.1 ms | {p} ms | {q} ms |\n" for b, s, p, q in rows)
    return (f"Run of {when} UTC, 2 min: `{command}`\n\n<!-- scenario latency -->\n"
            "### End-to-end latency at 10,000 msg/s\n\n| body | system | p50 | p99 | p99.9 |\n"
            "|---|---|---|---|---|\n" + table)


def test_the_latency_runs_view_judges_each_run_and_counts_the_runs_that_met_each_target():
    """Each run's figures judged by the issue's limits, the raw clients' ratio beside them
    (not a target: counted within the SDK's limit), a run without that row given "—"."""
    proxy = targets.PROXY[-1]
    alone = _latency_report("2026-11-30 01:00", "python -m bench.suite --only latency --out d", [
        ("100 B", "ZEPS SDK", "0.9 (0.8–1.1)", "3.5"), ("100 B", "ZEPS, raw pyzmq", "0.8", "3.0"),
        ("100 B", proxy, "0.4", "2.0"),
        ("1024 B", "ZEPS SDK", "1.2", "4.0"), ("1024 B", proxy, "0.4", "2.5")])
    full = _latency_report("2026-11-29 10:00", "python -m bench.suite", [
        ("100 B", "ZEPS SDK", "1.5", "2.5"), ("100 B", proxy, "0.5", "2.0")])
    table = targets.render_latency_runs([
        ("a.md", alone), ("b.md", full), ("copy.md", alone),     # the same run twice: once
        ("none.md", "Run of 2026-11-29 09:00 UTC, 1 min: `python -m bench.suite`\n")])
    lines = table.splitlines()
    assert len(lines) == 5, table                 # head, rule, two runs in time order, counts
    assert lines[2] == ("| 2026-11-29 10:00 UTC, in the full suite | `b.md` | 1.50 ms (no) | "
                        "2.50 ms (yes) | 3.00× (no) | — | — | 0.500 ms, 2.00 ms |")
    assert lines[3] == ("| 2026-11-30 01:00 UTC, alone | `a.md` | 0.900 ms (yes) | 3.50 ms (no) | "
                        "2.25× (yes) | 3.00× (no) | 2.00× | 0.400 ms, 2.00 ms |")
    assert lines[4] == ("| runs that met it | | 1 of 2 | 1 of 2 | 1 of 2 | 0 of 1 | "
                        "1 of 1 within 2.5× | |")
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")


def test_a_block_of_many_files_is_a_pattern_given_to_a_view_of_many(tmp_path):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    proxy = targets.PROXY[-1]
    for name, when, p99 in (("suite.md", "2026-11-28 10:00", "0.5"),
                            ("suite_2.md", "2026-11-29 10:00", "0.6")):
        (results / name).write_text(_latency_report(
            when, "python -m bench.suite",
            [("100 B", "ZEPS SDK", p99, "2.0"), ("100 B", proxy, "0.25", "1.0")]))
    text = docs.render("bench/results/suite*.md", "latency-runs", tmp_path)
    assert "| 2026-11-28 10:00 UTC, in the full suite | `suite.md` | 0.500 ms (yes)" in text
    assert "| 2026-11-29 10:00 UTC, in the full suite | `suite_2.md` | 0.600 ms (yes)" in text
    with pytest.raises(ValueError, match="takes one file"):
        docs.render("bench/results/suite*.md", "targets", tmp_path)
    with pytest.raises(ValueError, match="no file matches"):
        docs.render("bench/results/none*.md", "latency-runs", tmp_path)


def test_the_pacer_yields_every_message_on_its_schedule_either_way():
    """Both pacers give every message of the run, none before its due time (the suite's
    latency rows are measured from each message's own send time: a late send is a burst, a
    missing one would be a lower rate)."""
    import time

    from bench.systems import due_times, pace
    for pacer in ("sleep", "spin"):
        start = time.monotonic_ns()
        seen = []
        for i in pace(20_000, 0.01, pacer):
            seen.append((i, time.monotonic_ns()))
        assert [i for i, _ in seen] == list(range(200))
        step = 1e9 / 20_000
        assert all(t >= start + int(i * step) for i, t in seen)
    with pytest.raises(ValueError, match="no pacer"):
        next(pace(1000, 1, "nap"))
    assert len(list(due_times(1000, 0.5))) == 500


def test_the_publishers_stalls_are_its_sends_a_millisecond_apart_or_more():
    """``bench_stages`` counts the paced publisher's stalls: two consecutive sends (in any
    order given) 1 ms or more further apart than the pacing interval, and the longest gap."""
    from bench.stamps import publisher_stalls
    sends = [0, 100_000, 200_000, 1_300_000, 1_400_000, 3_900_000, 4_000_000]     # ns
    assert publisher_stalls(sends, 100_000) == (2, 2_500_000)
    assert publisher_stalls(dict.fromkeys(reversed(sends)), 100_000) == (2, 2_500_000)
    assert publisher_stalls(sends, 1_500_000) == (1, 2_500_000)
    assert publisher_stalls([0, 1_000_000, 2_000_000], 1_000_000) == (0, 0)   # 1k msg/s
    assert publisher_stalls([], 100_000) == (0, 0)


def test_the_stamped_processes_times_are_each_stamps_first():
    """``bench_stages``' stamped processes record flat ``stamp, time`` arrays (no dict that
    resizes as messages go); the analysis takes each stamp's first time (as the ``setdefault``
    dicts of B2 to B4 did; B1 and S1 get each stamp once). Stamps are unsigned 8-byte values."""
    from array import array

    from bench.stamps import first_times
    pairs = array("q", [7, 100, 8, 110, 7, 130, 9, 140, 8, 150])
    assert first_times(pairs) == {7: 100, 8: 110, 9: 140}
    assert first_times(array("q")) == {}
    assert first_times(array("Q", [2**64 - 1, 5])) == {2**64 - 1: 5}


def test_the_stamped_broker_takes_more_options_from_the_environment():
    """``ZEPS_BENCH_BROKER_ARGS`` (shell words) are more ``zeps broker`` options for the
    stage runs' broker; without it, none."""
    from bench.stamped_broker import broker_options
    assert broker_options({}) == []
    assert broker_options({"ZEPS_BENCH_BROKER_ARGS": "--io-scheduling normal"}) == [
        "--io-scheduling", "normal"]
    assert broker_options({"ZEPS_BENCH_BROKER_ARGS": "--x 'a b'"}) == ["--x", "a b"]


def test_a_stage_runs_clients_are_its_publishers_and_its_subscribers_kinds():
    """``bench_stages --client``: ``sdk`` and ``raw`` are both sides of that kind, ``PUB/SUB``
    mixes them (the SDK's publisher with a raw subscriber, and the other way round); anything
    else is not a broker's client, and the command line refuses it with exit code 2."""
    import subprocess
    import sys

    from bench.bench_stages import kinds
    assert kinds("sdk") == ("sdk", "sdk") and kinds("raw") == ("raw", "raw")
    assert kinds("sdk/raw") == ("sdk", "raw") and kinds("raw/sdk") == ("raw", "sdk")
    for bad in ("proxy", "sdk/proxy", "sdk/", "/raw", "sdk/raw/sdk"):
        with pytest.raises(ValueError):
            kinds(bad)
    proc = subprocess.run([sys.executable, "-m", "bench.bench_stages", "--client", "sdk/proxy"],
                          cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--client" in proc.stderr, proc.stderr


def test_the_stage_runs_split_a_process_cpu_by_thread():
    """``bench_stages`` gives the middle process's CPU per message by thread: its main thread
    (the broker's loop), ZeroMQ's threads (``ZMQbg/...``) and the others. CPU burnt by a
    thread of another name counts as ``other``, not as the loop's; one burnt by the main
    thread counts as the loop's."""
    import os
    import threading
    import time

    from bench.middle import per_message, thread_cpu

    def burn(seconds: float) -> None:
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass

    burnt, done = threading.Event(), threading.Event()

    def other() -> None:              # burns, then stays alive until read (an ended thread
        burn(0.2)                     # is no longer in /proc)
        burnt.set()
        done.wait(60)

    before = thread_cpu(os.getpid())
    t = threading.Thread(target=other, name="not-the-loop")
    t.start()
    try:
        assert burnt.wait(60)
        middle = thread_cpu(os.getpid())
    finally:
        done.set()
        t.join()
    burn(0.2)
    after = thread_cpu(os.getpid())
    assert set(before) == {"loop", "zmq", "other"}
    assert middle["other"] - before["other"] >= 0.1          # clock ticks: 10 ms at most
    assert middle["loop"] - before["loop"] < 0.1
    assert after["loop"] - middle["loop"] >= 0.1
    per = per_message(before, middle, 100)
    assert per["other"] >= 0.001 and per["loop"] < 0.001 and per["zmq"] >= 0
