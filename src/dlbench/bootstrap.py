"""Percentile bootstrap confidence intervals of step times, vectorised with numpy: the
one implementation behind the aggregate's per-cell intervals and ``dlbench compare``.

- **Over iterations** (one process): a resample is ``n`` times drawn with replacement from
  a measurement's ``n`` per-iteration times, its statistic the median. The median of a
  resample of sorted values is the value at the median of the resampled *positions*, and
  those positions do not depend on the data: the ``B`` resampled median positions are
  drawn once per sample size and stream, and every sample of that size takes its ``B``
  bootstrap medians by indexing its sorted values. Thousands of cells take milliseconds.
  Below MIN_ITERATIONS there is none: from n iterations even their whole range covers
  the median with probability 1 - 2^(1-n) only (94 % at 5), and the bootstrap's
  percentiles of so few are that range. The resamples treat iterations as independent:
  iterations that drift together make the interval too short (the table's time_drift
  columns say where they drift).
- **Over repeats** (separate processes): the statistic is the mean of the resampled
  repeats' median times, which sees the variation between processes that iterations of one
  process cannot show. With a handful of repeats the plain percentile interval is far too
  short (two repeats cover the truth ~50 % of the time at 95 %), so the resamples are
  widened about their mean in log space by Hesterberg's expansion,
  sqrt(r/(r-1)) * t(0.975, dof) / z(0.975) (``expansion``): about 93 % coverage at r=2,
  95 % from r=3.

Streams of random numbers are named by integers and depend only on the seed, the stream
and the sample size, so one cell's interval does not change when others are added.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

__all__ = ["Bootstrap", "expanded", "expansion", "interval", "median_interval", "t_quantile"]

# Resampled positions are drawn in blocks of at most this many integers.
BLOCK = 2_000_000
# The fewest iterations of one run a 95 % interval of their median is drawn from: from 5,
# their whole range covers the median with probability 1 - 2^-4 = 94 % only.
MIN_ITERATIONS = 6


class Bootstrap:
    """Resampling plans, drawn once per (stream, sample size) and reused by every cell."""

    def __init__(self, resamples: int, seed: int) -> None:
        self.resamples = resamples
        self.seed = seed
        self.median_positions = functools.cache(self._median_positions)
        self.mean_weights = functools.cache(self._mean_weights)

    def _rng(self, stream: int, kind: int, n: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, stream, kind, n])

    def _median_positions(self, stream: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions (lower, upper) of each resample's median among ``n`` sorted values:
        numpy's median of an even count is the mean of the two middle values."""
        rng = self._rng(stream, 0, n)
        lo_k, hi_k = (n - 1) // 2, n // 2
        lows, highs = [], []
        rows = max(1, BLOCK // n)
        for start in range(0, self.resamples, rows):
            count = min(rows, self.resamples - start)
            drawn = rng.integers(0, n, size=(count, n), dtype=np.int32)
            drawn.partition(sorted({lo_k, hi_k}), axis=1)
            lows.append(drawn[:, lo_k])
            highs.append(drawn[:, hi_k])
        return np.concatenate(lows), np.concatenate(highs)

    def _mean_weights(self, stream: int, n: int) -> np.ndarray:
        """(resamples, n) weights: how often each of ``n`` values is drawn, divided by n."""
        drawn = self._rng(stream, 1, n).integers(0, n, size=(self.resamples, n))
        counts = np.zeros((self.resamples, n))
        np.add.at(counts, (np.arange(self.resamples)[:, None], drawn), 1.0)
        return counts / n

    def medians(self, stream: int, samples: list[np.ndarray]) -> np.ndarray:
        """(len(samples), resamples): bootstrap medians of each sample, grouped by size."""
        out = np.full((len(samples), self.resamples), np.nan)
        for n, rows in _by_size(samples).items():
            lo, hi = self.median_positions(stream, n)
            values = np.sort(np.stack([samples[i] for i in rows]), axis=1)
            out[rows] = (values[:, lo] + values[:, hi]) / 2
        return out

    def means(self, stream: int, samples: list[np.ndarray]) -> np.ndarray:
        """(len(samples), resamples): bootstrap means of each sample, grouped by size."""
        out = np.full((len(samples), self.resamples), np.nan)
        for n, rows in _by_size(samples).items():
            out[rows] = np.stack([samples[i] for i in rows]) @ self.mean_weights(stream, n).T
        return out

    def centres(self, stream: int, samples: list[np.ndarray], by_repeats: np.ndarray,
                dofs: np.ndarray, confidence: float) -> np.ndarray:
        """(len(samples), resamples): bootstrap central times, the median of a sample of
        iterations, or (``by_repeats``) the mean of a sample of repeats' medians, widened
        with ``dofs`` degrees of freedom (``expanded``); NaN below two repeats, or below
        MIN_ITERATIONS iterations."""
        out = np.full((len(samples), self.resamples), np.nan)
        enough = np.array([len(s) >= MIN_ITERATIONS for s in samples], dtype=bool)
        rows = np.flatnonzero(~by_repeats & enough)
        if len(rows):
            out[rows] = self.medians(stream, [samples[i] for i in rows])
        rows = np.flatnonzero(by_repeats)
        if len(rows):
            picked = [samples[i] for i in rows]
            out[rows] = expanded(self.means(stream, picked), picked, dofs[rows], confidence)
        return out


def _by_size(samples: list[np.ndarray]) -> dict[int, list[int]]:
    """Indices of the samples of each size; a sample of fewer than 2 values has no spread."""
    groups: dict[int, list[int]] = {}
    for i, sample in enumerate(samples):
        if sample is not None and len(sample) >= 2:
            groups.setdefault(len(sample), []).append(i)
    return groups




def interval(boot: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per row; NaN where a row has no finite resample."""
    low = np.full(len(boot), np.nan)
    high = np.full(len(boot), np.nan)
    ok = np.isfinite(boot).all(axis=1)
    if ok.any():
        tail = (1 - confidence) / 2
        low[ok], high[ok] = np.quantile(boot[ok], [tail, 1 - tail], axis=1)
    return low, high




@functools.cache
def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile for p > 0.5 (no SciPy here): bisection on the distribution
    function, its density integrated numerically (smooth, so 20001 points are plenty)."""
    log_c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 20001)
        density = np.exp(log_c - (dof + 1) / 2 * np.log1p(grid * grid / dof))
        return 0.5 + float(np.trapezoid(density, grid))

    low, high = 0.0, 1.0
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


def expansion(values: int, dof: int, confidence: float) -> float:
    """How much wider a bootstrap of the mean of a few repeats must be (Hesterberg's
    expanded percentile interval): resampling ``values`` values spreads their mean by
    sqrt((n-1)/n) of its standard error, and the normal quantiles the percentile interval
    stands for are too short when ``dof`` degrees of freedom estimate that error."""
    p = 1 - (1 - confidence) / 2
    return math.sqrt(values / (values - 1)) * t_quantile(p, max(1, dof)) / NormalDist().inv_cdf(p)


def expanded(boot: np.ndarray, samples: list[np.ndarray], dofs: np.ndarray,
              confidence: float) -> np.ndarray:
    """Bootstrap means of repeats widened about each sample's mean by ``expansion``, in log
    space so that a widened time, energy or size stays positive."""
    out = boot.copy()
    for i, sample in enumerate(samples):
        if len(sample) >= 2 and (sample > 0).all():
            centre = math.log(sample.mean())
            k = expansion(len(sample), int(dofs[i]), confidence)
            out[i] = np.exp(centre + k * (np.log(boot[i]) - centre))
    return out


# The stream of the one-sample intervals (dlbench compare uses its own, 0-3).
ONE_SAMPLE_STREAM = 10


def median_interval(samples: list[np.ndarray], repeats: list[bool], *, resamples: int = 2000,
                    seed: int = 0, confidence: float = 0.95, chunk: int = 512
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A confidence interval of each sample's central time: of its median over its
    iterations, or (``repeats[i]``) of the mean of its values, one per repeat, over
    repeats (expanded). NaN where a sample has fewer than two repeats, or fewer than
    MIN_ITERATIONS iterations."""
    boot = Bootstrap(resamples, seed)
    low = np.full(len(samples), np.nan)
    high = np.full(len(samples), np.nan)
    dofs = np.array([max(1, len(v) - 1) for v in samples], dtype=int)
    by_repeats = np.asarray(repeats, dtype=bool)
    for start in range(0, len(samples), chunk):  # bounded memory: chunk x resamples floats
        part = slice(start, start + chunk)
        resampled = boot.centres(ONE_SAMPLE_STREAM, samples[part], by_repeats[part], dofs[part],
                                 confidence)
        low[part], high[part] = interval(resampled, confidence)
    return low, high
