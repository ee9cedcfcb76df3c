"""How close to the hardware: calibration cells (dlbench.calibrate), the efficiency columns
of the aggregate (dlbench.efficiency), the roofline's ceilings and the scaling view — built
from real result documents through the real aggregate table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import vl_convert

from dlbench import aggregate, cpu, efficiency, study
from dlbench import result as R
from dlbench.report import data as report_data
from dlbench.report import efficiency_tables, render, roofline_charts, scaling_charts

H100 = "NVIDIA H100 80GB HBM3"  # as torch.cuda.get_device_name() says it on an H100 SXM


def env(gpu: str | None = H100, cpu_model: str = "AMD EPYC 9654") -> dict:
    return {"hostname": "node01", "cpu_model": cpu_model, "gpu_models": [gpu] if gpu else [],
            "framework": "pytorch", "framework_version": "2.5.1", "python_version": "3.11.9",
            "library_flags": {}}


def model_doc(precision: str, tflops: float, *, device: str = "gpu", num_gpus: int = 1,
              batch: int = 64, throughput: float | None = None, model: str = "resnet50",
              system: str = "sysA", num_nodes: int | None = None) -> dict:
    cell = {"framework": "pytorch", "model": model, "phase": "training",
            "precision": precision, "batch_size": batch, "num_gpus": num_gpus,
            "device": device, "data": "synthetic"}
    if num_nodes is not None:
        cell["num_nodes"] = num_nodes
    cid = f"pytorch_{model}_{precision}_{device}{num_gpus}_{num_nodes}nodes_bs{batch}"
    res = R.new_result(kind="model", cell=cell, study="s", cell_id=cid)
    res["system"] = system
    res["environment"] = env() if device == "gpu" else env(None)
    items = batch * num_gpus * (num_nodes or 1)
    t = items / throughput if throughput else 0.1
    res["measurements"] = [R.measurement(
        name=model, pass_="training", times_s=[t, t, t], items_per_iteration=items,
        flops_per_iteration=tflops * 1e12 * t)]
    return R.finish(res, "ok")


def calibration_doc(figures: dict[str, float], gbps: float, *, device: str = "gpu",
                    system: str = "sysA") -> dict:
    cell = {"framework": "pytorch", "device": device}
    res = R.new_result(kind="calibration", cell=cell, study=study.CALIBRATION_STUDY,
                       cell_id=f"pytorch_calibrate_{device}_0000000{len(figures)}")
    res["system"] = system
    res["environment"] = env() if device == "gpu" else env(None)
    n = 8192
    for precision, tflops in figures.items():
        t = 2 * n**3 / (tflops * 1e12)
        res["measurements"].append(R.measurement(
            name=f"gemm_{precision}_{n}", op_name="gemm", pass_="calibration",
            times_s=[t, t], items_per_iteration=1, throughput_unit="iterations/s",
            flops_per_iteration=2.0 * n**3, bytes_per_iteration=3.0 * n * n * 2,
            extra={"benchmark": "gemm", "precision": precision, "size": n}))
    elements = 2**28
    t = 3 * elements * 4 / (gbps * 1e9)
    res["measurements"].append(R.measurement(
        name=f"triad_float32_{elements}", op_name="triad", pass_="calibration",
        times_s=[t, t], items_per_iteration=1, throughput_unit="iterations/s",
        bytes_per_iteration=3.0 * elements * 4,
        extra={"benchmark": "triad", "precision": "float32", "size": elements}))
    return R.finish(res, "ok")


def op_doc(dtype: str | None, *, device: str = "gpu", system: str = "sysA") -> dict:
    cell = {"framework": "pytorch", "op_config": "/configs/mm.json", "device": device,
            "backward": False, "exec_mode": "discrete"}
    res = R.new_result(kind="op", cell=cell, study="ops", cell_id=f"pytorch_mm_{dtype}")
    res["system"] = system
    res["environment"] = env() if device == "gpu" else env(None)
    config = {"input": [{"type": "tensor", "dtype": dtype or "float", "shape": [64, 64]},
                        {"type": "tensor", "dtype": "bfloat16" if dtype is None else dtype,
                         "shape": [64, 64]}]}
    for i, (flops, nbytes) in enumerate(((2e9, 4e6), (2e12, 1e9))):
        t = flops / 100e12
        res["measurements"].append(R.measurement(
            name=f"torch.mm|0|{i}", op_name="torch.mm", pass_="forward", times_s=[t, t],
            items_per_iteration=1, throughput_unit="iterations/s",
            flops_per_iteration=flops, bytes_per_iteration=nbytes, extra={"config": config}))
    return R.finish(res, "ok")


def table(tmp_path: Path, docs: list[dict]) -> pd.DataFrame:
    paths = []
    for i, doc in enumerate(docs):
        path = tmp_path / "results" / f"cell{i:03d}.json"
        R.write(doc, path)
        paths.append(path)
    parquet = tmp_path / "benchmarks.parquet"
    aggregate.write(paths, parquet, move_invalid=False)
    return report_data.load(parquet)  # as the report reads it


# -- study: calibrate: true ---------------------------------------------------------------


def test_calibrate_true_adds_one_calibration_cell_per_device_the_study_uses():
    config = {"studies": {
        "a": {"calibrate": True, "grid": {"model": "deep_mnist", "device": ["cpu", "gpu"]}},
        "b": {"grid": {"model": "deep_mnist", "device": "cpu"}},
    }}
    cells = study.expand_config(config)
    calibration = [c for c in cells if c.kind == "calibrate"]
    assert sorted(c.params["device"] for c in calibration) == ["cpu", "gpu"]
    assert {c.study for c in calibration} == {study.CALIBRATION_STUDY}
    assert all(c.id.startswith(f"pytorch_calibrate_{c.params['device']}_") for c in calibration)
    config["studies"]["a"]["calibrate"] = False
    assert not [c for c in study.expand_config(config) if c.kind == "calibrate"]


def test_a_calibration_study_written_out_is_not_doubled_and_a_bad_flag_is_one_line():
    config = {"studies": {
        "calibration": {"kind": "calibrate", "grid": {"device": "cpu"}},
        "a": {"calibrate": True, "grid": {"model": "deep_mnist", "device": "cpu"}},
    }}
    cells = study.expand_config(config)
    assert len([c for c in cells if c.kind == "calibrate"]) == 1
    config["studies"]["a"]["calibrate"] = "yes"
    with pytest.raises(study.ConfigError, match=r"^study 'a': calibrate: must be true or false"):
        study.expand_config(config)


def test_a_model_study_named_calibration_is_refused_where_another_asks_to_calibrate():
    """Its cpu cell stood for the calibration cell another study asked for: no ceiling was
    measured, and nothing said so. Refused in one line naming both studies; without a study
    asking, the name is free."""
    config = {"studies": {
        "calibration": {"grid": {"model": "deep_mnist", "device": "cpu"}},
        "a": {"calibrate": True, "grid": {"model": "deep_mnist", "device": "cpu"}},
    }}
    with pytest.raises(study.ConfigError, match=(
            r"^study 'calibration': kind: .* calibration cells that 'a' asks for .*: its kind "
            r"must be calibrate; name this study otherwise$")):
        study.expand_config(config)
    config["studies"]["a"]["calibrate"] = False
    assert {c.kind for c in study.expand_config(config)} == {"model"}


def test_a_calibration_study_sets_its_own_sizes_and_its_devices_are_not_calibrated_twice():
    """A large CPU node reaches its best GEMM beyond the default n = 1024: a study named
    calibration gives the sizes; the runner gets them, the cell's id says so, and
    calibrate: true adds a default cell only for a device the study does not list. A bad
    size list is one line naming the study and the field."""
    from dlbench import kinds

    config = {"studies": {
        "calibration": {"kind": "calibrate", "grid": {
            "device": "cpu", "gemm_sizes": "2048,4096", "stream_elements": 2**27}},
        "a": {"calibrate": True, "grid": {"model": "deep_mnist", "device": ["cpu", "gpu"]}},
    }}
    calibration = {c.params["device"]: c for c in study.expand_config(config)
                   if c.kind == "calibrate"}
    assert sorted(calibration) == ["cpu", "gpu"]
    cpu_cell, gpu_cell = calibration["cpu"], calibration["gpu"]
    assert kinds.get("calibrate").command(cpu_cell.params, Path("o.json"), "py", None)[3:] == [
        "--device=cpu", "--gemm_sizes=2048,4096", f"--stream_elements={2**27}"]
    assert kinds.get("calibrate").command(gpu_cell.params, Path("o.json"), "py", None)[3:] == [
        "--device=gpu"]
    default = study.Cell(study.CALIBRATION_STUDY, "calibrate",
                         {"framework": "pytorch", "device": "cpu"})
    assert cpu_cell.id != default.id  # other sizes: another measurement
    config["studies"]["calibration"]["grid"]["gemm_sizes"] = "2048,4k"
    with pytest.raises(study.ConfigError, match=r"^study 'calibration': gemm_sizes: '4k' is "
                                                r"no GEMM size"):
        study.expand_config(config)


# -- the calibration runner on this CPU ---------------------------------------------------


def test_calibration_runner_measures_gemm_and_stream_on_this_cpu(tmp_path):
    """A real calibration at small sizes through the launcher: GEMM per native precision
    (TFLOP/s), copy and triad (GB/s), and the precisions this CPU emulates named, not
    measured. (The GPU sweep is exercised only where a GPU is lent.)"""
    cell = study.Cell(study.CALIBRATION_STUDY, "calibrate",
                      {"framework": "pytorch", "device": "cpu"})
    out = tmp_path / "cells" / f"{cell.id}.json"
    done = subprocess.run([sys.executable, "-m", "dlbench.calibrate", "--device", "cpu",
                           "--gemm_sizes", "48,96", "--stream_elements", str(2**20),
                           "--monitor_interval_ms=5",
                           f"--output={out}", f"--study={cell.study}", f"--cell_id={cell.id}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    res = R.read(out)
    R.validate(res)
    assert res["kind"] == "calibration" and res["status"] == "ok"
    assert (res["cell"]["gemm_sizes"], res["cell"]["stream_elements"]) == ("48,96", 2**20)
    by_name = {m["name"]: m for m in res["measurements"]}
    info = cpu.this_cpu()
    native = [p for p in ("float64", "float32", "bfloat16", "float16")
              if info is None or info.native(p)]
    assert sorted(k for k in by_name if k.startswith("gemm_")) == \
        sorted(f"gemm_{p}_{n}" for p in native for n in (48, 96))
    for m in by_name.values():
        if m["op_name"] == "gemm":
            n = m["extra"]["size"]
            assert m["flops_per_iteration"] == 2 * n**3 and m["tflops"] > 0
        else:
            assert m["op_name"] in ("copy", "triad") and m["gbps"] > 0
    assert {"copy", "triad"} <= {m["op_name"] for m in res["measurements"]}
    # The resource monitor around the sweep (its power where a GPU or RAPL gives one).
    assert res["extra"]["monitor"]["enabled"] and res["extra"]["monitor"]["sample_count"] >= 1
    assert res["extra"]["monitor"]["window"].startswith("the whole sweep")
    assert res["extra"]["monitor"]["samples_per_joule"] is None
    # Each kernel's operands are built, warmed and measured in turn: three stages.
    assert {"build", "warmup", "measure"} <= set(res["stages_s"])
    emulated = sorted(set(("float64", "float32", "bfloat16", "float16")) - set(native))
    assert res["extra"].get("emulated_precisions_not_measured", []) == \
        [p for p in ("bfloat16", "float16") if p in emulated]


def test_the_float8_gemm_kernel_computes_the_product_its_work_counts_on_this_cpu():
    """The FP8 ceiling's kernel (torch._scaled_mm, e4m3 operands, bfloat16 output) runs on
    the CPU too: its result is the product of its operands, its FLOPs and bytes are those
    of an n x n GEMM of one-byte operands. Its speed on FP8 tensor cores, and the sweep
    that measures it (GPUs of capability 8.9 or newer), are exercised only where a GPU is
    lent; no CPU is sent to it."""
    import torch

    from dlbench.calibrate import kernels

    n, device = 32, torch.device("cpu")
    assert not kernels.float8_supported(device)
    assert "float8" not in kernels.GEMM_PRECISIONS["cpu"]
    kernel = kernels.gemm(n, "float8", device)
    assert (kernel.name, kernel.flops, kernel.bytes) == (
        "gemm_float8_32", 2.0 * n**3, 2.0 * n * n + 2.0 * n * n)
    kernel.run()
    # The operands and the output, from the closure's cells (what run multiplies).
    cells = dict(zip(kernel.run.__code__.co_freevars,
                     (c.cell_contents for c in kernel.run.__closure__), strict=True))
    a, b, out = cells["a"], cells["b"], cells["out"]
    assert a.dtype == b.dtype == torch.float8_e4m3fn and out.dtype == torch.bfloat16
    expected = a.float() @ b.float()
    assert torch.allclose(out.float(), expected, rtol=1e-2, atol=1e-2)
    # Uniform [0, 1) rounded to e4m3: within [0, 1], and not one value repeated.
    assert float(a.float().min()) >= 0.0 and float(a.float().max()) <= 1.0
    assert len(torch.unique(a.float())) > 10
    assert kernel.facts["data"] == "uniform [0, 1)"


# -- efficiency columns -------------------------------------------------------------------


def test_pct_of_peak_mfu_and_pct_of_measured_on_the_same_system_only(tmp_path):
    frame = table(tmp_path, [
        model_doc("bfloat16", 494.7),  # half of the H100 SXM's dense bf16 peak, 989.4
        model_doc("float32", 20.0),
        calibration_doc({"bfloat16": 700.0, "float32": 50.0}, 3000.0),
        calibration_doc({"bfloat16": 100.0}, 100.0, system="sysB"),
    ])
    bf16 = frame[(frame.kind == "model") & (frame.precision == "bfloat16")].iloc[0]
    assert bf16.efficiency_precision == "bfloat16"
    assert bf16.peak_tflops == pytest.approx(989.4)
    assert bf16.pct_of_peak == pytest.approx(50.0, rel=1e-6)
    assert bf16.mfu == pytest.approx(0.5, rel=1e-6)
    assert bf16.measured_tflops == pytest.approx(700.0, rel=1e-6)  # not sysB's 100
    assert bf16.pct_of_measured == pytest.approx(100 * 494.7 / 700.0, rel=1e-6)
    fp32 = frame[(frame.kind == "model") & (frame.precision == "float32")].iloc[0]
    assert fp32.pct_of_peak == pytest.approx(100 * 20.0 / 67.0, rel=1e-3)
    gemm = frame[(frame.kind == "calibration") & (frame.name == "gemm_bfloat16_8192")
                 & (frame.system == "sysA")].iloc[0]
    assert gemm.pct_of_peak == pytest.approx(100 * 700.0 / 989.4, rel=1e-6)
    triad = frame[(frame.op_name == "triad") & (frame.system == "sysA")].iloc[0]
    assert triad.pct_of_peak_gbps == pytest.approx(100 * 3000.0 / 3350.0, rel=1e-3)


def test_a_data_parallel_cells_efficiency_is_per_device(tmp_path):
    """A cell's TFLOP/s count every rank's work while the ceilings are one device's: 8 GPUs
    on 2 nodes at 16 x 494.7 TFLOP/s is half the bf16 peak of each (it read 8, an MFU of 800
    %), on the roofline too; the table keeps the cell's total."""
    doc = model_doc("bfloat16", 16 * 494.7, num_gpus=8, num_nodes=2, model="paradnn_fc")
    doc["measurements"][0]["bytes_per_iteration"] = 1e9
    doc["measurements"][0]["gbps"] = 16 * 1000.0
    frame = table(tmp_path, [doc, calibration_doc({"bfloat16": 700.0}, 3000.0)])
    cell = frame[frame.kind == "model"].iloc[0]
    assert cell.tflops == pytest.approx(16 * 494.7, rel=1e-6)
    assert cell.mfu == pytest.approx(0.5, rel=1e-6)
    assert cell.pct_of_peak == pytest.approx(50.0, rel=1e-6)
    assert cell.pct_of_measured == pytest.approx(100 * 494.7 / 700.0, rel=1e-6)
    assert cell.pct_of_peak_gbps == pytest.approx(100 * 1000.0 / 3350.0, rel=1e-3)
    pts, _ = roofline_charts.placed(frame)
    assert pts[pts.family == "paradnn_fc"].tflops.iloc[0] == pytest.approx(494.7, rel=1e-6)
    assert efficiency.devices({"device": "cpu", "num_gpus": 4}) == 1
    assert efficiency.devices({"device": "gpu", "num_gpus": float("nan")}) == 1
    import numpy as np

    assert efficiency.devices({"device": "gpu", "num_gpus": np.int64(4),
                               "num_nodes": np.int64(2)}) == 8


