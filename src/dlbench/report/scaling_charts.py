"""Scaling across GPUs (DLBS's weak and strong scaling): for model cells that differ only in
their GPUs (and the batch), speed-up S(n) = X(n) / X(n0) and efficiency
E(n) = X(n) n0 / (n X(n0)), X being throughput in items per second (samples, tokens, shots:
the cells' unit; at the mean of the runs' median times where a cell has repeats), n the
cell's GPUs on all its nodes (num_gpus x num_nodes), so that a study scaling from one node
to several is one series, and n0 the series' baseline: its smallest n with a result (8 in a
study of 8 GPUs on 1, 2 and 4 nodes; 2 where the 1-GPU cell failed). Where two cells of a
series have the same n on different node counts (8 GPUs on one node, 4 on each of two), the
line takes the one on fewer nodes; the table lists both.

On a CPU, n counts data-parallel processes, and the processes of one node share its CPU
(dlbench.efficiency.devices: one CPU per node). A CPU series that adds nodes with its
processes (the same processes per node as its baseline) adds devices and has an efficiency
like the GPUs'; one whose added processes share a node's CPU has no perfect scaling to
measure them against: it shows the speed-up alone, and its efficiency is left empty.

Each speed-up has an interval from its cells' 95 % intervals (the conservative ratio of
opposite ends: X's low end over X(n0)'s high end, and back), and is flagged unstable where
its cell or its baseline is (runs that differ beyond unstable_cv).

- weak scaling: the per-device batch stays fixed as GPUs are added (the global batch grows);
- strong scaling: the global batch (per-device batch x num_gpus) stays fixed, so each GPU
  gets a smaller share.
A series needs two cells with results at the same per-device (weak) or global (strong)
batch; cells that make no such series, and cells without a result, are named in a note."""

from __future__ import annotations

import json
from html import escape

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.efficiency import devices
from dlbench.report import encodings
from dlbench.report.data import cells, joined, measured, numeric, varying
from dlbench.report.model_charts import run_to_run_columns, throughput_unit
from dlbench.report.style import UNSTABLE_COLOUR, Column, Figure, NumbersTable, counted, styled

# What a series holds fixed: every axis column but the two that scaling varies.
VARIED = ("num_gpus", "num_nodes", "batch_size")
KINDS = {"weak": "batch_size", "strong": "global_batch"}  # scaling -> the batch held fixed
# A measurement's keys: a failed cell has no measurement, so it is matched without them.
MEASUREMENT_KEYS = ("name", "pass")
# The baseline's figures each row of a series is measured against (column -> its name).
BASELINE = {"cell": "cell0", "num_gpus": "n0", "devices": "devices0", "x": "x0",
            "x_low": "x0_low", "x_high": "x0_high", "unstable": "unstable0"}


def _series_keys(frame: pd.DataFrame) -> list[str]:
    keys = ["system", *[name for name, _ in axes.columns() if name not in VARIED],
            "model_opts", "name", "pass"]
    return [k for k in keys if k in frame]


def _with_n(rows: pd.DataFrame) -> pd.DataFrame:
    """Model rows with n (``num_gpus``: GPUs or processes on all nodes), their devices and
    global batch; MXNet's CPU contexts, which scale nothing, left out."""
    nodes = numeric(rows, "num_nodes").fillna(1)  # results from before num_nodes: one node
    # An MXNet CPU cell's num_gpus counts contexts of one process on one thread pool
    # (docs/mxnet.md): more of them add neither devices nor processes, so no scaling.
    contexts = rows["framework"].eq("mxnet") & rows["device"].eq("cpu") & nodes.eq(1)
    n = numeric(rows, "num_gpus") * nodes
    keep = ~contexts & n.notna() & numeric(rows, "batch_size").notna()
    rows, nodes, n = rows[keep], nodes[keep], n[keep]
    found = rows.reindex(columns=["device", "num_gpus", "num_nodes"]).to_dict("records")
    keys = _series_keys(rows)
    # nulls group together
    fixed = {k: rows[k].astype(object).where(rows[k].notna(), "") for k in keys}
    return rows.assign(**fixed, devices=[devices(c) for c in found],
                       num_nodes=nodes.astype(int), num_gpus=n.astype(int),
                       batch_size=rows["batch_size"].astype(int),
                       global_batch=(rows["batch_size"] * n).astype(int))


