"""The comparison's files: compare.parquet and compare.csv (one row per compared cell,
unmatched key or row not compared), compare.md (a summary, the changed cells and every
cell's note, for a pull request) and compare.html (one offline page with charts, built
like the report: the report's page, styles and the inline Vega bundle, nothing fetched).

The four files are written beside their targets first and put in place together
(``dlbench.atomic``): a failure (a full disk) leaves the previous comparison whole and
raises ``WriteError`` naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dlbench import atomic
from dlbench.atomic import WriteError, writing
from dlbench.report import datasets, style
from dlbench.report.page import Section, chart_id, page_html
from dlbench.report.style import Figure
from dlbench.report.tables import table

if TYPE_CHECKING:
    from dlbench.compare import Comparison

__all__ = ["FILES", "WriteError", "console_summary", "html_page", "markdown", "write_outputs"]

FILES = ("compare.parquet", "compare.csv", "compare.md", "compare.html")
KEPT = "the previous comparison is left as it was"
METADATA_KEY = b"dlbench.compare"
# The per-cell chart shows at most this many bars (changed cells first, then the largest
# changes); the tables and files list every cell.
MAX_BARS = 400
VERDICT_COLOURS = {"faster": "#3b9c57", "slower": "#d64545", "same": "#9aa5b1"}
CARD_CLASS = {"faster": "status-ok", "slower": "status-failed", "same": "",
              "base only": "status-oom", "new only": "status-oom", "not compared": "status-skipped"}
GROUP_TITLES = {"all": "All", "model": "Per model", "precision": "Per precision (model cells)",
                "phase": "Per phase (model cells)",
                "scale": "Per scale (model cells: num_gpus, num_nodes)",
                "operator": "Per operator",
                "collective": "Per collective"}


# -- numbers as text ------------------------------------------------------------------------

def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def ratio_text(value: Any) -> str:
    return f"{float(value):.3f}×" if _finite(value) else "–"


def interval_text(low: Any, high: Any) -> str:
    return f"{float(low):.3f}–{float(high):.3f}" if _finite(low) and _finite(high) else "–"


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def percent_text(threshold: float) -> str:
    return f"{threshold * 100:g} %"


def rule_text(comparison: Comparison) -> str:
    s = comparison.settings
    return (f"A cell is faster or slower when the {s.confidence * 100:g} % bootstrap confidence "
            f"interval of its throughput ratio NEW/BASE excludes 1 and one side is faster "
            f"by more than {percent_text(s.threshold)} (where both sides ran as repeats; "
            f"{percent_text(max(s.threshold, s.single_run_threshold))} where a side ran "
            "once, since one run cannot show run-to-run variation; a cell without an "
            "interval is judged on its ratio alone against that); otherwise it is the same "
            f"({s.resamples} resamples, seed {s.seed}).")


def geomean_text(comparison: Comparison) -> str:
    overall = comparison.summary[comparison.summary["group"] == "all"]
    if overall.empty:
        return "No cell has a throughput ratio."
    row = overall.iloc[0]
    counts = comparison.counts
    # A mean of ratios no verdict upholds is noise: said so, not left to read as a change.
    judged = ("; no cell changed beyond its noise" if not counts["faster"] + counts["slower"]
              else f"; {counts['slower']} slower, {counts['faster']} faster, "
                   f"{counts['same']} the same")
    return (f"Throughput NEW/BASE, geometric mean over {int(row['cells'])} compared cells: "
            f"{ratio_text(row['geomean_ratio'])} (range {ratio_text(row['min_ratio'])} to "
            f"{ratio_text(row['max_ratio'])}{judged}).")


def _why(row: object) -> object:
    """A row not compared: its error (a failed run), else its note (a cell both sides
    measured without a ratio: a median time of 0)."""
    error = getattr(row, "error", None)
    return error if isinstance(error, str) and error else getattr(row, "note", None)


def changed(cells: pd.DataFrame) -> pd.DataFrame:
    """The faster and slower cells: slower first, the largest changes first."""
    rows = cells[cells["verdict"].isin(["slower", "faster"])].copy()
    rows["_order"] = rows["verdict"].map({"slower": 0, "faster": 1})
    rows["_size"] = rows["throughput_ratio"].astype(float).map(lambda r: -abs(math.log(r)))
    return rows.sort_values(["_order", "_size", "label"], kind="stable")


def _of(cells: pd.DataFrame, verdict: str) -> pd.DataFrame:
    return cells[cells["verdict"] == verdict]


# -- Markdown ------------------------------------------------------------------------------

def _md(value: Any) -> str:
    """Text for a Markdown table cell: pipes (operator names have them) escaped, and HTML
    (an error message's ``<script>`` or ``</details>`` would be markup in a pull request's
    rendering, and the latter would break the folded sections)."""
    text = " ".join(_text(value).split()).replace("\\", "\\\\").replace("|", "\\|")
    return escape(text, quote=False)


def _md_table(headers: list[str], rows: list[list[Any]], right: int = 0) -> list[str]:
    """A Markdown table; the last ``right`` columns are right-aligned (numbers)."""
    align = ["---"] * (len(headers) - right) + ["---:"] * right
    return ([f"| {' | '.join(headers)} |", f"| {' | '.join(align)} |"]
            + [f"| {' | '.join(_md(v) for v in row)} |" for row in rows])


def unchanged_notes(cells: pd.DataFrame) -> pd.DataFrame:
    """The compared cells judged the same that have a note (held-back clocks, drift, a
    change one run cannot tell, energy not compared): the changed cells' notes are listed
    with them, the unmatched cells' with theirs."""
    rows = _of(cells, "same")
    return rows[rows["note"].map(lambda note: isinstance(note, str) and bool(note))]