def test_the_model_efficiency_table_has_a_row_per_cell_at_its_time_and_per_device(tmp_path):
    """A 2-GPU cell run three times (medians t, 1.2t, 1.4t) is one row, at the mean of its
    runs' medians (1.2t), its total TFLOP/s beside its rate per device, the one its MFU is
    of; a cell apart in its execution mode and model options has both named."""
    runs = []
    for repeat, slower in enumerate((1.0, 1.2, 1.4)):
        doc = model_doc("bfloat16", 2 * 494.7, num_gpus=2)  # at t: half the peak per GPU
        m = doc["measurements"][0]
        m.update(R.measurement(name=m["name"], pass_=m["pass"],
                               times_s=[t * slower for t in m["times_s"]],
                               items_per_iteration=m["items_per_iteration"],
                               flops_per_iteration=m["flops_per_iteration"]))
        doc["repeat"] = repeat
        runs.append(doc)
    other = model_doc("bfloat16", 2 * 494.7, num_gpus=2)
    other["cell"].update(compile="inductor", model_opts={"width": 2})
    other["cell_id"] += "_inductor"
    numbers = efficiency_tables.model_efficiency_table(table(tmp_path, [*runs, other]))
    rows = numbers.frame.set_index("model")
    assert sorted(rows.index) == ["resnet50", "resnet50 (width=2)"]
    assert rows.loc["resnet50", "tflops"] == pytest.approx(2 * 494.7 / 1.2, rel=1e-6)
    assert rows.loc["resnet50", "device_tflops"] == pytest.approx(494.7 / 1.2, rel=1e-6)
    assert rows.loc["resnet50", "mfu"] == pytest.approx(0.5 / 1.2, rel=1e-6)
    assert rows.loc["resnet50 (width=2)", "mfu"] == pytest.approx(0.5, rel=1e-6)
    assert rows["mode"].to_dict() == {"resnet50": "eager", "resnet50 (width=2)": "inductor"}
    titles = [c.title for c in numbers.columns]
    assert "execution mode" in titles and "TFLOP/s per device" in titles


