"""The page's data, held once: every chart's and table's rows as compact columns.

Altair puts a chart's rows into its spec (``datasets``, named by a hash of the rows). A
page of ten charts over the same 10,000 cells would carry them ten times, each row with
every column name spelled out. Here instead:

- each DataFrame is converted once and charts name it (``Store``, an Altair data
  transformer); rows a spec holds itself are lifted out into the same store (``hoist``);
- each dataset keeps only the fields its charts and tables use (``fields_used``);
- it travels as columns, text columns as a list of distinct values and an index per row,
  numbers with 6 significant digits, whole numbers exact (``pack``); the page's script turns it back into rows
  for each chart (``UNPACK_SCRIPT``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import altair as alt
import pandas as pd
from altair.utils.core import sanitize_pandas_dataframe

SIGNIFICANT = 6  # digits kept of a number: more than any chart or table shows
_DATUM = re.compile(r"datum\.([A-Za-z_$][\w$]*)|datum\[\s*['\"]([^'\"]+)['\"]\s*\]")


class Store:
    """An Altair data transformer that converts each DataFrame a chart is given once,
    names it and gives the chart only the name: ten charts of one frame hold one copy,
    and converting it (seconds at 10,000 rows) is done once."""

    def __init__(self) -> None:
        self.frames: dict[str, pd.DataFrame] = {}
        self._named: dict[int, tuple[pd.DataFrame, str]] = {}  # id -> (frame kept, name)

    def __call__(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, pd.DataFrame):
            return alt.utils.data.default_data_transformer(data, max_rows=None)
        hit = self._named.get(id(data))
        if hit is None or hit[0] is not data:
            name = f"data-{len(self.frames)}"
            # As Altair would give its rows (dates as text, nulls as None), kept as a frame.
            self.frames[name] = sanitize_pandas_dataframe(data)
            hit = self._named[id(data)] = (data, name)
        return {"name": hit[1]}

    def name_of(self, data: pd.DataFrame) -> str | None:
        """The name a chart's frame was given, if a chart was given it."""
        hit = self._named.get(id(data))
        return hit[1] if hit is not None and hit[0] is data else None


def data_names(spec: Any) -> set[str]:
    """The names of the datasets a spec refers to (``"data": {"name": ...}``)."""
    out: set[str] = set()
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "data" and isinstance(value, dict) and isinstance(value.get("name"), str):
                out.add(value["name"])
            elif key != "datasets":
                out |= data_names(value)
    elif isinstance(spec, list):
        for item in spec:
            out |= data_names(item)
    return out


def hoist(specs: dict[str, dict[str, Any]]
          ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]:
    """Take the ``datasets`` out of each spec (in place); return the store (name -> rows)
    and which datasets each spec uses (spec id -> names)."""
    store: dict[str, list[dict[str, Any]]] = {}
    uses: dict[str, list[str]] = {}
    for key, spec in specs.items():
        found = spec.pop("datasets", {}) or {}
        for name, rows in found.items():
            store.setdefault(name, rows)
        uses[key] = sorted(set(found) | data_names(spec))
    return store, uses


def main_dataset(spec: dict[str, Any]) -> str | None:
    """The dataset a spec draws from at its top level (a facet's or layer's own data)."""
    data = spec.get("data")
    return data.get("name") if isinstance(data, dict) else None


def fields_used(spec: Any) -> set[str]:
    """Every data field a spec names: encodings' fields, sort and group-by fields, and
    ``datum.x`` / ``datum['x']`` in its expressions."""
    out: set[str] = set()

    def walk(node: Any, key: str | None = None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "datasets":
                    continue
                if k in ("field", "groupby", "fields", "as") or (k == "sort" and _fields(v)):
                    out.update(_names(v))
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str):
            out.update(a or b for a, b in _DATUM.findall(node))

    walk(spec)
    return out


