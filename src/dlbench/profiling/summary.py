"""What the report shows of the profiles: per profiled cell, its files and top kernels/ops.

    from dlbench.profiling import summary
    profiles = summary.collect("results/profiles")      # every profile folder, ok or failed
    by_cell = summary.by_cell(profiles)         # (system, study, cell_id) -> [CellProfile]
    for p in by_cell.get((system, study, cell_id), []):
        p.tool, p.status, p.error, p.artifacts["trace"], p.top[:5]

A profile's status is the manifest's (``"ok"`` or ``"failed"``: a failure recorded with
``--record-failure``); a folder without a manifest is ``"failed"`` when it has
``error.txt`` (a failure not recorded) and ``"incomplete"`` otherwise.

``top`` comes from the Parquet tables, ranked by each tool's module
(``dlbench.profiling.tools``): torch operators by self time (device time when the profile
has device activity, else CPU time), ncu kernels by summed ``gpu__time_duration``, nsys
kernels by total time (``cuda_gpu_kern_sum``). hpcrun's database has no table: its profile
lists files only. Paths are relative to the folder given to ``collect``'s caller
(``directory`` is ``root/<system>/<tool>/<study>/<cell>``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from dlbench.profiling import registry
from dlbench.profiling.config import ERROR_FILE, MANIFEST


@dataclass
class CellProfile:
    tool: str
    study: str
    cell_id: str
    directory: Path
    status: str  # "ok" | "failed" | "incomplete" (no manifest and no error: still running)
    error: str | None = None
    artifacts: dict[str, Path] = field(default_factory=dict)  # trace, report, database, tables
    files: list[Path] = field(default_factory=list)
    # name, calls, time_s, share (of the table's total time): the heaviest first
    top: list[dict[str, Any]] = field(default_factory=list)
    cell: dict[str, Any] = field(default_factory=dict)  # the cell's axes, from the manifest
    system: str = ""  # the system it was made on (its folder under the profiles' root)
    # What the top entries' times are summed over, in words (the tool's ``covers``).
    covers: str = ""


def top_entries(tool: str, directory: Path, tables: dict[str, str],
                n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` heaviest kernels or operators of one profile, from its Parquet table (the
    tool module's ``top_entries``); [] for a tool this dlbench does not know."""
    profiler = registry.find(tool)
    return profiler.top_entries(directory, tables, n) if profiler else []


def read_profile(directory: Path, top: int = 10) -> CellProfile:
    """One profile folder ``<system>/<tool>/<study>/<cell>``."""
    profile = _read(directory, top)
    profile.system = directory.parts[-4] if len(directory.parts) >= 4 else ""
    return profile


def _read(directory: Path, top: int) -> CellProfile:
    tool, study, cell_id = directory.parts[-3:]
    manifest_path, error_path = directory / MANIFEST, directory / ERROR_FILE
    error = error_path.read_text().strip() if error_path.is_file() else None
    if manifest_path.is_file():
        try:
            return _from_manifest(tool, study, cell_id, directory, error, top)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            # One broken profile must not take the report down: it shows as failed.
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return CellProfile(tool, study, cell_id, directory, "failed",
                               error=f"{tool}: {directory}: unreadable profile ({first})")
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return CellProfile(tool, study, cell_id, directory, "failed" if error else "incomplete",
                       error=error, files=files)


def covers(tool: str, settings: Mapping[str, Any], cell: Mapping[str, Any]) -> str:
    """What a profile's times are summed over (the tool's ``covers``), with the profiled
    run's measured iterations: the profile's own count, else the cell's. Empty for a tool
    this dlbench does not know, or settings of another release it cannot read."""
    profiler = registry.find(tool)
    if profiler is None:
        return ""
    try:
        measured = profiler.iterations(settings)[0]
    except (KeyError, TypeError):
        return ""
    if measured is None:
        measured = cell.get("num_batches", cell.get("iterations"))
    return profiler.covers(settings, measured if isinstance(measured, int) else None)


def _from_manifest(tool: str, study: str, cell_id: str, directory: Path, error: str | None,
                   top: int) -> CellProfile:
    manifest = json.loads((directory / MANIFEST).read_text())
    # A manifest without a status predates recorded failures: only a success wrote one.
    status = manifest.get("status") or "ok"
    tables = manifest.get("tables") or {}
    return CellProfile(
        tool, study, cell_id, directory, status,
        error=manifest.get("error") or (error if status != "ok" else None),
        artifacts={name: directory / rel for name, rel in
                   {**(manifest.get("artifacts") or {}), **tables}.items()},
        files=[directory / rel for rel in manifest.get("files") or []],
        top=top_entries(tool, directory, tables, top) if status == "ok" else [],
        cell=manifest.get("cell") or {},
        covers=covers(tool, manifest.get("settings") or {}, manifest.get("cell") or {}))


def collect(root: str | Path = "results/profiles", top: int = 10,
            keep: Callable[[Path], bool] | None = None) -> list[CellProfile]:
    """Every profile under ``root`` (``root/<system>/<tool>/<study>/<cell>``), sorted;
    ``keep``: which of their folders to read (all by default)."""
    root = Path(root)
    found = []
    for tool in registry.names():
        for directory in sorted(root.glob(f"*/{tool}/*/*")):
            if directory.is_dir() and directory.parts[-4] != "logs" \
                    and (keep is None or keep(directory)):
                found.append(read_profile(directory, top))
    return found


def by_cell(profiles: Iterable[CellProfile]) -> dict[tuple[str, str, str], list[CellProfile]]:
    cells: dict[tuple[str, str, str], list[CellProfile]] = defaultdict(list)
    for p in profiles:
        cells[(p.system, p.study, p.cell_id)].append(p)
    return dict(cells)


T = TypeVar("T")


def of_row(by_key: Mapping[tuple[str, str, str], T], system: Any, study: str,
           cell_id: str) -> T | None:
    """A table row's entry of a mapping keyed like ``by_cell``. A row that names no system
    (a table of result files not laid out by system) takes any system's of its cell."""
    if isinstance(system, str) and system:
        return by_key.get((system, study, cell_id))
    return next((v for (_, s, c), v in by_key.items() if (s, c) == (study, cell_id)), None)


def rows(profiles: Iterable[CellProfile]) -> list[dict[str, Any]]:
    """Flat rows (one per profile and top entry; a profile without entries gives one row),
    for a table: study, cell_id, tool, status, error, rank, name, calls, time_s, share."""
    out = []
    for p in profiles:
        base = {"study": p.study, "cell_id": p.cell_id, "tool": p.tool, "status": p.status,
                "error": p.error, "directory": str(p.directory)}
        if not p.top:
            out.append({**base, "rank": None, "name": None, "calls": None, "time_s": None,
                        "share": None})
        for rank, entry in enumerate(p.top, 1):
            out.append({**base, "rank": rank, "name": entry["name"], "calls": entry["calls"],
                        "time_s": entry["time_s"], "share": entry["share"]})
    return out
