"""bench_tail's grouping of slow messages into stalls (pure; the run itself is in the bench
smoke test)."""
from bench.bench_tail import Stall, outside, stalls, summary

MS = 1_000_000


def test_slow_messages_close_together_are_one_stall():
    d = [100] * 1000
    for i in (10, 11, 12, 60):                   # 60 is within 100 of 12: the same stall
        d[i] = 3 * MS
    d[500] = 5 * MS                              # far from the others: a second stall
    d[999] = 2 * MS                              # at the threshold, the last message: slow
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
    d = [200_000 + (i % 1000) * 1000 for i in range(30_000)]     # 0.2 to 1.199 ms, 3 s
    for start, height in ((1_000, 4 * MS), (2_000, 5 * MS), (20_000, 3 * MS)):
        for j in range(40):                      # 40 messages held back, the first the most
            d[start + j] = height - j * 20_000
    d[2_020] = 100_000                           # a fast one inside a stall: spanned, not slow
    f = summary(d, rate, 2 * MS)
    assert f["per_s"] == 1.0                     # 3 stalls in 3 s
    assert abs(f["every_s"] - 0.95) < 1e-9       # 0.1 s, then 1.8 s: the median of the two
    assert f["height"] == 4.0 and f["highest"] == 5.0
    assert f["share"] == 120 / 30_000            # the fast one in the span counts
    rest = sorted(x for i, x in enumerate(d)
                  if not any(a <= i < a + 40 for a in (1_000, 2_000, 20_000)))
    assert f["p99.9_outside"] == rest[int(0.999 * len(rest))] / 1e6 < 1.2
    assert f["p99.9"] == sorted(d)[int(0.999 * len(d))] / 1e6 > 3.0
    one = summary([200_000] * 500 + [3 * MS] + [200_000] * 500, rate, 2 * MS)
    assert one["per_s"] > 0 and one["every_s"] is None and one["height"] == 3.0
    quiet = summary([200_000] * 1000, rate, 2 * MS)
    assert quiet["per_s"] == 0 and quiet["every_s"] is None and quiet["height"] is None
    assert quiet["p99.9_outside"] == 0.2
    empty = summary([], rate, 2 * MS)
    assert empty["p99"] is None and empty["per_s"] == 0.0 and empty["share"] == 0.0
