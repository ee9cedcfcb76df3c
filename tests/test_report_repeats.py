"""The report's figures of a cell run more than once (a study's ``repeats``): each is the
cell's across its runs, the mean over them of each run's own figure (data.measured), as
its time is (the mean of the runs' medians), and titled so; a figure that stays one run's
says which run. A table of an older release (no repeat columns, one row per cell) renders
as before."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_report import (
    GIB,
    model_cell,
    model_result,
    op_result,
    runs_of,
    write_parquet,
)

from dlbench import run_to_run
from dlbench.report import (
    comms_charts,
    drift_charts,
    efficiency_tables,
    llm_charts,
    model_charts,
    op_charts,
    render,
    resource_charts,
    sections,
    tables,
)
from dlbench.report.data import load, prepare

MEAN = ": mean over the runs"


def titles(figure) -> list[str]:
    return [c.title for c in figure.table.columns]


def monitored_runs(tmp_path) -> tuple[pd.DataFrame, list[dict]]:
    """One GPU cell run three times through the aggregate, each run's resource figures its
    own (k = 1, 2, 3 times the first's), so that their mean is twice the first's and the
    last run's three times it."""
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", 64),
                                monitored=True))
    for k, run in enumerate(runs, 1):
        monitor = run["extra"]["monitor"]
        monitor.update(energy_j=100.0 * k, samples_per_joule=4.0 * k, power_mean_w=300.0 * k,
                       power_max_w=400.0 * k, peak_host_rss_bytes=k * GIB,
                       peak_device_memory_bytes=2 * k * GIB)
        run["extra"]["max_memory_allocated_bytes"] = k * GIB
        run["extra"]["compile"] = {"compile_time_s": 10.0 * k}
    return model_charts.model_frame(load(write_parquet(tmp_path, runs))), runs


def test_a_cells_energy_power_and_memory_are_the_means_over_its_runs(tmp_path):
    """They were the last run's (three times the first's here): now the mean of the runs'
    (twice the first's), in every energy, power and memory chart, titled so."""
    models, _ = monitored_runs(tmp_path)
    (row,) = models.itertuples()
    assert row.repeats == 3
    assert (row.energy_j, row.samples_per_joule) == pytest.approx((200.0, 8.0))
    assert (row.power_mean_w, row.power_max_w) == pytest.approx((600.0, 800.0))
    assert row.peak_host_rss_bytes == pytest.approx(2 * GIB)
    assert row.peak_device_memory_bytes == pytest.approx(4 * GIB)
    assert row.max_memory_allocated_bytes == pytest.approx(2 * GIB)
    assert row.compile_time_s == pytest.approx(20.0)
    energy = resource_charts.energy_figure(models)
    assert {"samples/J" + MEAN, "energy (J)" + MEAN, "mean power (W)" + MEAN} <= set(
        titles(energy))
    assert "samples per joule" + MEAN in json.dumps(energy.chart.to_dict())
    assert "mean over its runs" in energy.caption
    power = resource_charts.power_figure(models)
    assert {"mean power (W)" + MEAN, "max power (W)" + MEAN} <= set(titles(power))
    device = resource_charts.device_memory_figure(models)
    assert {"peak device memory (bytes)" + MEAN,
            "PyTorch max allocated (bytes)" + MEAN} <= set(titles(device))
    host = resource_charts.host_memory_figure(models)
    assert "peak host RSS (bytes)" + MEAN in titles(host)


def test_a_cell_run_once_keeps_its_figures_and_plain_titles(tmp_path):
    res = model_result("s", model_cell("resnet50", "training", "float32", 64), monitored=True)
    models = model_charts.model_frame(load(write_parquet(tmp_path, [res])))
    (row,) = models.itertuples()
    assert row.energy_j == pytest.approx(res["extra"]["monitor"]["energy_j"])
    energy = resource_charts.energy_figure(models)
    assert "energy (J)" in titles(energy) and MEAN not in json.dumps(titles(energy))
    assert "mean over its runs" not in energy.caption


def test_the_compile_time_beside_a_speedup_is_the_mean_of_the_runs(tmp_path):
    """Each run compiles anew: the tooltip's compile time is the runs' mean, titled so."""
    runs = []
    for mode, slower in (("eager", 1.0), ("default", 0.5)):
        res = model_result("s", model_cell("resnet50", "training", "float32", 64,
                                           compile=mode))
        res["cell_id"] += f"_{mode}"
        for k, run in enumerate(runs_of(res, (slower, slower, slower)), 1):
            run["extra"]["compile"] = {"compile_time_s": 10.0 * k}
            runs.append(run)
    models = model_charts.model_frame(load(write_parquet(tmp_path, runs)))
    assert models["compile_time_s"].tolist() == pytest.approx([20.0, 20.0])
    spec = json.dumps(model_charts.compile_speedup_figure(models).chart.to_dict())
    assert "compile time (s)" + MEAN in spec


