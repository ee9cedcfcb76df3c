"""The report at scale: render a synthetic 10,000-cell aggregate table, measure how long it
takes and how large the page is, and load it in headless Chromium to see every chart drawn.

The study: 10 models x 2 phases x 5 precisions x 10 batch sizes x 5 GPU counts x 2
num_batches, model cells on H100s with monitor summaries (energy, power, memory), as the
aggregate step would write them (result documents -> ``aggregate.rows_of`` -> run-to-run
and efficiency columns -> the one Parquet schema). Targets: render < 10 s, index.html
<= 5 MB, every chart drawn. ``--cells-scale`` shrinks the grid (the test suite runs it small).

    python benchmarks/report_scale.py --out results/benchmarks/report_scale.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from dlbench import aggregate, efficiency, run_to_run
from dlbench import result as R
from dlbench.report import export, render

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import positive_int, provenance  # noqa: E402

MODELS = ["resnet18", "resnet50", "resnet101", "alexnet", "vgg16", "googlenet",
          "inception3", "deep_mnist", "bert_base", "acoustic_model"]
PHASES = ["training", "inference"]
PRECISIONS = ["float32", "tf32", "float16", "bfloat16", "float64"]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
GPU_COUNTS = [1, 2, 4, 8, 16]
NUM_BATCHES = [50, 100]
SPEED = {"float32": 1.0, "tf32": 2.5, "float16": 4.0, "bfloat16": 4.0, "float64": 0.5}
GPU = "NVIDIA H100 80GB HBM3"
TARGETS = {"render_s": 10.0, "index_bytes": 5 * 2**20}
CHROMIUM = Path("/usr/bin/chromium")
# A container of a chart's data marks holding at least one (a chart given no rows still
# draws its axes and an empty container).
DATA_MARK = re.compile(r'<g class="mark-(?!group)[a-z]+ role-mark[^"]*"[^>]*><(?!/g>)')


def environment(gpus: int) -> dict:
    return {"hostname": "node01", "cpu_model": "AMD EPYC 9654", "cpu_count": 192,
            "memory_gib": 1024.0, "gpu_models": [GPU] * gpus, "gpu_driver": "550.54.15",
            "cuda_version": "12.4", "cudnn_version": "9.1.0", "framework": "pytorch",
            "framework_version": "2.5.1", "python_version": "3.11.9",
            "dlbench_version": "0.1.0", "library_flags": {}}


def monitor(duration_s: float, items: float, batch: int, gpus: int) -> dict:
    power = 350.0 + 0.5 * batch
    energy = power * duration_s * gpus
    return {"enabled": True, "interval_ms": 100.0, "duration_s": duration_s,
            "sample_count": max(2, int(duration_s * 10)), "sampler_cpu_ms_mean": 0.4,
            "sampler_cpu_fraction": 0.004,
            "host": {"rss_peak_bytes": 3 * 2**30 + batch * 2**20, "cpu_percent_mean": 101.0,
                     "cpu_percent_max": 180.0, "processes_max": 1 + gpus},
            "gpus": [], "peak_host_rss_bytes": 3 * 2**30 + batch * 2**20,
            "peak_device_memory_bytes": 2 * 2**30 + batch * 50 * 2**20,
            "energy_j": energy, "energy_sources": ["gpu:nvml_total_energy"],
            "energy_note": None, "power_mean_w": energy / duration_s, "power_max_w": power * 1.2,
            "items": items, "samples_per_joule": items / energy, "notes": [],
            "series_file": None}


GRID = {"model": MODELS, "phase": PHASES, "precision": PRECISIONS, "batch_size": BATCHES,
        "num_gpus": GPU_COUNTS, "num_batches": NUM_BATCHES}


def grid_of(scale: int) -> dict[str, list]:
    """The study's grid; ``scale`` > 1 keeps every scale-th model and batch size."""
    return {**GRID, "model": MODELS[::scale], "batch_size": BATCHES[::scale]}


