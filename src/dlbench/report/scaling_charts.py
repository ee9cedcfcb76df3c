"""Scaling across GPUs (DLBS's weak and strong scaling): for model cells that differ only in
num_gpus (and the batch), speed-up S(n) = X(n) / X(1) and efficiency E(n) = X(n) / (n X(1)),
X being throughput in samples per second (the median over repeats where a cell has them).

- weak scaling: the per-device batch stays fixed as GPUs are added (the global batch grows);
- strong scaling: the global batch (per-device batch x num_gpus) stays fixed, so each GPU
  gets a smaller share.
A series needs its 1-GPU cell at the same per-device (weak) or global (strong) batch."""

from __future__ import annotations

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.report.data import measured, varying
from dlbench.report.style import Figure, styled

# What a series holds fixed: every axis column but the two that scaling varies.
VARIED = ("num_gpus", "batch_size")


def _series_keys(frame: pd.DataFrame) -> list[str]:
    keys = ["system", *[name for name, _ in axes.columns() if name not in VARIED],
            "model_opts", "name", "pass"]
    return [k for k in keys if k in frame]


def scaling_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (series, scaling kind, num_gpus) with speed-up and efficiency."""
    rows = measured(frame, "model")
    if rows.empty or rows["num_gpus"].nunique() < 2:
        return pd.DataFrame()
    rows = rows.assign(x=rows["cell_throughput"].fillna(rows["throughput"]).astype(float),
                       global_batch=rows["batch_size"] * rows["num_gpus"])
    keys = _series_keys(rows)
    rows[keys] = rows[keys].astype(object).where(rows[keys].notna(), "")  # nulls group together
    # A series is named by every fixed axis that differs between series (so that no two
    # series share a name, and a line never joins two of them), and the batch held fixed.
    named = varying(rows, tuple(keys)) or ["model"]
    out = []
    for scaling, fixed in (("weak", "batch_size"), ("strong", "global_batch")):
        for _, group in rows.groupby([*keys, fixed], sort=False):
            base = group[group["num_gpus"] == 1]
            if base.empty or group["num_gpus"].nunique() < 2:
                continue
            x1 = float(base["x"].iloc[0])
            label = " · ".join(str(group[k].iloc[0]) for k in named if group[k].iloc[0] != "")
            for r in group.sort_values("num_gpus").itertuples():
                out.append({
                    "scaling": scaling, "series": f"{label} · {fixed.replace('_', ' ')} "
                                                   f"{int(getattr(r, fixed))}",
                    "system": r.system, "model": r.model, "precision": r.precision,
                    "phase": r.phase, "num_gpus": int(r.num_gpus),
                    "batch_size": int(r.batch_size), "global_batch": int(r.global_batch),
                    "throughput": r.x, "speedup": r.x / x1,
                    "efficiency": r.x / (r.num_gpus * x1)})
    return pd.DataFrame(out)


def scaling_figure(frame: pd.DataFrame) -> Figure | None:
    data = scaling_frame(frame)
    if data.empty:
        return None
    gpus = sorted(data["num_gpus"].unique())
    base = alt.Chart(data).encode(
        x=alt.X("num_gpus:Q", title="GPUs", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=[int(g) for g in gpus], format="d")),
        color=alt.Color("series:N", title="series", legend=alt.Legend(labelLimit=320)),
        detail="series:N",
        tooltip=["scaling:N", "series:N", "num_gpus:Q", "batch_size:Q", "global_batch:Q",
                 alt.Tooltip("throughput:Q", format=",.1f"),
                 alt.Tooltip("speedup:Q", format=".2f"),
                 alt.Tooltip("efficiency:Q", format=".0%")])
    efficiency = alt.layer(
        base.mark_line(point=True).encode(
            y=alt.Y("efficiency:Q", title="efficiency X(n) / (n X(1))", axis=alt.Axis(format="%"),
                    scale=alt.Scale(domainMin=0)), order="num_gpus:Q"),
        alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 3], color="#9aa5b1")
        .encode(y="y:Q"),
    ).properties(width=300, height=220)
    chart = efficiency.facet(column=alt.Column("scaling:N", title=None,
                                               sort=["weak", "strong"]), data=data)
    return Figure("scaling", "Scaling efficiency across GPUs",
                  "Weak scaling keeps the per-device batch, strong scaling the global batch; "
                  "1.0 (dashed) is perfect scaling.", styled(chart))


def scaling_table(frame: pd.DataFrame) -> str | None:
    from dlbench.report.tables import table

    data = scaling_frame(frame)
    if data.empty:
        return None
    rows = [[r.scaling, r.series, r.num_gpus, r.batch_size, r.global_batch,
             f"{r.throughput:,.1f}", f"{r.speedup:.2f}", f"{r.efficiency:.0%}"]
            for r in data.itertuples()]
    return table(["scaling", "series", "GPUs", "batch per GPU", "global batch",
                  "samples/s", "speed-up", "efficiency"], rows)