def test_an_operators_p5_and_p95_are_the_means_of_its_runs(tmp_path):
    """The bar around an input's time (the mean of its runs' medians) runs from the mean of
    the runs' p5s to that of their p95s (it was the last run's), and says so."""
    runs = runs_of(op_result("ops"))
    ops = op_charts.op_frame(load(write_parquet(tmp_path, runs)))
    for m, row in zip(runs[0]["measurements"], ops.itertuples(), strict=True):
        assert row.p5_s == pytest.approx(1.2 * m["time_s"]["p5"])
        assert row.p95_s == pytest.approx(1.2 * m["time_s"]["p95"])
    spec = json.dumps(op_charts.time_figure(ops).chart.to_dict(), ensure_ascii=False)
    assert "p95 (µs)" + MEAN in spec and "last run" not in spec


def comms_rows(p95s: tuple[float, ...], slowdowns: tuple[float, ...]) -> list[dict]:
    """The aggregate's rows of one collective size overlapped with a kernel, one per run,
    each run's p95 and slowdown its own."""
    common = {"cell_id": "ar", "study": "net", "kind": "comms", "status": "ok",
              "throughput": 1e5, "name": "all_reduce|1024", "pass": "collective",
              "op_name": "all_reduce", "collective": "all_reduce", "num_gpus": 2,
              "num_nodes": 1, "system": "a", "device": "gpu", "framework": "pytorch",
              "bytes_per_iteration": 1024, "time_median_s": 1.2e-5, "gbps": 0.08,
              "bus_gbps": 0.08, "compute_kernel": "gemm", "repeats": len(p95s),
              "cell_time_median_s": 1.2e-5}
    return [{**common, "source": f"ar_r{k}.json", "repeat": k, "time_p95_s": p95,
             "extra": json.dumps({"compute_overlapped": {
                 "time_s": {"median": 2e-5 * slowdown, "p95": 3e-5 * slowdown},
                 "slowdown": slowdown}, "compute_alone": {"time_s": {"median": 2e-5}}})}
            for k, (p95, slowdown) in enumerate(zip(p95s, slowdowns, strict=True))]


def test_a_collectives_p95_and_its_computations_slowdown_are_the_means_of_its_runs():
    frame = prepare(pd.DataFrame(comms_rows((1.0e-5, 2.0e-5, 6.0e-5), (1.0, 1.5, 2.6))))
    (sized,) = comms_charts.comms_frame(frame).itertuples()
    assert sized.time_p95_us == pytest.approx(30.0)
    figure = comms_charts.bandwidth_figure(frame)
    assert "the p95 the mean of the runs' p95s" in figure.caption
    (overlapped,) = comms_charts.overlap_frame(frame).itertuples()
    assert overlapped.slowdown == pytest.approx(1.7)
    assert overlapped.compute_us == pytest.approx(2e-5 * 1.7 * 1e6)
    assert overlapped.compute_p95_us == pytest.approx(3e-5 * 1.7 * 1e6)
    overlap = comms_charts.overlap_figure(frame)
    assert {"slowdown" + MEAN, "p95 (µs)" + MEAN} <= set(titles(overlap))


def llm_runs(p99s: tuple[float, ...], peaks: tuple[int, ...]) -> list[dict]:
    """The aggregate's rows of one language-model cell run once per p99, each run's TPOT
    percentiles (in its decode row's extra) and peak memory (in both) its own."""
    common = {"study": "serve", "cell_id": "r", "kind": "llm_inference", "status": "ok",
              "system": "box", "device": "cpu", "framework": "pytorch",
              "model": "llama_tiny", "precision": "float32", "batch_size": 2,
              "prompt_length": 32, "output_length": 8, "name": "llama_tiny",
              "repeats": len(p99s)}
    rows = []
    for k, (p99, peak) in enumerate(zip(p99s, peaks, strict=True)):
        cell_extra = {"kv_cache_bytes": 2**20, "peak_memory_bytes": peak}
        run = {**common, "source": f"r_r{k}.json", "repeat": k}
        rows += [{**run, "pass": "prefill", "throughput": 3200.0, "time_median_s": 0.02,
                  "cell_time_median_s": 0.02, "extra": json.dumps(cell_extra)},
                 {**run, "pass": "decode", "throughput": 500.0, "time_median_s": 0.004,
                  "cell_time_median_s": 0.004, "extra": json.dumps(
                      {**cell_extra, "tpot_p90_s": p99 / 2, "tpot_p99_s": p99})}]
    return rows


