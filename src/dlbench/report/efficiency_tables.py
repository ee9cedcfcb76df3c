"""Tables of how close the cells came to the hardware (dlbench.efficiency's columns): the
calibration's measured ceilings against the vendor's peaks, and each model cell's share of
the peak (MFU) and of the measured ceiling."""

from __future__ import annotations

import json
from html import escape

import pandas as pd

from dlbench import run_to_run
from dlbench.efficiency import CALIBRATION_KIND, devices
from dlbench.report import encodings
from dlbench.report.data import (
    UNSTABLE_CV,
    at_cell_time,
    measured,
    numeric,
    runs_title,
    several_runs,
    varying,
)
from dlbench.report.model_charts import execution_mode, model_label
from dlbench.report.paradnn_charts import PHI_TFLOPS
from dlbench.report.style import Column, NumbersTable, counted, nouns
from dlbench.report.tables import table


def _pct(value: object) -> str:
    return "" if value is None or pd.isna(value) else f"{float(value):.1f} %"


def _num(value: object, fmt: str = ",.4g") -> str:
    return "" if value is None or pd.isna(value) else format(float(value), fmt)


def _device(row: pd.Series) -> str:
    model = row["gpu_model"] if row["device"] == "gpu" else row["cpu_model"]
    return f"{row['system']} · {row['device']} · {model or 'unknown device'}"


def calibration_table(frame: pd.DataFrame) -> str | None:
    """Each calibration kernel's best figure per device, beside the vendor's peak: the best
    of its sizes and, where it ran more than once, of its runs, as the measured ceilings of
    the cells' shares are (dlbench.efficiency), with the spread of that figure: its measured
    iterations and their CV, "unsteady" beyond the unstable_cv threshold."""
    rows = frame[(frame["kind"] == CALIBRATION_KIND) & (frame["status"] == "ok")]
    if rows.empty:
        return None
    rows = rows.assign(where=rows.apply(_device, axis=1),
                       rate=rows["tflops"].fillna(rows["gbps"]))
    best = rows.sort_values("rate").groupby(["where", "op_name", "efficiency_precision"],
                                            dropna=False).tail(1)
    best = best.sort_values(["where", "op_name", "efficiency_precision"])
    iterations, cv = numeric(best, "iterations"), _iteration_cv(best)
    # The threshold the table's runs were judged by (config unstable_cv): a ceiling whose
    # own iterations vary more is no steadier a figure than such a cell's.
    threshold = frame.attrs.get(UNSTABLE_CV, run_to_run.DEFAULT_UNSTABLE_CV)
    out = []
    for i, r in enumerate(best.itertuples()):
        gemm = r.op_name == "gemm"
        out.append([r.where, r.op_name, r.efficiency_precision or "", r.name,
                    f"{_num(r.tflops)} TFLOP/s" if gemm else f"{_num(r.gbps)} GB/s",
                    _num(iterations.iloc[i], ",.0f"), _spread(cv.iloc[i], threshold),
                    _num(r.peak_tflops if gemm else r.peak_gbps),
                    _pct(r.pct_of_peak if gemm else r.pct_of_peak_gbps)])
    several = several_runs(numeric(rows, "repeats"))
    return table(["system · device", "kernel", "precision", "best size",
                  "measured: best run" if several else "measured",
                  "iterations", "CV of iterations", "vendor peak", "% of peak"], out) \
        + _unsteady_note(cv, threshold) + _calibration_notes(rows)


def _iteration_cv(rows: pd.DataFrame) -> pd.Series:
    """Each row's CV of its measured iterations: the aggregate's ``within_run_cv``, else
    (a table older than that column) from its time summary; empty without either."""
    own = rows.reindex(columns=["time_mean_s", "time_std_s"]).to_dict("records")
    summary = pd.Series([run_to_run.within_run_cv(r) for r in own], index=rows.index,
                        dtype=float)
    return numeric(rows, "within_run_cv").fillna(summary)


def _unsteady(cv: object, threshold: float) -> bool:
    return cv is not None and pd.notna(cv) and float(cv) > threshold


def _spread(cv: object, threshold: float) -> str:
    """The CV as a percentage, with "unsteady" in words beyond the threshold."""
    if cv is None or pd.isna(cv):
        return ""
    return _pct(100 * float(cv)) + (", unsteady" if _unsteady(cv, threshold) else "")


def _unsteady_note(cv: pd.Series, threshold: float) -> str:
    """A line under the table when a ceiling's iterations vary beyond the threshold: the
    shares of it (% of measured) inherit its spread."""
    if not any(_unsteady(v, threshold) for v in cv):
        return ""
    return ('<p class="note">unsteady: the ceiling\'s iteration times vary by more than '
            f"{100 * threshold:g} % of their mean (unstable_cv), so its figure, and the "
            "shares of it, are less certain than the digits say.</p>")


# Precisions a calibration names but did not measure (dlbench.calibrate.runner), and why.
NOT_MEASURED = {"emulated_precisions_not_measured": "emulated here, not measured",
                "unsupported_precisions_not_measured": "not supported here, not measured"}


