"""The HTML report: built from real result documents through the real aggregate Parquet."""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path
from types import SimpleNamespace

import altair as alt
import pandas as pd
import pytest
from headless_chromium import chart_names, chromium, drawn_charts, needs_chromium
from PIL import Image

from dlbench import aggregate
from dlbench import result as R
from dlbench.profiling import run as profile_run
from dlbench.profiling import tables as profile_tables
from dlbench.profiling.config import settings as profile_settings
from dlbench.report import (
    ReportError,
    WriteError,
    drift_charts,
    model_charts,
    op_charts,
    output,
    paradnn_charts,
    render,
    resource_charts,
    roofline_charts,
    sections,
    tables,
    time_charts,
)
from dlbench.report.data import load

ROOT = Path(__file__).resolve().parents[1]
FAILURE_ERROR = 'RuntimeError: shape <1x3> & "weights" mismatch'
# Seconds per sample at float32; lower precisions are faster by these factors.
SECONDS_PER_SAMPLE = {"resnet50": 2e-3, "alexnet": 4e-4}
SPEEDUP = {"float32": 1.0, "float16": 2.0, "bfloat16": 1.6}


def environment(framework: str = "pytorch") -> dict:
    return {
        "hostname": "node01", "cpu_model": "AMD EPYC 9654", "cpu_count": 192,
        "memory_gib": 1024.0, "gpu_models": ["NVIDIA H100 80GB HBM3"] * 2,
        "gpu_driver": "550.54.15", "cuda_version": "12.4", "cudnn_version": "9.1.0",
        "framework": framework, "framework_version": "2.5.1", "python_version": "3.11.9",
        "dlbench_version": "0.1.0", "dlbench_git_revision": "0123456789abcdef0123-dirty",
        "library_flags": {}, **({"nccl_version": "2.21.5"} if framework == "pytorch" else {}),
    }


def model_cell(model: str, phase: str, precision: str, batch: int, **over) -> dict:
    return {"framework": "pytorch", "model": model, "phase": phase, "precision": precision,
            "batch_size": batch, "num_gpus": 1, "device": "gpu", "data": "synthetic", **over}


GIB = 1024**3
NO_ENERGY = "not available on this host: no GPU sampled (CPU cell) and no readable RAPL counters"


def cell_id_of(cell: dict) -> str:
    return "_".join(str(cell[k]) for k in ("framework", "model", "phase", "precision",
                                           "batch_size"))


def monitor_summary(duration_s: float, items: float, *, rss: int, device: int | None,
                    gpu_power_w: float | None) -> dict:
    """``extra.monitor`` as ResourceMonitor.summary() and monitor.attach write it: a GPU cell
    whose energy comes from NVML's counter, or a CPU cell on a host without energy."""
    gpus = [] if device is None else [{
        "id": 0, "index": 0, "name": "NVIDIA H100 80GB HBM3", "power_mean_w": gpu_power_w,
        "power_max_w": gpu_power_w * 1.2, "utilization_mean_percent": 97.0,
        "memory_used_peak_bytes": device, "sm_clock_mean_mhz": 1755.0,
        "temperature_max_c": 61.0, "energy_j": gpu_power_w * duration_s,
        "energy_method": "nvml_total_energy"}]
    summary = {
        "enabled": True, "interval_ms": 100.0, "duration_s": duration_s,
        "sample_count": max(2, int(duration_s * 10)), "sampler_cpu_ms_mean": 0.4,
        "sampler_cpu_fraction": 0.004,
        "host": {"rss_peak_bytes": rss, "cpu_percent_mean": 101.0, "cpu_percent_max": 180.0,
                 "processes_max": 5},
        "gpus": gpus, "peak_host_rss_bytes": rss, "peak_device_memory_bytes": device,
    }
    if gpus:
        energy = gpus[0]["energy_j"]
        summary.update(energy_j=energy, energy_sources=["gpu:nvml_total_energy"],
                       energy_note="partial: no readable RAPL counters",
                       power_mean_w=energy / duration_s, power_max_w=gpus[0]["power_max_w"],
                       items=items, samples_per_joule=items / energy)
    else:
        summary.update(energy_j=None, energy_sources=[], energy_note=NO_ENERGY,
                       power_mean_w=None, power_max_w=None, items=items,
                       samples_per_joule=None)
    return {**summary, "notes": ["no readable RAPL counters"], "series_file": None}


def model_result(study: str, cell: dict, *, status: str = "ok", error: str | None = None,
                 monitored: bool = False) -> dict:
    res = R.new_result(kind="model", cell=cell, study=study, cell_id=cell_id_of(cell))
    res["environment"] = environment(cell["framework"])
    if status == "ok":
        batch = cell["batch_size"]
        per_iter = SECONDS_PER_SAMPLE[cell["model"]] * batch / SPEEDUP[cell["precision"]]
        times = [per_iter * (1 + 0.01 * (i % 3)) for i in range(6)]
        res["measurements"] = [R.measurement(
            name=cell["model"], pass_=cell["phase"], times_s=times, items_per_iteration=batch,
            parameters=25_557_032, flops_per_iteration=3 * 4.1e9 * batch)]
        if monitored:
            on_gpu = cell["device"] == "gpu"
            activations = int(batch * 50 * 2**20 / SPEEDUP[cell["precision"]])
            res["extra"]["monitor"] = monitor_summary(
                sum(times), batch * len(times), rss=3 * GIB + batch * 2**20,
                device=2 * GIB + activations if on_gpu else None,
                gpu_power_w=300.0 + 40 * SPEEDUP[cell["precision"]] if on_gpu else None)
    return R.finish(res, status, error)


def op_result(study: str) -> dict:
    cell = {"framework": "pytorch", "op_config": "/configs/simple_mm.json", "device": "gpu",
            "backward": True, "exec_mode": "discrete"}
    res = R.new_result(kind="op", cell=cell, study=study, cell_id="pytorch_simple_mm_gpu_fwbw")
    res["environment"] = environment()
    for i, n in enumerate((256, 512, 1024)):
        for pass_, factor in (("forward", 1.0), ("backward", 2.0)):
            t = factor * (2 * n**3) / 50e12 + 5e-6
            res["measurements"].append(R.measurement(
                name=f"torch.mm|0|{i}", op_name="torch.mm", pass_=pass_,
                times_s=[t, t * 1.02, t * 0.99], items_per_iteration=1, throughput_unit="calls/s",
                flops_per_iteration=factor * 2 * n**3, bytes_per_iteration=factor * 3 * n * n * 4))
    return R.finish(res, "ok")


def test_operator_cells_differing_in_any_axis_are_told_apart(tmp_path):
    """Two op cells of one config that differ in compile mode and the L2 flush: each
    measurement's variant names both (with the axis: a bare "off" says nothing), so that
    the time chart gives them their own rows and the rate charts their own lines; the
    axes both share are left out."""
    results = []
    for i, (compile_mode, l2) in enumerate((("eager", "on"), ("default", "off"))):
        res = op_result("ops")
        res["cell"] = {**res["cell"], "compile": compile_mode, "cuda_l2_cache": l2}
        res["cell_id"] = f"pytorch_simple_mm_gpu_fwbw_{i}"
        results.append(res)
    ops = op_charts.op_frame(load(write_parquet(tmp_path, results)))
    assert set(ops["variant"]) == {"compile eager · cuda_l2_cache on",
                                   "compile default · cuda_l2_cache off"}
    assert len(ops) == 2 * 6 and ops.groupby(["input", "pass", "variant"]).size().max() == 1
    figure = op_charts.time_figure(ops)
    assert "[compile default · cuda_l2_cache off]" in json.dumps(figure.chart.to_dict(),
                                                             ensure_ascii=False)
    one = op_charts.op_frame(load(write_parquet(tmp_path / "one", results[:1])))
    assert set(one["variant"]) == {""}


def test_each_op_config_panel_names_only_what_varies_within_it(tmp_path):
    """Two op configs, one measured with the L2 flush on and off, the other with two
    compile modes (as the GPU acceptance's operator cells are): a time-chart row names the
    axis that differs in its own panel, not every axis that differs anywhere (that label
    was cut off before the one that mattered); the rate charts' cell legend keeps them all."""
    results = []
    for i, (config, compile_mode, l2) in enumerate((
            ("/configs/add_small.json", "eager", "on"), ("/configs/add_small.json", "eager", "off"),
            ("/configs/add_tiny.json", "eager", "on"), ("/configs/add_tiny.json", "inductor", "on"))):
        res = op_result("ops")
        res["cell"] = {**res["cell"], "op_config": config, "compile": compile_mode,
                       "cuda_l2_cache": l2}
        res["cell_id"] = f"pytorch_op_{i}"
        results.append(res)
    ops = op_charts.op_frame(load(write_parquet(tmp_path, results)))
    assert set(ops["variant"]) == {"compile eager · cuda_l2_cache on",
                                   "compile eager · cuda_l2_cache off",
                                   "compile inductor · cuda_l2_cache on"}
    panels = ops.groupby("config")["panel_variant"].agg(set).to_dict()
    assert panels == {"add_small": {"cuda_l2_cache on", "cuda_l2_cache off"},
                      "add_tiny": {"compile eager", "compile inductor"}}
    spec = json.dumps(op_charts.time_figure(ops).chart.to_dict(), ensure_ascii=False)
    assert "torch.mm|0|0  [cuda_l2_cache off]" in spec
    assert "torch.mm|0|0  [compile inductor]" in spec
    assert "[compile eager · cuda_l2_cache off]" not in spec
    legend = op_charts.tflops_figure(ops).chart.to_dict()["spec"]["layer"][0]["encoding"][
        "strokeDash"]
    assert legend["legend"]["labelLimit"] == op_charts.CELL_LEGEND_LIMIT