def _threads(rows: pd.DataFrame) -> pd.Series:
    """Each row's threads per process where its runner recorded them (PyTorch's
    torch.get_num_threads, in the environment's library flags): on a CPU, 1 process of 2
    threads and 2 of 1 are the same n's of cores spent differently."""
    def count(text: object) -> float:
        try:
            flags = json.loads(text).get("library_flags") or {} if isinstance(text, str) else {}
        except (ValueError, AttributeError):
            return float("nan")
        value = flags.get("num_threads") if isinstance(flags, dict) else None
        return float(value) if isinstance(value, int) and not isinstance(value, bool) \
            else float("nan")
    found = rows["environment"].map(count) if "environment" in rows \
        else pd.Series(float("nan"), index=rows.index)
    return found.where(rows["device"].eq("cpu"))


def _usable(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok model measurements with their throughput X, its interval and the unstable
    flag (as the throughput chart has them: model_charts.run_to_run_columns)."""
    rows = measured(frame, "model")
    if rows.empty:
        return rows
    figures = run_to_run_columns(rows)
    rows = rows.assign(x=figures["throughput"].astype(float),
                       x_low=figures["throughput_low"], x_high=figures["throughput_high"],
                       unstable=figures["unstable"], threads=_threads(rows),
                       unit=rows["throughput_unit"].fillna(""))
    return _with_n(rows)


def _unusable(frame: pd.DataFrame, usable: pd.DataFrame) -> pd.DataFrame:
    """The model cells without a result (failed, out of memory, skipped), with their n."""
    found = cells(frame)
    found = found[found["kind"].eq("model") & ~found["cell"].isin(set(usable["cell"]))]
    return _with_n(found) if not found.empty else found


def _baselines(rows: pd.DataFrame, group: list[str]) -> pd.DataFrame:
    """Each series' baseline: its smallest n with a result (of two cells at that n, the
    one on fewer nodes, as the line takes), and its figures (BASELINE)."""
    first = rows.sort_values(["num_gpus", "num_nodes"], kind="stable").drop_duplicates(group)
    return first[[*group, *BASELINE]].rename(columns=BASELINE)


def _series(rows: pd.DataFrame, scaling: str, fixed: str, keys: list[str],
            named: list[str]) -> pd.DataFrame:
    """The rows of one scaling kind's series of two n or more, each with its baseline."""
    group = [*keys, fixed]
    several = rows.groupby(group, sort=False)["num_gpus"].transform("nunique") > 1
    part = rows[several]
    if part.empty:
        return part
    part = part.merge(_baselines(part, group), on=group)
    # A series adds a device with each process (every GPU series; a CPU series adding
    # nodes) or some of its processes share a CPU: then no perfect scaling to hold it to.
    shares = part["devices"] * part["n0"] != part["devices0"] * part["num_gpus"]
    per_device = ~shares.groupby([part[k] for k in group], sort=False).transform("any")
    # One point per n in a line: the cell on the fewest nodes (the others: the table).
    on_line = ~part.sort_values("num_nodes", kind="stable").duplicated(
        [*group, "num_gpus"]).reindex(part.index)
    batch = part[fixed].astype(int)
    label = joined(part[named], skip_empty=True)
    return part.assign(scaling=scaling, fixed_batch=batch, per_device=per_device,
                       on_line=on_line, series=label + f" · {fixed.replace('_', ' ')} "
                       + batch.astype(str))


def _measures(data: pd.DataFrame) -> pd.DataFrame:
    """Speed-up, efficiency and their intervals against each row's baseline."""
    speedup = data["x"] / data["x0"]
    # conservative: the opposite ends of the two intervals; none for the baseline itself,
    # 1 by definition (its spread is in every other point's interval)
    itself = data["cell"] == data["cell0"]
    low = (data["x_low"] / data["x0_high"]).mask(itself)
    high = (data["x_high"] / data["x0_low"]).mask(itself)
    ideal = data["num_gpus"] / data["n0"]  # perfect scaling's speed-up
    return data.assign(
        throughput=data["x"], speedup=speedup, speedup_low=low, speedup_high=high,
        ideal=ideal,
        # none where the processes share one CPU: no perfect scaling to match
        efficiency=(speedup / ideal).where(data["per_device"]),
        efficiency_low=(low / ideal).where(data["per_device"]),
        efficiency_high=(high / ideal).where(data["per_device"]),
        unstable=data["unstable"] | data["unstable0"].astype(bool))


