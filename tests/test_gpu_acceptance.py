"""The GPU acceptance check (benchmarks/gpu_acceptance.py) where there is no GPU: its dry
mode builds every command and checks it against the runners' own parsers, a real run
refuses in one line, and the verdicts follow the figures the results give.

Not exercised here (no GPU): the runs themselves, CUDA events, NVML, NCCL and ncu."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"
sys.path.insert(0, str(SCRIPT.parent))  # its parts, benchmarks/gpu_check, as it finds them

from gpu_check import plan as planning  # noqa: E402
from gpu_check import settings, verdicts  # noqa: E402


@pytest.fixture(scope="module")
def gpu_acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_dry_mode_builds_every_command_and_the_runners_accept_them(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    for line in proc.stdout.splitlines():  # each printed command pastes into a shell as is
        name, _, command = line.partition(": ")
        assert shlex.split(command) == plan[name], name
    for name in ("resnet50_training_float32", "resnet50_inference_bfloat16",
                 "resnet50_training_tf32", "resnet50_training_bfloat16_inductor",
                 "resnet50_training_bfloat16_cudagraphs",
                 "resnet50_training_bfloat16_inductor-max-autotune", "resnet50_training_ddp1",
                 "resnet50_training_ddp2", "op_matmul", "op_add_l2_off", "op_add_large",
                 "op_add_events",
                 "op_add_tiny_cudagraph", "op_add_tiny_pt2", "honesty", "timer",
                 "profile_ncu", "profile_torch", "profile_ncu_op", "op_add_ncu_batch",
                 "aggregate", "report",
                 "llm_train_gpt2_xl", "llm_train_llama3_8b", "llm_train_fsdp2",
                 "llm_serve_b1", "llm_serve_b32",
                 "llm_bare", "comms_nccl1", "comms_nccl2", "comms_nccl2_nonblocking",
                 "comms_nccl2_pt2pt", "comms_nccl2_gemm", "comms_nccl2_a2av",
                 "comms_nccl2_h2d", "comms_nccl2_emb"):
        assert name in plan
    assert plan["llm_serve_b32"][2] == "dlbench.llm" and "--batch_size=32" in plan["llm_serve_b32"]
    assert "--cuda-l2-cache" in plan["op_add_l2_off"] and "--cuda-graph" in \
        plan["op_add_tiny_cudagraph"]
    matmul = json.loads((tmp_path / "ops" / "matmul.json").read_text())
    assert matmul["torch.matmul"]["config"][0]["input"][0]["args"][0]["shape"] == [8192, 8192]


def test_a_command_the_runner_refuses_is_reported(tmp_path):
    plan = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    assert planning.check_plan_parses(plan) == []
    plan.commands["resnet50_training_float32"].append("--dtype=float8")
    (problem,) = planning.check_plan_parses(plan)
    assert problem.startswith("resnet50_training_float32: ")


def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("gpu_acceptance: no CUDA device: ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_interpreter_without_torch_is_named_not_taken_for_a_machine_without_gpus(
        tmp_path):
    """torch that cannot be imported (here a stand-in module that raises) is no word on the
    machine's GPUs: the line says which interpreter lacks it; --dry, whose check of the
    commands uses the runners' parsers, says so in one line too."""
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ImportError('No module named torch (stand-in)')\n")
    env = {**os.environ, "PYTHONPATH": str(fake)}
    for extra, said in (([], f"gpu_acceptance: {sys.executable} cannot import torch "
                              "(ImportError: No module named torch (stand-in)); run it with "
                              "the interpreter that has torch (make gpu-check GPU_PYTHON=...)"),
                        (["--dry"], "gpu_acceptance: --dry checks the commands with the "
                                    "runners' parsers, which need torch: No module named "
                                    "torch (stand-in) (run it with the interpreter that has "
                                    "torch)")):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o"),
                               *extra], capture_output=True, text=True, timeout=300, env=env)
        assert (proc.returncode, proc.stderr.strip()) == (2, said), proc.stderr[-2000:]


def result(tput, loss=1.0, status="ok", compile_facts=None):
    extra = {"last_loss": loss, "loss_finite": loss is not None}
    if compile_facts:
        extra["compile"] = compile_facts
    return {"status": status, "error": None if status == "ok" else "broke",
            "measurements": [{"throughput": tput, "time_s": {"median": 1 / tput},
                              "extra": extra}] if status == "ok" else []}


def test_the_memory_verdict_compares_bf16_and_float32_inference_peaks():
    """The verdict from hand-made results (the peaks themselves need a GPU: not
    exercised here)."""
    def peak(gib):
        res = result(1000)
        res["measurements"][0]["extra"]["max_memory_allocated_bytes"] = int(gib * 2**30)
        return res

    check = verdicts.memory_check({"resnet50_inference_bfloat16": peak(1.5),
                                   "resnet50_inference_float32": peak(2.75)})
    assert (check.verdict, check.figure) == ("pass", "1.50 vs 2.75 GiB allocated at peak")
    assert verdicts.memory_check({"resnet50_inference_bfloat16": peak(3),
                                  "resnet50_inference_float32": peak(2.75)}).verdict == "fail"
    assert verdicts.memory_check({"resnet50_inference_float32": peak(2)}).verdict == \
        verdicts.verdict(None)


