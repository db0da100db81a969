"""bench_hiccups' pure parts: the spinner's gaps (an injected clock), the stalls of every CPU at
once, the figures and the report's rows (the measurement itself is in the bench smoke test)."""
import pytest

from bench import bench_hiccups
from bench.bench_hiccups import (SLEEP_NS, all_at_once, figures, intersect, read_steal,
                                 spin)

MS = 1_000_000


def _clock(times):
    it = iter(times)
    return lambda: next(it)


def _no_sleep(_s):
    raise AssertionError("the normal mode never sleeps")


def test_the_spinner_records_each_gap_at_or_above_the_threshold_and_the_time_spun():
    # reads every 0.1 ms, a gap of 3 ms after 1 ms, one of exactly 1 ms (counted), one of 0.9
    t, times = 0, [0]
    for step in [MS // 10] * 10 + [3 * MS] + [MS // 10] * 5 + [MS] + [9 * MS // 10] + \
            [MS // 10] * 200:
        t += step
        times.append(t)
    gaps, spun = spin(0.02, MS, False, clock=_clock(times), sleep=_no_sleep)
    assert gaps == [(MS, 3 * MS), (4 * MS + 5 * MS // 10, MS)]
    assert spun == 20 * MS          # the first read at or past the end: 20.0 ms exactly here


class _FakeTime:
    """A clock read every 0.1 ms; ``stall_at``: a read that comes ``stall`` ns late; a sleep
    lasts ``SLEEP_NS`` plus the next of ``overruns``."""

    def __init__(self, stall_at=None, stall=0, overruns=()):
        self.now, self.reads, self.slept, self.slept_at = 0, 0, [], []
        self.stall_at, self.stall, self.overruns = stall_at, stall, list(overruns)

    def clock(self):
        self.reads += 1
        self.now += MS // 10 + (self.stall if self.reads == self.stall_at else 0)
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.slept_at.append(self.now)
        self.now += SLEEP_NS + (self.overruns.pop(0) if self.overruns else 0)


def test_in_fifo_mode_a_sleep_is_not_counted_but_its_overrun_is_a_stall():
    # 30 ms: bursts of 9 ms, sleeps of 1 ms; the first sleep overruns by 0.5 ms (with the read
    # after it, 0.6: not a stall at a threshold of 1 ms, but time spun), the second by 4 ms (4.1
    # with the read: a stall from the sleep's end)
    f = _FakeTime(overruns=[MS // 2, 4 * MS])
    gaps, spun = spin(0.03, MS, True, clock=f.clock, sleep=f.sleep)
    assert len(f.slept) >= 2 and all(s == SLEEP_NS / 1e9 for s in f.slept)
    assert gaps == [(f.slept_at[1] + SLEEP_NS, 4 * MS + MS // 10)]
    # time spun: from the first read to the last, less the sleeps themselves (not their overruns)
    assert spun == f.now - MS // 10 - len(f.slept) * SLEEP_NS


def test_in_fifo_mode_a_stall_inside_a_burst_is_counted():
    f = _FakeTime(stall_at=30, stall=2 * MS)
    gaps, _spun = spin(0.03, MS, True, clock=f.clock, sleep=f.sleep)
    assert [length for _s, length in gaps] == [2 * MS + MS // 10]


def test_stalls_of_every_cpu_at_once_are_where_all_of_them_overlap():
    cpu0 = [(0, 10), (20, 10), (50, 5)]
    cpu1 = [(5, 20), (52, 1)]
    assert intersect(cpu0, cpu1) == [(5, 5), (20, 5), (52, 1)]
    assert all_at_once([cpu0, cpu1, [(0, 100)]]) == [(5, 5), (20, 5), (52, 1)]
    assert all_at_once([cpu0, [(100, 5)]]) == [] and all_at_once([]) == []
    assert intersect([(0, 10)], [(10, 5)]) == []        # touching is not overlapping


def test_figures_count_stalls_per_second_of_spinning():
    gaps = [(0, 1 * MS), (10, 2 * MS), (20, 5 * MS)]
    f = figures(gaps, 2_000 * MS, [1.0, 2.0, 3.0])
    assert f.per_s == {1.0: 1.5, 2.0: 1.0, 3.0: 0.5}
    assert f.longest_ms == 5.0 and f.median_ms == 2.0
    assert f.lost == 8 / 2_000
    none = figures([], 1_000 * MS, [1.0])
    assert none.per_s == {1.0: 0.0} and none.longest_ms is None and none.lost == 0.0
    assert figures([], 0, [1.0]).per_s == {1.0: 0.0}


def test_steal_is_read_per_cpu_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4 5 6 7 99 0 0\ncpu0 1 2 3 4 5 6 7 40 0 0\n"
                    "cpu1 1 2 3 4 5 6 7 59 0 0\nintr 1 2 3\n")
    assert read_steal(str(stat)) == {"0": 40, "1": 59}
    assert read_steal(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize("argv", [["--seconds", "0"], ["--seconds", "nan"],
                                  ["--seconds", "inf"], ["--threshold-ms", "nan"],
                                  ["--threshold-ms", "0.001"], ["--modes", "fast"],
                                  ["--modes", ","]])
def test_a_bad_argument_is_a_one_line_error_and_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bench_hiccups.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bench_hiccups") or "error:" in err[-1]


def test_the_report_gives_each_cpu_all_cpus_at_once_a_refusal_and_the_listed_stalls(
        monkeypatch, capsys):
    def run_mode(cpus, seconds, threshold_ns, fifo):
        if fifo:
            return {}, {}, "SCHED_FIFO refused (Operation not permitted)"
        per_cpu = {0: ([(10 * MS, 3 * MS), (50 * MS, MS)], 1_000 * MS),
                   1: ([(11 * MS, 4 * MS)], 1_000 * MS)}
        return per_cpu, {"0": 2.0, "1": 0.5}, None

    monkeypatch.setattr(bench_hiccups, "run_mode", run_mode)
    monkeypatch.setattr(bench_hiccups.os, "sched_getaffinity", lambda _pid: {0, 1})
    assert bench_hiccups.main(["--seconds", "1", "--gaps"]) == 0
    out = capsys.readouterr().out
    assert "| normal | 0 | 2.00 | 1.00 | 1.00 | 2.00 | 3.00 | 0.40% | 2.00 |" in out
    assert "| normal | 1 | 1.00 | 1.00 | 1.00 | 4.00 | 4.00 | 0.40% | 0.50 |" in out
    # both stopped from 11 to 13 ms
    assert "| normal | all at once | 1.00 | 1.00 | 0.00 | 2.00 | 2.00 | 0.20% | — |" in out
    assert "| fifo | — | not measured: SCHED_FIFO refused (Operation not permitted) |" in out
    listed = [line.split() for line in out.splitlines() if line.startswith("    normal")]
    assert listed == [["normal", "0", "0.010000", "3.000"], ["normal", "1", "0.011000", "4.000"]]
