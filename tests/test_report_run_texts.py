"""The report's texts of a cell run more than once (a study's ``repeats``): what each run's
energy leaves out (``energy_note``), why its GPU clocks were held back
(``gpu_clock_reasons``) and the environment it ran in are the runs' one text where they
agree, and otherwise each text with the runs that gave it (data.texts_over_runs), so that
one run unlike the others shows instead of the last run's text standing for all. Built
from result documents through the real aggregate Parquet, as tests/test_report_repeats.py."""

from __future__ import annotations

import json
from html import escape

import pandas as pd
import pytest
from test_report import (
    NO_ENERGY,
    model_cell,
    model_result,
    runs_of,
    section_of,
    write_parquet,
)

from dlbench.report import model_charts, render, resource_charts, tables
from dlbench.report.data import load, texts_over_runs

PARTIAL = "partial: no readable RAPL counters"  # test_report.monitor_summary's GPU note
DISABLED = "resource monitor disabled (--monitor_interval_ms 0)"


def gpu_runs(batch: int = 64, **per_run: tuple) -> list[dict]:
    """One monitored GPU cell run three times, each run's monitor fields given by
    ``per_run`` (field -> one value per run)."""
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", batch),
                                monitored=True))
    for field, values in per_run.items():
        for run, value in zip(runs, values, strict=True):
            run["extra"]["monitor"][field] = value
    return runs


def cpu_runs(batch: int, notes: tuple) -> list[dict]:
    """One CPU cell without energy run once per note (its energy_note)."""
    runs = runs_of(model_result("cpu", model_cell("alexnet", "inference", "float32", batch,
                                                  device="cpu"), monitored=True),
                   tuple(1.0 for _ in notes))
    for run, note in zip(runs, notes, strict=True):
        run["extra"]["monitor"]["energy_note"] = note
    return runs


def energy_rows(figure) -> dict[int, dict]:
    """The energy figure's rows by batch size."""
    (rows,) = [v for v in figure.chart.to_dict()["datasets"].values() if v and "energy_j" in v[0]]
    return {r["batch_size"]: r for r in rows}


def test_a_points_energy_note_names_each_runs_note_where_they_differ(tmp_path):
    """The second run of the cell at batch 64 left nothing out (no note): its note, its
    tooltip's data and the caption name both notes with their runs (it was the last run's
    alone); the cell at batch 32, whose runs agree, keeps its one note."""
    parquet = write_parquet(tmp_path, [*gpu_runs(64, energy_note=(PARTIAL, None, PARTIAL)),
                                       *gpu_runs(32)])
    both = f"{PARTIAL} (runs 1, 3 of 3); none (run 2 of 3)"
    models = model_charts.model_frame(load(parquet))
    assert dict(zip(models["batch_size"], models["energy_note"], strict=True)) == {
        64: both, 32: PARTIAL}
    figure = resource_charts.energy_figure(models)
    assert {b: r["energy_note"] for b, r in energy_rows(figure).items()} == {64: both,
                                                                            32: PARTIAL}
    # each reason once, without the runs' labels (the tooltip has them)
    assert "Sources not counted: no readable RAPL counters." in figure.caption
    outdir = tmp_path / "out"
    render(parquet, outdir)
    html = (outdir / "index.html").read_text()
    assert json.dumps(both) in html and json.dumps(PARTIAL) in html


def test_the_note_on_missing_energy_quotes_every_runs_reason_with_its_runs(tmp_path):
    """A CPU cell without energy, its last run with the monitor off: the note said only
    that the monitor was off, as if no run could have had energy. A cell whose runs agree
    is quoted as it was."""
    differing = f"{NO_ENERGY} (runs 1, 2 of 3); {DISABLED} (run 3 of 3)"
    for notes, quoted in (((NO_ENERGY, NO_ENERGY, DISABLED), differing),
                          ((NO_ENERGY,) * 3, NO_ENERGY)):
        folder = tmp_path / str(len(quoted))
        outdir = folder / "out"
        render(write_parquet(folder, cpu_runs(16, notes)), outdir)
        section = section_of((outdir / "index.html").read_text(), "resources")
        assert f"No energy was measured: <q>{escape(quoted)}</q>." in section


def test_a_cells_clock_reasons_name_the_run_held_back_and_the_runs_not(tmp_path):
    """Only the second run at batch 64 was thermally throttled: the measurement's reasons
    say so beside the others' none (they were the last run's: none at all); the cell at
    batch 32, at its power cap in every run, keeps its one reason."""
    frame = load(write_parquet(tmp_path, [
        *gpu_runs(64, gpu_clocks_held_back=(0.0, 0.4, 0.0),
                  gpu_clock_reasons=(None, "thermal slowdown 40%", None)),
        *gpu_runs(32, gpu_clocks_held_back=(0.6, 0.6, 0.6),
                  gpu_clock_reasons=("power cap 60%",) * 3)]))
    models = model_charts.model_frame(frame)
    assert dict(zip(models["batch_size"], models["gpu_clock_reasons"], strict=True)) == {
        64: "none (runs 1, 3 of 3); thermal slowdown 40% (run 2 of 3)", 32: "power cap 60%"}
    held = dict(zip(models["batch_size"], models["gpu_clocks_held_back"], strict=True))
    assert held == pytest.approx({64: 0.4 / 3, 32: 0.6})  # averaged as before


def environment_runs(batch: int, *drivers: str | None) -> list[dict]:
    """A cell run once per driver (None: a run that recorded none)."""
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", batch)),
                   tuple(1.0 for _ in drivers))
    for run, driver in zip(runs, drivers, strict=True):
        run["environment"]["gpu_driver"] = driver
    return runs


