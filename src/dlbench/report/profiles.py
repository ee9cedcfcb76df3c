"""The report's Profiles section: per profiled cell each tool's outcome, links to the
profilers' files and the heaviest kernels or operators.

Profiles are read with ``dlbench.profiling.summary`` from ``results/profiles``; links are
paths relative to the report's folder, so the report and the profiles move together.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from html import escape
from pathlib import Path
from urllib.parse import quote

import altair as alt
import pandas as pd

from dlbench.profiling import registry
from dlbench.profiling.summary import CellProfile, by_cell
from dlbench.report.data import cells
from dlbench.report.page import Section
from dlbench.report.style import Figure, styled
from dlbench.report.tables import Markup, status_badge, table

DEFAULT_COLOUR = "#4c78a8"  # bars of a profile whose tool this dlbench does not know


def _viewers() -> str:
    """What each tool's files open in (each tool module's ``opens_in``): "trace.json opens
    in Perfetto or chrome://tracing, .ncu-rep in Nsight Compute, ..."."""
    pairs = [p.opens_in for p in registry.profilers() if p.opens_in]
    return ", ".join(f"{files} {'opens in' if i == 0 else 'in'} {viewer}"
                     for i, (files, viewer) in enumerate(pairs))


INTRO = ("Each profile is a job apart from the measurement (profiling.select in the config). "
         f"{_viewers()}; the Parquet tables hold every kernel or operator.")
TOOL_ORDER = {p.name: i for i, p in enumerate(registry.profilers())}
CHART_TOP = 10  # bars per profile chart
BAR_STEP = 20


def _slug(text: str) -> str:
    """A piece of an HTML id and a file name: no '.', which a CSS id selector would read
    as a class. A text that had to change gets a hash of itself, so that two texts that
    differ only in the characters dropped still differ."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")
    if slug == text:
        return slug
    return f"{slug}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"


def anchor(profile: CellProfile) -> str:
    return (f"profile-{_slug(profile.system)}-{_slug(profile.tool)}-{_slug(profile.study)}-"
            f"{_slug(profile.cell_id)}")


def ordered_profiles(profiles: Iterable[CellProfile]) -> list[CellProfile]:
    return sorted(profiles, key=lambda p: (p.study, p.cell_id, p.system,
                                           TOOL_ORDER.get(p.tool, 99), p.tool))


def href(path: Path, report_dir: Path) -> str:
    """``path`` relative to the report's folder, as a URL path."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(report_dir))
    return quote(Path(rel).as_posix(), safe="/")


def link(path: Path, report_dir: Path, text: str) -> str:
    return f'<a href="{escape(href(path, report_dir))}">{escape(text)}</a>'


def tool_badges(profiles: Iterable[CellProfile]) -> Markup:
    """One badge per profile of a cell, linking to its part of the Profiles section."""
    badges = []
    for p in ordered_profiles(profiles):
        title = p.error or p.status
        badges.append(f'<a href="#{escape(anchor(p))}" title="{escape(title)}">'
                      f'<span class="badge status-{escape(p.status)}">'
                      f"{escape(p.tool)} · {escape(p.status)}</span></a>")
    return Markup(" ".join(badges))


def links_by_cell(profiles: Iterable[CellProfile]) -> dict[tuple[str, str, str], Markup]:
    """(system, study, cell id) -> the badges of its profiles, for the tables of cells."""
    return {key: tool_badges(group) for key, group in by_cell(profiles).items()}


def _axes(row: pd.Series | None, cell: dict) -> list[str]:
    """Model (or op config), phase, precision and batch size: the aggregate's row first,
    the manifest's cell where the aggregate has no row for it."""
    def value(name: str) -> object:
        if row is not None and name in row and pd.notna(row[name]):
            return row[name]
        return cell.get(name)

    what = value("model")
    if what is None and value("op_config"):
        what = Path(str(value("op_config"))).stem
    batch = value("batch_size")
    return ["" if what is None else str(what), str(value("phase") or ""),
            str(value("precision") or ""), "" if batch is None else str(int(batch))]


def overview_table(frame: pd.DataFrame, profiles: list[CellProfile]) -> str:
    """One row per profiled cell: what it is, how its measurement ended, its profiles."""
    per_cell = {(r["system"] if isinstance(r["system"], str) else "", r["study"],
                 r["cell_id"]): r for _, r in cells(frame).iterrows()}
    rows = []
    for key, group in sorted(by_cell(profiles).items()):
        system, study, cell_id = key
        row = per_cell.get(key, per_cell.get(("", study, cell_id)))
        measured = status_badge(str(row["status"])) if row is not None else "not in this table"
        rows.append([study, system, Markup(f"<code>{escape(cell_id)}</code>"),
                     *_axes(row, group[0].cell), measured, tool_badges(group)])
    return table(["study", "system", "cell", "model / op", "phase", "precision", "batch",
                  "measurement", "profiles"], rows, css="profiles")


