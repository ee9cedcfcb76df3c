"""Scaling across GPUs (DLBS's weak and strong scaling): for model cells that differ only in
their GPUs (and the batch), speed-up S(n) = X(n) / X(1) and efficiency E(n) = X(n) / (n X(1)),
X being throughput in items per second (samples, tokens, shots: the cells' unit; at the
mean of the runs' median times where a cell has repeats) and n the cell's GPUs on all its
nodes (num_gpus x num_nodes), so that a study scaling from one node to several is one
series. Where two cells of a series have the same n on different node counts (8 GPUs on
one node, 4 on each of two), the line takes the one on fewer nodes; the table lists both.

On a CPU, n counts data-parallel processes that share the one CPU (dlbench.efficiency:
adding them adds no device), so there is no perfect scaling to measure them against: their
series show the speed-up alone, and their efficiency is left empty.

- weak scaling: the per-device batch stays fixed as GPUs are added (the global batch grows);
- strong scaling: the global batch (per-device batch x num_gpus) stays fixed, so each GPU
  gets a smaller share.
A series needs its 1-GPU cell at the same per-device (weak) or global (strong) batch."""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.efficiency import device_per_process, devices
from dlbench.report import encodings
from dlbench.report.data import joined, measured, varying
from dlbench.report.model_charts import throughput_unit
from dlbench.report.style import Column, Figure, NumbersTable, counted, styled

# What a series holds fixed: every axis column but the two that scaling varies.
VARIED = ("num_gpus", "num_nodes", "batch_size")
KINDS = {"weak": "batch_size", "strong": "global_batch"}  # scaling -> the batch held fixed


def _series_keys(frame: pd.DataFrame) -> list[str]:
    keys = ["system", *[name for name, _ in axes.columns() if name not in VARIED],
            "model_opts", "name", "pass"]
    return [k for k in keys if k in frame]