def _folded(title: str, lines: list[str], open_below: int = 20) -> list[str]:
    """A long list folded away (GitHub renders <details>), a short one shown."""
    if len(lines) <= open_below + 2:
        return [f"#### {title}", "", *lines, ""]
    return ["<details>", f"<summary>{escape(title)}</summary>", "", *lines, "", "</details>", ""]


def differences_text(comparison: Comparison) -> str:
    """What the sides recorded alike, when nothing differs (an A/A comparison)."""
    if comparison.differences:
        return ("What the two sides' results recorded differently: a change of verdict may "
                "come from any of these.")
    alike = "; ".join(comparison.alike) or "nothing recorded"
    return f"Nothing the results recorded differs between the sides ({alike})."


def differences_markdown(comparison: Comparison) -> list[str]:
    lines = ["### What differs", "", differences_text(comparison), ""]
    if comparison.differences:
        lines += [*_md_table(["", "BASE", "NEW"], [[d.field, d.base, d.new]
                                                   for d in comparison.differences]), ""]
    return lines


def markdown(comparison: Comparison) -> str:
    """The summary for a pull request: counts, the rule, geometric means, changed cells,
    the notes of the unchanged ones, and every unmatched cell and row not compared."""
    cells = comparison.cells
    counts = comparison.counts
    lines = ["## dlbench compare", "",
             f"**BASE** `{comparison.base.label}` → **NEW** `{comparison.new.label}`", "",
             *_md_table(list(counts), [list(counts.values())], right=len(counts)), "",
             geomean_text(comparison), "", rule_text(comparison), "",
             *differences_markdown(comparison)]
    summary = comparison.summary[comparison.summary["group"] != "all"]
    if len(summary):
        lines += ["### Geometric means of throughput NEW/BASE", "",
                  *_md_table(["group", "value", "cells", "NEW/BASE", "min", "max", "faster",
                              "slower", "same"],
                             [[r.group, r.value, r.cells, ratio_text(r.geomean_ratio),
                               ratio_text(r.min_ratio), ratio_text(r.max_ratio), r.faster,
                               r.slower, r.same] for r in summary.itertuples()], right=7), ""]
    moved = changed(cells)
    lines += [f"### Changed cells ({len(moved)})", ""]
    if moved.empty:
        lines += ["No cell is faster or slower.", ""]
    else:
        ci = f"{comparison.settings.confidence * 100:g} % CI"
        lines += [*_md_table(
            ["verdict", "cell", "throughput NEW/BASE", ci, "CI from", "p50", "p95", "p99",
             "energy/sample", "memory"],
            [[r.verdict, r.label, ratio_text(r.throughput_ratio),
              interval_text(r.throughput_ci_low, r.throughput_ci_high), r.ci_method,
              ratio_text(r.p50_ratio), ratio_text(r.p95_ratio), ratio_text(r.p99_ratio),
              ratio_text(r.energy_per_sample_ratio), ratio_text(r.memory_ratio)]
             for r in moved.itertuples()], right=8), "",
            "Ratios are NEW/BASE: above 1 is faster for throughput, slower for latency "
            "(p50/p95/p99), more for energy per sample and peak memory.", ""]
        noted = moved[moved["note"].notna()]
        lines += [f"- {_md(r.label)}: {_md(r.note)}" for r in noted.itertuples()]
        lines += [""] if len(noted) else []
    noted = unchanged_notes(cells)
    if len(noted):  # every note reaches the summary, not only the changed cells'
        lines += _folded(f"Notes on unchanged cells ({len(noted)})", _md_table(
            ["cell", "throughput NEW/BASE", f"{comparison.settings.confidence * 100:g} % CI",
             "note"],
            [[r.label, ratio_text(r.throughput_ratio),
              interval_text(r.throughput_ci_low, r.throughput_ci_high), r.note]
             for r in noted.itertuples()]))
    for verdict, title in (("base only", "Only in BASE"), ("new only", "Only in NEW")):
        rows = _of(cells, verdict)
        if len(rows):
            lines += _folded(f"{title} ({len(rows)})", _md_table(
                ["cell", "note"], [[r.label, r.note] for r in rows.itertuples()]))
    rows = _of(cells, "not compared")
    if len(rows):
        lines += _folded(f"Not compared ({len(rows)})", _md_table(
            ["side", "cell", "status", "error"],
            [[r.side.upper(), r.label, r.status, _why(r)] for r in rows.itertuples()]))
    return "\n".join(lines).rstrip() + "\n"