def test_a_language_models_percentiles_and_peak_memory_are_the_means_of_its_runs():
    frame = prepare(pd.DataFrame(llm_runs((0.004, 0.006, 0.011), (10 * 2**20, 20 * 2**20,
                                                                 60 * 2**20))))
    (cell,) = llm_charts.llm_frame(frame).itertuples()
    assert (cell.tpot_p90_ms, cell.tpot_p99_ms) == pytest.approx((3.5, 7.0))
    assert cell.peak_memory_mib == pytest.approx(30.0)
    assert cell.kv_cache_mib == pytest.approx(1.0)
    latency = llm_charts.latency_figure(frame)
    assert {"p90 (ms)" + MEAN, "p99 (ms)" + MEAN, "peak memory (MiB)" + MEAN} <= set(
        titles(latency))
    assert "last run" not in latency.caption


def test_a_loader_cells_throughput_is_at_the_mean_of_its_runs_medians(tmp_path):
    """It was the last run's throughput beside model cells drawn at their cell's time."""
    base = {"study": "io", "cell_id": "ld", "kind": "loader", "status": "ok", "system": "a",
            "framework": "pytorch", "data": "imagefolder", "batch_size": 32,
            "num_loader_threads": 4, "throughput_unit": "samples/s", "name": "loader",
            "pass": "loader", "repeats": 2, "cell_throughput": 1000.0}
    frame = prepare(pd.DataFrame([{**base, "source": f"ld_r{k}.json", "repeat": k,
                                   "throughput": t} for k, t in enumerate((1100.0, 900.0))]))
    figure = model_charts.loader_figure(frame)
    (values,) = [v for v in figure.chart.to_dict()["datasets"].values() if v]
    assert [v["throughput"] for v in values] == pytest.approx([1000.0])
    assert "mean of each cell's runs' medians" in figure.caption


def test_paradnn_phi_tflops_is_the_mean_of_the_runs_in_the_efficiency_table(tmp_path):
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", 64)))
    for k, run in enumerate(runs, 1):
        run["extra"]["phi_tflops"] = 1.0 * k
    frame = load(write_parquet(tmp_path, runs))
    frame["pct_of_peak"] = 50.0  # a device the peak table knows, as far as the table goes
    table = efficiency_tables.model_efficiency_table(frame)
    assert table.frame["phi_tflops"].tolist() == pytest.approx([2.0])
    assert "ParaDnn Φ TFLOP/s (mean step)" + MEAN in [c.title for c in table.columns]


def test_the_calibration_table_says_its_figure_is_the_best_run_of_several():
    def row(repeat: int, tflops: float) -> dict:
        return {"study": "calibration", "cell_id": "cal", "source": f"cal_r{repeat}.json",
                "repeat": repeat, "repeats": 2, "kind": "calibration", "status": "ok",
                "system": "a", "device": "gpu", "gpu_model": "NVIDIA H100 80GB HBM3",
                "cpu_model": "EPYC", "op_name": "gemm", "name": "gemm_float32_4096",
                "pass": "calibration", "efficiency_precision": "float32", "tflops": tflops,
                "gbps": None, "peak_tflops": 67.0, "pct_of_peak": tflops / 0.67,
                "peak_gbps": None, "pct_of_peak_gbps": None}

    html = efficiency_tables.calibration_table(prepare(pd.DataFrame([row(0, 50.0),
                                                                      row(1, 40.0)])))
    assert "<th>measured: best run</th>" in html and "50 TFLOP/s" in html


def test_a_run_held_back_is_named_by_its_run_where_its_cell_ran_more_than_once(tmp_path):
    """The clocks table lists runs: a cell of three runs, one of them held back, says
    which run (it listed the cell alone, as if all its runs had been)."""
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", 64),
                                monitored=True))
    runs[1]["extra"]["monitor"].update(gpu_power_limit_w=500.0, gpu_clocks_held_back=0.5,
                                       gpu_clock_reasons="power cap 50%")
    html = tables.held_back_table(load(write_parquet(tmp_path, runs)))
    assert "<th>run</th>" in html
    (body,) = [r for r in html.split("<tr>")[2:]]
    assert "<td>2</td><td>50%</td>" in body  # the second run, numbered from 1


def test_a_drifting_first_run_of_a_repeated_cell_is_labelled_with_its_run():
    """Only the first of three runs drifted: its line still says which run it is, numbered
    from 1 as the failures listing numbers runs (it said "run 0")."""
    times = [1.0 + 0.2 * i / 39 for i in range(40)]
    frame = pd.DataFrame([{"study": "s", "system": "x", "cell_id": "c", "cell": "x/c",
                           "name": "resnet50", "pass": "training", "source": "c.json",
                           "repeat": 0, "repeats": 3, "drifting": True, "time_drift": 0.19,
                           drift_charts.DRIFT_TIMES: times}])
    drawn = drift_charts.drift_frame(frame)
    assert drawn["measurement"].unique().tolist() == ["x/c · resnet50 · training · run 1 (+19%)"]


