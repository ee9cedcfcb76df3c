"""``dlbench compare BASE NEW``: is NEW faster or slower than BASE, by how much, and is the
difference real or noise?

BASE and NEW are two runs of the same benchmark study (machine A and machine B, torch 2.x
and 2.y): two aggregate tables, two results folders, or two system labels of one table
(``inputs``). Their rows are matched on what was measured, never on the cell id or the
system (``match``). Each matched cell gets ratios NEW/BASE of throughput, latency, energy
per sample and peak memory, with bootstrap confidence intervals, and a verdict of
``faster``, ``slower`` or ``same`` (``ratios``), and what the sides' environments record
differently is listed (``environments``); the outputs are a Parquet/CSV table, a
Markdown summary for a pull request and an offline HTML page (``output``).

The statistics are stated in docs/compare.md. ``python -m dlbench.compare`` and
``dlbench compare`` run the command (``dlbench.compare.__main__``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dlbench.compare import environments
from dlbench.compare.environments import Difference
from dlbench.compare.inputs import InputError, Side, load_pair
from dlbench.compare.match import (
    BASE_ONLY,
    NEW_ONLY,
    NOT_COMPARED,
    Matching,
    disjoint_columns,
    match,
    nearest_difference,
    result_table,
)
from dlbench.compare.ratios import (
    FASTER,
    SAME,
    SLOWER,
    Settings,
    compare_cells,
    summaries,
    without_unknown_sources,
)

__all__ = ["COUNTED", "Comparison", "InputError", "Settings", "Side", "compare", "compare_sides"]

# The outcomes the summary counts, in the order it says them.
COUNTED = (FASTER, SLOWER, SAME, BASE_ONLY, NEW_ONLY, NOT_COMPARED)


@dataclass
class Comparison:
    """What ``compare`` found: one row per compared cell, unmatched key or row not compared
    (``cells``), the geometric-mean summaries of the compared ones (``summary``), and what
    the two sides' results recorded differently (``differences``) and alike (``alike``)."""

    base: Side
    new: Side
    settings: Settings
    cells: pd.DataFrame
    summary: pd.DataFrame
    differences: list[Difference] = field(default_factory=list)
    alike: list[str] = field(default_factory=list)
    # cells BASE measured of which more runs failed or ran out of memory in NEW than in
    # BASE (match.newly_failing)
    newly_failed: int = 0

    @property
    def counts(self) -> dict[str, int]:
        found = self.cells["verdict"].value_counts()
        return {name: int(found.get(name, 0)) for name in COUNTED}

    @property
    def any_slower(self) -> bool:
        return self.counts[SLOWER] > 0


def _why_apart(matching: Matching) -> str:
    """What keeps two sides' cells apart: a setting that differs throughout, else the key
    columns of their nearest cells that differ."""
    differ = disjoint_columns(matching.base_only, matching.new_only)
    if differ:
        return f"the sides differ in {'; '.join(differ)}"
    nearest = nearest_difference(matching.base_only, matching.new_only)
    if nearest:
        return f"the nearest cells differ in {'; '.join(nearest)}"
    return "no ok row of one has the study, axes and measurement of an ok row of the other"


def compare_sides(base: Side, new: Side, settings: Settings | None = None) -> Comparison:
    """Compare two loaded sides; InputError when they have no cell in common."""
    settings = settings or Settings()
    matching = match(without_unknown_sources(base.frame), without_unknown_sources(new.frame))
    # A NEW whose every run of BASE's cells failed (a broken driver) is a comparison that
    # found them failing, not inputs without a cell in common.
    if not matching.keys and not matching.newly_failed:
        raise InputError(
            f"no common cells between BASE {base.label} ({len(matching.base_only)} measured) "
            f"and NEW {new.label} ({len(matching.new_only)} measured): "
            + _why_apart(matching))
    compared = compare_cells(matching.base, matching.new, matching.keys, settings)
    cells = result_table(matching, compared)
    base_facts, new_facts = environments.facts(base.frame), environments.facts(new.frame)
    return Comparison(base, new, settings, cells, summaries(cells),
                      environments.differences(base_facts, new_facts),
                      environments.alike(base_facts, new_facts), matching.newly_failed)


def compare(base: str, new: str, *, table: str | Path | None = None,
            settings: Settings | None = None) -> Comparison:
    """Load BASE and NEW (``inputs.load_pair``) and compare them."""
    base_side, new_side = load_pair(base, new, table)
    return compare_sides(base_side, new_side, settings)

