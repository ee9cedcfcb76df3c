"""Charts of collective-communication cells (dlbench.comms): bus bandwidth and time
against message size, one panel per collective, one colour per process count of one
collective (num_gpus on each of num_nodes nodes, over comm_groups communicators; a cell on
several nodes also differs from one on one node in its nodes, and a cell of several
communicators in comm_groups, which the chart gives each a place of its own)."""

from __future__ import annotations

import json
import math

import altair as alt
import pandas as pd

from dlbench import axes
from dlbench.comms.overlap import NO_KERNEL
from dlbench.comms.sizes import measured_label, message_bytes
from dlbench.report import encodings
from dlbench.report.data import (
    at_cell_time,
    cell_time,
    measured,
    numeric,
    runs_title,
    several_runs,
    time_title,
)
from dlbench.report.model_charts import (
    faceted,
    filtered,
    line_panels,
    series_dash,
    stacked,
    with_panel,
)
from dlbench.report.style import (
    PANEL_HEIGHT,
    PANEL_WIDTH,
    SIGNIFICANT_COLUMN,
    SIGNIFICANT_TIP,
    Column,
    Figure,
    NumbersTable,
    styled,
)

KIND = "comms"
# A size in bytes as 8 B, 4 KiB, 256 MiB (a Vega expression).
_BINARY_SIZE = ("datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB' "
                ": datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB' "
                ": datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB' "
                ": datum.value + ' B'")
# Axes a collective cell may differ in besides its panel (collective), size and colour
# (processes): the system, the nodes, then every other axis of the kind that is a column
# of the table, so that no line joins the sizes of two cells (two sweeps, a validated and
# an unvalidated run) and an axis added to the table is covered without an edit here.
OTHER_AXES = ("system", "num_nodes", *(
    a.name for a in axes.of_kind(KIND)
    if a.column and a.name not in ("collective", "num_gpus", "num_nodes")))


def comms_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per ok measurement (message size) of a collective cell."""
    return _sizes_frame(measured(frame, KIND))


def _sizes_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The collectives charts' columns of measured rows (their index kept)."""
    if rows.empty:
        return rows
    # Results made before collectives had num_nodes: one node.
    nodes = rows.get("num_nodes", pd.Series(1, rows.index)).fillna(1).astype(int)
    rows = rows.assign(num_nodes=nodes)
    # A point-to-point cell's three tests are three panels: "pt2pt latency", ...
    panel = [measured_label(c, p) for c, p in zip(rows["collective"], rows["pass"], strict=True)]
    # The message size, from the measurement's name (a bidirectional test moves two
    # messages of it per time).
    size = rows["name"].map(message_bytes)
    # The processes of one collective, whose bus factor its bus bandwidth is by: each
    # communicator's where PARAM's --multi-comms splits the world into comm_groups.
    groups = numeric(rows, "comm_groups").fillna(1).astype(int)
    ranks = rows["num_gpus"].astype(int) * nodes // groups
    # A latency test (half a ping-pong) is a time, no bandwidth: its results made before
    # the runner left them null still hold one, which is not drawn or listed.
    bandwidth = ~(rows["collective"].eq("pt2pt") & rows["pass"].eq("latency"))
    return pd.DataFrame({
        "cell": rows["cell"], "collective": pd.Series(panel, index=rows.index),
        "ranks": ranks,
        **{a: rows.get(a, pd.Series(None, index=rows.index, dtype=object)) for a in OTHER_AXES},
        "size_bytes": pd.to_numeric(size, errors="coerce").fillna(
            rows["bytes_per_iteration"]).astype(float),
        # The cell's time (the mean of its runs' medians) and the bandwidths at it; the
        # p95 the mean of the runs' p95s (data.measured).
        "time_us": 1e6 * cell_time(rows),
        "repeats": numeric(rows, "repeats").fillna(1).astype(int),
        "time_p95_us": 1e6 * numeric(rows, "time_p95_s"),
        "algbw_gbps": at_cell_time(rows, "gbps").where(bandwidth),
        # One process moves nothing over a link: its bus bandwidth is 0 by definition, a
        # figure that says nothing of the hardware, so it is left out (null), not drawn.
        "busbw_gbps": at_cell_time(rows, "bus_gbps").where((ranks > 1) & bandwidth),
        # The link that limits the collective and the bus bandwidth's share of it
        # (dlbench.links); results made before the readings have none.
        "link": rows.get("link", pd.Series(None, index=rows.index, dtype=object)),
        "pct_of_link": at_cell_time(rows, "pct_of_link").where(bandwidth),
    })


