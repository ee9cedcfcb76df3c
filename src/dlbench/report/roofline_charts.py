"""The roofline (ParaDnn's figure, for any study): each operator or ParaDnn cell placed by
its arithmetic intensity (FLOPs per byte moved) and achieved FLOP/s per device, log-log,
under the ceilings of its device: min(compute ceiling, bandwidth x intensity).

Ceilings are measured (a calibration cell of the same system and device: best GEMM of a
precision, best STREAM copy/triad) where the study has them, else the vendor's peaks
(dlbench.peaks) for a device the peak table knows; a panel without either has no roof.
One panel per system and device."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from dlbench import peaks
from dlbench.efficiency import BANDWIDTH_BENCHMARKS, CALIBRATION_KIND, devices
from dlbench.report import llm_charts  # its decode steps count the bytes they read
from dlbench.report.data import PRECISION_ORDER, at_cell_time, measured, model_opts_label
from dlbench.report.op_charts import config_labels, input_arguments, op_variants
from dlbench.report.style import Figure, styled

# Model families placed on the roofline besides operators (those whose runner counts bytes).
FAMILIES = ("paradnn_fc", "paradnn_cnn", "paradnn_rnn")
ROOF_POINTS = 60  # samples of each roof curve across the intensity range


def _panel(frame: pd.DataFrame) -> pd.Series:
    model = frame["gpu_model"].where(frame["device"] == "gpu", frame["cpu_model"])
    return (frame["system"].fillna("?").astype(str) + " · " + frame["device"].fillna("?")
            + " · " + model.fillna("unknown device").astype(str))


def points(frame: pd.DataFrame) -> pd.DataFrame:
    """One point per measurement that has FLOPs, bytes and a time: a cell's, whatever its
    runs (data.measured), at the cell's time (the mean of its runs' medians)."""
    parts = [measured(frame, kind) for kind in ("op", "model", llm_charts.KIND)]
    parts = [rows for rows in parts if not rows.empty]
    if not parts:
        return pd.DataFrame()
    ok = pd.concat(parts, ignore_index=True)
    ok = ok[ok["tflops"].notna() & (ok["flops_per_iteration"].fillna(0) > 0)
            & (ok["bytes_per_iteration"].fillna(0) > 0)
            & ((ok["kind"] != "model") | ok["model"].isin(FAMILIES))]
    if ok.empty:
        return pd.DataFrame()
    family = ok["op_name"].where(ok["kind"] == "op", ok["model"]).fillna(ok["name"])
    return pd.DataFrame({
        "panel": _panel(ok), "family": family.astype(str), "config": op_configs(ok),
        "name": _names(ok, family),
        # An operator input's arguments, its dtypes and shapes (empty for other points).
        "shapes": [input_arguments(e)[0] if k == "op" else ""
                   for k, e in zip(ok["kind"], ok.get("extra", pd.Series(None, index=ok.index)),
                                   strict=True)],
        "pass": ok["pass"].fillna("?"),
        "precision": ok["efficiency_precision"].fillna("?"),
        "intensity": ok["flops_per_iteration"] / ok["bytes_per_iteration"],
        # per device, under one device's roofs (a data-parallel cell counts all its ranks)
        "tflops": at_cell_time(ok, "tflops") / ok.apply(lambda r: devices(r.to_dict()), axis=1),
        "pct_of_roof": np.nan,
    }).reset_index(drop=True)


def op_configs(ok: pd.DataFrame) -> pd.Series:
    """An operator point's op config, labelled as the operator charts label it
    (``config_labels``: two configs may hold one operator at one input id, and two
    folders a file of one name); empty for other points."""
    ops = ok["kind"] == "op"
    return config_labels(ok["op_config"].where(ops)).where(ops, "").astype(str)


def _names(ok: pd.DataFrame, family: pd.Series) -> pd.Series:
    """What tells a family's points apart: an operator input with its cell's variant
    ("0|0|1 [backward on]", report.op_charts), a ParaDnn cell by the options that differ
    within its family and its batch size ("layers=8, nodes=1024 · batch 64"), a language
    model's decode by its batch and prompt ("batch 8 · prompt 512")."""
    names = ok["name"].astype(str).copy()
    ops = ok["kind"] == "op"
    panel = _panel(ok)
    for _, rows in ok[ops].groupby(panel[ops], sort=False):  # the system is the panel's
        variant = op_variants(rows)
        names[rows.index] = names[rows.index] + variant.map(lambda v: f" [{v}]" if v else "")
    for _, rows in ok[~ops].groupby(family[~ops], sort=False):
        batch = rows["batch_size"].map(lambda b: "" if pd.isna(b) else f" · batch {int(b)}")
        label = model_opts_label(rows, given_when_alike=True)
        if (rows["kind"] == llm_charts.KIND).all():  # a preset's options: its name says them
            label = label.where(label != "default", "")
            batch += rows["prompt_length"].map(
                lambda n: "" if pd.isna(n) else f" · prompt {int(n)}")
        names[rows.index] = (label + batch).str.removeprefix(" · ")
    return names