def test_model_verdicts_follow_the_figures(tmp_path):
    results = {f"resnet50_training_{p}": result(t) for p, t in
               (("float32", 1000), ("tf32", 1800), ("float16", 2500), ("bfloat16", 900))}
    results["resnet50_training_float16"] = result(2500, loss=None)
    results["resnet50_inference_float32"] = result(3000, status="failed")
    results["resnet50_training_bfloat16_inductor"] = result(
        1200, compile_facts={"compile_time_s": 70.0})
    checks = {c.name: c for c in verdicts.model_checks(results)}
    assert checks["training tf32 faster than float32"].verdict == "pass"
    assert checks["training bfloat16 faster than float32"].verdict == "fail"
    assert checks["float16 training (GradScaler) has a finite loss"].verdict == "fail"
    assert checks["no training cell ends with a NaN loss"].verdict == "fail"
    assert checks["resnet50_inference_float32 runs"].verdict == "fail"
    assert checks["resnet50_inference_float32 runs"].figure == "broke"
    # A cell's line says where its time went on that GPU, when its result says so.
    results["resnet50_training_tf32"]["stages_s"] = {"startup": 6.0, "build": 2.5,
                                                     "measure": 10.0, "other": 1.5}
    tf32 = {c.name: c for c in verdicts.model_checks(results)}["resnet50_training_tf32 runs"]
    assert tf32.figure == "1,800 img/s (wall 20 s: startup 6.0, build 2.5, measure 10.0, other 1.5)"
    assert tf32.detail["stages_s"]["build"] == 2.5
    # ... and whether its iteration times drifted (dlbench.drift), where it has them.
    results["resnet50_training_tf32"]["measurements"][0]["times_s"] = [
        1 / 1800 * (1 + 0.1 * i / 39) for i in range(40)]
    tf32 = {c.name: c for c in verdicts.model_checks(results)}["resnet50_training_tf32 runs"]
    assert tf32.figure.startswith("1,800 img/s (drift +9.5% (drifting); wall 20 s: ")
    # ... and its warm-up until steady (the precision cells warm up so).
    results["resnet50_training_tf32"]["measurements"][0]["extra"] = {
        "warmup": {"iterations": 27, "settled": True, "seconds": 3.1, "drift": 0.01}}
    tf32 = {c.name: c for c in verdicts.model_checks(results)}["resnet50_training_tf32 runs"]
    assert tf32.figure.startswith("1,800 img/s (warm-up 27 iterations, settled; drift +9.5%")
    plan = planning.build_plan(tmp_path / "plan", sys.executable, gpus=1, autotune=False)
    assert "--warmup_until_steady=true" in plan.commands["resnet50_training_tf32"]
    assert "--warmup_until_steady=true" not in plan.commands["resnet50_training_ddp1"]
    # A result without stages: the figure alone.
    assert checks["resnet50_training_float32 runs"].figure == "1,000 img/s"
    inductor = checks["compile inductor: bf16 training"]
    assert inductor.verdict == "pass" and "1.33x eager" in inductor.figure
    del results["resnet50_training_bfloat16"]  # a rerun of the compile modes alone
    alone = {c.name: c for c in verdicts.model_checks(results)}
    assert alone["compile inductor: bf16 training"].figure == \
        "1,200 img/s, eager not run, compile 70 s"


def test_language_model_verdicts_follow_the_results(tmp_path):
    """An oom row for Llama-3-8B training is an answer (128 GB of float32 weights, gradients
    and Adam state); a failed inference cell or no bare-loop figures fail. MFU is computed
    from the vendor peak of the recorded GPU."""
    gpu = {"gpu_models": ["NVIDIA H100 80GB HBM3"]}
    train = {"status": "ok", "environment": gpu, "measurements": [
        {"throughput": 20000.0, "tflops": 400.0, "extra": {"loss_finite": True}}]}
    results = {"llm_train_gpt2_xl": train,
               "llm_train_llama3_8b": {"status": "oom", "error": "CUDA out of memory",
                                       "environment": gpu, "measurements": []},
               "llm_serve_b1": {"status": "ok", "extra": {
                   "ttft_s": 0.02, "tpot_s": 0.008, "output_tokens_per_s": 120.0,
                   "warmup": {"generations": 4, "settled": True}},
                   "measurements": [{"pass": "prefill", "gbps": None},
                                    {"pass": "decode", "gbps": 1885.2}]},
               "llm_serve_b32": {"status": "failed", "error": "broke", "extra": {}}}
    checks = {c.name: c for c in verdicts.llm_checks(results, tmp_path)}
    gpt2 = checks["gpt2_xl bf16 training"]
    assert gpt2.verdict == "pass" and "MFU 40.4%" in gpt2.figure  # 400 of 989.4 TFLOP/s
    assert checks["llama3_8b bf16 training"].verdict == "pass"
    assert checks["llama3_8b bf16 inference, batch 1"].verdict == "pass"
    assert "TTFT 20.0 ms" in checks["llama3_8b bf16 inference, batch 1"].figure
    assert checks["llama3_8b bf16 inference, batch 1"].figure.endswith(
        ", decode reads >= 1,885 GB/s; warm-up 4 generations, settled")
    serve = planning.build_plan(tmp_path / "plan", sys.executable, gpus=1, autotune=False)
    assert "--warmup_until_steady=true" in serve.commands["llm_serve_b1"]
    assert checks["llama3_8b bf16 inference, batch 32"].verdict == "fail"
    assert checks["gpt2_xl training: runner against a bare loop"].verdict == "fail"
    (tmp_path / "llm_bare.json").write_text(json.dumps({"ratio": 0.991}))
    checks = {c.name: c for c in verdicts.llm_checks(results, tmp_path)}
    assert checks["gpt2_xl training: runner against a bare loop"].verdict == "pass"
    graphs = "llama3_8b bf16 inference, batch 1, cudagraphs"
    assert checks[graphs].verdict == "fail" and checks[graphs].figure == "no result"
    results["llm_serve_b1_cudagraphs"] = {"status": "ok", "extra": {"ttft_s": 0.02,
                                                                    "tpot_s": 0.004}}
    check = {c.name: c for c in verdicts.llm_checks(results, tmp_path)}[graphs]
    assert check.verdict == "pass"
    assert check.figure == "TTFT 20.0 ms, ITL p50 (tpot_s) 4.00 ms (2.00x eager's speed)"
    del results["llm_serve_b1"]
    results["llm_serve_b1_cudagraphs"]["extra"]["compile"] = {"recompilations_measured": 2}
    check = {c.name: c for c in verdicts.llm_checks(results, tmp_path)}[graphs]
    assert check.figure.endswith("ITL p50 (tpot_s) 4.00 ms, eager not run, 2 compiled while "
                                 "measured")
    plan = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    command = plan.commands["llm_serve_b1_cudagraphs"]
    assert {"--compile=cudagraphs", "--batch_size=1", "--model=llama3_8b"} <= set(command)


