"""What the report's energy and power charts say of ``energy_sources`` (what each cell's
energy counts): a host without readable RAPL counts its GPUs only and looks the more
efficient, so where the cells drawn together counted different sources the captions name
who counted what, every point's tooltip and numbers row gives its cell's sources, and a
cell whose runs counted differently has no energy figure, and the captions say why. A table older than the column
renders as before. The monitor's readings are stand-ins written into the results (no
NVML or RAPL is read here)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_report import model_cell, model_result, runs_of, write_parquet

from dlbench.report import model_charts, render, resource_charts
from dlbench.report.data import load

GPU = ["gpu:nvml_total_energy"]
GPU_AND_RAPL = ["gpu:nvml_total_energy", "host:rapl"]
DIFFERENT = "Cells counted different energy sources"
MIXED = "without a figure: their runs counted different energy sources"


def monitored(system: str, batch: int, sources: list[str]) -> dict:
    """A monitored GPU cell of ``system`` whose energy counted ``sources``."""
    res = model_result("s", model_cell("resnet50", "training", "float32", batch),
                       monitored=True)
    res["system"] = system
    res["extra"]["monitor"]["energy_sources"] = sources
    return res


def models_of(tmp_path: Path, results: list[dict]) -> pd.DataFrame:
    return model_charts.model_frame(load(write_parquet(tmp_path, results)))


def two_systems(tmp_path: Path) -> pd.DataFrame:
    """System a counts its GPUs and the host's RAPL, system b (no readable RAPL) its GPUs."""
    return models_of(tmp_path, [monitored(system, batch, sources)
                                for system, sources in (("a", GPU_AND_RAPL), ("b", GPU))
                                for batch in (16, 32)])


def figures(models: pd.DataFrame):
    return resource_charts.energy_figure(models), resource_charts.power_figure(models)


def chart_rows(figure) -> list[dict]:
    spec = figure.chart.to_dict()
    (rows,) = [v for v in spec["datasets"].values() if v and "energy_j" in v[0]]
    return rows


def tooltip_fields(figure) -> dict[str, str]:
    """field -> title of every tooltip of the figure's spec."""
    found: dict[str, str] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            tips = node.get("tooltip")
            for tip in tips if isinstance(tips, list) else []:
                if isinstance(tip, dict) and "field" in tip:
                    found[tip["field"]] = tip.get("title", tip["field"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(figure.chart.to_dict())
    return found


def test_systems_that_counted_different_sources_are_named_in_both_captions(tmp_path):
    """Both systems' energy was drawn on the same axes with nothing saying that b's
    leaves out the host: each caption now says which system counted what."""
    for figure in figures(two_systems(tmp_path)):
        assert (f"{DIFFERENT} (a host without readable RAPL counts only its GPUs and looks "
                "more efficient): a: gpu:nvml_total_energy+host:rapl; "
                "b: gpu:nvml_total_energy.") in figure.caption, figure.name
        assert MIXED not in figure.caption


def test_each_points_tooltip_and_numbers_row_give_its_cells_sources(tmp_path):
    for figure in figures(two_systems(tmp_path)):
        assert tooltip_fields(figure).get("energy_sources") == "energy counts", figure.name
        assert ("energy_sources", "energy counts") in [
            (c.field, c.title) for c in figure.table.columns]
        charted = {(r["system"], r["batch_size"]): r["energy_sources"]
                   for r in chart_rows(figure)}
        assert charted == {("a", 16): "gpu:nvml_total_energy+host:rapl",
                           ("a", 32): "gpu:nvml_total_energy+host:rapl",
                           ("b", 16): "gpu:nvml_total_energy",
                           ("b", 32): "gpu:nvml_total_energy"}


def test_cells_that_counted_the_same_sources_get_no_word_on_them(tmp_path):
    models = models_of(tmp_path, [monitored(system, 16, GPU_AND_RAPL) for system in "ab"])
    for figure in figures(models):
        assert DIFFERENT not in figure.caption and MIXED not in figure.caption


def test_cells_of_one_system_that_counted_differently_are_counted_by_source(tmp_path):
    models = models_of(tmp_path, [monitored("a", 16, GPU_AND_RAPL),
                                  monitored("a", 32, GPU), monitored("a", 64, GPU)])
    energy, _ = figures(models)
    assert ("a: gpu:nvml_total_energy (2 cells), gpu:nvml_total_energy+host:rapl "
            "(1 cell).") in energy.caption


def test_a_cell_whose_runs_counted_different_sources_has_no_energy_figure(tmp_path):
    """Three runs of one cell, the second with the host's RAPL: a mean over them would be
    the energy of neither (dlbench.compare gives it no ratio either), so the cell has no
    energy or power figure, its sources name both, and the captions say why it is
    missing; a cell beside it whose runs agree keeps its figures."""
    runs = runs_of(monitored("a", 64, GPU))
    runs[1]["extra"]["monitor"]["energy_sources"] = GPU_AND_RAPL
    runs[1]["extra"]["monitor"]["energy_j"] *= 4
    agreeing = runs_of(monitored("a", 32, GPU))
    models = models_of(tmp_path, [*runs, *agreeing])
    by_batch = {row.batch_size: row for row in models.itertuples()}
    both = "gpu:nvml_total_energy or gpu:nvml_total_energy+host:rapl"
    assert by_batch[64].energy_sources == both
    for column in ("energy_j", "samples_per_joule", "power_mean_w", "power_max_w"):
        assert pd.isna(getattr(by_batch[64], column)), column
    assert by_batch[32].energy_j == pytest.approx(agreeing[0]["extra"]["monitor"]["energy_j"])
    for figure in figures(models):
        assert (f"1 cell {MIXED} (a mean of them would be of neither).") in figure.caption, \
            figure.name
        assert DIFFERENT not in figure.caption  # the cells drawn counted the same
        drawn = {r["batch_size"]: r for r in chart_rows(figure)}
        assert drawn[64].get("power_mean_w") is None and drawn[32]["power_mean_w"] > 0


def test_a_run_without_energy_does_not_count_among_its_cells_sources(tmp_path):
    """Its energy is left out of the mean (data.over_runs), so are its (empty) sources."""
    runs = runs_of(monitored("a", 64, GPU))
    monitor = runs[2]["extra"]["monitor"]
    monitor.update(energy_j=None, energy_sources=[], samples_per_joule=None,
                   power_mean_w=None, power_max_w=None)
    (row,) = models_of(tmp_path, runs).itertuples()
    assert row.energy_sources == "gpu:nvml_total_energy"


def test_a_table_older_than_the_sources_column_still_renders(tmp_path):
    """An older release's table (no energy_sources): the charts draw and say nothing of
    sources; each tooltip reads "not recorded" (the column is restored empty on load)."""
    parquet = write_parquet(tmp_path, [monitored(system, 16, GPU_AND_RAPL) for system in "ab"])
    table = pq.read_table(parquet)
    pq.write_table(table.drop_columns(["energy_sources"]), parquet)
    models = model_charts.model_frame(load(parquet))
    for figure in figures(models):
        assert DIFFERENT not in figure.caption and MIXED not in figure.caption
    outdir = tmp_path / "out"
    render(parquet, outdir)
    html = (outdir / "index.html").read_text()
    assert 'id="chart-energy-efficiency"' in html and 'id="chart-power"' in html
    assert json.dumps("energy counts") in html
