"""Charts of the resource monitor's figures for model cells: energy efficiency, power and
peak memory against batch size.

Energy is charted only where a cell has it: a host without energy counters records null
and says why (``energy_note``), and the report quotes that note instead of drawing zeros.
"""

from __future__ import annotations

from html import escape

import altair as alt
import pandas as pd

from dlbench.report.model_charts import lines_by_batch, model_tooltip, with_panel
from dlbench.report.style import (
    PANEL_HEIGHT,
    PANEL_WIDTH,
    Figure,
    batch_axis,
    facet_columns,
    precision_scale,
    styled,
)

GIB = 1024**3
MIB = 1024**2


def _numeric(models: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``models`` with ``columns`` as floats (an older table reads them as empty objects)."""
    if models.empty:
        return models
    return models.assign(**{c: pd.to_numeric(models[c], errors="coerce") for c in columns})


def with_energy(models: pd.DataFrame) -> pd.DataFrame:
    frame = _numeric(models, ["energy_j", "samples_per_joule", "power_mean_w", "power_max_w"])
    if frame.empty:
        return frame
    return frame[frame["energy_j"].notna() & (frame["energy_j"] > 0)]


def _precision_colour(frame: pd.DataFrame) -> alt.Color:
    return alt.Color("precision:N", scale=precision_scale(list(frame["precision"].unique())))


def _partial_notes(frame: pd.DataFrame) -> str:
    """What the energy of these cells leaves out (their notes say ``partial: ...``)."""
    notes = frame["energy_note"].dropna().astype(str)
    notes = notes.str.removeprefix("partial: ").str.strip()
    return "; ".join(sorted(set(notes[notes != ""])))


def _cells_with(models: pd.DataFrame, column: str) -> tuple[pd.DataFrame, list[str]] | None:
    """The model cells that have ``column`` and their panels per model and phase; None when
    there is none."""
    frame = with_energy(models)
    frame = frame[frame[column].notna()] if not frame.empty else frame
    if frame.empty:
        return None
    return with_panel(frame, ["model", "phase"])


def energy_figure(models: pd.DataFrame) -> Figure | None:
    selected = _cells_with(models, "samples_per_joule")
    if selected is None:
        return None
    frame, panels = selected
    tips = model_tooltip(frame, [alt.Tooltip("samples_per_joule:Q", title="samples/J", format=",.2f"),
                            alt.Tooltip("energy_j:Q", title="energy (J)", format=",.1f"),
                            alt.Tooltip("power_mean_w:Q", title="mean power (W)", format=",.1f"),
                            alt.Tooltip("energy_note:N", title="note")])
    chart = lines_by_batch(frame, y="samples_per_joule", y_title="samples per joule",
                           colour=_precision_colour(frame), tooltip=tips, panels=panels)
    partial = _partial_notes(frame)
    caption = ("Samples processed by the measured iterations divided by the energy they took "
               "(GPUs and, where readable, the host's RAPL counters).")
    if partial:
        caption += f" Sources not counted: {partial}."
    return Figure("energy-efficiency", "Energy efficiency against batch size", caption,
                  styled(chart))


def power_figure(models: pd.DataFrame) -> Figure | None:
    """Mean power as lines, the highest sample as a tick above it."""
    selected = _cells_with(models, "power_mean_w")
    if selected is None:
        return None
    frame, panels = selected
    tips = model_tooltip(frame, [alt.Tooltip("power_mean_w:Q", title="mean power (W)", format=",.1f"),
                            alt.Tooltip("power_max_w:Q", title="max power (W)", format=",.1f")])
    x = alt.X("batch_size:Q", title="batch size", axis=batch_axis(frame["batch_size"].unique()),
              scale=alt.Scale(type="log", base=2, nice=False, padding=12))
    base = alt.Chart().encode(x=x, color=_precision_colour(frame), detail="variant:N",
                              tooltip=tips)
    mean = base.encode(y=alt.Y("power_mean_w:Q", title="power (W): mean, tick at max",
                               scale=alt.Scale(zero=True)))
    layers = [mean.mark_line(), mean.mark_point()]
    if frame["power_max_w"].notna().any():
        peak = base.transform_filter("isValid(datum.power_max_w)")
        layers += [peak.mark_rule(strokeDash=[2, 2], opacity=0.7).encode(
                       y="power_mean_w:Q", y2="power_max_w:Q"),
                   peak.mark_tick(orient="horizontal", thickness=2, size=14).encode(y="power_max_w:Q")]
    chart = alt.layer(*layers, data=frame).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    chart = chart.facet(facet=alt.Facet("panel:N", title=None, sort=panels),
                        columns=facet_columns(len(panels))).resolve_scale(y="independent")
    return Figure("power", "Power against batch size",
                  "Mean power over the measured iterations (energy over time) and the highest "
                  "sampled draw.", styled(chart))


def _memory_figure(models: pd.DataFrame, column: str, *, name: str, title: str,
                   what: str, caption: str) -> Figure | None:
    frame = _numeric(models, [column, "max_memory_allocated_bytes"])
    frame = frame[frame[column].notna() & (frame[column] > 0)] if not frame.empty else frame
    if frame.empty:
        return None
    unit, size = ("GiB", GIB) if frame[column].max() >= GIB else ("MiB", MIB)
    frame = frame.assign(memory=frame[column] / size,
                         allocated=frame["max_memory_allocated_bytes"] / size)
    frame, panels = with_panel(frame, ["model", "phase"])
    extra = [alt.Tooltip("memory:Q", title=f"{what} ({unit})", format=",.2f")]
    if column == "peak_device_memory_bytes" and frame["allocated"].notna().any():
        extra.append(alt.Tooltip("allocated:Q", title=f"PyTorch max allocated ({unit})",
                                 format=",.2f"))
    chart = lines_by_batch(frame, y="memory", y_title=f"{what} ({unit})",
                           colour=_precision_colour(frame), tooltip=model_tooltip(frame, extra),
                           panels=panels)
    return Figure(name, title, caption, styled(chart))


def host_memory_figure(models: pd.DataFrame) -> Figure | None:
    return _memory_figure(
        models, "peak_host_rss_bytes", name="peak-host-memory",
        title="Peak host memory against batch size", what="peak host RSS",
        caption="Largest resident set of the runner and its loader processes, summed.")


def device_memory_figure(models: pd.DataFrame) -> Figure | None:
    return _memory_figure(
        models, "peak_device_memory_bytes", name="peak-device-memory",
        title="Peak device memory against batch size", what="peak device memory",
        caption="Largest memory used on a GPU of the cell (NVML: includes the CUDA context "
                "and the caching allocator's reserve).")


def energy_note(models: pd.DataFrame) -> str | None:
    """Why energy is missing, quoted from the cells: instead of the energy charts when no
    cell has energy, beside them when only some lack it. None when every cell has energy
    or no cell says why."""
    if models.empty:
        return None
    frame = _numeric(models, ["energy_j"])
    lacking = frame[frame["energy_j"].isna()]
    notes = lacking["energy_note"].dropna().astype(str)
    notes = notes[notes != ""]
    if notes.empty:
        return None
    counts = notes.value_counts()
    most = str(counts.index[0])
    others = f" (and {len(counts) - 1} other reason(s))" if len(counts) > 1 else ""
    if len(lacking) == len(frame):
        lead = "No energy was measured"
    else:
        lead = f"{lacking['cell'].nunique()} of {frame['cell'].nunique()} cells have no energy"
    return (f'<p class="note">{escape(lead)}: '
            f"<q>{escape(most)}</q>{escape(others)}.</p>")