def test_collective_verdict_needs_nccl_and_every_size(tmp_path):
    """The NCCL all_reduce check: each size up to COMMS_END measured over NCCL and its
    data validated; a gloo result, a sweep cut short, a size not validated or a failed
    cell fails it. Its commands parse (PARAM's short
    flags), a wrong one is reported."""
    end = settings.COMMS_END

    def size(n):
        return {"name": f"all_reduce|{n}", "bytes_per_iteration": n, "time_s": {"median": 1e-3},
                "extra": {"bus_gbps": n / 1e-3 / 1e9, "validated": True}}

    res = {"status": "ok", "extra": {"backend": "nccl"},
           "measurements": [size(8), size(end)]}
    check = verdicts.comms_check("comms_nccl2", res)
    assert check.verdict == "pass" and check.name == "all_reduce over NCCL, 2 GPU(s)"
    assert "256 MiB in 1,000 µs, bus 268.4 GB/s" in check.figure
    assert verdicts.comms_check("comms_nccl2", {**res, "extra": {"backend": "gloo"}}
                                      ).verdict == "fail"
    # The gloo sweep on the GPU's tensors (PARAM's --backend gloo) must run on gloo.
    gloo = verdicts.comms_check("comms_gloo1", {**res, "extra": {"backend": "gloo"}})
    assert gloo.verdict == "pass" and gloo.name == "all_reduce over gloo, 1 GPU(s)"
    assert verdicts.comms_check("comms_gloo1", res).verdict == "fail"
    assert "--backend=gloo" in planning.build_plan(tmp_path, sys.executable, gpus=1,
                                                   autotune=False).commands["comms_gloo1"]
    assert verdicts.comms_check("comms_nccl2", {**res, "measurements": [size(8)]}
                                      ).verdict == "fail"
    unchecked = {**size(end), "extra": {"bus_gbps": 1.0}}
    assert verdicts.comms_check("comms_nccl2", {**res, "measurements": [
        size(8), unchecked]}).verdict == "fail"
    assert "--c=1" in planning.build_plan(tmp_path, sys.executable, gpus=1,
                                                autotune=False).commands["comms_nccl1"]
    # every all_reduce sweep of the plan reaches COMMS_END (b x f^k; 8 x 4^k stopped at
    # 128 MiB and failed the check on the first GPU it ran on)
    from dlbench.comms.sizes import sweep
    for gpus in (1, 2):
        plan = planning.build_plan(tmp_path, sys.executable, gpus=gpus, autotune=False)
        swept = [cmd for name, cmd in plan.commands.items()
                 if name.startswith("comms_") and "--e=" + str(end) in cmd]
        assert len(swept) == (8 if gpus == 1 else 10)
        for cmd in swept:
            flag = {a.split("=")[0]: int(a.split("=")[1]) for a in cmd
                    if a.startswith(("--b=", "--e=", "--f="))}
            assert sweep(flag["--b"], flag["--e"], flag["--f"])[-1] == end
    failed = verdicts.comms_check("comms_nccl1", {"status": "failed", "error": "x"})
    assert (failed.verdict, failed.figure) == ("fail", "x")
    assert verdicts.comms_check("comms_nccl1", None).verdict == "skip"
    plan = planning.build_plan(tmp_path, sys.executable, gpus=2, autotune=False)
    # all_to_allv of uneven blocks: one size, COMMS_END bytes from each GPU
    split = next(a for a in plan.commands["comms_nccl2_a2av"] if a.startswith("--i="))
    blocks = [int(b) for b in split.removeprefix("--i=").split(",")]
    assert sum(blocks) * 4 == end and len(blocks) == 2 and blocks[0] != blocks[1]
    uneven = verdicts.comms_check("comms_nccl2_a2av", {**res, "measurements": [
        {**size(end), "name": f"all_to_allv|{end}"}]})
    assert (uneven.verdict, uneven.name) == ("pass", "all_to_allv over NCCL, 2 GPU(s)")
    assert planning.check_plan_parses(plan) == []
    plan.commands["comms_nccl2"].append("--collective=reduce_scatter_v")
    assert planning.check_plan_parses(plan) == [
        "comms_nccl2: " + " ".join(plan.commands["comms_nccl2"][3:])]


def test_non_blocking_collectives_must_beat_blocking_ones_at_the_smallest_size(tmp_path):
    """The non-blocking NCCL sweep runs on the most GPUs there are (the blocking sweep it is
    compared with has the same count) with PARAM's --z 0; slower than blocking at the
    smallest size fails, a missing side is a skip or a failure as the result says."""
    def res(*medians):
        return {"status": "ok", "measurements": [
            {"bytes_per_iteration": 8 * 4**i, "time_s": {"median": t}}
            for i, t in enumerate(medians)]}

    one = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    assert "comms_nccl2_nonblocking" not in one.commands
    command = one.commands["comms_nccl1_nonblocking"]
    assert {"--z=0", "--window=20", "--num_gpus=1", "--c=1"} <= set(command)
    check = verdicts.overlap_check(res(20e-6, 1e-3), res(5e-6, 2e-3))
    assert check.verdict == "pass" and "5.0 µs against 20.0 µs blocking (0.25x)" \
        in check.figure
    assert verdicts.overlap_check(res(20e-6), res(25e-6)).verdict == "fail"
    assert verdicts.overlap_check(None, res(5e-6)).verdict == "skip"
    failed = verdicts.overlap_check(res(20e-6), {"status": "failed", "error": "x"})
    assert (failed.verdict, failed.figure) == ("fail", "x")
    named = verdicts.comms_check("comms_nccl2_nonblocking", {"status": "failed",
                                                                   "error": "x"})
    assert named.name == "all_reduce over NCCL, 2 GPU(s), nonblocking"


