"""Charts of operator cells: time per operator input, TFLOP/s and GB/s against work size."""

from __future__ import annotations

import json
from pathlib import PurePath

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.report.data import (
    at_cell_time,
    cell_time,
    joined,
    measured,
    numeric,
    ordered,
    runs_title,
    time_title,
    varying,
)
from dlbench.report.style import (
    PASS_COLOURS,
    SIGNIFICANT_COLUMN,
    SIGNIFICANT_TIP,
    Column,
    Figure,
    NumbersTable,
    colour_scale,
    styled,
)

# The axis with its own place in these charts: the op config (panels). Not backward: a
# cell with backward on times the forward pass too, so an input's forward is measured by
# both cells and only the variant tells the two apart.
OP_ROLES = ("op_config",)
# Axes whose values read alone in a label ("pytorch · gpu"); others read with their name
# ("compile default", "cuda_l2_cache off", "backward on").
SELF_NAMING = ("system", "framework", "device", "exec_mode")
# The rate charts' legend of cells: every axis that varies among them, so wider than the
# report's usual legend (a chart is 400 px wide, the page has room beside it).
CELL_LEGEND_LIMIT = 560


def op_variant_axes() -> list[str]:
    """What tells two measurements of one operator input apart: the system, then every
    operator-cell axis of the axis table with a column in the table, but the charts' roles
    (a new axis is told apart without an edit here)."""
    return ["system", *(a.name for a in axes.of_kind("ops")
                        if a.column and a.name not in OP_ROLES)]


def _variant_word(axis: str, value: object) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, bool) or pd.api.types.is_bool(value):
        value = "on" if value else "off"
    return str(value) if axis in SELF_NAMING else f"{axis} {value}"


def op_variants(rows: pd.DataFrame) -> pd.Series:
    """Each operator row's variant: the values of op_variant_axes() that vary among
    ``rows``, in words ("compile default · backward on"); empty where none varies."""
    variant_axes = varying(rows, [a for a in op_variant_axes() if a in rows])
    if not variant_axes:
        return pd.Series("", index=rows.index, dtype=object)
    labels = pd.DataFrame({axis: rows[axis].map(lambda v, axis=axis: _variant_word(axis, v))
                           for axis in variant_axes}, index=rows.index)
    return joined(labels, skip_empty=True)


def _input_label(op_name: object, name: object) -> str:
    name = str(name)
    if isinstance(op_name, str) and op_name and op_name not in name:
        return f"{op_name} {name}"
    return name


def _argument(spec: object) -> str:
    """One argument spec of an operator input (dlbench.ops.grammar) in words: a tensor as
    its dtype and shape (``float[128, 256]``), a list or tuple as its items, a scalar as its
    value, a random one as its range."""
    if not isinstance(spec, dict):
        return "?"
    kind = spec.get("type")
    if kind == "tensor":
        shape = spec.get("shape")
        dims = ", ".join(str(d) for d in shape) if isinstance(shape, list) else "?"
        return f"{spec.get('dtype', '?')}[{dims}]"
    if kind in ("genericlist", "tuple"):
        items = spec.get("value")
        inner = ", ".join(_argument(i) for i in items) if isinstance(items, list) else "?"
        return f"[{inner}]" if kind == "genericlist" else f"({inner})"
    if kind == "none":
        return "None"
    if "value" in spec:
        return str(spec["value"])
    if isinstance(spec.get("value_range"), list):
        return f"{kind} in [{', '.join(str(v) for v in spec['value_range'])}]"
    return str(kind)


def _arguments(config: object) -> str:
    """A call's ``{"args", "kwargs"}`` in words; empty without any."""
    if not isinstance(config, dict):
        return ""
    args = config.get("args") if isinstance(config.get("args"), list) else []
    kwargs = config.get("kwargs") if isinstance(config.get("kwargs"), dict) else {}
    return ", ".join([_argument(a) for a in args]
                     + [f"{k}={_argument(v)}" for k, v in kwargs.items()])


def input_arguments(extra: object) -> tuple[str, str]:
    """What an operator input is, from its row's ``extra`` (JSON, the input's PARAM
    config): its arguments' dtypes and shapes, and the arguments its module was built with
    (``torch.nn.Conv2d(32, 32, kernel_size=3)``; empty for a function). The input's id
    (``0|0|1``) says only where it stands in the op config."""
    try:
        config = json.loads(extra).get("config") if isinstance(extra, str) and extra else None
    except (ValueError, AttributeError):
        config = None
    if not isinstance(config, dict):
        return "", ""
    return _arguments(config.get("input")), _arguments(config.get("build"))


def config_labels(paths: pd.Series) -> pd.Series:
    """Each op config's label, unique among the configs in ``paths``: its file's stem where
    no other config has that stem, else the shortest trailing part of its path that no
    other config's ends with (``h100/mm`` beside ``a100/mm``: two files of one name are
    two configs); "?" where a row has none."""
    tails = {p: PurePath(p).parts[:-1] + (PurePath(p).stem,)
             for p in pd.unique(paths.dropna()) if isinstance(p, str)}

    def label(path: str) -> str:
        parts = tails[path]
        for k in range(1, len(parts) + 1):
            if sum(other[-k:] == parts[-k:] for other in tails.values()) == 1:
                return str(PurePath(*parts[-k:]))
        return path  # one path written two ways ("/c/mm.json", "c/mm.json"): as given

    labels = {path: label(path) for path in tails}
    return paths.map(lambda p: labels.get(p, "?") if isinstance(p, str) else "?")


