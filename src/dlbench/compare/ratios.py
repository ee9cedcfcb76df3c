"""Ratios NEW/BASE per matched cell, their bootstrap confidence intervals, the verdicts,
and geometric-mean summaries.

The intervals are percentile bootstraps (``dlbench.bootstrap``): over a side's
per-iteration times (statistic: the median) when it was measured once, over its repeats
(statistic: the mean of the repeats' medians, widened by Hesterberg's expansion with the
repeats' degrees of freedom of both sides) when it was measured several times.

BASE and NEW draw from different streams, so their resamples are independent; the
streams depend only on the seed, the side and the sample size, so a cell's interval does
not change when other cells are added or removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlbench import aggregate, bootstrap, drift, gpu_clocks, host_contention
from dlbench.comms.sizes import measured_label
from dlbench.compare.match import NOT_COMPARED

__all__ = ["Settings", "compare_cells", "side_values", "summaries", "verdicts"]

FASTER, SLOWER, SAME = "faster", "slower", "same"
REPEATS, ITERATIONS, NO_CI = "repeats", "iterations", "none"
# One side's interval over repeats, the other's over one run's iterations: judged as one run.
MIXED = "repeats+iterations"
# Streams of random numbers: one per side and purpose, so none is reused for another.
BASE_TIME, NEW_TIME, BASE_OTHER, NEW_OTHER = range(4)
# Cells bootstrapped together: bounds memory to about CHUNK x resamples floats per array.
CHUNK = 512
# Summaries: (group name, kind of cell, column), each a geometric mean per value.
# "scale" is a model cell's num_gpus (and num_nodes): a change at 8 GPUs only, a scaling
# regression, is not averaged away among the 1-GPU cells of its model.
GROUPS = (("model", "model", "model"), ("precision", "model", "precision"),
          ("phase", "model", "phase"), ("scale", "model", "scale"),
          ("operator", "op", "op_name"), ("collective", "comms", "collective"))


@dataclass(frozen=True)
class Settings:
    """How cells are judged (see docs/compare.md)."""

    threshold: float = 0.05  # |ratio - 1| a change must exceed to count
    # ... where a side ran once: its interval covers one process's iterations, not the
    # variation between runs, which reached 24 % between identical runs on a shared 2-core
    # VM (benchmarks/compare_honesty.py); below this a single run judges nothing.
    single_run_threshold: float = 0.25
    resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95


# -- one side's figures per key ------------------------------------------------------------

def _numbers(rows: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _times(value: object) -> np.ndarray:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return np.empty(0)
    array = np.asarray(value, dtype=float)
    return array[np.isfinite(array)]


# What a row's energy counts (dlbench.aggregate's column): energy per sample has a ratio
# only where both sides counted the same sources. A side's rows with energy but no sources
# read as this; a side whose table has no such column (an older table) is unknown, and
# its energy is compared as before the column existed.
ENERGY_SOURCES = aggregate.ENERGY_SOURCES
UNRECORDED = aggregate.SOURCES_UNRECORDED

# Per-repeat values with a ratio (and, given repeats on both sides, an interval).
OTHER_VALUES = (("energy", "energy_per_sample_j"), ("device_memory", "peak_device_memory_bytes"),
                ("allocated_memory", "max_memory_allocated_bytes"),
                ("host_memory", "peak_host_rss_bytes"), ("host_pss", "peak_host_pss_bytes"))
# Which memory figure a cell's memory ratio compares: the first that both sides have.
MEMORY_CHOICES = (("device_memory", "peak_device_memory_bytes"),
                  ("allocated_memory", "max_memory_allocated_bytes"),
                  ("host_pss", "peak_host_pss_bytes"), ("host_memory", "peak_host_rss_bytes"))
# The host processes' memory: their PSS (shared pages counted once) where both sides
# have it; an older table's RSS sum counts the pages loader workers share with their
# parent once per worker.
HOST_MEMORY_CHOICES = MEMORY_CHOICES[2:]


def side_values(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per key of one side: its figures (the mean over repeats where there are
    several) and the sample its bootstrap draws from (``sample``, ``method``)."""
    spj = _numbers(rows, "samples_per_joule")
    with np.errstate(divide="ignore", invalid="ignore"):
        rows = rows.assign(energy_per_sample_j=np.where(spj > 0, 1 / spj, np.nan),
                           _held_back=_numbers(rows, "gpu_clocks_held_back"),
                           _steal=_numbers(rows, "cpu_steal_fraction"),
                           _throttled=_numbers(rows, "cpu_throttled_s"),
                           # a run that drifted (dlbench.drift): its drift, else none
                           _drift=np.where(rows["drifting"].astype("boolean").fillna(False)
                                           .to_numpy(bool), _numbers(rows, "time_drift"),
                                           np.nan))
        # Items per iteration, else as the runner's columns give them (throughput = items
        # over the median time): the throughput of a side is items over its mean time.
        items = _numbers(rows, "items_per_iteration")
        rows = rows.assign(_items=np.where(np.isfinite(items) & (items > 0), items,
                                           _numbers(rows, "throughput")
                                           * _numbers(rows, "time_median_s")))
    group = rows.groupby("_key", sort=False)
    out = pd.DataFrame({
        "repeats": group.size(),
        "time_median_s": group["time_median_s"].mean(),
        "time_p95_s": group["time_p95_s"].mean(), "time_p99_s": group["time_p99_s"].mean(),
        # items over the mean of the medians, as the throughput ratio (the mean of the
        # repeats' throughputs is another figure: 0.1 s and 0.2 s are 750/s, not 667/s)
        "throughput": group["_items"].mean() / group["time_median_s"].mean(),
        "throughput_unit": group["throughput_unit"].first(),
        "items_per_iteration": group["_items"].mean(),
        "iterations": group["iterations"].sum(min_count=1),
        "system": group["system"].first(),
        # The most held-back run's share of samples with its GPU below its clock, and why.
        "gpu_clocks_held_back": group["_held_back"].max(),
        # The most the host took from a run (dlbench.host_contention): steal, throttling.
        "cpu_steal_fraction": group["_steal"].max(),
        "cpu_throttled_s": group["_throttled"].max(),
    })
    out["gpu_clock_reasons"] = (rows.sort_values("_held_back", ascending=False)
                                .groupby("_key", sort=False)["gpu_clock_reasons"].first()
                                .reindex(out.index))
    # Runs that disagree beyond the table's unstable_cv (the aggregate's flag): their CV
    # and the range of their medians, said beside the verdict (NaN where they agree).
    unstable = rows["unstable"].astype("boolean").fillna(False) if "unstable" in rows \
        else pd.Series(False, index=rows.index)
    flagged = rows.assign(_cv=np.where(unstable.to_numpy(bool),
                                       _numbers(rows, "run_to_run_cv"), np.nan))
    out["run_to_run_cv"] = flagged.groupby("_key", sort=False)["_cv"].max()
    out["median_low_s"] = group["time_median_s"].min()
    out["median_high_s"] = group["time_median_s"].max()
    # The run that drifted most (NaN where none did).
    out["time_drift"] = (rows.assign(_size=np.abs(rows["_drift"]))
                         .sort_values("_size", ascending=False, na_position="last")
                         .groupby("_key", sort=False)["_drift"].first().reindex(out.index))
    # Plain arrays and lists from here: iterating pandas groups costs ~1 ms a group.
    codes, uniques = pd.factorize(rows["_key"])
    positions: list[list[int]] = [[] for _ in uniques]
    for i, code in enumerate(codes):
        positions[code].append(i)
    medians = _numbers(rows, "time_median_s")
    times = rows["times_s"].tolist()
    columns = {name: _numbers(rows, column) for name, column in OTHER_VALUES}
    samples, methods = [], []
    others: dict[str, list[np.ndarray]] = {name: [] for name, _ in OTHER_VALUES}
    sources = rows[ENERGY_SOURCES].tolist() if ENERGY_SOURCES in rows else None
    counted: list[tuple[str, ...] | None] = []
    for where in positions:
        counted.append(None if sources is None else
                       _sources_of([sources[i] for i in where
                                    if np.isfinite(columns["energy"][i])]))
        if len(where) >= 2:
            # sorted: the bootstrap's plan is by position, and the rows' order is no fact
            sample = np.sort(medians[where])
            samples.append(sample[np.isfinite(sample)])
            methods.append(REPEATS)
        else:
            samples.append(_times(times[where[0]]))
            methods.append(ITERATIONS if len(samples[-1]) >= bootstrap.MIN_ITERATIONS
                           else NO_CI)
        for name, values in columns.items():
            picked = np.sort(values[where])
            others[name].append(picked[np.isfinite(picked)])
    index = pd.Index(uniques)
    out["sample"] = pd.Series(samples, index=index, dtype=object)
    out["method"] = pd.Series(methods, index=index, dtype=object)
    for name, values in others.items():
        out[f"{name}_values"] = pd.Series(values, index=index, dtype=object)
    out[ENERGY_SOURCES] = pd.Series(counted, index=index, dtype=object)
    return out


