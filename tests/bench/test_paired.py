# tests/bench/test_paired.py — paired.py's interval for the median of the rounds' ratios.
# Run by ctest as bench_paired_interval (tests/CMakeLists.txt), with pytest on Debian's python3.
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired import median_ci  # noqa: E402


def test_the_ends_are_the_order_statistics_of_the_binomial_table():
    # The 95% interval for a median from n values is (x(k), x(n+1-k)), 1-based, with k = 2 at n = 10,
    # 6 at 20 and 14 at 40 (the sign test's table); shuffled, so that the function must sort.
    for n, k in ((6, 1), (8, 1), (9, 2), (10, 2), (20, 6), (40, 14), (100, 40)):
        values = list(range(1, n + 1))
        random.Random(n).shuffle(values)
        assert median_ci(values) == (k, n + 1 - k), n


def test_too_few_rounds_give_no_interval():
    for n in range(6):
        assert median_ci([1.0] * n) is None
    assert median_ci([0.9, 1.1, 1.0, 1.2, 0.8, 1.05], level=0.99) is None  # 99% needs 8
    assert median_ci([0.9, 1.1, 1.0, 1.2, 0.8, 1.05, 1.0, 0.95], level=0.99) == (0.8, 1.2)


def test_it_holds_the_true_median_at_least_as_often_as_it_says():
    # Skewed, heavy-tailed ratios such as a noisy VM gives (a lognormal around 1.05): over 4000 draws
    # of 20 rounds the interval must hold the true median in at least 95% of them, and not in nearly
    # all (an interval from the lowest to the highest would: 1 - 2^-19).
    rng = random.Random(13)
    true_median = 1.05
    held = 0
    draws = 4000
    for _ in range(draws):
        ratios = [true_median * rng.lognormvariate(0, 0.25) for _ in range(20)]
        lo, hi = median_ci(ratios)
        assert lo <= statistics.median(ratios) <= hi
        held += lo <= true_median <= hi
    assert 0.95 * draws <= held <= 0.985 * draws, held
