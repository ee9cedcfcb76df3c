"""Language-model inference cells (kind llm_inference, ``python -m dlbench.llm``): the
runner's prefill and decode measurements, the static KV cache, validation, and training
and inference cells through the real workflow into the Parquet and the report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from dlbench import result as R
from dlbench import study
from dlbench.models import llm as L

pytest.importorskip("transformers", reason="needs transformers")

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from dlbench.llm import runner  # noqa: E402
from dlbench.pytorch.zoo import llm as torch_llm  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DLBS_LINE = re.compile(r"[ \t]*__(.+?(?=__[ \t]*[=]))__[ \t]*=(.+)")


def run_cell(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "cell.json"
    proc = subprocess.run([sys.executable, "-m", "dlbench.llm", "--device=cpu",
                           "--num_warmup_batches=1", *flags, f"--output={out}"],
                          capture_output=True, text=True, timeout=300)
    return proc, (R.read(out) if out.exists() else {})


def test_a_cell_times_each_prefill_and_each_output_token_and_says_what_it_timed(tmp_path):
    proc, res = run_cell(tmp_path, "--model=gpt2_tiny", "--batch_size=2", "--prompt_length=24",
                         "--output_length=6", "--num_batches=3", "--monitor_interval_ms=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    R.validate(res)
    assert res["status"] == "ok" and res["kind"] == "llm_inference"
    assert (res["cell"]["prompt_length"], res["cell"]["output_length"]) == (24, 6)
    prefill, decode = res["measurements"]
    assert (prefill["pass"], decode["pass"]) == ("prefill", "decode")
    assert len(prefill["times_s"]) == 3 and len(decode["times_s"]) == 3 * 5
    assert prefill["items_per_iteration"] == 2 * 24 and decode["items_per_iteration"] == 2
    assert min(prefill["times_s"]) > 0 and min(decode["times_s"]) > 0
    tpot = decode["extra"]
    assert tpot["tpot_p50_s"] <= tpot["tpot_p90_s"] <= tpot["tpot_p99_s"]
    # TPOT over the 3 generations' mean step times; ITL over the 15 steps themselves
    steps = decode["times_s"]
    per_generation = sorted(sum(steps[k:k + 5]) / 5 for k in range(0, 15, 5))
    assert tpot["tpot_p50_s"] == pytest.approx(per_generation[1])
    assert tpot["itl_p50_s"] == pytest.approx(sorted(steps)[7])
    assert tpot["itl_p99_s"] <= max(steps) and tpot["tpot_p99_s"] <= per_generation[2]
    # the last position's logits only (transformers' logits_to_keep): the output
    # projection of the other 23 positions is not counted
    opts = {**L.default_opts("gpt2_tiny"), "sequence_length": 24}
    vocab, width = opts["vocab_size"], opts["n_embd"]
    assert prefill["flops_per_iteration"] == pytest.approx(
        2 * (L.flops_per_sequence(opts, False) - 2 * vocab * width * 23))
    extra = res["extra"]
    assert "TTFT" in extra["timed"] and "TPOT" in extra["timed"] and "synchronised" in extra["timed"]
    assert extra["kv_cache_bytes"] == L.kv_cache_bytes(L.default_opts("gpt2_tiny"), 2, 30, 4)
    # Decode's memory traffic at the mean context (24 + 4 / 2 positions), and its GB/s.
    step_bytes = L.bytes_per_decode_step(L.default_opts("gpt2_tiny"), 2, 26, 4)
    assert decode["bytes_per_iteration"] == step_bytes and prefill["bytes_per_iteration"] is None
    assert decode["gbps"] == pytest.approx(step_bytes / decode["time_s"]["median"] / 1e9)
    assert extra["output_tokens_per_s"] > 0 and extra["peak_memory_bytes"] > 0
    # The resource monitor over the measured generations, per joule of their output
    # tokens: 3 generations x batch 2 x 6 tokens.
    assert extra["monitor"]["enabled"] and extra["monitor"]["items"] == 3 * 2 * 6
    # Every __key__=value line is JSON, as DLBS's log parser reads them.
    for line in proc.stdout.splitlines():
        match = DLBS_LINE.match(line)
        if match:
            json.loads(match.group(2))


def test_warm_generations_go_on_until_their_step_times_settle(monkeypatch):
    """warmup_until_steady: warm generations past the cell's own until the last three
    mean step times lie within 5% of their median; at most STEADY_MAX_GENERATIONS more,
    settled false. Each warm generation's time recorded."""
    times = iter([2.0, 1.5, 1.2, 1.05, 1.0, 1.0, 1.0, 1.0])
    ran = []

    def generation(warm):
        assert warm == 1  # only warm generations
        ran.append(next(times))
        return ran[-1]

    import time

    found = runner.warm_up_until_steady(generation, [3.0], time.perf_counter())
    # settled once 1.0, 1.0, 1.0 (1.05 is 5% off 1.0: not yet)
    assert ran == [2.0, 1.5, 1.2, 1.05, 1.0, 1.0, 1.0] and found["settled"]
    assert found["generations"] == 8 and found["step_times_s"] == [3.0, *ran]
    monkeypatch.setattr(runner, "STEADY_MAX_GENERATIONS", 4)
    rising = iter(range(2, 100))
    found = runner.warm_up_until_steady(lambda warm: float(next(rising)), [1.0, 1.5],
                                        time.perf_counter())
    assert found["generations"] == 6 and found["settled"] is False


