"""Execution modes of model cells: the compile and memory_format axes, torch.compile with
inductor run for real on the CPU (it compiles C++ with the machine's compiler), compile
time outside the measured iterations, the per-cell inductor cache, compiler failures as
one-line rows, and the numerical check against eager float32.

Not exercised here (no GPU): cudagraphs, inductor-reduce-overhead's CUDA graphs and
max-autotune's Triton autotuning; their validation and arguments are tested below."""

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dlbench import aggregate, axes, launch, study
from dlbench import result as R
from dlbench.pytorch import accuracy, execution

TINY_FC = json.dumps({"layers": 2, "nodes": 32, "input_size": 16, "output_size": 4})


def cfg(grid):
    return {"studies": {"s": {"grid": grid}}}


def one_line_error(grid):
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(cfg(grid))
    text = str(info.value)
    assert "\n" not in text
    return text


# --- validation and ids ---------------------------------------------------------------

def test_mxnet_with_a_compile_mode_is_refused_naming_the_pair():
    text = one_line_error({"framework": "mxnet", "model": "resnet18", "compile": "inductor"})
    assert "study 's'" in text and "compile" in text and "pair mxnet/inductor" in text


def test_mxnet_with_channels_last_is_refused_and_at_the_defaults_it_runs():
    text = one_line_error({"framework": "mxnet", "model": "resnet18",
                           "memory_format": "channels_last"})
    assert "pair mxnet/channels_last" in text
    (cell,) = study.expand_config(cfg({"framework": "mxnet", "model": "resnet18",
                                       "compile": "eager"}))
    assert cell.params["compile"] is None  # MXNet cells do not hold the axis


def test_cudagraphs_needs_a_gpu_and_channels_last_needs_image_inputs():
    assert "device gpu only" in one_line_error(
        {"model": "resnet18", "device": "cpu", "compile": "cudagraphs"})
    assert "4-D (image) inputs; deep_mnist takes features" in one_line_error(
        {"model": "deep_mnist", "memory_format": "channels_last"})
    assert "unknown value 'tensorrt'" in one_line_error({"model": "resnet18", "compile": "tensorrt"})


def test_a_runner_asked_for_cudagraphs_on_the_cpu_records_a_failed_cell_in_one_line():
    """Outside a study (whose check refuses it first), the runners' compile step refuses
    CUDA graphs on a CPU device: dynamo would run the model eagerly under the mode's name."""
    from dlbench.cellrun import CellError
    from dlbench.pytorch import execution

    with pytest.raises(CellError, match="compile cudagraphs captures CUDA graphs: a GPU "
                                        "cell only, not device cpu"):
        execution.compiled(torch.nn.Linear(2, 2), "cudagraphs", device=torch.device("cpu"))
    linear = torch.nn.Linear(2, 2)
    assert execution.compiled(linear, "eager", device="cpu") is linear


def test_every_compile_mode_is_a_valid_cell_and_changes_the_id_only_off_its_default():
    cells = study.expand_config(cfg({"model": "resnet50", "device": "gpu",
                                     "compile": list(axes.COMPILE_MODES),
                                     "memory_format": list(axes.MEMORY_FORMATS)}))
    assert len({c.id for c in cells}) == len(axes.COMPILE_MODES) * len(axes.MEMORY_FORMATS)
    (plain,) = study.expand_config(cfg({"model": "resnet50"}))
    default = [c for c in cells if c.params["compile"] == "eager"
               and c.params["memory_format"] == "contiguous"]
    assert [c.id for c in default] == [plain.id]


def test_launcher_passes_the_new_axes_as_flags_the_runner_parses_back():
    (cell,) = study.expand_config(cfg({"model": "resnet18", "device": "cpu",
                                       "compile": "inductor-max-autotune",
                                       "memory_format": "channels_last"}))
    argv = axes.argv("pytorch", cell.params)
    assert "--compile=inductor-max-autotune" in argv and "--memory_format=channels_last" in argv
    from dlbench.pytorch import runner

    args = runner.parser().parse_args(argv)
    assert runner.cell_of(args)["compile"] == "inductor-max-autotune"
    assert runner.cell_of(args)["memory_format"] == "channels_last"


def test_compile_modes_map_to_torch_compile_arguments():
    """What each mode asks torch.compile for (the GPU-only modes are not run here)."""
    assert execution._COMPILE_ARGS["inductor-reduce-overhead"] == {
        "backend": "inductor", "mode": "reduce-overhead"}
    assert execution._COMPILE_ARGS["inductor-max-autotune"]["mode"] == "max-autotune"
    assert execution._COMPILE_ARGS["cudagraphs"] == {"backend": "cudagraphs"}
    assert set(execution._COMPILE_ARGS) == set(axes.COMPILE_MODES) - {"eager"}
    module = torch.nn.Linear(2, 2)
    assert execution.compiled(module, "eager") is module