def test_a_cpu_or_unknown_device_gets_no_vendor_peak_but_its_measured_ceiling(tmp_path):
    frame = table(tmp_path, [model_doc("float32", 0.05, device="cpu"),
                             calibration_doc({"float32": 0.1}, 20.0, device="cpu")])
    row = frame[frame.kind == "model"].iloc[0]
    assert pd.isna(row.peak_tflops) and pd.isna(row.pct_of_peak) and pd.isna(row.mfu)
    assert row.pct_of_measured == pytest.approx(50.0, rel=1e-6)


def test_an_operator_row_takes_its_inputs_dtype_and_two_dtypes_give_none(tmp_path):
    frame = table(tmp_path, [op_doc("bfloat16"), op_doc(None)])
    one = frame[frame.cell_id == "pytorch_mm_bfloat16"]
    assert set(one.efficiency_precision) == {"bfloat16"}
    assert one.pct_of_peak.tolist() == pytest.approx([100 * 100 / 989.4] * 2, rel=1e-6)
    mixed = frame[frame.cell_id == "pytorch_mm_None"]  # float and bfloat16 inputs
    assert mixed.efficiency_precision.isna().all() and mixed.pct_of_peak.isna().all()
    assert mixed.pct_of_peak_gbps.notna().all()  # bandwidth needs no precision