def results(grid: dict[str, list]) -> list[dict]:
    """One ok result document per cell of ``grid`` (GRID's keys, each a list of values)."""
    out = []
    for m, (model, phase, precision, batch, gpus, num_batches) in enumerate(itertools.product(
            *(grid[k] for k in GRID))):
        cell = {"framework": "pytorch", "model": model, "phase": phase, "precision": precision,
                "batch_size": batch, "num_gpus": gpus, "device": "gpu", "data": "synthetic",
                "num_batches": num_batches, "num_warmup_batches": 10}
        cell_id = f"pytorch_{model}_{phase}_{precision}_{batch}_gpu{gpus}_n{num_batches}"
        res = R.new_result(kind="model", cell=cell, study="big", cell_id=cell_id)
        res["environment"] = environment(gpus)
        rank = MODELS.index(model) if model in MODELS else len(model) % len(MODELS)
        per_sample = (1e-4 * (1 + rank)) * (3 if phase == "training" else 1)
        # Each GPU takes a batch; adding GPUs costs a little communication per step.
        step = (per_sample * batch / SPEED[precision] + 2e-4) * (1 + 0.04 * gpus.bit_length())
        # A few per cent of deterministic wobble, different per cell.
        times = [step * (1 + 0.02 * ((i * 7 + m) % 5) / 4) for i in range(num_batches)]
        items = batch * gpus
        res["measurements"] = [R.measurement(
            name=model, pass_=phase, times_s=times, items_per_iteration=items,
            parameters=25_557_032, flops_per_iteration=3 * 4.1e9 * items)]
        res["extra"]["monitor"] = monitor(sum(times), items * num_batches, batch, gpus)
        out.append(R.finish(res, "ok"))
    return out


def write_table(folder: Path, grid: dict[str, list]) -> tuple[Path, int]:
    """The aggregate Parquet of the synthetic study, as ``aggregate.build_table`` makes it."""
    docs = results(grid)
    rows = [row for res in docs
            for row in aggregate.rows_of(res, f"results/big/cells/{res['cell_id']}.json")]
    run_to_run.add_columns(rows, run_to_run.DEFAULT_UNSTABLE_CV)
    efficiency.add_columns(rows)
    parquet = folder / "benchmarks.parquet"
    pq.write_table(aggregate.table_of_rows(rows), parquet)
    return parquet, len(docs)


def chromium_check(index: Path, profile: Path) -> dict:
    """Load the page headless; which charts drew their data (an SVG with a mark of a row)
    and which reported an error."""
    if not CHROMIUM.exists():
        return {"skipped": f"no headless Chromium at {CHROMIUM}"}
    html = index.read_text()
    names = re.findall(r'<div class="vega-chart" id="chart-([^"]+)"', html)
    start = time.perf_counter()
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=30000", "--dump-dom",
         index.as_uri()], capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    dom = done.stdout
    drawn, failed = [], []
    for name in names:
        at = dom.find(f'id="chart-{name}"')
        box = dom[dom.rindex("<div", 0, at):dom.find("</figure>", at)] if at >= 0 else ""
        if "chart-error" in box or at < 0:
            failed.append(name)
        elif re.search(r'<svg[^>]*class="marks"', box) and DATA_MARK.search(box):
            drawn.append(name)
    return {"returncode": done.returncode, "load_s": elapsed, "charts": names,
            "drawn": drawn, "failed": failed, "all_drawn": drawn == names}


def new_folder(text: str) -> Path:
    """An argparse type: a folder this run may fill, refused where it already holds
    something (a report copied over it would mix with, or replace, what is there)."""
    path = Path(text)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise argparse.ArgumentTypeError(f"{text} already exists and is not an empty folder; "
                                         "name a new one")
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="renders timed (median reported)")
    p.add_argument("--cells-scale", type=positive_int, default=1,
                   help="keep every n-th model and batch size (1: the 10,000 cells)")
    p.add_argument("--keep", type=new_folder,
                   help="leave the last report in this folder (a new or empty one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        parquet, cells = write_table(root, grid_of(args.cells_scale))
        seconds = []
        for i in range(args.rounds):
            outdir = root / f"report{i}"
            # Every round pays what a report's process pays once (the JavaScript bundle).
            export.javascript_bundle.cache_clear()
            start = time.perf_counter()
            render(parquet, outdir)
            seconds.append(time.perf_counter() - start)
            print(f"round {i}: {seconds[-1]:.2f} s", file=sys.stderr)
        index = outdir / "index.html"
        size = index.stat().st_size
        browser = chromium_check(index, root / "chromium")
        if args.keep:
            shutil.copytree(outdir, args.keep, dirs_exist_ok=True)
            shutil.copy(parquet, args.keep / parquet.name)
    median = statistics.median(seconds)
    report = {
        "benchmark": "report_scale", "cells": cells, "rounds": args.rounds,
        "render_s": seconds, "render_median_s": median,
        "render_spread_s": [min(seconds), max(seconds)], "index_bytes": size,
        "targets": TARGETS, "chromium": browser,
        "meets_targets": (median < TARGETS["render_s"] and size <= TARGETS["index_bytes"]
                          and browser.get("all_drawn", False)),
        **provenance(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("cells", "render_median_s", "index_bytes",
                                             "meets_targets")}))
    print(json.dumps({k: browser.get(k) for k in ("load_s", "failed", "all_drawn")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