def ceilings(frame: pd.DataFrame, panel_rows: pd.DataFrame) -> tuple[dict[str, float],
                                                                    float | None, str]:
    """Compute ceilings per precision (TFLOP/s), bandwidth (GB/s) and their source for one
    panel's rows: measured where a calibration ran, else the vendor's."""
    cal = panel_rows[(panel_rows["kind"] == CALIBRATION_KIND) & (panel_rows["status"] == "ok")]
    gemm = cal[cal["op_name"] == "gemm"]
    compute = {str(p): float(v) for p, v in
               gemm.groupby("efficiency_precision")["tflops"].max().items()}
    bandwidth = cal[cal["op_name"].isin(BANDWIDTH_BENCHMARKS)]["gbps"].max()
    if compute and pd.notna(bandwidth):
        return compute, float(bandwidth), "measured"
    first = panel_rows.iloc[0]
    if first["device"] != "gpu":
        return {}, None, "none"
    model = first["gpu_model"]
    vendor = {p: peaks.peak_tflops(model, p) for p in PRECISION_ORDER}
    vendor = {p: v for p, v in vendor.items() if v}
    return vendor, peaks.peak_bandwidth_gbps(model), "vendor" if vendor else "none"


def roofs(compute: dict[str, float], bandwidth: float, lo: float, hi: float,
          precisions: list[str]) -> pd.DataFrame:
    """The roof of each precision: achievable TFLOP/s = min(P, B * I / 1000) sampled over
    [lo, hi] FLOP/byte, with the ridge point (I = 1000 P / B) included exactly."""
    rows = []
    for precision in precisions:
        peak = compute.get(precision)
        if not peak:
            continue
        ridge = 1000.0 * peak / bandwidth
        grid = np.unique(np.append(np.geomspace(lo, hi, ROOF_POINTS),
                                   [ridge] if lo < ridge < hi else []))
        for intensity in grid:
            rows.append({"precision": precision, "intensity": intensity,
                         "tflops": min(peak, bandwidth * intensity / 1000.0),
                         "ceiling": f"{precision}: {peak:,.3g} TFLOP/s, {bandwidth:,.4g} GB/s"})
    return pd.DataFrame(rows)


def placed(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, tuple[pd.DataFrame, str]]]:
    """The points with ``pct_of_roof`` (achieved over the roof of their precision at their
    intensity), and each panel's roof curves and ceiling source."""
    pts = points(frame)
    panels: dict[str, tuple[pd.DataFrame, str]] = {}
    if pts.empty:
        return pts, panels
    panel_of = _panel(frame)
    for panel, group in pts.groupby("panel", sort=True):
        compute, bandwidth, source = ceilings(frame, frame[panel_of == panel])
        lo, hi = group["intensity"].min() / 4, group["intensity"].max() * 4
        used = sorted(set(group["precision"]) & set(compute), key=_precision_rank)
        roof = (roofs(compute, bandwidth, lo, hi, used or sorted(compute, key=_precision_rank))
                if bandwidth else pd.DataFrame())
        # No roof drawn (a vendor's compute peaks without its bandwidth): no ceilings.
        panels[panel] = (roof, source if not roof.empty else "none")
        if bandwidth:
            for i in group.index:
                peak = compute.get(group.at[i, "precision"])
                if peak:
                    top = min(peak, bandwidth * group.at[i, "intensity"] / 1000.0)
                    pts.at[i, "pct_of_roof"] = 100.0 * group.at[i, "tflops"] / top
    return pts, panels


# A panel's title by where its ceilings come from (ceilings()).
CEILING_TITLES = {"measured": "measured ceilings", "vendor": "vendor ceilings",
                  "none": "no ceilings"}


