"""``python -m dlbench.llm``: one language-model inference cell (see dlbench.llm).

Timed with the one harness (dlbench.harness.timed_loop): ``num_warmup_batches`` whole
generations run first, untimed (they also absorb compiling); then ``num_batches`` measured
generations, each a timed prefill (TTFT) and ``output_length`` - 1 timed decode steps
(each an inter-token latency, ITL; their mean the generation's TPOT). Before each
generation the static cache is reset, untimed: it counts the positions written, and the
next generation starts again from position 0.

Two measurements: ``prefill`` (tokens/s over the batch's prompt tokens; the logits of the
last position only, as servers make them; its FLOPs by the PaLM formula less the output
projection of the other positions) and ``decode`` (output tokens/s: one token per sequence
per step; its median step time is the inter-token latency ITL's p50; in ``extra`` TPOT's
p50/p90/p99 over the generations, each one's mean step time, and ITL's over the steps; its
bytes the weights and KV cache a step reads at least). The result's ``extra`` states what
was timed, the KV cache's size and the peak memory (a GPU's: the measured generations'
allocations; a CPU's: the process's peak RSS over its whole life), ``ttft_s`` and
``tpot_s`` (the prefill's and the decode steps' medians: ``tpot_s`` is ITL p50, null
without decode steps), and a warm-up until steady what it ran (``warm_up_until_steady``).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import logging
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

from dlbench import axes, cellrun, cli, harness, monitor, stages, stats
from dlbench import result as R
from dlbench.models import llm as L

RUNNER = "llm"
KIND = "llm_inference"
TIMED = ("prefill: one forward pass over the batch's prompts into the static KV cache, "
         "to the first output token (TTFT); decode: each further output token one forward "
         "pass of the batch from the cache (its time an ITL; a generation's mean of them "
         "its TPOT); greedy choice of the next token inside "
         "each timed step; on a GPU each timed step ends synchronised")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dlbench.llm",
        description="Prefill and token-by-token decode of a decoder-only language model.")
    axes.add_flags(p, RUNNER, "pytorch", KIND)  # its kind's axes only: no model-cell flags
    monitor.add_arguments(p)  # the launcher's and the profile jobs' --monitor_interval_ms
    p.add_argument("--output", type=cli.result_path, help="result JSON to write")
    p.add_argument("--study")
    p.add_argument("--cell_id")
    return p


def static_cache(config: Any, batch: int, length: int, device: Any, dtype: Any) -> Any:
    """transformers' StaticCache for ``batch`` sequences of ``length`` positions (its
    constructor's arguments changed in transformers 5)."""
    from transformers import StaticCache

    if "max_batch_size" in inspect.signature(StaticCache.__init__).parameters:
        return StaticCache(config=config, max_batch_size=batch, max_cache_len=length,
                           device=device, dtype=dtype)
    return StaticCache(config=config, max_cache_len=length)


