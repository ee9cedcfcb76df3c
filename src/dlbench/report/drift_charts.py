"""Drift within a run (dlbench.drift): the measurements whose iteration times rose or fell
steadily over their measured iterations, listed, and the largest drawn iteration by
iteration against their median.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench import drift
from dlbench.report.data import DRIFT_TIMES, joined, measurement_names, names_runs
from dlbench.report.style import Column, Figure, NumbersTable, nouns, styled
from dlbench.report.tables import table

# The chart draws this many measurements, those that drifted most; the table lists all.
MAX_DRAWN = 8
# A longer run is drawn as the medians of this many stretches of it (the page stays small).
MAX_POINTS = 400


def drifting_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that drifted, each measurement of each result file once, most first."""
    if "drifting" not in frame:
        return frame.iloc[0:0]
    rows = frame[frame["drifting"].astype("boolean").fillna(False).astype(bool)]
    keys = [k for k in ("source", "name", "pass", "op_name") if k in rows]
    rows = rows.drop_duplicates(subset=keys, keep="last")
    size = pd.to_numeric(rows["time_drift"], errors="coerce").abs()
    return rows.assign(_size=size).sort_values("_size", ascending=False, kind="stable")


def _label(rows: pd.DataFrame) -> pd.Series:
    """system/cell · [operator] measurement · pass [· run k]: an operator cell's inputs are
    named by position, and each has a forward and a backward measurement; one cell id on
    two systems is two cells (data.prepare's ``cell``); a line is one run's iterations, so
    where its cell ran more than once it says which run."""
    parts = rows.get("cell", rows["cell_id"]).fillna("").to_frame("cell")
    parts = parts.assign(name=measurement_names(rows), phase=rows["pass"].fillna("") if "pass" in rows else "")
    if "repeat" in rows and names_runs(rows):
        # numbered from 1, as the failures listing numbers a cell's runs
        parts = parts.assign(run="run " + (rows["repeat"].fillna(0).astype(int) + 1)
                             .astype(str))
    return joined(parts, skip_empty=True)


def drift_table(frame: pd.DataFrame) -> str | None:
    rows = drifting_rows(frame)
    if rows.empty:
        return None
    held = (pd.to_numeric(rows["gpu_clocks_held_back"], errors="coerce")
            if "gpu_clocks_held_back" in rows else pd.Series(float("nan"), index=rows.index))
    reasons = rows.get("gpu_clock_reasons", pd.Series(None, index=rows.index))
    settled = rows.get("warmup_settled", pd.Series(None, index=rows.index))
    # not r.name: a row of iterrows() is a Series, whose .name is its index label
    names = measurement_names(rows)
    body = [[r.study, r.system, r.get("cell") or r.cell_id, names[i], r["pass"],
             int(r["repeat"]) + 1 if pd.notna(r["repeat"]) else "",  # from 1, as elsewhere
             int(r.iterations) if pd.notna(r.iterations) else "",
             f"{r.time_drift:+.1%}", f"{r.time_drift_p:.0e}",
             f"{r.time_median_s * 1e3:,.3f}",
             drift.reading(r.time_drift, held[i], reasons[i],
                           bool(settled[i]) if pd.notna(settled[i]) else None,
                           drift.step_at(r.get(DRIFT_TIMES)))]
            for i, r in rows.iterrows()]
    return table(["study", "system", "cell", "measurement", "pass", "run", "iterations",
                  "drift", "p", "median time (ms)", "most likely"], body)