def _time_unit(seconds: float) -> tuple[str, float]:
    if seconds < 1e-3:
        return "µs", 1e6
    if seconds < 1.0:
        return "ms", 1e3
    return "s", 1.0


def _share(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f} %"


def top_table(profile: CellProfile) -> str:
    unit, factor = _time_unit(max(e["time_s"] for e in profile.top))
    kind = profile.top[0].get("time_kind") or "time"
    rows = [[rank, Markup(f"<code>{escape(str(e['name']))}</code>"), e["calls"],
             f"{e['time_s'] * factor:,.3f}", _share(e["share"])]
            for rank, e in enumerate(profile.top, 1)]
    out = table(["#", "kernel / operator", "calls", f"{kind} time ({unit})", "share"], rows,
                css="numeric-tail profile-top")
    if profile.covers:  # calls and times are sums: 50 iterations are 50 of one
        out += f'<p class="note">Calls and times {escape(profile.covers)}.</p>'
    return out


def top_figure(profile: CellProfile, name: str) -> Figure:
    """Horizontal bars of the heaviest entries, the heaviest on top."""
    top = profile.top[:CHART_TOP]
    unit, factor = _time_unit(max(e["time_s"] for e in top))
    kind = top[0].get("time_kind") or "time"
    data = pd.DataFrame({
        "label": [f"{rank}. {e['name']}" for rank, e in enumerate(top, 1)],
        "name": [str(e["name"]) for e in top],
        "calls": [e["calls"] for e in top],
        "time": [e["time_s"] * factor for e in top],
        "share": [e["share"] for e in top],
    })
    profiler = registry.find(profile.tool)
    colour = profiler.colour if profiler else DEFAULT_COLOUR
    what = profiler.top_kind if profiler else "kernels"
    chart = alt.Chart(data).mark_bar(color=colour, cornerRadiusEnd=2).encode(
        x=alt.X("time:Q", title=f"{kind} time ({unit})"),
        y=alt.Y("label:N", title=None, sort=list(data["label"]),
                axis=alt.Axis(labelLimit=320)),
        tooltip=[alt.Tooltip("name:N", title="name"), alt.Tooltip("calls:Q"),
                 alt.Tooltip("time:Q", title=f"time ({unit})", format=",.3f"),
                 alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=360, height=alt.Step(BAR_STEP))
    return Figure(name, f"Heaviest {what}",
                  f"{profile.tool} · {profile.study} · {profile.cell_id}: {kind} time of the "
                  f"top {len(top)}" + (f", {profile.covers}." if profile.covers else "."),
                  styled(chart))


def artifact_links(profile: CellProfile, report_dir: Path) -> str:
    links = [link(path, report_dir, f"{name} ({path.name})")
             for name, path in profile.artifacts.items()]
    links.append(link(profile.directory, report_dir, "folder"))
    return " · ".join(links)


def profile_blocks(profile: CellProfile, report_dir: Path, chart_name: str) -> list[Figure | str]:
    head = (f'<h3 class="profile-head" id="{escape(anchor(profile))}">'
            f"{escape(profile.tool)} · {escape(profile.system)} · {escape(profile.study)} · "
            f"<code>{escape(profile.cell_id)}</code> {status_badge(profile.status)}</h3>")
    if profile.status != "ok":
        why = profile.error or "no manifest and no error yet (still running?)"
        return [head + f'<p class="error">{escape(why)}</p>']
    blocks: list[Figure | str] = [
        head + f'<p class="links">Files: {artifact_links(profile, report_dir)}</p>']
    if profile.top:
        blocks += [top_figure(profile, chart_name), top_table(profile)]
    else:
        blocks.append('<p class="note">No kernel or operator table: open the files above.</p>')
    return blocks


def section(frame: pd.DataFrame, profiles: list[CellProfile], report_dir: Path) -> Section | None:
    """The Profiles section; None when there are no profiles."""
    if not profiles:
        return None
    profiles = ordered_profiles(profiles)
    blocks: list[Figure | str] = [overview_table(frame, profiles)]
    for profile in profiles:
        blocks += profile_blocks(profile, report_dir, anchor(profile))
    return Section("profiles", "Profiles", INTRO, blocks)
