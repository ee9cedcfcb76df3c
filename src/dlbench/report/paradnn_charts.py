"""ParaDnn's parameterized families: achieved TFLOP/s against batch size and model size.

Model size is the parameter count, biases included, for every family: ParaDnn's Φ (an FC
model's weights, no biases) is shown beside it where a cell has one, never on its scale.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench.report import encodings
from dlbench.report.data import runs_title, time_title, varying
from dlbench.report.encodings import Encoding
from dlbench.report.model_charts import faceted, filtered, throughput_unit, with_panel
from dlbench.report.style import (
    PANEL_HEIGHT,
    PANEL_WIDTH,
    SIGNIFICANT_COLUMN,
    SIGNIFICANT_TIP,
    Column,
    Figure,
    NumbersTable,
    batch_axis,
    styled,
)

# The schemes without their palest end, which would vanish on white.
_VIRIDIS = alt.SchemeParams(name="viridis", extent=[0.0, 0.85])
# Batch sizes, in order, in hues far apart: plasma's neighbours (2 and 4, 64 and 256)
# were two purples, two pinks, where a panel drew only those.
_BATCH_SCHEME = alt.SchemeParams(name="turbo", extent=[0.08, 0.92])
PARAMETERS = "parameters"
PHI = "Φ (FC weights)"
# ParaDnn's own figure (6Φ x batch per training step, 2Φ inferring) over its steps' whole
# time, so the mean step: beside the median-based TFLOP/s, a slow step or two part them.
PHI_TFLOPS = "ParaDnn Φ TFLOP/s (mean step)"


def _metric(frame: pd.DataFrame) -> tuple[str, str]:
    """TFLOP/s where the runner counted the work; throughput otherwise."""
    if frame["tflops"].notna().any():
        return "tflops", "achieved TFLOP/s"
    return "throughput", f"throughput ({throughput_unit(frame)})"


def _panels(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str], Encoding]:
    """Panels per model and precision (and phase where it varies); every other axis that
    varies gets a line style or a dropdown (report.encodings), so that a line joins only
    cells of one configuration."""
    panels = ("model", "precision", *varying(frame, ("phase",)))
    encoding = encodings.choose(frame, panels=panels, colour=None)
    frame = frame.assign(variant=encodings.labels(frame, encoding.series))
    frame, order = with_panel(frame, encoding.panels)
    return frame, order, encoding


def _lines(base: alt.Chart, encoding: Encoding) -> alt.Chart:
    if not encoding.series:
        return base
    return base.encode(strokeDash=alt.StrokeDash(
        "variant:N", title=encoding.series_title()))


def _formats(y: str) -> tuple[str, str]:
    """The tooltip's and the numbers table's format of the metric ``y``: TFLOP/s to three
    significant digits (a CPU's are thousandths), throughput with its decimals."""
    return (SIGNIFICANT_TIP, SIGNIFICANT_COLUMN) if y == "tflops" else (",.2f", ",.3f")


def _numbers(frame: pd.DataFrame, y: str, y_title: str, encoding: Encoding) -> NumbersTable:
    placed = encoding.placed(("model", "precision"))
    return NumbersTable([
        Column("model", "model"), Column("config", "options"),
        Column("parameters", PARAMETERS, ",d"), Column("phi", PHI, ",d"),
        Column("precision", "precision"),
        *[Column(a, encoding.title(a)) for a in placed],
        Column("batch_size", "batch size", "d"), Column(y, y_title, _formats(y)[1]),
        Column("phi_tflops", runs_title(frame["repeats"], PHI_TFLOPS), SIGNIFICANT_COLUMN),
        Column("time_ms", time_title(frame["repeats"], "ms"), ",.3f")], required=y)


def _tooltip(frame: pd.DataFrame, y: str) -> list[alt.Tooltip]:
    return [alt.Tooltip("model:N"), alt.Tooltip("config:N", title="options"),
            alt.Tooltip("parameters:Q", title=PARAMETERS, format=",d"),
            alt.Tooltip("phi:Q", title=PHI, format=",d"),
            alt.Tooltip("precision:N"), alt.Tooltip("batch_size:Q", title="batch size"),
            alt.Tooltip(f"{y}:Q", format=_formats(y)[0]),
            alt.Tooltip("time_ms:Q", title=time_title(frame["repeats"], "ms"), format=",.3f")]


def by_batch_figure(paradnn: pd.DataFrame) -> Figure | None:
    if paradnn.empty:
        return None
    y, y_title = _metric(paradnn)
    frame, panels, encoding = _panels(paradnn[paradnn[y].notna()])
    sized = frame["parameters"].notna().all()
    # The gradient's ends labelled: a log scale's own ticks left one label ("1M") over a
    # range within one decade, from which no count could be read.
    ends = sorted({int(frame["parameters"].min()), int(frame["parameters"].max())}) \
        if sized else []
    colour = (alt.Color("parameters:Q", title=PARAMETERS,
                        scale=alt.Scale(type="log", scheme=_VIRIDIS),
                        legend=alt.Legend(format=".3~s", type="gradient", gradientLength=140,
                                          values=ends))
              if sized else alt.Color("config:N", title="options"))
    base = alt.Chart().encode(
        x=alt.X("batch_size:Q", title="batch size", axis=batch_axis(frame["batch_size"].unique()),
                scale=alt.Scale(type="log", base=2, nice=False, padding=12)),
        y=alt.Y(f"{y}:Q", title=y_title),
        color=colour, detail=[alt.Detail("config:N"), alt.Detail("variant:N")],
        tooltip=_tooltip(frame, y),
    )
    base = _lines(base, encoding)
    # Hollow points: with colour on stroke only, Vega draws the size legend as a gradient
    # (a legend fed by both stroke and fill becomes a long list of symbols).
    points = base.mark_point(filled=False, fill="white", strokeWidth=1.6, opacity=1)
    layered = filtered(alt.layer(base.mark_line(strokeWidth=1.6), points, data=frame), None,
                       encoding).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    chart = faceted(layered, panels, encoding, frame).resolve_scale(y="independent")
    return Figure("paradnn-by-batch", f"ParaDnn: {y_title} against batch size",
                  "One line per model configuration, coloured by its parameter count "
                  "(biases included; ParaDnn's Φ, an FC model's weights, in the tooltip)."
                  + encoding.note(), styled(chart), shows=encoding.defaults,
                  table=_numbers(frame, y, y_title, encoding))


def by_size_figure(paradnn: pd.DataFrame) -> Figure | None:
    if paradnn.empty:
        return None
    y, y_title = _metric(paradnn)
    frame = paradnn[paradnn[y].notna() & paradnn["parameters"].notna()]
    if frame.empty or frame["parameters"].nunique() < 2:
        return None
    frame, panels, encoding = _panels(frame)
    base = alt.Chart().encode(
        x=alt.X("parameters:Q", title=PARAMETERS,
                scale=alt.Scale(type="log", nice=False, padding=12), axis=alt.Axis(format="~s")),
        y=alt.Y(f"{y}:Q", title=y_title),
        color=alt.Color("batch_size:O", title="batch size", scale=alt.Scale(scheme=_BATCH_SCHEME)),
        tooltip=_tooltip(frame, y),
    )
    if encoding.series:
        base = base.encode(shape=alt.Shape("variant:N", title=encoding.series_title()))
    # Points, no lines: configurations of one size differ in how their work is shaped (a
    # CNN's dense layer against its convolutions, an FC's layers against its nodes), and
    # a line through them in size order zig-zagged between such shapes.
    layered = filtered(alt.layer(base.mark_point(filled=True, size=40), data=frame),
                       None, encoding).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    chart = faceted(layered, panels, encoding, frame).resolve_scale(y="independent")
    return Figure("paradnn-by-size", f"ParaDnn: {y_title} against model size",
                  "One point per model configuration and batch size, over the models' "
                  "parameter counts (biases included; ParaDnn's Φ, an FC model's weights, "
                  "and the configuration in the tooltip)."
                  + encoding.note(), styled(chart), shows=encoding.defaults,
                  table=_numbers(frame, y, y_title, encoding))
