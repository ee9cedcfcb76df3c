"""Throughput of a PyTorch cell with the resource monitor on against off, interleaved.

    python benchmarks/monitor_overhead.py [--rounds 5] [--interval_ms 100] [--output f.json]

Each round runs the same cell twice in this process, monitor on and off, in alternating
order (on/off, then off/on) so that drift of the machine's load falls on both alike.
Throughput is the runner's own (items per second at the median iteration time). The JSON
gives both medians, the median of the per-round ratios as the overhead in percent (target
< 1 %), the same from each run's 10th-percentile iteration time (less sensitive to other
processes' bursts on a shared machine), and the sampler's own CPU time as a fraction of
the measured phase (what sampling takes, whatever the machine's load).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlbench import monitor
from dlbench import result as R
from dlbench.pytorch import runner

TARGET_PERCENT = 1.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100.0))]


def run_cell(args: argparse.Namespace, interval_ms: float, out: Path) -> dict[str, Any]:
    argv = [f"--model={args.model}", "--device=cpu", f"--batch_size={args.batch_size}",
            f"--num_batches={args.num_batches}", f"--num_warmup_batches={args.warmup}",
            "--count_flops=false", f"--monitor_interval_ms={interval_ms:g}", f"--output={out}"]
    with contextlib.redirect_stdout(sys.stderr):  # the runner's DLBS lines stay off our JSON
        rc = runner.main(argv)
    res = R.read(out)
    if rc != 0 or res["status"] != "ok":
        raise SystemExit(f"monitor_overhead: the cell failed: {res['error']}")
    monitor = res["extra"].get("monitor", {})
    m = res["measurements"][0]
    return {"monitor": interval_ms > 0, "throughput": m["throughput"],
            "throughput_p10": m["items_per_iteration"] / percentile(m["times_s"], 10),
            "sampler_cpu_fraction": monitor.get("sampler_cpu_fraction"),
            "sample_count": monitor.get("sample_count")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deep_mnist")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--num_batches", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval_ms", type=float, default=monitor.DEFAULT_INTERVAL_MS)
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell.json"
        for r in range(args.rounds):
            order = [args.interval_ms, 0.0] if r % 2 == 0 else [0.0, args.interval_ms]
            runs = {("on" if ms > 0 else "off"): run_cell(args, ms, out) for ms in order}
            rounds.append({"order": ["on" if ms > 0 else "off" for ms in order],
                           "throughput_on": runs["on"]["throughput"],
                           "throughput_off": runs["off"]["throughput"],
                           "ratio_on_off": runs["on"]["throughput"] / runs["off"]["throughput"],
                           "ratio_on_off_p10": (runs["on"]["throughput_p10"]
                                                / runs["off"]["throughput_p10"]),
                           "sampler_cpu_fraction": runs["on"]["sampler_cpu_fraction"],
                           "samples": runs["on"]["sample_count"]})
    on = statistics.median(r["throughput_on"] for r in rounds)
    off = statistics.median(r["throughput_off"] for r in rounds)
    ratio = statistics.median(r["ratio_on_off"] for r in rounds)
    report = {
        "benchmark": "monitor_overhead",
        "cell": {"model": args.model, "device": "cpu", "batch_size": args.batch_size,
                 "num_batches": args.num_batches, "num_warmup_batches": args.warmup},
        "interval_ms": args.interval_ms, "rounds": rounds,
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                 "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "throughput_on_median": on, "throughput_off_median": off,
        "overhead_percent": (1.0 - ratio) * 100.0,
        "overhead_percent_of_medians": (1.0 - on / off) * 100.0,
        "overhead_percent_p10": (1.0 - statistics.median(r["ratio_on_off_p10"]
                                                         for r in rounds)) * 100.0,
        "ratio_spread": [min(r["ratio_on_off"] for r in rounds),
                         max(r["ratio_on_off"] for r in rounds)],
        "sampler_cpu_fraction_mean": statistics.mean(r["sampler_cpu_fraction"] for r in rounds),
        "target_percent": TARGET_PERCENT,
    }
    report["within_target"] = report["overhead_percent"] < TARGET_PERCENT
    text = json.dumps(report, indent=1)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