# --- inductor cache, per cell ---------------------------------------------------------

def test_each_compiled_cell_gets_its_own_inductor_cache_under_results(monkeypatch, tmp_path):
    monkeypatch.delenv(launch.INDUCTOR_CACHE_ENV, raising=False)
    cell = {"cell_id": "pytorch_x_1", "study": "st", "params": {"compile": "inductor"}}
    out = tmp_path / "results" / "st" / "cells" / "pytorch_x_1.json"
    env = launch.compile_cache_env(cell, out)
    assert Path(env[launch.INDUCTOR_CACHE_ENV]) == (
        tmp_path / "results" / "cache" / "inductor" / socket.gethostname() / "st" / "pytorch_x_1")
    assert launch.compile_cache_env({**cell, "params": {"compile": "eager"}}, out) == {}
    monkeypatch.setenv(launch.INDUCTOR_CACHE_ENV, "/mine")
    assert launch.compile_cache_env(cell, out) == {}  # the user's choice is kept


# --- pieces of the runner -------------------------------------------------------------

def test_settle_runs_until_two_steps_agree(monkeypatch):
    durations = iter([5.0, 2.0, 1.0, 1.05, 9.0])
    # perf_counter before and after each step: the step takes d, nothing passes between.
    clock = itertools.accumulate(itertools.chain([0.0], *[(d, 0.0) for d in durations]))
    monkeypatch.setattr(execution.time, "perf_counter", lambda: next(clock))
    steps, steady = execution.settle(lambda *b: None, itertools.repeat(()), lambda: None)
    assert (steps, steady) == (4, True)  # 1.0 then 1.05: within 10 %


def test_settle_gives_up_after_max_steps(monkeypatch):
    clock = itertools.count(0.0, 1.0)

    def perf_counter():  # squares: each step 4 s longer than the last, never steady
        return next(clock) ** 2

    monkeypatch.setattr(execution.time, "perf_counter", perf_counter)
    assert execution.settle(lambda *b: None, itertools.repeat(()), lambda: None,
                            max_steps=5) == (5, False)


def test_a_compiler_failure_is_its_innermost_cause_in_one_line():
    try:
        try:
            raise ValueError("No working C++ compiler found\nsecond line")
        except ValueError as inner:
            raise RuntimeError("backend='inductor' raised:\n...") from inner
    except RuntimeError as exc:
        line = execution.failure_line(exc, "inductor")
    assert line == "torch.compile (inductor) failed: ValueError: No working C++ compiler found"


def test_channels_last_converts_a_repeated_batch_once():
    images, labels = torch.rand(2, 3, 8, 8), torch.tensor([0, 1])
    out = list(itertools.islice(execution.batches_in(itertools.repeat((images, labels)),
                                                     "channels_last"), 3))
    assert out[0][0].is_contiguous(memory_format=torch.channels_last)
    assert out[0][0] is out[2][0] and out[0][1] is labels
    module = execution.to_memory_format(torch.nn.Conv2d(3, 4, 3), "channels_last")
    assert module.weight.is_contiguous(memory_format=torch.channels_last)


def test_accuracy_figures_and_verdicts():
    ref = torch.tensor([1.0, -2.0, 4.0])
    same = accuracy.verdict(accuracy.compare(ref.clone(), ref), "float32")
    assert same["ok"] and same["cosine"] == pytest.approx(1.0) and same["max_rel_error"] == 0.0
    off = accuracy.compare(ref + torch.tensor([0.0, 0.0, 0.2]), ref)
    assert off["max_rel_error"] == pytest.approx(0.05)
    assert not accuracy.verdict(off, "float32")["ok"] and accuracy.verdict(off, "bfloat16")["ok"]
    nan = accuracy.verdict(accuracy.compare(torch.tensor([1.0, float("nan"), 0.0]), ref),
                           "bfloat16")
    assert nan["ok"] is False and nan["cosine"] is None  # JSON has no NaN
    assert accuracy.wanted("float32", "inductor") and accuracy.wanted("bfloat16", "eager")
    assert not accuracy.wanted("float32", "eager")


# --- real cells ----------------------------------------------------------------------

needs_cxx = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None,
    reason="inductor compiles C++ on the CPU and no C++ compiler was found "
           "(tests/system-deps.sh installs g++ where it may)")


def run_cell(tmp_path, name, *args, env=None):
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "dlbench.pytorch", "--device", "cpu",
                           "--study", "s", "--cell_id", name, *args, f"--output={out}"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    return proc, (R.read(out) if out.exists() else None)