def scaling_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (series, scaling kind, num_gpus) with speed-up and efficiency."""
    rows = measured(frame, "model")
    if rows.empty:
        return pd.DataFrame()
    nodes = (rows["num_nodes"].fillna(1) if "num_nodes" in rows else pd.Series(1, rows.index))
    # An MXNet CPU cell's num_gpus counts contexts of one process on one thread pool
    # (docs/mxnet.md): more of them add neither devices nor processes, so no scaling.
    contexts = (rows["framework"].eq("mxnet") & rows["device"].eq("cpu") & nodes.eq(1))
    rows, nodes = rows[~contexts], nodes[~contexts]
    if rows.empty:
        return pd.DataFrame()
    # The one rule of dlbench.efficiency: GPUs add devices, a CPU's processes share one.
    cells = rows.reindex(columns=["device", "num_gpus", "num_nodes"]).to_dict("records")
    rows = rows.assign(per_device=[device_per_process(c) for c in cells],
                       devices=[devices(c) for c in cells])
    # n: the cell's GPUs (or processes) on all its nodes (results from before num_nodes:
    # one node).
    rows = rows.assign(num_nodes=nodes.astype(int), num_gpus=rows["num_gpus"] * nodes)
    if rows["num_gpus"].nunique() < 2:
        return pd.DataFrame()
    rows = rows.assign(x=rows["cell_throughput"].fillna(rows["throughput"]).astype(float),
                       global_batch=rows["batch_size"] * rows["num_gpus"],
                       unit=rows["throughput_unit"].fillna(""))
    keys = _series_keys(rows)
    rows[keys] = rows[keys].astype(object).where(rows[keys].notna(), "")  # nulls group together
    # A series is named by every fixed axis that differs between series (so that no two
    # series share a name, and a line never joins two of them), and the batch held fixed.
    named = varying(rows, tuple(keys)) or ["model"]
    parts = []
    for scaling, fixed in KINDS.items():
        group = [*keys, fixed]
        several = rows.groupby(group, sort=False)["num_gpus"].transform("nunique") > 1
        base = (rows[rows["num_gpus"] == 1].drop_duplicates(group)[[*group, "x"]]
                .rename(columns={"x": "x1"}))
        part = rows[several].merge(base, on=group)
        if part.empty:
            continue
        # One point per n in a line: the cell on the fewest nodes (the others: the table).
        part = part.assign(on_line=~part.sort_values("num_nodes", kind="stable")
                           .duplicated([*group, "num_gpus"]).reindex(part.index))
        label = joined(part[named], skip_empty=True)
        part = part.assign(scaling=scaling, fixed_batch=part[fixed].astype(int),
                           series=label + f" · {fixed.replace('_', ' ')} "
                           + part[fixed].astype(int).astype(str))
        parts.append(part)
    if not parts:
        return pd.DataFrame()
    data = pd.concat(parts, ignore_index=True)
    data["series_id"] = pd.factorize(data["scaling"] + "\x1f" + data["series"])[0]
    data = data.assign(num_gpus=data["num_gpus"].astype(int),
                       batch_size=data["batch_size"].astype(int),
                       global_batch=data["global_batch"].astype(int), throughput=data["x"],
                       speedup=data["x"] / data["x1"],
                       # none where the processes share one CPU: no perfect scaling to match
                       efficiency=(data["x"] / (data["devices"] * data["x1"]))
                       .where(data["per_device"]))
    others = [a for a in encodings.model_axes() if a in data and a not in ("system", "num_gpus")]
    others = [a for a in others if a != "num_nodes"]
    columns = ["scaling", "series", "series_id", "system", "model", "precision", "phase", "num_gpus",
               "num_nodes", "batch_size", "global_batch", "fixed_batch", "throughput", "speedup",
               "efficiency", "on_line", "unit", "per_device", "devices", *others]
    return data[columns].sort_values(["scaling", "series", "num_gpus"], kind="stable",
                                     ignore_index=True)


# Axes a scaling series may differ in, besides the scaling kind and the batch held fixed.
# The device needs no place of its own: a CPU's series are drawn apart (their measure).
def _candidates(data: pd.DataFrame) -> list[str]:
    return ["model", "phase", "precision",
            *[a for a in encodings.model_axes()
              if a in data and a not in ("num_gpus", "num_nodes", "device")]]


# What a series is drawn in: its efficiency where each process has a GPU, its speed-up
# where the processes share one CPU (no perfect scaling to hold them to). Row headers when
# a chart has both; the y axis's title when it has one.
MEASURES = {True: ("efficiency (GPUs; 1 = perfect)", "efficiency X(n) / (n X(1))"),
            False: ("speed-up (processes sharing one CPU)", "speed-up X(n) / X(1)")}
X_TITLES = {True: "GPUs (on all nodes)", False: "processes (sharing one CPU)"}


def _kinds(data: pd.DataFrame) -> list[bool]:
    """Whether the chart has GPU series (True) and series of processes on a CPU (False)."""
    return [k for k in (True, False) if k in set(data["per_device"])]


def _caption(data: pd.DataFrame, kinds: list[bool]) -> str:
    each = counted(data["device"])[0]
    text = (f"Weak scaling keeps the batch per {each}, strong scaling the global batch; "
            f"colour: the batch held fixed (per {each} in weak, global in strong).")
    if True in kinds:
        text += " Efficiency on GPUs: 1.0 (dashed) is perfect scaling."
    if False in kinds:
        text += (" The processes of a CPU cell share its cores (one device, as "
                 "dlbench.efficiency counts it): their series show the speed-up over one "
                 "process, X(n) / X(1), with no perfect-scaling line.")
    return text


def _title(kinds: list[bool]) -> str:
    if kinds == [True]:
        return "Scaling efficiency across GPUs"
    if kinds == [False]:
        return "Speed-up across processes sharing one CPU"
    return "Scaling across GPUs, and across processes sharing one CPU"


def _lines(base: alt.Chart, kinds: list[bool]) -> alt.LayerChart:
    """Each series' measure on y, and, where a series is of GPUs, perfect scaling (1.0)."""
    title = MEASURES[kinds[0]][1] if len(kinds) == 1 else None  # else: the row headers
    axis = alt.Axis(format="%") if kinds == [True] else alt.Axis()
    lines = base.transform_filter(alt.datum.on_line).mark_line(point=True).encode(
        y=alt.Y("y:Q", title=title, axis=axis, scale=alt.Scale(domainMin=0)),
        order="num_gpus:Q")
    layers = [lines]
    if True in kinds:
        layers.append(alt.Chart().transform_filter(alt.datum.per_device)
                      .mark_rule(strokeDash=[4, 3], color="#9aa5b1").encode(y=alt.datum(1.0)))
    return alt.layer(*layers)