def _fields(value: Any) -> bool:
    return isinstance(value, dict) and "field" in value


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.split(".")[0]]
    if isinstance(value, dict):
        return _names(value.get("field")) if "field" in value else []
    if isinstance(value, list):
        return [n for item in value for n in _names(item)]
    return []


Rows = pd.DataFrame | list[dict[str, Any]]  # a store's dataset: a frame, or a spec's rows


def columns_of(rows: Rows, keep: Iterable[str] | None = None) -> dict[str, list[Any]]:
    """A dataset's columns as lists of plain values (nulls as None), only ``keep``."""
    if isinstance(rows, pd.DataFrame):
        names = list(rows.columns)
    else:
        names = list(dict.fromkeys(k for row in rows for k in row))
    if keep is not None:
        wanted = set(keep)
        names = [n for n in names if n in wanted]
    if isinstance(rows, pd.DataFrame):
        return {n: [_plain(v) for v in rows[n].tolist()] for n in names}
    return {n: [_plain(row.get(n)) for row in rows] for n in names}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _round(value: Any) -> Any:
    # A whole number (a message size of 1 GiB, a byte count) stays exact: rounded, it would
    # read 1,073,740,000 bytes in a table and fall off an axis whose ticks are the sizes.
    if isinstance(value, float) and value and not value.is_integer():
        return float(f"{value:.{SIGNIFICANT}g}")
    return value


def count(rows: Rows, required: str | None = None) -> int:
    """How many rows, or how many have ``required``."""
    if required is None:
        return len(rows)
    if isinstance(rows, pd.DataFrame):
        return int(rows[required].notna().sum()) if required in rows else 0
    return sum(1 for row in rows if row.get(required) is not None)


def pack(rows: Rows, keep: Iterable[str] | None = None) -> dict[str, Any]:
    """Rows as ``{"rows": n, "columns": {field: column}}``, only the fields in ``keep``.
    A column is a list of values, or for text ``{"levels": [...], "codes": [...]}`` (an
    index per row, null for null), or ``{"const": v}`` when every row has the same value;
    a column of nulls is left out (a missing field reads as null)."""
    columns: dict[str, Any] = {}
    for name, values in columns_of(rows, keep).items():
        first = values[0] if values else None
        if values and all(v == first and type(v) is type(first) for v in values):
            if values[0] is not None:
                columns[name] = {"const": _round(values[0])}
        elif any(isinstance(v, str) for v in values):
            codes, levels = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
            columns[name] = {"levels": [str(v) for v in levels],
                             "codes": [None if c < 0 else int(c) for c in codes]}
        else:
            columns[name] = [_round(v) for v in values]
    return {"rows": len(rows), "columns": columns}


def unpack(packed: dict[str, Any]) -> list[dict[str, Any]]:
    """``pack``'s inverse (what the page's script does), for the images and the tests."""
    rows = packed["rows"]
    columns = {}
    for name, column in packed["columns"].items():
        if isinstance(column, dict) and "const" in column:
            column = [column["const"]] * rows
        elif isinstance(column, dict):
            levels = column["levels"]
            column = [None if c is None else levels[c] for c in column["codes"]]
        columns[name] = column
    return [{name: values[i] for name, values in columns.items()} for i in range(rows)]


# The page's half of ``pack``: rows back from columns, fresh objects for every chart
# (Vega marks the rows it is given, so two charts never share them).
UNPACK_SCRIPT = """
function dlbenchRows(name) {
  const packed = DLBENCH_DATA[name];
  const cols = Object.entries(packed.columns).map(([key, col]) => [key,
    Array.isArray(col) ? col : "const" in col ? new Array(packed.rows).fill(col.const)
      : col.codes.map((c) => (c === null ? null : col.levels[c]))]);
  const rows = new Array(packed.rows);
  for (let i = 0; i < packed.rows; i++) {
    const row = {};
    for (const [key, values] of cols) row[key] = values[i];
    rows[i] = row;
  }
  return rows;
}
"""