def test_an_inputs_forward_timed_by_a_forward_only_and_a_backward_cell_is_told_apart(tmp_path):
    """backward: [false, true], PARAM's usual pair: both cells time each input's forward
    pass. The two forwards get their own rows ("backward off" / "backward on") in the time
    chart and the roofline's table, instead of two unnamed points on one row."""
    both = op_result("ops")
    forward_only = op_result("ops")
    forward_only["cell"] = {**forward_only["cell"], "backward": False}
    forward_only["cell_id"] = "pytorch_simple_mm_gpu_fw"
    forward_only["measurements"] = [m for m in forward_only["measurements"]
                                    if m["pass"] == "forward"]
    frame = load(write_parquet(tmp_path, [both, forward_only]))
    ops = op_charts.op_frame(frame)
    forwards = ops[(ops["input"] == "torch.mm|0|0") & (ops["pass"] == "forward")]
    assert sorted(forwards["variant"]) == ["backward off", "backward on"]
    assert set(ops.loc[ops["pass"] == "backward", "variant"]) == {"backward on"}
    spec = op_charts.time_figure(ops).chart.to_dict()
    rows = next(layer["encoding"]["y"]["sort"] for layer in spec["layer"])
    assert rows[:2] == ["torch.mm|0|0  [backward off]", "torch.mm|0|0  [backward on]"]
    rate = op_charts.tflops_figure(ops).chart.to_dict()
    assert rate["layer"][0]["encoding"]["strokeDash"]["field"] == "variant"
    points, _ = roofline_charts.placed(frame)
    forward_names = points.loc[points["pass"] == "forward", "name"]
    assert forward_names.is_unique and len(forward_names) == 6
    assert "torch.mm|0|0 [backward off]" in set(forward_names)
    assert "torch.mm|0|0 [backward off]" in roofline_charts.roofline_table(frame)


def test_the_roofline_names_the_op_config_of_each_operator_point(tmp_path):
    """One operator at one input id in two op configs: the roofline's table and tooltip
    name the config (its file's stem, as the operator charts do), not two identical rows."""
    results = []
    for i, config in enumerate(("/configs/mm_small.json", "/configs/mm_large.json")):
        res = op_result("ops")
        res["cell"] = {**res["cell"], "op_config": config}
        res["cell_id"] = f"pytorch_op_{i}"
        results.append(res)
    frame = load(write_parquet(tmp_path, results))
    points, _ = roofline_charts.placed(frame)
    assert set(points["config"]) == {"mm_small", "mm_large"}
    html = roofline_charts.roofline_table(frame)
    assert "<th>op config</th>" in html
    assert html.count("<td>mm_small</td><td>torch.mm|0|0</td><td>forward</td>") == 1
    assert html.count("<td>mm_large</td><td>torch.mm|0|0</td><td>forward</td>") == 1
    spec = json.dumps(roofline_charts.roofline_figure(frame).chart.to_dict())
    assert '"field": "config", "title": "op config"' in spec


def write_parquet(folder: Path, results: list[dict]) -> Path:
    paths = []
    for i, res in enumerate(results):
        path = folder / "results" / f"cell{i:03d}.json"
        R.write(res, path)
        paths.append(path)
    parquet = folder / "benchmarks.parquet"
    aggregate.write(paths, parquet)
    return parquet


PROFILED = model_cell("resnet50", "training", "float32", 64)
FAILED = model_cell("resnet50", "training", "bfloat16", 128)
PROFILE_ERROR = ('torch: the profiled cell ended failed: RuntimeError: expected <Half> & '
                 '"Float" operands')
# Operator rows as the torch.profiler hook writes them (times in µs); a CUDA kernel's name
# has the characters the page must escape.
KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
OPERATORS = [  # name, calls, self CPU µs, self device µs
    ("ProfilerStep*", 3, 900.0, 0.0), ("aten::convolution", 159, 2400.0, 51000.0),
    ("aten::addmm", 3, 120.0, 900.0), (KERNEL, 480, 0.0, 16000.0),
    ("aten::batch_norm", 159, 1900.0, 12000.0),
]


def full_study() -> list[dict]:
    """Ok cells over 2 batch sizes x 2 precisions (monitored on a GPU with energy), one
    failed cell and one operator cell."""
    results = [model_result("smoke", model_cell("resnet50", "training", p, b), monitored=True)
               for p in ("float32", "float16") for b in (32, 64)]
    results.append(model_result("smoke", FAILED, status="failed", error=FAILURE_ERROR))
    results.append(op_result("smoke"))
    return results