def _sources_of(values: list[object]) -> tuple[str, ...]:
    """The distinct sources of one side's runs with energy (UNRECORDED for a run with
    energy but no sources); more than one where its runs counted differently."""
    return tuple(sorted({v if isinstance(v, str) and v else UNRECORDED for v in values}))


# -- ratios per cell -----------------------------------------------------------------------

def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else np.nan


def _repeat_dof(base: list[np.ndarray], new: list[np.ndarray], base_repeats: np.ndarray,
                new_repeats: np.ndarray) -> np.ndarray:
    """Degrees of freedom of the spread between repeats: r - 1 from each side resampled
    over its repeats."""
    return (np.where(base_repeats, [len(v) - 1 for v in base], 0)
            + np.where(new_repeats, [len(v) - 1 for v in new], 0))


def _ratio_with_interval(base: pd.Series, new: pd.Series, boot: bootstrap.Bootstrap, confidence: float
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NEW/BASE of the means of per-repeat values (energy per sample, peak memory); an
    interval (expanded bootstrap over repeats) only where both sides have two or more."""
    b = np.array([_mean(v) for v in base])
    n = np.array([_mean(v) for v in new])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, n / b, np.nan)
    low = np.full(len(b), np.nan)
    high = np.full(len(b), np.nan)
    both = [i for i in range(len(b)) if len(base.iloc[i]) >= 2 and len(new.iloc[i]) >= 2
            and np.isfinite(ratio[i])]
    if both:
        b_samples = [base.iloc[i] for i in both]
        n_samples = [new.iloc[i] for i in both]
        dofs = _repeat_dof(b_samples, n_samples, np.ones(len(both), bool), np.ones(len(both), bool))
        b_boot = bootstrap.expanded(boot.means(BASE_OTHER, b_samples), b_samples, dofs, confidence)
        n_boot = bootstrap.expanded(boot.means(NEW_OTHER, n_samples), n_samples, dofs, confidence)
        with np.errstate(divide="ignore", invalid="ignore"):
            low[both], high[both] = bootstrap.interval(n_boot / b_boot, confidence)
    return ratio, low, high


def _time_boot(values: pd.DataFrame, stream: int, boot: bootstrap.Bootstrap, dofs: np.ndarray,
               confidence: float) -> np.ndarray:
    """(cells, resamples) bootstrap central times of one side: medians of iterations, or
    means of repeats' medians (expanded)."""
    return boot.centres(stream, list(values["sample"]), values["method"].to_numpy() == REPEATS,
                        dofs, confidence)


def _throughput_factor(base: pd.DataFrame, new: pd.DataFrame) -> np.ndarray:
    """NEW items per iteration / BASE's (each side's, from its throughput columns where
    not recorded: side_values): 1 for matched cells in practice, and where unknown."""
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = (new["items_per_iteration"].to_numpy(float)
                  / base["items_per_iteration"].to_numpy(float))
    return np.where(np.isfinite(factor) & (factor > 0), factor, 1.0)


def _ci_method(base: pd.DataFrame, new: pd.DataFrame) -> np.ndarray:
    b, n = base["method"].to_numpy(), new["method"].to_numpy()
    return np.where((b == NO_CI) | (n == NO_CI), NO_CI,
                    np.where((b == REPEATS) & (n == REPEATS), REPEATS,
                             np.where((b == REPEATS) | (n == REPEATS), MIXED, ITERATIONS)))


def _memory_metric(base: pd.DataFrame, new: pd.DataFrame,
                   choices: tuple[tuple[str, str], ...] = MEMORY_CHOICES
                   ) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Per cell, the first of ``choices`` that both sides have (by default: peak device
    memory as the monitor saw it, else the framework's own peak allocation, else, a CPU
    cell, the process tree's peak PSS, else its RSS): its column and both sides' values;
    None where none."""
    metric, b_values, n_values = [], [], []
    columns = [(column, base[f"{name}_values"].tolist(), new[f"{name}_values"].tolist())
               for name, column in choices]
    for i in range(len(base)):
        for column, b, n in columns:
            if len(b[i]) and len(n[i]):
                metric.append(column)
                b_values.append(b[i])
                n_values.append(n[i])
                break
        else:
            metric.append(None)
            b_values.append(np.empty(0))
            n_values.append(np.empty(0))
    return (pd.Series(metric, index=base.index, dtype=object),
            pd.Series(b_values, index=base.index, dtype=object),
            pd.Series(n_values, index=base.index, dtype=object))


def _side_sources_text(label: str, sources: tuple[str, ...]) -> str:
    if sources == (UNRECORDED,):
        return f"{label}'s sources not recorded"
    if len(sources) > 1:
        return f"{label}'s runs counted {' or '.join(sources)}"
    return f"{label} counted {sources[0]}"


def energy_sources_note(base: tuple[str, ...] | None, new: tuple[str, ...] | None) -> str | None:
    """Why a cell's energy per sample has no ratio: its sides counted different sources
    (a host without readable RAPL counts its GPUs only, and would look the more efficient),
    a side did not record them, or a side's runs counted differently. None where the
    energy compares: both sides counted one and the same, or a side has no energy, or a
    side's table has no sources column (unknown: compared as before)."""
    if base is None or new is None:  # one side unknown: the other's runs must agree
        mixed = [(label, side) for label, side in (("BASE", base), ("NEW", new))
                 if side is not None and len(side) > 1]
        return ("energy not compared: " + ", ".join(_side_sources_text(label, side)
                                                    for label, side in mixed)) if mixed else None
    if not base or not new:
        return None
    if base == new and len(base) == 1 and base != (UNRECORDED,):
        return None
    return (f"energy not compared: {_side_sources_text('BASE', base)}, "
            f"{_side_sources_text('NEW', new)}")


def _energy_notes(base: pd.DataFrame, new: pd.DataFrame) -> np.ndarray:
    """Per cell, why its energy is not compared (energy_sources_note), else None."""
    pairs = zip(base[ENERGY_SOURCES].tolist(), new[ENERGY_SOURCES].tolist(), strict=True)
    return np.array([energy_sources_note(b, n) for b, n in pairs], dtype=object)


def without_unknown_sources(frame: pd.DataFrame) -> pd.DataFrame:
    """A side read from a table older than the energy_sources column (``inputs`` lists
    the columns its file lacked in ``attrs["missing_columns"]``) without the empty column
    that stands in for it: its sources are unknown, not unrecorded."""
    if ENERGY_SOURCES in frame.attrs.get("missing_columns", ()):
        return frame.drop(columns=ENERGY_SOURCES)
    return frame


def compare_cells(base_rows: pd.DataFrame, new_rows: pd.DataFrame, keys: list[str],
                  settings: Settings | None = None) -> pd.DataFrame:
    """One row per matched key (index ``_key``): both sides' figures, the ratios NEW/BASE
    with their intervals, ``ci_method`` and the verdict."""
    settings = settings or Settings()
    base = side_values(base_rows).reindex(keys)
    new = side_values(new_rows).reindex(keys)
    boot = bootstrap.Bootstrap(settings.resamples, settings.seed)
    out = pd.DataFrame(index=pd.Index(keys, name="_key"))
    factor = _throughput_factor(base, new)
    b_time, n_time = base["time_median_s"].to_numpy(float), new["time_median_s"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):  # a time of 0: no ratio (below)
        out["throughput_ratio"] = factor * b_time / n_time
        out["p50_ratio"] = n_time / b_time
    intervals = {name: np.full(len(keys), np.nan) for name in
                 ("throughput_ci_low", "throughput_ci_high", "p50_ci_low", "p50_ci_high")}
    dofs = _repeat_dof(list(base["sample"]), list(new["sample"]),
                       base["method"].to_numpy() == REPEATS, new["method"].to_numpy() == REPEATS)
    for start in range(0, len(keys), CHUNK):  # bounded memory: CHUNK x resamples per array
        part = slice(start, start + CHUNK)
        b_boot = _time_boot(base.iloc[part], BASE_TIME, boot, dofs[part], settings.confidence)
        n_boot = _time_boot(new.iloc[part], NEW_TIME, boot, dofs[part], settings.confidence)
        with np.errstate(divide="ignore", invalid="ignore"):
            speed = factor[part, None] * b_boot / n_boot
            latency = n_boot / b_boot
        (intervals["throughput_ci_low"][part],
         intervals["throughput_ci_high"][part]) = bootstrap.interval(speed, settings.confidence)
        (intervals["p50_ci_low"][part],
         intervals["p50_ci_high"][part]) = bootstrap.interval(latency, settings.confidence)
    for name, values in intervals.items():
        out[name] = values
    out["ci_method"] = _ci_method(base, new)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["p95_ratio"] = new["time_p95_s"].to_numpy(float) / base["time_p95_s"].to_numpy(float)
        out["p99_ratio"] = new["time_p99_s"].to_numpy(float) / base["time_p99_s"].to_numpy(float)
    (out["energy_per_sample_ratio"], out["energy_ci_low"],
     out["energy_ci_high"]) = _ratio_with_interval(base["energy_values"], new["energy_values"],
                                                   boot, settings.confidence)
    energy_notes = _energy_notes(base, new)
    apart = np.array([n is not None for n in energy_notes], dtype=bool)
    for column in ("energy_per_sample_ratio", "energy_ci_low", "energy_ci_high"):
        out.loc[apart, column] = np.nan
    metric, b_memory, n_memory = _memory_metric(base, new)
    out["memory_metric"] = metric
    out["memory_ratio"], out["memory_ci_low"], out["memory_ci_high"] = _ratio_with_interval(
        b_memory, n_memory, boot, settings.confidence)
    host_metric, b_host, n_host = _memory_metric(base, new, HOST_MEMORY_CHOICES)
    out["host_memory_metric"] = host_metric
    (out["host_memory_ratio"], out["host_memory_ci_low"],
     out["host_memory_ci_high"]) = _ratio_with_interval(b_host, n_host, boot,
                                                        settings.confidence)
    for side, values in (("base", base), ("new", new)):
        for column in ("time_median_s", "throughput", "repeats", "iterations", "system"):
            out[f"{side}_{column}"] = values[column].to_numpy()
    out["throughput_unit"] = new["throughput_unit"].fillna(base["throughput_unit"]).to_numpy()
    for side, values in (("base", base), ("new", new)):
        out[f"{side}_gpu_clocks_held_back"] = values["gpu_clocks_held_back"].to_numpy()
        out[f"{side}_time_drift"] = values["time_drift"].to_numpy()
    # The notes stay an object array until complete: a column of strings and None would
    # be read back with NaN for None (pandas 3's string dtype), and NaN is truthy.
    out["verdict"], notes = verdicts(out, settings.threshold, settings.single_run_threshold)
    # A median time of 0 (an operator below its timer's resolution) has no ratio.
    zero = ~((b_time > 0) & (n_time > 0))
    if zero.any():
        for column in ("throughput_ratio", "throughput_ci_low", "throughput_ci_high",
                       "p50_ratio", "p50_ci_low", "p50_ci_high"):
            out.loc[zero, column] = np.nan
        out.loc[zero, "verdict"] = NOT_COMPARED
        notes[zero] = ("a median time of 0 on a side (below its timer's resolution, or "
                       "unrecorded): no ratio")
    out["note"] = _with_side_notes(notes, energy_notes, base, new)
    return out


def _with_side_notes(notes: np.ndarray, energy_notes: np.ndarray, base: pd.DataFrame,
                     new: pd.DataFrame) -> np.ndarray:
    """Each cell's note, then why its energy is not compared, plus a line for each side
    whose GPU clocks were held back (a power cap or heat on one side alone can make the
    difference) and for each side whose iteration times drifted (its median is that of a
    moving target)."""
    out = notes.copy()
    sides = [(label, side["gpu_clocks_held_back"].to_numpy(float),
              side["gpu_clock_reasons"].to_numpy(), side["time_drift"].to_numpy(float),
              side[["run_to_run_cv", "repeats", "median_low_s", "median_high_s"]]
              .to_numpy(float),
              side[["cpu_steal_fraction", "cpu_throttled_s"]].to_numpy(float))
             for label, side in (("BASE", base), ("NEW", new))]
    for i in range(len(out)):
        parts = [out[i], energy_notes[i]]
        for label, held, reasons, drifted, runs, taken in sides:
            parts.append(gpu_clocks.note(label, held[i], reasons[i]))
            parts.append(host_contention.side_note(label, *taken[i]))
            parts.append(drift.note(label, drifted[i], bool(np.isfinite(drifted[i])),
                                    held[i], reasons[i]))
            parts.append(_unstable_note(label, *runs[i]))
        out[i] = "; ".join(p for p in parts if p) or None
    return out


def _unstable_note(label: str, cv: float, repeats: float, low: float, high: float
                   ) -> str | None:
    """A side whose runs disagree beyond the table's unstable_cv: their CV and the range
    of their medians (the side's figure is their mean, which one slow run moves)."""
    if not np.isfinite(cv):
        return None
    return (f"{label}'s {int(repeats)} runs disagree (run-to-run CV {cv:.0%}; "
            f"medians {low:.3g} to {high:.3g} s)")


def verdicts(cells: pd.DataFrame, threshold: float, single_run_threshold: float | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """faster / slower only where the throughput interval excludes 1 AND the ratio is more
    than the threshold away from 1: ``threshold`` where both sides ran as repeats,
    ``single_run_threshold`` (if larger) where a side ran once; same otherwise, with a
    note where a single run could not judge the change. A cell without an interval (one
    run of fewer than bootstrap.MIN_ITERATIONS iterations on a side) is judged on its ratio
    alone against the single-run threshold, with a note saying so: a 10x slowdown must not
    pass for noise."""
    ratio = cells["throughput_ratio"].to_numpy(float)
    low = cells["throughput_ci_low"].to_numpy(float)
    high = cells["throughput_ci_high"].to_numpy(float)
    single = cells["ci_method"].to_numpy() != REPEATS
    single_needed = max(threshold, single_run_threshold or 0.0)
    needed = np.where(single, single_needed, threshold)
    no_interval = ~(np.isfinite(low) & np.isfinite(high))
    # no interval: as though it excluded 1 on the side the ratio lies (one run's change)
    above = np.where(no_interval, ratio > 1, low > 1)
    below = np.where(no_interval, ratio < 1, high < 1)
    needed = np.where(no_interval, single_needed, needed)
    faster = above & (ratio > 1 + needed)
    # 1 / (1 + needed), not 1 - needed: the same change either way round (BASE and NEW
    # swapped, 1.31x faster is 0.763x, which 1 - 0.25 did not call slower)
    slower = below & (ratio < 1 / (1 + needed))
    verdict = np.where(faster, FASTER, np.where(slower, SLOWER, SAME)).astype(object)
    unjudged = (single & ~no_interval & ((low > 1) | (high < 1))
                & ((ratio > 1 + threshold) | (ratio < 1 / (1 + threshold)))
                & (verdict == SAME))
    note = np.full(len(ratio), None, dtype=object)
    note[no_interval & np.isfinite(ratio)] = (
        f"no confidence interval (one run of fewer than {bootstrap.MIN_ITERATIONS} "
        "iterations on a side): judged on its ratio "
        f"alone against the {single_needed * 100:g} % single-run threshold")
    if unjudged.any():
        note[unjudged] = (f"one run on a side: a change under {needed.max() * 100:g} % cannot "
                          "be told from run-to-run variation; run the study with repeats")
    return verdict, note


# -- summaries -----------------------------------------------------------------------------

def geometric_mean(ratios: pd.Series) -> float:
    values = ratios.to_numpy(float)
    values = values[np.isfinite(values) & (values > 0)]
    return float(np.exp(np.log(values).mean())) if len(values) else np.nan


def _summary_row(group: str, value: str, cells: pd.DataFrame) -> dict[str, object]:
    verdict = cells["verdict"]
    ratio = cells["throughput_ratio"]
    return {"group": group, "value": value, "cells": len(cells),
            "geomean_ratio": geometric_mean(ratio), "min_ratio": ratio.min(),
            "max_ratio": ratio.max(), "faster": int((verdict == FASTER).sum()),
            "slower": int((verdict == SLOWER).sum()), "same": int((verdict == SAME).sum())}


def _scale(gpus: object, nodes: object) -> tuple[str, tuple[int, int]]:
    """num_gpus=8, or num_gpus=8 num_nodes=2, as the cells' labels spell them, and the
    numbers to order them by."""
    def whole(value: object, missing: int) -> int:
        number = pd.to_numeric(value, errors="coerce")
        return missing if pd.isna(number) else int(number)

    key = (whole(gpus, 0), whole(nodes, 1))
    text = f"num_gpus={key[0]}"
    return (text if key[1] == 1 else f"{text} num_nodes={key[1]}"), key


def summaries(cells: pd.DataFrame) -> pd.DataFrame:
    """Geometric means of the throughput ratios of the compared cells: of all of them, per
    model, precision, phase and scale (num_gpus, num_nodes) of model cells, per operator
    of operator cells and per collective of collective cells (all their message sizes)."""
    compared = cells[cells["verdict"].isin([FASTER, SLOWER, SAME])
                     & np.isfinite(cells["throughput_ratio"].astype(float))]
    rows = [_summary_row("all", "all cells", compared)] if len(compared) else []
    for group, kind, column in GROUPS:
        part = compared[compared["kind"] == kind]
        if column == "scale":  # a table older than num_nodes: one node
            nodes = part["num_nodes"] if "num_nodes" in part else pd.Series(1, part.index)
            scales = [_scale(g, n) for g, n in zip(part["num_gpus"], nodes, strict=True)]
            values = pd.Series([text for text, _ in scales], index=part.index, dtype=object)
            order = [text for text, _ in sorted(set(scales), key=lambda s: s[1])]  # 2 < 16
        else:
            values = part[column].fillna("(none)").astype(str)
            order = None
        if column == "collective":  # a point-to-point cell's tests are apart: latency, ...
            values = pd.Series([measured_label(c, p) for c, p in zip(values, part["pass"],
                                                                  strict=True)],
                               index=part.index, dtype=object)
        for value in order or sorted(set(values)):
            rows.append(_summary_row(group, str(value), part[values == value]))
    return pd.DataFrame(rows, columns=["group", "value", "cells", "geomean_ratio", "min_ratio",
                                       "max_ratio", "faster", "slower", "same"])