def comms_doc(*, system: str = "sysA") -> dict:
    cell = {"framework": "pytorch", "collective": "all_reduce", "data_type": "bfloat16",
            "num_gpus": 8, "device": "gpu"}
    res = R.new_result(kind="comms", cell=cell, study="net", cell_id="pytorch_all-reduce")
    res["system"] = system
    res["environment"] = env()
    size = 2.0**30
    m = R.measurement(name=f"all_reduce|{size:.0f}", op_name="all_reduce",
                      pass_="collective", times_s=[0.005, 0.005], items_per_iteration=1,
                      throughput_unit="iterations/s", bytes_per_iteration=size)
    m["extra"]["bus_gbps"] = m["gbps"] * 1.75
    res["measurements"] = [m]
    return R.finish(res, "ok")


def test_a_collective_is_not_measured_against_the_memorys_bandwidth(tmp_path):
    """A collective's 200 GB/s crossed NVLink: neither the H100's HBM peak nor the
    calibration's triad is its ceiling (an operator on the same GPU keeps both)."""
    frame = table(tmp_path, [comms_doc(), op_doc("bfloat16"),
                             calibration_doc({"bfloat16": 700.0}, 3000.0)])
    collective = frame[frame.kind == "comms"].iloc[0]
    assert collective.gbps == pytest.approx(2**30 / 0.005 / 1e9)
    for column in ("peak_gbps", "pct_of_peak_gbps", "measured_gbps", "pct_of_measured_gbps"):
        assert pd.isna(collective[column]), column
    op = frame[frame.kind == "op"].iloc[0]
    assert op.peak_gbps == pytest.approx(3350.0) and op.measured_gbps == pytest.approx(3000.0)


# -- roofline -----------------------------------------------------------------------------


def test_roof_is_the_minimum_of_compute_and_bandwidth_with_the_ridge_exact():
    roof = roofline_charts.roofs({"bfloat16": 800.0, "float32": 50.0}, 4000.0, 0.1, 1e4,
                                 ["float32", "bfloat16"])
    for precision, peak in (("bfloat16", 800.0), ("float32", 50.0)):
        curve = roof[roof.precision == precision]
        for r in curve.itertuples():
            assert r.tflops == pytest.approx(min(peak, 4000.0 * r.intensity / 1000.0))
        ridge = 1000.0 * peak / 4000.0  # 200 FLOP/byte for bf16, 12.5 for fp32
        assert (curve.intensity == ridge).any()
        assert curve.tflops.max() == pytest.approx(peak)


def test_roofline_uses_measured_ceilings_else_the_vendors_else_none(tmp_path):
    measured = table(tmp_path / "m", [op_doc("bfloat16"),
                                      calibration_doc({"bfloat16": 700.0}, 3000.0)])
    pts, panels = roofline_charts.placed(measured)
    (roof, source), = panels.values()
    assert source == "measured" and roof.tflops.max() == pytest.approx(700.0, rel=1e-6)
    # the large mm: 2 TFLOP over 1 GB = 2000 FLOP/byte, above the ridge: under the flat roof
    big = pts[(pts.intensity - 2000.0).abs() < 1e-6].iloc[0]
    assert big.pct_of_roof == pytest.approx(100 * 100.0 / 700.0, rel=1e-6)
    vendor = table(tmp_path / "v", [op_doc("bfloat16")])
    (roof, source), = roofline_charts.placed(vendor)[1].values()
    assert source == "vendor" and roof.tflops.max() == pytest.approx(989.4)
    cpu_only = table(tmp_path / "c", [op_doc("bfloat16", device="cpu")])
    (roof, source), = roofline_charts.placed(cpu_only)[1].values()
    assert source == "none" and roof.empty
    assert roofline_charts.roofline_figure(cpu_only) is not None  # points, no roof


def test_roofline_names_paradnn_points_by_the_options_that_differ_and_the_batch(tmp_path):
    """Four ParaDnn FC cells (two layer counts, two batch sizes) are four distinct inputs
    in the roofline's table and tooltip, not four rows all called paradnn_fc."""
    docs = []
    for layers in (4, 8):
        for batch in (64, 256):
            doc = model_doc("float32", 0.1 * layers, model="paradnn_fc", batch=batch)
            doc["cell"]["model_opts"] = {"layers": layers, "nodes": 256}
            doc["cell_id"] += f"_l{layers}"
            doc["measurements"][0]["bytes_per_iteration"] = 1e6 * batch
            docs.append(doc)
    pts, _ = roofline_charts.placed(table(tmp_path, docs))
    assert sorted(pts["name"]) == ["layers=4 · batch 256", "layers=4 · batch 64",
                                   "layers=8 · batch 256", "layers=8 · batch 64"]


def test_a_language_models_decode_sits_on_the_roofline_by_the_bytes_it_reads(tmp_path):
    """Decode (bytes: the weights and KV cache a step reads) is a point, placed far left of
    the ridge, its share of the roof the share of the bandwidth; prefill (no bytes) is
    not."""
    from dlbench.models import llm as L

    cell = {"framework": "pytorch", "model": "llama3_8b", "precision": "bfloat16",
            "batch_size": 1, "prompt_length": 512, "output_length": 64, "device": "gpu"}
    res = R.new_result(kind="llm_inference", cell=cell, study="serve",
                       cell_id="pytorch_llama3_8b_serve")
    res["environment"] = env()
    opts = L.default_opts("llama3_8b")
    step = L.bytes_per_decode_step(opts, 1, 543, 2)
    res["measurements"] = [
        R.measurement(name="llama3_8b", pass_="prefill", times_s=[0.02] * 3,
                      items_per_iteration=512, throughput_unit="tokens/s",
                      flops_per_iteration=8e12),
        R.measurement(name="llama3_8b", pass_="decode", times_s=[0.0227] * 3,
                      items_per_iteration=1, throughput_unit="tokens/s",
                      flops_per_iteration=L.flops_per_decode_step(opts, 543),
                      bytes_per_iteration=step)]
    pts, panels = roofline_charts.placed(table(tmp_path, [R.finish(res, "ok")]))
    (point,) = (r for _, r in pts.iterrows())
    assert (point["family"], point["name"], point["pass"]) == (
        "llama3_8b", "batch 1 · prompt 512", "decode")
    assert point["intensity"] == pytest.approx(L.flops_per_decode_step(opts, 543) / step)
    assert point["intensity"] < 2  # about one multiply-add per weight read
    gbps = step / 0.0227 / 1e9
    assert point["pct_of_roof"] == pytest.approx(100 * gbps / 3350.0, rel=1e-6)  # H100 HBM3


# -- scaling ------------------------------------------------------------------------------


