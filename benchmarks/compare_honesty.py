"""Is ``dlbench compare`` honest? A/A false positives and a real slowdown found.

Runs a small CPU study several times, every cell of every run a process of its own through
the launcher, exactly as the workflow runs it (each run under its own system label):

- ``--runs`` ordinary runs (A/A): every pair of them is compared at default settings, one
  run against one (intervals over iterations), and the first half of the runs against the
  second half as repeats (intervals over repeats). Nothing changed between them, so every
  ``faster`` or ``slower`` verdict is a false positive.
- ``--slow-runs`` runs with ``OMP_NUM_THREADS=1`` (the others use every core): each is
  compared with each ordinary run; a cell whose true slowdown exceeds the threshold
  (judged on the mean ratio over all pairs) should be ``slower``: the detection rate.

    python benchmarks/compare_honesty.py --out results/benchmarks/compare_honesty.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from dlbench import study, systems, workflow_support
from dlbench.compare import Settings, Side, compare, compare_sides
from dlbench.compare.inputs import read_folder

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import positive_int, provenance  # noqa: E402

GRID = {"framework": "pytorch", "device": "cpu", "num_warmup_batches": 3,
        "num_batches": 20, "batch_size": 4}
CELLS = [("resnet18", "inference"), ("resnet18", "training"), ("alexnet", "training"),
         ("deep_mnist", "training")]


def cells() -> list[study.Cell]:
    out = []
    for model, phase in CELLS:
        config = {"studies": {"honesty": {"grid": {**GRID, "model": model, "phase": phase}}}}
        out.extend(study.expand_config(config))
    return out


def run_study(results: Path, label: str, threads: int | None) -> float:
    """Every cell once under system ``label``; the wall time it took."""
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    for cell in cells():
        output = workflow_support.result_path(cell, label).relative_to(systems.RESULTS)
        proc = subprocess.run([sys.executable, "-m", "dlbench.launch", "--cell", cell.to_json(),
                               "--output", str(results / output), "--monitor_interval_ms", "0"],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(cell_failure(cell.id, label, proc.returncode, proc.stderr))
    return time.perf_counter() - start


def cell_failure(cell_id: str, label: str, rc: int, stderr: str) -> str:
    """One line: which cell failed in which run, and the last thing it said."""
    lines = stderr.strip().splitlines()
    return (f"compare_honesty: cell {cell_id} of run {label} failed (exit {rc}): "
            f"{lines[-1] if lines else 'no output on stderr'}")


def verdicts(base: Path | pd.DataFrame, new: Path | pd.DataFrame) -> pd.DataFrame:
    if isinstance(base, Path):
        comparison = compare(str(base), str(new))
    else:
        comparison = compare_sides(Side("BASE", "first half", base), Side("NEW", "second half", new))
    cells = comparison.cells
    return cells[cells["side"] == "both"][["label", "verdict", "throughput_ratio",
                                            "throughput_ci_low", "throughput_ci_high",
                                            "ci_method"]]


def as_repeats(folders: list[Path]) -> pd.DataFrame:
    frames = [read_folder(folder).assign(repeat=k) for k, folder in enumerate(folders)]
    return pd.concat(frames, ignore_index=True)


def rate(frames: list[pd.DataFrame], wanted: tuple[str, ...]) -> dict[str, float | int]:
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["verdict"])
    hits = int(table["verdict"].isin(wanted).sum())
    return {"compared": len(table), "flagged": hits,
            "rate": hits / len(table) if len(table) else float("nan")}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=6, help="ordinary runs (A/A), at least 4")
    p.add_argument("--slow-runs", type=positive_int, default=2,
                   help="runs with OMP_NUM_THREADS=1 (at least 1: the detection rate)")
    p.add_argument("--out", type=Path, default=Path("results/benchmarks/compare_honesty.json"))
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if args.runs < 4:
        p.error("argument --runs: at least 4 (two halves of two repeats)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        walls = {}
        for i in range(args.runs):
            walls[f"run{i}"] = run_study(results, f"run{i}", None)
        for i in range(args.slow_runs):
            walls[f"slow{i}"] = run_study(results, f"slow{i}", 1)
        runs = [results / f"run{i}" for i in range(args.runs)]
        slow = [results / f"slow{i}" for i in range(args.slow_runs)]

        aa_single = [verdicts(a, b) for a, b in itertools.combinations(runs, 2)]
        half = args.runs // 2
        aa_repeats = [verdicts(as_repeats(runs[:half]), as_repeats(runs[half:2 * half]))]
        slowdown = [verdicts(a, b).assign(pair=f"{a.name}->{b.name}")
                    for a, b in itertools.product(runs, slow)]
        slowdown_repeats = ([verdicts(as_repeats(runs[:half]), as_repeats(slow))]
                            if len(slow) >= 2 else [])

    threshold = Settings().threshold
    per_cell = pd.concat(slowdown).groupby("label")["throughput_ratio"].mean()
    slowed = sorted(per_cell[per_cell < 1 - threshold].index)
    detection = [f[f["label"].isin(slowed)] for f in slowdown]
    detection_repeats = [f[f["label"].isin(slowed)] for f in slowdown_repeats]
    report = {
        "benchmark": "compare_honesty",
        **provenance(),
        "cells": [f"{m} {p} bs{GRID['batch_size']}" for m, p in CELLS],
        "runs": args.runs, "slow_runs": args.slow_runs, "threshold": threshold,
        "wall_s": walls,
        "aa_single_runs": {**rate(aa_single, ("faster", "slower")),
                           "pairs": len(aa_single),
                           "flagged_cells": pd.concat(aa_single).query(
                               "verdict != 'same'").to_dict("records")},
        "aa_repeats": {**rate(aa_repeats, ("faster", "slower")), "repeats_per_side": half,
                       "cells": pd.concat(aa_repeats).to_dict("records")},
        "slowdown_mean_ratio_per_cell": per_cell.to_dict(),
        "slowdown_cells_beyond_threshold": slowed,
        "slowdown_detection_single_runs": rate(detection, ("slower",)),
        "slowdown_detection_repeats": rate(detection_repeats, ("slower",)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: v for k, v in report.items()
                      if k not in ("aa_repeats", "aa_single_runs")}, indent=1, default=str))
    print("A/A single:", {k: v for k, v in report["aa_single_runs"].items()
                          if k != "flagged_cells"})
    print("A/A repeats:", {k: v for k, v in report["aa_repeats"].items() if k != "cells"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
