"""Scaling across GPUs (DLBS's weak and strong scaling): for model cells that differ only in
their GPUs (and the batch), speed-up S(n) = X(n) / X(1) and efficiency E(n) = X(n) / (n X(1)),
X being throughput in items per second (samples, tokens, shots: the cells' unit; at the
mean of the runs' median times where a cell has repeats) and n the cell's GPUs on all its
nodes (num_gpus x num_nodes), so that a study scaling from one node to several is one
series. Where two cells of a series have the same n on different node counts (8 GPUs on
one node, 4 on each of two), the line takes the one on fewer nodes; the table lists both.

- weak scaling: the per-device batch stays fixed as GPUs are added (the global batch grows);
- strong scaling: the global batch (per-device batch x num_gpus) stays fixed, so each GPU
  gets a smaller share.
A series needs its 1-GPU cell at the same per-device (weak) or global (strong) batch."""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.report import encodings
from dlbench.report.data import joined, measured, varying
from dlbench.report.model_charts import throughput_unit
from dlbench.report.style import Column, Figure, NumbersTable, styled

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
    # n: the cell's GPUs on all its nodes (results from before num_nodes: one node).
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
                       efficiency=data["x"] / (data["num_gpus"] * data["x1"]))
    others = [a for a in encodings.model_axes() if a in data and a not in ("system", "num_gpus")]
    others = [a for a in others if a != "num_nodes"]
    columns = ["scaling", "series", "series_id", "system", "model", "precision", "phase", "num_gpus",
               "num_nodes", "batch_size", "global_batch", "fixed_batch", "throughput", "speedup",
               "efficiency", "on_line", "unit", *others]
    return data[columns].sort_values(["scaling", "series", "num_gpus"], kind="stable",
                                     ignore_index=True)


# Axes a scaling series may differ in, besides the scaling kind and the batch held fixed.
def _candidates(data: pd.DataFrame) -> list[str]:
    return ["model", "phase", "precision",
            *[a for a in encodings.model_axes()
              if a in data and a not in ("num_gpus", "num_nodes")]]


def scaling_figure(frame: pd.DataFrame) -> Figure | None:
    data = scaling_frame(frame)
    if data.empty:
        return None
    encoding = encodings.choose(data, panels=("scaling",), colour="fixed_batch",
                                candidates=_candidates(data))
    gpus = sorted(data["num_gpus"].unique())
    placed = encoding.placed()
    dash = {}
    if encoding.series:
        data = data.assign(style=joined(data[encoding.series]))
        dash = {"strokeDash": alt.StrokeDash(
            "style:N", title=encodings.series_title(encoding.series))}
    base = alt.Chart().encode(
        x=alt.X("num_gpus:Q", title="GPUs (on all nodes)", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=[int(g) for g in gpus], format="d")),
        color=alt.Color("fixed_batch:O", title="batch held fixed",
                        scale=alt.Scale(scheme="viridis"),
                        legend=alt.Legend(labelLimit=320)),
        # A line per series: its number is enough (its name, long, is in the tooltip's axes).
        detail="series_id:N",
        tooltip=["scaling:N", *[alt.Tooltip(f"{a}:N", title=encodings.title(a))
                                            for a in placed],
                 "num_gpus:Q", "num_nodes:Q", "batch_size:Q", "global_batch:Q",
                 alt.Tooltip("throughput:Q", format=",.1f"),
                 alt.Tooltip("speedup:Q", format=".2f"),
                 alt.Tooltip("efficiency:Q", format=".0%")], **dash)
    lines = base.transform_filter(alt.datum.on_line).mark_line(point=True).encode(
        y=alt.Y("efficiency:Q", title="efficiency X(n) / (n X(1))", axis=alt.Axis(format="%"),
                scale=alt.Scale(domainMin=0)), order="num_gpus:Q")
    parity = alt.Chart().mark_rule(strokeDash=[4, 3], color="#9aa5b1").encode(y=alt.datum(1.0))
    efficiency = alt.layer(lines, parity)
    if encoding.filters:
        efficiency = efficiency.transform_filter(encoding.filter_expression())
    chart = efficiency.properties(width=300, height=220).facet(
        column=alt.Column("scaling:N", title=None, sort=list(KINDS)), data=data)
    if encoding.filters:
        chart = chart.add_params(*encoding.params(data))
    numbers = NumbersTable([
        Column("scaling", "scaling"),
        *[Column(a, encodings.title(a)) for a in placed],
        Column("num_gpus", "GPUs", "d"), Column("num_nodes", "nodes", "d"),
        Column("batch_size", "batch per GPU", "d"),
        Column("global_batch", "global batch", "d"),
        Column("throughput", throughput_unit(data), ",.1f"), Column("speedup", "speed-up", ".2f"),
        Column("efficiency", "efficiency", ".0%")], required="efficiency")
    return Figure("scaling", "Scaling efficiency across GPUs",
                  "Weak scaling keeps the per-device batch, strong scaling the global batch; "
                  "1.0 (dashed) is perfect scaling; colour: the batch held fixed (per GPU in "
                  "weak, global in strong)." + encoding.note(), styled(chart), shows=encoding.defaults, table=numbers)
