"""Which rows of BASE and NEW are the same measurement: keys, matching, the unmatched.

A measurement is identified by what was measured, never by where or when: the study, the
kind of cell, every cell axis, the model options, and the measurement's name, operator and
pass. ``cell_id`` is left out (a hash that changes when any parameter does, including ones
that do not change the measurement's identity), and so are ``system``, ``repeat`` and the
environment columns: they are what differs between the two sides.

Only rows of status ``ok`` with a median time are compared; the others are listed as not
compared with their status. Rows whose key is on one side only are listed as ``base only``
or ``new only``. Nothing is dropped without a row saying so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dlbench import axes, run_to_run

__all__ = ["AXIS_COLUMNS", "KEY_COLUMNS", "Matching", "cell_labels", "disjoint_columns",
           "keys_of", "match", "nearest_difference", "result_table"]

AXIS_COLUMNS: list[str] = [name for name, _ in axes.columns()]
MEASUREMENT_COLUMNS = ["name", "op_name", "pass"]
CELL_KEY_COLUMNS: list[str] = ["study", "kind", *AXIS_COLUMNS, "model_opts"]
KEY_COLUMNS: list[str] = [*CELL_KEY_COLUMNS, *MEASUREMENT_COLUMNS]
REPEAT = "repeat"
# How many runs a skipped row's cell has on its side (for "run 2 of 3"); not an output column.
RUNS = "_runs"
# Why a row is not compared, besides its status.
NO_TIMES = "ok but no median time"
DUPLICATE = "duplicate"
# The statuses of a run that did not finish its measurement (a skipped cell was never run)
FAILURES = ("failed", "oom")


def _plain(value: Any) -> Any:
    """One spelling per value: an integer axis reads as 8.0 from a column with nulls and as
    8 from one without, a null as None, NaN or pd.NA."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _objects(values: list[Any], index: pd.Index) -> pd.Series:
    """``values`` as they are: ``Series.map`` infers a dtype from its results, so under
    pandas 3 a column of 16 and None comes back as 16.0 and NaN, and a key of one side
    would read "16.0" where the other's reads "16"."""
    return pd.Series(values, index=index, dtype=object)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame:
        return _objects([_plain(v) for v in frame[name].tolist()], frame.index)
    return _objects([None] * len(frame), frame.index)


# Axes added after the first release, and their defaults: a result made before one existed
# holds null where a later one holds the default, and both are the same cell.
LATER_AXES = {axis.name: axis.default for axis in axes.TABLE if axis.since > 1 and axis.column}


def _key_column(frame: pd.DataFrame, name: str) -> pd.Series:
    column = _column(frame, name)
    if name in LATER_AXES:
        default = LATER_AXES[name]
        column = _objects([default if v is None else v for v in column], column.index)
    return column


def keys_of(frame: pd.DataFrame, columns: list[str] = KEY_COLUMNS) -> pd.Series:
    """Each row's key as a JSON string of its key columns' values (hashable, comparable
    across the two sides whatever dtype pandas gave each column; an axis newer than a
    row's result at its default)."""
    values = [_key_column(frame, c) for c in columns]
    keys = [json.dumps(row, default=str) for row in zip(*values, strict=True)]
    return pd.Series(keys, index=frame.index, dtype=object)


@dataclass
class Matching:
    """The outcome of matching: ok rows of each side (with ``_key``), the matched keys, and
    everything that is not compared, one row per key or row."""

    base: pd.DataFrame
    new: pd.DataFrame
    keys: list[str]
    base_only: pd.DataFrame
    new_only: pd.DataFrame
    not_compared: pd.DataFrame
    # Cells BASE measured of which more runs failed or ran out of memory in NEW than in
    # BASE (``newly_failing``): what a gate on NEW must not pass as "nothing slower"
    newly_failed: int = 0


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """Oldest first, so that "keep the last" keeps the latest measurement."""
    if "finished_at" in frame:
        frame = frame.sort_values("finished_at", na_position="first", kind="stable")
    return frame


def run_counts(frame: pd.DataFrame) -> pd.Series:
    """How many runs each row's cell has on its side (``run_to_run.run_counts``)."""
    cell = [frame["_cell"], *([frame["cell_id"]] if "cell_id" in frame else [])]
    return run_to_run.run_counts(frame, cell)