def test_collectives_timed_by_cuda_events_must_beat_the_host_clock_at_the_smallest_size(tmp_path):
    """The blocking sweep again with PARAM's --use-device-time (one GPU): shorter than on
    the host's clock at the smallest size, and its result names CUDA events as its timer."""
    def res(median, timer="cuda_events"):
        return {"status": "ok", "extra": {"timer": timer},
                "measurements": [{"bytes_per_iteration": 16, "time_s": {"median": median}}]}

    one = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    assert {"--use-device-time", "--num_gpus=1", "--c=1"} <= set(
        one.commands["comms_nccl1_devicetime"])
    check = verdicts.device_time_check(res(20e-6, "host"), res(8e-6))
    assert check.verdict == "pass", check.figure
    assert "8.0 µs against 20.0 µs host clock (0.40x)" in check.figure
    assert verdicts.device_time_check(res(20e-6), res(25e-6)).verdict == "fail"
    host_timed = verdicts.device_time_check(res(20e-6), res(8e-6, "host"))
    assert (host_timed.verdict, host_timed.figure) == ("fail", "timer 'host', not CUDA events")
    assert verdicts.device_time_check(res(20e-6), None).verdict == "skip"
    held = res(1.3e-6)
    held["measurements"][0]["extra"] = {"device_hold_s": 50e-6, "late_launches": 2}
    assert verdicts.device_time_check(res(48e-6), held).figure.endswith(
        "; stream held 50 µs before each, 2 launch(es) outlasted it")
    skipped = verdicts.device_time_check({"status": "not_run", "error": "not among --only"},
                                         held)
    assert (skipped.verdict, skipped.figure) == ("skip", "not among --only")
    assert verdicts.comms_check("comms_nccl1_devicetime", None).name == \
        "all_reduce over NCCL, 1 GPU(s), devicetime"


def test_point_to_point_over_nccl_needs_every_test_of_every_size_validated(tmp_path):
    """Two GPUs only (NCCL takes one GPU per process): the largest message is found by its
    name, not by the bidirectional test's bytes (both ways)."""
    end = settings.COMMS_END
    two = planning.build_plan(tmp_path, sys.executable, gpus=2, autotune=False)
    assert "--pt2pt=one2one" in two.commands["comms_nccl2_pt2pt"]
    assert "comms_nccl1_pt2pt" not in planning.build_plan(
        tmp_path, sys.executable, gpus=1, autotune=False).commands

    def test(size, name, ways=1, validated=True):
        return {"name": f"pt2pt|{size}", "pass": name, "bytes_per_iteration": size * ways,
                "time_s": {"median": 1e-3}, "extra": {"bus_gbps": 1.0, "validated": validated}}

    res = {"status": "ok", "extra": {"backend": "nccl"}, "measurements": [
        test(s, "latency") for s in (8, end)] + [test(end, "bidirectional", 2)]}
    check = verdicts.comms_check("comms_nccl2_pt2pt", res)
    assert (check.verdict, check.name) == ("pass", "pt2pt over NCCL, 2 GPU(s)")
    assert check.figure.startswith("2 sizes validated; 256 MiB in")
    res["measurements"][-1] = test(end, "bidirectional", 2, validated=False)
    assert verdicts.comms_check("comms_nccl2_pt2pt", res).verdict == "fail"


def test_fsdp_verdict_needs_a_finite_loss_and_says_where_the_model_was_built():
    """FSDP on two GPUs (never run on one): a finite loss passes, the figure says where the
    model was built and rank 0's share; a failure names its error; not run is skipped."""
    res = {"status": "ok", "measurements": [{"throughput": 51234.0, "extra": {
        "loss_finite": True, "built_on": "meta", "rank0_parameter_bytes": 3 * 2**30}}]}
    check = verdicts.fsdp_check(res)
    assert (check.verdict, check.figure) == (
        "pass", "51,234 tokens/s; built on meta, rank 0 holds 3.00 GiB of weights")
    res["measurements"][0]["extra"]["loss_finite"] = False
    assert verdicts.fsdp_check(res).verdict == "fail"
    assert verdicts.fsdp_check({"status": "failed", "error": "NCCL error"}).figure == \
        "NCCL error"
    assert verdicts.fsdp_check({"status": "not_run", "error": "budget"}).verdict == "skip"
    assert verdicts.fsdp_check(None).verdict == "skip"


def test_monitor_and_summary():
    gpu = {"power_mean_w": 421.3264000004, "power_max_w": 455.2}
    res = {"extra": {"monitor": {"gpus": [gpu], "energy_j": 809.793,
                                 "samples_per_joule": 4.741952573064968}}}
    check = verdicts.monitor_check(res)
    assert check.verdict == "pass"
    assert check.figure == "mean 421 W, peak 455 W, 810 J, 4.74 samples/J"
    gpu["power_max_w"] = 374.0  # below the mean, as NVML's lagging reading gave it
    assert verdicts.monitor_check(res).verdict == "fail"
    gpu["power_max_w"] = 455.2
    res["extra"]["monitor"]["gpus"][0]["power_mean_w"] = 5.0  # below any working GPU
    assert verdicts.monitor_check(res).verdict == "fail"
    assert verdicts.monitor_check(None).verdict == "skip"
    sweep = verdicts.monitor_check({"status": "not_run", "error": "budget"},
                                         "monitor: a collective sweep")
    assert (sweep.name, sweep.verdict) == ("monitor: a collective sweep", "skip")
    # A collective sweep counts no samples: its monitor has none per joule (the comms
    # runner attaches it with no items), which failed every sweep.
    gpu["power_mean_w"] = 421.3264000004
    res["extra"]["monitor"]["samples_per_joule"] = None
    assert verdicts.monitor_check(res).verdict == "fail"
    sweep = verdicts.monitor_check(res, "monitor: a collective sweep", per_item=False)
    assert (sweep.verdict, sweep.figure) == ("pass", "mean 421 W, peak 455 W, 810 J")
    res["extra"]["monitor"]["samples_per_joule"] = 4.741952573064968
    # The clocks: a power limit and reasons read are the verdict, their share the figure.
    res["extra"]["monitor"].update(gpu_power_limit_w=700.0, gpu_clocks_held_back=0.4,
                                   gpu_clock_reasons="power cap 40%")
    res["extra"]["monitor"]["gpus"][0]["clocks"] = {"samples": 20, "held_back": 0.4}
    clocks = verdicts.clocks_check(res, "clocks")
    assert clocks.verdict == "pass"
    assert clocks.figure == "power limit 700 W; held back in 40% of 20 samples (power cap 40%)"
    res["extra"]["monitor"]["gpu_clocks_held_back"] = None  # reasons not readable
    assert verdicts.clocks_check(res, "clocks").verdict == "fail"
    assert verdicts.clocks_check(None, "clocks").verdict == "skip"
    text = verdicts.summary_markdown(
        [verdicts.Check("a", "pass", "1"), verdicts.Check("b", "fail", "2")], "H100")
    assert "| b | 2 | fail |" in text and "1 failed." in text