# -- charts --------------------------------------------------------------------------------

def _group_of(cells: pd.DataFrame) -> pd.Series:
    """What a cell's bar is grouped under: its model, its operator or collective, else its
    name."""
    model = cells["model"].astype(object).where(cells["kind"] == "model")
    op = cells["op_name"].astype(object).where(cells["kind"].isin(["op", "comms"]))
    return model.fillna(op).fillna(cells["name"]).fillna("(none)").astype(str)


def _verdict_scale(values: list[str]) -> alt.Scale:
    return style.colour_scale([v for v in VERDICT_COLOURS if v in values], VERDICT_COLOURS)


def _chart_data(cells: pd.DataFrame) -> pd.DataFrame:
    rows = cells[cells["verdict"].isin(list(VERDICT_COLOURS))
                 & cells["throughput_ratio"].map(_finite)].copy()
    rows["group"] = _group_of(rows)
    rows["ci"] = [interval_text(lo, hi) for lo, hi in
                  zip(rows["throughput_ci_low"], rows["throughput_ci_high"], strict=True)]
    columns = ["group", "label", "verdict", "throughput_ratio", "throughput_ci_low",
               "throughput_ci_high", "ci", "ci_method"]
    out = rows[columns].astype({"throughput_ci_low": float, "throughput_ci_high": float})
    return out.astype({"group": str, "label": str, "verdict": str, "ci": str, "ci_method": str})


def _tooltip() -> list[alt.Tooltip]:
    return [alt.Tooltip("label:N", title="cell"), alt.Tooltip("verdict:N"),
            alt.Tooltip("throughput_ratio:Q", title="NEW/BASE", format=".3f"),
            alt.Tooltip("ci:N", title="CI"), alt.Tooltip("ci_method:N", title="CI from")]


