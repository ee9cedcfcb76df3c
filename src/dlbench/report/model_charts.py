"""Charts of model cells: throughput against batch size, framework and precision comparisons."""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench import frameworks
from dlbench.aggregate import MONITOR_COLUMNS
from dlbench.bootstrap import MIN_ITERATIONS
from dlbench.report import encodings
from dlbench.report.data import (
    at_cell_time,
    cell_time,
    joined,
    measured,
    model_opts_label,
    numeric,
    ordered,
    runs_title,
    several_runs,
    time_title,
    varying,
)
from dlbench.report.encodings import Encoding
from dlbench.report.style import (
    FRAMEWORK_COLOURS,
    LEGEND_LIMIT,
    MUTED,
    PANEL_HEIGHT,
    PANEL_WIDTH,
    SIGNIFICANT_COLUMN,
    SIGNIFICANT_TIP,
    UNSTABLE_COLOUR,
    Column,
    Figure,
    NumbersTable,
    batch_axis,
    colour_scale,
    facet_columns,
    precision_scale,
    styled,
)

PARADNN_PREFIX = "paradnn_"
MONITOR_NAMES = [name for name, _ in MONITOR_COLUMNS]
# Room between batch sizes, so a group of one bar does not fill its whole band.
BAND = alt.Scale(paddingInner=0.3, paddingOuter=0.15)


def model_label(rows: pd.DataFrame) -> pd.Series:
    """The model name, with its options where one model ran with several sets of options."""
    label = rows["model"].fillna("?").astype(str)
    for model, group in rows.groupby(label, sort=False):
        opts = model_opts_label(group)
        label.loc[group.index] = [model if o == "default" else f"{model} ({o})" for o in opts]
    return label


EAGER = "eager"


def execution_mode(rows: pd.DataFrame) -> pd.Series:
    """A cell's execution mode in words: its compile mode, and channels_last where set
    ('eager' for cells without the axes: MXNet, and tables made before they existed)."""
    compile_mode = rows.get("compile", pd.Series(index=rows.index, dtype=object))
    layout = rows.get("memory_format", pd.Series(index=rows.index, dtype=object))
    mode = compile_mode.fillna(EAGER).astype(str)
    return mode.where(layout.fillna("contiguous") != "channels_last", mode + " · channels_last")


def model_frame(frame: pd.DataFrame, *, paradnn: bool = False) -> pd.DataFrame:
    """Ok model measurements as chart rows; ParaDnn families apart (they have their section)."""
    rows = measured(frame, "model")
    if rows.empty:
        return rows
    is_paradnn = rows["model"].fillna("").str.startswith(PARADNN_PREFIX)
    rows = rows[rows["batch_size"].notna() & (is_paradnn if paradnn else ~is_paradnn)]
    if rows.empty:
        return rows
    out = pd.DataFrame({
        # A ParaDnn model's options are its configuration, a series of its own.
        "model": rows["model"].fillna("?") if paradnn else model_label(rows),
        "phase": rows["phase"].fillna("?"),
        "precision": rows["precision"].fillna("?"),
        "batch_size": rows["batch_size"].astype(int),
        # Across the cell's repeats where it has several (dlbench.run_to_run), with the
        # 95 % interval of the typical run as whiskers.
        **run_to_run_columns(rows),
        "unit": rows["throughput_unit"].fillna(""),
        # At the cell's time, as its throughput is: one tooltip, one time.
        "tflops": at_cell_time(rows, "tflops"),
        # Why a cell has none (a table older than the column: none said).
        "flops_note": rows.get("flops_note"),
        "system": rows["system"].fillna("") if "system" in rows else "",
        "framework": rows["framework"].fillna("?"),
        "mode": execution_mode(rows),
        # Each run compiles anew: the mean over the runs (data.measured), as every figure
        # a run has of its own (the resource monitor's below too).
        "compile_time_s": rows.get("compile_time_s", pd.Series(index=rows.index, dtype=float)),
        # The measured time split into waiting for input and the rest (null for synthetic
        # data), each the mean over the runs too.
        "data_wait_s": numeric(rows, "data_wait_s"),
        "compute_s": numeric(rows, "compute_s"),
        "device": rows["device"].fillna("?"),
        "num_gpus": rows["num_gpus"].fillna(0).astype(int),
        "data": rows["data"].fillna("synthetic"),
        # Every model's parameter count, biases included: one definition on one scale.
        "parameters": numeric(rows, "parameters"),
        # ParaDnn's Φ counts an FC model's weights only (no biases); null for the others.
        "phi": numeric(rows, "phi"),
        "config": model_opts_label(rows) if paradnn else "",
        "study": rows["study"],
        "cell": rows["cell"],
        # Where it ran: the CPU decides whether a reduced precision is emulated there.
        "cpu_model": rows["cpu_model"].fillna("an unnamed CPU"),
        "cpu_capability": rows["cpu_capability"],
        "precision_native": rows["precision_native"],
        # The resource monitor's summary of the cell (null where it did not run).
        **{name: rows[name] for name in MONITOR_NAMES},
        # Every other axis a cell can differ in (num_batches, loader threads, ...), so that
        # the charts can tell apart the cells that differ in it (report.encodings).
        **{axis: rows[axis] for axis in encodings.model_axes()
           if axis in rows and axis not in ("system", "mode")},
    })
    return out.reset_index(drop=True)