def scaling_figure(frame: pd.DataFrame) -> Figure | None:
    data = scaling_frame(frame)
    if data.empty:
        return None
    kinds = _kinds(data)
    data = data.assign(
        measure=data["per_device"].map(lambda k: MEASURES[k][0]),
        y=data["efficiency"].where(data["per_device"], data["speedup"]))
    encoding = encodings.choose(data, panels=("scaling",), colour="fixed_batch",
                                candidates=_candidates(data))
    gpus = sorted(data["num_gpus"].unique())
    each, counts = counted(data["device"])
    placed = encoding.placed()
    dash = {}
    if encoding.series:
        data = data.assign(style=joined(data[encoding.series]))
        dash = {"strokeDash": alt.StrokeDash(
            "style:N", title=encoding.series_title())}
    efficiency_tip = [alt.Tooltip("efficiency:Q", format=".0%")] if True in kinds else []
    base = alt.Chart().encode(
        x=alt.X("num_gpus:Q", title=" or ".join(X_TITLES[k] for k in kinds),
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=[int(g) for g in gpus], format="d")),
        color=alt.Color("fixed_batch:O", title="batch held fixed",
                        scale=alt.Scale(scheme="viridis"),
                        legend=alt.Legend(labelLimit=320)),
        # A line per series: its number is enough (its name, long, is in the tooltip's axes).
        detail="series_id:N",
        tooltip=["scaling:N", *[alt.Tooltip(f"{a}:N", title=encoding.title(a))
                                            for a in placed],
                 alt.Tooltip("num_gpus:Q", title=counts), "num_nodes:Q", "batch_size:Q",
                 "global_batch:Q", alt.Tooltip("throughput:Q", format=",.1f"),
                 alt.Tooltip("speedup:Q", format=".2f"), *efficiency_tip], **dash)
    layered = _lines(base, kinds)
    if encoding.filters:
        layered = layered.transform_filter(encoding.filter_expression())
    rows = {}
    if len(kinds) > 1:  # GPUs' efficiency above CPU processes' speed-up, each its own y
        rows = {"row": alt.Row("measure:N", title=None,
                               sort=[MEASURES[k][0] for k in kinds])}
    chart = layered.properties(width=300, height=220).facet(
        column=alt.Column("scaling:N", title=None, sort=list(KINDS)), data=data, **rows)
    if rows:
        chart = chart.resolve_scale(y="independent")
    if encoding.filters:
        chart = chart.add_params(*encoding.params(data))
    efficiency_column = [Column("efficiency", "efficiency", ".0%")] if True in kinds else []
    numbers = NumbersTable([
        Column("scaling", "scaling"),
        *[Column(a, encoding.title(a)) for a in placed],
        *([Column("device", "device")] if len(kinds) > 1 else []),
        Column("num_gpus", counts, "d"), Column("num_nodes", "nodes", "d"),
        Column("batch_size", f"batch per {each}", "d"),
        Column("global_batch", "global batch", "d"),
        Column("throughput", throughput_unit(data), ",.1f"), Column("speedup", "speed-up", ".2f"),
        *efficiency_column], required="speedup")
    return Figure("scaling", _title(kinds), _caption(data, kinds) + encoding.note(),
                  styled(chart), shows=encoding.defaults, table=numbers)
