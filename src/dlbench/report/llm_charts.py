"""Charts of language-model inference cells (dlbench.llm): time to first token and time per
output token against batch size, and the latency/throughput trade-off a server chooses on.

Two statistics of decode, never one for the other: TPOT, a generation's mean step time (its
p50, p90 and p99 over the generations, the decode row's extra ``tpot_*_s``), charted with
its whisker; and ITL, the steps' own times, whose median is the decode row's time (the
cell's time across runs, at which decode's GB/s is figured), in the table as ITL.
"""

from __future__ import annotations

import json

import altair as alt
import pandas as pd

from dlbench import axes
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
    model_label,
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
    batch_axis,
    styled,
)

KIND = "llm_inference"
# The chart's roles: panels (model, precision), x (batch size), colour (prompt length);
# model_opts is named in the model's label.
ROLES = ("model", "precision", "batch_size", "prompt_length", "model_opts")
# Axes an inference cell may differ in besides its roles: the system, then every other axis
# of the kind that is a column of the table (num_batches, warmup_until_steady, ...), so that
# no line joins two cells that differ in one, an axis added later included.
OTHER_AXES = ("system", *(a.name for a in axes.of_kind(KIND)
                          if a.column and a.name not in ROLES))

# A language-model cell's batches are whole generations (dlbench.llm.runner), so its
# legends and titles count generations, not iterations.
COUNTS = {"num_batches": ("generation", "generations")}
TITLES = {"num_batches": "measured generations", "num_warmup_batches": "warm-up generations"}


# The llm frame's decode bandwidth fields -> the aggregate's columns of the decode row.
DECODE_BANDWIDTH = {"decode_gbps": "gbps", "decode_pct_of_peak_gbps": "pct_of_peak_gbps",
                    "decode_pct_of_measured_gbps": "pct_of_measured_gbps"}


def _number(row: pd.Series | None, column: str) -> float | None:
    value = None if row is None else row.get(column)
    return None if value is None or pd.isna(value) else float(value)


def _of_cell(prefill: pd.Series, decode: pd.Series | None, column: str) -> float | None:
    """A figure of the cell: its decode row's where that has it (TPOT's percentiles),
    else its prefill row's (both carry the cell's own, such as its peak memory)."""
    value = _number(decode, column)
    return value if value is not None else _number(prefill, column)


def _extra(text: object) -> dict:
    return json.loads(text) if isinstance(text, str) and text else {}


# What a run records of its own in its rows' extra (the cell's and the measurement's
# merged): the decode's TPOT percentiles over its generations, its KV cache and peak memory.
# Not the cell's ``tpot_s``: that is decode's median step, ITL p50 (dlbench.llm.runner).
EXTRA_FIGURES = ("tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "kv_cache_bytes",
                 "peak_memory_bytes", "output_tokens_per_s")
# What peak_memory_bytes counts, by device (dlbench.llm.runner.peak_memory): on a CPU the
# process's peak RSS over its whole life, interpreter, framework and build included.
PEAK_MEMORY_OF = {"gpu": "the measured generations (torch's allocations)",
                  "cpu": "the process (peak RSS over its life, not the model's own)"}


def _extra_figures(rows: pd.DataFrame) -> pd.DataFrame:
    """Each run's EXTRA_FIGURES, for data.measured to take their mean over the runs."""
    extras = [_extra(text) for text in rows["extra"]] if "extra" in rows else [{}] * len(rows)
    return pd.DataFrame([{k: e.get(k) for k in EXTRA_FIGURES} for e in extras],
                        index=rows.index, columns=list(EXTRA_FIGURES))