def by_batch(models: pd.DataFrame, panels: tuple[str, ...] = ("model", "phase")
             ) -> tuple[pd.DataFrame, list[str], Encoding]:
    """The rows of the charts against batch size, their panel order and where each axis
    goes (report.encodings). Made from the whole model frame, the same for every such
    chart, so that the page holds their data once; a chart keeps its own rows with a
    filter in its spec."""
    key = (id(models), panels)
    kept = _BY_BATCH.get(key)
    if kept is not None and kept[0] is models:  # the same frame, not one at a reused id
        return kept[1]
    encoding = encodings.choose(models, panels=panels)
    frame = models.assign(variant=encodings.labels(models, encoding.series))
    frame, order = with_panel(frame, encoding.panels)
    units = frame["unit"].replace("", None)
    # samples/s beside tokens/s or shots/s: each throughput panel says its own (the other
    # charts of these rows draw TFLOP/s, memory or energy: their panels are the plain ones).
    named = frame["panel"] + (units.map(lambda u: f" ({u})" if isinstance(u, str) else "")
                              if units.nunique() > 1 else "")
    frame = frame.assign(panel_unit=named)
    # One object for every chart of one report: its rows are converted once (datasets.Store).
    _BY_BATCH.clear()
    _BY_BATCH[key] = (models, (frame, order, encoding))
    return frame, order, encoding


_BY_BATCH: dict[tuple[int, tuple[str, ...]], tuple[pd.DataFrame, tuple]] = {}


