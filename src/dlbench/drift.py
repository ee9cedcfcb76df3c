"""Drift within a run: whether a measurement's iteration times rose or fell steadily over
its measured iterations.

A median summarises a run well only when its iterations measure the same thing. A GPU
that heats up and lowers its clocks, a warm-up too short for a cache, an allocator or a
JIT to settle, memory filling up, a neighbour starting on a shared node: each makes the
times move in one direction through the run, and the median is then that of a moving
target. Run-to-run statistics (dlbench.run_to_run) cannot see it, since every run may
drift alike.

The test is Mann-Kendall's (does the series go one way more often than chance allows),
and the size Sen's slope (the median of the slopes between every two iterations, which a
few outlying iterations do not move), as a share of the median time over the whole run:
``change`` +0.08 means the times rose by 8 % of the median from the first measured
iteration to the last. A measurement drifts (``drifting``) when the trend is both clear
(p below SIGNIFICANCE) and large (at least NOTABLE): iteration times are not independent
(a loader's periodic stall, a collective's jitter), so significance alone would flag small
wobbles of long runs.

Computed by the aggregate from each measurement's ``times_s`` (so every result, old ones
too, gets it): the table's ``time_drift``, ``time_drift_p`` and ``drifting`` columns; the
report lists drifting measurements with their iteration times, and ``dlbench compare``
notes a side that drifted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Fewer measured iterations than this give no verdict (a trend needs a series).
MIN_ITERATIONS = 10
# Longer series are tested on this many iterations evenly spread over the run: the test
# compares every two points (quadratic), and this many detect any drift worth reporting.
MAX_POINTS = 160
SIGNIFICANCE = 1e-3
NOTABLE = 0.05


@dataclass(frozen=True)
class Trend:
    change: float  # Sen's slope over the run, as a share of the median time
    p_value: float  # Mann-Kendall's, two-sided
    iterations: int

    @property
    def drifting(self) -> bool:
        return self.p_value < SIGNIFICANCE and abs(self.change) >= NOTABLE


def trend(times: Sequence[float] | np.ndarray) -> Trend | None:
    """The trend of one measurement's per-iteration times (in their order); None for fewer
    than MIN_ITERATIONS finite times or a median of zero."""
    values = np.asarray(times, dtype=float)
    values = values[np.isfinite(values)]
    n = len(values)
    if n < MIN_ITERATIONS:
        return None
    median = float(np.median(values))
    if median <= 0:
        return None
    index = np.arange(n, dtype=float)
    if n > MAX_POINTS:
        keep = np.unique(np.linspace(0, n - 1, MAX_POINTS).round().astype(int))
        index, values = index[keep], values[keep]
    first, second = np.triu_indices(len(values), k=1)
    rise = values[second] - values[first]
    slope = float(np.median(rise / (index[second] - index[first])))
    return Trend(change=slope * (n - 1) / median, p_value=_mann_kendall_p(rise, values),
                 iterations=n)


def step_at(times: Sequence[float] | np.ndarray | None) -> float | None:
    """Where in the run (0 to 1) its times' largest shift of level lies: the split that
    most separates the times before it from those after (the peak of their cumulative
    deviation from the mean, CUSUM). A warm-up's fall lies early; a step down after a
    flat stretch (another process ended, clocks rose) late. None below MIN_ITERATIONS."""
    if times is None or np.ndim(times) != 1:  # none kept (a row that did not drift)
        return None
    values = np.asarray(times, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) < MIN_ITERATIONS:
        return None
    deviation = np.cumsum(values - values.mean())[:-1]
    return float(np.argmax(np.abs(deviation)) + 1) / len(values)


def _mann_kendall_p(rise: np.ndarray, values: np.ndarray) -> float:
    """Two-sided p of Mann-Kendall's S (the sign of every later-minus-earlier difference,
    summed) under no trend: its normal approximation with continuity and tie corrections."""
    s = float(np.sign(rise).sum())
    n = len(values)
    _, ties = np.unique(values, return_counts=True)
    ties = ties[ties > 1].astype(float)
    variance = (n * (n - 1) * (2 * n + 5) - float((ties * (ties - 1) * (2 * ties + 5)).sum())) / 18
    if variance <= 0 or s == 0:
        return 1.0
    z = (abs(s) - 1) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def values(times: Sequence[float] | None) -> dict[str, object]:
    """The table's columns for one measurement (all None without a verdict)."""
    found = trend(times) if times is not None else None
    if found is None:
        return {"time_drift": None, "time_drift_p": None, "drifting": None}
    return {"time_drift": found.change, "time_drift_p": found.p_value,
            "drifting": found.drifting}


def describe(change: float) -> str:
    """A drift in words: which way the iteration times went, and by how much."""
    way = "rose" if change > 0 else "fell"
    return f"iteration times {way} {abs(change):.0%} over the measured run"


def cause(change: float, held_back: float | None = None, reasons: str | None = None,
          brief: bool = False, warmup_settled: bool | None = None,
          step: float | None = None) -> str:
    """What a drift most likely comes from: falling times a warm-up too short (``warmup_
    settled``: how a warm-up until steady ended, None for a fixed one) unless they fell in
    the run's second half (``step``: ``step_at``), rising ones a GPU held back (where the
    monitor saw it; ``brief``: without how often and why, said beside it already) or a
    system slowing down."""
    from dlbench import gpu_clocks

    if change < 0 and step is not None and step > 0.5:
        return ("a step down late in the run, not a warm-up: something else eased (another "
                "process ended, the clocks rose)")
    if change < 0:
        if warmup_settled is None:
            return ("still warming up (more warm-up iterations, or warmup_until_steady, "
                    "would settle it)")
        if not warmup_settled:
            return ("still warming up: the warm-up until steady reached its limit before "
                    "the times settled")
        return ("still warming up, more slowly than the warm-up until steady could see "
                "(more warm-up iterations would settle it)")
    often = gpu_clocks.how_often(held_back, reasons)
    if often:
        return "the GPU's clocks held back" + ("" if brief else f" {often}")
    return "the system slowed during the run (heat, memory, other load)"


def reading(change: float, held_back: float | None = None, reasons: str | None = None,
            warmup_settled: bool | None = None, step: float | None = None) -> str:
    """A drift's most likely reading, in words: which way, and from what (``cause``)."""
    why = cause(change, held_back, reasons, warmup_settled=warmup_settled, step=step)
    return f"{'falling' if change < 0 else 'rising'}: {why}"


def note(side: str, change: float | None, drifting: bool | None,
         held_back: float | None = None, reasons: str | None = None) -> str | None:
    """One line saying that ``side``'s measurement drifted, where it did, and its most
    likely cause (the clocks' share and reasons left to their own note)."""
    if not drifting or change is None or not math.isfinite(change):
        return None
    return (f"{side}'s {describe(change)}, most likely "
            f"{cause(change, held_back, reasons, brief=True)}")