MAX_SIZE_TICKS = 10


def size_ticks(sizes: list[float], most: int = MAX_SIZE_TICKS) -> list[float]:
    """The sizes to label on a log axis: the first and the last, and between them those at
    least 1/(most-1) of the span apart (in log2). A tick at each of a 26-size sweep's sizes
    overlapped, and Vega then hid labels of its own choosing."""
    if len(sizes) <= most:
        return sizes
    step = (math.log2(sizes[-1]) - math.log2(sizes[0])) / (most - 1)
    ticks = [sizes[0]]
    for size in sizes[1:-1]:
        if math.log2(size) - math.log2(ticks[-1]) >= step:
            ticks.append(size)
    if len(ticks) > 1 and math.log2(sizes[-1]) - math.log2(ticks[-1]) < step / 2:
        ticks.pop()  # too near the last, which is always labelled
    return [*ticks, sizes[-1]]


def _by_size(data: pd.DataFrame) -> tuple:
    """What the collectives' charts share: a panel per collective, message size on a log
    x axis, a colour per process count, other axes as line styles; the data with its panel
    and line style, and the tooltips every point has."""
    encoding = encodings.choose(data, panels=("collective",), colour="ranks",
                                candidates=OTHER_AXES)
    data = data.assign(variant=encodings.labels(data, encoding.series))
    data, panels = with_panel(data, encoding.panels)
    ticks = size_ticks(sorted(data["size_bytes"].unique().tolist()))
    x = alt.X("size_bytes:Q", title="message size",
              scale=alt.Scale(type="log", base=2, nice=False),
              # The ticks are few enough (size_ticks) for each to keep its label: Vega's
              # overlap test takes a slanted label's whole box, and hid 256 KiB beside 1 MiB.
              axis=alt.Axis(values=ticks, labelExpr=_BINARY_SIZE, labelAngle=-45,
                            labelOverlap=False))
    colour = alt.Color("ranks:O", title="processes", scale=alt.Scale(scheme="viridis"))
    tips = [alt.Tooltip("collective:N"), alt.Tooltip("ranks:Q", title="processes"),
            *[alt.Tooltip(f"{a}:N", title=encoding.title(a)) for a in encoding.placed(())],
            alt.Tooltip("size_bytes:Q", title="bytes", format=",d")]
    return data, panels, encoding, x, colour, tips