def speedup_figure(cells: pd.DataFrame) -> Figure | None:
    """Throughput NEW/BASE of each cell as a bar from 1, with its interval, per model."""
    data = _chart_data(cells)
    if data.empty:
        return None
    note = ""
    if len(data) > MAX_BARS:
        size = data["throughput_ratio"].map(lambda r: abs(math.log(r)))
        keep = (data.assign(_c=data["verdict"] == "same", _s=-size)
                .sort_values(["_c", "_s"]).head(MAX_BARS).index)
        note = (f" Only the {MAX_BARS} largest changes of {len(data)} cells are drawn "
                "(changed cells first); compare.csv has them all.")
        data = data.loc[keep]
    ratio = alt.X("throughput_ratio:Q", title="throughput NEW/BASE (log scale)",
                  scale=alt.Scale(type="log"))
    label = alt.Y("label:N", title=None, sort=alt.EncodingSortField("throughput_ratio", order="descending"))
    bars = alt.Chart().mark_bar(height={"band": 0.7}).encode(
        y=label, x=ratio, x2=alt.datum(1),
        color=alt.Color("verdict:N", scale=_verdict_scale(list(data["verdict"].unique())),
                        title="verdict"),
        tooltip=_tooltip())
    whiskers = alt.Chart().mark_rule(color=style.INK, strokeWidth=1.4).encode(
        y=label, x="throughput_ci_low:Q", x2="throughput_ci_high:Q", tooltip=_tooltip())
    one = alt.Chart().mark_rule(color=style.INK, strokeDash=[4, 3]).encode(x=alt.datum(1))
    chart = (alt.layer(bars, whiskers, one, data=data)
             .properties(width=style.PANEL_WIDTH * 2, height=alt.Step(16))
             .facet(row=alt.Row("group:N", title=None,
                                header=alt.Header(labelAngle=0, labelAlign="left")))
             .resolve_scale(y="independent"))
    return Figure("speedup", "Speed-up per cell",
                  "Throughput NEW/BASE of each compared cell, grouped by model (operator cells: "
                  "by operator; collective cells, one per message size: by collective). Bars "
                  "start at 1 (the dashed rule); the whiskers are the "
                  f"confidence interval.{note}", style.styled(chart))


def distribution_figure(cells: pd.DataFrame) -> Figure | None:
    """How the throughput ratios are spread: a histogram, stacked by verdict."""
    data = _chart_data(cells)
    if data.empty:
        return None
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("throughput_ratio:Q", bin=alt.Bin(maxbins=40), title="throughput NEW/BASE"),
        y=alt.Y("count():Q", title="cells"),
        color=alt.Color("verdict:N", scale=_verdict_scale(list(data["verdict"].unique())),
                        title="verdict"))
    one = alt.Chart().mark_rule(color=style.INK, strokeDash=[4, 3]).encode(x=alt.datum(1))
    chart = alt.layer(bars, one, data=data[["throughput_ratio", "verdict"]]).properties(
        width=style.PANEL_WIDTH * 2, height=style.PANEL_HEIGHT)
    return Figure("distribution", "Distribution of the ratios",
                  "How many cells changed by how much: throughput NEW/BASE, 1 (dashed) is "
                  "no change.", style.styled(chart))


def geomean_figure(summary: pd.DataFrame) -> Figure | None:
    """The geometric means per model, precision, phase and operator, as bars from 1."""
    data = summary[summary["group"] != "all"]
    if data.empty:
        return None
    data = data.assign(title=data["group"].map(GROUP_TITLES).fillna(data["group"]))[
        ["title", "value", "cells", "geomean_ratio"]]
    bars = alt.Chart().mark_bar(color=style.PRECISION_COLOURS["float32"]).encode(
        y=alt.Y("value:N", title=None, sort=None),
        x=alt.X("geomean_ratio:Q", title="geometric mean of throughput NEW/BASE (log scale)",
                scale=alt.Scale(type="log")),
        x2=alt.datum(1),
        tooltip=[alt.Tooltip("value:N"), alt.Tooltip("cells:Q"),
                 alt.Tooltip("geomean_ratio:Q", title="NEW/BASE", format=".3f")])
    one = alt.Chart().mark_rule(color=style.INK, strokeDash=[4, 3]).encode(x=alt.datum(1))
    chart = (alt.layer(bars, one, data=data)
             .properties(width=style.PANEL_WIDTH * 2, height=alt.Step(18))
             .facet(row=alt.Row("title:N", title=None, sort=list(GROUP_TITLES.values()),
                                header=alt.Header(labelAngle=0, labelAlign="left")))
             .resolve_scale(y="independent"))
    return Figure("geomeans", "Geometric means",
                  "Throughput NEW/BASE per model, precision, phase and scale of model cells, "
                  "per operator of operator cells and per collective of collective cells "
                  "(all their message sizes).", style.styled(chart))


# -- HTML ----------------------------------------------------------------------------------

