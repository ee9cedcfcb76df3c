"""Run-to-run statistics of each measurement across a cell's repeats, as columns of the
aggregate table.

A study's ``repeats: N`` runs every cell N times, each a process of its own: one process's
iterations cannot show what differs between processes (memory placement, clocks, the
autotuner's picks, other tenants). Each ok row gets, for its measurement (system, study,
cell, name, operator, pass; a result without a cell id, made by a runner on its own, is
one of its own) over the ok repeats:

- ``repeats``: how many repeats measured it;
- ``cell_time_median_s``: the mean of the repeats' median step times (the statistic the
  interval is of; one run's median with one repeat), and ``cell_throughput`` = items per
  iteration / that time;
- ``cell_time_ci_low_s``/``cell_time_ci_high_s``: a 95 % confidence interval
  (``dlbench.bootstrap``): over the repeats, of the typical run's step time (the mean of
  their medians, expanded for few repeats) when there are two or more, else of the one
  run's median over its iterations, taken as independent; ``ci_method`` says which
  (``repeats``, ``iterations``, or ``none``: one run of fewer than
  ``bootstrap.MIN_ITERATIONS`` iterations, too few for a 95 % interval of their median);
- ``run_to_run_cv``: the standard deviation of the repeats' medians over their mean (two
  repeats or more), and ``within_run_cv``: each row's own std/mean of its iterations;
- ``unstable``: run-to-run CV above the threshold (config ``unstable_cv``, default 5 %);
  empty with a single repeat, where it cannot be known.

Every repeat's row carries the same cell values, so a reader may take any of them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas: for the readers of the table only (the report, compare)
    import pandas as pd

DEFAULT_UNSTABLE_CV = 0.05
REPEATS, ITERATIONS, NONE = "repeats", "iterations", "none"
KEY = ("system", "study", "cell_id", "name", "op_name", "pass")
COLUMNS = ("repeats", "cell_time_median_s", "cell_throughput", "cell_time_ci_low_s",
           "cell_time_ci_high_s", "ci_method", "run_to_run_cv", "within_run_cv", "unstable")


def check_threshold(value: Any) -> float:
    """The unstable_cv setting, or ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"unstable_cv: must be a fraction between 0 and 1 (0.05 = 5 %), "
                         f"got {value!r}")
    return float(value)


def _measured(row: Mapping[str, Any]) -> bool:
    median = row.get("time_median_s")
    return row.get("status") == "ok" and isinstance(median, (int, float)) and median > 0


def within_run_cv(row: Mapping[str, Any]) -> float | None:
    mean, std = row.get("time_mean_s"), row.get("time_std_s")
    if not isinstance(mean, (int, float)) or not isinstance(std, (int, float)) or mean <= 0:
        return None
    return std / mean


def measurement_key(row: Mapping[str, Any]) -> tuple:
    """Which rows are repeats of one measurement: KEY, and for a result made outside the
    workflow (a runner on its own, no cell id) its file too: two such runs are not known
    to be the same cell (a batch size apart, or two op configs with an operator alike)."""
    key = tuple(row.get(k) for k in KEY)
    return key if row.get("cell_id") is not None else (*key, row.get("source"))


def add_columns(rows: list[dict[str, Any]], unstable_cv: float = DEFAULT_UNSTABLE_CV) -> None:
    """Fill the columns above into ``rows`` (the aggregate's row dicts), in place."""
    import numpy as np  # here: the workflow reads this module's settings without numpy

    from dlbench import bootstrap

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if _measured(row):
            groups.setdefault(measurement_key(row), []).append(row)
    members = list(groups.values())
    samples, by_repeats = [], []
    for group in members:
        if len(group) >= 2:
            # sorted: the bootstrap's plan is by position, and the rows' order is no fact
            samples.append(np.sort(np.array([r["time_median_s"] for r in group], dtype=float)))
            by_repeats.append(True)
        else:
            times = np.asarray(group[0].get("times_s") or [], dtype=float)
            samples.append(times[np.isfinite(times)])
            by_repeats.append(False)
    low, high = bootstrap.median_interval(samples, by_repeats)
    for i, group in enumerate(members):
        medians = [r["time_median_s"] for r in group]
        # The statistic the interval is of (and dlbench compare's): the mean of the runs'
        # medians. Their median could lie outside it (11 runs at 0.100 s and 9 at 0.120 s).
        centre = statistics.fmean(medians)
        cv = statistics.stdev(medians) / statistics.fmean(medians) if len(group) >= 2 else None
        interval = bool(np.isfinite(low[i]) and np.isfinite(high[i]))
        items = group[0].get("items_per_iteration")
        values = {
            "repeats": len(group),
            "cell_time_median_s": centre,
            "cell_throughput": items / centre if isinstance(items, (int, float)) else None,
            "cell_time_ci_low_s": float(low[i]) if interval else None,
            "cell_time_ci_high_s": float(high[i]) if interval else None,
            "ci_method": (REPEATS if by_repeats[i] else ITERATIONS) if interval else NONE,
            "run_to_run_cv": cv,
            "unstable": None if cv is None else cv > unstable_cv,
        }
        for row in group:
            row.update(values, within_run_cv=within_run_cv(row))


def run_counts(frame: pd.DataFrame, cell: Sequence[pd.Series]) -> pd.Series:
    """How many runs each row's cell (its rows grouped by ``cell``) has, as the report and
    ``dlbench compare`` both count them: its result files in the table (``source``), or
    its highest repeat's count if more (a run left without a result); one at least, a
    table without sources or repeats counting each row a run."""
    import pandas as pd

    files = (frame["source"].groupby(list(cell), dropna=False).transform("nunique")
             if "source" in frame else pd.Series(1, index=frame.index))
    repeat = (pd.to_numeric(frame["repeat"], errors="coerce") if "repeat" in frame
              else pd.Series(float("nan"), index=frame.index))
    highest = repeat.groupby(list(cell), dropna=False).transform("max") + 1
    return pd.concat([files, highest], axis=1).max(axis=1).fillna(1).clip(lower=1)
