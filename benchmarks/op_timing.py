"""How far dlbench.ops' per-call times are from torch.utils.benchmark.Timer's.

For each operator and shape, both measure the same callable on the same tensors, in
alternating rounds within one process (so machine load drifts affect both): dlbench.ops
through its real path (registry, grammar, discrete-mode Executor; median of per-call
times) and Timer.blocked_autorange (median over blocks). The headline ratio is the median
of the per-round ratios ours/Timer (paired rounds cancel slow drifts of a shared
machine's load); it should be within 2 %. On a shared machine, ``--nice`` raises the
process's scheduling priority (where permitted) so that other processes' time slices do
not land inside Timer's multi-call blocks.

    python benchmarks/op_timing.py [--out results/benchmarks/op_timing.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.utils.benchmark as tb

from dlbench.ops import grammar, registry
from dlbench.ops.timing import ExecOptions, Executor

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import positive_float, positive_int, provenance  # noqa: E402


def tensor(*shape: int, dtype: str = "float", **extra: Any) -> dict[str, Any]:
    return {"type": "tensor", "dtype": dtype, "shape": list(shape), **extra}


def integer(v: int) -> dict[str, Any]:
    return {"type": "int", "value": v}


# name, operator, build spec, input spec
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("mm 512x512x512", "torch.mm", {}, {"args": [tensor(512, 512), tensor(512, 512)]}),
    ("add 1024x1024", "torch.add", {}, {"args": [tensor(1024, 1024), tensor(1024, 1024)]}),
    ("conv2d 64->64 3x3 on 8x64x28x28", "torch.nn.Conv2d",
     {"args": [integer(64), integer(64)], "kwargs": {"kernel_size": integer(3),
                                                     "padding": integer(1)}},
     {"args": [tensor(8, 64, 28, 28)]}),
    ("embedding 50000x256, 512x32 ids", "torch.nn.Embedding",
     {"args": [integer(50000), integer(256)]},
     {"args": [tensor(512, 32, dtype="long", requires_grad=False, value_range=[0, 49999])]}),
]


def prepare(op_name: str, build: dict[str, Any], inputs: dict[str, Any]):
    op = registry.resolve(op_name)()
    b_args, b_kwargs = grammar.materialize_args(build, "cpu", "build")
    op.build(b_args, b_kwargs, "cpu")
    args, kwargs = grammar.materialize_args(inputs, "cpu", "input")
    return op, args, kwargs


def ours_ms(executor: Executor, op, args, kwargs) -> float:
    metrics = executor.run(op, args, kwargs, "bench")
    return statistics.median(metrics["forward"]["measure.time"])


def timer_ms(op, args, kwargs, min_run_time: float) -> float:
    fn, fargs, fkwargs = op.call(args, kwargs)
    timer = tb.Timer(stmt="fn(*args, **kwargs)",
                     globals={"fn": fn, "args": fargs, "kwargs": fkwargs},
                     num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/benchmarks/op_timing.json")
    p.add_argument("--rounds", type=positive_int, default=21, help="alternating rounds per case")
    p.add_argument("--iterations", type=positive_int, default=30,
                   help="our measured calls per round")
    p.add_argument("--nice", type=int, default=-20,
                   help="niceness increment for this process (negative needs root)")
    p.add_argument("--min-run-time", type=positive_float, default=0.1,
                   help="Timer.blocked_autorange seconds per round")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads for both (1 keeps a shared machine's load out)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        niceness = os.nice(args.nice)
    except PermissionError:
        niceness = os.nice(0)
        print(f"could not change niceness by {args.nice}; running at {niceness}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    executor = Executor(ExecOptions(device=torch.device("cpu"), warmup=5,
                                    iterations=args.iterations, exec_mode="discrete"))
    cases = []
    for name, op_name, build, inputs in CASES:
        op, op_args, op_kwargs = prepare(op_name, build, inputs)
        timer_ms(op, op_args, op_kwargs, 0.05)  # warm caches and the allocator
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(ours_ms(executor, op, op_args, op_kwargs))
            theirs.append(timer_ms(op, op_args, op_kwargs, args.min_run_time))
        round_ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
        ratio = statistics.median(round_ratios)
        cases.append({
            "name": name, "operator": op_name,
            "ours_median_ms": statistics.median(ours), "timer_median_ms": statistics.median(theirs),
            "ratio": ratio, "deviation_pct": (ratio - 1) * 100,
            "ratio_of_medians": statistics.median(ours) / statistics.median(theirs),
            "round_ratios": round_ratios,
            "ours_rounds_ms": ours, "timer_rounds_ms": theirs,
            "within_2pct": abs(ratio - 1) <= 0.02,
        })
        print(f"{name:36s} ours {cases[-1]['ours_median_ms']:9.4f} ms  "
              f"Timer {cases[-1]['timer_median_ms']:9.4f} ms  ratio {ratio:.4f}")
    report = {
        "benchmark": "op_timing", **provenance(),
        "threads": args.threads, "niceness": niceness, "rounds": args.rounds,
        "iterations_per_round": args.iterations, "timer_min_run_time_s": args.min_run_time,
        "baseline": "torch.utils.benchmark.Timer.blocked_autorange median",
        "ratio": "median over rounds of ours/Timer (paired, interleaved rounds)",
        "cases": cases,
        "max_abs_deviation_pct": max(abs(c["deviation_pct"]) for c in cases),
        "all_within_2pct": all(c["within_2pct"] for c in cases),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
