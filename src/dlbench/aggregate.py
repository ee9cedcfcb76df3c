"""All cell results -> one tidy table (Parquet with an explicit schema, and CSV).

One row per measurement; a cell without measurements (failed, oom, skipped) still gives
one row, with its status and error and empty metrics.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlbench import atomic, axes
from dlbench import result as R
from dlbench.stats import SUMMARY_KEYS

# Cell axes that become columns (model cells and operator cells; absent ones are null),
# from the axis table in table order.
_ARROW = {"int64": pa.int64(), "bool": pa.bool_(), "string": pa.string()}
CELL_COLUMNS: list[tuple[str, pa.DataType]] = [(name, _ARROW[kind])
                                               for name, kind in axes.columns()]
ENV_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("hostname", pa.string()), ("cpu_model", pa.string()), ("cpu_capability", pa.string()),
    ("cpu_features", pa.string()), ("cpu_count", pa.int64()), ("cpu_cores", pa.int64()),
    ("cpu_sockets", pa.int64()), ("gpu_model", pa.string()),
    ("gpu_driver", pa.string()), ("cuda_version", pa.string()), ("cudnn_version", pa.string()),
    ("framework_version", pa.string()), ("python_version", pa.string()),
    ("dlbench_version", pa.string()), ("dlbench_git_revision", pa.string()),
    ("container", pa.string()), ("container_digest", pa.string()),
]
# The resource monitor's summary (result extra "monitor"), and PyTorch's own peak.
# energy_j is null with energy_note saying why when the host has no energy counter.
MONITOR_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("peak_host_rss_bytes", pa.int64()), ("peak_device_memory_bytes", pa.int64()),
    ("max_memory_allocated_bytes", pa.int64()),
    ("power_mean_w", pa.float64()), ("power_max_w", pa.float64()),
    ("energy_j", pa.float64()), ("samples_per_joule", pa.float64()),
    ("energy_note", pa.string()),
]


def build_schema() -> pa.Schema:
    """The table's columns (a function: its cell columns follow the axis table)."""
    return pa.schema(
        [
            ("study", pa.string()), ("cell_id", pa.string()), ("kind", pa.string()),
            ("status", pa.string()), ("error", pa.string()),
            *CELL_COLUMNS,
            ("model_opts", pa.string()),  # JSON
            ("name", pa.string()), ("op_name", pa.string()), ("pass", pa.string()),
            ("iterations", pa.int64()), ("items_per_iteration", pa.float64()),
            *[(f"time_{k}_s", pa.float64()) for k in SUMMARY_KEYS],
            ("throughput", pa.float64()), ("throughput_unit", pa.string()),
            ("precision_native", pa.bool_()),
            ("parameters", pa.int64()), ("phi", pa.int64()), ("phi_tflops", pa.float64()),
            ("flops_per_iteration", pa.float64()), ("tflops", pa.float64()),
            ("bytes_per_iteration", pa.float64()), ("gbps", pa.float64()),
            ("data_wait_s", pa.float64()), ("compute_s", pa.float64()),
            *MONITOR_COLUMNS,
            ("wall_time_s", pa.float64()), ("started_at", pa.string()), ("finished_at", pa.string()),
            *ENV_COLUMNS,
            ("times_s", pa.list_(pa.float64())),
            ("environment", pa.string()),  # JSON
            ("extra", pa.string()),  # JSON: cell extra merged with measurement extra
            ("source", pa.string()),  # result file
        ]
    )


SCHEMA = build_schema()


def _json(value: Any) -> str | None:
    return json.dumps(value, sort_keys=True) if value not in (None, {}, []) else None


def monitor_values(extra: dict[str, Any]) -> dict[str, Any]:
    summary = extra.get("monitor") or {}
    values = {name: summary.get(name) for name, _ in MONITOR_COLUMNS}
    values["max_memory_allocated_bytes"] = extra.get("max_memory_allocated_bytes")
    return values


def rows_of(res: dict[str, Any], source: str) -> list[dict[str, Any]]:
    cell = res.get("cell", {})
    env = res.get("environment", {})
    gpus = env.get("gpu_models") or []
    base: dict[str, Any] = {
        "study": res.get("study"), "cell_id": res.get("cell_id"), "kind": res["kind"],
        "status": res["status"], "error": res.get("error"),
        **{name: cell.get(name) for name, _ in CELL_COLUMNS},
        "model_opts": _json(cell.get("model_opts")),
        "wall_time_s": res.get("wall_time_s"), "started_at": res.get("started_at"),
        "finished_at": res.get("finished_at"),
        **{name: env.get(name) for name, _ in ENV_COLUMNS},
        "gpu_model": ", ".join(sorted(set(gpus))) or None,
        # The ISA features as one comma-separated string: easy to filter on in a table.
        "cpu_features": ",".join(env.get("cpu_features") or []) or None,
        "precision_native": (res.get("extra") or {}).get("precision_native"),
        "environment": _json(env), "source": source,
    }
    if not res["measurements"]:
        return [{**base, **monitor_values(res.get("extra") or {}),
                 "extra": _json(res.get("extra"))}]
    rows = []
    for m in res["measurements"]:
        extra = {**(res.get("extra") or {}), **(m.get("extra") or {})}
        rows.append({
            **base,
            "name": m["name"], "op_name": m.get("op_name"), "pass": m["pass"],
            "iterations": m["iterations"], "items_per_iteration": m["items_per_iteration"],
            **{f"time_{k}_s": m["time_s"][k] for k in SUMMARY_KEYS},
            "throughput": m["throughput"], "throughput_unit": m["throughput_unit"],
            "parameters": m.get("parameters"), "phi": extra.get("phi"),
            "phi_tflops": extra.get("phi_tflops"),
            "flops_per_iteration": m.get("flops_per_iteration"), "tflops": m.get("tflops"),
            "bytes_per_iteration": m.get("bytes_per_iteration"), "gbps": m.get("gbps"),
            "data_wait_s": m.get("data_wait_s"), "compute_s": m.get("compute_s"),
            **monitor_values(extra),
            "times_s": m["times_s"], "extra": _json(extra),
        })
    return rows


def build_table(paths: Iterable[str | Path]) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows.extend(rows_of(R.read(path), str(path)))
    columns = {name: [row.get(name) for row in rows] for name in SCHEMA.names}
    return pa.table(columns, schema=SCHEMA)


def write(paths: Iterable[str | Path], parquet: str | Path, csv: str | Path | None = None) -> pa.Table:
    table = build_table(paths)
    with atomic.temp_path(parquet) as tmp:
        pq.write_table(table, tmp)
    if csv is not None:
        # CSV has no list type: per-iteration times stay in the Parquet file.
        frame = table.drop_columns(["times_s"]).to_pandas()
        with atomic.temp_path(csv) as tmp_csv:
            frame.to_csv(tmp_csv, index=False)
    return table


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dlbench.aggregate",
                                     description="Aggregate cell result files into Parquet/CSV.")
    parser.add_argument("results", nargs="+", help="cell result JSON files")
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--csv")
    args = parser.parse_args(argv)
    try:
        table = write(args.results, args.parquet, args.csv)
    except ValueError as exc:
        print(f"dlbench.aggregate: {exc}", file=sys.stderr)
        return 2
    print(f"{table.num_rows} rows -> {args.parquet}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