def torch_profile(root: Path, study: str, cell: dict) -> Path:
    """An ok torch profile folder as the profile job leaves it: the hook's operators.json and
    trace, the driver's Parquet table, then the manifest."""
    folder = root / "box" / "torch" / study / cell_id_of(cell)
    folder.mkdir(parents=True)
    rows = [{"name": name, "calls": calls, "self_cpu_time_us": cpu, "cpu_time_total_us": cpu,
             "self_device_time_us": device, "device_time_total_us": device, "flops": None,
             "self_cpu_memory_bytes": 0, "cpu_memory_bytes": 0, "self_device_memory_bytes": 0,
             "device_memory_bytes": 0, "is_user_annotation": name == "ProfilerStep*"}
            for name, calls, cpu, device in OPERATORS]
    (folder / "operators.json").write_text(json.dumps({
        "schema_version": 1, "schedule": {"wait": 1, "warmup": 1, "active": 3},
        "device": "cuda", "operators": rows}))
    (folder / "trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "aten::convolution", "ts": 0, "dur": 17, "pid": 1, "tid": 1}]}))
    made = profile_tables.convert("torch", folder)
    profile_run.write_manifest(folder, {
        "schema_version": 1, "tool": "torch", "study": study, "cell_id": cell_id_of(cell),
        "cell": cell, "settings": profile_settings("torch"), "status": "ok", "error": None,
        "artifacts": {"trace": "trace.json", "operators": "operators.parquet"},
        "tables": made, "files": profile_run.files_of(folder)})
    return folder


def failed_profile(root: Path, tool: str, study: str, cell: dict, line: str) -> Path:
    folder = root / "box" / tool / study / cell_id_of(cell)
    folder.mkdir(parents=True)
    (folder / profile_run.ERROR_FILE).write_text(line + "\n")
    profile_run.write_failure(tool, {"study": study, "cell_id": cell_id_of(cell), "params": cell},
                              folder, profile_settings(tool), line)
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """results/benchmarks.parquet, results/profiles (an ok torch and a failed ncu profile of
    one cell, a failed torch profile of the failed cell) and results/report."""
    folder = tmp_path_factory.mktemp("report") / "results"
    parquet = write_parquet(folder, full_study())
    profiles = folder / "profiles"
    torch_profile(profiles, "smoke", PROFILED)
    failed_profile(profiles, "ncu", "smoke", PROFILED,
                   "ncu: binary 'ncu' not found on PATH (set profiling.tools.ncu.binary)")
    failed_profile(profiles, "torch", "smoke", FAILED, PROFILE_ERROR)
    outdir = folder / "report"
    return outdir, render(parquet, outdir, profiles_dir=profiles)


def test_render_writes_page_and_an_image_pair_per_chart(report):
    outdir, files = report
    index = outdir / "index.html"
    assert files[0] == index and index.is_file()
    names = chart_names(index.read_text())
    # throughput, energy, power, memory, precision speed-up, TFLOP/s, operator time,
    # TFLOP/s and GB/s, the roofline (an operator cell on an H100: the vendor's ceilings),
    # and the torch profile's heaviest operators
    assert set(names) == {"throughput", "energy-efficiency", "power", "peak-host-memory",
                          "peak-device-memory", "precision-speedup", "model-tflops", "op-time",
                          "op-tflops", "op-gbps", "roofline",
                          f"profile-box-torch-smoke-{cell_id_of(PROFILED)}"}
    expected = {outdir / "charts" / f"{n}.{ext}" for n in names for ext in ("png", "svg")}
    assert set(files[1:]) == expected
    for name in names:
        with Image.open(outdir / "charts" / f"{name}.png") as image:
            assert image.width > 200 and image.height > 100
            colours = image.convert("RGB").getcolors(maxcolors=100_000)
            assert colours is None or len(colours) > 20, f"{name}.png looks blank"
        root = ET.parse(outdir / "charts" / f"{name}.svg").getroot()
        assert root.tag.endswith("svg")


def test_page_is_offline(report):
    html = (report[0] / "index.html").read_text()
    remote = re.compile(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//",
                        re.IGNORECASE)
    assert not remote.search(html)
    assert "<script src" not in html and "<link" not in html.lower()
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    assert "window.vegaEmbed" in html  # the bundle is inline


def test_failure_error_appears_escaped(report):
    html = (report[0] / "index.html").read_text()
    assert 'id="failures"' in html
    assert "RuntimeError: shape &lt;1x3&gt; &amp; &quot;weights&quot; mismatch" in html
    assert FAILURE_ERROR not in html and "<1x3>" not in html


def test_header_counts_cells_by_status_and_environment_is_listed(report):
    html = (report[0] / "index.html").read_text()
    counts = {label: int(num) for num, label in
              re.findall(r'<div class="num">(\d+)</div><div class="lbl">(\w+)</div>', html)}
    assert counts == {"cells": 6, "ok": 5, "failed": 1}
    env = html[html.index('id="environment"'):]
    for text in ("node01", "2 × NVIDIA H100 80GB HBM3", "550.54.15", "12.4", "pytorch 2.5.1",
                 "0.1.0 @ 0123456789ab-dirty", "<th>NCCL</th>", "<td>2.21.5</td>"):
        assert text in env, text


def section_of(html: str, section_id: str) -> str:
    start = html.index(f'<section id="{section_id}">')
    return html[start:html.index("</section>", start)]


def test_profiles_section_lists_each_tool_with_links_that_resolve(report):
    outdir = report[0]
    html = (outdir / "index.html").read_text()
    section = section_of(html, "profiles")
    profiled, failed = cell_id_of(PROFILED), cell_id_of(FAILED)
    overview = section[:section.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", overview)[1:]
    assert len(rows) == 2
    first = re.findall(r"<td>(.*?)</td>", rows[0])
    assert first[:7] == ["smoke", "box", f"<code>{failed}</code>", "resnet50", "training",
                         "bfloat16", "128"]
    assert ">torch · failed<" in first[8]
    second = re.findall(r"<td>(.*?)</td>", rows[1])
    assert second[3:7] == ["resnet50", "training", "float32", "64"]
    assert ">ok<" in second[7]  # the measurement's status
    assert ">torch · ok<" in second[8] and ">ncu · failed<" in second[8]
    # Every file link is relative to the report folder and points at a file that exists.
    links = [h for h in re.findall(r'href="([^"#][^"]*)"', section) if not h.startswith("charts/")]
    base = f"../profiles/box/torch/smoke/{profiled}"
    assert {f"{base}/trace.json", f"{base}/operators.parquet", base} <= set(links)
    for href in links:
        assert not Path(href).is_absolute() and (outdir / href).exists(), href
    # Every in-page link (the badges) has its target.
    for target in re.findall(r'href="#([^"]+)"', html):
        assert f'id="{target}"' in html, target
    assert f'href="#profile-box-ncu-smoke-{profiled}"' in section


def test_profile_top_operators_are_ranked_and_escaped(report):
    html = (report[0] / "index.html").read_text()
    section = section_of(html, "profiles")
    table = section[section.index('<table class="numeric-tail profile-top">'):]
    table = table[:table.index("</table>")]
    assert "<th>self device time (ms)</th>" in table
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    total = 51000 + 16000 + 12000 + 900  # ProfilerStep* is an annotation, not an operator
    assert rows == [
        ["1", "<code>aten::convolution</code>", "159", "51.000", f"{51000 / total * 100:.1f} %"],
        ["2", f"<code>{escape(KERNEL)}</code>", "480", "16.000", f"{16000 / total * 100:.1f} %"],
        ["3", "<code>aten::batch_norm</code>", "159", "12.000", f"{12000 / total * 100:.1f} %"],
        ["4", "<code>aten::addmm</code>", "3", "0.900", f"{900 / total * 100:.1f} %"],
    ]
    # what the sums are over, under the table and in the chart's caption
    after = section[section.index('<table class="numeric-tail profile-top">'):]
    covers = "summed over the 3 iterations the profiler recorded (its schedule's active steps)"
    assert after[after.index("</table>"):].startswith(
        f'</table><p class="note">Calls and times {escape(covers)}.</p>')
    assert f"time of the top 4, {escape(covers)}." in section
    assert KERNEL not in html and "ProfilerStep" not in section


def test_failed_profiles_show_their_one_line_error_escaped(report):
    html = (report[0] / "index.html").read_text()
    section = section_of(html, "profiles")
    assert f'<p class="error">{escape(PROFILE_ERROR)}</p>' in section
    assert PROFILE_ERROR not in html and "<Half>" not in html
    assert escape("ncu: binary 'ncu' not found on PATH (set profiling.tools.ncu.binary)") in section
    # The failed cell's row in the failures table links to its profile.
    failures = section_of(html, "failures")
    assert "<th>profiles</th>" in failures
    assert f'href="#profile-box-torch-smoke-{cell_id_of(FAILED)}"' in failures


def test_energy_and_memory_section_follows_throughput(report, tmp_path):
    html = (report[0] / "index.html").read_text()
    order = re.findall(r'<section id="([^"]+)">', html)
    assert order[order.index("throughput") + 1] == "resources"
    section = section_of(html, "resources")
    assert '<p class="note">' not in section  # every model cell has energy
    assert "Sources not counted: no readable RAPL counters." in section  # partial energy
    # The chart shows the monitor's samples per joule of each cell, through the aggregate.
    models = model_charts.model_frame(load(write_parquet(tmp_path, full_study())))
    spec = resource_charts.energy_figure(models).chart.to_dict()
    (values,) = [v for v in spec["datasets"].values() if v and "samples_per_joule" in v[0]]
    charted = {(v["precision"], v["batch_size"]): v["samples_per_joule"] for v in values}
    expected = {}
    for res in full_study():
        monitor = res["extra"].get("monitor")
        if monitor:
            expected[(res["cell"]["precision"], res["cell"]["batch_size"])] = \
                monitor["samples_per_joule"]
    assert charted == pytest.approx(expected) and len(expected) == 4


def cpu_results(energy: bool = False) -> list[dict]:
    results = [model_result("cpu", model_cell("alexnet", "inference", "float32", b,
                                              device="cpu"), monitored=True) for b in (16, 32)]
    if energy:  # one GPU cell beside them, with energy
        results.append(model_result("cpu", model_cell("alexnet", "inference", "float32", 64),
                                    monitored=True))
    for res in results:
        for m in res["measurements"]:
            m["flops_per_iteration"] = m["tflops"] = None
    return results


def test_without_energy_a_note_quotes_why_instead_of_charts(tmp_path):
    outdir = tmp_path / "out"
    render(write_parquet(tmp_path, cpu_results()), outdir)
    html = (outdir / "index.html").read_text()
    section = section_of(html, "resources")
    assert f"No energy was measured: <q>{escape(NO_ENERGY)}</q>." in section
    # the note stands instead of the energy charts; the other charts are not its business
    names = chart_names(html)
    assert "peak-host-memory" in names and not {"energy-efficiency", "power"} & set(names)


def test_every_section_says_what_it_shows(tmp_path):
    frame = load(write_parquet(tmp_path, full_study()))
    parts = sections(frame)
    assert "tflops" in [s.id for s in parts]
    assert [s.id for s in parts if not s.intro] == []


def test_cells_without_energy_beside_cells_with_it_are_counted_in_the_note(tmp_path):
    frame = load(write_parquet(tmp_path, cpu_results(energy=True)))
    (part,) = [s for s in sections(frame) if s.id == "resources"]
    names = [b.name for b in part.blocks if not isinstance(b, str)]
    assert names == ["energy-efficiency", "power", "peak-host-memory", "peak-device-memory"]
    (note,) = [b for b in part.blocks if isinstance(b, str)]
    assert note.startswith("<p class=\"note\">2 of 3 cells have no energy: <q>not available")


def test_precision_speedup_is_relative_to_float32_of_the_same_cell(tmp_path):
    frame = load(write_parquet(tmp_path, full_study()))
    speedup = model_charts.speedup_frame(model_charts.model_frame(frame))
    assert sorted(speedup["batch_size"]) == [32, 64]
    assert set(speedup["precision"]) == {"float16"}
    # Median times are 2x shorter at float16 by construction.
    assert speedup["speedup"].tolist() == pytest.approx([2.0, 2.0])


def test_precision_bars_stand_in_the_order_of_their_legend(tmp_path, monkeypatch):
    """tf32, bfloat16, float16 (the precision order of every legend), not alphabetically:
    the bars of an H100's ResNet-50 stood bfloat16, float16, tf32 under a tf32-first key."""
    monkeypatch.setitem(SPEEDUP, "tf32", 1.9)
    results = [model_result("order", model_cell("resnet50", "training", p, 256))
               for p in ("float32", "tf32", "bfloat16", "float16")]
    figure = model_charts.speedup_figure(model_charts.model_frame(
        load(write_parquet(tmp_path, results))))
    spec = json.dumps(figure.chart.to_dict())
    offsets = re.findall(r'"xOffset": \{"field": "precision", "sort": (\[[^]]*\])', spec)
    assert offsets and {tuple(json.loads(o)) for o in offsets} == {
        ("tf32", "bfloat16", "float16")}


def test_speed_ups_and_slowdowns_are_bars_from_parity_on_a_log_scale(tmp_path, monkeypatch):
    """On a linear axis from 0 every slowdown (0.13x to 0.83x beside an 8x) was squashed
    under the first tick, its label struck through by the parity line. Bars now grow from
    1x on a log scale, each label beyond its bar's end."""
    monkeypatch.setitem(SPEEDUP, "bfloat16", 0.5)
    results = [model_result("s", model_cell("resnet50", "training", p, 64))
               for p in ("float32", "float16", "bfloat16")]
    layers = model_charts.speedup_figure(model_charts.model_frame(
        load(write_parquet(tmp_path, results)))).chart.to_dict()["spec"]["layer"]
    (bars,) = [layer for layer in layers if layer["mark"]["type"] == "bar"]
    assert bars["encoding"]["y"]["scale"] == {"type": "log"}
    assert bars["encoding"]["y2"] == {"datum": 1}
    texts = [layer for layer in layers if layer["mark"]["type"] == "text"]
    assert sorted(t["mark"]["dy"] for t in texts) == [-6, 10]  # above 1x, below 1x


def test_sections_without_data_are_left_out(tmp_path):
    results = [model_result("fp32only", model_cell("alexnet", "inference", "float32", b))
               for b in (16, 32, 64)]
    for res in results:
        for m in res["measurements"]:
            m["flops_per_iteration"] = m["tflops"] = None
    outdir = tmp_path / "out"
    files = render(write_parquet(tmp_path, results), outdir)
    html = (outdir / "index.html").read_text()
    names = chart_names(html)
    assert "throughput" in names
    assert not {"model-tflops", "precision-speedup", "energy-efficiency"} & set(names)
    for section in ("failures", "operators", "precision", "tflops", "paradnn", "loader",
                    "resources", "profiles", "clocks", "time", "drift"):
        assert f'id="{section}"' not in html, section
    assert len(files) == 1 + 2 * len(names)  # the page and a PNG and SVG per chart


def test_a_study_where_every_cell_failed_still_gets_a_report(tmp_path):
    results = [model_result("broken", model_cell("alexnet", "training", "float32", b),
                            status="oom", error="CUDA out of memory") for b in (8, 16)]
    outdir = tmp_path / "out"
    files = render(write_parquet(tmp_path, results), outdir)
    assert files == [outdir / "index.html"]
    assert list((outdir / "charts").iterdir()) == []  # the folder the workflow declares
    html = files[0].read_text()
    assert chart_names(html) == [] and "vegaEmbed" not in html
    assert html.count('<span class="badge status-oom">oom</span>') == 2
    assert 'id="environment"' in html


def test_rerender_removes_charts_of_emptied_sections(tmp_path, report):
    outdir = tmp_path / "out"
    shutil.copytree(report[0], outdir)
    results = [model_result("s", model_cell("alexnet", "training", "float32", 8))]
    render(write_parquet(tmp_path, results), outdir)
    left = sorted(p.name for p in (outdir / "charts").iterdir())
    # exactly the charts of the new page: none of the full study's others is left
    names = chart_names((outdir / "index.html").read_text())
    assert left == sorted(f"{n}.{suffix}" for n in names for suffix in ("png", "svg"))
    assert "throughput" in names and len(names) < len(chart_names(
        (report[0] / "index.html").read_text())) - 5


def test_several_frameworks_get_a_side_by_side_chart(tmp_path):
    results = [model_result("fw", model_cell("resnet50", "training", "float32", b, framework=f))
               for f in ("pytorch", "mxnet") for b in (16, 32)]
    outdir = tmp_path / "out"
    render(write_parquet(tmp_path, results), outdir)
    assert "framework-comparison" in chart_names((outdir / "index.html").read_text())


def test_cli_prints_files_and_rejects_a_missing_table(tmp_path):
    # A table without ok cells has no charts: the command line is tested without their cost.
    parquet = write_parquet(tmp_path, [model_result(
        "s", model_cell("alexnet", "training", "float32", 8), status="skipped", error="no GPU")])
    outdir = tmp_path / "cli"
    line = "nsys: binary 'nsys' not found on PATH (set profiling.tools.nsys.binary)"
    failed_profile(tmp_path / "profiles", "nsys", "s",
                   model_cell("alexnet", "training", "float32", 8), line)
    done = subprocess.run([sys.executable, "-m", "dlbench.report", str(parquet), "--outdir",
                           str(outdir), "--profiles_dir", str(tmp_path / "profiles")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(outdir / "index.html")]
    html = (outdir / "index.html").read_text()
    assert "no GPU" in html and escape(line) in section_of(html, "profiles")
    bad = subprocess.run([sys.executable, "-m", "dlbench.report", str(tmp_path / "nope.parquet"),
                          "--outdir", str(outdir)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "nope.parquet" in bad.stderr
    # An --outdir that is a file: one line before anything is read.
    on_file = subprocess.run([sys.executable, "-m", "dlbench.report", str(parquet), "--outdir",
                              str(parquet)], capture_output=True, text=True, timeout=60)
    assert on_file.returncode == 2 and on_file.stderr.strip().endswith(
        f"argument --outdir: {parquet} is not a folder")


def test_a_table_that_is_not_an_aggregate_is_rejected_in_one_line(tmp_path):
    path = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(path)
    with pytest.raises(ReportError, match=r"other.parquet: column 'study' is missing"):
        render(path, tmp_path / "out")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(ReportError, match=r"text.parquet: not a readable Parquet file"):
        render(tmp_path / "text.parquet", tmp_path / "out")


def test_an_empty_table_gives_a_page_that_says_so(tmp_path):
    parquet = tmp_path / "benchmarks.parquet"
    aggregate.write([], parquet)
    outdir = tmp_path / "out"
    files = render(parquet, outdir)
    assert files == [outdir / "index.html"]
    assert list((outdir / "charts").iterdir()) == []  # the folder the workflow declares
    html = files[0].read_text()
    assert re.findall(r'<section id="([^"]+)">', html) == ["empty"]
    assert "The aggregate table benchmarks.parquet has no rows" in section_of(html, "empty")
    assert "(0 rows)" in html and "vegaEmbed" not in html


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def full_disk_at(monkeypatch, name: str) -> None:
    """Make the report's writer fail with ENOSPC on the file ``name`` (or its temporary)."""
    real = output.write_file

    def write_file(path: Path, data: bytes) -> None:
        if path.name == name or path.name.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(output, "write_file", write_file)


def one_cell_parquet(tmp_path: Path) -> Path:
    return write_parquet(tmp_path, [model_result("s", model_cell("alexnet", "training",
                                                                 "float32", 8))])


@pytest.mark.parametrize("failing", ["throughput.svg", "index.html"])
def test_a_full_disk_leaves_the_previous_report_whole(tmp_path, report, monkeypatch, failing):
    outdir = tmp_path / "report"
    shutil.copytree(report[0], outdir)
    before = snapshot(outdir)
    full_disk_at(monkeypatch, failing)
    with pytest.raises(WriteError) as info:
        render(one_cell_parquet(tmp_path), outdir)
    target = outdir / "index.html" if failing == "index.html" else outdir / "charts" / failing
    assert info.value.errno == errno.ENOSPC
    assert str(info.value) == (f"[Errno 28] {target}: No space left on device; the previous "
                               "report is left as it was")
    assert snapshot(outdir) == before  # no file changed, none added (no temporary left)


def test_the_report_script_log_ends_naming_the_file_on_a_full_disk(tmp_path, report,
                                                                   monkeypatch):
    outdir = tmp_path / "results" / "report"
    shutil.copytree(report[0], outdir)
    before = snapshot(outdir)
    full_disk_at(monkeypatch, "index.html")
    log = tmp_path / "results" / "logs" / "report.log"
    log.parent.mkdir()
    fake = SimpleNamespace(
        input=SimpleNamespace(parquet=str(one_cell_parquet(tmp_path)), profiles=[]),
        log=[str(log)],
        output=SimpleNamespace(html=str(outdir / "index.html"), charts=str(outdir / "charts")),
        params=SimpleNamespace(profiles_dir=None, baseline_system=None, system="box",
                               studies=["s"]))
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # the script redirects both for a while
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    with pytest.raises(WriteError):
        runpy.run_path(str(ROOT / "workflow" / "scripts" / "report.py"),
                       init_globals={"snakemake": fake}, run_name="__main__")
    text = log.read_text()
    assert text.startswith("Traceback (most recent call last):")
    last = text.strip().splitlines()[-1]
    assert "No space left on device" in last and str(outdir / "index.html") in last
    assert not sys.stderr.closed
    assert snapshot(outdir) == before


def test_the_report_outputs_are_kept_by_snakemake_when_the_job_fails():
    """update(): Snakemake neither deletes them before the job nor after a failure."""
    rule = (ROOT / "workflow" / "rules" / "report.smk").read_text()
    for name in ("html", "charts"):
        assert re.search(rf"^\s+{name}=update\(\s*report\(", rule, re.MULTILINE), name


@needs_chromium
def test_charts_draw_in_headless_chromium(report, tmp_path):
    index = report[0] / "index.html"
    names, drawn = drawn_charts(index, tmp_path / "profile")
    assert drawn == names

    shot = tmp_path / "page.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1400,1800", index.as_uri(),
                    profile=tmp_path / "profile2")
    assert shot.is_file(), done.stderr[-2000:]
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is None or len(colours) > 200, "screenshot looks blank"


def test_compile_speedup_is_over_eager_of_the_same_cell_and_precisions_stay_apart(tmp_path):
    """Execution modes are series of their own: the precision speed-up compares float16
    with float32 of the same mode, and the compile speed-up each mode with eager."""
    results = []
    for mode, faster in (("eager", 1.0), ("inductor", 1.5)):
        for precision in ("float32", "float16"):
            cell = model_cell("resnet50", "training", precision, 64, compile=mode,
                              memory_format="contiguous")
            res = model_result("modes", cell)
            res["cell_id"] = f"{cell_id_of(cell)}_{mode}"
            (m,) = res["measurements"]
            res["measurements"] = [R.measurement(
                name=m["name"], pass_=m["pass"], times_s=[t / faster for t in m["times_s"]],
                items_per_iteration=64,
                extra={"compile": {"mode": mode, "compile_time_s": 12.5}} if faster > 1 else {})]
            results.append(res)
    frame = load(write_parquet(tmp_path, results))
    models = model_charts.model_frame(frame)
    assert sorted(set(models["mode"])) == ["eager", "inductor"]
    compiled = model_charts.compile_speedup_frame(models)
    assert sorted(compiled["precision"]) == ["float16", "float32"]
    assert compiled["speedup"].tolist() == pytest.approx([1.5, 1.5])
    assert compiled["compile_time_s"].tolist() == [12.5, 12.5]
    precision = model_charts.speedup_frame(models)
    assert precision["speedup"].tolist() == pytest.approx([2.0, 2.0])
    (part,) = [s for s in sections(frame) if s.id == "execution"]
    assert [b.name for b in part.blocks] == ["compile-speedup"]


def test_two_systems_with_repeats_get_a_speedup_chart_error_bars_and_unstable_cells(tmp_path,
                                                                                  caplog):
    """System b is 1.5x faster; its bs32 cell's three runs disagree (unstable): the report
    divides by the baseline system, draws interval whiskers and lists the unstable cell."""
    results = []
    for system, factor in (("a", 1.0), ("b", 1 / 1.5)):
        for batch in (16, 32):
            for precision in ("float32", "float16"):
                for repeat in range(3):
                    res = model_result("sys", model_cell("resnet50", "training", precision, batch))
                    wobble = 1 + 0.2 * repeat if (system, batch) == ("b", 32) else 1.0
                    for m in res["measurements"]:
                        times = [t * factor * wobble for t in m["times_s"]]
                        m.update(R.measurement(name=m["name"], pass_=m["pass"], times_s=times,
                                               items_per_iteration=batch))
                    res.update(system=system, repeat=repeat)
                    results.append(res)
    parquet = write_parquet(tmp_path, results)
    frame = load(parquet)
    models = model_charts.model_frame(frame)
    assert len(models) == 8 and set(models["repeats"]) == {3}  # one row per cell
    assert model_charts.baseline_system(models) == "a"
    assert model_charts.baseline_system(models, "b") == "b"
    ratios = model_charts.ratio_frame(models, "system", "a")
    steady = ratios[ratios["batch_size"] == 16]
    assert steady["speedup"].tolist() == pytest.approx([1.5, 1.5])
    # Precision speed-ups stay within each system.
    assert model_charts.speedup_frame(models)["speedup"].tolist() == pytest.approx([2.0] * 4)
    slack = 1 + 1e-9  # identical runs: an interval of one point, up to rounding
    assert (models["throughput_low"] <= models["throughput"] * slack).all()
    assert (models["throughput"] <= models["throughput_high"] * slack).all()
    assert (models["throughput_high"] - models["throughput_low"])[6:].min() > 100  # b's bs32
    outdir = tmp_path / "out"
    render(parquet, outdir)
    html = (outdir / "index.html").read_text()
    assert "system-speedup" in chart_names(html) and "throughput_low" in html
    stability = section_of(html, "stability")
    assert stability.count("<tr>") == 1 + 2  # header and both precisions of b's bs32 cell
    assert "resnet50_training_float32_32" in stability
    # A baseline that is no system (misspelled): a warning naming it, the default baseline,
    # and the chart's caption saying so.
    with caplog.at_level("WARNING", logger="dlbench.report"):
        render(parquet, tmp_path / "typo", baseline_system="z")
    assert caplog.messages == [f"baseline_system 'z' is no system of {parquet} (systems: a, "
                               "b); the report compares with the system that has the most "
                               "model cells"]
    caption = model_charts.systems_figure(models, "z").caption
    assert "The baseline asked for, z, has no model cells here: a has the most." in caption
    assert "asked for" not in model_charts.systems_figure(models, "b").caption


def test_where_the_time_went_sums_each_studys_cells_once_by_stage(tmp_path):
    """Each result's stages once (an operator cell has a row per input and pass), summed
    per study; the caption says the measured share in words."""
    first = model_result("a", model_cell("resnet50", "training", "float32", 32))
    first["stages_s"] = {"startup": 2.0, "build": 1.0, "warmup": 3.0, "measure": 4.0,
                         "other": 0.5}
    second = model_result("a", model_cell("resnet50", "training", "float32", 64))
    second["stages_s"] = {"startup": 2.0, "build": 1.0, "warmup": 1.0, "measure": 6.0,
                          "other": 0.5}
    ops = op_result("b")  # six rows
    ops["stages_s"] = {"startup": 3.0, "warmup": 1.0, "measure": 2.0, "other": 1.0}
    older = model_result("c", model_cell("alexnet", "inference", "float32", 16))  # no stages
    parquet = write_parquet(tmp_path, [first, second, ops, older])
    frame = load(parquet)
    assert frame.loc[frame["study"] == "a", "wall_measure_s"].tolist() == [4.0, 6.0]
    long = time_charts.stage_frame(frame)
    seconds = {(row.study, row.stage): row.seconds for row in long.itertuples()}
    assert seconds[("a", "measured")] == 10.0 and seconds[("a", "start-up")] == 4.0
    assert seconds[("b", "measured")] == 2.0 and seconds[("b", "start-up")] == 3.0
    assert not any(study == "c" for study, _ in seconds)
    assert set(long.loc[long["study"] == "a", "cells"]) == {2}
    assert set(long.loc[long["study"] == "a", "label"]) == {"a · 2 cells, 48% measured"}
    assert long.loc[long["study"] == "a", "share"].sum() == pytest.approx(1.0)
    # Stages in the order a cell goes through them, within each study.
    assert long.loc[long["study"] == "a", "stage"].tolist() == [
        "start-up", "build", "warm-up", "measured", "other"]
    line = time_charts.summary_line(long)
    assert line.startswith("The cells' own time: 28 s in 3 cells, of which the measured "
                           "iterations took 12 s (43%).")
    assert "The largest other part: start-up, 7 s." in line
    outdir = tmp_path / "out"
    render(parquet, outdir)
    html = (outdir / "index.html").read_text()
    assert "wall-time" in chart_names(html)
    assert "of which the measured iterations took 12 s" in section_of(html, "time")


def test_cells_whose_gpu_clocks_were_held_back_are_listed_with_why(tmp_path):
    """A cell at its power cap for most of its samples is listed with its reasons and power
    limit; one held back for a sample in a hundred, or a CPU cell, is not."""
    capped, brief, cpu = (model_result("s", model_cell("resnet50", "training", p, 64),
                                       monitored=True)
                          for p in ("float32", "float16", "bfloat16"))
    capped["extra"]["monitor"].update(gpu_power_limit_w=500.0, gpu_clocks_held_back=0.62,
                                      gpu_clock_reasons="power cap 62%")
    brief["extra"]["monitor"].update(gpu_power_limit_w=700.0, gpu_clocks_held_back=0.01,
                                     gpu_clock_reasons="thermal 1%")
    cpu["cell"]["device"] = "cpu"
    parquet = write_parquet(tmp_path, [capped, brief, cpu])
    frame = load(parquet)
    assert sorted(frame["gpu_power_limit_w"].dropna()) == [500.0, 700.0]
    outdir = tmp_path / "out"
    render(parquet, outdir)
    clocks = section_of((outdir / "index.html").read_text(), "clocks")
    assert clocks.count("<tr>") == 2  # the header and the capped cell
    assert "power cap 62%" in clocks and "62%" in clocks and ">500<" in clocks
    assert cell_id_of(capped["cell"]) in clocks and "thermal" not in clocks


def test_measurements_that_drifted_are_listed_and_drawn_iteration_by_iteration(tmp_path):
    """A run whose times rose 20 % and one whose fell are listed (the larger first) and
    drawn against their medians; a steady run of as many iterations is neither."""
    results = [model_result("s", model_cell("resnet50", "training", p, 64), monitored=True)
               for p in ("float32", "float16", "bfloat16")]
    for res, end in zip(results, (1.2, 0.9, 1.0), strict=True):
        base = res["measurements"][0]["time_s"]["median"]
        times = [base * (1 + (end - 1) * i / 39) * (1 + 0.005 * (i % 2)) for i in range(40)]
        res["measurements"][0].update(R.measurement(
            name="resnet50", pass_="training", times_s=times, items_per_iteration=64))
    results[0]["extra"]["monitor"].update(gpu_clocks_held_back=0.4,
                                          gpu_clock_reasons="power cap 40%")
    # The falling run had a warm-up until steady that stopped at its 300 s limit; the
    # steady one's settled.
    results[1]["measurements"][0]["extra"]["warmup"] = {"settled": False, "seconds": 300.0}
    results[2]["measurements"][0]["extra"]["warmup"] = {"settled": True, "seconds": 12.0}
    parquet = write_parquet(tmp_path, results)
    frame = load(parquet)
    drawn = drift_charts.drift_frame(frame)
    assert drawn["measurement"].unique().tolist() == [
        f"{cell_id_of(results[0]['cell'])} · resnet50 · training (+18%)",
        f"{cell_id_of(results[1]['cell'])} · resnet50 · training (-11%)"]  # -0.1 / 0.95
    assert len(drawn) == 80 and drawn["relative"].median() == pytest.approx(1.0, abs=0.01)
    outdir = tmp_path / "out"
    render(parquet, outdir)
    html = (outdir / "index.html").read_text()
    section = section_of(html, "drift")
    drifted, unsettled = section.split("Warm-ups until steady (warmup_until_steady)")
    assert drifted.count("<tr>") == 3  # the header and the two runs that drifted
    assert drifted.index(cell_id_of(results[0]["cell"])) < drifted.index(
        cell_id_of(results[1]["cell"]))
    assert "+18.2%" in drifted and "-10.5%" in drifted
    assert escape("rising: the GPU's clocks held back in 40% of samples (power cap 40%)"
                  ) in drifted
    assert "falling: still warming up: the warm-up until steady reached its limit" in drifted
    # The warm-up that stopped at its limit, listed on its own: its cell, seconds, drift.
    assert unsettled.count("<tr>") == 2 and cell_id_of(results[1]["cell"]) in unsettled
    assert "<td>300.0</td>" in unsettled and "-10.5%" in unsettled
    assert cell_id_of(results[2]["cell"]) not in section
    assert "drift" in chart_names(html)


def test_a_long_run_that_drifted_is_drawn_as_the_medians_of_its_stretches():
    """5,000 iterations rising 10 %: drawn as drift_charts.MAX_POINTS points that keep the
    rise (the first stretch's median near the start, the last's near the end)."""
    times = [1.0 + 0.1 * i / 4999 for i in range(5000)]
    frame = pd.DataFrame([{"study": "s", "system": "x", "cell_id": "op", "name": "torch.mm",
                           "pass": "forward", "op_name": "torch.mm", "repeat": 0,
                           "source": "op.json", "drifting": True, "time_drift": 0.095,
                           drift_charts.DRIFT_TIMES: times}])
    drawn = drift_charts.drift_frame(frame)
    assert len(drawn) == drift_charts.MAX_POINTS
    assert drawn["iteration"].is_monotonic_increasing
    assert drawn["relative"].iloc[-1] - drawn["relative"].iloc[0] == pytest.approx(
        0.1 / 1.05, rel=0.01)


def test_a_lone_paradnn_shape_is_labelled_by_its_options_not_as_the_default():
    """The roofline names a point by the options that differ between its rows; a single
    shape has none differing, and is given by its options (once 'default')."""
    from dlbench.report.data import model_opts_label

    lone = pd.DataFrame({"model_opts": ['{"layers": 2, "nodes": 64}']})
    assert model_opts_label(lone).tolist() == ["default"]  # the model charts' reading
    assert model_opts_label(lone, given_when_alike=True).tolist() == ["layers=2, nodes=64"]
    two = pd.DataFrame({"model_opts": ['{"layers": 2, "nodes": 64}',
                                       '{"layers": 4, "nodes": 64}']})
    assert model_opts_label(two, given_when_alike=True).tolist() == ["layers=2", "layers=4"]
    assert model_opts_label(pd.DataFrame({"model_opts": [None]}), True).tolist() == ["default"]


def test_an_op_cell_with_failed_inputs_is_ok_and_each_failed_input_is_listed():
    """The aggregate's rows of an op cell that measured one input and failed two (rows of
    their own, after its measurement): the cell counts as ok; both failures are listed,
    each with its input; a cell that failed outright is listed once, as before."""
    from dlbench.report import data, tables

    def row(cell, status, op=None, name=None, error=None):
        return {"study": "s", "system": "box", "cell_id": cell, "source": f"{cell}.json",
                "status": status, "op_name": op, "name": name, "error": error}

    frame = data.prepare(pd.DataFrame([
        row("ops", "ok", "torch.add", "torch.add|0|0"),
        row("ops", "failed", "torch.mm", "torch.mm|1|0", "torch.mm|1|0: shapes differ"),
        row("ops", "failed", "torch.nope", None, "unknown op torch.nope"),
        row("m", "failed", error="broke")]))
    assert data.cells(frame).set_index("cell_id")["status"].to_dict() == {
        "ops": "ok", "m": "failed"}
    assert tables.status_counts(frame) == {"ok": 1, "failed": 1}
    html = tables.failures_table(frame)
    assert "<th>input</th>" in html
    body = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", html)[1:]]
    assert sorted(r[3] for r in body) == ["", "torch.mm torch.mm|1|0", "torch.nope"]
    assert "unknown op torch.nope" in html and "broke" in html


def failures_rows(html: str) -> list[list[str]]:
    """The failures table's rows, each cell's text as written (tags left in)."""
    return [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", html)[1:]]


def test_a_failed_run_of_a_cell_with_ok_runs_is_listed_as_that_run_and_the_cell_counts_ok(
        tmp_path):
    """Cell A (batch 64) ran three times, its second run failed; cell B's (batch 32)
    second and third runs failed; cell C failed outright. The header counts cells (A and B ok, C failed); the
    list named A's failed run like C, as a failed cell, and kept only one of B's: now it
    says which run of how many failed in a cell that is ok, each of them, after the cells
    that did not finish, under a line that says how the two agree."""
    def runs(batch: int, failed: tuple[int, ...]) -> list[dict]:
        cell = model_cell("resnet50", "training", "float32", batch)
        out = runs_of(model_result("s", cell))
        for repeat in failed:
            out[repeat] = model_result("s", cell, status="failed",
                                       error=f"batch {batch} run {repeat + 1} broke")
            out[repeat]["repeat"] = repeat
        return out

    outright = model_result("s", model_cell("alexnet", "training", "float32", 8),
                            status="failed", error="alexnet broke")
    frame = load(write_parquet(tmp_path, [*runs(64, (1,)), *runs(32, (1, 2)), outright]))
    assert tables.status_counts(frame) == {"ok": 2, "failed": 1}
    html = tables.failures_table(frame)
    assert "<th>run</th>" in html
    listed = [(r[2], r[3], r[4]) for r in failures_rows(html)]
    cell = "<code>pytorch_{}_training_float32_{}</code>".format
    error = '<span class="error">{}</span>'.format
    assert listed == [
        (cell("alexnet", 8), "", error("alexnet broke")),
        (cell("resnet50", 32), "run 2 of 3; the cell is ok", error("batch 32 run 2 broke")),
        (cell("resnet50", 32), "run 3 of 3; the cell is ok", error("batch 32 run 3 broke")),
        (cell("resnet50", 64), "run 2 of 3; the cell is ok", error("batch 64 run 2 broke"))]
    assert html.startswith('<p class="note">1 cell did not finish (counted at the top); 3 runs '
                           "failed in 2 cells whose other runs finished: such a cell counts as "
                           "ok, with the figures of its ok runs.</p>")


def test_the_failures_table_names_a_cell_that_failed_every_run_once_and_an_ok_runs_inputs_plain():
    """A cell none of whose runs is ok is listed once with how many runs it had; an op
    cell's failed input in each of its ok runs is an input, not a failed run."""
    from dlbench.report import data

    def row(cell, status, repeat, op=None, name=None, error=None):
        return {"study": "s", "system": "box", "cell_id": cell, "repeat": repeat,
                "source": f"{cell}_r{repeat}.json", "status": status, "op_name": op,
                "name": name, "error": error}

    frame = data.prepare(pd.DataFrame([
        *[r for k in (0, 1) for r in (
            row("ops", "ok", k, "torch.add", "torch.add|0|0"),
            row("ops", "failed", k, "torch.mm", "torch.mm|1|0", "shapes differ"))],
        *[row("m", "failed", k, error=f"broke {k}") for k in (0, 1, 2)]]))
    assert tables.status_counts(frame) == {"ok": 1, "failed": 1}
    html = tables.failures_table(frame)
    assert not html.startswith("<p")  # no failed run of an ok cell to explain
    assert [(r[2], r[3], r[4]) for r in failures_rows(html)] == [
        ("<code>box/m</code>", "all 3 runs", ""),
        ("<code>box/ops</code>", "", "torch.mm torch.mm|1|0")]


def test_the_failures_note_counts_no_ok_cell_among_those_that_did_not_finish():
    """An operator cell whose runs are ok but for one input, and a model cell whose second
    run failed: both are ok at the top, so the note must not say a cell did not finish."""
    from dlbench.report import data

    def row(cell, status, repeat, op=None, name=None, error=None):
        return {"study": "s", "system": "box", "cell_id": cell, "repeat": repeat,
                "source": f"{cell}_r{repeat}.json", "status": status, "op_name": op,
                "name": name, "error": error}

    frame = data.prepare(pd.DataFrame([
        row("ops", "ok", 0, "torch.add", "torch.add|0|0"),
        row("ops", "failed", 0, "torch.mm", "torch.mm|1|0", "shapes differ"),
        row("m", "ok", 0), row("m", "failed", 1, error="broke"), row("m", "ok", 2)]))
    assert tables.status_counts(frame) == {"ok": 2}
    assert tables.failures_table(frame).startswith(
        '<p class="note">Every cell has a run that finished; 1 run failed in 1 cell whose '
        "other runs finished")


# -- a cell of several runs, and the axes every chart tells apart -------------------------


def runs_of(res: dict, slowdowns: tuple[float, ...] = (1.0, 1.2, 1.4)) -> list[dict]:
    """``res`` run once per slowdown (repeat 0, 1, ...), every time of a run that factor
    slower: one cell, its work the same, the mean of its runs' medians 1.2 times the
    first's and the last run's 1.4 times."""
    runs = []
    for repeat, slower in enumerate(slowdowns):
        run = copy.deepcopy(res)
        for m in run["measurements"]:
            m.update(R.measurement(
                name=m["name"], pass_=m["pass"], op_name=m["op_name"],
                times_s=[t * slower for t in m["times_s"]],
                items_per_iteration=m["items_per_iteration"],
                throughput_unit=m["throughput_unit"], parameters=m["parameters"],
                flops_per_iteration=m["flops_per_iteration"],
                bytes_per_iteration=m["bytes_per_iteration"], extra=m["extra"]))
        run["repeat"] = repeat
        runs.append(run)
    return runs


def stroke_dashes(chart: alt.TopLevelMixin) -> list[str]:
    """The field of every strokeDash encoding in a chart's spec."""
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            dash = node.get("encoding", {}).get("strokeDash") \
                if isinstance(node.get("encoding"), dict) else None
            if isinstance(dash, dict) and "field" in dash:
                found.append(dash["field"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(chart.to_dict())
    return found


MEAN_OF_MEDIANS = "time (ms): mean of the runs' medians"


def test_a_cell_of_several_runs_is_charted_at_the_mean_of_their_medians(tmp_path):
    """Three runs of one cell, each slower than the one before: its throughput and TFLOP/s
    are both at the mean of the runs' medians (TFLOP/s was the last run's), and the
    charts and tables call that time so; a cell run once keeps its median."""
    runs = runs_of(model_result("s", model_cell("resnet50", "training", "float32", 64)))
    frame = load(write_parquet(tmp_path, runs))
    models = model_charts.model_frame(frame)
    (row,) = models.itertuples()
    first = runs[0]["measurements"][0]
    mean = 1.2 * first["time_s"]["median"]
    assert row.time_ms == pytest.approx(1e3 * mean)
    assert row.throughput == pytest.approx(64 / mean)
    assert row.tflops == pytest.approx(first["flops_per_iteration"] / mean / 1e12)
    throughput = model_charts.throughput_figure(models)
    assert MEAN_OF_MEDIANS in [c.title for c in throughput.table.columns]
    assert MEAN_OF_MEDIANS in json.dumps(throughput.chart.to_dict())
    assert "the mean of each cell's runs' medians" in model_charts.tflops_figure(models).caption
    paradnn = paradnn_charts.by_batch_figure(models)  # its charts read the same columns
    assert MEAN_OF_MEDIANS in [c.title for c in paradnn.table.columns]
    # ParaDnn's own figure beside the median-based one, saying it is of the mean step (it
    # was only in the efficiency table, which needs a peak or a calibration)
    assert [c.field for c in paradnn.table.columns if "Φ TFLOP/s" in c.title] == ["phi_tflops"]
    assert escape(MEAN_OF_MEDIANS) in tables.unstable_table(frame)  # 1.0, 1.2, 1.4: unstable
    once = model_charts.model_frame(load(write_parquet(tmp_path / "once", runs[:1])))
    assert "median time (ms)" in [c.title for c in model_charts.throughput_figure(once)
                                  .table.columns]


def test_a_cell_two_studies_ran_is_drawn_from_the_one_with_more_runs_and_listed_in_each(
        tmp_path):
    """One cell id, two studies: study "a" ran it three times (unstable), "b" once at twice
    the time and later. The chart drew b's single run (its interval over one run's
    iterations, a's three runs dropped), and the unstable table kept one study's row
    whatever its CV."""
    cell = model_cell("resnet50", "training", "float32", 64)
    three = runs_of(model_result("a", cell))
    once = runs_of(model_result("b", cell), slowdowns=(2.0,))
    frame = load(write_parquet(tmp_path, [*three, *once]))
    (row,) = model_charts.model_frame(frame).itertuples()
    assert (row.study, row.repeats) == ("a", 3)
    assert row.time_ms == pytest.approx(1e3 * 1.2 * three[0]["measurements"][0]["time_s"]["median"])
    twice = load(write_parquet(tmp_path / "twice", [*three, *runs_of(model_result("b", cell),
                                                                      (1.0, 1.5, 2.0))]))
    table = tables.unstable_table(twice)
    assert table.count("<td>a</td>") == 1 and table.count("<td>b</td>") == 1


def test_an_operators_time_and_rates_are_the_cells_across_its_runs(tmp_path):
    """An operator cell run three times: each input's time is the mean of the runs'
    medians, its TFLOP/s and GB/s at that time (they were the last run's)."""
    runs = runs_of(op_result("ops"))
    first = runs[0]["measurements"]
    ops = op_charts.op_frame(load(write_parquet(tmp_path, runs)))
    assert len(ops) == len(first) == 6
    for m, row in zip(first, ops.itertuples(), strict=True):
        mean = 1.2 * m["time_s"]["median"]
        assert row.median_s == pytest.approx(mean)
        assert row.tflops == pytest.approx(m["flops_per_iteration"] / mean / 1e12)
        assert row.gbps == pytest.approx(m["bytes_per_iteration"] / mean / 1e9)
    assert "mean of the runs' medians" in json.dumps(op_charts.time_figure(ops).chart.to_dict())


def test_the_roofline_draws_a_cell_of_three_runs_once_at_its_time(tmp_path):
    """Each input of an operator cell run three times is one point (it was three), at the
    mean of the runs' medians."""
    runs = runs_of(op_result("ops"))
    points = roofline_charts.points(load(write_parquet(tmp_path, runs)))
    first = runs[0]["measurements"]
    assert len(points) == len(first) == 6
    assert sorted(points["tflops"]) == pytest.approx(sorted(
        m["flops_per_iteration"] / (1.2 * m["time_s"]["median"]) / 1e12 for m in first))


def test_a_collectives_time_and_bandwidths_are_the_cells_across_its_runs():
    """A collective's row carries its cell's time across runs (aggregate's run_to_run):
    the chart's time and both bandwidths are at it, not at the last run's median."""
    from dlbench.report import comms_charts
    from dlbench.report.data import prepare

    row = {"cell_id": "ar", "source": "ar_r2.json", "study": "net", "kind": "comms",
           "status": "ok", "throughput": 1e5, "name": "all_reduce|1024", "pass": "collective",
           "op_name": "all_reduce", "collective": "all_reduce", "num_gpus": 2, "num_nodes": 1,
           "system": "a", "device": "gpu", "framework": "pytorch", "bytes_per_iteration": 1024,
           "time_median_s": 1.4e-5, "time_p95_s": 1.5e-5, "gbps": 1024 / 1.4e-5 / 1e9,
           "bus_gbps": 1024 / 1.4e-5 / 1e9, "pct_of_link": 50.0, "repeats": 3,
           "cell_time_median_s": 1.2e-5}
    frame = prepare(pd.DataFrame([row]))
    (sized,) = comms_charts.comms_frame(frame).itertuples()
    assert sized.time_us == pytest.approx(12.0)
    assert sized.algbw_gbps == pytest.approx(1024 / 1.2e-5 / 1e9)
    assert sized.busbw_gbps == pytest.approx(1024 / 1.2e-5 / 1e9)
    assert sized.pct_of_link == pytest.approx(50.0 * 1.4 / 1.2)
    figure = comms_charts.bandwidth_figure(frame)
    assert "time (µs): mean of the runs' medians" in [c.title for c in figure.table.columns]


def llm_rows(cell: str, batch: int, *, num_batches: int = 3, model_opts: str | None = None,
             repeats: int = 1, slower: float = 1.0) -> list[dict]:
    """The aggregate's rows of one language-model inference cell (prefill and decode), the
    last of ``repeats`` runs, ``slower`` times the cell's time across them."""
    common = {"study": "serve", "cell_id": cell, "source": f"{cell}.json",
              "kind": "llm_inference", "status": "ok", "system": "box", "device": "cpu",
              "framework": "pytorch", "model": "llama_tiny", "precision": "float32",
              "batch_size": batch, "prompt_length": 32, "output_length": 8,
              "num_batches": num_batches, "model_opts": model_opts, "repeats": repeats}
    prefill, decode = 0.01 * batch, 0.002 * batch
    return [{**common, "name": "llama_tiny", "pass": "prefill", "throughput": 32 * batch / prefill,
             "time_median_s": prefill * slower, "cell_time_median_s": prefill,
             "cell_throughput": 32 * batch / prefill},
            {**common, "name": "llama_tiny", "pass": "decode", "throughput": batch / decode,
             "time_median_s": decode * slower, "cell_time_median_s": decode,
             "cell_throughput": batch / decode, "gbps": 1.0 / slower,
             "extra": json.dumps({"tpot_p50_s": 1.5 * decode})}]


def test_language_model_cells_differing_in_any_axis_are_told_apart():
    """Two inference cells apart in num_batches only get two line styles (the latency
    chart joined them), as the trade-off chart does each cell's other axes."""
    from dlbench.report import llm_charts
    from dlbench.report.data import prepare

    frame = prepare(pd.DataFrame([*llm_rows("n3b1", 1), *llm_rows("n3b2", 2),
                                  *llm_rows("n5b1", 1, num_batches=5),
                                  *llm_rows("n5b2", 2, num_batches=5)]))
    assert {"num_batches", "warmup_until_steady"} <= set(llm_charts.OTHER_AXES)
    assert set(stroke_dashes(llm_charts.latency_figure(frame).chart)) == {"variant"}
    assert set(stroke_dashes(llm_charts.tradeoff_figure(frame).chart)) == {"variant"}


def test_a_language_models_options_name_it():
    from dlbench.report import llm_charts
    from dlbench.report.data import prepare

    options = prepare(pd.DataFrame([*llm_rows("a", 1), *llm_rows("b", 1,
                                                                  model_opts='{"n_layer": 4}')]))
    assert sorted(llm_charts.llm_frame(options)["model"]) == ["llama_tiny",
                                                               "llama_tiny (n_layer=4)"]


def test_a_language_model_cell_of_three_runs_is_charted_at_the_mean_of_their_medians():
    """TTFT and TPOT are the cell's across its runs (they were the last run's), and the
    output tokens/s and decode GB/s beside them are at those times."""
    from dlbench.report import llm_charts
    from dlbench.report.data import prepare

    repeated = prepare(pd.DataFrame(llm_rows("r", 2, repeats=3, slower=1.4)))
    (cell,) = llm_charts.llm_frame(repeated).itertuples()
    assert (cell.ttft_ms, cell.itl_ms, cell.tpot_ms) == pytest.approx((20.0, 4.0, 6.0))
    assert cell.output_tokens_per_s == pytest.approx(2 * 8 / (0.02 + 7 * 0.006))
    assert cell.decode_gbps == pytest.approx(1.0)
    latency = llm_charts.latency_figure(repeated)
    assert "ITL (ms): mean of the runs' medians" in [c.title for c in latency.table.columns]


def monitored_on_two_systems(tmp_path: Path, unit: str = "samples/s") -> pd.DataFrame:
    """The model frame of one monitored cell at two batch sizes on systems a and b."""
    results = []
    for system in ("a", "b"):
        for batch in (16, 32):
            res = model_result("s", model_cell("resnet50", "training", "float32", batch),
                               monitored=True)
            res["system"] = system
            for m in res["measurements"]:
                m["throughput_unit"] = unit
            results.append(res)
    return model_charts.model_frame(load(write_parquet(tmp_path, results)))


def test_power_lines_of_two_systems_differ_in_style(tmp_path):
    """Two systems' power lines take a line style each, as every chart against batch size
    does (they looked the same)."""
    power = resource_charts.power_figure(monitored_on_two_systems(tmp_path))
    assert set(stroke_dashes(power.chart)) == {"variant"}


def test_a_language_models_energy_is_tokens_per_joule(tmp_path):
    """Energy counts what the throughput counts: a language model's tokens."""
    energy = resource_charts.energy_figure(monitored_on_two_systems(tmp_path, "tokens/s"))
    assert "tokens per joule" in json.dumps(energy.chart.to_dict())
    assert "tokens/J" in [c.title for c in energy.table.columns]
    assert energy.caption.startswith("Tokens processed by the measured iterations")


def test_only_the_throughput_panels_name_their_unit_where_units_differ(tmp_path):
    """samples/s beside tokens/s: each throughput panel says its own, and so did the
    panels of the TFLOP/s, memory and energy charts built from the same rows ("alexnet ·
    training (samples/s)" over a GiB axis)."""
    results = [model_result("s", model_cell(model, "training", "float32", 16))
               for model in ("resnet50", "alexnet")]
    for m in results[1]["measurements"]:
        m["throughput_unit"] = "tokens/s"
    models = model_charts.model_frame(load(write_parquet(tmp_path, results)))

    def panels(figure):
        spec = figure.chart.to_dict()
        return spec["facet"]["field"], spec["facet"]["sort"]

    assert panels(model_charts.throughput_figure(models)) == (
        "panel_unit", ["alexnet · training (tokens/s)", "resnet50 · training (samples/s)"])
    assert panels(model_charts.tflops_figure(models)) == (
        "panel", ["alexnet · training", "resnet50 · training"])


def test_a_table_aggregated_before_the_rule_draws_no_interval_from_too_few_iterations(
        tmp_path):
    """Its 5-iteration cells kept the bootstrap's "interval", their whole range, which the
    caption says is not drawn; a 6-iteration cell's stays."""
    results = [model_result("s", model_cell("resnet50", "training", "float32", b))
               for b in (16, 32)]
    five = results[0]["measurements"][0]
    five.update(R.measurement(name=five["name"], pass_=five["pass"],
                              times_s=five["times_s"][:5], items_per_iteration=16,
                              parameters=five["parameters"]))
    frame = load(write_parquet(tmp_path, results))
    frame["ci_method"] = "iterations"  # as an older aggregate wrote both
    frame["cell_time_ci_low_s"] = frame["time_median_s"] * 0.9
    frame["cell_time_ci_high_s"] = frame["time_median_s"] * 1.1
    models = model_charts.model_frame(frame).set_index("batch_size")
    assert models.loc[16, "ci_method"] == "none" and pd.isna(models.loc[16, "throughput_low"])
    assert models.loc[32, "ci_method"] == "iterations"
    assert models.loc[32, "throughput_low"] < models.loc[32, "throughput"]


def test_where_the_time_went_counts_a_cell_of_three_runs_as_one_cell(tmp_path):
    res = model_result("a", model_cell("resnet50", "training", "float32", 32))
    res["stages_s"] = {"startup": 2.0, "measure": 4.0, "other": 1.0}
    long = time_charts.stage_frame(load(write_parquet(tmp_path, runs_of(res))))
    assert set(long["cells"]) == {1} and set(long["runs"]) == {3}
    assert set(long["label"]) == {"a · 1 cell in 3 runs, 57% measured"}
    assert time_charts.summary_line(long).startswith(
        "The cells' own time: 21 s in 1 cell in 3 runs, of which")


def test_one_cell_drifting_on_two_systems_is_drawn_as_two_measurements(tmp_path):
    results = []
    for system in ("a", "b"):
        res = model_result("s", model_cell("resnet50", "training", "float32", 64))
        base = res["measurements"][0]["time_s"]["median"]
        times = [base * (1 + 0.2 * i / 39) * (1 + 0.005 * (i % 2)) for i in range(40)]
        res["measurements"][0].update(R.measurement(
            name="resnet50", pass_="training", times_s=times, items_per_iteration=64))
        res["system"] = system
        results.append(res)
    drawn = drift_charts.drift_frame(load(write_parquet(tmp_path, results)))
    cell = cell_id_of(results[0]["cell"])
    assert sorted(drawn["measurement"].unique()) == [
        f"a/{cell} · resnet50 · training (+18%)", f"b/{cell} · resnet50 · training (+18%)"]