def test_over_runs_averages_each_measurement_of_each_study_apart_and_skips_nulls():
    from dlbench.report.data import over_runs

    rows = pd.DataFrame({"study": ["a", "a", "a", "b"], "cell": ["c", "c", "c", "c"],
                         "name": ["m", "m", "n", "m"], "pass": [None, None, None, None]})
    figures = pd.DataFrame({"energy_j": [10.0, None, 7.0, 1.0], "p95": [1.0, 3.0, 5.0, 9.0]})
    out = over_runs(rows, figures)
    assert out["energy_j"].tolist() == pytest.approx([10.0, 10.0, 7.0, 1.0])
    assert out["p95"].tolist() == pytest.approx([2.0, 2.0, 5.0, 9.0])


def test_a_table_of_an_older_release_without_repeat_columns_renders(tmp_path):
    """A table from before repeats (no repeat, repeats or cell_* columns; one row per
    cell): its figures are its rows', the titles plain, the page written."""
    runs = [model_result("s", model_cell("resnet50", "training", "float32", b),
                         monitored=True) for b in (32, 64)]
    parquet = write_parquet(tmp_path, runs)
    older = pq.read_table(parquet)
    # Every column the repeats brought (dlbench.run_to_run's and the run's index).
    dropped = [c for c in older.column_names if c in ("repeat", *run_to_run.COLUMNS)]
    pq.write_table(older.drop_columns(dropped), parquet)
    frame = load(parquet)
    models = model_charts.model_frame(frame)
    expected = {r["cell"]["batch_size"]: r["extra"]["monitor"]["energy_j"] for r in runs}
    assert dict(zip(models["batch_size"], models["energy_j"], strict=True)) == pytest.approx(
        expected)
    assert set(models["repeats"]) == {1}
    assert MEAN not in json.dumps(titles(resource_charts.energy_figure(models)))
    assert "resources" in [s.id for s in sections(frame)]
    files = render(parquet, tmp_path / "report")
    assert files[0].name == "index.html" and files[0].is_file()


def test_host_memory_is_the_processes_pss_where_cells_have_it(tmp_path):
    """The RSS sum counts a page forked loader workers share with their parent once per
    worker: the chart draws the PSS, and says how many cells (older results, RSS only) it
    leaves out; a table without any PSS keeps the RSS chart, saying what it sums."""
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", 64),
                                monitored=True))
    for k, run in enumerate(runs, 1):
        run["extra"]["monitor"].update(peak_host_rss_bytes=4 * k * GIB,
                                       peak_host_pss_bytes=k * GIB)
    older = model_result("s", model_cell("resnet50", "training", "float32", 128),
                         monitored=True)
    older["extra"]["monitor"].pop("peak_host_pss_bytes", None)
    models = model_charts.model_frame(load(write_parquet(tmp_path, [*runs, older])))
    host = resource_charts.host_memory_figure(models)
    assert "peak host PSS (bytes)" + MEAN in titles(host)
    assert "1 cell recorded only the RSS sum" in host.caption
    pss = models.loc[models["batch_size"] == 64, "peak_host_pss_bytes"]
    assert pss.tolist() == [pytest.approx(2 * GIB)]  # the mean of the runs'

    without = model_charts.model_frame(load(write_parquet(tmp_path / "old", [older])))
    host = resource_charts.host_memory_figure(without)
    assert "peak host RSS (bytes)" in titles(host)
    assert "once per process" in host.caption


def test_the_drift_table_names_its_measurement_and_numbers_runs_from_1():
    """Its "measurement" column showed the row's index (a row of iterrows() is a Series,
    whose .name is its label), its run column counted from 0 beside a chart from 1."""
    import re

    times = [1.0 + 0.2 * i / 39 for i in range(40)]
    frame = pd.DataFrame([{"study": "s", "system": "x", "cell_id": "c", "cell": "x/c",
                           "name": "resnet50", "pass": "training", "source": "c.json",
                           "repeat": 0, "repeats": 3, "drifting": True, "time_drift": 0.19,
                           "time_drift_p": 1e-9, "time_median_s": 1.1, "iterations": 40,
                           "gpu_clocks_held_back": None, "gpu_clock_reasons": None,
                           "warmup_settled": None, drift_charts.DRIFT_TIMES: times}],
                         index=[7])
    cells = re.findall(r"<td>([^<]*)</td>", drift_charts.drift_table(frame))
    assert cells[3:6] == ["resnet50", "training", "1"]
    # an operator cell's inputs are named by position: the operator says whose
    ops = frame.assign(name="0", op_name="linear")
    cells = re.findall(r"<td>([^<]*)</td>", drift_charts.drift_table(ops))
    assert cells[3] == "linear 0"