def test_weak_and_strong_scaling_efficiency_from_a_hand_made_table(tmp_path):
    docs = [model_doc("float32", 1.0, num_gpus=n, batch=64, throughput=x)
            for n, x in ((1, 1000.0), (2, 1800.0), (4, 3200.0))]
    # strong scaling at global batch 64: 64 x 1, 32 x 2, 16 x 4
    docs += [model_doc("float32", 1.0, num_gpus=n, batch=b, throughput=x)
             for n, b, x in ((2, 32, 1500.0), (4, 16, 2000.0))]
    docs.append(model_doc("float32", 1.0, num_gpus=8, batch=8, throughput=9.0,
                          model="alexnet"))  # no 1-GPU cell: no series
    data = scaling_charts.scaling_frame(table(tmp_path, docs))
    weak = data[(data.scaling == "weak") & (data.batch_size == 64)].set_index("num_gpus")
    assert weak.speedup.to_dict() == pytest.approx({1: 1.0, 2: 1.8, 4: 3.2})
    assert weak.efficiency.to_dict() == pytest.approx({1: 1.0, 2: 0.9, 4: 0.8})
    strong = data[(data.scaling == "strong") & (data.global_batch == 64)].set_index("num_gpus")
    assert strong.efficiency.to_dict() == pytest.approx({1: 1.0, 2: 0.75, 4: 0.5})
    assert "alexnet" not in set(data.model)
    assert data.groupby("series").num_gpus.apply(lambda s: s.is_unique).all()


def test_scaling_counts_the_gpus_of_every_node_of_a_cell(tmp_path):
    """A node-scaling study: 8 GPUs on 1, 2 and 4 nodes is n = 8, 16, 32 of one series, with
    the single-GPU cell (a result from before num_nodes: one node) as its base; a cell of
    8 GPUs on two nodes of 4 is in the table, not on the line beside the 1-node one."""
    docs = [model_doc("float32", 1.0, num_gpus=1, throughput=100.0)]
    docs += [model_doc("float32", 1.0, num_gpus=8, num_nodes=n, throughput=x)
             for n, x in ((1, 760.0), (2, 1440.0), (4, 2560.0))]
    docs.append(model_doc("float32", 1.0, num_gpus=4, num_nodes=2, throughput=700.0))
    data = scaling_charts.scaling_frame(table(tmp_path, docs))
    weak = data[data.scaling == "weak"]
    line = weak[weak.on_line].set_index("num_gpus")
    assert line.efficiency.to_dict() == pytest.approx(
        {1: 1.0, 8: 0.95, 16: 0.9, 32: 0.8})
    assert line.num_nodes.to_dict() == {1: 1, 8: 1, 16: 2, 32: 4}
    (off,) = weak[~weak.on_line].itertuples()
    assert (off.num_gpus, off.num_nodes, off.efficiency) == (8, 2, pytest.approx(700 / 800))
    assert weak.series.nunique() == 1


def test_scaling_counts_in_the_cells_throughput_unit(tmp_path):
    """A language model's scaling table is in tokens/s, as its throughput is."""
    docs = [model_doc("float32", 1.0, num_gpus=n, throughput=x)
            for n, x in ((1, 1000.0), (2, 1800.0))]
    for doc in docs:
        doc["measurements"][0]["throughput_unit"] = "tokens/s"
    figure = scaling_charts.scaling_figure(table(tmp_path, docs))
    titles = [c.title for c in figure.table.columns]
    assert "tokens/s" in titles
    # GPUs only: n counts GPUs, against perfect scaling (1.0, dashed), in one row of panels
    assert "GPUs" in titles and "batch per GPU" in titles and "efficiency" in titles
    spec = figure.chart.to_dict()
    lines, parity = spec["spec"]["layer"]
    assert lines["encoding"]["x"]["title"] == "GPUs (on all nodes)"
    assert parity["encoding"]["y"] == {"datum": 1.0} and "row" not in spec["facet"]
    assert figure.title == "Scaling efficiency across GPUs"


def cpu_scaling_docs() -> list[dict]:
    """Two data-parallel processes on one CPU, slower together than one alone (as two
    processes on a 2-core host measure): weak at batch 16, strong at global batch 32."""
    return [model_doc("float32", 0.01, device="cpu", num_gpus=n, batch=b, throughput=x)
            for n, b, x in ((1, 16, 256.0), (2, 16, 146.6), (1, 32, 417.6))]


def test_processes_sharing_one_cpu_show_their_speed_up_and_no_perfect_scaling(tmp_path):
    """A CPU cell's processes share the CPU (dlbench.efficiency.devices is 1): the chart
    names them processes, draws their speed-up, and no dashed perfect-scaling line."""
    frame = table(tmp_path, cpu_scaling_docs())
    figure = scaling_charts.scaling_figure(frame)
    data = scaling_charts.scaling_frame(frame)
    weak = data[data.scaling == "weak"].set_index("num_gpus")
    assert weak.speedup.to_dict() == pytest.approx({1: 1.0, 2: 146.6 / 256.0})
    assert data.efficiency.isna().all() and set(data.devices) == {1}
    spec = figure.chart.to_dict()
    (lines,) = spec["spec"]["layer"]  # no rule at 1.0
    assert lines["encoding"]["x"]["title"] == "processes (sharing one CPU)"
    assert lines["encoding"]["y"]["title"] == "speed-up X(n) / X(1)"
    assert 'stroke-dasharray="4,3"' not in vl_convert.vegalite_to_svg(spec)
    assert "share its cores" in figure.caption and "1.0 (dashed)" not in figure.caption
    titles = [c.title for c in figure.table.columns]
    assert "processes" in titles and "batch per process" in titles
    assert "efficiency" not in titles and "GPUs" not in titles
    assert figure.table.required == "speedup"  # the rows without an efficiency stay


def test_mxnet_cpu_contexts_of_one_process_are_no_scaling_series(tmp_path):
    """On a CPU, MXNet's num_gpus makes contexts in one process sharing one thread pool:
    neither processes nor devices, so they make no scaling series; PyTorch's processes
    beside them still do."""
    docs = cpu_scaling_docs()
    for doc in docs:
        doc["cell"]["framework"] = "mxnet"
        doc["cell_id"] = doc["cell_id"].replace("pytorch", "mxnet")
    assert scaling_charts.scaling_frame(table(tmp_path / "mx", docs)).empty
    data = scaling_charts.scaling_frame(table(tmp_path / "both", docs + cpu_scaling_docs()))
    assert set(data["framework"]) == {"pytorch"}