def _figure_block(figure: Figure) -> str:
    """A chart drawn in the browser from its inline spec (the report's figure without its
    links to image files: this page is one file)."""
    return (f'<figure class="chart" id="fig-{escape(figure.name)}"><figcaption>'
            f"<h3>{escape(figure.title)}</h3><p>{escape(figure.caption)}</p></figcaption>"
            f'<div class="vega-chart" id="{escape(chart_id(figure))}"></div></figure>')


def _cards(counts: dict[str, int]) -> str:
    cards = [f'<div class="card {CARD_CLASS.get(name, "")}"><div class="num">{n}</div>'
             f'<div class="lbl">{escape(name)}</div></div>' for name, n in counts.items()]
    return f'<div class="cards">{"".join(cards)}</div>'


def _cell_rows(rows: pd.DataFrame) -> list[list[Any]]:
    return [[r.verdict, r.label, ratio_text(r.throughput_ratio),
             interval_text(r.throughput_ci_low, r.throughput_ci_high), r.ci_method,
             ratio_text(r.p50_ratio), ratio_text(r.p95_ratio), ratio_text(r.p99_ratio),
             ratio_text(r.energy_per_sample_ratio), ratio_text(r.memory_ratio), _text(r.note)]
            for r in rows.itertuples()]


CELL_HEADERS = ["verdict", "cell", "throughput NEW/BASE", "CI", "CI from", "p50", "p95", "p99",
                "energy/sample", "memory", "note"]


def figures(comparison: Comparison) -> list[Figure]:
    made = (speedup_figure(comparison.cells), distribution_figure(comparison.cells),
            geomean_figure(comparison.summary))
    return [f for f in made if f is not None]


def sections(comparison: Comparison, charts: list[Figure]) -> list[Section]:
    """The page's sections: summary, charts, changed cells, unmatched, not compared, all."""
    cells = comparison.cells
    summary = comparison.summary
    intro = f"{geomean_text(comparison)} {rule_text(comparison)}"
    parts = [Section("summary", "Summary", intro, [
        table(["group", "value", "cells", "NEW/BASE", "min", "max", "faster", "slower", "same"],
              [[GROUP_TITLES.get(r.group, r.group), r.value, r.cells,
                ratio_text(r.geomean_ratio), ratio_text(r.min_ratio), ratio_text(r.max_ratio),
                r.faster, r.slower, r.same] for r in summary.itertuples()],
              css="numeric-tail")])]
    parts.append(Section("differs", "What differs", differences_text(comparison), [
        table(["", "BASE", "NEW"], [[d.field, d.base, d.new] for d in comparison.differences])
    ] if comparison.differences else []))
    if charts:
        parts.append(Section("charts", "Charts", "", [_figure_block(f) for f in charts]))
    moved = changed(cells)
    parts.append(Section("changed", f"Changed cells ({len(moved)})",
                         "Ratios are NEW/BASE: above 1 is faster for throughput, slower for "
                         "latency (p50/p95/p99), more for energy per sample and peak memory.",
                         [table(CELL_HEADERS, _cell_rows(moved))] if len(moved)
                         else ['<p class="note">No cell is faster or slower.</p>']))
    for verdict, ident, title in (("base only", "base-only", "Only in BASE"),
                                  ("new only", "new-only", "Only in NEW")):
        rows = _of(cells, verdict)
        if len(rows):
            parts.append(Section(ident, f"{title} ({len(rows)})", "", [table(
                ["cell", "throughput", "unit", "note"],
                [[r.label, _text(getattr(r, f"{verdict.split()[0]}_throughput")),
                  r.throughput_unit, r.note] for r in rows.itertuples()])]))
    rows = _of(cells, "not compared")
    if len(rows):
        parts.append(Section("not-compared", f"Not compared ({len(rows)})",
                             "Rows that are not ok (or ok without times, or measured again).",
                             [table(["side", "cell", "status", "error"],
                                     [[r.side.upper(), r.label, r.status, _why(r)]
                                      for r in rows.itertuples()])]))
    compared = cells[cells["verdict"].isin(list(VERDICT_COLOURS))]
    if len(compared):
        parts.append(Section("cells", f"All compared cells ({len(compared)})", "",
                             [table(CELL_HEADERS, _cell_rows(compared))]))
    return parts


