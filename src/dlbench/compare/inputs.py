"""BASE and NEW as pandas frames of the aggregate table, each checked on the way in.

A side is one of:

- an aggregate Parquet written by ``dlbench.aggregate`` (its layout version, in the schema
  metadata, must be ``aggregate.TABLE_VERSION``; a table without the key but with the
  required columns is an older table of the same layout and is read);
- a results folder: its ``benchmarks.parquet`` when it has one, else its cell result files
  (``**/cells/*.json``) tabulated as the aggregate step does, without moving anything;
- a value of the ``system`` column of one table (``--table``), when BASE and NEW are labels;
  without ``--table``, a label with a system folder under ``results/`` is that folder
  (every result file of the system; of the studies of the last run on it, the table
  holds only their current cells and repeats), each other label a label of
  ``results/benchmarks.parquet``.

Every problem is an ``InputError`` whose message is one line naming the file or field, so
that the command can print it and exit 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from dlbench import aggregate, systems

__all__ = ["DEFAULT_TABLE", "InputError", "Side", "load_pair", "read_path"]

DEFAULT_TABLE = Path("results/benchmarks.parquet")
RESULTS = DEFAULT_TABLE.parent
# An error names at most this many labels (a results/ of many systems stays one line).
MAX_NAMED = 8
TABLE_FILE = "benchmarks.parquet"
RESULT_GLOB = "**/cells/*.json"
# Without these a file is not an aggregate table (the rest are read where present).
REQUIRED_COLUMNS = ("study", "kind", "status", "name", "pass", "time_median_s")
# Suffixes that make a missing BASE/NEW a missing file rather than a system label.
PATH_SUFFIXES = (".parquet", ".json", ".pq")


class InputError(ValueError):
    """BASE or NEW cannot be compared: one line naming the file or field."""


@dataclass
class Side:
    """One side of the comparison: what the user named, and its rows."""

    role: str  # "BASE" or "NEW"
    label: str  # how the outputs name it: a path, or "<system> in <table>"
    frame: pd.DataFrame


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _frame(table: pa.Table) -> pd.DataFrame:
    """The table as pandas, with every column of the current layout present (an older
    table lacks some: they read as empty, as in the report)."""
    frame = table.to_pandas()
    # Whether the file had a column at all (a table from before system labels) still matters.
    frame.attrs["missing_columns"] = aggregate.with_every_column(frame)
    return frame


def read_parquet(path: Path) -> pd.DataFrame:
    """An aggregate Parquet, checked: readable, of this layout version, with the columns."""
    try:
        return _frame(aggregate.read_table(path, REQUIRED_COLUMNS))
    except aggregate.TableError as exc:
        raise InputError(str(exc)) from None


def read_folder(folder: Path) -> pd.DataFrame:
    """A results folder: its aggregate table, else its cell result files tabulated (an
    invalid file becomes a failed row, as in the aggregate step; nothing is moved)."""
    if (folder / TABLE_FILE).is_file():
        return read_parquet(folder / TABLE_FILE)
    found = sorted(folder.glob(RESULT_GLOB))
    # As the table reads them: of each study the results its last run planned, where its
    # plan says (a dropped cell of an older software stack would stop the comparison).
    plans = systems.Plans(say=lambda line: print(line, file=sys.stderr))
    named = [p for p in found if systems.is_result_file(p)]
    paths = [p for p in named if plans.keeps(p)]
    if named and not paths:
        raise InputError(f"{folder}: none of its {len(named)} result file(s) is one its "
                         f"study's last run planned (plan.json beside cells/; the first: "
                         f"{named[0]})")
    if not paths:
        # JSON files not named as results (<cell id>_<8 hex digits>.json) are named, so that
        # a renamed or hand-made file is not taken for an empty folder.
        others = ""
        if found:
            more = f" and {len(found) - 1} more" if len(found) > 1 else ""
            others = (f"; {found[0]}{more} not named as a result "
                      "(<cell id>_<8 hex digits>.json)")
        raise InputError(f"{folder}: a folder with neither {TABLE_FILE} nor result files "
                         f"({RESULT_GLOB}){others}")
    try:
        table = aggregate.build_table(paths, move_invalid=False)
    except aggregate.FilesRefused as exc:
        raise InputError(f"{folder}: {_first_line(exc)}") from None
    return _frame(table)


def read_path(path: str | Path) -> pd.DataFrame:
    """A Parquet file or a results folder as a frame (see the module)."""
    path = Path(path)
    if path.is_dir():
        return read_folder(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    return read_parquet(path)


def systems_of(frame: pd.DataFrame) -> list[str]:
    return sorted(str(s) for s in frame["system"].dropna().unique())


def _one_system(role: str, path: Path, frame: pd.DataFrame) -> None:
    """A side that mixes systems would match each cell several times over: say how to pick
    one instead of comparing a blend."""
    names = systems_of(frame)
    if len(names) > 1:
        raise InputError(f"{role} {path}: holds the rows of several systems ({', '.join(names)}); "
                         f"compare two of them with: dlbench compare --table {path} "
                         f"{names[0]} {names[1]}")


def named(names: list[str], limit: int = MAX_NAMED) -> str:
    """Names for a one-line error: the first ``limit``, then how many more."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return (", ".join(names[:limit]) + more) or "none"


