"""What a profiler is to the rest of dlbench: the base class each tool module instantiates.

A tool module under ``dlbench.profiling.tools`` defines ``PROFILER``, one instance of a
``Profiler`` subclass; the registry finds it. Everything tool-specific is here or in that
module, so that the job runner, the config check, the tables and the report only ask the
registry.

Tool modules are imported in the framework's environment too (the capture half of a job,
where the MXNet image has no pyarrow): they import pyarrow and the table helpers inside
``convert`` and ``top_entries`` only, which run on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dlbench.profiling.commands import Plan
from dlbench.profiling.spec import Setting


@dataclass(frozen=True)
class Job:
    """What a plan is built from: one cell, its profile folder, the framework's interpreter,
    the tool's checked settings and the cell's runner command line (with the profile's
    iterations and its result written into the folder)."""

    cell: dict[str, Any]
    out_dir: Path
    python: str
    settings: dict[str, Any]
    runner: list[str]


class Profiler:
    name: ClassVar[str]  # the config's and the folders' name (results/profiles/<name>/...)
    order: ClassVar[int]  # position in lists, messages and the report
    description: ClassVar[str]  # one line, the schema's description of its settings
    settings: ClassVar[tuple[Setting, ...]] = ()
    # The settings that say what part of the profiled run the tool recorded: copied into
    # that run's result (extra.profiled), which is never a measurement.
    run_facts: ClassVar[tuple[str, ...]] = ()
    # The report: what the top entries are, their bars' colour, and which files open in
    # what viewer (the Profiles section's introduction).
    top_kind: ClassVar[str] = "kernels"
    colour: ClassVar[str] = "#4c78a8"
    opens_in: ClassVar[tuple[str, str] | None] = None

    def check_cell(self, cell: Any) -> str | None:
        """Why this tool cannot profile ``cell`` (a ``study.Cell``), or None."""
        return None

    def iterations(self, settings: Mapping[str, Any]) -> tuple[int | None, int | None]:
        """The profiled run's (measured, warmup) iterations; None keeps the cell's own."""
        return settings.get("num_batches"), settings.get("num_warmup_batches")

    def covers(self, settings: Mapping[str, Any], measured: int | None) -> str:
        """What the top table's times are summed over, in words, for the report: the
        profiled run's ``measured`` iterations (None: unknown) unless the tool says
        otherwise. A kernel's time over 50 iterations is 50 of one."""
        return f"summed over the profiled run's {iterations_words(measured)}"

    def plan(self, job: Job) -> Plan:
        """The steps (argument lists) that profile the cell and export the raw results."""
        raise NotImplementedError

    def convert(self, folder: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Make the folder's Parquet tables; name -> file written. Driver side (pyarrow)."""
        return {}

    def finish(self, folder: Path, settings: Mapping[str, Any], tables: dict[str, Any]) -> None:
        """A last check once the tables are made; raises ``ProfileError`` to fail the job."""

    def top_entries(self, directory: Path, tables: Mapping[str, str],
                    n: int) -> list[dict[str, Any]]:
        """The ``n`` heaviest kernels or operators (name, calls, time_s, time_kind, share),
        from the tables ``convert`` made; [] when the tool has none."""
        return []

    def __repr__(self) -> str:
        return f"<profiler {self.name}>"


def iterations_words(measured: int | None) -> str:
    """"3 measured iterations", "1 measured iteration", or "measured iterations"."""
    if measured is None:
        return "measured iterations"
    return f"{measured} measured iteration{'' if measured == 1 else 's'}"


def ranked(entries: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The ``n`` heaviest ``entries`` by ``time_s``, each with its share of the total."""
    total = sum(e["time_s"] for e in entries)
    entries.sort(key=lambda e: e["time_s"], reverse=True)
    for e in entries:
        e["share"] = e["time_s"] / total if total > 0 else None
    return entries[:n]