def llm_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per ok inference cell: TTFT, TPOT (p50, p90, p99), ITL (p50), output
    tokens/s, memory; each the cell's across its runs (the mean over them of each run's
    figure, or of its medians)."""
    rows = measured(frame, KIND, _extra_figures)
    if rows.empty:
        return rows
    # Times and rates at the cell's time (the mean of its runs' medians), not its last run's.
    rows = rows.assign(model=model_label(rows), cell_time_s=cell_time(rows),
                       throughput=numeric(rows, "cell_throughput").fillna(rows["throughput"]),
                       **{column: at_cell_time(rows, column)
                          for column in DECODE_BANDWIDTH.values()})
    out = []
    for cell, group in rows.groupby("cell", sort=False):
        by_pass = {r["pass"]: r for _, r in group.iterrows()}
        prefill, decode = by_pass.get("prefill"), by_pass.get("decode")
        if prefill is None:
            continue
        figure = {column: _of_cell(prefill, decode, column) for column in EXTRA_FIGURES}
        batch, output = int(prefill["batch_size"]), int(prefill["output_length"])
        ttft = float(prefill["cell_time_s"])
        tpot = figure["tpot_p50_s"]
        out.append({
            "cell": cell, "model": prefill["model"], "precision": prefill["precision"],
            "batch_size": batch,
            "prompt_length": int(prefill["prompt_length"]),
            "output_length": output,
            **{axis: prefill.get(axis) for axis in OTHER_AXES if axis not in ("output_length",)},
            "repeats": int(numeric(group, "repeats").fillna(1).max()),
            "ttft_ms": 1e3 * ttft,
            "tpot_ms": _ms(tpot),
            "tpot_p90_ms": _ms(figure["tpot_p90_s"]),
            "tpot_p99_ms": _ms(figure["tpot_p99_s"]),
            # the decode row's time: its steps' median (none without decode steps)
            "itl_ms": _ms(_number(decode, "cell_time_s")),
            # The runner's (over its generations' own times), else, in a result older
            # than it, a generation at TTFT and TPOT p50.
            "output_tokens_per_s": figure["output_tokens_per_s"]
            or _output_rate(batch, output, ttft, tpot),
            "prefill_tokens_per_s": float(prefill["throughput"]),
            # Decode's memory traffic (a floor: weights and KV cache, dlbench.models.llm)
            # over its step time, against the memory's peak and the measured copy.
            **{key: _number(decode, column) for key, column in DECODE_BANDWIDTH.items()},
            "kv_cache_mib": (figure["kv_cache_bytes"] or 0) / 2**20 or None,
            "peak_memory_mib": (figure["peak_memory_bytes"] or 0) / 2**20 or None,
            "peak_memory_of": PEAK_MEMORY_OF.get(prefill.get("device")),
        })
    return pd.DataFrame(out)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def _output_rate(batch: int, output: int, ttft: float, tpot: float | None) -> float | None:
    """Output tokens/s of a typical generation: the batch's output tokens over its TTFT
    and its output - 1 steps at TPOT p50 (the figures beside it); none where TPOT is
    unknown, except without decode steps (output_length 1), where TTFT is the whole."""
    if output == 1:
        return batch / ttft
    return None if tpot is None else batch * output / (ttft + (output - 1) * tpot)


def _prepared(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str], encodings.Encoding] | None:
    data = llm_frame(frame)
    if data.empty:
        return None
    encoding = encodings.choose(data, panels=("model", "precision"), colour="prompt_length",
                                candidates=OTHER_AXES, titles=TITLES)
    data = data.assign(variant=encodings.labels(data, encoding.series, COUNTS))
    data, panels = with_panel(data, encoding.panels)
    return data, panels, encoding


def _colour() -> alt.Color:
    return alt.Color("prompt_length:O", title="prompt tokens", scale=alt.Scale(scheme="viridis"))


def _tooltip(data: pd.DataFrame, encoding: encodings.Encoding) -> list[alt.Tooltip]:
    return [alt.Tooltip("model:N"), alt.Tooltip("precision:N"),
            alt.Tooltip("batch_size:Q", title="batch size"),
            alt.Tooltip("prompt_length:Q", title="prompt tokens"),
            alt.Tooltip("output_length:Q", title="output tokens"),
            *[alt.Tooltip(f"{a}:N", title=encoding.title(a))
              for a in encoding.placed(("output_length",))],
            alt.Tooltip("ttft_ms:Q", title=time_title(data["repeats"], "ms", "TTFT"),
                        format=",.3f"),
            alt.Tooltip("tpot_ms:Q", title=runs_title(data["repeats"], "TPOT p50 (ms)"),
                        format=",.3f"),
            alt.Tooltip("tpot_p99_ms:Q", title=runs_title(data["repeats"], "TPOT p99 (ms)"),
                        format=",.3f"),
            alt.Tooltip("itl_ms:Q", title=time_title(data["repeats"], "ms", "ITL"),
                        format=",.3f"),
            alt.Tooltip("output_tokens_per_s:Q", title="output tokens/s", format=",.1f"),
            alt.Tooltip("decode_gbps:Q", title="decode GB/s (floor)", format=SIGNIFICANT_TIP)]


def _cell_columns(encoding: encodings.Encoding) -> list[Column]:
    """A numbers table's columns that tell its cells apart."""
    placed = encoding.placed(("model", "precision"))
    return [Column("model", "model"), Column("precision", "precision"),
            *[Column(a, encoding.title(a)) for a in placed],
            Column("batch_size", "batch", "d"), Column("prompt_length", "prompt", "d"),
            Column("output_length", "output", "d")]


def _numbers(data: pd.DataFrame, encoding: encodings.Encoding) -> NumbersTable:
    return NumbersTable([
        *_cell_columns(encoding),
        Column("ttft_ms", time_title(data["repeats"], "ms", "TTFT"), ",.3f"),
        Column("tpot_ms", runs_title(data["repeats"], "TPOT p50 (ms)"), ",.3f"),
        Column("tpot_p90_ms", runs_title(data["repeats"], "p90 (ms)"), ",.3f"),
        Column("tpot_p99_ms", runs_title(data["repeats"], "p99 (ms)"), ",.3f"),
        Column("itl_ms", time_title(data["repeats"], "ms", "ITL"), ",.3f"),
        Column("output_tokens_per_s", "output tokens/s", ",.1f"),
        Column("prefill_tokens_per_s", "prefill tokens/s", ",.1f"),
        Column("decode_gbps", "decode GB/s", SIGNIFICANT_COLUMN),
        Column("decode_pct_of_peak_gbps", "% of memory peak", ",.1f"),
        Column("decode_pct_of_measured_gbps", "% of measured copy", ",.1f"),
        Column("kv_cache_mib", "KV cache (MiB)", ",.1f"),
        Column("peak_memory_mib", runs_title(data["repeats"], "peak memory (MiB)"), ",.1f"),
        Column("peak_memory_of", "peak memory of")],
        required="ttft_ms")


