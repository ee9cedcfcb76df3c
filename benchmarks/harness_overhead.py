"""Harness overhead: the PyTorch runner's throughput against a bare hand-written loop.

Same model, batch, device and precision; the two alternate round by round in one process
so that drift (thermal, other load) hits both alike. Each round reports throughput at the
median iteration time, as the runner does; the ratio is runner / bare (1.0 = no overhead).

    python benchmarks/harness_overhead.py --out results/benchmarks/harness_overhead.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torchvision

from dlbench import result as R
from dlbench.pytorch import runner


def bare_loop(model_name: str, batch: int, forward_only: bool, warmup: int, measured: int) -> float:
    """What a person would write by hand: no harness, just the loop and a clock."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, model_name)(num_classes=1000)
    x = torch.rand(batch, 3, 224, 224)
    y = torch.randint(0, 1000, (batch,))
    times = []
    if forward_only:
        model.eval()
        with torch.inference_mode():
            for i in range(warmup + measured):
                t0 = time.perf_counter()
                model(x)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
    else:
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        for i in range(warmup + measured):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


RUNNER_OPTIONS: list[str] = []


def our_runner(model_name: str, batch: int, forward_only: bool, warmup: int, measured: int) -> float:
    args = runner.parser().parse_args([
        f"--model={model_name}", f"--batch_size={batch}", f"--num_batches={measured}",
        f"--num_warmup_batches={warmup}", "--device=cpu", "--count_flops=false",
        f"--forward_only={'true' if forward_only else 'false'}", *RUNNER_OPTIONS])
    res = R.new_result(kind="model", cell=runner.cell_of(args))
    runner.run(args, res)
    return res["measurements"][0]["throughput"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="results/benchmarks/harness_overhead.json")
    p.add_argument("--models", nargs="+", default=["resnet18"])
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--measured", type=int, default=8)
    p.add_argument("--runner_option", action="append", default=[],
                   help="extra runner flag, e.g. --runner_option=--monitor_interval_ms=0")
    args = p.parse_args()
    RUNNER_OPTIONS.extend(args.runner_option)
    cases = []
    for model_name in args.models:
        for forward_only in (False, True):
            ours, bare = [], []
            for rnd in range(args.rounds):
                # Alternate which goes first so neither always runs on a warmer machine.
                order = (our_runner, bare_loop) if rnd % 2 == 0 else (bare_loop, our_runner)
                for fn in order:
                    tput = fn(model_name, args.batch_size, forward_only, args.warmup,
                              args.measured)
                    (ours if fn is our_runner else bare).append(tput)
            ratio = statistics.median(ours) / statistics.median(bare)
            case = {"model": model_name, "phase": "inference" if forward_only else "training",
                    "batch_size": args.batch_size, "device": "cpu",
                    "runner_samples_per_s": ours, "bare_samples_per_s": bare,
                    "median_ratio": ratio, "target": 0.99, "meets_target": ratio >= 0.99}
            cases.append(case)
            print(f"{model_name} {case['phase']}: runner {statistics.median(ours):.2f} "
                  f"bare {statistics.median(bare):.2f} samples/s, ratio {ratio:.4f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "harness_overhead", "torch": torch.__version__,
                               "host": platform.node(), "threads": torch.get_num_threads(),
                               "cases": cases}, indent=1))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
