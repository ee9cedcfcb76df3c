import statistics

import pytest

from dlbench import stats


def test_summary_matches_statistics_module():
    times = [0.5, 0.1, 0.3, 0.2, 0.4, 0.9, 0.25]
    s = stats.summarize(times)
    assert s["mean"] == pytest.approx(statistics.fmean(times))
    assert s["median"] == pytest.approx(statistics.median(times))
    assert s["std"] == pytest.approx(statistics.stdev(times))
    assert (s["min"], s["max"]) == (0.1, 0.9)


def test_percentiles_interpolate_linearly():
    values = list(range(101))  # 0..100: the q-th percentile is q
    s = stats.summarize(values)
    assert (s["p5"], s["p95"], s["p99"]) == (5, 95, 99)
    assert stats.percentile([1.0, 2.0], 50) == 1.5


def test_a_percentile_on_a_value_is_that_value_beside_an_infinite_one():
    """(inf - x) * 0 made the median of [1, 2, inf] NaN (a file written by other software
    may hold Infinity); numpy gives 2."""
    assert stats.summarize([1.0, 2.0, float("inf")])["median"] == 2.0
    assert stats.percentile([1.0, 2.0, float("inf")], 25) == 1.5


def test_single_value_has_zero_spread():
    s = stats.summarize([0.25])
    assert s["std"] == 0.0 and s["p99"] == 0.25


def test_throughput_uses_the_given_median_and_rejects_nonsense():
    assert stats.throughput(64, 0.5) == 128.0
    with pytest.raises(ValueError):
        stats.throughput(64, 0.0)
    with pytest.raises(ValueError):
        stats.summarize([])