def _scaling(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The series' rows (every column, empty without any) and the usable rows they are of."""
    rows = _usable(frame)
    if rows.empty or rows["num_gpus"].nunique() < 2:
        return pd.DataFrame(), rows
    keys = _series_keys(rows)
    # A series is named by every fixed axis that differs between series (so that no two
    # series share a name, and a line never joins two of them), and the batch held fixed.
    named = varying(rows, tuple(keys)) or ["model"]
    if rows["name"].eq(rows["model"]).all():  # a model's measurement named after it
        named = [k for k in named if k != "name"] or ["model"]
    parts = [_series(rows, scaling, fixed, keys, named) for scaling, fixed in KINDS.items()]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(), rows
    # one block: the columns added to a concatenation would each fragment it (pandas warns)
    data = _measures(pd.concat(parts, ignore_index=True).copy())
    data["series_id"] = pd.factorize(data["scaling"] + "\x1f" + data["series"])[0]
    return data, rows


def scaling_frame(frame: pd.DataFrame,
                  scaled: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per (series, scaling kind, n) with speed-up and efficiency against the
    series' baseline n0 (``scaled``: ``_scaling(frame)`` where already made)."""
    data, _ = scaled or _scaling(frame)
    if data.empty:
        return data
    others = [a for a in encodings.model_axes() if a in data and a not in ("system", "num_gpus")]
    others = [a for a in others if a != "num_nodes"]
    columns = ["scaling", "series", "series_id", "system", "model", "precision", "phase", "num_gpus",
               "num_nodes", "batch_size", "global_batch", "fixed_batch", "n0", "throughput",
               "speedup", "speedup_low", "speedup_high", "ideal", "efficiency",
               "efficiency_low", "efficiency_high", "unstable", "threads", "on_line", "unit",
               "per_device", "devices", "cell", *others]
    return data[columns].sort_values(["scaling", "series", "num_gpus"], kind="stable",
                                     ignore_index=True)


def _n_list(values: pd.Series) -> str:
    return ", ".join(str(int(v)) for v in sorted(set(values)))


def _failures(rows: pd.DataFrame) -> str:
    """'n = 1 (failed), n = 4 (oom)': the cells without a result, by n."""
    found = rows.drop_duplicates(["num_gpus", "status"]).sort_values("num_gpus")
    # an ok cell here measured no throughput (a result without a rate)
    status = found["status"].where(found["status"] != "ok", "no throughput")
    return ", ".join(f"n = {n} ({s})" for n, s in zip(found["num_gpus"], status, strict=True))


def _name(rows: pd.DataFrame, named: list[str]) -> str:
    return joined(rows[named].iloc[:1], skip_empty=True).iloc[0]


def _lost_series(both: pd.DataFrame, keys: list[str], named: list[str]
                 ) -> tuple[list[str], set[tuple]]:
    """A line for each series of two n or more that has fewer than two results (its
    other cells failed), and the settings (``keys``) these series are of."""
    notes, settings = [], set()
    for scaling, fixed in KINDS.items():
        for key, series in both.groupby([*keys, fixed], sort=False):
            ok = series[series["ok"]]
            if series["num_gpus"].nunique() < 2 or ok["num_gpus"].nunique() > 1:
                continue
            settings.add(key[:-1])
            had = f"a result at n = {_n_list(ok['num_gpus'])} only" if len(ok) else "no result"
            notes.append(f"{_name(series, named)} · {fixed.replace('_', ' ')} {key[-1]} "
                         f"({scaling}): not drawn, {had}; none at "
                         f"{_failures(series[~series['ok']])}.")
    return notes, settings


def _left_out(both: pd.DataFrame, drawn: set[str], keys: list[str]) -> list[str]:
    """A line for each series its failed cells left with one result, and for each model
    setting none of whose cells is in a series otherwise: why not."""
    named = varying(both, tuple(keys)) or ["model"]
    notes, lost = _lost_series(both, keys, named)
    for key, setting in both.groupby(keys, sort=False):
        if setting["cell"].isin(drawn).any() or key in lost:
            continue
        ok, failed = setting[setting["ok"]], setting[~setting["ok"]]
        if ok["num_gpus"].nunique() > 1:
            why = (f"results at n = {_n_list(ok['num_gpus'])}, but no two at one batch per "
                   "device or one global batch")
        else:
            why = f"a result at n = {_n_list(ok['num_gpus'])} only" if len(ok) else "no result"
        if len(failed):
            why += f"; none at {_failures(failed)}"
        notes.append(f"{_name(setting, named)}: not drawn, {why}.")
    return notes


def _short_of(data: pd.DataFrame, missing: pd.DataFrame, keys: list[str]) -> list[str]:
    """A line for each series drawn without some of its cells (failed, out of memory):
    which, and the baseline it is measured against where its smaller n had none."""
    notes = []
    for scaling, fixed in KINDS.items():
        series = data.loc[data["scaling"] == scaling, [*keys, fixed, "series", "n0"]]
        lost = missing.merge(series.drop_duplicates("series"), on=[*keys, fixed])
        for name, cells_of in lost.groupby("series", sort=False):
            n0 = int(cells_of["n0"].iloc[0])
            before = (f"; measured against n = {n0}"
                      if (cells_of["num_gpus"] < n0).any() else "")
            notes.append(f"{name} ({scaling}): no result at {_failures(cells_of)}{before}.")
    return notes


def scaling_notes(frame: pd.DataFrame,
                  scaled: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> list[str]:
    """What the chart leaves out or measures from a later baseline, one line each: a
    model setting with no series of two results (one n only, or its other cells without a
    result: all of them, too), and a series missing a cell (then measured from its next
    n)."""
    data, rows = scaled or _scaling(frame)
    missing = _unusable(frame, rows)
    if rows.empty and missing.empty:
        return []
    found = [part["num_gpus"] for part in (rows, missing) if "num_gpus" in part]
    if pd.concat(found).nunique() < 2:
        return []  # nothing here scales
    # a cell without a result has no measurement: matched on the rest of its keys
    keys = [k for k in _series_keys(missing if rows.empty else rows)
            if k not in MEASUREMENT_KEYS]
    both = pd.concat([rows.assign(ok=True), missing.assign(ok=False)], ignore_index=True)
    drawn = set() if data.empty else set(data["cell"])
    # the drawn series first, then what was not drawn
    notes = _short_of(data, missing, keys) if not data.empty and not missing.empty else []
    return notes + _left_out(both, drawn, keys)


# Axes a scaling series may differ in, besides the scaling kind and the batch held fixed.
# The device needs no place of its own: a CPU's series are drawn apart (their measure).
def _candidates(data: pd.DataFrame) -> list[str]:
    return ["model", "phase", "precision",
            *[a for a in encodings.model_axes()
              if a in data and a not in ("num_gpus", "num_nodes", "device")]]


# What a series is drawn in: its efficiency where each process brings its device (a GPU,
# or a CPU node), its speed-up where processes share a CPU (no perfect scaling to hold them
# to). Row headers when a chart has both; the y axis's title when it has one.
ROW_TITLES = {True: "efficiency ({}; 1 = perfect)", False: "speed-up (processes sharing one CPU)"}
# The devices of an efficiency series, by the rows' device.
DEVICE_NAMES = {"gpu": "GPUs", "cpu": "CPU nodes"}
X_TITLES = {"gpu": "GPUs (on all nodes)", "cpu": "processes (one CPU per node)",
            False: "processes (sharing one CPU)"}


def _kinds(data: pd.DataFrame) -> list[bool]:
    """Whether the chart has series that add devices (True) and series of processes
    sharing a CPU (False)."""
    return [k for k in (True, False) if k in set(data["per_device"])]


def _row_titles(data: pd.DataFrame) -> dict[bool, str]:
    adding = data.loc[data["per_device"], "device"]
    names = [DEVICE_NAMES[d] for d in DEVICE_NAMES if d in set(adding)] or ["GPUs"]
    return {True: ROW_TITLES[True].format(" or ".join(names)), False: ROW_TITLES[False]}


def _x_title(data: pd.DataFrame) -> str:
    found = set(data.loc[data["per_device"], "device"])
    titles = [X_TITLES[d] for d in ("gpu", "cpu") if d in found]
    if not data["per_device"].all():
        titles.append(X_TITLES[False])
    return " or ".join(titles)


def _baseline_text(data: pd.DataFrame) -> str:
    """The baseline as a title says it: 1 (every series from one GPU), 8, or n0 where the
    series start at different n."""
    bases = set(data["n0"])
    return str(bases.pop()) if len(bases) == 1 else "n0"


def _y_title(kind: bool, base: str) -> str:
    if kind:
        return ("efficiency X(n) / (n X(1))" if base == "1"
                else f"efficiency {base} X(n) / (n X({base}))")
    return f"speed-up X(n) / X({base})"


def _caption(data: pd.DataFrame, kinds: list[bool], notes: list[str]) -> str:
    each, counts = counted(data["device"])
    text = (f"Weak scaling keeps the batch per {each}, strong scaling the global batch; "
            f"colour: the batch held fixed (per {each} in weak, global in strong).")
    bases = sorted(set(data["n0"]))
    if bases != [1]:
        text += (" Each series is measured against its smallest n with a result, n0 (the "
                 f"table's baseline: {', '.join(str(b) for b in bases)} {counts}); perfect "
                 "scaling is a speed-up of n / n0.")
    if True in kinds:
        text += " Efficiency: 1.0 (dashed) is perfect scaling."
    if False in kinds:
        text += (" The processes of a CPU node share its cores (one device, as "
                 "dlbench.efficiency counts it): their series show the speed-up over "
                 "their baseline, with no perfect-scaling line.")
    if data["y_low"].notna().any():
        measure = {(True,): "efficiency's", (False,): "speed-up's"}.get(
            tuple(sorted(set(kinds))), "efficiency's or speed-up's")
        text += (f" Whiskers: the {measure} interval from the two cells' 95 % intervals "
                 "(opposite ends)"
                 + (f", cut at {WHISKER_CAP:g} times the row's largest point (the table has "
                    "them whole)" if data["cut"].any() else "") + ".")
    if data["unstable"].any():
        text += (" Ringed points are unstable: their cell's or their baseline's runs differ "
                 "by more than the unstable_cv threshold.")
    return text + "".join(f" {note}" for note in notes)


def _title(data: pd.DataFrame, kinds: list[bool]) -> str:
    if kinds == [True]:
        return "Scaling efficiency across " + " and ".join(
            DEVICE_NAMES[d] for d in DEVICE_NAMES if d in set(data["device"]))
    if kinds == [False]:
        return "Speed-up across processes sharing one CPU"
    adding = set(data.loc[data["per_device"], "device"])
    return ("Scaling across " + " and ".join(DEVICE_NAMES[d] for d in DEVICE_NAMES
                                             if d in adding)
            + ", and across processes sharing one CPU")


def _lines(base: alt.Chart, data: pd.DataFrame, kinds: list[bool],
           y_title: str | None) -> alt.LayerChart:
    """Each series' measure on y, with its interval and a ring where unstable (the layers
    only where some point has one), and, where a series adds devices, perfect scaling
    (1.0: efficiency is the speed-up over n / n0)."""
    axis = alt.Axis(format="%") if kinds == [True] else alt.Axis()
    y = alt.Y("y:Q", title=y_title, axis=axis, scale=alt.Scale(domainMin=0))
    drawn = base.transform_filter(alt.datum.on_line)
    lines = drawn.mark_line(point=True).encode(y=y, order="num_gpus:Q")
    # The whisker takes the line's colour; no dash: it is no line of its own.
    whiskers = drawn.mark_rule(strokeWidth=1.2).encode(y="y_low:Q", y2="y_high:Q",
                                                       strokeDash=alt.value([1, 0]))
    # As the throughput chart rings a cell whose runs disagree (model_charts).
    rings = drawn.transform_filter(alt.datum.unstable).mark_point(
        shape="circle", size=260, filled=False, color=UNSTABLE_COLOUR, strokeWidth=1.6,
    ).encode(y=y)
    layers = [lines, *([whiskers] if data["y_low"].notna().any() else []),
              *([rings] if data["unstable"].any() else [])]
    if True in kinds:
        layers.append(alt.Chart().transform_filter(alt.datum.per_device)
                      .mark_rule(strokeDash=[4, 3], color="#9aa5b1").encode(y=alt.datum(1.0)))
    return alt.layer(*layers)


# A whisker is cut at this many times its row's largest point (or perfect scaling, 1.0):
# a baseline whose runs disagree wildly gives an interval of 0 to millions, which would
# flatten every line of its row. The table and tooltip keep the whole interval.
WHISKER_CAP = 2.0


def _chart_rows(data: pd.DataFrame, titles: dict[bool, str]) -> pd.DataFrame:
    """The chart's y (efficiency or speed-up) and its interval, and its row's title."""
    per = data["per_device"]
    y = data["efficiency"].where(per, data["speedup"])
    top = y.where(~per, y.clip(lower=1.0)).groupby(per).transform("max") * WHISKER_CAP
    high = data["efficiency_high"].where(per, data["speedup_high"])
    return data.assign(
        measure=per.map(titles), y=y,
        y_low=data["efficiency_low"].where(per, data["speedup_low"]),
        y_high=high.clip(upper=top), cut=high > top)


def _table(data: pd.DataFrame, encoding: encodings.Encoding, kinds: list[bool]) -> NumbersTable:
    each, counts = counted(data["device"])
    efficiency_column = [Column("efficiency", "efficiency", ".0%")] if True in kinds else []
    # CPU processes of 1 x 2 threads and 2 x 1 are n = 1 and 2 on the same cores.
    threads = ([Column("threads", "threads per process", "d")]
               if data["threads"].notna().any() else [])
    return NumbersTable([
        Column("scaling", "scaling"),
        *[Column(a, encoding.title(a)) for a in encoding.placed()],
        *([Column("device", "device")] if len(kinds) > 1 else []),
        Column("num_gpus", counts, "d"), Column("num_nodes", "nodes", "d"), *threads,
        Column("batch_size", f"batch per {each}", "d"),
        Column("global_batch", "global batch", "d"),
        Column("n0", f"baseline ({counts})", "d"),
        Column("throughput", throughput_unit(data), ",.1f"), Column("speedup", "speed-up", ".2f"),
        Column("speedup_low", "speed-up 95 % CI from", ".2f"),
        Column("speedup_high", "speed-up 95 % CI to", ".2f"),
        *efficiency_column, Column("stability", "unstable")], required="speedup")


def _note_html(notes: list[str]) -> str:
    return "".join(f'<p class="note">{escape(note)}</p>' for note in notes)


def scaling_figure(frame: pd.DataFrame) -> Figure | str | None:
    """The scaling chart and its table; where no series can be drawn but some cells were
    meant to scale, the note saying why (as HTML); None where nothing scales."""
    scaled = _scaling(frame)
    data = scaling_frame(frame, scaled)
    notes = scaling_notes(frame, scaled)
    if data.empty:
        return _note_html(notes) or None
    kinds = _kinds(data)
    titles = _row_titles(data)
    data = _chart_rows(data, titles).assign(
        stability=data["unstable"].map({True: "unstable", False: ""}))
    encoding = encodings.choose(data, panels=("scaling",), colour="fixed_batch",
                                candidates=_candidates(data))
    gpus = sorted(data["num_gpus"].unique())
    counts = counted(data["device"])[1]
    placed = encoding.placed()
    dash = {}
    if encoding.series:
        data = data.assign(style=joined(data[encoding.series]))
        dash = {"strokeDash": alt.StrokeDash(
            "style:N", title=encoding.series_title())}
    efficiency_tip = [alt.Tooltip("efficiency:Q", format=".0%")] if True in kinds else []
    base = alt.Chart().encode(
        x=alt.X("num_gpus:Q", title=_x_title(data),
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
                 "global_batch:Q", alt.Tooltip("n0:Q", title="baseline n0"),
                 alt.Tooltip("throughput:Q", format=",.1f"),
                 alt.Tooltip("speedup:Q", format=".2f"),
                 alt.Tooltip("speedup_low:Q", title="speed-up 95 % CI from", format=".2f"),
                 alt.Tooltip("speedup_high:Q", title="speed-up 95 % CI to", format=".2f"),
                 alt.Tooltip("ideal:Q", title="perfect speed-up n / n0", format=".2f"),
                 *efficiency_tip, alt.Tooltip("stability:N", title="runs")], **dash)
    y_title = _y_title(kinds[0], _baseline_text(data)) if len(kinds) == 1 else None
    layered = _lines(base, data, kinds, y_title)  # else: the row headers
    if encoding.filters:
        layered = layered.transform_filter(encoding.filter_expression())
    rows = {}
    if len(kinds) > 1:  # device-adding series' efficiency above shared CPUs' speed-up
        rows = {"row": alt.Row("measure:N", title=None, sort=[titles[k] for k in kinds])}
    chart = layered.properties(width=300, height=220).facet(
        column=alt.Column("scaling:N", title=None, sort=list(KINDS)), data=data, **rows)
    if rows:
        chart = chart.resolve_scale(y="independent")
    if encoding.filters:
        chart = chart.add_params(*encoding.params(data))
    return Figure("scaling", _title(data, kinds), _caption(data, kinds, notes) + encoding.note(),
                  styled(chart), shows=encoding.defaults, table=_table(data, encoding, kinds))