def test_gpu_efficiency_and_cpu_speed_up_share_a_chart_in_rows_of_their_own(tmp_path):
    """GPU and CPU series in one study: the GPUs' efficiency above the CPU processes'
    speed-up, each with its own y axis; the perfect-scaling line is the GPUs' only."""
    docs = cpu_scaling_docs() + [model_doc("float32", 1.0, num_gpus=n, throughput=x)
                                 for n, x in ((1, 1000.0), (2, 1800.0))]
    frame = table(tmp_path, docs)
    data = scaling_charts.scaling_frame(frame)
    gpu = data[(data.device == "gpu") & (data.scaling == "weak")].set_index("num_gpus")
    assert gpu.efficiency.to_dict() == pytest.approx({1: 1.0, 2: 0.9})
    assert data[data.device == "cpu"].efficiency.isna().all()
    figure = scaling_charts.scaling_figure(frame)
    spec = figure.chart.to_dict()
    assert spec["facet"]["row"]["field"] == "measure"
    assert spec["resolve"]["scale"]["y"] == "independent"
    lines, parity = spec["spec"]["layer"]
    assert parity["transform"] == [{"filter": "datum.per_device"}]
    assert lines["encoding"]["x"]["title"] == (
        "GPUs (on all nodes) or processes (sharing one CPU)")
    svg = vl_convert.vegalite_to_svg(spec)
    assert "efficiency (GPUs; 1 = perfect)" in svg and "speed-up (processes sharing one CPU)" in svg
    assert 'stroke-dasharray="4,3"' in svg
    assert "GPUs or processes" in [c.title for c in figure.table.columns]


def failed_doc(doc: dict, status: str = "failed") -> dict:
    """``doc``'s cell without a result (a crash, or out of memory)."""
    doc["measurements"] = []
    return R.finish(doc, status, "boom")


def test_a_node_scaling_study_is_measured_against_its_smallest_n(tmp_path):
    """8 GPUs on 1, 2 and 4 nodes (docs/clusters.md's study) has no 1-GPU cell: it was
    left out of the scaling view without a word. Its baseline is n = 8, said in the y
    title, the caption and a column."""
    docs = [model_doc("float32", 1.0, num_gpus=8, num_nodes=n, throughput=x)
            for n, x in ((1, 800.0), (2, 1440.0), (4, 2560.0))]
    frame = table(tmp_path, docs)
    weak = scaling_charts.scaling_frame(frame).query("scaling == 'weak'").set_index("num_gpus")
    assert weak.speedup.to_dict() == pytest.approx({8: 1.0, 16: 1.8, 32: 3.2})
    assert weak.efficiency.to_dict() == pytest.approx({8: 1.0, 16: 0.9, 32: 0.8})
    assert set(weak.n0) == {8} and weak.ideal.to_dict() == pytest.approx({8: 1, 16: 2, 32: 4})
    figure = scaling_charts.scaling_figure(frame)
    lines = figure.chart.to_dict()["spec"]["layer"][0]
    assert lines["encoding"]["y"]["title"] == "efficiency 8 X(n) / (n X(8))"
    assert "baseline: 8 GPUs" in figure.caption and "n / n0" in figure.caption
    assert "baseline (GPUs)" in [c.title for c in figure.table.columns]


def test_a_series_whose_first_cells_failed_starts_at_its_next_n_and_says_so(tmp_path):
    """Its 1-GPU cell out of memory, a series of 1, 2 and 4 GPUs is measured against 2; a
    series left with one result, and a model at one GPU count, are named, not dropped."""
    docs = [failed_doc(model_doc("float32", 1.0, num_gpus=1, throughput=1000.0), "oom")]
    docs += [model_doc("float32", 1.0, num_gpus=n, throughput=x)
             for n, x in ((2, 1800.0), (4, 3240.0))]
    docs += [failed_doc(model_doc("float32", 1.0, num_gpus=1, throughput=9.0, model="vgg16")),
             model_doc("float32", 1.0, num_gpus=2, throughput=9.0, model="vgg16"),
             model_doc("float32", 1.0, num_gpus=8, batch=8, throughput=9.0, model="alexnet")]
    frame = table(tmp_path, docs)
    weak = scaling_charts.scaling_frame(frame).query("scaling == 'weak'").set_index("num_gpus")
    assert weak.efficiency.to_dict() == pytest.approx({2: 1.0, 4: 0.9})
    assert set(weak.model) == {"resnet50"}
    notes = scaling_charts.scaling_notes(frame)
    assert notes == [
        "resnet50 · batch size 64 (weak): no result at n = 1 (oom); measured against n = 2.",
        "vgg16 · batch size 64 (weak): not drawn, a result at n = 2 only; none at n = 1 "
        "(failed).",
        "alexnet: not drawn, a result at n = 8 only."]
    assert all(note in scaling_charts.scaling_figure(frame).caption for note in notes)


def test_nothing_to_draw_still_says_which_series_lost_their_cells(tmp_path):
    docs = [failed_doc(model_doc("float32", 1.0, num_gpus=1)),
            model_doc("float32", 1.0, num_gpus=2, throughput=1800.0)]
    assert scaling_charts.scaling_figure(table(tmp_path, docs)) == (
        '<p class="note">resnet50 · batch size 64 (weak): not drawn, a result at n = 2 only; '
        "none at n = 1 (failed).</p>")
    # every cell failed: still said, not a silent absence of the section
    docs = [failed_doc(model_doc("float32", 1.0, num_gpus=n)) for n in (1, 2)]
    assert scaling_charts.scaling_figure(table(tmp_path / "all", docs)) == (
        '<p class="note">resnet50 · batch size 64 (weak): not drawn, no result; none at '
        "n = 1 (failed), n = 2 (failed).</p>")


def test_the_title_and_caption_say_what_is_drawn(tmp_path):
    """CPU nodes beside processes sharing a CPU are no GPUs; single runs have no interval,
    so no whiskers are spoken of; an ok cell without a rate is said as such."""
    across = [model_doc("float32", 0.01, device="cpu", num_gpus=1, num_nodes=n, throughput=x)
              for n, x in ((1, 256.0), (2, 486.4))]
    figure = scaling_charts.scaling_figure(table(tmp_path, across + cpu_scaling_docs()))
    assert figure.title == "Scaling across CPU nodes, and across processes sharing one CPU"
    assert "Whiskers" not in figure.caption
    docs = [model_doc("float32", 1.0, num_gpus=n, throughput=x)
            for n, x in ((1, 1000.0), (2, 1800.0), (4, 3200.0))]
    frame = table(tmp_path / "nan", docs)
    frame.loc[frame["num_gpus"] == 2, ["throughput", "cell_throughput"]] = float("nan")
    assert scaling_charts.scaling_notes(frame) == [
        "resnet50 · batch size 64 (weak): no result at n = 2 (no throughput)."]