def _split(frame: pd.DataFrame, side: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The comparable rows of one side, and its rows that are not compared (with a reason
    and the count of their cell's runs)."""
    frame = _ordered(frame.copy())
    frame["_key"] = keys_of(frame)
    frame["_cell"] = keys_of(frame, CELL_KEY_COLUMNS)
    ok = frame["status"].eq("ok")
    timed = ok & frame["time_median_s"].notna()
    skipped = frame[~timed].copy()
    skipped["reason"] = np.where(ok[~timed], NO_TIMES, skipped["status"].fillna("unknown"))
    runs = run_counts(frame)
    skipped[RUNS] = runs[~timed]
    rows = frame[timed]
    # The same key twice (and, where there are repeats, the same repeat twice) is one
    # measurement made again: the latest counts, the earlier ones are listed.
    subset = ["_key", REPEAT] if REPEAT in rows else ["_key"]
    again = rows.duplicated(subset=subset, keep="last")
    duplicates = rows[again].copy()
    duplicates["reason"] = DUPLICATE
    duplicates[RUNS] = runs[duplicates.index]
    skipped = pd.concat([skipped, duplicates])
    skipped["side"] = side
    return rows[~again], skipped


def _note_other_side(only: pd.DataFrame, other_skipped: pd.DataFrame, other_rows: pd.DataFrame,
                     other: str) -> pd.Series:
    """Why an unmatched row may have no partner: the other side's cell failed, or measured
    something else."""
    failed = other_skipped[other_skipped["reason"] != DUPLICATE].drop_duplicates("_cell", keep="last")
    status = dict(zip(failed["_cell"], failed["reason"], strict=True))
    error = dict(zip(failed["_cell"], failed["error"], strict=True))
    measured = set(other_rows["_cell"])

    def note(cell: str) -> str:
        if cell in status:
            why = f": {error[cell]}" if isinstance(error[cell], str) and error[cell] else ""
            return f"{other}: {status[cell]}{why}"
        if cell in measured:
            return f"{other} measured this cell under other measurement names"
        return f"no such cell in {other}"

    return only["_cell"].map(note)


def failed_runs(skipped: pd.DataFrame) -> pd.Series:
    """How many runs of each cell (``_cell``) of one side failed or ran out of memory: its
    failed rows, one per repeat (a failed run has no measurements, so one row)."""
    broken = skipped[skipped["reason"].isin(FAILURES)]
    subset = ["_cell", REPEAT] if REPEAT in broken else ["_cell"]
    return broken.drop_duplicates(subset=subset)["_cell"].value_counts()


def newly_failing(base_rows: pd.DataFrame, base_skipped: pd.DataFrame,
                  new_skipped: pd.DataFrame) -> int:
    """The cells BASE measured (an ok row) of which NEW lost more runs to a failure or an
    out-of-memory than BASE did: the same oom run on both sides is no regression, one more
    is."""
    base_failed = failed_runs(base_skipped)
    new_failed = failed_runs(new_skipped)
    measured = set(base_rows["_cell"])
    return sum(1 for cell, count in new_failed.items()
               if cell in measured and count > base_failed.get(cell, 0))


def match(base: pd.DataFrame, new: pd.DataFrame) -> Matching:
    """Match BASE's rows with NEW's on their keys (see the module)."""
    base_rows, base_skipped = _split(base, "base")
    new_rows, new_skipped = _split(new, "new")
    base_keys, new_keys = set(base_rows["_key"]), set(new_rows["_key"])
    keys = sorted(base_keys & new_keys)
    base_only = base_rows[~base_rows["_key"].isin(new_keys)].drop_duplicates("_key", keep="last")
    new_only = new_rows[~new_rows["_key"].isin(base_keys)].drop_duplicates("_key", keep="last")
    base_only = base_only.assign(note=_note_other_side(base_only, new_skipped, new_rows, "NEW"))
    new_only = new_only.assign(note=_note_other_side(new_only, base_skipped, base_rows, "BASE"))
    return Matching(base=base_rows[base_rows["_key"].isin(keys)],
                    new=new_rows[new_rows["_key"].isin(keys)], keys=keys,
                    newly_failed=newly_failing(base_rows, base_skipped, new_skipped),
                    base_only=base_only.reset_index(drop=True),
                    new_only=new_only.reset_index(drop=True),
                    not_compared=pd.concat([base_skipped, new_skipped]).reset_index(drop=True))


# -- labels -------------------------------------------------------------------------------

def _text(value: Any) -> str:
    value = _plain(value)
    return "" if value is None else str(value)


def _opts(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {"model_opts": text}
    return value if isinstance(value, dict) else {"model_opts": value}


def _base_label(row: pd.Series) -> list[str]:
    kind = _text(row.get("kind"))
    if kind == "model":
        parts = [_text(row.get("model")), _text(row.get("phase")), _text(row.get("precision"))]
        batch = _text(row.get("batch_size"))
        parts.append(f"bs{batch}" if batch else "")
        if _text(row.get("name")) not in ("", _text(row.get("model"))):
            parts.append(_text(row.get("name")))
        return parts
    if kind == "op":
        return [_text(row.get("op_name")), _text(row.get("name")), _text(row.get("pass"))]
    if kind == "comms":
        return _collective_label(row)
    return [kind, _text(row.get("name")), _text(row.get("pass"))]


def _collective_label(row: pd.Series) -> list[str]:
    """all_reduce bfloat16 8x 2nodes 1 GiB: as the cell id names the cell, then the
    measurement's message size (its name is "<collective>|<bytes>"); a point-to-point
    test adds its pattern and test: pt2pt pairwise latency float32 16x 2nodes 8 B."""
    from dlbench.comms.sizes import message_bytes, size_text

    parts = [_text(row.get("collective")), _text(row.get("data_type"))]
    if parts[0] == "pt2pt":  # pt2pt pairwise latency float32 ...: the pattern and the test
        parts[1:1] = [_text(row.get("pt2pt")), _text(row.get("pass"))]
    gpus, nodes = _text(row.get("num_gpus")), _text(row.get("num_nodes"))
    parts.append(f"{gpus}x" if gpus else "")
    parts.append(f"{nodes}nodes" if nodes not in ("", "1") else "")
    size = message_bytes(_text(row.get("name")))
    parts.append(size_text(size) if size is not None else _text(row.get("name")))
    return parts


def _disambiguated(parts: dict[str, list[str]]) -> list[str]:
    """Of rows sharing a label: ``name=value`` parts, in axis order, each kept only where it
    tells more of the rows apart, until every distinct key has its own label."""
    keys = {json.dumps(list(values)) for values in zip(*parts.values(), strict=True)}
    rows = len(next(iter(parts.values()))) if parts else 0
    chosen: list[str] = []
    labels = [""] * rows
    for name, values in parts.items():
        if len(set(labels)) == len(keys):
            break
        trial = [f"{label} {value}".strip() for label, value in zip(labels, values, strict=True)]
        if len(set(trial)) > len(set(labels)):
            chosen.append(name)
            labels = trial
    return labels


def cell_labels(frame: pd.DataFrame) -> pd.Series:
    """A short, readable label per row: the main axes of its kind (model, phase, precision,
    batch; operator, input, pass), then, among rows that would share a label, just enough
    ``axis=value`` parts to tell their keys apart (say framework=mxnet)."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=object)
    original, frame = frame.index, frame.reset_index(drop=True)
    shown = {"study", "kind", "model", "phase", "precision", "batch_size", "model_opts",
             *MEASUREMENT_COLUMNS}
    values = {c: _column(frame, c).map(_text) for c in KEY_COLUMNS}
    opts = _column(frame, "model_opts").map(_opts)
    several_studies = values["study"].nunique() > 1
    labels = []
    for index, row in frame.iterrows():
        parts = [p for p in _base_label(row) if p]
        if several_studies:
            parts.insert(0, f"[{values['study'][index]}]")
        labels.append(" ".join(parts))
    labels = pd.Series(labels, dtype=object)
    for _label, rows in labels.groupby(labels, sort=False).groups.items():
        if len(rows) < 2:
            continue
        rows = list(rows)
        parts = {c: [f"{c}={values[c][i]}" if values[c][i] else "" for i in rows]
                 for c in KEY_COLUMNS if c not in shown}
        for k in sorted({k for i in rows for k in opts[i]}):
            parts[f"opt:{k}"] = [f"{k}={opts[i][k]}" if k in opts[i] else "" for i in rows]
        extra = _disambiguated(parts)
        for i, more in zip(rows, extra, strict=True):
            labels[i] = f"{labels[i]} {more}".strip()
    return pd.Series(labels.tolist(), index=original, dtype=object)


# -- the result table ----------------------------------------------------------------------

BASE_ONLY, NEW_ONLY, NOT_COMPARED = "base only", "new only", "not compared"
VERDICT_ORDER = ("slower", "faster", "same", BASE_ONLY, NEW_ONLY, NOT_COMPARED)
_DTYPES = {"int64": "Int64", "bool": "boolean", "string": object}


def disjoint_columns(base: pd.DataFrame, new: pd.DataFrame, limit: int = 3) -> list[str]:
    """The key columns whose values on one side are none of the other side's, each with
    both sides' values ("num_warmup_batches (1 vs 2)"): why two sides have no cell in
    common, when a setting differs throughout."""
    found = []
    for column in KEY_COLUMNS:
        ours = {_text(v) for v in _key_column(base, column)}
        theirs = {_text(v) for v in _key_column(new, column)}
        if ours and theirs and not ours & theirs:
            found.append(f"{column} ({', '.join(sorted(ours)[:3]) or 'none'} vs "
                         f"{', '.join(sorted(theirs)[:3]) or 'none'})")
    return found[:limit]


def _spelling(value: Any) -> str:
    """A key value as the key spells it (16 and "16" apart)."""
    return json.dumps(value, default=str)


def nearest_difference(base: pd.DataFrame, new: pd.DataFrame, limit: int = 3,
                       cells: int = 100) -> list[str]:
    """The key columns in which the closest pair of a BASE and a NEW cell differ, each with
    both values ("batch_size (16 vs 32)"): why two sides that share every setting still have
    no cell in common. Of the first ``cells`` keys a side, so that it stays cheap."""
    if base.empty or new.empty:
        return []
    sides = []
    for frame in (base, new):
        frame = frame.drop_duplicates("_key").head(cells) if "_key" in frame else frame.head(cells)
        values = [_key_column(frame, c).tolist() for c in KEY_COLUMNS]
        sides.append([(row, [_spelling(v) for v in row]) for row in zip(*values, strict=True)])

    def apart(ours: list[str], theirs: list[str]) -> list[int]:
        return [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]

    pairs = ((a, b) for a in sides[0] for b in sides[1])
    (ours, our_spelling), (theirs, their_spelling) = min(
        pairs, key=lambda pair: len(apart(pair[0][1], pair[1][1])))
    found = []
    for i in apart(our_spelling, their_spelling):
        a, b = _text(ours[i]) or "none", _text(theirs[i]) or "none"
        if a == b:  # alike as text, not as values: show how each is spelt
            a, b = our_spelling[i], their_spelling[i]
        found.append(f"{KEY_COLUMNS[i]} ({a} vs {b})")
    return found[:limit]


def _keys_frame(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[[c for c in KEY_COLUMNS if c in rows]].reindex(columns=KEY_COLUMNS)


def _one_side(rows: pd.DataFrame, side: str, verdict: str) -> pd.DataFrame:
    """Rows of one side only (unmatched, or not compared) in the result table's columns."""
    out = _keys_frame(rows)
    out["verdict"] = verdict
    out["side"] = side
    out["status"] = rows["reason"] if "reason" in rows else rows["status"]
    out["error"] = rows.get("error")
    out["note"] = rows.get("note")
    out["repeat"] = rows.get("repeat")
    out[RUNS] = rows.get(RUNS)
    # The cell's figures across its repeats (the mean of their medians) where the table has
    # them, as a compared cell's; else the row's own (a failed run, an older table).
    for column, cell in (("time_median_s", "cell_time_median_s"), ("throughput", "cell_throughput"),
                         ("system", None)):
        own = rows[column]
        out[f"{side}_{column}"] = rows[cell].fillna(own) if cell in rows else own
    out["throughput_unit"] = rows["throughput_unit"]
    return out


def _run_suffix(table: pd.DataFrame) -> pd.Series:
    """Which run a row not compared is, numbered from 1 as the report numbers runs: " · run
    2 of 3" (a cell's failed runs are rows of their own: else alike labels), " · run 2"
    where the count is not known, nothing for a cell's only run."""
    repeat = pd.to_numeric(_column(table, REPEAT), errors="coerce")
    runs = pd.to_numeric(_column(table, RUNS), errors="coerce")
    named = (table["verdict"] == NOT_COMPARED) & repeat.notna() & ~(runs <= 1)
    number = (repeat + 1).astype("Int64").astype(str)
    of = (" of " + runs.astype("Int64").astype(str)).where(runs.notna(), "")
    return (" · run " + number + of).where(named, "")


def result_table(matching: Matching, compared: pd.DataFrame) -> pd.DataFrame:
    """Every compared cell, unmatched key and row not compared, one row each, with a
    readable ``label`` and the verdict first; the axes keep their table types."""
    keys = matching.base.drop_duplicates("_key", keep="last").set_index("_key")
    done = _keys_frame(keys).join(compared).reset_index(drop=True)
    done["side"] = "both"
    done["status"] = "ok"
    parts = [done, _one_side(matching.base_only, "base", BASE_ONLY),
             _one_side(matching.new_only, "new", NEW_ONLY)]
    skipped = matching.not_compared
    for side in ("base", "new"):
        parts.append(_one_side(skipped[skipped["side"] == side], side, NOT_COMPARED))
    table = pd.concat([p for p in parts if len(p)], ignore_index=True)
    # No cell compared (every run of NEW's failed): the comparison's columns all the same.
    table = table.reindex(columns=list(dict.fromkeys([*table.columns, *done.columns])))
    table["label"] = cell_labels(table)
    table["label"] = table["label"] + _run_suffix(table)
    table = table.drop(columns=RUNS, errors="ignore")
    for name, kind in axes.columns():
        table[name] = _column(table, name).astype(_DTYPES[kind])
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    table = table.sort_values(["verdict", "label"], key=lambda s: s.map(order)
                              if s.name == "verdict" else s, kind="stable")
    first = ["verdict", "label", "throughput_ratio", "throughput_ci_low", "throughput_ci_high",
             "ci_method"]
    rest = [c for c in table.columns if c not in first and c not in KEY_COLUMNS]
    return table[[c for c in first if c in table] + KEY_COLUMNS + rest].reset_index(drop=True)
