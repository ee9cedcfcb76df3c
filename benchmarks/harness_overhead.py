"""Harness overhead: the PyTorch runner's throughput against a bare hand-written loop.

Same model, batch, device and precision; the two alternate round by round in one process
so that drift (thermal, other load) hits both alike, after one untimed pair (runner, then
bare) that leaves neither side to pay the cold process's first run. Each round reports throughput at the
median iteration time, as the runner does; the ratio is runner / bare (1.0 = no overhead).
Compiled cells (``--compile inductor``) compare the runner's ``--compile`` with a bare loop
around the same ``torch.compile``d model: both compile the model only (the optimizer step
stays eager), dynamo is reset before each run, and both read one inductor cache, so that
after the first run compiling costs each side alike (and it is outside the measured
iterations on both).

    python benchmarks/harness_overhead.py --out results/benchmarks/harness_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision

from dlbench import result as R
from dlbench.pytorch import runner

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import at_least, positive_int, provenance  # noqa: E402


def bare_loop(model_name: str, batch: int, forward_only: bool, warmup: int, measured: int,
              mode: str) -> float:
    """What a person would write by hand: no harness, just the loop and a clock."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, model_name)(num_classes=1000)
    if mode != "eager":
        torch._dynamo.reset()
        model = torch.compile(model, backend="inductor")
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


def our_runner(model_name: str, batch: int, forward_only: bool, warmup: int, measured: int,
               mode: str) -> float:
    if mode != "eager":
        torch._dynamo.reset()
    args = runner.parser().parse_args([
        f"--model={model_name}", f"--batch_size={batch}", f"--num_batches={measured}",
        f"--num_warmup_batches={warmup}", "--device=cpu", "--count_flops=false",
        f"--forward_only={'true' if forward_only else 'false'}", f"--compile={mode}",
        *RUNNER_OPTIONS])
    res = R.new_result(kind="model", cell=runner.cell_of(args))
    runner.run(args, res)
    return res["measurements"][0]["throughput"]


def case_of(model_name: str, mode: str, forward_only: bool, args: argparse.Namespace
            ) -> dict:
    # Untimed: the first run in a fresh process (or after dynamo's reset) pays one-off
    # costs (allocator, caches, lazy imports) that would land on whichever side goes first.
    for fn in (our_runner, bare_loop):
        fn(model_name, args.batch_size, forward_only, args.warmup, args.measured, mode)
    ours, bare = [], []
    for rnd in range(args.rounds):
        # Alternate which goes first so neither always runs on a warmer machine.
        order = (our_runner, bare_loop) if rnd % 2 == 0 else (bare_loop, our_runner)
        for fn in order:
            tput = fn(model_name, args.batch_size, forward_only, args.warmup, args.measured,
                      mode)
            (ours if fn is our_runner else bare).append(tput)
    ratio = statistics.median(ours) / statistics.median(bare)
    # Each round's two runs are neighbours in time: their ratio cancels slow drift, so the
    # target is read on the median of the rounds' ratios (their range is the spread).
    paired = [o / b for o, b in zip(ours, bare, strict=True)]
    case = {"model": model_name, "phase": "inference" if forward_only else "training",
            "compile": mode, "batch_size": args.batch_size, "device": "cpu",
            "runner_samples_per_s": ours, "bare_samples_per_s": bare,
            "median_ratio": ratio, "round_ratios": paired,
            "paired_median_ratio": statistics.median(paired),
            "target": 0.99, "meets_target": statistics.median(paired) >= 0.99}
    print(f"{model_name} {mode} {case['phase']}: runner {statistics.median(ours):.2f} "
          f"bare {statistics.median(bare):.2f} samples/s, ratio of medians {ratio:.4f}, "
          f"median round ratio {statistics.median(paired):.4f} "
          f"({min(paired):.3f}-{max(paired):.3f})", flush=True)
    return case


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="results/benchmarks/harness_overhead.json")
    p.add_argument("--models", nargs="+", default=["resnet18"])
    p.add_argument("--batch_size", type=positive_int, default=8)
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--warmup", type=at_least(0), default=2)
    p.add_argument("--measured", type=positive_int, default=8)
    p.add_argument("--compile", nargs="+", default=["eager", "inductor"],
                   choices=["eager", "inductor"], help="execution modes to compare")
    p.add_argument("--runner_option", action="append", default=[],
                   help="extra runner flag, e.g. --runner_option=--monitor_interval_ms=0")
    return p


def all_cases(args: argparse.Namespace) -> list[dict]:
    return [case_of(model_name, mode, forward_only, args) for model_name in args.models
            for mode in args.compile for forward_only in (False, True)]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    RUNNER_OPTIONS.extend(args.runner_option)
    # One inductor cache for both sides: the user's, or a fresh one for this run, removed
    # at its end (it holds compiled kernels, hundreds of MB over many runs).
    with tempfile.TemporaryDirectory(prefix="inductor-") as fresh:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", fresh)
        cases = all_cases(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "harness_overhead", **provenance(), "threads": torch.get_num_threads(),
        "rounds": args.rounds, "warmup_iterations": args.warmup,
        "measured_iterations": args.measured, "runner_options": args.runner_option,
        "untimed_warmup_pair": "one runner run and one bare run per case before the timed "
                               "rounds, not recorded",
        "cases": cases}, indent=1))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