def bandwidth_figure(frame: pd.DataFrame) -> Figure | None:
    """Bus bandwidth (top) and median time, whisker to p95 (bottom), against message size."""
    data = comms_frame(frame)
    if data.empty:
        return None
    data, panels, encoding, x, colour, tips = _by_size(data)
    median = time_title(data["repeats"], "µs")
    tips = [*tips,
            alt.Tooltip("time_us:Q", title=median, format=",.1f"),
            alt.Tooltip("algbw_gbps:Q", title="algorithm GB/s", format=SIGNIFICANT_TIP),
            alt.Tooltip("busbw_gbps:Q", title="bus GB/s", format=SIGNIFICANT_TIP)]
    # The link's columns where some cell read its links (none on one node's CPU).
    linked = bool(data["pct_of_link"].notna().any())
    if linked:
        tips += [alt.Tooltip("pct_of_link:Q", title="% of link", format=".1f"),
                 alt.Tooltip("link:N", title="link")]

    def panels_of(y: alt.Y, field: str, whisker: str | None = None) -> alt.FacetChart:
        return line_panels(data, panels, encoding, x=x, colour=colour, tooltip=tips, y=y,
                           field=field, whisker=whisker, dropdowns=False)

    time = panels_of(alt.Y("time_us:Q", title=median, scale=alt.Scale(type="log")),
                     "time_us", "time_p95_us")
    bus = _bus_panels(data, panels, encoding, x=x, colour=colour, tooltip=tips)
    # Cells of one process only (a single GPU), latency tests: no bus bandwidth to draw.
    chart = stacked([bus, time] if bus is not None else [time], encoding, data)
    placed = encoding.placed(("collective",))
    return Figure(
        "comms-bandwidth", "Collectives: bandwidth and time against message size",
        "Top: bus bandwidth, the message size over the median time scaled by the share each "
        "process moves over its link (nccl-tests: 2(n-1)/n for all_reduce, (n-1)/n for "
        "all_gather, reduce_scatter, all_to_all(v), gather and scatter, 1 for broadcast, "
        "reduce and "
        "point-to-point bandwidth tests; none for one process, which moves nothing over a "
        "link, nor for a point-to-point latency test, half a ping-pong, and no panel "
        "without one); its share of the link that limits it (NVLink "
        "between GPUs that all reach each other over it, else PCIe, the network across "
        "nodes; a bidirectional test's of both ways; none where the links were not read) "
        "is in the table: above 100% an all_reduce reduced in the switch (NVLS, SHARP). "
        "Bottom: the median time of one collective, whisker to p95, the slowest process's "
        "per iteration. One panel per collective, one colour per process count; "
        "point-to-point cells have three: latency (half a ping-pong), unidirectional and "
        "bidirectional bandwidth (two messages per time, one each way)."
        + (" With repeats, a time is the mean of the runs' medians (its bandwidths at it), "
           "the p95 the mean of the runs' p95s." if several_runs(data["repeats"]) else "")
        + encoding.note(), styled(chart), shows=encoding.defaults,
        table=NumbersTable([
            Column("collective", "collective"), Column("ranks", "processes", "d"),
            *[Column(a, encoding.title(a)) for a in placed],
            Column("size_bytes", "bytes", ",d"), Column("time_us", median, ",.1f"),
            Column("algbw_gbps", "algorithm GB/s", SIGNIFICANT_COLUMN),
            Column("busbw_gbps", "bus GB/s", SIGNIFICANT_COLUMN),
            *([Column("pct_of_link", "% of link", ".1f"), Column("link", "link")]
              if linked else [])],
            # the time's panels' rows: with the bus bandwidth's above them, the chart has
            # none at its top for the table to read
            required="time_us", frame=data))


def _bus_panels(data: pd.DataFrame, panels: list[str], encoding: encodings.Encoding, *,
                x: alt.X, colour: alt.Color, tooltip: list[alt.Tooltip]
                ) -> alt.FacetChart | None:
    """The bus bandwidth's panels (line_panels' lines and points): only of the rows that
    have one (a point-to-point latency test has none, nor has one process), so that no
    panel stays empty; None without any. Its dropdowns are made of every row, as the
    time's panels' are (declared once, on the stack: ``stacked``)."""
    rows = data[data["busbw_gbps"].notna()]
    if rows.empty:
        return None
    line = alt.Chart().encode(x=x, color=colour, tooltip=tooltip, **series_dash(encoding),
                              y=alt.Y("busbw_gbps:Q", title="bus bandwidth (GB/s)"))
    layered = filtered(alt.layer(line.mark_line(), line.mark_point(), data=rows), None,
                       encoding)
    shown = set(rows["panel"])
    return faceted(layered.properties(width=PANEL_WIDTH, height=PANEL_HEIGHT),
                   [p for p in panels if p in shown], encoding, data, dropdowns=False
                   ).resolve_scale(y="independent")


# The figures of the computation beside a size's collectives (``_overlap_values``).
OVERLAP_FIGURES = ("compute_us", "compute_p95_us", "compute_alone_us", "slowdown")


