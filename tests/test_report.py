"""The HTML report: built from real result documents through the real aggregate Parquet."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from dlbench import aggregate
from dlbench import result as R
from dlbench.report import ReportError, model_charts, render
from dlbench.report.data import load

CHROMIUM = Path("/usr/bin/chromium")
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
        "library_flags": {},
    }


def model_cell(model: str, phase: str, precision: str, batch: int, **over) -> dict:
    return {"framework": "pytorch", "model": model, "phase": phase, "precision": precision,
            "batch_size": batch, "num_gpus": 1, "device": "gpu", "data": "synthetic", **over}


def model_result(study: str, cell: dict, *, status: str = "ok", error: str | None = None) -> dict:
    cell_id = "_".join(str(cell[k]) for k in ("framework", "model", "phase", "precision",
                                                "batch_size"))
    res = R.new_result(kind="model", cell=cell, study=study, cell_id=cell_id)
    res["environment"] = environment(cell["framework"])
    if status == "ok":
        batch = cell["batch_size"]
        per_iter = SECONDS_PER_SAMPLE[cell["model"]] * batch / SPEEDUP[cell["precision"]]
        times = [per_iter * (1 + 0.01 * (i % 3)) for i in range(6)]
        res["measurements"] = [R.measurement(
            name=cell["model"], pass_=cell["phase"], times_s=times, items_per_iteration=batch,
            parameters=25_557_032, flops_per_iteration=3 * 4.1e9 * batch)]
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


def write_parquet(folder: Path, results: list[dict]) -> Path:
    paths = []
    for i, res in enumerate(results):
        path = folder / "results" / f"cell{i:03d}.json"
        R.write(res, path)
        paths.append(path)
    parquet = folder / "benchmarks.parquet"
    aggregate.write(paths, parquet)
    return parquet


def full_study() -> list[dict]:
    """Ok cells over 2 batch sizes x 2 precisions, one failed cell and one operator cell."""
    results = [model_result("smoke", model_cell("resnet50", "training", p, b))
               for p in ("float32", "float16") for b in (32, 64)]
    results.append(model_result("smoke", model_cell("resnet50", "training", "bfloat16", 128),
                                status="failed", error=FAILURE_ERROR))
    results.append(op_result("smoke"))
    return results


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    folder = tmp_path_factory.mktemp("report")
    parquet = write_parquet(folder, full_study())
    outdir = folder / "out"
    return outdir, render(parquet, outdir)


def chart_names(html: str) -> list[str]:
    return re.findall(r'<div class="vega-chart" id="chart-([^"]+)"', html)


def test_render_writes_page_and_an_image_pair_per_chart(report):
    outdir, files = report
    index = outdir / "index.html"
    assert files[0] == index and index.is_file()
    names = chart_names(index.read_text())
    # throughput, precision speed-up, TFLOP/s, operator time, TFLOP/s and GB/s
    assert set(names) == {"throughput", "precision-speedup", "model-tflops", "op-time",
                          "op-tflops", "op-gbps"}
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
                 "0.1.0 @ 0123456789ab-dirty"):
        assert text in env, text


def test_precision_speedup_is_relative_to_float32_of_the_same_cell(tmp_path):
    frame = load(write_parquet(tmp_path, full_study()))
    speedup = model_charts.speedup_frame(model_charts.model_frame(frame))
    assert sorted(speedup["batch_size"]) == [32, 64]
    assert set(speedup["precision"]) == {"float16"}
    # Median times are 2x shorter at float16 by construction.
    assert speedup["speedup"].tolist() == pytest.approx([2.0, 2.0])


def test_sections_without_data_are_left_out(tmp_path):
    results = [model_result("fp32only", model_cell("alexnet", "inference", "float32", b))
               for b in (16, 32, 64)]
    for res in results:
        for m in res["measurements"]:
            m["flops_per_iteration"] = m["tflops"] = None
    outdir = tmp_path / "out"
    files = render(write_parquet(tmp_path, results), outdir)
    html = (outdir / "index.html").read_text()
    assert chart_names(html) == ["throughput"]
    for section in ("failures", "operators", "precision", "tflops", "paradnn", "loader"):
        assert f'id="{section}"' not in html, section
    assert len(files) == 3


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
    assert left == ["model-tflops.png", "model-tflops.svg", "throughput.png", "throughput.svg"]


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
    done = subprocess.run([sys.executable, "-m", "dlbench.report", str(parquet), "--outdir",
                           str(outdir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(outdir / "index.html")]
    assert "no GPU" in (outdir / "index.html").read_text()
    bad = subprocess.run([sys.executable, "-m", "dlbench.report", str(tmp_path / "nope.parquet"),
                          "--outdir", str(outdir)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "nope.parquet" in bad.stderr


def test_a_table_that_is_not_an_aggregate_is_rejected_in_one_line(tmp_path):
    path = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(path)
    with pytest.raises(ReportError, match=r"other.parquet: column 'study' is missing"):
        render(path, tmp_path / "out")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(ReportError, match=r"text.parquet: not a readable Parquet file"):
        render(tmp_path / "text.parquet", tmp_path / "out")


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
               *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason="needs headless Chromium at /usr/bin/chromium (apt-get install chromium)")
def test_charts_draw_in_headless_chromium(report, tmp_path):
    index = report[0] / "index.html"
    names = chart_names(index.read_text())
    done = chromium("--dump-dom", index.as_uri(), profile=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    drawn = []
    for name in names:
        start = dom.index(f'id="chart-{name}"')
        container = dom[dom.rindex("<div", 0, start):dom.index("</figure>", start)]
        assert "chart-error" not in container, container[:300]
        if re.search(r'<svg[^>]*class="marks"', container):
            drawn.append(name)
    assert drawn == names

    shot = tmp_path / "page.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1400,1800", index.as_uri(),
                    profile=tmp_path / "profile2")
    assert shot.is_file(), done.stderr[-2000:]
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is None or len(colours) > 200, "screenshot looks blank"