def test_a_cpu_cell_counts_one_device_per_node():
    """The processes of a node share its CPU; two nodes are two CPUs (a 2-node CPU cell
    read 187 % of one CPU's measured ceiling)."""
    assert efficiency.devices({"device": "cpu", "num_gpus": 2, "num_nodes": 2}) == 2
    assert efficiency.devices({"device": "cpu", "num_gpus": 4}) == 1
    assert efficiency.devices({"device": "cpu", "num_gpus": 4, "num_nodes": float("nan")}) == 1
    assert efficiency.devices({"device": "gpu", "num_gpus": 4, "num_nodes": 2}) == 8
    row = {"kind": "model", "device": "cpu", "num_gpus": 1, "num_nodes": 2, "tflops": 0.15,
           "precision": "float32", "cpu_model": "AMD EPYC 9654", "system": "sysA"}
    calibration = {"kind": "calibration", "status": "ok", "op_name": "gemm", "tflops": 0.08,
                   "device": "cpu", "cpu_model": "AMD EPYC 9654", "system": "sysA",
                   "extra": '{"precision": "float32"}'}
    efficiency.add_columns([row, calibration])
    assert row["pct_of_measured"] == pytest.approx(100 * 0.075 / 0.08)


def test_cpu_processes_across_nodes_add_devices_and_within_one_share_it(tmp_path):
    """One process on each of 2 nodes is two CPUs: an efficiency against one; two
    processes on one node still share its CPU: a speed-up alone."""
    across = [model_doc("float32", 0.01, device="cpu", num_gpus=1, num_nodes=n, throughput=x)
              for n, x in ((1, 256.0), (2, 486.4))]
    frame = table(tmp_path / "across", across)
    data = scaling_charts.scaling_frame(frame).query("scaling == 'weak'").set_index("num_gpus")
    assert data.efficiency.to_dict() == pytest.approx({1: 1.0, 2: 0.95})
    assert data.devices.to_dict() == {1: 1, 2: 2}
    spec = scaling_charts.scaling_figure(frame).chart.to_dict()
    assert spec["spec"]["layer"][0]["encoding"]["x"]["title"] == "processes (one CPU per node)"
    both = scaling_charts.scaling_frame(table(tmp_path / "both", across + cpu_scaling_docs()))
    shared = both[(both.scaling == "weak") & (both.batch_size == 16)]
    assert shared.efficiency.isna().all() and not shared.per_device.any()


def unsteady(frame: pd.DataFrame, n: int, low: float, high: float,
             unstable: bool = False) -> pd.DataFrame:
    """``frame`` with the n-GPU cells' time interval and unstable flag set (as repeats
    that disagree leave them)."""
    at = frame["num_gpus"] == n
    frame.loc[at, ["cell_time_ci_low_s", "cell_time_ci_high_s"]] = (low, high)
    frame.loc[at, "unstable"] = unstable
    return frame


def test_a_speed_up_carries_its_cells_intervals_and_their_instability(tmp_path):
    """A baseline whose runs disagree (CV 117 %) made a 'speed-up 1.81' with no spread
    and no flag: the interval is the ratio of opposite ends, whiskered, and the point is
    ringed where its cell or its baseline is unstable."""
    docs = [model_doc("float32", 1.0, num_gpus=n, throughput=x)
            for n, x in ((1, 1000.0), (2, 1800.0))]
    frame = table(tmp_path, docs)
    frame = unsteady(unsteady(frame, 1, 0.05, 0.08, unstable=True), 2, 0.06, 0.075)
    data = scaling_charts.scaling_frame(frame).query("scaling == 'weak'").set_index("num_gpus")
    # items: 64 per GPU; X = items / time, the ends from the other end of the time
    assert data.speedup_low[2] == pytest.approx((128 / 0.075) / (64 / 0.05))
    assert data.speedup_high[2] == pytest.approx((128 / 0.06) / (64 / 0.08))
    assert pd.isna(data.speedup_low[1])  # the baseline against itself: 1 by definition
    assert data.unstable.to_dict() == {1: True, 2: True}
    figure = scaling_charts.scaling_figure(frame)
    layers = figure.chart.to_dict()["spec"]["layer"]
    marks = [(lay["mark"]["type"] if isinstance(lay["mark"], dict) else lay["mark"])
             for lay in layers]
    assert marks == ["line", "rule", "point", "rule"]
    assert layers[1]["encoding"]["y"]["field"] == "y_low"
    assert layers[2]["mark"]["color"] == "#d64545" and "Ringed" in figure.caption
    titles = [c.title for c in figure.table.columns]
    assert {"speed-up 95 % CI from", "speed-up 95 % CI to", "unstable"} <= set(titles)


