"""bench_tail's grouping of slow messages into stalls (pure; the run itself is in the bench
smoke test)."""
from bench.bench_tail import Stall, outside, stalls, summary

MS = 1_000_000


def test_slow_messages_close_together_are_one_stall():
    d = [100] * 1000
    for i in (10, 11, 12, 60):                   # 60 is within 100 of 12: the same stall
        d[i] = 3 * MS
    d[500] = 5 * MS                              # far from the others: a second stall
    d[999] = 2 * MS                              # at the threshold: slow
    assert stalls(d, 2 * MS) == [Stall(10, 60, 4, 3 * MS), Stall(500, 500, 1, 5 * MS),
                                 Stall(999, 999, 1, 2 * MS)]
    assert stalls(d, 2 * MS, gap=10) == [Stall(10, 12, 3, 3 * MS), Stall(60, 60, 1, 3 * MS),
                                         Stall(500, 500, 1, 5 * MS), Stall(999, 999, 1, 2 * MS)]
    assert stalls([100] * 50, 2 * MS) == [] and stalls([], 1) == []


def test_outside_leaves_out_each_stall_from_its_first_to_its_last_message():
    d = [1, 9, 2, 9, 3, 4, 9]
    found = stalls(d, 9, gap=2)
    assert found == [Stall(1, 3, 2, 9), Stall(6, 6, 1, 9)]
    assert outside(d, found) == [1, 3, 4]


def test_a_runs_summary_gives_the_stalls_pace_height_and_the_tail_without_them():
    rate = 10_000
    d = [200_000] * 30_000                       # 3 s at 10k msg/s, 0.2 ms each
    for start, height in ((5_000, 4 * MS), (15_000, 5 * MS), (25_000, 3 * MS)):
        for j in range(40):                      # 40 messages held back, the first the most
            d[start + j] = height - j * 20_000
    f = summary(d, rate, 2 * MS)
    assert f["per_s"] == 1.0 and f["every_s"] == 1.0
    assert f["height"] == 4.0 and f["highest"] == 5.0
    assert f["p99.9"] > 2.0 and f["p99.9_outside"] == 0.2
    assert f["share"] == 120 / 30_000
    quiet = summary([200_000] * 1000, rate, 2 * MS)
    assert quiet["per_s"] == 0 and quiet["every_s"] is None and quiet["height"] is None
