"""The aggregate table as the report needs it: loaded, checked and given a few derived columns."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dlbench import aggregate, run_to_run
from dlbench.aggregate import TableError, read_table, unstable_cv_of, with_every_column
from dlbench.stats import SUMMARY_KEYS

# The columns every section relies on; the others are used where present.
REQUIRED_COLUMNS = ("study", "cell_id", "kind", "status", "error", "source")
# Preferred orders, so that every chart lists precisions and phases the same way.
PRECISION_ORDER = ("float64", "float32", "tf32", "bfloat16", "float16", "float8")
PHASE_ORDER = ("training", "inference")
STATUS_ORDER = ("ok", "oom", "failed", "skipped")


class ReportError(ValueError):
    """A problem with the report's input, said in one line naming the file or field."""


# The unstable_cv the table was written with (dlbench.aggregate), in the frame's attrs.
UNSTABLE_CV = "unstable_cv"


def load(path: str | Path) -> pd.DataFrame:
    """Read the aggregate Parquet, one row per measurement of each run (per-iteration times
    left out)."""
    path = Path(path)
    if path.is_dir():
        raise ReportError(f"{path}: a folder, not an aggregate Parquet file (such as "
                          "results/benchmarks.parquet)")
    if not path.is_file():
        raise ReportError(f"{path}: no such aggregate Parquet file")
    try:
        table = read_table(path, REQUIRED_COLUMNS)
    except TableError as exc:
        raise ReportError(str(exc)) from None
    drifting_times = None
    if "times_s" in table.column_names:
        drifting_times = _drifting_times(table)
        table = table.drop_columns(["times_s"])
    frame = table.to_pandas()
    # A table from an older aggregate lacks some columns: they read as empty.
    with_every_column(frame)
    frame = frame.drop(columns=["times_s"])
    frame[DRIFT_TIMES] = drifting_times if drifting_times is not None else None
    frame = prepare(frame)
    frame.attrs[UNSTABLE_CV] = unstable_cv_of(table)
    return frame


# The per-iteration times of the measurements that drifted (dlbench.drift), which the
# report draws; every other row's are left out of memory.
DRIFT_TIMES = "drift_times_s"


