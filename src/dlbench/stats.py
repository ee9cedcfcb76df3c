"""Summary statistics of per-iteration times."""

from __future__ import annotations

import math
from collections.abc import Sequence

SUMMARY_KEYS = ("mean", "median", "std", "min", "max", "p5", "p95", "p99")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of pre-sorted values."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    if frac == 0:  # on a value: that value (inf - x times 0 would be NaN)
        return sorted_values[lo]
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(times: Sequence[float]) -> dict[str, float]:
    """mean, median, sample std, min, max and p5/p95/p99 of a list of times."""
    if not times:
        raise ValueError("no measured iterations to summarize")
    values = sorted(float(t) for t in times)
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return {
        "mean": mean,
        "median": percentile(values, 50),
        "std": math.sqrt(var),
        "min": values[0],
        "max": values[-1],
        "p5": percentile(values, 5),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
    }


def throughput(items_per_iteration: float, median_time_s: float) -> float:
    """Items per second at the median iteration time (robust against stragglers)."""
    if median_time_s <= 0:
        raise ValueError(f"median time must be positive, got {median_time_s}")
    return items_per_iteration / median_time_s