def test_a_cell_warming_up_until_steady_measures_as_many_generations(tmp_path):
    proc, res = run_cell(tmp_path, "--model=gpt2_tiny", "--batch_size=1", "--prompt_length=8",
                         "--output_length=4", "--num_batches=2", "--warmup_until_steady=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    warmup = res["extra"]["warmup"]
    assert warmup["generations"] >= runner.STEADY_GENERATIONS and warmup["seconds"] > 0
    assert len(warmup["step_times_s"]) == warmup["generations"]
    prefill, decode = res["measurements"]
    assert len(prefill["times_s"]) == 2 and len(decode["times_s"]) == 2 * 3
    assert res["cell"]["warmup_until_steady"] is True


def test_warm_generations_run_outside_the_measure_range_profilers_select(tmp_path,
                                                                       monkeypatch):
    """The ncu and nsys jobs profile the NVTX range "measure": a warm generation (and the
    compiling it absorbs) runs inside "warmup" instead. The ranges are recorded in place of
    NVTX (no GPU here)."""
    from dlbench import nvtx_ranges

    pushed = []
    monkeypatch.setattr(nvtx_ranges, "_impl", (pushed.append, lambda: None))
    code = runner.main(["--device=cpu", "--model=gpt2_tiny", "--batch_size=1",
                        "--prompt_length=8", "--output_length=3", "--num_warmup_batches=1",
                        "--num_batches=2", f"--output={tmp_path / 'cell.json'}"])
    assert code == 0
    # the warm generation: its prefill, then its two decode steps, as warmup
    assert [name for name in pushed if name in ("warmup", "measure")] == [
        "warmup", "warmup", "measure", "measure", "measure", "measure"]
    # each measured generation: one prefill and two decode steps
    assert sum(name.startswith("batch ") for name in pushed) == 2 * 3


def test_a_compiled_cell_compiles_nothing_while_it_measures(tmp_path):
    """One warm generation covers the compiling: the static cache allocates its layers in
    its first update, and a prefill compiled before that was compiled again in the second
    generation's prefill (a measured one, 8 s of a 1 ms TTFT on this CPU). Inductor on
    the CPU; the GPU's CUDA graphs are not exercised here."""
    proc, res = run_cell(tmp_path, "--model=llama_tiny", "--batch_size=1",
                         "--prompt_length=16", "--output_length=4", "--num_batches=2",
                         "--dtype=float32", "--compile=inductor")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert res["extra"]["compile"] == {"mode": "inductor", "recompilations_measured": 0}


def test_the_kv_cache_size_is_what_the_static_cache_allocates():
    opts = L.default_opts("llama_tiny")
    model = torch_llm.make("llama_tiny", opts).eval()
    cache = runner.static_cache(model.config, 3, 40, torch.device("cpu"), torch.float32)
    with torch.inference_mode():
        model(input_ids=torch.randint(0, 1024, (3, 8)),
              **{runner.cache_argument(model): cache, "use_cache": True})
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    assert sum(t.numel() * t.element_size() for t in tensors) == L.kv_cache_bytes(opts, 3, 40, 4)


@pytest.mark.parametrize("name, table", [("llama_tiny", "embed_tokens"), ("gpt2_tiny", "wpe")])
def test_a_decode_step_reads_every_weight_but_the_gathered_tables_and_the_cache(name, table):
    """The real model's parameters, less the table(s) a step only gathers rows of (Llama's
    token embedding, untied from its head; GPT-2's positions, its token table being its
    head too), plus those rows, plus the static cache over the context and the new
    position: what the formula counts."""
    opts = L.default_opts(name)
    model = torch_llm.make(name, opts)
    params = dict(model.named_parameters())
    gathered = [p for n, p in params.items() if n.endswith(f"{table}.weight")]
    assert len(gathered) == 1
    width = gathered[0].shape[1]
    rows = 3 * width * (2 if name == "gpt2_tiny" else 1)  # batch 3, a row of each table
    weights = sum(p.numel() for p in params.values()) - gathered[0].numel() + rows
    cache = L.kv_cache_bytes(opts, 3, 41, 2)
    assert L.bytes_per_decode_step(opts, 3, 40, 2) == weights * 2 + cache


def test_a_mixture_decode_step_reads_the_experts_its_tokens_reach():
    """Mixtral 8x7B from its published parameter count: one token reads 2 of each layer's 8
    experts (its ~12.9 B active parameters); a large batch reaches all of them."""
    opts = L.default_opts("mixtral_8x7b")
    width, inner, layers, vocab = 4096, 14336, 32, 32000
    expert = 3 * width * inner
    unread = vocab * width - width  # the token table, but the one row gathered
    one = L.PUBLISHED["mixtral_8x7b"] - unread - 6 * layers * expert
    cache = L.kv_cache_bytes(opts, 1, 101, 2)
    assert L.bytes_per_decode_step(opts, 1, 100, 2) == pytest.approx(2 * one + cache)
    assert 12.8e9 < one + unread < 13.0e9  # Mistral's 12.9 B active, its table included
    assert L.experts_reached(opts, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    every = L.PUBLISHED["mixtral_8x7b"] - vocab * width + 512 * width
    assert L.bytes_per_decode_step(opts, 512, 100, 2) == pytest.approx(
        2 * every + L.kv_cache_bytes(opts, 512, 101, 2), rel=1e-6)


def decode_step_flops(prompt: int) -> int:
    """FLOPs of one decode step after a prompt of ``prompt`` tokens (math attention)."""
    opts = L.default_opts("llama_tiny")
    model = torch_llm.make("llama_tiny", opts).eval()
    cache = runner.static_cache(model.config, 2, 256, torch.device("cpu"), torch.float32)
    with_cache = {runner.cache_argument(model): cache, "use_cache": True}
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
        model(input_ids=torch.randint(0, 1024, (2, prompt)), **with_cache)
        with FlopCounterMode(display=False) as counter:
            model(input_ids=torch.randint(0, 1024, (2, 1)), **with_cache)
    return counter.get_total_flops()


def test_a_decode_step_costs_the_same_after_a_short_or_a_long_prompt():
    """The cache at work: one new token is 2·N FLOPs of weights plus attention over the
    static cache's 256 positions per sequence, whatever the prompt was (without a cache a
    step would recompute the whole prompt)."""
    short, long = decode_step_flops(8), decode_step_flops(200)
    opts = L.default_opts("llama_tiny")
    _, width, layers, _, _ = L._shape(opts)
    assert short == long == 2 * (2 * L.matmul_weights(opts) + 4 * layers * width * 256)


def config(**grid) -> dict:
    return {"studies": {"serve": {"kind": "llm_inference", "grid": {
        "model": "llama_tiny", "device": "cpu", **grid}}}}


def test_inference_cells_are_checked_in_one_line_naming_the_field():
    cells = study.expand_config(config(batch_size=[1, 4], prompt_length=64, output_length=16))
    assert [c.id.rsplit("_", 1)[0] for c in cells] == [
        "pytorch_llama-tiny_serve_float32_bs1_p64_o16_cpu",
        "pytorch_llama-tiny_serve_float32_bs4_p64_o16_cpu"]
    for grid, field, text in (
            ({"model": "resnet50"}, "model", "not a language model"),
            ({"prompt_length": 1000, "output_length": 100}, "output_length",
             "1100 exceeds llama_tiny's context of 1024"),
            # the prompt alone past the context: its own field, not output_length
            ({"prompt_length": 2000, "output_length": 16}, "prompt_length",
             "prompt_length: 2000 exceeds llama_tiny's context of 1024 positions"),
            ({"prompt_length": 0}, "prompt_length", ">= 1"),
            ({"precision": "tf32"}, "precision", "gpu only")):
        with pytest.raises(study.ConfigError) as info:
            study.expand_config(config(**grid))
        message = str(info.value)
        assert "serve" in message and field in message and text in message, message
        assert "\n" not in message


def test_an_inference_cells_model_opts_are_the_models_configuration_only():
    """Its context is the prompt and output, not a training cell's sequence_length (128 by
    default: refused past a 64-position model it never fed); the run options a training
    cell has are refused by name (accepted, they changed the id of a cell measuring the
    same thing)."""
    small = {"model": "gpt2_tiny", "model_opts": {"n_positions": 64}}
    (cell,) = study.expand_config(config(**small, prompt_length=60, output_length=4))
    assert cell.params["model_opts"] == {"n_positions": 64}
    refused = [({**small, "prompt_length": 60, "output_length": 8}, "output_length",
                "68 exceeds gpt2_tiny's context of 64 positions"),
               ({"model_opts": {"num_attention_heads": 3}}, "model_opts",
                "the width (128) must be a multiple of the heads (3)"),
               ({"model_opts": {"bogus": 1}}, "model_opts", "unknown model_opts bogus")]
    for option, value in (("sequence_length", 8), ("parallel", "fsdp"),
                          ("activation_checkpointing", True)):
        refused.append(({"model_opts": {option: value}}, "model_opts",
                        f"{option} is a training cell's option, unused by llm_inference"))
    for grid, field, text in refused:
        with pytest.raises(study.ConfigError) as info:
            study.expand_config(config(**grid))
        message = str(info.value)
        assert f"{field}: " in message and text in message and "\n" not in message, message
    # the valid options named are the configuration's fields only
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(config(model_opts={"bogus": 1}))
    assert "hidden_size" in str(info.value) and "sequence_length" not in str(info.value)


@pytest.mark.slow
def test_training_and_inference_cells_through_the_workflow_into_parquet_and_report(tmp_path):
    cfg = {"studies": {
        "lm_train": {"grid": {"model": "llama_tiny", "phase": "training", "device": "cpu",
                              "batch_size": 2, "num_batches": 3, "num_warmup_batches": 1,
                              "model_opts": {"sequence_length": 32}}},
        "lm_serve": {"kind": "llm_inference", "grid": {
            "model": "llama_tiny", "device": "cpu", "batch_size": [1, 2], "prompt_length": 32,
            "output_length": 8, "num_batches": 3, "num_warmup_batches": 1}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile",
                           str(REPO / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "config.yaml"), "--cores", "2"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = pq.read_table(tmp_path / "results" / "benchmarks.parquet").to_pylist()
    train = [r for r in rows if r["study"] == "lm_train"]
    assert [(r["status"], r["throughput_unit"]) for r in train] == [("ok", "tokens/s")]
    assert train[0]["items_per_iteration"] == 2 * 32 and train[0]["tflops"] > 0
    serve = [r for r in rows if r["study"] == "lm_serve"]
    assert sorted((r["batch_size"], r["pass"]) for r in serve) == [
        (1, "decode"), (1, "prefill"), (2, "decode"), (2, "prefill")]
    assert {r["kind"] for r in serve} == {"llm_inference"} and {r["prompt_length"] for r in serve} == {32}
    assert all(r["status"] == "ok" and r["throughput"] > 0 for r in serve)
    # Decode's bytes make its GB/s (a CPU has no vendor peak: no share of it); the report's
    # inference table gives it per cell.
    assert all((r["gbps"] or 0) > 0 for r in serve if r["pass"] == "decode")
    assert all(r["gbps"] is None and r["pct_of_peak_gbps"] is None for r in serve
               if r["pass"] == "prefill")
    from dlbench.report import data as report_data
    from dlbench.report import llm_charts

    frame = llm_charts.llm_frame(report_data.load(tmp_path / "results" / "benchmarks.parquet"))
    decode = {r["batch_size"]: r["gbps"] for r in serve if r["pass"] == "decode"}
    assert dict(zip(frame["batch_size"], frame["decode_gbps"], strict=True)) == pytest.approx(decode)
    assert frame["decode_pct_of_peak_gbps"].isna().all()
    html = (tmp_path / "results" / "report" / "index.html").read_text()
    assert 'id="llm"' in html and "chart-llm-latency" in html and "chart-llm-tradeoff" in html
    assert "tokens/s" in html and "decode GB/s" in html


@pytest.mark.parametrize("flags, error", [
    (["--model", "resnet18"], "--model: 'resnet18' is not a language model"),
    (["--prompt_length", "0"], "--prompt_length: must be >= 1, got 0"),
    (["--prompt_length", "2000"], "--prompt_length: 2000 exceeds gpt2_tiny's context of "
                                  "1024 positions"),
    (["--prompt_length", "1022"], "--output_length: prompt_length + output_length = 1026 "
                                  "exceeds gpt2_tiny's context of 1024 positions"),
    (["--model_opts", '{"n_head": 5}'], "--model_opts: llm: the width (128) must be a "
                                         "multiple of the heads (5)"),
    (["--model_opts", '{"bogus": 1}'], "--model_opts: model gpt2_tiny: unknown model_opts "
                                        "bogus"),
    (["--model_opts", '{"sequence_length": 8}'], "--model_opts: sequence_length is a "
                                                  "training cell's option"),
    (["--num_gpus", "2"], "unrecognized arguments: --num_gpus 2"),  # a model cell's flag
    (["--data_loader_only", "true"], "unrecognized arguments: --data_loader_only"),
])
def test_the_runner_checks_its_cell_as_a_study_does_before_it_runs(flags, error, capsys):
    """Once tracebacks from transformers, or an 'ok' result of a model without layers
    under an unknown option, or flags of model cells accepted and ignored."""
    with pytest.raises(SystemExit) as exit_:
        runner.main(["--model", "gpt2_tiny", "--device", "cpu", "--batch_size", "1",
                     "--prompt_length", "8", "--output_length", "4", *flags])
    assert exit_.value.code == 2 and error in capsys.readouterr().err.splitlines()[-1]


def test_a_model_is_built_in_the_precision_it_is_served_in():
    """Built in float32 and cast, a model that fits its device in bfloat16 (Mixtral 8x7B's
    87 GiB on a 139 GiB GPU) ran out of memory building; the default dtype is restored."""
    opts = {**L.default_opts("gpt2_tiny"), "activation_checkpointing": False}
    with runner.default_dtype(torch, torch.bfloat16):
        model = torch_llm.make("gpt2_tiny", opts)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32
    assert runner.last_logits_argument(model) in ({"logits_to_keep": 1},
                                                 {"num_logits_to_keep": 1})