def _drifting_times(table: pa.Table) -> pd.Series | None:
    if "drifting" not in table.column_names:
        return None
    flagged = pc.fill_null(table.column("drifting"), False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(flagged)
    times: list[list[float] | None] = [None] * table.num_rows
    for row, series in zip(rows, table.column("times_s").take(rows).to_pylist(), strict=True):
        times[row] = series
    return pd.Series(times, dtype=object)


def prepare(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the identity of each cell (``cell``) and order the rows by when they finished,
    so that a cell's last run comes last. Every run's rows stay: ``measured`` makes one
    row of them per measurement."""
    frame = frame.copy()
    frame["cell"] = frame["cell_id"].fillna(frame["source"]).fillna("")
    if "system" in frame:
        # One cell id measured on two systems is two cells of the report.
        system = frame["system"].fillna("")
        frame["cell"] = system.where(system == "", system + "/") + frame["cell"]
    frame["study"] = frame["study"].fillna("(no study)")
    if "finished_at" in frame:
        frame = frame.sort_values("finished_at", na_position="first", kind="stable")
    return frame.reset_index(drop=True)


def measurement_names(rows: pd.DataFrame) -> pd.Series:
    """A measurement's name, with its operator where a cell ran several (an operator cell's
    inputs are named by position: each op's first input is "0")."""
    name = rows["name"].fillna("").astype(str)
    if "op_name" in rows:
        op = rows["op_name"].fillna("").astype(str)
        name = name.where((op == "") | (op == name), op + " " + name)
    return name


def cells(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per cell of each study (a cell's status and error are on all its rows, but
    for an operator cell's failed inputs, rows of their own beside its ok measurements:
    such a cell is ok)."""
    return cell_rows(frame).drop_duplicates(subset=["study", "cell"], keep="last")


def cell_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows a cell's figures come from (``cells``): its ok rows, or every row of a
    cell none of whose runs is ok."""
    return frame[frame["status"].eq("ok") | ~has_ok_run(frame)]


def has_ok_run(frame: pd.DataFrame) -> pd.Series:
    """Whether each row's cell (of its study) has an ok row: such a cell counts as ok,
    whatever its other runs or inputs did (``cells``)."""
    ok = frame["status"].eq("ok")
    return ok.groupby([frame["study"], frame["cell"]]).transform("any")


# The figures each run has of its own (its spread of iteration times, what the resource
# monitor recorded, its compile time, ...): a measurement's is the mean over its cell's
# runs (``measured``), as its time is (``cell_time``: the mean of the runs' medians). The
# run's median and the rates of work over it (throughput, tflops, gbps, ...) are not among
# them: those are taken at the cell's time instead (``cell_time``, ``at_cell_time``).
PER_RUN = (
    *(f"time_{k}_s" for k in SUMMARY_KEYS if k != "median"),
    "peak_host_rss_bytes", "peak_host_pss_bytes", "peak_device_memory_bytes",
    "max_memory_allocated_bytes",
    "power_mean_w", "power_max_w", "energy_j", "samples_per_joule", "gpu_clocks_held_back",
    "compile_time_s", "phi_tflops", "data_wait_s", "compute_s", "warmup_seconds",
)
# Which rows are runs of one measurement: run_to_run's (``cell`` holds system and cell id,
# or the result file where there is no cell id).
RUNS_KEY = ("study", "cell", "name", "pass", "op_name")


def measured(frame: pd.DataFrame, kind: str,
             figures_of: Callable[[pd.DataFrame], pd.DataFrame] | None = None
             ) -> pd.DataFrame:
    """The ok measurements of one kind of cell, one row each (a cell run by several
    studies counts once), its PER_RUN figures the mean over its cell's runs
    (``over_runs``), its ``energy_sources`` those of the runs (``sources_over_runs``) and
    its RUN_TEXTS each run's (``texts_over_runs``); ``figures_of``: more such figures,
    read from the rows (a chart's numbers in ``extra``), as columns of numbers indexed
    like them, averaged alike."""
    rows = frame[(frame["kind"] == kind) & (frame["status"] == "ok")]
    if "throughput" in rows:
        rows = rows[rows["throughput"].notna()]
    figures = pd.DataFrame({c: numeric(rows, c) for c in PER_RUN if c in rows}, index=rows.index)
    if figures_of is not None and not rows.empty:
        figures = figures.join(figures_of(rows))
    averaged = over_runs(rows, figures)
    texts = [c for c in RUN_TEXTS if c in rows]
    if texts and not rows.empty:
        # the whole table's: an invalid result's row has no kind, and counts as a run
        runs = run_counts(frame).loc[rows.index]
        for column in texts:
            averaged[column] = texts_over_runs(rows, column, runs)
    if ENERGY_SOURCES in rows:
        averaged[ENERGY_SOURCES] = sources_over_runs(rows)
        # A mean of runs that counted different sources (one with the host's RAPL, one
        # without) is a figure of neither: none, as dlbench.compare gives no ratio for it.
        mixed = averaged[ENERGY_SOURCES].map(
            lambda v: isinstance(v, str) and RUNS_DIFFER in v).astype(bool)
        if mixed.any():
            averaged.loc[mixed, [c for c in ENERGY_FIGURES if c in averaged]] = np.nan
    rows = pd.concat([rows.drop(columns=averaged.columns, errors="ignore"), averaged], axis=1)
    if "repeats" in rows:
        # A cell several studies ran is drawn from the study that ran it most (its interval
        # over repeats, not one run's over its iterations); of equals, the last as before.
        rows = rows.sort_values("repeats", kind="stable", na_position="first")
    keys = [k for k in ("cell", "name", "pass", "op_name") if k in rows]
    # A copy in few blocks: the columns replaced leave the table's split in many pieces,
    # which makes every column a chart adds to these rows slow (pandas' fragmentation).
    return rows.drop_duplicates(subset=keys, keep="last").reset_index(drop=True).copy()


def over_runs(rows: pd.DataFrame, figures: pd.DataFrame) -> pd.DataFrame:
    """``figures`` (columns of numbers, each run's own on its rows of ``rows``) as the mean
    over the runs of each row's measurement (RUNS_KEY), on every run's row. A run without
    a figure (no energy counter that time) is left out of its mean, not counted as zero;
    a table of single runs (an older release's) keeps its figures as they are."""
    if figures.columns.empty:
        return figures
    figures = figures.apply(pd.to_numeric, errors="coerce")
    keys = [rows[k] for k in RUNS_KEY if k in rows]
    if figures.empty or not keys:
        return figures
    run_of = rows.groupby(keys, dropna=False, sort=False).ngroup()
    if not run_of.duplicated().any():
        return figures
    return figures.groupby(run_of.to_numpy()).transform("mean").set_axis(figures.index)


# The texts each run has of its own (what its energy leaves out, why its GPU clocks were
# held back): a measurement's is its runs' one text where they agree, else each text with
# the runs that gave it (``texts_over_runs``), so that a run unlike the others shows.
RUN_TEXTS = ("energy_note", "gpu_clock_reasons")
# A run without the text (no note: nothing left out) beside runs with one, and a run
# whose text is empty: neither is shown as a blank.
NO_TEXT = "none"
EMPTY_TEXT = "(empty)"
# A null's key among a measurement's texts when counting them (no text holds a NUL).
_NULL_KEY = "\0null"


def texts_over_runs(rows: pd.DataFrame, column: str, runs: pd.Series | None = None,
                    keys: Iterable[str] = RUNS_KEY, missing: str = NO_TEXT) -> pd.Series:
    """Text ``column`` of each row's measurement (``keys``: RUNS_KEY, as ``over_runs``;
    each row one run of it) across its runs, on every run's row: their one text where
    they agree (null where none has one), else each distinct text with the runs that gave
    it, "thermal slowdown 40% (run 2 of 3); none (runs 1, 3 of 3)" (``missing``: a run
    without one). ``runs``: each row's count of its cell's runs (``run_counts`` of the
    whole table, failed runs too), else the measurement's rows and repeats."""
    text = (rows[column] if column in rows else pd.Series(None, index=rows.index)).astype(
        object)
    text = text.where(text.notna(), None)
    group = [rows[k] for k in keys if k in rows]
    if text.empty or not group:
        return text
    run_of = rows.groupby(group, dropna=False, sort=False).ngroup().to_numpy()
    # The runs agree nearly always: their one value, without a label per measurement.
    distinct = text.fillna(_NULL_KEY).astype(str).groupby(run_of).transform("nunique")
    differ = distinct.to_numpy() > 1
    if not differ.any():
        return text
    # Those that differ in plain Python: one label per measurement, set on its runs' rows.
    out = text.to_numpy(copy=True)
    repeat = numeric(rows, "repeat").to_numpy()
    total = runs.to_numpy() if runs is not None else np.zeros(len(rows))
    members: dict[int, list[int]] = {}
    for position in np.flatnonzero(differ):
        members.setdefault(int(run_of[position]), []).append(int(position))
    for positions in members.values():
        out[positions] = _by_run(out[positions], repeat[positions],
                                 int(np.nanmax(total[positions], initial=0)), missing)
    return pd.Series(out, index=rows.index, dtype=object)


def _by_run(texts: np.ndarray, repeat: np.ndarray, total: int, missing: str) -> str:
    """One measurement's texts, each with the runs that gave it: numbered from 1 (the
    result's repeat + 1, as the failures listing numbers them), in the table's order
    (that of finishing) where a run lacks its repeat; ``total`` at least their count."""
    # the table's order where a run lacks its repeat or two share one (a tree copied in)
    numbers = ([int(r) + 1 for r in repeat]
               if not np.isnan(repeat).any() and len(set(repeat)) == len(repeat)
               else list(range(1, len(texts) + 1)))
    total = max(total, len(texts), *numbers)
    by_text: dict[str | None, set[int]] = {}
    for value, number in zip(texts, numbers, strict=True):
        by_text.setdefault(value, set()).add(number)
    parts = []
    for value, found in sorted(by_text.items(), key=lambda item: min(item[1])):
        label = missing if value is None else (str(value) or EMPTY_TEXT)
        which = sorted(found)
        named = (f"run {which[0]}" if len(which) == 1
                 else "runs " + ", ".join(str(n) for n in which))
        parts.append(f"{label} ({named} of {total})")
    return "; ".join(parts)


def run_counts(frame: pd.DataFrame) -> pd.Series:
    """How many runs each row's cell has, of its study (``run_to_run.run_counts``)."""
    return run_to_run.run_counts(frame, [frame[k] for k in ("study", "cell") if k in frame])


# What a run's energy counts (the aggregate's column). A measurement's, across its cell's
# runs with energy (those its mean is of), is their distinct values joined by RUNS_DIFFER:
# one value where they agree, so that a mean of runs that counted differently says so. A
# run with energy and no sources (a result older than the column) counts as UNRECORDED.
ENERGY_SOURCES = aggregate.ENERGY_SOURCES
RUNS_DIFFER = " or "
UNRECORDED = aggregate.SOURCES_UNRECORDED
# The figures that count what energy_sources says: none for a mean of runs that differ.
ENERGY_FIGURES = ("energy_j", "samples_per_joule", "power_mean_w", "power_max_w")


def sources_over_runs(rows: pd.DataFrame) -> pd.Series:
    """``energy_sources`` of each row's measurement across its cell's runs with energy
    (RUNS_KEY, as ``over_runs``); null where no run has energy."""
    text = rows[ENERGY_SOURCES]
    sources = text.where(text.notna() & text.ne(""), UNRECORDED).where(
        numeric(rows, "energy_j").notna()).astype(object)
    keys = [rows[k] for k in RUNS_KEY if k in rows]
    if sources.empty or not keys:
        return sources
    run_of = rows.groupby(keys, dropna=False, sort=False).ngroup()
    by_run = sources.groupby(run_of.to_numpy())
    # The runs agree nearly always: their one value, without a join per measurement.
    out = by_run.transform("first").set_axis(sources.index).astype(object)
    differ = by_run.transform("nunique").set_axis(sources.index) > 1
    if differ.any():
        out[differ] = sources[differ].groupby(run_of[differ].to_numpy()).transform(
            lambda values: RUNS_DIFFER.join(sorted(set(values.dropna())))).to_numpy()
    return out.where(out.notna(), None)


def numeric(rows: pd.DataFrame, name: str) -> pd.Series:
    """Column ``name`` as floats; all null where the table lacks it (an older aggregate)."""
    return pd.to_numeric(rows[name], errors="coerce") if name in rows \
        else pd.Series(float("nan"), index=rows.index)


def cell_time(rows: pd.DataFrame) -> pd.Series:
    """Each measurement's time across its cell's repeats, seconds: ``cell_time_median_s``
    (the mean of the runs' medians, the statistic ``cell_throughput`` and the interval are
    of, so the same on every repeat's row), else the row's own median (a table without it)."""
    return numeric(rows, "cell_time_median_s").fillna(numeric(rows, "time_median_s"))


def at_cell_time(rows: pd.DataFrame, column: str) -> pd.Series:
    """A figure of the row that is its work over its median time (tflops, gbps, mfu, ...)
    at the cell's time instead (``cell_time``): the last run's figure beside the cell's
    throughput would be of another time."""
    return numeric(rows, column) * numeric(rows, "time_median_s") / cell_time(rows)


def several_runs(repeats: pd.Series) -> bool:
    """Whether some cell ran more than once (``repeats``, run_to_run's count of its runs)."""
    return bool(pd.to_numeric(pd.Series(repeats), errors="coerce").max() > 1)


def names_runs(rows: pd.DataFrame) -> bool:
    """Whether a table or chart of single runs' figures (``rows``, each one run's) must say
    which run each is: some cell ran more than once (``repeats``), or a row is a later run
    of its cell (``repeat`` above 0: its other runs were not ok)."""
    return several_runs(numeric(rows, "repeats")) or bool(numeric(rows, "repeat").gt(0).any())


def time_title(repeats: pd.Series, unit: str, what: str = "time") -> str:
    """The title of ``cell_time`` in ``unit``: one run's median, or where some cell ran
    more than once (``repeats``) the mean of the runs' medians (one run's too: its own)."""
    if several_runs(repeats):
        return f"{what} ({unit}): mean of the runs' medians"
    return f"median {what} ({unit})"


def runs_title(repeats: pd.Series, title: str) -> str:
    """The title of a PER_RUN figure (or one ``over_runs`` made): ``title``, and where some
    cell ran more than once (``repeats``) that it is the mean over the runs."""
    return f"{title}: mean over the runs" if several_runs(repeats) else title


def ordered(values: pd.Series | list, preferred: tuple[str, ...] = ()) -> list:
    """Distinct values, nulls left out: the preferred ones first in their order, the rest
    sorted, numbers by size and anything else alphabetically."""
    distinct = [v for v in pd.unique(pd.Series(values).dropna())]
    first = [v for v in preferred if v in distinct]
    rest = [v for v in distinct if v not in preferred]
    numeric = all(pd.api.types.is_number(v) and not pd.api.types.is_bool(v) for v in rest)
    return first + sorted(rest, key=float if numeric else str)


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns as text, nulls as empty text (pandas keeps nulls through astype(str))."""
    return frame.astype(object).where(frame.notna(), "").astype(str)


def joined(frame: pd.DataFrame, sep: str = " · ", skip_empty: bool = False) -> pd.Series:
    """Each row's values as text joined by ``sep`` (column-wise: a row-wise join costs
    seconds at 10,000 rows); ``skip_empty`` leaves out empty values and their ``sep``."""
    text = as_text(frame)
    out = pd.Series("", index=frame.index, dtype=object)
    for column in text.columns:
        value = text[column]
        glue = (out != "") & (value != "") if skip_empty else pd.Series(
            column != text.columns[0], index=frame.index)
        out = out + glue.map({True: sep, False: ""}) + value
    return out


def varying(frame: pd.DataFrame, columns: Iterable[str]) -> list[str]:
    """Those of ``columns`` that take more than one value in ``frame`` (nulls aside)."""
    return [c for c in columns if c in frame and frame[c].dropna().astype(str).nunique() > 1]


def model_opts_label(frame: pd.DataFrame, given_when_alike: bool = False) -> pd.Series:
    """The model options that differ between rows, e.g. 'layers=4, nodes=1024'; with
    ``given_when_alike``, where none differs, the options each row was given (a lone
    ParaDnn shape is not the default one)."""
    opts = frame.get("model_opts", pd.Series([None] * len(frame), index=frame.index))
    parsed = opts.map(lambda text: json.loads(text) if isinstance(text, str) and text else {})
    keys = sorted({k for d in parsed for k in d})
    differing = [k for k in keys if len({json.dumps(d.get(k), sort_keys=True) for d in parsed}) > 1]
    shown = differing or (keys if given_when_alike else [])
    return parsed.map(lambda d: ", ".join(f"{k}={d[k]}" for k in shown if k in d) or "default")
