"""Charts of the resource monitor's figures for model cells: energy efficiency, power and
peak memory against batch size.

Energy is charted only where a cell has it: a host without energy counters records null
and says why (``energy_note``), and the report quotes that note instead of drawing zeros.
A cell of several runs shows the mean over its runs of each run's figure (data.measured),
and the titles say so (data.runs_title). What each cell's energy counts (``energy_sources``:
its GPUs, and the host's RAPL where readable) is in its tooltip and numbers, and the
captions say where the cells drawn together counted differently (``sources_note``).
"""

from __future__ import annotations

import re
from html import escape

import altair as alt
import pandas as pd

from dlbench.report.data import (
    ENERGY_SOURCES,
    NO_TEXT,
    RUNS_DIFFER,
    runs_title,
    several_runs,
)
from dlbench.report.encodings import Encoding
from dlbench.report.model_charts import (
    axis_columns,
    by_batch,
    faceted,
    filtered,
    lines_by_batch,
    model_tooltip,
    series_styles,
    throughput_unit,
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
    nouns,
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


# A run's label in a note of runs that differ (data.texts_over_runs): "... (runs 1, 3 of 3)"
# A run's note where it has no energy figure (dlbench.monitor's wording).
_NO_ENERGY, _NO_FIGURE = "not available on this host", "no energy figure"
_RUNS_LABEL = re.compile(r" \((?:run|runs) [\d, ]+ of \d+\)$")


def _partial_notes(frame: pd.DataFrame) -> str:
    """What the energy of these cells leaves out (their notes say ``partial: ...``), each
    once: a note of runs that differ gives its runs' reasons, without their labels (the
    tooltip has those)."""
    reasons = set()
    for note in frame["energy_note"].dropna().astype(str):
        for part in note.split("; ") if _RUNS_LABEL.search(note) else [note]:
            reason = _RUNS_LABEL.sub("", part.strip())
            # A run with no energy figure is not in the cell's mean: not its reason.
            if reason.startswith(_NO_ENERGY) or _NO_FIGURE in reason:
                continue
            reason = reason.removeprefix("partial: ").strip()
            if reason and reason != NO_TEXT:
                reasons.add(reason)
    return "; ".join(sorted(reasons))


# The rows a chart of energy or power draws (the others have no energy to show).
WITH_ENERGY = "isValid(datum.energy_j) && datum.energy_j > 0"


def _cells_with(models: pd.DataFrame, column: str
                ) -> tuple[pd.DataFrame, pd.DataFrame, list[str], Encoding] | None:
    """The model cells with energy that have ``column``, and the rows, panels and
    encoding of every chart against batch size (model_charts.by_batch; the chart keeps
    its own rows with a filter); None when no cell has ``column``."""
    frame = with_energy(models)
    frame = frame[frame[column].notna()] if not frame.empty else frame
    if frame.empty:
        return None
    return (frame, *by_batch(models))


def _numbers(encoding: Encoding, columns: list[Column], required: str) -> NumbersTable:
    return NumbersTable([*axis_columns(encoding), *columns], required=required)


SOURCES_TITLE = "energy counts"


def _sources_tooltip(frame: pd.DataFrame) -> list[alt.Tooltip]:
    """The tooltip line of what a point's energy counts (none for a frame without it)."""
    return [alt.Tooltip(f"{ENERGY_SOURCES}:N", title=SOURCES_TITLE)] \
        if ENERGY_SOURCES in frame else []


def _sources_column(frame: pd.DataFrame) -> list[Column]:
    return [Column(ENERGY_SOURCES, SOURCES_TITLE)] if ENERGY_SOURCES in frame else []


def _who_counted(sources: pd.Series, systems: pd.Series) -> str:
    """Each system's sources, e.g. "a: gpu:nvml_total_energy+host:rapl; b:
    gpu:nvml_total_energy"; a system whose cells differ gives each value's cells."""
    parts = []
    for system in sorted(systems.unique()):
        counts = sources[systems == system].value_counts()
        what = (str(counts.index[0]) if len(counts) == 1 else
                ", ".join(f"{value} ({nouns(n, 'cell')})" for value, n in sorted(counts.items())))
        parts.append(f"{system}: {what}" if system else what)
    return "; ".join(parts)


def sources_note(cells: pd.DataFrame, models: pd.DataFrame) -> str:
    """The captions' word on the cells drawn together (``cells``, one row each) whose
    energy counts different sources: which systems (or how many cells of one) counted
    what; and the cells of ``models`` left out because their runs counted differently
    (data.measured gives them no energy figure). Empty where all counted the same or
    nothing says what (a table older than the column)."""
    notes = []
    if ENERGY_SOURCES in models:
        mixed = models[ENERGY_SOURCES].map(
            lambda v: isinstance(v, str) and RUNS_DIFFER in v).astype(bool)
        if mixed.any():
            notes.append(f"{nouns(int(mixed.sum()), 'cell')} without a figure: their runs counted "
                         "different energy sources (a mean of them would be of neither).")
    sources = cells[ENERGY_SOURCES].dropna().astype(str) if ENERGY_SOURCES in cells \
        else pd.Series(dtype=str)
    if sources.nunique() > 1:
        systems = (cells.loc[sources.index, "system"].fillna("").astype(str)
                   if "system" in cells else pd.Series("", index=sources.index))
        notes.append("Cells counted different energy sources (a host without readable "
                     "RAPL counts only its GPUs and looks more efficient): "
                     f"{_who_counted(sources, systems)}.")
    return "".join(f" {n}" for n in notes)


def energy_figure(models: pd.DataFrame) -> Figure | None:
    selected = _cells_with(models, "samples_per_joule")
    if selected is None:
        return None
    cells, frame, panels, encoding = selected
    # What the throughput counts (samples, a language model's tokens, deepwave's shots):
    # the monitor's items are the measured iterations' (dlbench.monitor).
    items = throughput_unit(cells).removesuffix("/s")
    repeats = frame["repeats"]
    per_joule, energy, power = (runs_title(repeats, t) for t in (
        f"{items}/J", "energy (J)", "mean power (W)"))
    tips = model_tooltip(frame, [alt.Tooltip("samples_per_joule:Q", title=per_joule,
                                             format=SIGNIFICANT_TIP),
                            alt.Tooltip("energy_j:Q", title=energy, format=",.1f"),
                            alt.Tooltip("power_mean_w:Q", title=power, format=",.1f"),
                            *_sources_tooltip(frame),
                            alt.Tooltip("energy_note:N", title="note")], encoding)
    chart = lines_by_batch(frame, y="samples_per_joule",
                           y_title=runs_title(repeats, f"{items} per joule"),
                           colour=_precision_colour(frame), tooltip=tips, panels=panels,
                           encoding=encoding, where=WITH_ENERGY)
    partial = _partial_notes(cells)
    caption = (f"{items.capitalize()} processed by the measured iterations divided by the "
               "energy they took (GPUs and, where readable, the host's RAPL counters).")
    if partial:
        caption += f" Sources not counted: {partial}."
    return Figure("energy-efficiency", "Energy efficiency against batch size",
                  caption + sources_note(cells, models) + _runs_note(repeats) + encoding.note(),
                  styled(chart), shows=encoding.defaults, table=_numbers(encoding, [
                      Column("samples_per_joule", per_joule, SIGNIFICANT_COLUMN),
                      Column("energy_j", energy, ",.1f"),
                      Column("power_mean_w", power, ",.1f"), *_sources_column(frame)],
                      "samples_per_joule"))


def _runs_note(repeats: pd.Series) -> str:
    """The captions' word on cells of several runs (none where every cell ran once)."""
    return (" A cell run more than once shows the mean over its runs of each run's figure."
            if several_runs(repeats) else "")


def power_figure(models: pd.DataFrame) -> Figure | None:
    """Mean power as lines, the highest sample as a tick above it."""
    selected = _cells_with(models, "power_mean_w")
    if selected is None:
        return None
    cells, frame, panels, encoding = selected
    repeats = frame["repeats"]
    mean_w, max_w = runs_title(repeats, "mean power (W)"), runs_title(repeats, "max power (W)")
    tips = model_tooltip(frame, [alt.Tooltip("power_mean_w:Q", title=mean_w, format=",.1f"),
                            alt.Tooltip("power_max_w:Q", title=max_w, format=",.1f"),
                            *_sources_tooltip(frame)], encoding)
    x = alt.X("batch_size:Q", title="batch size", axis=batch_axis(frame["batch_size"].unique()),
              scale=alt.Scale(type="log", base=2, nice=False, padding=12))
    colour = _precision_colour(frame)
    base = alt.Chart().encode(x=x, color=colour, detail="variant:N", tooltip=tips)
    # The mean's line and points take the line styles of the other axes (the max's rule
    # and tick keep their own dash): two systems' lines are told apart as elsewhere.
    mean = series_styles(base, frame, colour, encoding).encode(
        y=alt.Y("power_mean_w:Q", title="power (W): mean, tick at max"
                + (" (each the mean over the runs)" if several_runs(repeats) else ""),
                scale=alt.Scale(zero=True)))
    layers = [mean.mark_line(), mean.mark_point()]
    if cells["power_max_w"].notna().any():
        peak = base.transform_filter("isValid(datum.power_max_w)")
        layers += [peak.mark_rule(strokeDash=[2, 2], opacity=0.7).encode(
                       y="power_mean_w:Q", y2="power_max_w:Q"),
                   peak.mark_tick(orient="horizontal", thickness=2, size=14).encode(y="power_max_w:Q")]
    chart = filtered(alt.layer(*layers, data=frame), f"{WITH_ENERGY} && isValid(datum.power_mean_w)",
                     encoding).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    chart = faceted(chart, panels, encoding, frame).resolve_scale(y="independent")
    return Figure("power", "Power against batch size",
                  "Mean power over the measured iterations (energy over time) and the highest "
                  "draw over one sampling interval (a GPU's from its energy counter)."
                  + sources_note(cells, models) + _runs_note(repeats) + encoding.note(),
                  styled(chart), shows=encoding.defaults, table=_numbers(encoding, [
                      Column("power_mean_w", mean_w, ",.1f"),
                      Column("power_max_w", max_w, ",.1f"), *_sources_column(frame)],
                      "power_mean_w"))


def _memory_figure(models: pd.DataFrame, column: str, *, name: str, title: str,
                   what: str, caption: str) -> Figure | None:
    cells = _numeric(models, [column, "max_memory_allocated_bytes"])
    cells = cells[cells[column].notna() & (cells[column] > 0)] if not cells.empty else cells
    if cells.empty:
        return None
    unit, size = ("GiB", GIB) if cells[column].max() >= GIB else ("MiB", MIB)
    frame, panels, encoding = by_batch(models)
    repeats = frame["repeats"]
    # In the chart's spec, so that every chart against batch size shares the page's rows.
    memory, allocated = f"{column}_{unit}", f"max_memory_allocated_{unit}"
    extra = [alt.Tooltip(f"{memory}:Q", title=runs_title(repeats, f"{what} ({unit})"),
                         format=",.2f")]
    with_allocated = (column == "peak_device_memory_bytes"
                      and cells["max_memory_allocated_bytes"].notna().any())
    if with_allocated:
        extra.append(alt.Tooltip(f"{allocated}:Q",
                                 title=runs_title(repeats, f"PyTorch max allocated ({unit})"),
                                 format=",.2f"))
    chart = lines_by_batch(frame, y=memory, y_title=runs_title(repeats, f"{what} ({unit})"),
                           colour=_precision_colour(frame),
                           tooltip=model_tooltip(frame, extra, encoding), panels=panels,
                           encoding=encoding,
                           where=f"isValid(datum.{column}) && datum.{column} > 0",
                           calculate={memory: f"datum.{column} / {size}",
                                      allocated: f"datum.max_memory_allocated_bytes / {size}"})
    columns = [Column(column, runs_title(repeats, f"{what} (bytes)"), ",d")]
    if with_allocated:
        columns.append(Column("max_memory_allocated_bytes",
                              runs_title(repeats, "PyTorch max allocated (bytes)"), ",d"))
    return Figure(name, title, caption + _runs_note(repeats) + encoding.note(), styled(chart),
                  shows=encoding.defaults, table=_numbers(encoding, columns, column))


def host_memory_figure(models: pd.DataFrame) -> Figure | None:
    """The runner's and its loader processes' peak PSS (shared pages counted once) where
    cells have it; their summed RSS, which counts the pages forked loader workers share
    with their parent once per worker, only where none has (results older than PSS)."""
    columns = ["peak_host_pss_bytes", "peak_host_rss_bytes"]
    frame = _numeric(models, columns) if set(columns) <= set(models.columns) else None
    with_pss = frame["peak_host_pss_bytes"].notna() if frame is not None else None
    if with_pss is None or not with_pss.any():
        return _memory_figure(
            models, "peak_host_rss_bytes", name="peak-host-memory",
            title="Peak host memory against batch size", what="peak host RSS",
            caption="Largest resident set of the runner and its loader processes, summed "
                    "(a page they share counts once per process that maps it).")
    older = frame.loc[~with_pss & frame["peak_host_rss_bytes"].notna(), "cell"].nunique()
    left_out = (f" {nouns(older, 'cell')} recorded only the RSS sum (results older than PSS), not "
                "shown." if older else "")
    return _memory_figure(
        models, "peak_host_pss_bytes", name="peak-host-memory",
        title="Peak host memory against batch size", what="peak host PSS",
        caption="Largest proportional set size (PSS) of the runner and its loader processes, "
                "summed: a page they share is divided among them, so forked loader workers "
                "add only what they hold of their own." + left_out)


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
    others = f" (and {nouns(len(counts) - 1, 'other reason')})" if len(counts) > 1 else ""
    if len(lacking) == len(frame):
        lead = "No energy was measured"
    else:
        lead = f"{lacking['cell'].nunique()} of {frame['cell'].nunique()} cells have no energy"
    return (f'<p class="note">{escape(lead)}: '
            f"<q>{escape(most)}</q>{escape(others)}.</p>")