@contextlib.contextmanager
def default_dtype(torch: Any, dtype: Any) -> Iterator[None]:
    """Tensors made without a dtype are ``dtype`` (as transformers' own from_config with a
    dtype does while it builds), on every transformers release."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def last_logits_argument(model: Any) -> dict[str, int]:
    """The forward argument that makes the logits of the last position only, as servers
    and transformers' generate() do in the prefill (all of them: batch x prompt x vocab, GiBs
    at batch 64 and 2048 tokens); none where the release has no such argument."""
    names = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):  # transformers >= 4.50, 4.45
        if name in names:
            return {name: 1}
    return {}


def cache_argument(model: Any) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def peak_memory(device: Any) -> tuple[int, str]:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    # ru_maxrss: the process's peak over its whole life (interpreter, torch, the build).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss, "peak RSS of the process over its life, not the model's own"


def run(args: argparse.Namespace, res: dict[str, Any]) -> None:
    with stages.stage("startup"):  # the framework's import, inside the record
        import torch

        from dlbench.pytorch import execution, precision, torch_environment
        from dlbench.pytorch.runner import monitored_gpus
        from dlbench.pytorch.zoo import llm as zoo_llm

    if args.device == "gpu" and not torch.cuda.is_available():
        raise cellrun.CellError("device gpu: torch sees no CUDA device")
    device = torch.device("cuda" if args.device == "gpu" else "cpu")
    mode = precision.setup(args.dtype, device.type)
    res["environment"] = torch_environment.collect(device)
    opts = {**L.default_opts(args.model), **args.model_opts, "activation_checkpointing": False}
    # Served in the precision itself (weights cast to float16/bfloat16), as servers run.
    dtype = precision.pure(mode).param_dtype
    batch, prompt, output = args.batch_size, args.prompt_length, args.output_length
    with stages.stage("build"):
        # Made where it runs (no host copy of the weights first) and in the precision it is
        # served in: built in float32 and cast, a model that fits in bfloat16 may not.
        with torch.device(device), default_dtype(torch, dtype):
            model = zoo_llm.make(args.model, opts).to(device=device, dtype=dtype).eval()
        cache = static_cache(model.config, batch, prompt + output, device, dtype)
        gen = torch.Generator().manual_seed(0)
        prompts = torch.randint(0, opts["vocab_size"], (batch, prompt),
                                generator=gen).to(device)
    forward = execution.compiled(model, args.compile, device=device)
    sync = precision.synchronizer(device)
    # The cache's argument: ``cache`` in transformers 5, ``past_key_values`` before. The
    # cache counts the positions written: the next tokens go after them.
    with_cache = {cache_argument(model): cache, "use_cache": True}
    last_only = last_logits_argument(model)
    token: list[Any] = [None]

    def prefill(ids: Any) -> None:
        token[0] = forward(input_ids=ids, **with_cache, **last_only).logits[:, -1:].argmax(-1)

    def decode(_: Any) -> None:
        token[0] = forward(input_ids=token[0], **with_cache).logits[:, -1:].argmax(-1)

    ttft: list[float] = []
    tpot: list[float] = []
    per_generation: list[float] = []
    generation_s: list[float] = []  # each measured generation's TTFT plus its steps
    measured_from = execution.DynamoCounts.now()
    # The resource monitor samples the measured generations (from the first one's start).
    mon = monitor.ResourceMonitor(args.monitor_interval_ms, gpus=monitored_gpus(device, 1))
    with torch.inference_mode(), contextlib.ExitStack() as sampled:
        # transformers' static cache allocates its layers in its first update: one eager
        # token first, so that a compiled forward never sees it unallocated (a graph
        # compiled so is guarded on it and compiled again in the next generation's prefill,
        # a measured one after a single warm generation).
        model(input_ids=prompts[:, :1], **with_cache)

        def generation(warm: int) -> float:
            """One generation; a warm one's mean step time (decode's, else the prefill's)."""
            cache.reset()  # untimed: positions from 0 again
            sync()
            # A warm generation is its loops' warmup: untimed, and inside the NVTX range
            # "warmup", not "measure" (what the ncu and nsys jobs select).
            began = time.perf_counter()
            first = harness.timed_loop(lambda: prompts, prefill, sync, warm, 1 - warm)
            decoding = time.perf_counter()
            rest = harness.timed_loop(lambda: None, decode, sync, warm * (output - 1),
                                      (1 - warm) * (output - 1))
            ttft.extend(first.times_s)
            tpot.extend(rest.times_s)
            if rest.times_s:  # a measured generation's own TPOT (vLLM's per request)
                per_generation.append(sum(rest.times_s) / len(rest.times_s))
            if first.times_s:
                generation_s.append(first.times_s[0] + sum(rest.times_s))
            if output > 1:
                return (time.perf_counter() - decoding) / (output - 1)
            return decoding - began

        began = time.perf_counter()
        warm_times = [generation(1) for _ in range(args.num_warmup_batches)]
        if args.warmup_until_steady:
            res["extra"]["warmup"] = warm_up_until_steady(generation, warm_times, began)
        measured_from = execution.DynamoCounts.now()
        if device.type == "cuda":
            # The measured generations' peak (weights, cache, activations): not the float32
            # weights the build made before casting them, nor the compiler's autotuning.
            sync()
            torch.cuda.reset_peak_memory_stats(device)
        sampled.enter_context(mon)
        for _ in range(args.num_batches):
            generation(0)
    element = torch.empty((), dtype=dtype).element_size()
    full = {**opts, "sequence_length": prompt}
    # Prefill has no bytes: it multiplies each weight by a whole prompt, bound by FLOPs.
    res["measurements"].append(R.measurement(
        name=args.model, pass_="prefill", times_s=ttft,
        items_per_iteration=batch * prompt, throughput_unit="tokens/s",
        parameters=L.parameter_count(opts),
        flops_per_iteration=batch * L.flops_per_prefill(full, bool(last_only))))
    if tpot:
        # The mean over the steps, whose context grows from prompt to prompt + output - 2.
        mean_context = prompt + (output - 2) / 2
        step_flops = batch * L.flops_per_decode_step(opts, mean_context)
        steps, generations = sorted(tpot), sorted(per_generation)
        quantiles = (("p50", 50), ("p90", 90), ("p99", 99))
        res["measurements"].append(R.measurement(
            name=args.model, pass_="decode", times_s=tpot, items_per_iteration=batch,
            throughput_unit="tokens/s", parameters=L.parameter_count(opts),
            flops_per_iteration=step_flops,
            bytes_per_iteration=L.bytes_per_decode_step(opts, batch, mean_context, element),
            # TPOT's percentiles over the generations (each one's mean step time, as vLLM
            # reports TPOT over requests); the steps' own, vLLM's inter-token latency (ITL),
            # beside them: one slow step of 127 sets an ITL p99, not a TPOT p99.
            extra={**{f"tpot_{q}_s": stats.percentile(generations, p) for q, p in quantiles},
                   **{f"itl_{q}_s": stats.percentile(steps, p) for q, p in quantiles}}))
    if args.compile != "eager":
        # What dynamo compiled while the generations were measured (0: warm-up covered it),
        # flagged as the model runner flags it (the Parquet's recompiled_in_measurement).
        again = execution.DynamoCounts.now().frames - measured_from.frames
        res["extra"]["compile"] = {"mode": args.compile, "recompilations_measured": again,
                                   **({"recompiled_in_measurement": True} if again else {})}
    # Per joule: the output tokens the measured generations produced (tokens per joule,
    # as servers are compared), not their prompts' tokens added to their decode steps'.
    monitor.attach(res, args.output, mon, items=float(batch * output * args.num_batches))
    ttft_median = res["measurements"][0]["time_s"]["median"]
    # Without decode steps (output_length 1) there is no decode statistic: null, not 0.
    decode_median = res["measurements"][1]["time_s"]["median"] if tpot else None
    peak, peak_what = peak_memory(device)
    res["extra"].update({
        "timed": TIMED, "attention": "sdpa", "kv_cache": "static",
        "kv_cache_bytes": L.kv_cache_bytes(opts, batch, prompt + output, element),
        "peak_memory_bytes": peak, "peak_memory_what": peak_what,
        # tpot_s keeps the meaning it has had since the first release: decode's median
        # step (the decode measurement's median, ITL p50), so that results recorded before
        # read alike; TPOT's percentiles over the generations are the decode measurement's
        # tpot_p50_s, tpot_p90_s and tpot_p99_s.
        "ttft_s": ttft_median, "tpot_s": decode_median,
        # The batch's output tokens over a typical generation's own time (its TTFT and
        # its steps, the median over the generations): a rate some generation reached, not
        # one built of medians of different generations' parts.
        "generation_median_s": statistics.median(generation_s),
        "output_tokens_per_s": batch * output / statistics.median(generation_s),
        "served_dtype": str(dtype).removeprefix("torch."),
    })


