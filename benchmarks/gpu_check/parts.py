"""Measurements the GPU acceptance check makes in a process of its own (``--part``), each
writing its figures into the output folder for the verdicts to read."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_check.plan import model_args
from gpu_check.settings import (
    LLM_TRAIN,
    MATMUL_N,
    NUM_BATCHES,
    WARMUP,
)


def alternate(ours: Callable[[], Any], bare: Callable[[], Any], rounds: int
              ) -> list[tuple[Any, Any]]:
    """(ours, bare) per round, which goes first alternating, so that neither always runs
    on the warmer (or the more throttled) GPU."""
    pairs = []
    for rnd in range(rounds):
        if rnd % 2 == 0:
            a = ours()
            pairs.append((a, bare()))
        else:
            b = bare()
            pairs.append((ours(), b))
    return pairs


def spread(ours: list[float], bare: list[float], unit: str) -> dict[str, Any]:
    """Every round's figures, each round's ratio and their range, beside the medians the
    verdicts read: a median of two or three rounds says nothing of how far they were apart.
    """
    ratios = [o / b for o, b in zip(ours, bare, strict=True)]
    return {f"runner_rounds_{unit}": ours, f"bare_rounds_{unit}": bare,
            "round_ratios": ratios, "paired_median_ratio": statistics.median(ratios),
            "ratio_spread": [min(ratios), max(ratios)],
            "order": "runner first in even rounds, bare first in odd ones"}


def part_honesty(out: Path) -> None:
    """The runner in this process with CUDA events around each of its steps, and a bare
    loop on the same model, alternating (ResNet-50 bf16 training, batch 128)."""
    import torch
    import torchvision

    from dlbench import result as R
    from dlbench.pytorch import runner

    pairs: list[tuple[Any, Any]] = []
    original = runner.timed_loop

    def with_events(fetch: Callable, step: Callable, sync: Callable, warmup: int,
                    measured: int, **kw: Any) -> Any:
        def timed_step(*batch: Any) -> Any:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            value = step(*batch)
            end.record()
            pairs.append((begin, end))
            return value
        return original(fetch, timed_step, sync, warmup, measured, **kw)

    def ours() -> tuple[float, list[float], list[float]]:
        pairs.clear()
        args = runner.parser().parse_args(model_args("resnet50", "training", "bfloat16", 128)
                                          + ["--count_flops=false"])
        res = R.new_result(kind="model", cell=runner.cell_of(args))
        runner.timed_loop = with_events
        try:
            runner.run(args, res)
        finally:
            runner.timed_loop = original
        torch.cuda.synchronize()
        events = [b.elapsed_time(e) for b, e in pairs[-NUM_BATCHES:]]
        return res["measurements"][0]["throughput"], res["measurements"][0]["times_s"], events

    def bare() -> float:
        torch.manual_seed(0)
        model = torchvision.models.resnet50().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(128, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (128,), device="cuda")
        loss_fn = torch.nn.CrossEntropyLoss()
        times = []
        for i in range(WARMUP + NUM_BATCHES):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            if i >= WARMUP:
                times.append(time.perf_counter() - start)
        return 128 / statistics.median(times)

    rounds = alternate(ours, bare, 3)
    runner_rounds = [r[0][0] for r in rounds]
    bare_rounds = [r[1] for r in rounds]
    runner_tput = statistics.median(runner_rounds)
    bare_tput = statistics.median(bare_rounds)
    times_ms = [t * 1e3 for t in rounds[-1][0][1]]
    events_ms = rounds[-1][0][2]
    runner_med, events_med = statistics.median(times_ms), statistics.median(events_ms)
    (out / "honesty.json").write_text(json.dumps({
        "runner_samples_per_s": runner_tput, "bare_samples_per_s": bare_tput,
        "bare_ratio": runner_tput / bare_tput,
        **spread(runner_rounds, bare_rounds, "samples_per_s"),
        "runner_median_ms": runner_med, "events_median_ms": events_med,
        "events_disagreement": abs(runner_med - events_med) / events_med,
        "runner_times_ms": times_ms, "events_ms": events_ms}, indent=1))


def part_llm_bare(out: Path) -> None:
    """GPT-2 XL bf16 training: the runner in this process against a bare loop of the same
    step (model, Adam, autocast, cross-entropy over the vocabulary), alternating."""
    import torch

    from dlbench import result as R
    from dlbench.pytorch import runner
    from dlbench.pytorch.zoo import llm as zoo_llm

    batch, tokens = LLM_TRAIN["gpt2_xl"]
    opts = {"sequence_length": tokens, "activation_checkpointing": True}
    flags = ["--model=gpt2_xl", f"--batch_size={batch}", "--device=gpu", "--dtype=bfloat16",
             "--num_batches=10", "--num_warmup_batches=3", "--count_flops=false",
             f"--model_opts={json.dumps(opts)}"]

    def ours() -> float:
        args = runner.parser().parse_args(flags)
        res = R.new_result(kind="model", cell=runner.cell_of(args))
        runner.run(args, res)
        return res["measurements"][0]["throughput"]

    def bare() -> float:
        from dlbench.models import llm

        torch.manual_seed(0)
        with torch.device("cuda"):
            model = zoo_llm.CausalLM(zoo_llm.make("gpt2_xl", {**llm.default_opts("gpt2_xl"),
                                                              **opts}))
        opt = torch.optim.Adam(model.parameters())
        ids = torch.randint(0, 50257, (batch, tokens), device="cuda")
        labels = torch.randint(0, 50257, (batch, tokens), device="cuda")
        loss_fn = torch.nn.CrossEntropyLoss()
        times = []
        for i in range(13):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(ids)
                loss = loss_fn(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(time.perf_counter() - start)
        del model, opt
        torch.cuda.empty_cache()
        return batch * tokens / statistics.median(times)

    rounds = alternate(ours, bare, 2)
    runner_rounds = [r[0] for r in rounds]
    bare_rounds = [r[1] for r in rounds]
    runner_tput = statistics.median(runner_rounds)
    bare_tput = statistics.median(bare_rounds)
    (out / "llm_bare.json").write_text(json.dumps({
        "runner_tokens_per_s": runner_tput, "bare_tokens_per_s": bare_tput,
        "ratio": runner_tput / bare_tput,
        **spread(runner_rounds, bare_rounds, "tokens_per_s")}, indent=1))


def part_timer(out: Path) -> None:
    """torch.utils.benchmark.Timer on the matmul the ops runner times, with the same data
    (uniform [0, 1), PARAM's torch.rand): a GPU's clock under its power limit depends on
    the values multiplied, so normal data is timed too, as a separate figure."""
    import torch
    from torch.utils import benchmark

    figures = {}
    for name, make in (("uniform", torch.rand), ("normal", torch.randn)):
        a = make(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
        b = make(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
        measurement = benchmark.Timer("torch.matmul(a, b)", globals={
            "a": a, "b": b, "torch": torch}).blocked_autorange(min_run_time=2)
        median = measurement.median * 1e3
        figures[name] = {"median_ms": median,
                         "tflops": 2 * MATMUL_N ** 3 / (median / 1e3) / 1e12,
                         "iqr_ms": measurement.iqr * 1e3}
        del a, b
    (out / "timer.json").write_text(json.dumps({**figures["uniform"], "data": "uniform",
                                                "normal_data": figures["normal"]}))