def _overlap_figures(rows: pd.DataFrame) -> pd.DataFrame:
    """Each run's OVERLAP_FIGURES, for data.measured to take their mean over the runs."""
    return pd.DataFrame([_overlap_values(t) for t in rows["extra"]], index=rows.index,
                        columns=list(OVERLAP_FIGURES))


def _overlap_values(text: object) -> dict[str, float | None]:
    """The computation beside a size's collectives, from the row's extra (JSON): its median
    and p95 there, its median alone, the ratio of the medians."""
    extra = json.loads(text) if isinstance(text, str) and text else {}
    beside = (extra.get("compute_overlapped") or {})
    alone = ((extra.get("compute_alone") or {}).get("time_s") or {})
    times = beside.get("time_s") or {}
    return {"compute_us": _us(times.get("median")), "compute_p95_us": _us(times.get("p95")),
            "compute_alone_us": _us(alone.get("median")), "slowdown": beside.get("slowdown")}


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else 1e6 * seconds


def overlap_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per size of a collective cell overlapped with a compute kernel: the
    collectives chart's columns and the computation's times beside them and alone."""
    if "compute_kernel" not in frame:
        return pd.DataFrame()
    kernel = frame["compute_kernel"]
    # Each figure the mean over the cell's runs of each run's (data.measured).
    rows = measured(frame[kernel.notna() & (kernel != NO_KERNEL)], KIND, _overlap_figures)
    if rows.empty:
        return pd.DataFrame()
    data = _sizes_frame(rows)
    return pd.concat([data, rows[list(OVERLAP_FIGURES)]], axis=1).dropna(subset=["slowdown"])


def overlap_figure(frame: pd.DataFrame) -> Figure | None:
    """How much slower the compute kernel runs beside each message size's collectives than
    alone (PARAM's comms-compute mode)."""
    data = overlap_frame(frame)
    if data.empty:
        return None
    data, panels, encoding, x, colour, tips = _by_size(data)
    titles = {field: runs_title(data["repeats"], title) for field, title in (
        ("compute_us", "computation beside (µs)"), ("compute_alone_us", "computation alone (µs)"),
        ("compute_p95_us", "p95 (µs)"), ("slowdown", "slowdown"))}
    tips = [*tips,
            alt.Tooltip("compute_us:Q", title=titles["compute_us"], format=",.1f"),
            alt.Tooltip("compute_alone_us:Q", title=titles["compute_alone_us"], format=",.1f"),
            alt.Tooltip("slowdown:Q", title=titles["slowdown"], format=".2f")]
    chart = line_panels(data, panels, encoding, x=x, colour=colour, tooltip=tips,
                        y=alt.Y("slowdown:Q", title=runs_title(data["repeats"],
                                                               "computation's time / alone")),
                        field="slowdown")
    placed = encoding.placed(("collective",))
    return Figure(
        "comms-overlap", "Collectives beside computation: the computation's slowdown",
        "Cells that run a compute kernel beside each iteration's collectives "
        "(compute_kernel; PARAM's comms-compute mode): the median time of the kernels "
        "beside the collectives of each message size over their median time alone, the "
        "slowest process's (1: the communication costs the computation nothing). The "
        "collectives' own time beside the kernels is in the bandwidth chart, a line style "
        "apart from the same collectives alone."
        + (" With repeats, each figure is the mean over the runs of each run's."
           if several_runs(data["repeats"]) else "") + encoding.note(), styled(chart),
        shows=encoding.defaults,
        table=NumbersTable([
            Column("collective", "collective"), Column("ranks", "processes", "d"),
            *[Column(a, encoding.title(a)) for a in placed],
            Column("size_bytes", "bytes", ",d"),
            Column("compute_us", titles["compute_us"], ",.1f"),
            Column("compute_p95_us", titles["compute_p95_us"], ",.1f"),
            Column("compute_alone_us", runs_title(data["repeats"], "alone (µs)"), ",.1f"),
            Column("slowdown", titles["slowdown"], ".2f")], required="slowdown"))