# Warm-up until steady (the warmup_until_steady axis): past num_warmup_batches, warm
# generations until the last STEADY_GENERATIONS have mean step times within drift.NOTABLE
# of their median (a generation moves on from the one before, not within itself), at most
# harness.STEADY_MAX_S of them in all or STEADY_MAX_GENERATIONS more.
STEADY_GENERATIONS = 3
STEADY_MAX_GENERATIONS = 50


def warm_up_until_steady(generation: Any, times: list[float], began: float
                         ) -> dict[str, Any]:
    """Warm generations (``generation(1)`` runs one and gives its mean step time) after
    those whose times are ``times`` (the warm-up began at ``began``, perf_counter), until
    steady; what ran, as the result records it."""
    from dlbench import drift

    before = len(times)
    while True:
        last = sorted(times[-STEADY_GENERATIONS:])
        settled = len(last) == STEADY_GENERATIONS and all(
            abs(t / last[1] - 1) < drift.NOTABLE for t in last)
        spent = (len(times) - before >= STEADY_MAX_GENERATIONS
                 or time.perf_counter() - began >= harness.STEADY_MAX_S)
        if settled or spent:
            return {"generations": len(times), "settled": settled,
                    "seconds": time.perf_counter() - began, "step_times_s": times}
        times.append(generation(1))


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    p = parser()
    args = p.parse_args(argv)
    args.dtype = axes.get("precision").normalise(args.dtype)
    cell = axes.cell_from_args(KIND, RUNNER, "pytorch", args)
    cli.check_cell(p, KIND, RUNNER, cell)  # the model, its options, the context
    res = R.new_result(kind=KIND, cell=cell, study=args.study, cell_id=args.cell_id)
    with cellrun.recorded(res, args.output):
        run(args, res)
    return cellrun.exit_code(res)