def test_calibration_verdict_follows_the_ceilings_against_the_vendors_peaks():
    """An H100's figures as it gave them (bf16 761 of 989.4 TFLOP/s, copy 2,965 of
    3,350 GB/s) pass; an fp8 ceiling slower than bf16, or above its peak, fails; a GPU
    without fp8 says so and is judged on the rest."""
    def result(**tflops):
        measurements = [{"name": f"gemm_{p}_8192", "tflops": v} for p, v in tflops.items()]
        measurements.append({"name": "copy_float32_268435456", "gbps": 2965.0})
        return {"status": "ok", "measurements": measurements, "extra": {},
                "environment": {"gpu_models": ["NVIDIA H100 80GB HBM3"]}}

    check = verdicts.calibration_check(result(bfloat16=761.0))
    assert check.verdict == "pass", check.figure
    assert check.figure.startswith("bf16 GEMM 761 TFLOP/s of 989.4 peak; copy 2,965 GB/s")
    check = verdicts.calibration_check(result(bfloat16=761.0, float8=1310.0))
    assert check.verdict == "pass" and check.figure.endswith("; fp8 GEMM 1,310 of 1978.9")
    assert verdicts.calibration_check(result(bfloat16=761.0, float8=700.0)).verdict == \
        "fail"
    assert verdicts.calibration_check(result(bfloat16=761.0, float8=2100.0)).verdict == \
        "fail"
    assert verdicts.calibration_check(result(bfloat16=1100.0)).verdict == "fail"
    no_fp8 = result(bfloat16=250.0)
    no_fp8["extra"]["unsupported_precisions_not_measured"] = ["float8"]
    no_fp8["environment"]["gpu_models"] = ["NVIDIA A100-SXM4-80GB"]
    no_fp8["measurements"][-1]["gbps"] = 1700.0  # of its 2,039
    check = verdicts.calibration_check(no_fp8)
    assert check.verdict == "pass" and check.figure.endswith("; no fp8 tensor cores"), check