def op_frame(frame: pd.DataFrame) -> pd.DataFrame:
    rows = measured(frame, "op")
    if rows.empty:
        return rows
    rows = rows[rows["time_median_s"].notna()]
    arguments = [input_arguments(e) for e in rows.get("extra", pd.Series(None, index=rows.index))]
    out = pd.DataFrame({
        "config": config_labels(rows["op_config"]),
        "op": rows["op_name"].fillna(rows["name"]),
        "input": [_input_label(o, n) for o, n in zip(rows["op_name"], rows["name"], strict=True)],
        "shapes": [a for a, _ in arguments],
        "build": [b for _, b in arguments],
        "pass": rows["pass"].fillna("?"),
        # The cell's time (the mean of its runs' medians) and its rates at it; the spread
        # the mean of the runs' p5s and p95s (data.measured).
        "median_s": cell_time(rows),
        "repeats": numeric(rows, "repeats").fillna(1).astype(int),
        "p5_s": rows["time_p5_s"].astype(float),
        "p95_s": rows["time_p95_s"].astype(float),
        "flops": rows["flops_per_iteration"].astype(float),
        "bytes": rows["bytes_per_iteration"].astype(float),
        "tflops": at_cell_time(rows, "tflops"),
        "gbps": at_cell_time(rows, "gbps"),
    })
    rows = rows.reset_index(drop=True)
    out = out.reset_index(drop=True)
    out["variant"] = op_variants(rows)
    # Within one op config (a panel of the time chart) only what varies there: the axes
    # common to a panel made its row labels too long to show the one that differs.
    out["panel_variant"] = pd.concat(
        [op_variants(group) for _, group in rows.groupby(out["config"], sort=False)]
    ).reindex(out.index)
    return out