def html_page(comparison: Comparison, bundle: str | None = None) -> str:
    """The offline page. ``bundle``: the Vega JavaScript (the report's, by default)."""
    charts = figures(comparison)
    parts = sections(comparison, charts)
    with alt.data_transformers.enable("default", max_rows=None):
        specs = {chart_id(f): f.chart.to_dict() for f in charts}
    # The page's script gives each chart its rows from the page's data (as the report's
    # page does): the rows each spec holds go there, packed, and the spec names them.
    rows, uses = datasets.hoist(specs)
    data = {name: datasets.pack(found) for name, found in rows.items()}
    if bundle is None and specs:
        from dlbench.report.export import javascript_bundle

        bundle = javascript_bundle()
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    studies = sorted({str(s) for s in comparison.cells["study"].dropna()})
    return page_html(title="dlbench compare", studies=studies,
                     meta=f"BASE {comparison.base.label} → NEW {comparison.new.label}. "
                          f"Generated {generated}.",
                     cards=_cards(comparison.counts), sections=parts, specs=specs,
                     bundle=bundle or "", data=data, uses=uses)


# -- files ---------------------------------------------------------------------------------

def arrow_table(comparison: Comparison) -> pa.Table:
    """The cells as Arrow, with how they were compared in the schema metadata."""
    table = pa.Table.from_pandas(comparison.cells, preserve_index=False)
    s = comparison.settings
    meta = {"base": comparison.base.label, "new": comparison.new.label,
            "threshold": s.threshold, "single_run_threshold": s.single_run_threshold,
            "resamples": s.resamples, "seed": s.seed,
            "confidence": s.confidence,
            "differences": [dataclasses.asdict(d) for d in comparison.differences]}
    return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                          METADATA_KEY: json.dumps(meta).encode()})


def write_outputs(comparison: Comparison, outdir: str | Path,
                  bundle: str | None = None) -> list[Path]:
    """Write the four files into ``outdir``, all in place or none (see the module)."""
    outdir = Path(outdir)
    paths = [outdir / name for name in FILES]
    parquet, csv, md, page = paths
    texts = {md: markdown(comparison), page: html_page(comparison, bundle)}
    with contextlib.ExitStack() as stack:
        # Every file is written before any replaces its previous version.
        stack.enter_context(writing(parquet, KEPT))
        pq.write_table(arrow_table(comparison), stack.enter_context(atomic.temp_path(parquet)))
        stack.enter_context(writing(csv, KEPT))
        comparison.cells.to_csv(stack.enter_context(atomic.temp_path(csv)), index=False)
        for path, text in texts.items():
            stack.enter_context(writing(path, KEPT))
            stack.enter_context(atomic.temp_path(path)).write_text(text, encoding="utf-8")
    return paths


def console_summary(comparison: Comparison, limit: int = 5) -> list[str]:
    """A few lines for the terminal: the counts, the geometric mean, the largest changes."""
    counts = ", ".join(f"{name} {n}" for name, n in comparison.counts.items())
    lines = [f"BASE {comparison.base.label} -> NEW {comparison.new.label}",
             f"  {counts}", f"  {geomean_text(comparison)}"]
    if comparison.differences:
        lines.append("  differs: " + "; ".join(f"{d.field} {d.base} -> {d.new}"
                                               for d in comparison.differences[:limit])
                     + (f"; and {len(comparison.differences) - limit} more"
                        if len(comparison.differences) > limit else ""))
    else:  # an A/A comparison: say so, so that a verdict is not read as the system's
        lines.append(f"  differs: nothing the results recorded ({len(comparison.alike)} "
                     "facts alike; listed in compare.md)")
    moved = changed(comparison.cells)
    for r in moved.head(limit).itertuples():
        lines.append(f"  {r.verdict}: {r.label}: {ratio_text(r.throughput_ratio)} "
                     f"[{interval_text(r.throughput_ci_low, r.throughput_ci_high)}]")
    if len(moved) > limit:
        lines.append(f"  ... and {len(moved) - limit} more changed cells")
    noted = len(unchanged_notes(comparison.cells))
    if noted:  # a note may explain a verdict (clocks held back, one run): say where it is
        have = "cell has a note" if noted == 1 else "cells have notes"
        lines.append(f"  notes: {noted} unchanged {have} (listed in compare.md and "
                     "compare.html)")
    return lines
