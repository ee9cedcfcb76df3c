"""Throughput of a PyTorch cell with the resource monitor on against off, interleaved.

    python benchmarks/monitor_overhead.py [--rounds 5] [--interval_ms 500] [--out f.json]

Each round runs the same cell twice in this process, monitor on and off, in alternating
order (on/off, then off/on) so that drift of the machine's load falls on both alike; one
untimed pair first takes the cold process's one-off costs, which would otherwise fall on
round 0's first run.
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
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlbench import monitor
from dlbench import result as R
from dlbench.pytorch import runner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import at_least, positive_float, positive_int, provenance  # noqa: E402

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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="deep_mnist")
    p.add_argument("--batch_size", type=positive_int, default=16)
    p.add_argument("--num_batches", type=positive_int, default=40)
    p.add_argument("--warmup", type=at_least(0), default=5)
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--interval_ms", type=positive_float, default=monitor.DEFAULT_INTERVAL_MS,
                   help="the monitor's sampling interval on the 'on' side")
    p.add_argument("--out", "--output", dest="out", type=Path,
                   help="also write the JSON here (folders made as needed)")
    return p


def one_round(args: argparse.Namespace, r: int, out: Path) -> dict[str, Any]:
    order = [args.interval_ms, 0.0] if r % 2 == 0 else [0.0, args.interval_ms]
    runs = {("on" if ms > 0 else "off"): run_cell(args, ms, out) for ms in order}
    return {"order": ["on" if ms > 0 else "off" for ms in order],
            "throughput_on": runs["on"]["throughput"],
            "throughput_off": runs["off"]["throughput"],
            "ratio_on_off": runs["on"]["throughput"] / runs["off"]["throughput"],
            "ratio_on_off_p10": runs["on"]["throughput_p10"] / runs["off"]["throughput_p10"],
            "sampler_cpu_fraction": runs["on"]["sampler_cpu_fraction"],
            "samples": runs["on"]["sample_count"]}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell.json"
        one_round(args, 0, out)  # untimed warm-up pair (see the docstring)
        rounds = [one_round(args, r, out) for r in range(args.rounds)]
    on = statistics.median(r["throughput_on"] for r in rounds)
    off = statistics.median(r["throughput_off"] for r in rounds)
    ratio = statistics.median(r["ratio_on_off"] for r in rounds)
    report = {
        "benchmark": "monitor_overhead",
        "cell": {"model": args.model, "device": "cpu", "batch_size": args.batch_size,
                 "num_batches": args.num_batches, "num_warmup_batches": args.warmup},
        "interval_ms": args.interval_ms,
        "untimed_warmup_pair": "one on/off pair before the timed rounds, not recorded",
        "rounds": rounds, **provenance(),
        "load": {"loadavg_before": load_before, "loadavg_after": os.getloadavg()},
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
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