def _input_fields(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The fields that say what each input is beside its id (field, title): its arguments,
    and its module's where some input is a module's."""
    fields = [("input", "input")]
    if frame["shapes"].ne("").any():
        fields.append(("shapes", "arguments"))
    if frame["build"].ne("").any():
        fields.append(("build", "module built with"))
    return fields


def _leading_columns(frame: pd.DataFrame) -> list[Column]:
    """A numbers table's columns that tell its rows apart: the op config where there are
    several, the operator, the input, the pass and the cell where cells differ."""
    return [*([Column("config", "op config")] if frame["config"].nunique() > 1 else []),
            Column("op", "operator"), *[Column(f, t) for f, t in _input_fields(frame)],
            Column("pass", "pass"),
            *([Column("variant", "cell")] if frame["variant"].ne("").any() else [])]


def _time_unit(seconds: pd.Series) -> tuple[str, float]:
    typical = seconds.median()
    if typical < 1e-3:
        return "µs", 1e6
    if typical < 1.0:
        return "ms", 1e3
    return "s", 1.0


def _pass_colour(frame: pd.DataFrame) -> alt.Color:
    passes = ordered(frame["pass"], ("forward", "backward"))
    return alt.Color("pass:N", title="pass", scale=colour_scale(passes, PASS_COLOURS))


def _config_panels(chart: alt.LayerChart, frame: pd.DataFrame,
                   **independent: str) -> alt.LayerChart | alt.FacetChart:
    """``chart`` with a panel per op config where there are several, its name above it:
    an input id, or a size, of one config is another input than that of another, so no
    row or line may hold both. ``independent``: the scales each panel has its own of
    (``y="independent"``)."""
    if frame["config"].nunique() <= 1:
        return chart
    panels = chart.facet(row=alt.Row("config:N", title=None, header=alt.Header(
        labelAngle=0, labelAlign="left", labelOrient="top", labelAnchor="start")))
    return panels.resolve_scale(**independent) if independent else panels


def time_figure(ops: pd.DataFrame) -> Figure | None:
    if ops.empty:
        return None
    unit, factor = _time_unit(ops["median_s"])
    frame = ops.assign(median=ops["median_s"] * factor, p5=ops["p5_s"] * factor,
                       p95=ops["p95_s"] * factor)
    frame["row"] = frame["input"] + frame["panel_variant"].map(lambda v: f"  [{v}]" if v else "")
    # The variants of one input next to each other, inputs in the order the config has them.
    first_seen = {name: i for i, name in enumerate(pd.unique(frame["input"]))}
    rows = frame.drop_duplicates("row")
    inputs = list(rows.assign(at=rows["input"].map(first_seen))
                  .sort_values(["at", "panel_variant"], kind="stable")["row"])
    passes = ordered(frame["pass"], ("forward", "backward"))
    base = alt.Chart().encode(
        y=alt.Y("row:N", title=None, sort=inputs, axis=alt.Axis(labelLimit=360),
                scale=alt.Scale(paddingInner=0.35, paddingOuter=0.2)),
        yOffset=alt.YOffset("pass:N", sort=passes),
        color=_pass_colour(frame),
    )
    spread = base.mark_rule(strokeWidth=2.5, opacity=0.6).encode(x="p5:Q", x2="p95:Q")
    several = frame["repeats"].max() > 1
    median = time_title(frame["repeats"], unit)
    points = base.mark_point(filled=True, size=60, opacity=1).encode(
        x=alt.X("median:Q", title=f"time per call ({unit}): "
                + ("mean of the runs' medians, bar from the mean of their p5s to that of "
                   "their p95s" if several else "median, bar from p5 to p95"),
                scale=alt.Scale(type="log", nice=False, padding=14)),
        tooltip=[alt.Tooltip("op:N", title="operator"),
                 *[alt.Tooltip(f"{f}:N", title=t) for f, t in _input_fields(frame)],
                 alt.Tooltip("pass:N"), alt.Tooltip("config:N", title="op config"),
                 alt.Tooltip("variant:N", title="cell"),
                 alt.Tooltip("median:Q", title=median, format=",.3f"),
                 alt.Tooltip("p5:Q", title=runs_title(frame["repeats"], f"p5 ({unit})"),
                             format=",.3f"),
                 alt.Tooltip("p95:Q", title=runs_title(frame["repeats"], f"p95 ({unit})"),
                             format=",.3f")],
    )
    step = 10 * len(passes) + 6
    chart = _config_panels(alt.layer(spread, points, data=frame)
                           .properties(width=520, height=alt.Step(step)), frame, y="independent")
    return Figure("op-time", "Time per operator input",
                  "Median time of one call of each operator input, per pass"
                  + (" (with repeats, the mean of the runs' medians; the bar from the mean "
                     "of the runs' p5s to that of their p95s)" if several else "") + ".",
                  styled(chart),
                  table=NumbersTable([
                      *_leading_columns(frame), Column("median", median, ",.3f"),
                      Column("p5", runs_title(frame["repeats"], f"p5 ({unit})"), ",.3f"),
                      Column("p95", runs_title(frame["repeats"], f"p95 ({unit})"), ",.3f"),
                      Column("repeats", "runs", "d")], required="median"))


def _rate_figure(ops: pd.DataFrame, *, rate: str, work: str, name: str, title: str,
                 rate_title: str, work_title: str, caption: str) -> Figure | None:
    frame = ops[ops[rate].notna() & ops[work].notna()] if not ops.empty else ops
    if frame.empty:
        return None
    base = alt.Chart().encode(
        x=alt.X(f"{work}:Q", title=work_title, axis=alt.Axis(format=".3~s"),
                scale=alt.Scale(type="log", nice=False, padding=14)),
        y=alt.Y(f"{rate}:Q", title=rate_title),
        color=alt.Color("op:N", title="operator", scale=alt.Scale(scheme="tableau10")),
        shape=alt.Shape("pass:N", title="pass", sort=ordered(frame["pass"], ("forward", "backward"))),
        tooltip=[alt.Tooltip("op:N", title="operator"),
                 *[alt.Tooltip(f"{f}:N", title=t) for f, t in _input_fields(frame)],
                 alt.Tooltip("pass:N"), alt.Tooltip("config:N", title="op config"),
                 alt.Tooltip("variant:N", title="cell"),
                 alt.Tooltip(f"{work}:Q", title=work_title, format=".3~s"),
                 alt.Tooltip(f"{rate}:Q", title=rate_title, format=SIGNIFICANT_TIP)],
    )
    lines = base.mark_line(strokeWidth=1.2, opacity=0.5).encode(
        detail=alt.Detail(["config:N", "op:N", "pass:N", "variant:N"]), order=f"{work}:Q")
    if frame["variant"].nunique() > 1:  # which line is which cell's, in the legend too
        lines = lines.encode(strokeDash=alt.StrokeDash("variant:N", title="cell", legend=alt.Legend(
            symbolType="stroke", symbolStrokeWidth=1.6, symbolSize=300,
            labelLimit=CELL_LEGEND_LIMIT)))
    chart = _config_panels(alt.layer(lines, base.mark_point(filled=True, size=70), data=frame)
                           .properties(width=400, height=260), frame)
    return Figure(name, title, caption, styled(chart), table=NumbersTable([
        *_leading_columns(frame), Column(work, work_title, ",d"),
        Column(rate, rate_title, SIGNIFICANT_COLUMN)], required=rate))


def tflops_figure(ops: pd.DataFrame) -> Figure | None:
    return _rate_figure(ops, rate="tflops", work="flops", name="op-tflops",
                        title="Operator TFLOP/s against work per call", rate_title="TFLOP/s",
                        work_title="FLOP per call",
                        caption="Achieved floating-point rate of each operator input.")


def gbps_figure(ops: pd.DataFrame) -> Figure | None:
    return _rate_figure(ops, rate="gbps", work="bytes", name="op-gbps",
                        title="Operator GB/s against bytes moved per call", rate_title="GB/s",
                        work_title="bytes per call",
                        caption="Achieved memory bandwidth of each operator input.")
