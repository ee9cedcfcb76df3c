"""One look for every chart: fonts, colours per precision and framework, facet layout."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import altair as alt
import pandas as pd

from dlbench.efficiency import device_per_process
from dlbench.report.data import PRECISION_ORDER

FONT = "Helvetica Neue, Helvetica, Arial, sans-serif"
INK = "#1f2933"
MUTED = "#616e7c"
GRID = "#e4e7eb"
UNSTABLE_COLOUR = "#d64545"  # rings around cells whose runs disagree
# Fixed colours, so a precision or framework looks the same in every chart of every report.
PRECISION_COLOURS = {"float64": "#8c6d31", "float32": "#4c78a8", "tf32": "#54a24b",
                     "bfloat16": "#f58518", "float16": "#e45756"}
FRAMEWORK_COLOURS = {"pytorch": "#ee4c2c", "mxnet": "#2f6fb0"}
PASS_COLOURS = {"forward": "#4c78a8", "backward": "#f58518", "training": "#4c78a8",
                "inference": "#54a24b", "loader": "#b279a2"}
SPARE_COLOURS = ("#72b7b2", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#eeca3b", "#439894")
PANEL_WIDTH = 250
PANEL_HEIGHT = 170
PANEL_COLUMNS = 3
# Three significant digits for rates that can be small (TFLOP/s, GB/s, samples per joule):
# a fixed count of decimals prints a CPU's 0.006 and 0.009 TFLOP/s alike as "0.01". The
# tooltips' d3 format ("r": decimals, never 1.8e+3; "~": no trailing zeros) and the numbers
# tables' (page.TABLE_SCRIPT: "g" is significant digits, in decimals) print the same text.
SIGNIFICANT_TIP = ",.3~r"
SIGNIFICANT_COLUMN = ",.3g"


# What a model cell's num_gpus counts (dlbench.efficiency.device_per_process): a GPU each,
# or processes sharing one CPU (singular, plural).
COUNTED = {True: ("GPU", "GPUs"), False: ("process", "processes")}


def counted(devices: Iterable[object]) -> tuple[str, str]:
    """What num_gpus counts in rows on these devices ("gpu", "cpu"), singular and plural:
    "GPU", "process", or "GPU or process" where the rows hold both."""
    kinds = {device_per_process({"device": d}) for d in devices}
    named = [k for k in COUNTED if k in kinds] or [True]
    singular, plural = (" or ".join(COUNTED[k][i] for k in named) for i in (0, 1))
    return singular, plural


def nouns(count: int, singular: str, plural: str | None = None) -> str:
    """A count with its noun, singular for one: "1 cell", "2 cells", "1,234 rows"."""
    return f"{count:,} " + (singular if count == 1 else plural or singular + "s")


@dataclass(frozen=True)
class Column:
    """A column of a numbers table: the data field, its heading and, for numbers, a
    d3-style format (``d``, ``,.1f``, ``.1%``...); text has none."""

    field: str
    title: str
    format: str = ""


@dataclass
class NumbersTable:
    """A sortable table the page builds from data it holds once: the rows of ``frame``,
    or, beside a figure, its chart's rows (``frame`` where the chart has no rows at its
    top, as charts stacked one above the other). ``required``: rows where this field is
    null are left out (those the chart does not draw)."""

    columns: list[Column]
    required: str | None = None
    frame: pd.DataFrame | None = None
    name: str = ""
    title: str = ""


@dataclass
class Figure:
    """A chart of the report: ``name`` is its file stem and HTML id; ``table``: the
    numbers it draws, as a sortable table under it."""

    name: str
    title: str
    caption: str
    chart: alt.TopLevelMixin
    table: NumbersTable | None = None
    # The first value of each of the chart's dropdowns (field -> value): the rows its
    # images draw (report.encodings).
    shows: dict[str, object] = field(default_factory=dict)


def colour_scale(values: list[str], fixed: dict[str, str]) -> alt.Scale:
    """Known values keep their fixed colour; unknown ones take spare colours in turn."""
    spare = iter(SPARE_COLOURS * (1 + len(values) // len(SPARE_COLOURS)))
    return alt.Scale(domain=values, range=[fixed.get(v) or next(spare) for v in values])


def precision_scale(values: list[str]) -> alt.Scale:
    ordered = [p for p in PRECISION_ORDER if p in values] + [v for v in values if v not in PRECISION_ORDER]
    return colour_scale(ordered, PRECISION_COLOURS)


def batch_axis(batch_sizes: Iterable[int]) -> alt.Axis:
    """Ticks at exactly the batch sizes measured (a log-2 axis would otherwise pick its own)."""
    return alt.Axis(values=sorted(int(b) for b in batch_sizes), format="d", labelFlush=False)


def facet_columns(panels: int) -> int:
    return max(1, min(PANEL_COLUMNS, panels))


# Legend labels and titles up to this many pixels before an ellipsis (Vega's default, 160,
# cut "pytorch · 5 iterations · 1 warm-up" short).
LEGEND_LIMIT = 300


def styled(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return (
        chart.configure(font=FONT, background="white", padding=8)
        .configure_view(stroke=GRID, strokeWidth=1, continuousWidth=PANEL_WIDTH,
                        continuousHeight=PANEL_HEIGHT)
        .configure_axis(labelColor=MUTED, titleColor=INK, labelFontSize=11, titleFontSize=12,
                        titleFontWeight="normal", gridColor=GRID, domainColor="#9aa5b1",
                        tickColor="#9aa5b1", labelOverlap="greedy", labelSeparation=4)
        .configure_header(labelFontSize=12, labelFontWeight="bold", labelColor=INK,
                          titleFontSize=12, labelPadding=6)
        .configure_legend(labelFontSize=11, titleFontSize=12, titleFontWeight="normal",
                          titleColor=INK, labelColor=INK, orient="right", symbolSize=80,
                          symbolOpacity=1, labelLimit=LEGEND_LIMIT, titleLimit=LEGEND_LIMIT)
        .configure_title(fontSize=14, color=INK, anchor="start")
        .configure_point(size=55, filled=True)
        .configure_line(strokeWidth=2.2)
    )