def _not_measured(extras: pd.Series) -> list[str]:
    """What the device's calibration rows say they left out, a phrase per reason."""
    said: dict[str, set[str]] = {}
    for text in extras:
        extra = json.loads(text) if isinstance(text, str) and text else {}
        for key in NOT_MEASURED:
            said.setdefault(key, set()).update(extra.get(key) or ())
    return [f"{'/'.join(sorted(said[key]))} {why}" for key, why in NOT_MEASURED.items()
            if said.get(key)]


def _calibration_notes(rows: pd.DataFrame) -> str:
    """A line per device whose empty cells or missing precisions need a word: a CPU has
    no vendor peak (so no % of peak, and its model cells no MFU), a GPU the peak table
    does not know neither; precisions emulated or unsupported were named, not measured."""
    notes = []
    for where, group in rows.groupby("where", sort=True):
        parts = []
        if (group["device"] != "gpu").all():
            parts.append("no vendor peak for CPUs, so no % of peak and no MFU")
        elif numeric(group, "peak_tflops").isna().all() \
                and numeric(group, "peak_gbps").isna().all():
            parts.append("no vendor peak known for this GPU (dlbench/peaks.yaml), so no % "
                         "of peak and no MFU")
        parts += _not_measured(group["extra"] if "extra" in group else pd.Series(dtype=object))
        if parts:
            notes.append(f'<p class="note">{escape(where)}: {escape("; ".join(parts))}.</p>')
    return "".join(notes)


def no_ceiling_note(frame: pd.DataFrame) -> str | None:
    """A line for GPU model cells with TFLOP/s and nothing to hold them against: neither a
    vendor peak (dlbench/peaks.yaml) nor a measured ceiling for their GPU and precision.
    The section was left out without a word, which read as a feature missing; None where
    every one has one."""
    rows = measured(frame, "model")
    if rows.empty:
        return None
    alone = rows[rows["tflops"].notna() & (rows["device"] == "gpu")
                 & numeric(rows, "pct_of_peak").isna() & numeric(rows, "pct_of_measured").isna()]
    if alone.empty:
        return None
    which = sorted({f"{gpu if isinstance(gpu, str) and gpu else 'an unnamed GPU'}"
                    + (f" in {precision}" if isinstance(precision, str) else "")
                    for gpu, precision in zip(alone["gpu_model"],
                                              alone["efficiency_precision"], strict=True)})
    return '<p class="note">' + escape(
        f"{nouns(len(alone), 'GPU model cell')} without MFU or % of measured: neither a "
        f"vendor peak (dlbench/peaks.yaml) nor a measured ceiling for {', '.join(which)}; "
        "a study with calibrate: true measures its device's.") + "</p>"


def model_efficiency_table(frame: pd.DataFrame) -> NumbersTable | None:
    """Model cells with counted FLOPs, one row each: achieved TFLOP/s, MFU and % of the
    measured ceiling (a sortable table the page builds: a study of 10,000 cells has as many
    rows)."""
    rows = measured(frame, "model")  # a cell run three times is one row
    rows = rows[rows["tflops"].notna()]
    if rows.empty or (rows["pct_of_peak"].isna().all() and rows["pct_of_measured"].isna().all()):
        return None
    # At the cell's time, as the charts' throughput and TFLOP/s are, not its last run's.
    rows = rows.assign(**{c: at_cell_time(rows, c) for c in
                          ("tflops", "mfu", "pct_of_measured")})
    # The ceilings are one device's and so are the shares (dlbench.efficiency), while
    # tflops counts every GPU of a data-parallel cell: its rate per device beside it.
    share = [devices(r) for r in rows[["device", "num_gpus", "num_nodes"]].to_dict("records")]
    rows = rows.assign(model=model_label(rows), mode=execution_mode(rows),
                       device_tflops=rows["tflops"] / share)
    rows = rows.sort_values(["system", "model", "phase", "precision", "batch_size"])
    placed = [a for a in varying(rows, encodings.model_axes())
              if a not in ("system", "num_gpus")]
    # A CPU cell's num_gpus counts processes sharing the CPU (dlbench.efficiency.devices).
    counts = counted(rows["device"])[1]
    columns = [Column("system", "system"), Column("model", "model"), Column("phase", "phase"),
               Column("precision", "precision"), Column("batch_size", "batch", "d"),
               Column("num_gpus", counts, "d"),
               *[Column(a, encodings.title(a)) for a in placed],
               Column("tflops", f"TFLOP/s (all {counts})", ",.4g"),
               Column("device_tflops", "TFLOP/s per device", ",.4g"),
               Column("peak_tflops", "vendor peak", ",.4g"),
               Column("mfu", "MFU", ".1%"), Column("measured_tflops", "measured ceiling", ",.4g"),
               Column("pct_of_measured", "% of measured", ",.1f"),
               Column("phi_tflops", runs_title(numeric(rows, "repeats"), PHI_TFLOPS), ",.4g")]
    keep = list(dict.fromkeys(c.field for c in columns))
    return NumbersTable(columns, required="tflops", frame=rows[keep].reset_index(drop=True),
                        name="model-efficiency", title="Model cells against the hardware")