def run_to_run_columns(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """Throughput and time of each measurement's typical run (the mean of its repeats'
    medians; the row's own median in a table without repeats), the throughput interval
    from the time interval, and the run-to-run facts."""
    items = numeric(rows, "items_per_iteration")
    throughput = numeric(rows, "cell_throughput").fillna(rows["throughput"].astype(float))
    unstable = rows["unstable"] if "unstable" in rows else pd.Series(None, index=rows.index)
    method = (rows["ci_method"] if "ci_method" in rows
              else pd.Series(None, index=rows.index)).fillna("none")
    # A table aggregated before the rule keeps an interval from one run of too few
    # iterations (their whole range): none is drawn, as the aggregate now gives none.
    too_few = (method == "iterations") & (numeric(rows, "iterations") < MIN_ITERATIONS)
    method = method.mask(too_few, "none")
    return {
        "throughput": throughput,
        "throughput_low": (items / numeric(rows, "cell_time_ci_high_s")).mask(too_few),
        "throughput_high": (items / numeric(rows, "cell_time_ci_low_s")).mask(too_few),
        "time_ms": cell_time(rows) * 1e3,
        "repeats": numeric(rows, "repeats").fillna(1).astype(int),
        "ci_method": method,
        "run_to_run_cv": numeric(rows, "run_to_run_cv"),
        "unstable": unstable.astype("boolean").fillna(False).astype(bool),
    }


def in_order(frame: pd.DataFrame, columns: list[str], label: str) -> list[str]:
    """The distinct values of ``label`` ordered by ``columns``, each column in its display
    order (models alphabetically, training before inference, GPU counts by size...)."""
    keys = frame[[*columns, label]].drop_duplicates(label)
    ranks = pd.DataFrame({c: keys[c].map({v: i for i, v in enumerate(encodings.values(keys, c))})
                          for c in columns}, index=keys.index)
    return keys.loc[ranks.sort_values(columns, na_position="last").index, label].tolist()


def with_panel(frame: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, list[str]]:
    frame = frame.copy()
    if not columns:  # every row in one panel
        frame["panel"] = ""
        return frame, [""]
    frame["panel"] = encodings.labels(frame, columns)
    return frame, in_order(frame, columns, "panel")


def model_tooltip(frame: pd.DataFrame, extra: list[alt.Tooltip],
                  encoding: Encoding | None = None) -> list[alt.Tooltip]:
    tips = [alt.Tooltip("model:N"), alt.Tooltip("phase:N"), alt.Tooltip("precision:N"),
            alt.Tooltip("batch_size:Q", title="batch size")]
    named = ("model", "phase", "precision", "batch_size")
    shown = (encoding.placed(named, panels=True) if encoding is not None
             else [c for c in varying(frame, encodings.SERIES_FIRST) if c not in named])
    tips += [alt.Tooltip(f"{c}:N", title=(encoding or encodings).title(c)) for c in shown]
    return tips + extra


def axis_columns(encoding: Encoding) -> list[Column]:
    """The leading columns of a numbers table: what tells its rows apart."""
    placed = encoding.placed(("model", "phase", "precision", "batch_size"), panels=True)
    return [Column("model", "model"), Column("phase", "phase"),
            *[Column(a, encoding.title(a)) for a in placed],
            Column("precision", "precision"), Column("batch_size", "batch size", "d")]


def filtered(chart: alt.TopLevelMixin, where: str | None,
             encoding: Encoding | None) -> alt.TopLevelMixin:
    """``chart`` keeping the rows ``where`` (a Vega expression) and those the encoding's
    dropdowns show."""
    for expression in (where, encoding.filter_expression() if encoding else None):
        if expression:
            chart = chart.transform_filter(expression)
    return chart


def faceted(layered: alt.LayerChart, panels: list[str], encoding: Encoding | None,
            frame: pd.DataFrame, dropdowns: bool = True, field: str = "panel"
            ) -> alt.FacetChart:
    """One panel per label in ``panels`` (the values of ``field``), the encoding's
    dropdowns above them (``dropdowns`` false: declared by the chart it is stacked in,
    ``stacked``)."""
    chart = layered.facet(
        facet=alt.Facet(f"{field}:N", title=None, sort=panels),
        columns=facet_columns(len(panels)),
    )
    if dropdowns and encoding is not None and encoding.filters:
        chart = chart.add_params(*encoding.params(frame))
    return chart


def stacked(charts: list[alt.FacetChart], encoding: Encoding | None,
            frame: pd.DataFrame) -> alt.TopLevelMixin:
    """Faceted charts made with ``dropdowns=False``, one above the other, their panels
    filtered by the encoding's dropdowns declared once, on the stack: each chart's own
    would be lifted out of its layers by altair, which fails on their unnamed views (a
    report of five systems or more stopped there)."""
    if len(charts) == 1:
        chart = charts[0]
    else:
        # altair names each facet's first layer after the chart's place in the stack, and
        # cannot name one that has no name yet: give them theirs.
        named = []
        for place, facet in enumerate(charts):
            facet = facet.copy(deep=True)
            if isinstance(facet.spec, alt.LayerChart) and facet.spec.layer \
                    and facet.spec.layer[0].name is alt.Undefined:
                facet.spec.layer[0].name = f"panels{place}"
            named.append(facet)
        chart = alt.vconcat(*named)
    if encoding is not None and encoding.filters:
        chart = chart.add_params(*encoding.params(frame))
    return chart


def series_dash(encoding: Encoding) -> dict[str, object]:
    """The encodings of a line per ``variant`` (the encoding's series): its dash where
    there are series."""
    series: dict[str, object] = {"detail": "variant:N"}
    if encoding.series:
        series["strokeDash"] = alt.StrokeDash("variant:N",
                                              title=encoding.series_title())
    return series


def line_panels(data: pd.DataFrame, panels: list[str], encoding: Encoding, *, x: alt.X,
                colour: alt.Color, tooltip: list[alt.Tooltip], y: alt.Y, field: str,
                whisker: str | None = None, dropdowns: bool = True) -> alt.FacetChart:
    """Lines and points of ``y`` (data field ``field``) against ``x``: a line per colour and
    per the encoding's series (the ``variant`` column, its line style), a rule from
    ``field`` up to ``whisker`` where given, one panel per label in ``panels`` with a y
    scale of its own; rows without ``field`` left out (``dropdowns``: as ``faceted``)."""
    base = alt.Chart().encode(x=x, color=colour, tooltip=tooltip, **series_dash(encoding))
    line = base.encode(y=y)
    layers = [line.mark_line(), line.mark_point()]
    if whisker:
        layers.append(base.mark_rule(strokeWidth=1.2).encode(y=f"{field}:Q", y2=f"{whisker}:Q"))
    layered = filtered(alt.layer(*layers, data=data), f"isValid(datum.{field})", encoding)
    return faceted(layered.properties(width=PANEL_WIDTH, height=PANEL_HEIGHT), panels,
                   encoding, data, dropdowns).resolve_scale(y="independent")


def lone_points(frame: pd.DataFrame, colour: alt.Color, encoding: Encoding | None) -> bool:
    """Whether some line of the chart (one panel, colour, line style and dropdown choice)
    has a single batch size."""
    field = colour.to_dict().get("field")
    keys = [k for k in ("panel", field, "variant", *(encoding.filters if encoding else ()))
            if k in frame]
    return bool((frame.groupby(keys, dropna=False)["batch_size"].nunique() == 1).any())


def _points_title(title: str | list[str]) -> str | list[str]:
    if isinstance(title, list):  # a title on several lines
        return [*title[:-1], f"{title[-1]} (points)"]
    return f"{title} (points)" if title else "points"


def series_styles(base: alt.Chart, frame: pd.DataFrame, colour: alt.Color,
                encoding: Encoding | None) -> alt.Chart:
    """``base`` with a dash and a point shape per value of ``variant`` (the encoding's
    series), where there are several; unchanged where there is one."""
    if frame["variant"].nunique() <= 1:
        return base
    title = encoding.series_title() if encoding else ""
    # A line of one point shows no dash: where there are such, the point shapes get
    # a legend too (a study at one batch size told its systems apart by tooltip only).
    shape_legend = alt.Legend(title=_points_title(title)) \
        if lone_points(frame, colour, encoding) else None
    return base.encode(
        strokeDash=alt.StrokeDash("variant:N", title=title, sort=in_order(
            frame, encoding.series, "variant") if encoding else "ascending", legend=alt.Legend(
            symbolType="stroke", symbolStrokeWidth=2.2, symbolSize=300)),
        shape=alt.Shape("variant:N", legend=shape_legend, sort=in_order(
            frame, encoding.series, "variant") if encoding else "ascending"))


def lines_by_batch(frame: pd.DataFrame, *, y: str, y_title: str, colour: alt.Color,
                   tooltip: list[alt.Tooltip], panels: list[str],
                   series: str = "variant", encoding: Encoding | None = None,
                   where: str | None = None,
                   calculate: dict[str, str] | None = None,
                   panel_field: str = "panel") -> alt.FacetChart:
    """Lines over a log-2 batch-size axis, one panel per label in ``panels`` (values of
    ``panel_field``); ``where``: a Vega expression choosing the chart's rows of ``frame``;
    ``calculate``: columns the chart derives (name -> Vega expression)."""
    x = alt.X("batch_size:Q", title="batch size", axis=batch_axis(frame["batch_size"].unique()),
              scale=alt.Scale(type="log", base=2, nice=False, padding=12))
    base = alt.Chart().encode(
        x=x, y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(zero=True)),
        color=colour, detail=f"{series}:N", tooltip=tooltip,
    )
    if series == "variant":
        base = series_styles(base, frame, colour, encoding)
    layers = [base.mark_line(), base.mark_point()]
    if y == "throughput" and frame.get("throughput_low", pd.Series(dtype=float)).notna().any():
        # The 95 % interval of each point (over repeats, or over one run's iterations).
        # Its own encodings: a whisker takes the line's colour, not its dash or shape.
        layers.append(alt.Chart().mark_rule(strokeWidth=1.2).encode(
            x=x, y="throughput_low:Q", y2="throughput_high:Q", color=colour,
            tooltip=tooltip))
    if y == "throughput" and frame.get("unstable", pd.Series(dtype=bool)).any():
        # Cells whose runs disagree beyond the unstable_cv threshold: a ring around the point.
        layers.append(alt.Chart().transform_filter(alt.datum.unstable).mark_point(
            shape="circle", size=260, filled=False, color=UNSTABLE_COLOUR, strokeWidth=1.6,
        ).encode(x=x, y=f"{y}:Q", tooltip=tooltip))
    layered = filtered(alt.layer(*layers, data=frame), where, encoding)
    for name, expression in (calculate or {}).items():
        layered = layered.transform_calculate(**{name: expression})
    layered = layered.properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return faceted(layered, panels, encoding, frame,
                   field=panel_field).resolve_scale(y="independent")


