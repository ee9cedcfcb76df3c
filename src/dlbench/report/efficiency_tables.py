"""Tables of how close the cells came to the hardware (dlbench.efficiency's columns): the
calibration's measured ceilings against the vendor's peaks, and each model cell's share of
the peak (MFU) and of the measured ceiling."""

from __future__ import annotations

import pandas as pd

from dlbench.efficiency import CALIBRATION_KIND
from dlbench.report.tables import table


def _pct(value: object) -> str:
    return "" if value is None or pd.isna(value) else f"{float(value):.1f} %"


def _num(value: object, fmt: str = ",.4g") -> str:
    return "" if value is None or pd.isna(value) else format(float(value), fmt)


def _device(row: pd.Series) -> str:
    model = row["gpu_model"] if row["device"] == "gpu" else row["cpu_model"]
    return f"{row['system']} · {row['device']} · {model or 'unknown device'}"


def calibration_table(frame: pd.DataFrame) -> str | None:
    """Each calibration kernel's best figure per device, beside the vendor's peak."""
    rows = frame[(frame["kind"] == CALIBRATION_KIND) & (frame["status"] == "ok")]
    if rows.empty:
        return None
    rows = rows.assign(where=rows.apply(_device, axis=1),
                       rate=rows["tflops"].fillna(rows["gbps"]))
    best = rows.sort_values("rate").groupby(["where", "op_name", "efficiency_precision"],
                                            dropna=False).tail(1)
    out = []
    for r in best.sort_values(["where", "op_name", "efficiency_precision"]).itertuples():
        gemm = r.op_name == "gemm"
        out.append([r.where, r.op_name, r.efficiency_precision or "", r.name,
                    f"{_num(r.tflops)} TFLOP/s" if gemm else f"{_num(r.gbps)} GB/s",
                    _num(r.peak_tflops if gemm else r.peak_gbps),
                    _pct(r.pct_of_peak if gemm else r.pct_of_peak_gbps)])
    return table(["system · device", "kernel", "precision", "best size", "measured",
                  "vendor peak", "% of peak"], out)


def model_efficiency_table(frame: pd.DataFrame) -> str | None:
    """Model cells with counted FLOPs: achieved TFLOP/s, MFU and % of the measured ceiling."""
    rows = frame[(frame["kind"] == "model") & (frame["status"] == "ok")
                 & frame["tflops"].notna()]
    if rows.empty or (rows["pct_of_peak"].isna().all() and rows["pct_of_measured"].isna().all()):
        return None
    rows = rows.sort_values(["system", "model", "phase", "precision", "batch_size"])
    out = [[r.system, r.model, r.phase, r.precision, r.batch_size, r.num_gpus,
            _num(r.tflops), _num(r.peak_tflops), _pct(None if pd.isna(r.mfu) else 100 * r.mfu),
            _num(r.measured_tflops), _pct(r.pct_of_measured), _num(r.phi_tflops)]
           for r in rows.itertuples()]
    return table(["system", "model", "phase", "precision", "batch", "GPUs", "TFLOP/s",
                  "vendor peak", "MFU", "measured ceiling", "% of measured", "ParaDnn Φ TFLOP/s"],
                 out)
