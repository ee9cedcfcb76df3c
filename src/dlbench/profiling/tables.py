"""Profilers' exports -> Parquet tables (driver side: needs pyarrow, not the framework).

- torch: ``operators.json`` written by the runner's torch.profiler hook -> ``operators.parquet``
- ncu: ``ncu --import <rep> --csv --page raw`` (a header row, a unit row, one row per
  profiled kernel launch) -> ``kernels.parquet``, one column per metric with its unit in
  the field's metadata, plus ``duration_ns`` from ``gpu__time_duration.sum``
- nsys: ``nsys stats --format csv`` report files -> ``<report>.parquet``
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

OPERATOR_SCHEMA = pa.schema([
    ("name", pa.string()), ("calls", pa.int64()),
    ("self_cpu_time_us", pa.float64()), ("cpu_time_total_us", pa.float64()),
    ("self_device_time_us", pa.float64()), ("device_time_total_us", pa.float64()),
    ("flops", pa.float64()),
    ("self_cpu_memory_bytes", pa.int64()), ("cpu_memory_bytes", pa.int64()),
    ("self_device_memory_bytes", pa.int64()), ("device_memory_bytes", pa.int64()),
    ("is_user_annotation", pa.bool_()),
])
# ncu columns that identify a launch; they stay text even when they look like numbers.
NCU_TEXT_COLUMNS = {"Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                    "Block Size", "Grid Size", "Device", "CC"}
NCU_DURATION = "gpu__time_duration.sum"
_TIME_UNITS_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6,
                  "ms": 1e6, "second": 1e9, "s": 1e9}
# ncu and nsys print thousands separators ("1,234.5"); "n/a" means no value.
_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][-+]?\d+)?$")
_MISSING = {"", "n/a", "N/A"}


class TableError(ValueError):
    """An export that cannot be read, said in one line naming the file."""


def write_parquet(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def torch_operators(source: Path, dest: Path) -> pa.Table:
    try:
        doc = json.loads(source.read_text())
        rows = doc["operators"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TableError(f"{source}: not a torch.profiler operator table ({exc})") from None
    meta = {"schedule": json.dumps(doc.get("schedule")), "device": str(doc.get("device"))}
    table = pa.Table.from_pylist(rows, schema=OPERATOR_SCHEMA.with_metadata(meta))
    write_parquet(table, dest)
    return table


def _parse_number(text: str) -> float | None:
    return None if text in _MISSING else float(text.replace(",", ""))


def _is_number(text: str) -> bool:
    return text in _MISSING or (bool(_NUMBER.match(text)) and any(c.isdigit() for c in text))


def _column(name: str, values: Sequence[str], unit: str | None,
            text_columns: set[str]) -> tuple[pa.Field, pa.Array]:
    metadata = {"unit": unit} if unit else None
    if name not in text_columns and values and all(_is_number(v) for v in values):
        numbers = [_parse_number(v) for v in values]
        whole = all(n is None or float(n).is_integer() for n in numbers)
        if whole and "." not in "".join(values):
            array = pa.array([None if n is None else int(n) for n in numbers], pa.int64())
        else:
            array = pa.array(numbers, pa.float64())
    else:
        array = pa.array([None if v in _MISSING else v for v in values], pa.string())
    return pa.field(name, array.type, metadata=metadata), array


def _read_csv(source: Path, first_header: str | None = None) -> list[list[str]]:
    try:
        text = source.read_text(errors="replace")
    except OSError as exc:
        raise TableError(f"{source}: cannot be read ({exc.strerror})") from None
    lines = text.splitlines()
    if first_header is not None:
        # Tool chatter (==PROF== lines, warnings) may precede the table.
        starts = [i for i, line in enumerate(lines) if line.startswith(first_header)]
        if not starts:
            raise TableError(f"{source}: no CSV header starting with {first_header}")
        lines = lines[starts[0]:]
    return [row for row in csv.reader(lines) if row]


def ncu_kernels(source: Path, dest: Path) -> pa.Table:
    rows = _read_csv(source, first_header='"ID"')
    if len(rows) < 2:
        raise TableError(f"{source}: ncu raw CSV needs a header row and a unit row")
    header, units, data = rows[0], rows[1], rows[2:]
    if not data:
        raise TableError(f"{source}: no kernel was profiled (check the NVTX filter and "
                         "launch skip/count)")
    fields, arrays = [], []
    for j, name in enumerate(header):
        values = [row[j] if j < len(row) else "" for row in data]
        unit = units[j] if j < len(units) else ""
        field, array = _column(name, values, unit, NCU_TEXT_COLUMNS | _nvtx_columns(header))
        fields.append(field)
        arrays.append(array)
    fields.append(pa.field("duration_ns", pa.float64()))
    arrays.append(pa.array(_durations_ns(header, units, data), pa.float64()))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    write_parquet(table, dest)
    return table


def _nvtx_columns(header: Sequence[str]) -> set[str]:
    return {name for name in header if "Push/Pop_Range" in name or "Start/Stop_Range" in name}


def _durations_ns(header: Sequence[str], units: Sequence[str],
                  data: Sequence[Sequence[str]]) -> list[float | None]:
    if NCU_DURATION not in header:
        return [None] * len(data)
    j = header.index(NCU_DURATION)
    unit = units[j].strip().lower() if j < len(units) else ""
    if unit not in _TIME_UNITS_NS:
        raise TableError(f"ncu raw CSV: unknown time unit {unit!r} of {NCU_DURATION}")
    out = []
    for row in data:
        value = row[j] if j < len(row) else ""
        out.append(None if not _is_number(value) or value in _MISSING
                   else _parse_number(value) * _TIME_UNITS_NS[unit])
    return out


def nsys_report(source: Path, dest: Path) -> pa.Table:
    rows = _read_csv(source)
    if not rows:
        raise TableError(f"{source}: empty nsys stats report")
    header, data = rows[0], rows[1:]
    fields, arrays = [], []
    for j, name in enumerate(header):
        field, array = _column(name, [row[j] if j < len(row) else "" for row in data], None,
                               {"Name", "Range", "Style", "Operation"})
        fields.append(field)
        arrays.append(array)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    write_parquet(table, dest)
    return table


def convert(tool: str, folder: Path, reports: Sequence[str] = ()) -> dict[str, Any]:
    """Make a profile folder's Parquet tables; name -> file written (or why not)."""
    if tool == "torch":
        torch_operators(folder / "operators.json", folder / "operators.parquet")
        return {"operators": "operators.parquet"}
    if tool == "ncu":
        ncu_kernels(folder / "raw.csv", folder / "kernels.parquet")
        return {"kernels": "kernels.parquet"}
    if tool == "nsys":
        made: dict[str, Any] = {}
        for report in reports:
            source = folder / f"stats_{report}.csv"
            if source.is_file():  # nsys writes no file for a report without data
                nsys_report(source, folder / f"{report}.parquet")
                made[report] = f"{report}.parquet"
        return made
    return {}