def throughput_unit(frame: pd.DataFrame) -> str:
    """The rows' throughput unit (``unit``: samples/s, tokens/s, shots/s), items/s where
    they have several."""
    units = [u for u in frame["unit"].unique() if u]
    return units[0] if len(units) == 1 else "items/s"


def throughput_figure(models: pd.DataFrame) -> Figure | None:
    if models.empty:
        return None
    frame, panels, encoding = by_batch(models)
    # The run-to-run CV where some cell ran more than once: without, the line read "NaN%".
    cv = ([alt.Tooltip("run_to_run_cv:Q", title="run-to-run CV", format=".1%")]
          if frame["run_to_run_cv"].notna().any() else [])
    tips = model_tooltip(frame, [alt.Tooltip("throughput:Q", format=",.1f"),
                            alt.Tooltip("unit:N"),
                            alt.Tooltip("throughput_low:Q", title="95 % CI from", format=",.1f"),
                            alt.Tooltip("throughput_high:Q", title="95 % CI to", format=",.1f"),
                            alt.Tooltip("ci_method:N", title="CI over"),
                            alt.Tooltip("repeats:Q", title="runs"), *cv,
                            alt.Tooltip("time_ms:Q", title=time_title(frame["repeats"], "ms"),
                                        format=",.3f")],
                         encoding)
    colour = alt.Color("precision:N", scale=precision_scale(list(frame["precision"].unique())))
    named = [frame.loc[frame["panel"] == p, "panel_unit"].iloc[0] for p in panels]
    chart = lines_by_batch(frame, y="throughput", y_title=f"throughput ({throughput_unit(frame)})",
                           colour=colour, tooltip=tips, panels=named, encoding=encoding,
                           panel_field="panel_unit")
    several = int(frame["repeats"].max()) > 1
    return Figure("throughput", "Throughput against batch size",
                  "Median-iteration throughput"
                  + (" (at the mean of each cell's runs' medians)" if several else "")
                  + "; one panel per model and phase, one line per precision. Whiskers: 95 % "
                  + ("confidence interval of the typical run, over the runs (where a cell ran "
                     "once, of its run's median over its iterations)"
                     if several else "confidence interval of the run's median, over its "
                     "iterations taken as independent (the typical run's needs repeats)")
                  + f"; none for a run of fewer than {MIN_ITERATIONS} iterations"
                  + "." + (" Ringed points are unstable: their runs differ by more than the "
                           "unstable_cv threshold." if frame["unstable"].any() else "")
                  + encoding.note(),
                  styled(chart), shows=encoding.defaults, table=NumbersTable([
                      *axis_columns(encoding),
                      Column("throughput", f"throughput ({throughput_unit(frame)})", ",.1f"),
                      Column("throughput_low", "95 % CI from", ",.1f"),
                      Column("throughput_high", "95 % CI to", ",.1f"),
                      Column("time_ms", time_title(frame["repeats"], "ms"), ",.3f"),
                      Column("repeats", "runs", "d")], required="throughput"))


def framework_figure(models: pd.DataFrame) -> Figure | None:
    """Frameworks side by side where several ran the same model, batch and precision."""
    keys = ["model", "phase", "precision", "batch_size", "mode", "device", "num_gpus", "data"]
    if models.empty or models["framework"].nunique() < 2:
        return None
    counts = models.groupby(keys)["framework"].transform("nunique")
    frame = models[counts >= 2]
    if frame.empty:
        return None
    frame, panels, encoding = by_bars(frame, "framework")
    frameworks = ordered(frame["framework"])
    base = alt.Chart().encode(
        x=alt.X("batch_size:O", title="batch size", axis=alt.Axis(labelAngle=0), scale=BAND),
        xOffset=alt.XOffset("framework:N", sort=frameworks),
        y=alt.Y("throughput:Q", title=f"throughput ({throughput_unit(frame)})"),
        color=alt.Color("framework:N", scale=colour_scale(frameworks, FRAMEWORK_COLOURS)),
        tooltip=[alt.Tooltip("framework:N"),
                 *model_tooltip(frame, [alt.Tooltip("throughput:Q", format=",.1f")],
                                encoding)],
    )
    layered = filtered(alt.layer(base.mark_bar(cornerRadiusEnd=2), data=frame), None,
                       encoding).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    chart = faceted(layered, panels, encoding, frame).resolve_scale(y="independent")
    return Figure("framework-comparison", "Frameworks side by side",
                  "The same model, phase, precision and batch size run by each framework."
                  + encoding.note(), styled(chart), shows=encoding.defaults,
                  table=NumbersTable([*axis_columns(encoding), Column("framework", "framework"),
                                      Column("throughput", "throughput", ",.1f")],
                                     required="throughput"))


