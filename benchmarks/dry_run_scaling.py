"""Workflow overhead at scale: ``snakemake -n`` of a 10,000-cell study against a bare
Snakefile with the same number of one-line jobs, side by side in one run.

The study: 10 models x 2 phases x 5 precisions x 10 batch sizes x 5 GPU counts x 2
num_batches, device gpu. The bare Snakefile has one rule whose 10,000 outputs an ``all``
rule asks for. A third, hand-written Snakefile gives its 10,000 jobs what a cell's job
declares (log, threads, priority, three resources of which one a function, three params
of which one a function, conda env, container, an aggregate and a report job over the
results, a four-placeholder command): what Snakemake itself charges for such jobs, so that
dlbench / hand-written is the cost of dlbench's own work (config checks, the cells, ids).
Each is dry-run ``--rounds`` times, in turn, in fresh temporary folders; the ratios are at
the median (1.0: dlbench costs nothing on top).

    python benchmarks/dry_run_scaling.py --out results/benchmarks/dry_run_scaling.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import positive_int, provenance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODELS = ["resnet18", "resnet50", "resnet101", "alexnet", "vgg16", "googlenet",
          "inception3", "deep_mnist", "bert_base", "acoustic_model"]
STUDY = {"studies": {"big": {"grid": {
    "model": MODELS, "phase": ["training", "inference"],
    "precision": ["float32", "tf32", "float16", "bfloat16", "float64"],
    "batch_size": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], "num_gpus": [1, 2, 4, 8, 16],
    "num_batches": [50, 100], "device": "gpu"}}}}
CELLS = 10 * 2 * 5 * 10 * 5 * 2
BARE = f"""
rule all:
    input: expand("results/big/cells/c{{i}}.json", i=range({CELLS}))

rule cell:
    output: "results/big/cells/c{{i}}.json"
    shell: "echo {{wildcards.i}} > {{output}}"
"""

# A cell job's directives, hand-written (see the docstring): parameters from the wildcards.
HAND_WRITTEN = f"""
import json

CELL_FILES = expand("results/big/cells/c{{i}}.json", i=range({CELLS}))


rule all:
    input: CELL_FILES, "results/benchmarks.parquet", "results/report/index.html"


rule aggregate:
    input: CELL_FILES
    output: "results/benchmarks.parquet"
    log: "results/logs/aggregate.log"
    shell: "touch {{output}}"


rule report:
    input: "results/benchmarks.parquet"
    output: "results/report/index.html"
    log: "results/logs/report.log"
    shell: "touch {{output}}"


def cell_json(wildcards):
    i = int(wildcards.i)
    return ["--cell", json.dumps({{"id": i, "batch_size": 2 ** (i % 10)}}), "--data_dir="]


def gpus(wildcards):
    return 2 ** (int(wildcards.i) % 5)


rule cell:
    output: "results/big/cells/c{{i}}.json"
    log: "results/big/logs/c{{i}}.log"
    threads: 2
    priority: 0
    resources: benchmark_slot=1, gpu=gpus, timeout_s=3600
    params: launcher=["python"], framework=["--python", "python"], cell=cell_json
    conda: "env.yaml"
    container: "docker://example/cell:1"
    shell:
        "exec python -m launch {{params.cell:q}} --python python --timeout_s 3600"
        " --output {{output:q}} > {{log:q}} 2>&1"
"""
VARIANTS = ("bare", "hand_written", "dlbench")


def dry_run(workdir: Path, args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet", "all",
                           "--cores", "1", "--directory", str(workdir), *args],
                          capture_output=True, text=True, timeout=1200)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"snakemake -n failed in {workdir}:\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout + proc.stderr


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument("--rounds", type=positive_int, default=3)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump(STUDY))
        snakefiles = {"bare": root / "Snakefile.bare",
                      "hand_written": root / "Snakefile.hand_written"}
        snakefiles["bare"].write_text(BARE)
        snakefiles["hand_written"].write_text(HAND_WRITTEN)
        (root / "env.yaml").write_text("dependencies: [python]\n")
        for i in range(args.rounds):
            for name in VARIANTS:
                work = root / f"{name}{i}"
                work.mkdir()
                run_args = (["--snakefile", str(snakefiles[name]), "--resources", "gpu=16"]
                            if name in snakefiles else
                            ["--snakefile", str(REPO / "Snakefile"), "--configfile",
                             str(config), "--resources", "gpu=16"])
                elapsed, out = dry_run(work, run_args)
                times[name].append(elapsed)
                print(f"round {i}: {name} {elapsed:.2f} s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}

    def per_round(over: str) -> list[float]:
        # Each round's runs are back to back: less exposed to the machine's drift between
        # rounds than the ratio of the medians.
        return [d / b for d, b in zip(times["dlbench"], times[over], strict=True)]

    report = {
        "benchmark": "dry_run_scaling", "cells": CELLS, "rounds": args.rounds,
        "seconds": times, "median_s": med,
        "spread_s": {k: [min(v), max(v)] for k, v in times.items()},
        "ratio_dlbench_over_bare": med["dlbench"] / med["bare"],
        "ratio_per_round": per_round("bare"),
        "ratio_median_of_rounds": statistics.median(per_round("bare")),
        "ratio_dlbench_over_hand_written": med["dlbench"] / med["hand_written"],
        "ratio_hand_written_over_bare": med["hand_written"] / med["bare"],
        "ratio_over_hand_written_per_round": per_round("hand_written"),
        **provenance(), "snakemake": importlib.metadata.version("snakemake"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in (
        "median_s", "ratio_dlbench_over_bare", "ratio_median_of_rounds",
        "ratio_dlbench_over_hand_written", "ratio_hand_written_over_bare")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
