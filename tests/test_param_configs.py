"""Every PARAM op config of tests/data/param-configs runs unchanged, on every kind of CPU.

Three tests hold that property without making the suite's time depend on the CPU's ISA
(a bfloat16 matmul is ~80x slower than float32 on a CPU without AVX-512 BF16 or AMX):
- on the meta device, every operator and input of each config is built with its real
  shapes and dtypes and called (forward and backward), and its FLOPs counted: shapes,
  dtypes, the grammar and the registry are all checked at full size, in milliseconds;
- on this CPU, each config runs for real, unchanged, unless it holds more than
  EMULATED_FLOP_CAP of arithmetic in a precision this CPU only emulates (the skip reason
  then names the CPU capability, the precision and the cost);
- configs in reduced precision also run for real on every CPU in their own dtypes with
  every dimension capped at CAPPED_DIM, so their kernels are exercised here too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from dlbench import cpu
from dlbench.ops import grammar, output
from dlbench.ops.cli import main
from dlbench.ops.runner import Benchmark
from dlbench.ops.timing import ExecOptions

PARAM_CONFIGS = Path(__file__).resolve().parent / "data" / "param-configs"
# Inputs each config expands to (range iterators included).
CONFIG_INPUTS = {"simple_add.json": 1, "simple_add_range.json": 33, "simple_mm.json": 1,
                 "mm.json": 8, "test_native_basic_ops.json": 17, "llama2.json": 6,
                 "alex_net.json": 1, "resnet.json": 1}
# Whole-model "operators" run for real in test_ops_run (slow), not here.
WHOLE_MODELS = {"alex_net.json", "resnet.json"}
# Arithmetic in an emulated precision that a real run may do: ~1 s at the 0.9 GFLOP/s an
# AVX2-only CPU reaches in bfloat16.
EMULATED_FLOP_CAP = 1e9
CAPPED_DIM = 256
REDUCED = {"bfloat16", "float16", "half"}


def tensor_specs(node: Any) -> list[dict]:
    """Every tensor spec in a config, wherever it sits."""
    if isinstance(node, dict):
        found = [node] if node.get("type") == "tensor" else []
        return found + [s for v in node.values() for s in tensor_specs(v)]
    if isinstance(node, list):
        return [s for v in node for s in tensor_specs(v)]
    return []


def declared(config: dict) -> set[tuple[tuple[int, ...], torch.dtype]]:
    return {(tuple(s["shape"]), grammar.dtype_of(s["dtype"], "dtype")) for s in tensor_specs(config)}


def reduced_dtypes(config: dict) -> set[str]:
    names = {s["dtype"] for s in tensor_specs(config)}
    return {"float16" if n == "half" else n for n in names & REDUCED}


def run_on_meta(config: dict, monkeypatch) -> tuple[Benchmark, list]:
    made: list[torch.Tensor] = []
    real_make = grammar.make_tensor

    def recording(spec, device, path):
        tensor = real_make(spec, device, path)
        made.append(tensor)
        return tensor

    monkeypatch.setattr(grammar, "make_tensor", recording)
    with output.JsonlWriter(Path("/dev/null")) as writer:
        bench = Benchmark(ExecOptions(device=torch.device("meta"), warmup=1, iterations=1,
                                      backward=True), writer)
        bench.run(config)
    return bench, made


def load(name: str) -> dict:
    return json.loads((PARAM_CONFIGS / name).read_text())


@pytest.mark.parametrize("name", sorted(CONFIG_INPUTS))
def test_every_param_config_builds_and_runs_at_full_size_on_meta(name, monkeypatch):
    config = load(name)
    bench, made = run_on_meta(config, monkeypatch)
    assert bench.errors == []
    assert bench.inputs_run == CONFIG_INPUTS[name]
    assert made and all(t.device.type == "meta" for t in made)
    # Every tensor was made with the shape and dtype the config declares, none other.
    assert {(tuple(t.shape), t.dtype) for t in made} == declared(config)
    passes = {m["pass"] for m in bench.measurements}
    assert passes == {"forward", "backward"}


def test_llama2_matmuls_are_counted_at_their_real_sizes_on_meta(monkeypatch):
    config = load("llama2.json")
    bench, made = run_on_meta(config, monkeypatch)
    assert {t.dtype for t in made} == {torch.bfloat16}
    forward = [m for m in bench.measurements if m["pass"] == "forward"]
    expected = []
    for item in config["torch.mm"]["config"]:
        a, b = item["input"][0]["args"]
        (m, k), (_, n) = a["shape"], b["shape"]
        expected.append(2 * m * k * n)
    assert [m["flops_per_iteration"] for m in forward] == expected
    assert max(expected) >= 2 * 4096 * 11008 * 11008  # ~1 TFLOP: the Llama-2 MLP's matmul


def forward_flops(config: dict, monkeypatch) -> float:
    bench, _ = run_on_meta(config, monkeypatch)
    return sum(m["flops_per_iteration"] or 0 for m in bench.measurements
               if m["pass"] == "forward")


def run_cli(tmp_path: Path, config: dict, *flags: str) -> tuple[int, dict]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = tmp_path / "result.json"
    code = main(["-c", str(path), "-o", str(tmp_path / "out"), "--output", str(result),
                 "-l", "WARNING", *flags])
    return code, json.loads(result.read_text())


@pytest.mark.parametrize("name", sorted(set(CONFIG_INPUTS) - WHOLE_MODELS))
def test_every_param_config_runs_unchanged_on_this_cpu(tmp_path, name, monkeypatch):
    config = load(name)
    info = cpu.this_cpu()
    emulated = sorted(d for d in reduced_dtypes(config) if info is None or not info.native(d))
    if emulated:
        flops = forward_flops(config, monkeypatch)
        if flops > EMULATED_FLOP_CAP:
            capability = info.capability if info else "unknown"
            pytest.skip(f"{', '.join(emulated)} is emulated on this CPU ({capability}, no "
                        f"AVX-512 BF16/FP16 or AMX): {name}'s {flops / 1e12:.1f} TFLOP would "
                        "take most of an hour; its full shapes run on meta and a copy capped "
                        f"at {CAPPED_DIM} per dimension runs for real (other tests here)")
    # One measured call, no warmup: the larger configs are ~1 TFLOP of matmuls.
    code, res = run_cli(tmp_path, config, "-w", "0", "-i", "1",
                        *([] if reduced_dtypes(config) else ["-b"]))
    assert code == 0 and res["extra"]["errors"] == []
    assert res["extra"]["inputs_run"] == CONFIG_INPUTS[name]
    assert all(m["time_s"]["median"] > 0 for m in res["measurements"])


def capped(config: dict) -> dict:
    config = copy.deepcopy(config)
    for spec in tensor_specs(config):
        spec["shape"] = [min(size, CAPPED_DIM) for size in spec["shape"]]
    return config


@pytest.mark.parametrize("name", sorted(n for n in CONFIG_INPUTS if reduced_dtypes(load(n))))
def test_reduced_precision_configs_run_for_real_capped_at_256_per_dimension(tmp_path, name):
    config = capped(load(name))
    code, res = run_cli(tmp_path, config, "-w", "0", "-i", "1", "-b")
    assert code == 0 and res["extra"]["errors"] == []
    assert res["extra"]["inputs_run"] == CONFIG_INPUTS[name]
    forward = [m for m in res["measurements"] if m["pass"] == "forward"]
    assert len(forward) == CONFIG_INPUTS[name]
    assert all(m["flops_per_iteration"] == 2 * CAPPED_DIM**3 for m in forward)