def by_bars(frame: pd.DataFrame, colour: str, panels: tuple[str, ...] = ("model", "phase",
                                                                          "precision")
            ) -> tuple[pd.DataFrame, list[str], Encoding]:
    """Bar charts' rows with their panel order and the places of the other axes: more
    panels while they stay few, then dropdowns (report.encodings)."""
    encoding = encodings.choose(frame, panels=panels, colour=colour, lines=False,
                                candidates=[a for a in encodings.model_axes() if a != colour])
    frame, order = with_panel(frame, encoding.panels)
    return frame, order, encoding


def identity(models: pd.DataFrame) -> list[str]:
    """The columns that tell one model cell from another (its axes)."""
    return [k for k in ("model", "phase", "precision", "batch_size", *encodings.model_axes())
            if k in models]


def ratio_frame(models: pd.DataFrame, axis: str, baseline: str) -> pd.DataFrame:
    """Throughput of each value of ``axis`` over ``baseline``'s median throughput for the
    same cell otherwise (the baseline's throughput in ``<baseline>_throughput``)."""
    keys = [k for k in identity(models) if k != axis]
    reference = f"{baseline}_throughput"
    # One text key per cell otherwise: nulls (an axis a framework lacks) match each other,
    # and a column of booleans with nulls compares as it reads.
    models = models.assign(_same=joined(models[keys], "\x1f"))
    base = models[models[axis] == baseline].groupby("_same")["throughput"].median()
    base.name = reference
    merged = models[models[axis] != baseline].join(base, on="_same", how="inner")
    merged = merged[merged[reference] > 0].drop(columns="_same")
    merged["speedup"] = merged["throughput"] / merged[reference]
    merged["label"] = merged["speedup"].map(lambda s: f"{s:.2f}×")
    return merged.reset_index(drop=True)


def speedup_frame(models: pd.DataFrame) -> pd.DataFrame:
    """Throughput of each precision over float32 of the same cell otherwise."""
    return ratio_frame(models, "precision", "float32")


