"""How close each cell came to its hardware: per-row efficiency columns of the aggregate.

Two ceilings, never a guess:
- vendor peaks (dlbench.peaks: the datasheet's dense rate of the row's device model and
  precision, and its memory bandwidth); a device the table does not know has none;
- measured ceilings: the best GEMM TFLOP/s of the precision, and the best STREAM copy or
  triad GB/s, that a calibration cell (dlbench.calibrate) measured on the same system,
  device kind and device model; none without a calibration.

Columns: ``efficiency_precision`` (the precision the FLOP/s are of: a model cell's
precision, an operator input's floating dtype when it has exactly one, a calibration
kernel's), ``peak_tflops``, ``pct_of_peak``, ``measured_tflops``, ``pct_of_measured``,
``mfu`` (model cells: achieved FLOP/s over the vendor peak, a fraction; the FLOPs are those
the runner counted), each per device (a data-parallel cell's FLOP/s over its GPUs), and
for rows that move a known number of bytes ``peak_gbps``, ``pct_of_peak_gbps``,
``measured_gbps``, ``pct_of_measured_gbps``. ParaDnn cells keep
their own ``phi_tflops`` beside them. A collective's bytes cross links between devices,
not the device's memory: its rows have none of the bandwidth columns (their own measure
against the link is the bus bandwidth, ``bus_gbps``, and its share of the link,
``pct_of_link``: dlbench.links).
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dlbench import peaks

COLUMNS = ("efficiency_precision", "peak_tflops", "pct_of_peak", "measured_tflops",
           "pct_of_measured", "mfu", "peak_gbps", "pct_of_peak_gbps", "measured_gbps",
           "pct_of_measured_gbps")
CALIBRATION_KIND = "calibration"
# Kinds whose bytes per iteration move between devices (over NVLink, PCIe, a network), for
# which neither the memory's peak nor a STREAM ceiling is a ceiling.
LINK_KINDS = ("comms",)
BANDWIDTH_BENCHMARKS = ("copy", "triad")

# Operator input dtypes as PARAM configs and torch spell them -> dlbench precisions.
_DTYPES = {"float": "float32", "float32": "float32", "torch.float32": "float32",
           "torch.float": "float32", "double": "float64", "float64": "float64",
           "torch.float64": "float64", "torch.double": "float64", "half": "float16",
           "float16": "float16", "torch.float16": "float16", "torch.half": "float16",
           "bfloat16": "bfloat16", "torch.bfloat16": "bfloat16"}
_DTYPE_FIELD = re.compile(r'"dtype":\s*"([^"]+)"')


def device_model(row: dict[str, Any]) -> str | None:
    """The model of the device the row's FLOPs ran on: its GPUs' name, or the CPU's."""
    return row.get("gpu_model") if row.get("device") == "gpu" else row.get("cpu_model")


def _extra(row: dict[str, Any]) -> dict[str, Any]:
    text = row.get("extra")
    return json.loads(text) if isinstance(text, str) and text else {}


def work_precision(row: dict[str, Any]) -> str | None:
    """The precision of the row's arithmetic (None where it cannot be told)."""
    if row.get("kind") == CALIBRATION_KIND:
        return _extra(row).get("precision")
    if row.get("precision"):
        return row["precision"]
    if row.get("kind") == "op":
        config = json.dumps(_extra(row).get("config"))
        found = {_DTYPES.get(v) for v in _DTYPE_FIELD.findall(config)} - {None}
        if not found and row.get("flops_per_iteration"):
            return "float32"  # PARAM's data generator makes float32 unless told otherwise
        return found.pop() if len(found) == 1 else None
    return None


def _ceiling_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row.get("system"), row.get("device"), device_model(row))


def measured_ceilings(rows: Iterable[dict[str, Any]]
                      ) -> tuple[dict[tuple[Any, ...], float], dict[tuple[Any, ...], float]]:
    """Best calibration GEMM TFLOP/s per (system, device, model, precision) and best
    copy/triad GB/s per (system, device, model)."""
    tflops: dict[tuple[Any, ...], float] = {}
    gbps: dict[tuple[Any, ...], float] = {}
    for row in rows:
        if row.get("kind") != CALIBRATION_KIND or row.get("status") != "ok":
            continue
        benchmark = row.get("op_name")
        if benchmark == "gemm" and row.get("tflops"):
            key = (*_ceiling_key(row), work_precision(row))
            tflops[key] = max(tflops.get(key, 0.0), row["tflops"])
        elif benchmark in BANDWIDTH_BENCHMARKS and row.get("gbps"):
            key = _ceiling_key(row)
            gbps[key] = max(gbps.get(key, 0.0), row["gbps"])
    return tflops, gbps


def device_per_process(row: Mapping[str, Any]) -> bool:
    """Whether each process of the row's cell has a device of its own (a GPU each), so that
    adding processes adds devices; off GPU the processes of a node share its one CPU."""
    return row.get("device") == "gpu"


def devices(row: Mapping[str, Any]) -> int:
    """How many devices a row's FLOP/s and bytes add up over: a data-parallel model cell
    counts the work of all its ranks, while a ceiling (a datasheet's, a calibration's) is
    one device's. A GPU cell's GPUs on all its nodes; a CPU cell's nodes, one CPU each,
    which that node's processes share (the CPU the ceiling measured)."""
    keys = ("num_gpus", "num_nodes") if device_per_process(row) else ("num_nodes",)
    count = 1
    for key in keys:
        value = row.get(key)
        # numbers.Real: a table's numpy integers too
        if isinstance(value, numbers.Real) and not isinstance(value, bool) \
                and math.isfinite(value) and value >= 1:
            count *= int(value)
    return count


def _pct(value: Any, ceiling: float | None) -> float | None:
    return 100.0 * value / ceiling if value and ceiling else None


def add_columns(rows: list[dict[str, Any]]) -> None:
    """Fill COLUMNS in every row (in place)."""
    best_tflops, best_gbps = measured_ceilings(rows)
    for row in rows:
        precision = work_precision(row) if row.get("tflops") or row.get("gbps") else None
        model = device_model(row)
        gpu = row.get("device") == "gpu"
        peak = peaks.peak_tflops(model, precision) if gpu and precision else None
        measured = best_tflops.get((*_ceiling_key(row), precision)) if precision else None
        peak_bw = peaks.peak_bandwidth_gbps(model) if gpu else None
        measured_bw = best_gbps.get(_ceiling_key(row))
        # per device, as the ceilings are
        share = devices(row)
        tflops = row["tflops"] / share if row.get("tflops") else None
        gbps = row.get("gbps") if row.get("kind") not in LINK_KINDS else None
        gbps = gbps / share if gbps else None
        row.update({
            "efficiency_precision": precision,
            "peak_tflops": peak if tflops else None,
            "pct_of_peak": _pct(tflops, peak),
            "measured_tflops": measured if tflops else None,
            "pct_of_measured": _pct(tflops, measured),
            "mfu": tflops / peak if row.get("kind") == "model" and tflops and peak else None,
            "peak_gbps": peak_bw if gbps else None,
            "pct_of_peak_gbps": _pct(gbps, peak_bw),
            "measured_gbps": measured_bw if gbps else None,
            "pct_of_measured_gbps": _pct(gbps, measured_bw),
        })
