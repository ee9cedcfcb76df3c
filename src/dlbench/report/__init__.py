"""The benchmark report: the aggregate table as one offline HTML page with charts and tables.

``render(parquet, outdir, profiles_dir=None)`` writes ``outdir/index.html`` and, beside it,
every chart as ``charts/<name>.png`` and ``charts/<name>.svg``. With ``profiles_dir`` (the
workflow's ``results/profiles``) the page has a Profiles section linking to each profile's
files. Sections without data are left out.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import altair as alt
import pandas as pd

from dlbench.profiling import summary
from dlbench.profiling.summary import CellProfile
from dlbench.report import (
    cpu_precision,
    model_charts,
    op_charts,
    paradnn_charts,
    profiles,
    resource_charts,
    tables,
)
from dlbench.report.data import ReportError, load, ordered
from dlbench.report.export import javascript_bundle, save_images
from dlbench.report.page import Section, chart_id, page_html
from dlbench.report.style import Figure
from dlbench.result import write_atomic

__all__ = ["ReportError", "render", "sections"]

CHARTS_DIR = "charts"
TITLE = "dlbench report"


def _present(*items: Figure | str | None) -> list[Figure | str]:
    return [item for item in items if item is not None]


def sections(frame: pd.DataFrame, cell_profiles: list[CellProfile] | None = None,
             report_dir: Path | None = None) -> list[Section]:
    """The page's sections, in order; a section with nothing to show is not included.
    ``cell_profiles`` (from ``summary.collect``) are linked relative to ``report_dir``."""
    cell_profiles = cell_profiles or []
    models = model_charts.model_frame(frame)
    paradnn = model_charts.model_frame(frame, paradnn=True)
    ops = op_charts.op_frame(frame)
    candidates = [
        Section("cells", "Cells", "Cells of each study by kind and outcome.",
                [tables.study_table(frame)]),
        Section("throughput", "Model throughput",
                "How many samples per second each model processes as the batch grows.",
                _present(model_charts.throughput_figure(models),
                         model_charts.framework_figure(models))),
        Section("resources", "Energy and memory",
                "What the resource monitor recorded over the measured iterations of each cell.",
                _present(resource_charts.energy_figure(models),
                         resource_charts.power_figure(models),
                         resource_charts.energy_note(models),
                         resource_charts.host_memory_figure(models),
                         resource_charts.device_memory_figure(models))),
        Section("precision", "Precision speed-up", "What lower precisions gain over float32.",
                _present(cpu_precision.emulation_note(models),
                         model_charts.speedup_figure(models))),
        Section("tflops", "Achieved TFLOP/s", "",
                _present(model_charts.tflops_figure(models))),
        Section("paradnn", "ParaDnn", "Parameterized fully-connected and convolutional models.",
                _present(paradnn_charts.by_batch_figure(paradnn),
                         paradnn_charts.by_size_figure(paradnn))),
        Section("operators", "Operators", "Operator microbenchmarks, one point per operator input.",
                _present(op_charts.time_figure(ops), op_charts.tflops_figure(ops),
                         op_charts.gbps_figure(ops))),
        Section("loader", "Input pipeline", "",
                _present(model_charts.loader_figure(frame))),
        Section("failures", "Cells that did not finish",
                "Failed, out-of-memory and skipped cells with the one-line reason each recorded; "
                "the cell's log holds the traceback.",
                _present(tables.failures_table(frame, profiles.links_by_cell(cell_profiles)))),
        profiles.section(frame, cell_profiles, report_dir or Path(".")),
        Section("environment", "Environment", "Where the cells ran.",
                _present(tables.environment_table(frame))),
    ]
    return [s for s in candidates if s is not None and s.blocks]


def _remove_stale_charts(folder: Path, keep: set[str]) -> None:
    """Charts of an earlier report that this one no longer has (their section is empty)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.suffix in (".png", ".svg") and path.is_file() and path.stem not in keep:
            path.unlink()


def render(parquet_path: str | Path, outdir: str | Path,
           profiles_dir: str | Path | None = None) -> list[Path]:
    """Write the report of ``parquet_path`` into ``outdir``; return the files written.
    ``profiles_dir``: the profiles' root (``<tool>/<study>/<cell>`` folders), if any."""
    frame = load(parquet_path)
    if frame.empty:
        raise ReportError(f"{parquet_path}: the aggregate table has no rows")
    outdir = Path(outdir)
    cell_profiles = summary.collect(profiles_dir) if profiles_dir is not None else []
    charts_dir = outdir / CHARTS_DIR
    charts_dir.mkdir(parents=True, exist_ok=True)  # the workflow expects it, even empty
    with alt.data_transformers.enable("default", max_rows=None):
        parts = sections(frame, cell_profiles, outdir)
        figures = [b for s in parts for b in s.blocks if isinstance(b, Figure)]
        specs = {chart_id(f): f.chart.to_dict() for f in figures}
    written: list[Path] = []
    for figure in figures:
        written += save_images(specs[chart_id(figure)], charts_dir, figure.name)
    _remove_stale_charts(charts_dir, {f.name for f in figures})
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    html = page_html(
        title=TITLE, studies=[str(s) for s in ordered(frame["study"])],
        meta=f"Generated {generated} from {Path(parquet_path).name} "
             f"({len(frame)} rows).",
        cards=tables.status_cards(frame), sections=parts, specs=specs,
        bundle=javascript_bundle() if specs else "")
    index = outdir / "index.html"
    write_atomic(index, html)
    return [index, *written]