def speedup_bars(frame: pd.DataFrame, panels: list[str], axis: str, baseline: str,
                 colour: alt.Color, tooltip: list[alt.Tooltip],
                 encoding: Encoding) -> alt.FacetChart:
    """Bars of ``speedup`` (a ``ratio_frame``) per batch size from parity (1×) on a log
    scale, one per value of ``axis`` in the legend's order, the ratio written beyond each
    bar's end where the labels fit. Log: 2× faster and 2× slower are bars of one length
    (on a linear axis from 0 every slowdown was squashed under the first tick)."""
    order = ordered(frame[axis], encodings.PREFERRED.get(axis, ()))
    base = alt.Chart().encode(
        x=alt.X("batch_size:O", title="batch size", axis=alt.Axis(labelAngle=0), scale=BAND),
        xOffset=alt.XOffset(f"{axis}:N", sort=order),
    )
    y = alt.Y("speedup:Q", title=f"speed-up over {baseline} (×, log)",
              scale=alt.Scale(type="log"), axis=alt.Axis(format="~g"))
    bars = base.mark_bar().encode(y=y, y2=alt.datum(1), color=colour, tooltip=tooltip)
    parity = alt.Chart().mark_rule(color=MUTED, strokeDash=[4, 3]).encode(y=alt.datum(1))
    layers = [bars, parity]
    if frame["batch_size"].nunique() * len(order) <= 8:  # labels only where they fit
        # beyond the bar's end, away from the parity line: above a speed-up, below a slowdown
        for faster, dy in ((True, -6), (False, 10)):
            chosen = alt.datum.speedup >= 1 if faster else alt.datum.speedup < 1
            layers.append(base.transform_filter(chosen).mark_text(
                dy=dy, fontSize=9, color=MUTED).encode(y=y, text="label:N"))
    layered = filtered(alt.layer(*layers, data=frame), None, encoding).properties(
        width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return faceted(layered, panels, encoding, frame).resolve_scale(xOffset="independent")


def ratio_table(encoding: Encoding, axis: str, reference: str, title: str) -> NumbersTable:
    return NumbersTable([*axis_columns(encoding), Column(axis, encoding.title(axis)),
                         Column("throughput", "throughput", ",.1f"),
                         Column(reference, title, ",.1f"),
                         Column("speedup", "speed-up (×)", ",.2f")], required="speedup")


def speedup_figure(models: pd.DataFrame) -> Figure | None:
    if models.empty:
        return None
    frame = speedup_frame(models)
    if frame.empty:
        return None
    frame, panels, encoding = by_bars(frame, "precision", ("model", "phase"))
    precisions = ordered(frame["precision"])
    colour = alt.Color("precision:N", scale=precision_scale(precisions))
    tips = model_tooltip(frame, [alt.Tooltip("label:N", title="speed-up"),
                                 alt.Tooltip("throughput:Q", format=",.1f"),
                                 alt.Tooltip("float32_throughput:Q", format=",.1f",
                                             title="float32 throughput")], encoding)
    chart = speedup_bars(frame, panels, "precision", "float32", colour, tips, encoding)
    return Figure("precision-speedup", "Speed-up over float32",
                  "Throughput of each precision divided by float32 throughput for the same "
                  "cell otherwise (model, phase, batch size, device, framework...); the dashed "
                  "line is parity." + encoding.note(), styled(chart), shows=encoding.defaults,
                  table=ratio_table(encoding, "precision", "float32_throughput",
                                    "float32 throughput"))


def baseline_system(models: pd.DataFrame, chosen: str | None = None) -> str | None:
    """The system others are divided by: ``chosen`` (the config's baseline_system) where
    it has model cells, else the one with the most, ties broken by name; None with fewer
    than two systems."""
    systems = models["system"][models["system"] != ""] if not models.empty else models
    if len(systems) == 0 or systems.nunique() < 2:
        return None
    if chosen is not None and chosen in set(systems):
        return chosen
    counts = systems.value_counts()
    return sorted(counts.index, key=lambda s: (-counts[s], s))[0]


def systems_figure(models: pd.DataFrame, chosen: str | None = None) -> Figure | None:
    """Throughput of each system over the baseline system for the same cell otherwise."""
    baseline = baseline_system(models, chosen)
    if baseline is None:
        return None
    frame = ratio_frame(models, "system", baseline)
    if frame.empty:
        return None
    frame, panels, encoding = by_bars(frame, "system")
    colour = alt.Color("system:N", sort=ordered(frame["system"]),
                       scale=alt.Scale(scheme="tableau10"))
    reference = f"{baseline}_throughput"
    tips = model_tooltip(frame, [alt.Tooltip("label:N", title="speed-up"),
                                 alt.Tooltip("throughput:Q", format=",.1f"),
                                 alt.Tooltip(f"{reference}:Q", format=",.1f",
                                             title=f"{baseline} throughput")], encoding)
    chart = speedup_bars(frame, panels, "system", baseline, colour, tips, encoding)
    # A baseline asked for and not found (a misspelled label, a system not run yet) is said
    # where the chart is read, not only in the log.
    instead = (f" The baseline asked for, {chosen}, has no model cells here: {baseline} has "
               "the most." if chosen is not None and chosen != baseline else "")
    return Figure("system-speedup", f"Speed-up over {baseline}",
                  f"Throughput on each system divided by the throughput on {baseline} for the "
                  "same model, phase, precision, batch size, device and framework; the dashed "
                  "line is parity. Whether a difference is real: dlbench compare "
                  "(docs/compare.md)." + instead + encoding.note(), styled(chart),
                  shows=encoding.defaults,
                  table=ratio_table(encoding, "system", reference, f"{baseline} throughput"))


# How the throughput chart shows the systems, by the place its encoding gave the axis.
SYSTEM_PLACES = {"series": "one line style per system",
                 "filters": "one system at a time, chosen above that chart",
                 "panels": "a panel per system"}


def systems_intro(models: pd.DataFrame) -> str:
    """The systems section's intro: where the throughput chart above draws the systems,
    read from the encoding that chart uses (by_batch), so that the two cannot disagree."""
    text = "The same cells on each system"
    encoding = by_batch(models)[2] if not models.empty else None
    for place, words in SYSTEM_PLACES.items():
        if encoding is not None and "system" in getattr(encoding, place):
            return f"{text} (their throughput is in the throughput chart above, {words})."
    return f"{text}."


def compile_speedup_frame(models: pd.DataFrame) -> pd.DataFrame:
    """Throughput of each execution mode over eager of the same model, phase, precision,
    batch, device and framework."""
    return ratio_frame(models, "mode", EAGER)


def compile_speedup_figure(models: pd.DataFrame) -> Figure | None:
    if models.empty or models["mode"].nunique() < 2:
        return None
    frame = compile_speedup_frame(models)
    if frame.empty:
        return None
    frame, panels, encoding = by_bars(frame, "mode")
    colour = alt.Color("mode:N", title="execution mode", sort=ordered(frame["mode"]),
                       scale=alt.Scale(scheme="tableau10"))
    tips = model_tooltip(frame, [alt.Tooltip("mode:N", title="execution mode"),
                                 alt.Tooltip("label:N", title="speed-up"),
                                 alt.Tooltip("throughput:Q", format=",.1f"),
                                 alt.Tooltip("eager_throughput:Q", format=",.1f",
                                             title="eager throughput"),
                                 alt.Tooltip("compile_time_s:Q", format=",.1f",
                                             title=runs_title(frame["repeats"],
                                                              "compile time (s)"))],
                 encoding)
    chart = speedup_bars(frame, panels, "mode", EAGER, colour, tips, encoding)
    return Figure("compile-speedup", "Speed-up over eager",
                  "Throughput of each execution mode (torch.compile mode, CUDA graphs, "
                  "channels_last) divided by eager throughput for the same model, phase, "
                  "precision, batch size, device and framework; compile time, measured apart "
                  "from the iterations, is in the tooltip. The dashed line is parity."
                  + encoding.note(), styled(chart), shows=encoding.defaults,
                  table=ratio_table(encoding, "mode", "eager_throughput", "eager throughput"))


def tflops_figure(models: pd.DataFrame) -> Figure | None:
    if models.empty or models["tflops"].isna().all():
        return None
    frame, panels, encoding = by_batch(models)
    tips = model_tooltip(frame, [alt.Tooltip("tflops:Q", title="TFLOP/s", format=SIGNIFICANT_TIP),
                            alt.Tooltip("throughput:Q", format=",.1f")], encoding)
    colour = alt.Color("precision:N", scale=precision_scale(list(frame["precision"].unique())))
    chart = lines_by_batch(frame, y="tflops", y_title="achieved TFLOP/s", colour=colour,
                           tooltip=tips, panels=panels, encoding=encoding,
                           where="isValid(datum.tflops)")
    return Figure("model-tflops", "TFLOP/s against batch size",
                  "Floating-point work per iteration divided by the median iteration time"
                  + (" (the mean of each cell's runs' medians)"
                     if int(frame["repeats"].max()) > 1 else "") + "." + encoding.note(),
                  styled(chart), shows=encoding.defaults,
                  table=NumbersTable([*axis_columns(encoding),
                                      Column("tflops", "TFLOP/s", SIGNIFICANT_COLUMN)],
                                     required="tflops"))


def loader_figure(frame: pd.DataFrame) -> Figure | None:
    """Input pipeline alone: samples/s against batch size per loader thread count."""
    rows = measured(frame, "loader")
    rows = rows[rows["batch_size"].notna()] if not rows.empty else rows
    if rows.empty:
        return None
    threads = rows["num_loader_threads"]
    data = pd.DataFrame({
        "framework": rows["framework"].fillna("?"), "data": rows["data"].fillna("?"),
        "batch_size": rows["batch_size"].astype(int),
        # At the cell's time across its runs, as a model's throughput is (not its last run's).
        "throughput": numeric(rows, "cell_throughput").fillna(numeric(rows, "throughput")),
        "unit": rows["throughput_unit"].fillna(""),
        "threads": threads.map(lambda n: encodings.value_label("num_loader_threads", n)
                               if pd.notna(n) else "default"),
    })
    several = several_runs(numeric(rows, "repeats"))
    data, panels = with_panel(data, ["framework", "data"])
    colour = alt.Color("threads:N", title="loader threads", scale=alt.Scale(scheme="tableau10"))
    chart = lines_by_batch(
        data, y="throughput", y_title=f"throughput ({throughput_unit(data)})", colour=colour,
        tooltip=[alt.Tooltip("data:N"), alt.Tooltip("threads:N"),
                 alt.Tooltip("batch_size:Q", title="batch size"),
                 alt.Tooltip("throughput:Q", format=",.1f")],
        panels=panels, series="threads")
    return Figure("loader-throughput", "Input pipeline throughput",
                  "The data loader alone, without a model"
                  + (" (at the mean of each cell's runs' medians)" if several else "") + ".",
                  styled(chart), table=NumbersTable([
                      Column("framework", "framework"), Column("data", "data"),
                      Column("threads", "loader threads"),
                      Column("batch_size", "batch size", "d"),
                      Column("throughput", f"throughput ({throughput_unit(data)})", ",.1f")],
                      required="throughput"))


# What tells one real-data cell's input from another's (the input-wait chart's bars, its
# "input"): the dataset, its storage format and the loader threads always, the framework
# and shuffling where they vary.
INPUT_AXES = ("framework", "data", "format", "num_loader_threads", "data_shuffle")
INPUT_ALWAYS = ("data", "format", "num_loader_threads")
# From this share of waiting on, a bar's throughput is written inside it (past its end it
# would leave the panel).
LABEL_INSIDE = 0.6
BAR_HEIGHT = 20  # pixels per bar of the input-wait chart
WAIT_SHARE_TITLE = "input wait, % of measured time"


def storage_format(rows: pd.DataFrame) -> pd.Series:
    """The storage format each cell's runner read (its framework's ``dataset_format``:
    caffe_lmdb, image_folder, recordio); its data_backend where this dlbench lacks the
    framework (a plug-in not installed here)."""
    columns = [a for a in encodings.model_axes() if a in rows]
    params = rows[columns].astype(object).where(rows[columns].notna(), None)
    return pd.Series([_dataset_format(p) for p in params.to_dict("records")],
                     index=rows.index, dtype=object)


def _dataset_format(params: dict) -> str | None:
    try:
        dataset_format = frameworks.get(str(params.get("framework"))).dataset_format
    except frameworks.UnknownFramework:
        dataset_format = None
    return dataset_format(params) if dataset_format is not None else params.get("data_backend")


def input_frame(models: pd.DataFrame) -> pd.DataFrame:
    """The model cells that read real data, with the share of their measured time spent
    waiting (``wait_share``), the storage format they read (``format``) and their input in
    words (``source``). A synthetic cell is none, though PyTorch's records its wait for
    the next ready-made batch: no input pipeline ran."""
    if models.empty or "data_wait_s" not in models:
        return models.iloc[:0]
    measured_s = models["data_wait_s"] + models["compute_s"]
    rows = models[models["data"].ne("synthetic") & models["data_wait_s"].notna()
                  & measured_s.gt(0)]
    if rows.empty:
        return rows
    rows = rows.assign(wait_share=rows["data_wait_s"] / measured_s[rows.index],
                       format=storage_format(rows))
    shown = [a for a in INPUT_AXES if a in rows and (a in INPUT_ALWAYS or varying(rows, [a]))]
    return rows.assign(source=encodings.labels(rows, shown))


def input_encoding(frame: pd.DataFrame) -> Encoding:
    """Where the input-wait chart puts the axes it does not draw: a panel per model and
    phase, more panels or dropdowns for precision, batch size and the other axes (the
    input's own axes are its bars, the system their colour)."""
    others = [a for a in encodings.model_axes() if a not in (*INPUT_AXES, "data_backend")]
    return encodings.choose(frame, panels=("model", "phase"), colour="system", lines=False,
                            candidates=["precision", "batch_size", *others])


def _several_processes(frame: pd.DataFrame) -> bool:
    """Whether some cell ran several processes (data-parallel: one per GPU, or num_gpus
    of them on a CPU, on each node)."""
    processes = frame["num_gpus"].clip(lower=1) * numeric(frame, "num_nodes").fillna(1)
    return bool(processes.gt(1).any())


def _input_caption(frame: pd.DataFrame, unit: str, encoding: Encoding) -> str:
    systems = " and system" if frame["system"].nunique() > 1 else ""
    text = ("Share of each real-data model cell's measured time spent waiting for its next "
            "input batch (the rest is its step, the device synchronised): a long bar is a "
            "model held back by its input pipeline (more loader threads or another storage "
            "format may help), a short one is bound by its compute. A bar per input "
            f"(dataset, storage format, loader threads){systems}; the number at each bar "
            f"is the cell's throughput ({unit}).")
    if _several_processes(frame):
        text += (" A cell of several processes (data-parallel) shows the split of the "
                 "process that waited longest for input: a rank starved of input holds the "
                 "others in the step's collectives, time their own split counts as compute.")
    if several_runs(frame["repeats"]):
        text += (" A cell run more than once shows its runs' mean wait over their mean "
                 "measured time.")
    return text + encoding.note()


def _input_columns(frame: pd.DataFrame, encoding: Encoding, unit: str) -> list[Column]:
    """The input-wait chart's numbers: what tells its bars apart, then its figures."""
    repeats = frame["repeats"]
    placed = encoding.placed(("model", "phase", "precision", "batch_size"), panels=True)
    system = [Column("system", "system")] if frame["system"].nunique() > 1 else []
    return [Column("model", "model"), Column("phase", "phase"),
            *[Column(a, encoding.title(a)) for a in placed], *system,
            Column("source", "input"), Column("precision", "precision"),
            Column("batch_size", "batch size", "d"),
            Column("wait_share", WAIT_SHARE_TITLE, ".1%"),
            Column("data_wait_s", runs_title(repeats, "input wait (s)"), ",.3f"),
            Column("compute_s", runs_title(repeats, "compute (s)"), ",.3f"),
            Column("throughput", f"throughput ({unit})", ",.1f")]


def input_wait_figure(models: pd.DataFrame) -> Figure | None:
    """How much of each real-data model cell's measured time went to waiting for input,
    a bar per input (dataset, storage format, loader settings) and system, its throughput
    written at it; None without real-data cells."""
    frame = input_frame(models)
    if frame.empty:
        return None
    encoding = input_encoding(frame)
    frame, panels = with_panel(frame, encoding.panels)
    systems = ordered(frame["system"])
    unit = throughput_unit(frame)
    repeats = frame["repeats"]
    tips = model_tooltip(frame, [
        *([alt.Tooltip("system:N")] if len(systems) > 1 else []),
        alt.Tooltip("source:N", title="input"),
        alt.Tooltip("wait_share:Q", title=WAIT_SHARE_TITLE, format=".1%"),
        alt.Tooltip("data_wait_s:Q", title=runs_title(repeats, "input wait (s)"), format=",.3f"),
        alt.Tooltip("compute_s:Q", title=runs_title(repeats, "compute (s)"), format=",.3f"),
        alt.Tooltip("throughput:Q", title=f"throughput ({unit})", format=",.1f")], encoding)
    base = alt.Chart().encode(
        y=alt.Y("source:N", title=None, axis=alt.Axis(labelLimit=LEGEND_LIMIT),
                sort=in_order(frame, [a for a in INPUT_AXES if a in frame], "source")),
        yOffset=alt.YOffset("system:N", sort=systems),
        x=alt.X("wait_share:Q", title=WAIT_SHARE_TITLE,
                scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        tooltip=tips)
    bars = base.mark_bar(cornerRadiusEnd=2).encode(color=alt.Color(
        "system:N", sort=systems, scale=alt.Scale(scheme="tableau10"),
        legend=alt.Legend(title="system") if len(systems) > 1 else None))
    number = base.encode(text=alt.Text("throughput:Q", format=SIGNIFICANT_TIP))
    layers = [bars,
              number.transform_filter(f"datum.wait_share < {LABEL_INSIDE}").mark_text(
                  align="left", dx=4, fontSize=9, color=MUTED),
              number.transform_filter(f"datum.wait_share >= {LABEL_INSIDE}").mark_text(
                  align="right", dx=-4, fontSize=9, color="white")]
    most = int(frame.groupby("panel")["source"].nunique().max())
    layered = filtered(alt.layer(*layers, data=frame), None, encoding).properties(
        width=PANEL_WIDTH, height=BAR_HEIGHT * most * len(systems))
    # Each panel its own inputs; the offset's scale with them, else Vega draws each bar
    # one pixel high.
    chart = faceted(layered, panels, encoding, frame).resolve_scale(y="independent",
                                                                    yOffset="independent")
    return Figure("input-wait", "Time waiting for input",
                  _input_caption(frame, unit, encoding), styled(chart),
                  shows=encoding.defaults,
                  table=NumbersTable(_input_columns(frame, encoding, unit),
                                     required="wait_share"))
