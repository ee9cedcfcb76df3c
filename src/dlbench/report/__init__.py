"""The benchmark report: the aggregate table as one offline HTML page with charts and tables.

``render(parquet, outdir, profiles_dir=None)`` writes ``outdir/index.html`` and, beside it,
every chart as ``charts/<name>.png`` and ``charts/<name>.svg``. With ``profiles_dir`` (the
workflow's ``results/profiles``) the page has a Profiles section linking to each profile's
files. Sections without data are left out; a table without rows gives a page saying so.
The new report replaces the previous one whole or not at all (``report.output``).
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path

import altair as alt
import pandas as pd

from dlbench.profiling import summary
from dlbench.profiling.summary import CellProfile
from dlbench.report import (
    comms_charts,
    cpu_precision,
    datasets,
    drift_charts,
    efficiency_tables,
    llm_charts,
    model_charts,
    op_charts,
    paradnn_charts,
    profiles,
    resource_charts,
    roofline_charts,
    scaling_charts,
    tables,
    time_charts,
)
from dlbench.report.data import ReportError, load, ordered
from dlbench.report.export import javascript_bundle
from dlbench.report.output import WriteError, check_replaceable, publish
from dlbench.report.page import PageTable, Section, chart_id, page_html
from dlbench.report.style import Figure, NumbersTable, nouns

log = logging.getLogger("dlbench.report")

__all__ = ["ReportError", "WriteError", "render", "sections"]

TITLE = "dlbench report"
PAGE_DATA = "dlbench-page"  # the data transformer of a render (datasets.Store)


def _present(*items: Figure | NumbersTable | str | None) -> list[Figure | NumbersTable | str]:
    return [item for item in items if item is not None]


def sections(frame: pd.DataFrame, cell_profiles: list[CellProfile] | None = None,
             report_dir: Path | None = None, baseline_system: str | None = None
             ) -> list[Section]:
    """The page's sections, in order; a section with nothing to show is not included.
    ``cell_profiles`` (from ``summary.collect``) are linked relative to ``report_dir``;
    ``baseline_system``: the system others are compared with (default: the one with most
    model cells)."""
    cell_profiles = cell_profiles or []
    models = model_charts.model_frame(frame)
    paradnn = model_charts.model_frame(frame, paradnn=True)
    ops = op_charts.op_frame(frame)
    # Said under each chart of model cells against batch size: the cells it leaves out.
    unfinished = tables.unfinished_note(frame)
    throughput = model_charts.throughput_figure(models)
    tflops = model_charts.tflops_figure(models)
    host_memory = resource_charts.host_memory_figure(models)
    device_memory = resource_charts.device_memory_figure(models)
    candidates = [
        Section("cells", "Cells", "Cells of each study by kind and outcome.",
                [tables.study_table(frame)]),
        Section("time", "Where the time went",
                "Each study's cells' wall time by stage: how much of a run measured.",
                _present(time_charts.time_figure(frame))),
        Section("throughput", "Model throughput",
                "How many samples per second each model processes as the batch grows.",
                _present(throughput, model_charts.framework_figure(models),
                         unfinished if throughput else None)),
        Section("systems", "Systems side by side", model_charts.systems_intro(models),
                _present(model_charts.systems_figure(models, baseline_system))),
        Section("stability", "Run-to-run variation",
                "Measurements whose runs (a study's repeats) differ by more than the "
                "unstable_cv threshold: their figures vary from run to run, so compare them "
                "with care.",
                _present(tables.unstable_table(frame))),
        Section("drift", "Drift within a run",
                "Measurements whose iteration times rose or fell steadily over their "
                "measured iterations: their median is that of a moving target (a GPU "
                "lowering its clocks as it heats, a warm-up too short, memory filling up), "
                "so more warm-up or a steadier system may change it; and warm-ups until "
                "steady that stopped at their limit.",
                _present(drift_charts.drift_table(frame), drift_charts.drift_figure(frame),
                         drift_charts.unsettled_table(frame))),
        Section("clocks", "GPU clocks held back",
                "Cells whose GPUs ran below their clock for part of the measurement (NVML's "
                "clock event reasons, sampled by the resource monitor): their figures are "
                "the GPU's at a lower clock, set by its power limit, its temperature or the "
                "system; another system's cooling or power cap alone can differ so.",
                _present(tables.held_back_table(frame))),
        Section("contention", "CPU time taken by the host",
                "Runs from which the host took CPU time while they measured: a virtual "
                "machine's hypervisor running other guests on its CPUs (steal), or a "
                "container's or job's CPU quota used up (its cgroup throttled until the next "
                "period). Their iterations include those waits, which are not the cell's "
                "work: such a run can be steady and still slow. Measure again on a quieter "
                "host, or with a larger quota.",
                _present(tables.contended_table(frame))),
        Section("resources", "Energy and memory",
                "What the resource monitor recorded over the measured iterations of each cell.",
                _present(resource_charts.energy_figure(models),
                         resource_charts.power_figure(models),
                         resource_charts.energy_note(models),
                         host_memory, device_memory,
                         unfinished if host_memory or device_memory else None)),
        Section("precision", "Precision speed-up", "What lower precisions gain over float32.",
                _present(cpu_precision.emulation_note(models),
                         model_charts.speedup_figure(models))),
        Section("execution", "Execution modes",
                "What torch.compile, CUDA graphs and channels_last gain over eager.",
                _present(model_charts.compile_speedup_figure(models))),
        Section("tflops", "Achieved TFLOP/s",
                "The floating-point work each model cell did per second: its FLOPs per "
                "iteration over its median iteration time.",
                _present(tflops, unfinished if tflops else None,
                         tables.uncounted_note(models))),
        Section("hardware", "How close to the hardware",
                "Measured ceilings (calibration cells) against the vendor's peaks, and each "
                "model cell's share of them: MFU is achieved FLOP/s over the vendor's dense "
                "peak for the cell's precision; % of measured, over the best GEMM this "
                "device achieved in that precision.",
                _present(efficiency_tables.calibration_table(frame),
                         efficiency_tables.model_efficiency_table(frame),
                         efficiency_tables.no_ceiling_note(frame))),
        Section("roofline", "Roofline",
                "Operators, ParaDnn FC cells and language models' decode steps against their "
                "device's ceilings.",
                _present(roofline_charts.roofline_figure(frame),
                         roofline_charts.roofline_table(frame))),
        Section("scaling", "Scaling across GPUs or processes",
                "Cells that differ only in the number of GPUs, or of processes on a CPU "
                "(and the batch).",
                _present(scaling_charts.scaling_figure(frame))),
        Section("llm", "Language-model inference",
                "Prefill and token-by-token decode of decoder-only models (dlbench.llm).",
                _present(llm_charts.latency_figure(frame), llm_charts.tradeoff_figure(frame))),
        Section("comms", "Collective communication",
                "Collectives among a cell's processes, and messages between pairs of them, "
                "over message sizes (dlbench.comms; PARAM's comms.py, nccl-tests' "
                "bandwidths).",
                _present(comms_charts.bandwidth_figure(frame),
                         comms_charts.overlap_figure(frame))),
        Section("paradnn", "ParaDnn",
                "Parameterized fully-connected, convolutional and recurrent models.",
                _present(paradnn_charts.by_batch_figure(paradnn),
                         paradnn_charts.by_size_figure(paradnn),
                         # Drawn in TFLOP/s where any cell counted its FLOPs: say which not.
                         tables.uncounted_note(paradnn)
                         if not paradnn.empty and paradnn["tflops"].notna().any() else None)),
        Section("operators", "Operators", "Operator microbenchmarks, one point per operator input.",
                _present(op_charts.time_figure(ops), op_charts.tflops_figure(ops),
                         op_charts.gbps_figure(ops))),
        Section("loader", "Input pipeline",
                "How fast the data loader alone delivers batches (loader cells), and how much "
                "of the measured time model cells reading real data spent waiting for them.",
                _present(model_charts.loader_figure(frame),
                         model_charts.input_wait_figure(models))),
        Section("failures", "Cells that did not finish",
                "Failed, out-of-memory and skipped cells with the one-line reason each recorded, "
                "then the failed runs of cells whose other runs finished; the cell's log holds "
                "the traceback.",
                _present(tables.failures_table(frame, profiles.links_by_cell(cell_profiles)))),
        profiles.section(frame, cell_profiles, report_dir or Path(".")),
        Section("environment", "Environment", "Where the cells ran.",
                _present(tables.environment_table(frame))),
    ]
    return [s for s in candidates if s is not None and s.blocks]


def empty_section(parquet_path: str | Path) -> Section:
    """What the page says of a table without rows, in place of every other section."""
    text = (f"The aggregate table {Path(parquet_path).name} has no rows: no cell result was "
            "aggregated, so there is nothing to chart. Its studies may have no cells, or the "
            "cells may not have run yet.")
    return Section("empty", "No results", "", [f'<p class="note">{escape(text)}</p>'])


@dataclass(frozen=True)
class Incomplete:
    """Cells the run writing the report got no result for (dlbench.incomplete_run): how
    many, and what the page says of them first."""

    missing: int
    note: str


def incomplete_section(incomplete: Incomplete) -> Section:
    return Section("incomplete", "Incomplete run", "",
                   [f'<p class="note">{escape(incomplete.note)}</p>'])


def render(parquet_path: str | Path, outdir: str | Path,
           profiles_dir: str | Path | None = None,
           baseline_system: str | None = None,
           incomplete: Incomplete | None = None,
           profiles_kept: Callable[[Path], bool] | None = None) -> list[Path]:
    """Write the report of ``parquet_path`` into ``outdir``; return the files written.
    ``profiles_dir``: the profiles' root (``<system>/<tool>/<study>/<cell>`` folders), if any,
    and ``profiles_kept`` which of its folders the report shows (all by default);
    ``baseline_system``: the system the others are compared with; ``incomplete``: the
    cells the run did not measure, if any (counted in the header, named first)."""
    outdir = Path(outdir)
    check_replaceable(outdir)
    frame = load(parquet_path)
    systems = set(frame.get("system", ()))
    if baseline_system is not None and baseline_system not in systems:
        log.warning("baseline_system %r is no system of %s (systems: %s); the report compares "
                    "with the system that has the most model cells", baseline_system,
                    parquet_path, ", ".join(sorted(systems)) or "none")
    if frame.empty:
        parts = [empty_section(parquet_path)]
    else:
        cell_profiles = (summary.collect(profiles_dir, keep=profiles_kept)
                         if profiles_dir is not None else [])
        parts = sections(frame, cell_profiles, outdir, baseline_system)
    if incomplete:
        parts.insert(0, incomplete_section(incomplete))
    figures = [b for s in parts for b in s.blocks if isinstance(b, Figure)]
    specs, packed, uses, numbers = page_data(parts, figures)
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    html = page_html(
        title=TITLE, studies=[str(s) for s in ordered(frame["study"])],
        meta=f"Generated {generated} from {Path(parquet_path).name} "
             f"({nouns(len(frame), 'row')}).",
        cards=tables.status_cards(frame, incomplete.missing if incomplete else 0),
        sections=parts, specs=specs,
        bundle=javascript_bundle() if specs else "", data=packed, uses=uses, tables=numbers)
    # The images are drawn from the same rounded rows as the page's charts, those its
    # dropdowns show first (the rest would be filtered out by the chart anyway); each
    # dataset is unpacked once, however many charts draw it.
    rows = {name: datasets.unpack(data) for name, data in packed.items()}
    images = {f.name: {**specs[chart_id(f)], "datasets": {
        name: shown(rows[name], f.shows) for name in uses[chart_id(f)]}} for f in figures}
    return publish(outdir, html, images)


def page_data(parts: list[Section], figures: list[Figure]) -> tuple[
        dict[str, dict], dict[str, dict], dict[str, list[str]], dict[str, PageTable]]:
    """The figures' specs without their rows, the page's datasets packed (each once, with
    the fields its charts and tables use, nothing else), which datasets each chart uses,
    and the numbers tables."""
    converted = datasets.Store()
    # Registered anew for each render: the store holds this report's frames only.
    alt.data_transformers.register(PAGE_DATA, converted)
    with alt.data_transformers.enable(PAGE_DATA):
        specs = {chart_id(f): f.chart.to_dict() for f in figures}
    store: dict[str, datasets.Rows]
    store, uses = datasets.hoist(specs)
    store.update(converted.frames)
    numbers = page_tables(parts, specs, store, converted)
    needed: dict[str, set[str]] = {name: set() for name in store}
    for key, names in uses.items():
        for name in names:
            needed[name] |= datasets.fields_used(specs[key])
    for table in numbers.values():
        needed[table.data] |= {c.field for c in table.table.columns}
    packed = {name: datasets.pack(rows, needed[name]) for name, rows in store.items()}
    return specs, packed, uses, numbers


def shown(rows: list[dict], first: dict[str, object]) -> list[dict]:
    """The rows with the dropdowns' first values (``first``: field -> value), where the
    rows have the field."""
    fields = {k: v for k, v in first.items() if rows and k in rows[0]}
    return [r for r in rows if all(r[k] == v for k, v in fields.items())] if fields else rows


def page_tables(parts: list[Section], specs: dict[str, dict],
                store: dict[str, datasets.Rows],
                converted: datasets.Store | None = None) -> dict[str, PageTable]:
    """Every numbers table of the page by name: a figure's reads its chart's rows (or its
    table's frame, the chart's dataset where a chart of it draws that frame: ``converted``
    names them), a table of its own gets a dataset of its own in ``store`` (added here)."""
    out: dict[str, PageTable] = {}
    for section in parts:
        for block in section.blocks:
            if isinstance(block, Figure) and block.table is not None:
                table, name = block.table, block.name
                if table.frame is None:
                    data = datasets.main_dataset(specs[chart_id(block)])
                else:
                    data = converted.name_of(table.frame) if converted is not None else None
                    if data is None:
                        data = f"table-{name}"
                        store[data] = table.frame
                if data is None:
                    # A chart without rows at its top (charts stacked) whose table has no
                    # frame: said, not dropped without a word.
                    log.warning("chart %s: its numbers table has no rows to read (its "
                                "charts are stacked and it names no frame); left out", name)
                    continue
            elif isinstance(block, NumbersTable) and block.frame is not None:
                data = f"table-{block.name}"
                store[data] = block.frame
                table, name = block, block.name
            else:
                continue
            out[name] = PageTable(data, table, datasets.count(store[data], table.required))
    return out