@needs_cxx
def test_inductor_training_and_inference_cells_on_the_cpu(tmp_path):
    """Real torch.compile with inductor (C++ code compiled by the machine's compiler): the
    compile time is measured apart, nothing is compiled during the measured iterations, the
    cache is cold on the first run and warm on the rerun, the output matches eager float32,
    and the training loss is recorded."""
    cache = {launch.INDUCTOR_CACHE_ENV: str(tmp_path / "cache")}
    common = ["--model", "paradnn_fc", "--model_opts", TINY_FC, "--batch_size", "8",
              "--num_batches", "4", "--num_warmup_batches", "1", "--compile", "inductor"]
    proc, first = run_cell(tmp_path, "train", *common, env=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert first["status"] == "ok" and first["cell"]["compile"] == "inductor"
    extra = first["measurements"][0]["extra"]
    comp = extra["compile"]
    assert comp["compile_time_s"] > 0 and comp["graphs"] >= 1 and comp["graph_breaks"] == 0
    assert comp["recompilations_measured"] == 0 and "recompiled_in_measurement" not in comp
    assert comp["inductor_cache_warm"] is False and comp["extra_warmup_steps"] >= 2
    assert extra["loss_finite"] is True and extra["last_loss"] > 0
    assert extra["accuracy"]["ok"] is True and extra["accuracy"]["cosine"] > 0.9999
    assert any((tmp_path / "cache").iterdir())

    proc, again = run_cell(tmp_path, "train2", *common, env=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert again["measurements"][0]["extra"]["compile"]["inductor_cache_warm"] is True

    proc, inference = run_cell(tmp_path, "infer", *common, "--forward_only", "true", env=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    extra = inference["measurements"][0]["extra"]
    assert extra["compile"]["recompilations_measured"] == 0 and "last_loss" not in extra
    assert extra["accuracy"]["ok"] is True

    (row,) = aggregate.rows_of(first, "train.json")
    assert row["compile"] == "inductor" and row["compile_time_s"] == comp["compile_time_s"]
    assert row["inaccurate"] is False and row["loss_finite"] is True
    assert row["recompiled_in_measurement"] is False and row["inductor_cache_warm"] is False


def test_a_compiler_failure_is_a_failed_row_with_one_line_and_the_text_in_the_log(tmp_path):
    proc, res = run_cell(tmp_path, "broken", "--model", "paradnn_fc", "--model_opts", TINY_FC,
                         "--batch_size", "4", "--num_batches", "2", "--compile", "inductor",
                         "--forward_only", "true",
                         env={"CXX": "/bin/false",
                              launch.INDUCTOR_CACHE_ENV: str(tmp_path / "cache")})
    assert proc.returncode == 1
    assert res["status"] == "failed"
    assert res["error"].startswith("torch.compile (inductor) failed: ")
    assert "C++ compiler" in res["error"] and "\n" not in res["error"]
    assert "Traceback" in proc.stderr


def test_channels_last_bfloat16_cell_records_its_layout_and_accuracy(tmp_path):
    proc, res = run_cell(tmp_path, "cl", "--model", "resnet18", "--batch_size", "1",
                         "--num_batches", "1", "--num_warmup_batches", "0", "--forward_only",
                         "true", "--memory_format", "channels_last", "--dtype", "bfloat16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["cell"]["memory_format"] == "channels_last"
    acc = res["measurements"][0]["extra"]["accuracy"]
    assert acc["ok"] is True and 0.99 <= acc["cosine"] <= 1.0 + 1e-9
    assert acc["min_cosine"] == accuracy.TOLERANCES["bfloat16"][0]


def test_the_runner_gives_weights_and_inputs_the_channels_last_layout():
    """In process, with a spy on every convolution: channels_last reaches the layers the
    measured steps run (contiguous does not)."""
    from dlbench.pytorch import runner

    def layouts(memory_format):
        args = runner.parser().parse_args([
            "--model=resnet18", "--device=cpu", "--batch_size=1", "--num_batches=1",
            "--num_warmup_batches=0", "--forward_only=true", "--count_flops=false",
            "--monitor_interval_ms=0", f"--memory_format={memory_format}"])
        seen = []
        original = torch.nn.Conv2d.forward

        def spy(self, x):
            seen.append((self.weight.is_contiguous(memory_format=torch.channels_last),
                         x.is_contiguous(memory_format=torch.channels_last)))
            return original(self, x)

        res = R.new_result(kind="model", cell=runner.cell_of(args))
        try:
            torch.nn.Conv2d.forward = spy
            runner.run(args, res)
        finally:
            torch.nn.Conv2d.forward = original
        return set(seen)

    assert layouts("channels_last") == {(True, True)}
    # A 1x1 convolution's weight is contiguous in both layouts; the inputs tell them apart.
    assert {x for _, x in layouts("contiguous")} == {False}