def test_cpu_scaling_says_the_threads_of_each_process(tmp_path):
    """1 process of 2 threads and 2 processes of 1 are the same cores spent differently."""
    docs = cpu_scaling_docs()
    for doc in docs:
        doc["environment"]["library_flags"] = {"num_threads": 2 // doc["cell"]["num_gpus"]}
    figure = scaling_charts.scaling_figure(table(tmp_path, docs))
    assert "threads per process" in [c.title for c in figure.table.columns]
    data = scaling_charts.scaling_frame(table(tmp_path, docs)).query("scaling == 'weak'")
    assert data.set_index("num_gpus").threads.to_dict() == {1: 2, 2: 1}
    gpu = [model_doc("float32", 1.0, num_gpus=n, throughput=x) for n, x in ((1, 9.0), (2, 9.0))]
    assert "threads per process" not in [
        c.title for c in scaling_charts.scaling_figure(table(tmp_path / "g", gpu)).table.columns]


def test_the_model_efficiency_table_counts_a_cpu_cells_processes_not_gpus(tmp_path):
    docs = [model_doc("float32", 0.02, device="cpu", num_gpus=2),
            calibration_doc({"float32": 0.1}, 20.0, device="cpu")]
    cpu_only = efficiency_tables.model_efficiency_table(table(tmp_path, docs))
    titles = [c.title for c in cpu_only.columns]
    assert "processes" in titles and "TFLOP/s (all processes)" in titles
    assert "GPUs" not in titles and "TFLOP/s (all GPUs)" not in titles
    docs += [model_doc("bfloat16", 400.0, num_gpus=2),
             calibration_doc({"bfloat16": 700.0}, 3000.0)]
    both = efficiency_tables.model_efficiency_table(table(tmp_path, docs))
    titles = [c.title for c in both.columns]
    assert "GPUs or processes" in titles and "TFLOP/s (all GPUs or processes)" in titles


def test_the_calibration_table_says_why_a_cpu_has_no_peak_and_what_it_did_not_measure(
        tmp_path):
    cpu_doc = calibration_doc({"float32": 0.1}, 20.0, device="cpu")
    cpu_doc["extra"]["emulated_precisions_not_measured"] = ["bfloat16", "float16"]
    unknown = calibration_doc({"bfloat16": 300.0}, 900.0, system="sysB")
    unknown["environment"] = env("Some Future GPU")
    known = calibration_doc({"bfloat16": 700.0}, 3000.0, system="sysC")
    known["extra"]["unsupported_precisions_not_measured"] = ["float8"]
    html = efficiency_tables.calibration_table(table(tmp_path, [cpu_doc, unknown, known]))
    notes = re.findall(r'<p class="note">([^<]*)</p>', html)
    assert notes == [
        "sysA · cpu · AMD EPYC 9654: no vendor peak for CPUs, so no % of peak and no MFU; "
        "bfloat16/float16 emulated here, not measured.",
        "sysB · gpu · Some Future GPU: no vendor peak known for this GPU "
        "(dlbench/peaks.yaml), so no % of peak and no MFU.",
        f"sysC · gpu · {H100}: float8 not supported here, not measured."]


def test_hardware_roofline_and_scaling_sections_render(tmp_path):
    docs = [model_doc("bfloat16", 400.0, num_gpus=n, throughput=1000.0 * n * 0.9 ** (n - 1))
            for n in (1, 2)]
    docs += [op_doc("bfloat16"), calibration_doc({"bfloat16": 700.0}, 3000.0)]
    table(tmp_path, docs)
    render(tmp_path / "benchmarks.parquet", tmp_path / "report")
    html = (tmp_path / "report" / "index.html").read_text()
    for section in ("hardware", "roofline", "scaling"):
        assert f'id="{section}"' in html
    assert (tmp_path / "report" / "charts" / "roofline.svg").is_file()
    assert (tmp_path / "report" / "charts" / "scaling.svg").is_file()
    assert "MFU" in html and "% of roof" in html


def test_efficiency_columns_are_in_the_table_schema_as_numbers():
    types = {f.name: str(f.type) for f in aggregate.SCHEMA}
    assert types["efficiency_precision"] == "string"
    assert {types[name] for name in efficiency.COLUMNS[1:]} == {"double"}


def test_paradnn_fc_bytes_read_each_products_operands_and_write_its_result_once():
    from dlbench.models import paradnn

    shape = (4, 256, 784, 10)
    # batch 0 and 1-byte elements leave the weights alone: ParaDnn's Φ.
    assert paradnn.fc_bytes(*shape, batch=0, element_size=1, training=False) == \
        paradnn.fc_phi(*shape)
    one = paradnn.fc_bytes(*shape, batch=64, element_size=4, training=False)
    # 784 -> 256 -> 256 -> 256 -> 256 -> 10: weights + 64 x (inputs + outputs) per product
    inputs, outputs = 784 + 4 * 256, 4 * 256 + 10
    assert one == 4 * (paradnn.fc_phi(*shape) + 64 * (inputs + outputs))
    # Training: two more products per layer backward, but none for the first layer's
    # input gradient, which autograd never computes (the FLOP counter leaves it out too:
    # the roofline point was up to 27 % too far left on ParaDnn's own shapes).
    first = 784 * 256 + 64 * 784 + 64 * 256
    assert paradnn.fc_bytes(*shape, batch=64, element_size=4, training=True) == \
        3 * one - 4 * first


@pytest.mark.parametrize("flags, error", [
    (["--gemm_sizes", "0"], "--gemm_sizes: must be comma-separated whole numbers >= 1, got '0'"),
    (["--gemm_sizes", "128,abc"], "--gemm_sizes: must be comma-separated whole numbers >= 1"),
    (["--stream_elements", "-5"], "--stream_elements: must be a whole number >= 1, got '-5'"),
    (["--iterations", "0"], "--iterations: must be a whole number >= 1, got '0'"),
    (["--warmup", "-1"], "--warmup: must be a whole number >= 0, got '-1'"),
])
def test_calibration_flags_out_of_range_are_one_line_before_anything_runs(flags, error, capsys):
    """Once a failed cell with a traceback (a size 0), a result without its bandwidth
    ceiling (negative elements), or a 'no measured iterations' failure."""
    from dlbench.calibrate import runner

    with pytest.raises(SystemExit) as exit_:
        runner.parser().parse_args(["--device", "cpu", *flags])
    assert exit_.value.code == 2 and error in capsys.readouterr().err
    assert runner.parser().parse_args(["--gemm_sizes", "64,128", "--warmup", "0"]
                                      ).gemm_sizes == (64, 128)


def test_gpu_cells_with_nothing_to_hold_their_tflops_against_are_said_so(tmp_path):
    """A GPU the peak table does not know, and no calibration: the section "How close to
    the hardware" was left out without a word (read as a feature missing). A cell with a
    peak or a measured ceiling needs no line."""
    unknown = model_doc("bfloat16", 400.0)
    unknown["environment"] = env("NVIDIA GH200 480GB")
    frame = table(tmp_path, [unknown])
    assert efficiency_tables.model_efficiency_table(frame) is None
    assert efficiency_tables.no_ceiling_note(frame) == (
        '<p class="note">1 GPU model cell without MFU or % of measured: neither a vendor '
        "peak (dlbench/peaks.yaml) nor a measured ceiling for NVIDIA GH200 480GB in "
        "bfloat16; a study with calibrate: true measures its device&#x27;s.</p>")
    unnamed = model_doc("bfloat16", 400.0)
    unnamed["environment"] = env(None)
    assert "ceiling for an unnamed GPU in bfloat16;" in efficiency_tables.no_ceiling_note(
        table(tmp_path, [unnamed]))
    render(tmp_path / "benchmarks.parquet", tmp_path / "report")
    assert 'id="hardware"' in (tmp_path / "report" / "index.html").read_text()
    assert efficiency_tables.no_ceiling_note(table(tmp_path, [model_doc("bfloat16", 400.0)])) \
        is None


def test_fp8_is_measured_where_the_gpu_has_fp8_matrix_units_nvidias_and_amds(monkeypatch):
    """ROCm gives a GPU's gfx version as its capability: an MI250X (gfx90a, 9.0) passed
    NVIDIA's 8.9 rule, and each FP8 size failed in _scaled_mm instead of being named
    unsupported; an MI300X (gfx942) got NVIDIA's e4m3fn, not its own fnuz type. Not
    exercised: a GPU (torch.cuda's answers are stood in for)."""
    from types import SimpleNamespace

    import torch

    from dlbench.calibrate import kernels

    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    assert kernels.float8_type(gpu) == torch.float8_e4m3fn  # an H100
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    assert not kernels.float8_supported(gpu)  # an A100
    monkeypatch.setattr(torch.version, "hip", "6.4.0")
    for arch, want in (("gfx90a:sramecc+:xnack-", None), ("gfx942:sramecc+:xnack-",
                                                          torch.float8_e4m3fnuz),
                       ("gfx950", torch.float8_e4m3fn)):
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda d=None, arch=arch: SimpleNamespace(gcnArchName=arch))
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 4))
        assert kernels.float8_type(gpu) == want, arch
    assert not kernels.float8_supported(torch.device("cpu"))