def latency_figure(frame: pd.DataFrame) -> Figure | None:
    """TTFT and TPOT (p50 over the generations, whisker to their p99) against batch size:
    two rows of panels."""
    prepared = _prepared(frame)
    if prepared is None:
        return None
    data, panels, encoding = prepared
    x = alt.X("batch_size:Q", title="batch size", axis=batch_axis(data["batch_size"].unique()),
              scale=alt.Scale(type="log", base=2, nice=False, padding=12))
    tips = _tooltip(data, encoding)
    def panels_of(field: str, title: str, whisker: str | None = None) -> alt.FacetChart:
        y = alt.Y(f"{field}:Q", title=title, scale=alt.Scale(zero=True))
        return line_panels(data, panels, encoding, x=x, colour=_colour(), tooltip=tips, y=y,
                           field=field, whisker=whisker, dropdowns=False)

    p99 = "tpot_p99_ms" if data["tpot_p99_ms"].notna().any() else None
    chart = stacked([panels_of("ttft_ms", "time to first token (ms)"),
                     panels_of("tpot_ms", "time per output token, TPOT p50 (ms)", p99)],
                    encoding, data)
    return Figure("llm-latency", "Time to first token and per output token",
                  "Top: the prefill of the batch's prompts (TTFT); bottom: each further token "
                  "(TPOT, a generation's mean step time: p50 over the generations, whisker to "
                  "their p99, interpolated between the generations' times: from fewer than "
                  "100 generations, p99 is near the slowest one, as p90 from fewer than 10), "
                  "from a static KV cache, every timed step synchronised. The "
                  "table's ITL is the steps' own median (the inter-token latency), at which "
                  "decode's GB/s is figured; output tokens/s is a generation's at TTFT and "
                  "TPOT p50."
                  + (" With repeats, TTFT and ITL are the means of the runs' medians, TPOT's "
                     "percentiles and peak memory the means of the runs' own."
                     if several_runs(data["repeats"]) else "")
                  + " One panel per model and precision, one line per prompt "
                  "length. The table's decode GB/s is the weights and KV cache a step reads "
                  "at least over its time: decode is bound by them, so its share of "
                  "the memory's peak (or of the measured copy) is how far it is from the "
                  "hardware. Peak memory is on a GPU torch's allocations over the measured "
                  "generations, on a CPU the process's peak RSS over its whole life "
                  "(interpreter, framework and build included), not the model's own."
                  + encoding.note(), styled(chart), shows=encoding.defaults,
                  table=_numbers(data, encoding))


def tradeoff_figure(frame: pd.DataFrame) -> Figure | None:
    """The serving trade-off: output tokens/s (throughput) against TPOT p50 (latency), one
    point per batch size, joined in batch order."""
    prepared = _prepared(frame)
    if prepared is None:
        return None
    data, panels, encoding = prepared
    data = data[data["output_tokens_per_s"].notna() & data["tpot_ms"].notna()]
    if data.empty or data["batch_size"].nunique() < 2:
        return None
    base = alt.Chart().encode(
        x=alt.X("output_tokens_per_s:Q", title="output tokens/s", scale=alt.Scale(zero=True)),
        y=alt.Y("tpot_ms:Q", title="time per output token, TPOT p50 (ms)",
                scale=alt.Scale(zero=True)),
        color=_colour(), order="batch_size:Q", tooltip=_tooltip(data, encoding),
        # Each line style a cell's other axes (two systems' curves told apart).
        **series_dash(encoding))
    labels = base.mark_text(dx=8, dy=-6, fontSize=9, align="left").encode(text="batch_size:Q")
    layered = filtered(alt.layer(base.mark_line(), base.mark_point(), labels, data=data), None,
                       encoding).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    chart = faceted(layered, panels, encoding, data).resolve_scale(x="independent",
                                                                   y="independent")
    return Figure("llm-tradeoff", "Throughput against latency",
                  "Each point a batch size (labelled): a device with work to spare serves "
                  "more output tokens/s at a larger batch, each token taking longer; a "
                  "line that turns back (fewer tokens/s at a larger batch) marks a device "
                  "already busy at the smaller one." + encoding.note(), styled(chart),
                  shows=encoding.defaults, table=NumbersTable([
                      *_cell_columns(encoding),
                      Column("output_tokens_per_s", "output tokens/s", ",.1f"),
                      Column("tpot_ms", runs_title(data["repeats"], "TPOT p50 (ms)"), ",.3f")],
                      required="tpot_ms"))