def roofline_figure(frame: pd.DataFrame) -> Figure | None:
    pts, panels = placed(frame)
    if pts.empty:
        return None
    charts = [_panel_chart(pts[pts["panel"] == panel], roof,
                           f"{panel} ({CEILING_TITLES[source]})")
              for panel, (roof, source) in panels.items()]
    chart = alt.vconcat(*charts) if len(charts) > 1 else charts[0]
    roofless = [panel for panel, (roof, _) in panels.items() if roof.empty]
    caption = ("Arithmetic intensity against achieved TFLOP/s (log-log), one point per "
               "operator input, ParaDnn cell or language model's decode (its bytes the "
               "weights and KV cache a step reads at least, so its intensity is at most "
               "where it is drawn)")
    if len(roofless) < len(panels):
        caption += ("; lines: each precision's roof, min(compute ceiling, bandwidth x "
                    "intensity). Measured ceilings come from the study's calibration cells "
                    "(calibrate: true), vendor ceilings from the peak table")
    if roofless:
        # Without a roof the chart is only where the points lie: say why, and how to get one.
        caption += (f". No roof for {', '.join(roofless)}: the study has no calibration "
                    "cells for that device and the peak table has no peaks for it (it has "
                    "none for a CPU); calibrate: true in the study measures its ceilings")
    return Figure("roofline", "Roofline", caption + ".", styled(chart))


def _precision_rank(precision: str) -> int:
    order = list(PRECISION_ORDER)
    return order.index(precision) if precision in order else len(order)


def _panel_chart(group: pd.DataFrame, roof: pd.DataFrame, title: str) -> alt.Chart:
    # padding: a point at the end of the data's range is drawn whole, not cut by the axis.
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte)",
              scale=alt.Scale(type="log", nice=False, padding=12))
    # tickCount: where the points span less than a decade, labels between the powers of ten
    # (0.11, 0.12, ...) rather than the few log ticks that fall inside (Vega's choice).
    y = alt.Y("tflops:Q", title="TFLOP/s per device", scale=alt.Scale(type="log", nice=False, padding=12),
              axis=alt.Axis(tickCount=12))
    # Fields some point of the panel has: a tooltip line without a value reads "NaN".
    shapes = ([alt.Tooltip("shapes:N", title="arguments")]
              if group["shapes"].ne("").any() else [])
    of_roof = ([alt.Tooltip("pct_of_roof:Q", title="% of roof", format=".1f")]
               if group["pct_of_roof"].notna().any() else [])
    dots = alt.Chart(group).mark_point(filled=True, size=70).encode(
        x=x, y=y, color=alt.Color("family:N", title="operator / model",
                                  scale=alt.Scale(scheme="tableau10")),
        shape=alt.Shape("pass:N", title="pass"),
        tooltip=[alt.Tooltip("family:N", title="operator / model"),
                 alt.Tooltip("config:N", title="op config"), alt.Tooltip("name:N", title="input"),
                 *shapes, alt.Tooltip("pass:N"), alt.Tooltip("precision:N"),
                 alt.Tooltip("intensity:Q", title="FLOP/byte", format=".3~s"),
                 alt.Tooltip("tflops:Q", title="TFLOP/s per device", format=".3~g"),
                 *of_roof])
    layers = [dots]
    if not roof.empty:
        lines = alt.Chart(roof).mark_line(strokeWidth=1.6, opacity=0.8).encode(
            x=x, y=y, detail="precision:N", order="intensity:Q",
            strokeDash=alt.StrokeDash("precision:N", title="roof",
                                      sort=sorted(set(roof["precision"]), key=_precision_rank)),
            color=alt.value("#52606d"),
            tooltip=[alt.Tooltip("ceiling:N", title="roof")])
        layers.insert(0, lines)
    return alt.layer(*layers).resolve_scale(color="independent").properties(
        width=460, height=300, title=title)


def roofline_table(frame: pd.DataFrame) -> str | None:
    """The points as numbers, with how far each is below its roof."""
    from dlbench.report.tables import table

    pts, _ = placed(frame)
    if pts.empty:
        return None
    pts = pts.sort_values(["panel", "family", "config", "intensity"])
    # The op config's column where there are operator points: one input id of one operator
    # in two configs would read as two identical rows without it.
    configs = (pts["config"] != "").any()
    shapes = pts["shapes"].ne("").any()
    of_roof = pts["pct_of_roof"].notna().any()  # none where no panel has a roof
    rows = [[r.panel, r.family, *([r.config] if configs else []), r.name,
             *([r.shapes] if shapes else []), r.pass_,
             r.precision, f"{r.intensity:.3g}", f"{r.tflops:.4g}",
             *(["" if pd.isna(r.pct_of_roof) else f"{r.pct_of_roof:.1f}"] if of_roof else [])]
            for r in pts.rename(columns={"pass": "pass_"}).itertuples()]
    return table(["system · device", "operator / model", *(["op config"] if configs else []),
                  "input", *(["arguments"] if shapes else []), "pass", "precision",
                  "FLOP/byte", "TFLOP/s per device", *(["% of roof"] if of_roof else [])],
                 rows)