def test_a_spent_budget_skips_the_rest_saying_so_and_everything_is_archived(
        gpu_acceptance, tmp_path, monkeypatch):
    """The commands are stand-ins (a GPU is not exercised): the first sleeps past the
    budget and is stopped, the others never start; their checks are skips naming the
    budget, not failures, and the archive holds the logs."""
    monkeypatch.setattr(gpu_acceptance, "MIN_SLOT", 0.5)
    plan = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    quick = [sys.executable, "-c", "pass"]
    for name in plan.commands:
        plan.commands[name] = quick
    pid_file = tmp_path / "child.pid"
    plan.commands["resnet50_training_float32"] = [sys.executable, "-c", (
        "import subprocess, sys, time; print('started', flush=True); "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(30)")]
    checks = {c.name: c for c in gpu_acceptance.run_all(plan, gpus=1, budget=5)}
    child = int(pid_file.read_text())  # the command's own child went with it (torchrun's)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "zombie" not in _state(child) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists() or "zombie" in _state(child)
    stopped = checks["resnet50_training_float32 runs"]
    assert stopped.verdict == "skip" and stopped.figure == settings.BUDGET_SPENT
    for name in ("resnet50_inference_bfloat16 runs", "timing honesty",
                 "calibration: measured ceilings", "gpt2_xl bf16 training", "profile ncu",
                 "monitor: NVML power and energy", "DDP ddp1"):
        assert checks[name].verdict == "skip", name
        assert checks[name].figure == settings.BUDGET_SPENT, name
    assert [c.name for c in checks.values() if c.verdict == "fail"] == []
    for name in ("results aggregate", "report renders"):  # no command left a cell result
        assert (checks[name].verdict, checks[name].figure) == (
            "skip", "no cell results in this call"), name
    assert (tmp_path / "logs" / "resnet50_training_float32.log").read_text() == "started\n"
    assert not (tmp_path / "logs" / "honesty.log").exists()

    big = tmp_path / "profiles" / "torch" / "trace.json"
    big.parent.mkdir(parents=True)
    big.write_bytes(b"0" * 2000)
    import tarfile

    with tarfile.open(gpu_acceptance.archive(tmp_path, largest=1000)) as tar:
        names = tar.getnames()
        manifest = tar.extractfile("MANIFEST.txt").read().decode()
    assert "logs/resnet50_training_float32.log" in names and "ops/matmul.json" in names
    assert "profiles/torch/trace.json" not in names
    assert "profiles/torch/trace.json (2000 bytes)" in manifest


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0]
    except (OSError, IndexError):
        return "zombie"  # gone meanwhile


def test_only_runs_the_commands_named_and_skips_the_other_checks(gpu_acceptance, tmp_path):
    """--only (a second call on a lent GPU): stand-in commands, no GPU exercised. A result
    an earlier call left in the folder is not taken for this call's."""
    plan = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    (plan.cells / "resnet50_training_float32.json").write_text(json.dumps(result(900.0)))
    (tmp_path / "llm_bare.json").write_text(json.dumps({"ratio": 1.0}))  # a part's, too
    for name in plan.commands:
        plan.commands[name] = [sys.executable, "-c", "pass"]
    interim = []
    checks = {c.name: c for c in gpu_acceptance.run_all(plan, gpus=1, budget=600,
                                                         only=("honesty", "llm_serve"),
                                                         interim=interim.append)}
    # The measurements' verdicts are handed out before the table and the report are made:
    # a call stopped meanwhile (the lent machine's time up) still leaves them.
    (early,) = interim
    assert [c.name for c in early] == [c for c in checks if c not in (
        "results aggregate", "report renders")]
    assert sorted(p.stem for p in (tmp_path / "logs").glob("*.log")) == [
        "honesty", "llm_serve_b1", "llm_serve_b1_cudagraphs", "llm_serve_b32"]
    assert checks["timing honesty"].figure == "the honesty part left no figures"
    assert checks["timing honesty"].verdict == "fail"  # it ran and left nothing
    for name in ("resnet50_training_float32 runs", "bf16 8192^3 matmul", "profile torch",
                 "gpt2_xl training: runner against a bare loop"):
        assert checks[name].verdict == "skip", name
        assert checks[name].figure == settings.NOT_SELECTED, name


def test_every_result_is_named_as_the_aggregate_expects(tmp_path):
    """A runner's --study/--cell_id against the identity the aggregate reads from the
    result's path: a mismatch sets the result aside as invalid (a GPU run did this)."""
    from dlbench import aggregate

    plan = planning.build_plan(tmp_path / "anywhere", sys.executable, gpus=2,
                                     autotune=True)
    runners = {n: c for n, c in plan.commands.items() if any(
        a.startswith("--output=") for a in c)}
    assert len(runners) > 20
    for name, cmd in runners.items():
        flags = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--") and "=" in a)
        assert aggregate.expected_identity(flags["output"]) == {
            "study": flags["study"], "cell_id": flags["cell_id"]}, name
        assert flags["cell_id"] == name


def test_a_result_the_aggregate_sets_aside_fails_the_check(tmp_path):
    cells = tmp_path / "cells"
    log = tmp_path / "aggregate.log"
    log.write_text("dlbench.aggregate: invalid result file x.json: study is None but ...\n")
    (cells / "invalid").mkdir(parents=True)
    assert verdicts.aggregate_check(0, 3, cells, log).verdict == "pass"
    (cells / "invalid" / "x.20261125T000000Z.json").write_text("{}")
    check = verdicts.aggregate_check(0, 3, cells, log)
    assert check.verdict == "fail"
    assert check.figure.startswith("2 of 3 results in the table; first set aside: ")
    assert verdicts.aggregate_check(1, 0, tmp_path / "none", log).verdict == "fail"


def test_collectives_beside_gemms_are_checked_for_both_parts_times(tmp_path):
    """The NCCL sweep beside bf16 GEMMs (PARAM's comms-compute) on the most GPUs: it passes
    with the GEMMs' TFLOP/s alone and a slowdown beside every size, fails without them,
    skips without a result."""
    one = planning.build_plan(tmp_path, sys.executable, gpus=1, autotune=False)
    assert "comms_nccl2_gemm" not in one.commands
    gemm = one.commands["comms_nccl1_gemm"]
    assert {"--kernel=gemm", "--num-compute=10", "--comp-data-type=bfloat16",
            "--num_gpus=1", "--c=1"} <= set(gemm)
    # PARAM's --mm-dim m n p, which the runner reads as the GEMM's shape
    assert gemm[gemm.index("--mm-dim"):][:4] == ["--mm-dim", "4096", "8192", "2048"]

    def size(n, slowdown):
        return {"name": f"all_reduce|{n}", "bytes_per_iteration": n,
                "time_s": {"median": 1e-3},
                "extra": {"validated": True, "bus_gbps": 1.0,
                          "iteration_time_s": {"median": 4e-3},
                          "compute_overlapped": {"time_s": {"median": 3.5e-3},
                                                 "slowdown": slowdown}}}

    res = {"status": "ok", "extra": {"backend": "nccl", "collectives_per_iteration": 1,
                                     "compute_alone": {"tflops": 600.0,
                                                       "shape": [4096, 8192, 2048]}},
           "measurements": [size(8, 1.0), size(256 << 20, 1.17)]}
    check = verdicts.compute_overlap_check(res)
    assert check.verdict == "pass", check.figure
    assert check.figure == ("GEMM 4096×8192×2048 alone 600 TFLOP/s; beside 256 MiB "
                            "all_reduce 1.17x its "
                            "time; iteration 4.00 ms against 4.50 ms of its parts one after "
                            "the other")
    lost = {**res, "measurements": [size(8, 1.0), {**size(16, 1.0), "extra": {}}]}
    assert verdicts.compute_overlap_check(lost).verdict == "fail"
    square = {**res, "extra": {**res["extra"], "compute_alone": {"tflops": 600.0,
                                                                  "shape": [4096] * 3}}}
    check = verdicts.compute_overlap_check(square)
    assert (check.verdict, check.figure) == (
        "fail", "GEMM shape [4096, 4096, 4096], not PARAM's --mm-dim [4096, 8192, 2048]")
    alone_missing = {**res, "extra": {"backend": "nccl"}}
    assert verdicts.compute_overlap_check(alone_missing).verdict == "fail"
    assert verdicts.compute_overlap_check(None).verdict == "skip"
    failed = verdicts.compute_overlap_check({"status": "failed", "error": "x"})
    assert (failed.verdict, failed.figure) == ("fail", "x")
    assert verdicts.comms_check("comms_nccl1_gemm", res).name == \
        "all_reduce over NCCL, 1 GPU(s), gemm"
    # beside host-to-device copies: their GB/s alone, not TFLOP/s (a copy has none)
    assert "--kernel=h2d" in one.commands["comms_nccl1_h2d"]
    copies = {**res, "extra": {**res["extra"], "compute_alone": {"tflops": 0.0,
                                                                 "gbps": 52.0}}}
    check = verdicts.compute_overlap_check(copies, "h2d")
    assert check.verdict == "pass" and check.figure.startswith("h2d alone 52 GB/s; beside")
    assert check.name == "h2d copies beside NCCL collectives (comms-compute)"
    assert verdicts.compute_overlap_check(copies).verdict == "fail"  # no TFLOP/s
    # beside embedding lookups (PARAM's emb_lookup): their gathers' GB/s
    assert {"--kernel=emb_lookup", "--ntables=8", "--bag-size=32"} <= set(
        one.commands["comms_nccl1_emb"])
    check = verdicts.compute_overlap_check(copies, "emb_lookup")
    assert check.verdict == "pass" and check.figure.startswith("emb_lookup alone 52 GB/s")
    assert check.name == "embedding lookups beside NCCL collectives (comms-compute)"
    checks = verdicts.checks_of({"comms_nccl1_emb": copies}, one.commands, tmp_path, 1, {})
    assert "embedding lookups beside NCCL collectives (comms-compute)" in {
        c.name for c in checks}


def test_params_ncu_batch_needs_every_launch_to_exit_0_and_log_kernels():
    """The verdict on PARAM's --ncu from the launches a result records, each with the
    kernel launches its log's table holds (written here by hand: ncu is not run)."""
    launch = {"tool": "ncu", "file": "out_1_2_0_ncu.log", "returncode": 0, "inputs": 1,
              "table": "out_1_2_0_ncu.parquet", "kernels": 3}
    res = {"status": "ok", "extra": {"nsight": [launch]}}
    check = verdicts.ncu_batch_check(res)
    assert check.verdict == "pass"
    assert check.figure == "1 launch(es), 3 kernel launch(es) in their tables, exit codes [0]"
    assert verdicts.ncu_batch_check(
        {"status": "ok", "extra": {"nsight": [{**launch, "returncode": 1}]}}).verdict == "fail"
    nothing = {"status": "ok", "extra": {"nsight": [{**launch, "kernels": 0}]}}
    assert verdicts.ncu_batch_check(nothing).verdict == "fail"
    unread = {**launch, "kernels": None, "table_error": "x.log: not ncu's details CSV"}
    check = verdicts.ncu_batch_check({"status": "ok", "extra": {"nsight": [unread]}})
    assert check.verdict == "fail" and check.figure.endswith("; x.log: not ncu's details CSV")
    missing = verdicts.ncu_batch_check({"status": "failed", "error": "--ncu: 'ncu' not "
                                              "found on PATH (give --ncu-bin)"})
    assert missing.verdict == "fail" and missing.figure.startswith("--ncu: 'ncu' not found")


def test_the_operator_profile_must_hold_its_kernels_and_not_the_l2_flushs(tmp_path):
    """The ncu profile of the operator cell with the L2 cache off: kernel names as ncu's
    raw page gives them (written here by hand: ncu is not run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    add = "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>(int, T2)"
    fill = "void at::native::vectorized_elementwise_kernel<4, FillFunctor<unsigned char>>(int)"

    def verdict(names):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        pq.write_table(pa.table({"Kernel Name": names}), folder / "kernels.parquet")
        return verdicts.flush_excluded_check(folder)

    clean = verdict([add, add])
    assert clean.verdict == "pass" and clean.figure == "2 kernel launch(es), 0 of them the flush's"
    assert verdict([add, fill, add]).verdict == "fail"
    assert verdict([]).verdict == "fail"
    empty = tmp_path / "none"
    empty.mkdir()
    assert verdicts.flush_excluded_check(empty).figure == "no kernels.parquet"


def test_operator_checks_give_their_times_in_units_people_read(tmp_path):
    """The L2, event-timing and cuda-graph lines: µs below a millisecond, ms above, one
    decimal or two; a missing result reads "no result" and skips."""
    def res(seconds):
        return {"status": "ok", "measurements": [{"time_s": {"median": seconds}}]}

    results = {"op_add_l2_on": res(14.9635e-6), "op_add_l2_off": res(18.3185e-6),
               "op_add_events": res(1.0216e-3), "op_add_large": res(1.0094e-3),
               "op_add_tiny_eager": res(24.4e-6),
               "op_add_tiny_cudagraph": res(10.25e-6), "op_matmul": res(1.25e-3)}
    checks = {c.name: c for c in verdicts.op_checks(results, tmp_path)}
    l2 = checks["--cuda-l2-cache off is slower than on (4 MiB add)"]
    assert (l2.verdict, l2.figure) == ("pass", "off 18.3 µs, on 15.0 µs")
    events = checks["continuous_events agrees with discrete (1 GiB add)"]
    assert (events.verdict, events.figure) == ("pass", "1.02 ms vs 1.01 ms")
    assert checks["ops --cuda-graph"].figure == "10.2 µs vs eager 24.4 µs"
    assert verdicts.duration(1.25) == "1.25 ms"
    del results["op_add_l2_off"]
    l2 = {c.name: c for c in verdicts.op_checks(results, tmp_path)}[l2.name]
    assert (l2.verdict, l2.figure) == ("skip", "off no result, on 15.0 µs")


def test_links_verdict_needs_each_gpus_readings_and_on_two_gpus_a_ceiling():
    """The links check (its NVML reads never ran on a GPU here): one GPU passes on its bus
    id and PCIe link alone; two GPUs need the link that limits them and a share of it; a
    result without readings fails; no result is skipped."""
    gpu = {"bus_id": "00000000:18:00.0", "nvlink_links": 18, "nvlink_link_gbps": 26.562,
           "nvlink_gbps": 478.1, "nvlink_peers": [], "pcie_generation": 5, "pcie_width": 16,
           "pcie_gbps": 63.0}
    one = {"status": "ok", "extra": {"group_ranks": 1, "link": None, "link_readings": {
        "n1": {"network": {"used": "eth0"}, "gpus": [gpu]}}},
        "measurements": [{"extra": {"pct_of_link": None}}]}
    check = verdicts.links_check(one)
    assert check.verdict == "pass"
    assert check.figure == ("1 GPU(s): NVLink 18 x 26.562 GB/s, PCIe gen5 x16 (63.0 GB/s); "
                            "network eth0")
    two = {"status": "ok", "extra": {
        "group_ranks": 2, "link": {"path": "nvlink", "gbps": 478.1,
                                   "text": "NVLink 18 x 26.562 GB/s"},
        "link_readings": {"n1": {"network": {}, "gpus": [gpu, {**gpu, "bus_id": "x"}]}}},
        "measurements": [{"extra": {"pct_of_link": 80.04}}]}
    assert verdicts.links_check(two).figure.endswith(
        "limited by NVLink 18 x 26.562 GB/s, largest size 80.0% of it")
    assert verdicts.links_check({**two, "extra": {**two["extra"], "link": None}}
                                ).verdict == "fail"
    assert verdicts.links_check({"status": "ok", "extra": {}}).verdict == "fail"
    assert verdicts.links_check(None).verdict == "skip"


def test_ours_far_faster_than_the_reference_fails_as_time_left_out(tmp_path):
    """The ratios against a reference have a ceiling too: a runner much faster than a bare
    loop, or a matmul much faster than torch.utils.benchmark.Timer, has left time out of
    its own (a missing synchronisation), which a lower bound alone would pass."""
    def honesty(bare_ratio):
        (tmp_path / "honesty.json").write_text(json.dumps({
            "events_disagreement": 0.001, "runner_median_ms": 10.0, "events_median_ms": 10.0,
            "bare_ratio": bare_ratio}))
        return {c.name: c.verdict for c in verdicts.honesty_checks(tmp_path)}
    assert honesty(1.0)["runner against a bare loop"] == "pass"
    assert honesty(3.0)["runner against a bare loop"] == "fail"
    assert honesty(0.95)["runner against a bare loop"] == "fail"

    def matmul(ours_ms, timer_ms):
        (tmp_path / "timer.json").write_text(json.dumps({"median_ms": timer_ms}))
        results = {"op_matmul": {"status": "ok", "measurements": [
            {"time_s": {"median": ours_ms / 1e3}}]}}
        (check,) = [c for c in verdicts.op_checks(results, tmp_path)
                    if c.name.startswith("bf16 8192^3 matmul")]
        return check.verdict
    assert matmul(1.40, 1.41) == "pass"
    assert matmul(0.20, 1.41) == "fail"  # seven times the Timer's speed: not measured
    assert matmul(1.50, 1.41) == "fail"


@pytest.fixture
def fake_gpu(gpu_acceptance, monkeypatch):
    """A stand-in device: the run path's flags and outcome without a GPU."""
    monkeypatch.setattr(gpu_acceptance, "cuda_device", lambda: ("FAKE GPU", 1))
    monkeypatch.setattr(gpu_acceptance, "software", lambda: {"torch": "x", "cuda": None,
                                                             "cudnn": None, "gpu_driver": None},
                        raising=False)
    return gpu_acceptance


@pytest.mark.parametrize(("argv", "flag", "said"), [
    (["--only", "honsty"], "--only", "honsty matches no command here; the commands: "),
    (["--only", "honesty,llm_sreve"], "--only", "llm_sreve matches no command"),
    (["--dry", "--only", "honsty"], "--only", "honsty matches no command here"),
    (["--budget", "0"], "--budget", "must be a number > 0, got '0'"),
    (["--budget", "-5"], "--budget", "must be a number > 0, got '-5'"),
    (["--only", ","], "--only", "names no command: ','"),
])
def test_a_bad_flag_is_refused_in_one_line_before_anything_runs(fake_gpu, tmp_path, capsys,
                                                                 argv, flag, said):
    with pytest.raises(SystemExit) as exc:
        fake_gpu.main(["--out", str(tmp_path), *argv])
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"argument {flag}: {said}" in errors[0], errors
    if "matches no command" in said:
        assert "honesty" in errors[0].split("the commands: ")[1]  # the valid names, listed
    assert not (tmp_path / "logs").exists()


def test_a_call_that_runs_no_command_fails_saying_why(fake_gpu, tmp_path, capsys):
    """A budget shorter than one command's slot: every check is a skip, but nothing was
    measured, so the call fails (exit 1) with a check saying so."""
    assert fake_gpu.main(["--out", str(tmp_path), "--budget", "1"]) == 1
    report = json.loads((tmp_path / "gpu_acceptance.json").read_text())
    (nothing,) = [c for c in report["checks"] if c["name"] == "measurements"]
    assert nothing["verdict"] == "fail"
    assert nothing["figure"].startswith("no command ran in this call (" + settings.BUDGET_SPENT)
    assert "1 failed." in (tmp_path / "summary.md").read_text()
    assert {"created_utc", "host", "cpu_model", "torch", "cuda", "gpu_driver"} <= set(report)


def test_the_parts_record_every_round_and_alternate_which_goes_first():
    from gpu_check import parts

    calls = []
    ours = iter([100.0, 90.0, 110.0])
    bare = iter([100.0, 100.0, 100.0])
    rounds = parts.alternate(lambda: calls.append("ours") or next(ours),
                             lambda: calls.append("bare") or next(bare), 3)
    assert calls == ["ours", "bare", "bare", "ours", "ours", "bare"]
    figures = parts.spread([r[0] for r in rounds], [r[1] for r in rounds], "samples_per_s")
    assert figures["runner_rounds_samples_per_s"] == [100.0, 90.0, 110.0]
    assert figures["round_ratios"] == [1.0, 0.9, 1.1]
    assert figures["ratio_spread"] == [0.9, 1.1] and figures["paired_median_ratio"] == 1.0