def system_folder(label: str) -> Path | None:
    """results/<label>/ where it is a system's folder (label mode reads it), else None."""
    folder = RESULTS / label
    if label.casefold() in systems.RESERVED or not folder.is_dir():
        return None
    return folder if systems.systems_folder(folder) else None


def system_folders() -> list[str]:
    """The labels that have a system folder under results/."""
    if not RESULTS.is_dir():
        return []
    return sorted(d.name for d in RESULTS.iterdir() if system_folder(d.name))


def _folders_text() -> str:
    return f"{RESULTS}/ has system folders: {named(system_folders())}"


def select_system(frame: pd.DataFrame, table: Path, role: str, label: str,
                  folders: bool = False) -> pd.DataFrame:
    """The rows of system ``label``. ``folders``: the label could have been a folder under
    results/ too, so an unknown label's error names those as well."""
    if "system" in frame.attrs.get("missing_columns", ()):
        raise InputError(f"{table}: has no 'system' column, so {role} '{label}' cannot be a "
                         "system label; give two tables or results folders instead")
    rows = frame[frame["system"] == label]
    if rows.empty:
        also = f"; {_folders_text()}" if folders else ""
        raise InputError(f"{table}: unknown system label '{label}' for {role} "
                         f"(field system; the table has: {named(systems_of(frame))}{also})")
    return rows.reset_index(drop=True)


def _looks_like_path(value: str) -> bool:
    return "/" in value or value.endswith(PATH_SUFFIXES)


def load_labels(base: str, new: str, table: Path) -> tuple[Side, Side]:
    if not table.exists():
        raise InputError(f"{table}: no such file or folder")
    frame = read_path(table)
    return (Side("BASE", f"{base} in {table}", select_system(frame, table, "BASE", base)),
            Side("NEW", f"{new} in {table}", select_system(frame, table, "NEW", new)))


def load_pair(base: str, new: str, table: str | Path | None = None) -> tuple[Side, Side]:
    """BASE and NEW as sides. With ``table`` they are system labels of it; otherwise paths,
    unless neither exists nor looks like a path: then system labels, each its folder under
    results/ or its rows of ``DEFAULT_TABLE`` (``load_system_labels``)."""
    if table is not None:
        return load_labels(base, new, Path(table))
    exists = [Path(base).exists(), Path(new).exists()]
    if not any(exists) and not _looks_like_path(base) and not _looks_like_path(new):
        return load_system_labels(base, new)
    sides = []
    for role, value in (("BASE", base), ("NEW", new)):
        path = Path(value)
        try:
            frame = read_path(path)
        except InputError as exc:
            if not path.exists() and not _looks_like_path(value) and any(exists):
                # A label beside a path: each is read as a path, the label's folder is
                # results/<label> (or --table names the table of both labels).
                raise InputError(
                    f"{role} {exc}; a system label beside a path is read as a path: give "
                    f"its folder ({Path('results') / value}) or both as labels") from None
            raise InputError(f"{role} {exc}") from None
        _one_system(role, path, frame)
        sides.append(Side(role, str(path), frame))
    return sides[0], sides[1]


def _label_side(role: str, label: str, table: pd.DataFrame | None) -> Side:
    folder = system_folder(label)
    if folder is not None:
        return Side(role, f"{label} ({folder})", read_folder(folder))
    assert table is not None  # read by the caller for every label without a folder
    return Side(role, f"{label} in {DEFAULT_TABLE}",
                select_system(table, DEFAULT_TABLE, role, label, folders=True))


def load_system_labels(base: str, new: str) -> tuple[Side, Side]:
    """Two system labels without --table: each label's own result files where it has a
    system folder results/<label>/ (of the studies of the last run on it, the table holds
    only their current cells and repeats), else its rows of DEFAULT_TABLE. Each label is resolved alone, so that a
    label without a folder does not send the other to the table's subset of its files."""
    table = None
    unfoldered = [(role, label) for role, label in (("BASE", base), ("NEW", new))
                  if system_folder(label) is None]
    if unfoldered:
        if not DEFAULT_TABLE.exists():
            who = " and ".join(f"{role} '{label}'" for role, label in unfoldered)
            labels = "system labels" if len(unfoldered) > 1 else "a system label"
            raise InputError(
                f"{DEFAULT_TABLE}: no such file or folder ({who}: not a file, a folder or a "
                f"system folder under {RESULTS}/, so read as {labels} of this table; "
                f"{_folders_text()}; give --table)")
        table = read_path(DEFAULT_TABLE)
    return _label_side("BASE", base, table), _label_side("NEW", new, table)