def drivers_in(runs: list[dict], tmp_path) -> dict[str, int]:
    """The environment table's driver column: each row's driver -> its count of cells."""
    headers, rows = tables.environment_rows(load(write_parquet(tmp_path, runs)))
    named = [dict(zip(headers, row, strict=True)) for row in rows]
    assert {row["CUDA"] for row in named} == {"12.4"}  # a column the runs agree on: plain
    return {row["driver"]: row["cells"] for row in named}


def test_a_cell_whose_runs_had_two_drivers_counts_under_both(tmp_path):
    """The driver was updated before the third run of the cell at batch 64: the table
    gave the new one alone (the last run's); now the cell counts under each driver its runs
    had, with the two cells whose runs agree under theirs."""
    runs = [*environment_runs(64, "550.54.15", "550.54.15", "560.28.03"),
            *environment_runs(32, *["550.54.15"] * 3), *environment_runs(16, *["550.54.15"] * 3)]
    assert drivers_in(runs, tmp_path) == {"550.54.15": 3, "560.28.03": 1}
    outdir = tmp_path / "out"
    render(write_parquet(tmp_path, runs), outdir)
    section = section_of((outdir / "index.html").read_text(), "environment")
    assert "<td>560.28.03</td>" in section and "<td>550.54.15</td>" in section


def test_runs_on_many_nodes_list_each_node_once_not_each_cell(tmp_path):
    """A study spread over a cluster's nodes: each cell's runs on different nodes. The
    table lists the nodes' environments, not one combined environment per cell."""
    runs = [*environment_runs(64, "550.54.15", "550.54.15", "550.54.15"),
            *environment_runs(32, "550.54.15", "550.54.15", "550.54.15")]
    for i, run in enumerate(runs):
        run["environment"]["hostname"] = f"node{i % 3}"
    headers, rows = tables.environment_rows(load(write_parquet(tmp_path, runs)))
    hosts = {row[headers.index("host")]: row[-1] for row in rows}
    assert hosts == {"node0": 2, "node1": 2, "node2": 2}


def test_a_run_that_recorded_no_driver_counts_apart_from_those_that_did(tmp_path):
    runs = [*environment_runs(64, "550.54.15", None, "550.54.15"),
            *environment_runs(32, None, None)]
    assert drivers_in(runs, tmp_path) == {"550.54.15": 1, "": 2}


def test_texts_over_runs_keeps_a_null_apart_from_an_empty_text_and_measurements_apart():
    rows = pd.DataFrame({"study": ["a"] * 3 + ["b"] * 2, "cell": "c", "name": "m",
                         "repeat": [0, 1, 2, 0, 1],
                         "note": [None, "", "partial: x", None, None]})
    out = texts_over_runs(rows, "note")
    assert out[:3].tolist() == ["none (run 1 of 3); (empty) (run 2 of 3); "
                                "partial: x (run 3 of 3)"] * 3
    assert out[3:].isna().all()  # runs without a note agree: still no note


def test_texts_over_runs_numbers_runs_without_a_repeat_in_the_tables_order_and_counts_all():
    """Runs of an older table (no repeat) are numbered as they finished; ``runs``, the
    cell's count of runs, counts one that failed and is not among the rows."""
    rows = pd.DataFrame({"study": "s", "cell": "c", "name": "m", "note": ["x", "y"]})
    assert texts_over_runs(rows, "note").tolist() == ["x (run 1 of 2); y (run 2 of 2)"] * 2
    counted = texts_over_runs(rows, "note", pd.Series([3, 3]))
    assert counted.tolist() == ["x (run 1 of 3); y (run 2 of 3)"] * 2


def test_runs_sharing_a_repeat_number_are_numbered_in_the_tables_order():
    """Two runs both repeat 0 (a tree copied in beside another): each keeps its own text,
    not one merged under "run 1"."""
    rows = pd.DataFrame({"study": "s", "cell": "c", "name": "m", "repeat": [0, 0],
                         "note": ["x", "y"]})
    assert texts_over_runs(rows, "note").tolist() == ["x (run 1 of 2); y (run 2 of 2)"] * 2


def test_a_run_whose_result_is_invalid_counts_among_the_cells_runs(tmp_path):
    """Its row has no kind: the per-run texts said "of 3" where the failures list said
    "run 4 of 4"."""
    frame = load(write_parquet(tmp_path, gpu_runs(64, energy_note=(PARTIAL, None, PARTIAL))))
    invalid = frame.iloc[[-1]].copy()
    for column in frame.columns:
        if column not in ("study", "cell", "cell_id", "system"):
            invalid[column] = None
    invalid = invalid.assign(status="failed", error="invalid result", source="x/c_r3.json",
                             repeat=3)
    models = model_charts.model_frame(pd.concat([frame, invalid], ignore_index=True))
    assert models["energy_note"].str.contains("of 4").all()


def test_the_energy_caption_leaves_out_the_reason_of_a_run_without_energy(tmp_path):
    """Run 2 has no energy figure (its counter unread at the phase's start): the cell's
    mean is of runs 1 and 3, complete, so the caption names no source left out."""
    lost = "partial: 1.20 s of GPU 0's 2.00 s and no energy figure (the counters cover part"
    runs = gpu_runs(64, energy_note=(None, lost, None))
    runs[1]["extra"]["monitor"].update(energy_j=None, samples_per_joule=None)
    models = model_charts.model_frame(load(write_parquet(tmp_path, runs)))
    figure = resource_charts.energy_figure(models)
    assert "Sources not counted" not in figure.caption
