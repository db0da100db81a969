"""bench_hiccups' pure parts: the spinner's gaps (an injected clock), the stalls of every CPU at
once, and the figures (the run itself is in the bench smoke test)."""
from bench.bench_hiccups import (SLEEP_NS, SPIN_NS, all_at_once, figures, intersect, read_steal,
                                 spin)

MS = 1_000_000


def _clock(times):
    it = iter(times)
    return lambda: next(it)


def test_the_spinner_records_each_gap_at_or_above_the_threshold_and_the_time_spun():
    # reads every 0.1 ms, a gap of 3 ms after 1 ms, one of exactly 1 ms (counted), one of 0.9
    t, times = 0, [0]
    for step in [MS // 10] * 10 + [3 * MS] + [MS // 10] * 5 + [MS] + [9 * MS // 10] + \
            [MS // 10] * 200:
        t += step
        times.append(t)
    gaps, spun = spin(0.02, MS, False, clock=_clock(times), sleep=lambda s: None)
    assert gaps == [(MS, 3 * MS), (4 * MS + 5 * MS // 10, MS)]
    assert spun >= 20 * MS and spun - 20 * MS < MS // 10


def test_in_fifo_mode_the_sleeps_are_neither_gaps_nor_time_spun():
    slept = []
    now = [0]

    def clock():
        now[0] += MS // 10
        return now[0]

    def sleep(s):
        slept.append(s)
        now[0] += int(s * 1e9) + 5 * MS          # the sleep overshoots: still not a gap

    gaps, spun = spin(0.03, MS, True, clock=clock, sleep=sleep)
    assert gaps == []
    assert slept and all(s == SLEEP_NS / 1e9 for s in slept)
    assert spun <= len(slept + [0]) * (SPIN_NS + MS // 10)
    assert spun < now[0] - len(slept) * 6 * MS + MS


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


def test_steal_is_read_per_cpu_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4 5 6 7 99 0 0\ncpu0 1 2 3 4 5 6 7 40 0 0\n"
                    "cpu1 1 2 3 4 5 6 7 59 0 0\nintr 1 2 3\n")
    assert read_steal(str(stat)) == {"0": 40, "1": 59}
    assert read_steal(str(tmp_path / "absent")) == {}
