"""Profilers' exports -> Parquet tables (driver side: needs pyarrow, not the framework).

Each tool module's ``convert`` reads its own exports (``dlbench.profiling.tools``) with the
helpers here: CSV with tool chatter before the header, numbers with thousands separators,
atomic Parquet writes. ``convert`` is the way in by tool name.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlbench import atomic
from dlbench.profiling import config, registry

# ncu and nsys print thousands separators ("1,234.5"); "n/a" means no value.
_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][-+]?\d+)?$")
MISSING = {"", "n/a", "N/A"}


class TableError(ValueError):
    """An export that cannot be read, said in one line naming the file."""


def write_parquet(table: pa.Table, path: Path) -> Path:
    with atomic.temp_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def parse_number(text: str) -> float | None:
    return None if text in MISSING else float(text.replace(",", ""))


def is_number(text: str) -> bool:
    return text in MISSING or (bool(_NUMBER.match(text)) and any(c.isdigit() for c in text))


def column(name: str, values: Sequence[str], unit: str | None,
           text_columns: set[str]) -> tuple[pa.Field, pa.Array]:
    """A CSV column as int64 or float64 when every value is a number (or missing), else
    string; ``text_columns`` stay strings even when they look like numbers."""
    metadata = {"unit": unit} if unit else None
    if name not in text_columns and values and all(is_number(v) for v in values):
        numbers = [parse_number(v) for v in values]
        whole = all(n is None or float(n).is_integer() for n in numbers)
        if whole and "." not in "".join(values):
            array = pa.array([None if n is None else int(n) for n in numbers], pa.int64())
        else:
            array = pa.array(numbers, pa.float64())
    else:
        array = pa.array([None if v in MISSING else v for v in values], pa.string())
    return pa.field(name, array.type, metadata=metadata), array


def read_csv(source: Path, first_header: str | None = None) -> list[list[str]]:
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


def convert(tool: str, folder: Path, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Make a profile folder's Parquet tables; name -> file written. ``settings``: the
    tool's, as recorded in the capture (None: its defaults)."""
    profiler = registry.get(tool)
    return profiler.convert(folder, config.settings(tool) if settings is None else settings)