def unsettled_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The measurements whose warm-up until steady stopped at its limit, each once."""
    if "warmup_settled" not in frame:
        return frame.iloc[0:0]
    settled = frame["warmup_settled"].astype("boolean")
    rows = frame[settled.notna() & ~settled.fillna(True)]
    keys = [k for k in ("source", "name", "pass", "op_name") if k in rows]
    return rows.drop_duplicates(subset=keys, keep="last")


def unsettled_table(frame: pd.DataFrame) -> str | None:
    """Warm-ups until steady that reached their limit (iterations or seconds) first: those
    cells were measured while still moving, whether or not the drift test saw it."""
    rows = unsettled_rows(frame)
    if rows.empty:
        return None
    names = measurement_names(rows)
    body = [[r.study, r.system, r.get("cell") or r.cell_id, names[i], r["pass"],
             f"{r.warmup_seconds:,.1f}" if pd.notna(r.warmup_seconds) else "",
             f"{r.time_drift:+.1%}" if pd.notna(r.get("time_drift")) else ""]
            for i, r in rows.iterrows()]
    return ('<p class="note">Warm-ups until steady (warmup_until_steady) that reached their '
            "limit before the times settled: these cells were measured still moving.</p>"
            + table(["study", "system", "cell", "measurement", "pass", "warm-up (s)",
                     "drift"], body))


def drift_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per measured iteration of the MAX_DRAWN measurements that drifted most:
    its time as a share of the measurement's median."""
    if DRIFT_TIMES not in frame:
        return pd.DataFrame()
    rows = drifting_rows(frame)
    rows = rows[rows[DRIFT_TIMES].map(lambda t: isinstance(t, list) and len(t) > 0)]
    rows = rows.head(MAX_DRAWN)
    if rows.empty:
        return pd.DataFrame()
    labels = _label(rows) + " (" + rows["time_drift"].map(lambda c: f"{c:+.0%}") + ")"
    parts = []
    for label, times in zip(labels, rows[DRIFT_TIMES], strict=True):
        series = pd.Series(times, dtype=float)
        relative = series / series.median()
        iteration = pd.Series(range(1, len(series) + 1), dtype=float)
        if len(series) > MAX_POINTS:  # a long run: the median of each stretch of it
            stretch = iteration.sub(1).mul(MAX_POINTS / len(series)).astype(int)
            relative = relative.groupby(stretch).median()
            iteration = iteration.groupby(stretch).mean()
        parts.append(pd.DataFrame({"measurement": label, "iteration": iteration.to_numpy(),
                                   "relative": relative.to_numpy()}))
    return pd.concat(parts, ignore_index=True)


def drift_figure(frame: pd.DataFrame) -> Figure | None:
    long = drift_frame(frame)
    if long.empty:
        return None
    order = list(dict.fromkeys(long["measurement"]))
    lines = alt.Chart(long).mark_line(strokeWidth=1.4, opacity=0.85).encode(
        x=alt.X("iteration:Q", title="measured iteration"),
        y=alt.Y("relative:Q", title="iteration time ÷ the measurement's median",
                scale=alt.Scale(zero=False)),
        color=alt.Color("measurement:N", title=None, sort=order,
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=900)),
        tooltip=[alt.Tooltip("measurement:N"), alt.Tooltip("iteration:Q"),
                 alt.Tooltip("relative:Q", format=".3f")],
    )
    median = alt.Chart(pd.DataFrame({"relative": [1.0]})).mark_rule(
        strokeDash=[4, 3], color="#9aa5b1").encode(y="relative:Q")
    chart = alt.layer(lines, median).properties(width=560, height=260)
    drawn = long["measurement"].nunique()
    which = "measurement" if drawn == 1 else nouns(drawn, "measurement")
    caption = (f"The {which} that drifted most, each iteration's time over "
               "its measurement's median (the dashed line): a rising line is a run that "
               "slowed down (a GPU lowering its clocks as it heats, memory filling up), a "
               "falling one a run still warming up. Drift is Sen's slope over the measured "
               f"iterations as a share of the median, flagged at {drift.NOTABLE:.0%} or more "
               f"with Mann-Kendall's p below {drift.SIGNIFICANCE:g}.")
    # The frame: the chart's dashed line is rows of its own, so it has none at its top.
    return Figure("drift", "Iteration times of the runs that drifted", caption,
                  styled(chart), table=NumbersTable([
                      Column("measurement", "measurement"), Column("iteration", "iteration", ",g"),
                      Column("relative", "time ÷ median", ",.3f")], frame=long))
