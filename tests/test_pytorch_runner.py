"""The PyTorch runner on the CPU: real subprocesses with the seeds' command line."""

import itertools
import json
import os

import pytest
import torch
from pytorch_cell import run_runner

from dlbench import result as R
from dlbench.pytorch import precision, runner, steps
from dlbench.pytorch.zoo import BuiltModel


def test_training_cell_writes_a_valid_result_and_dlbs_lines(tmp_path):
    proc, res = run_runner(tmp_path, "--model", "deep_mnist", "--batch_size", "4",
                           "--num_batches", "5", "--num_warmup_batches", "2", "--device", "cpu",
                           "--forward_only", "false", "--study", "s", "--cell_id", "c")
    assert proc.returncode == 0, proc.stderr
    R.validate(res)
    assert res["status"] == "ok" and (res["study"], res["cell_id"]) == ("s", "c")
    (m,) = res["measurements"]
    assert m["pass"] == "training" and m["iterations"] == 5 and len(m["times_s"]) == 5
    assert m["parameters"] == res["measurements"][0]["parameters"] > 0
    assert m["flops_per_iteration"] > 0 and m["tflops"] > 0
    assert m["throughput"] == pytest.approx(4 / m["time_s"]["median"])
    assert res["environment"]["framework"] == "pytorch"
    assert res["environment"]["framework_version"] == torch.__version__
    lines = dict(line.split("=", 1) for line in proc.stdout.splitlines()
                 if line.startswith("__results."))
    assert float(lines["__results.throughput__"]) == pytest.approx(
        4 / m["time_s"]["mean"], rel=1e-5)  # DLBS's: the batch over the mean time
    assert float(lines["__results.time__"]) == pytest.approx(m["time_s"]["mean"] * 1000, rel=1e-5)
    # Where its time went: each stage the runner went through, the measured iterations
    # inside "measure", and the stages adding up to the cell's wall time.
    stages = res["stages_s"]
    assert {"startup", "environment", "build", "flop_count", "warmup", "measure",
            "other"} <= set(stages)
    assert stages["measure"] >= sum(m["times_s"]) and stages["startup"] > 0
    assert sum(v for k, v in stages.items() if k != "startup") == pytest.approx(
        res["wall_time_s"], abs=1e-4)


def test_inference_bfloat16_cell_with_dlbs_style_flags(tmp_path):
    proc, res = run_runner(tmp_path, "--model=deep_mnist", "--forward_only=true",
                           "--batch_size=8", "--num_batches=3", "--num_warmup_batches=1",
                           "--device=cpu", "--dtype=bfloat16", "--cudnn_benchmark=false")
    assert proc.returncode == 0, proc.stderr
    assert res["cell"]["phase"] == "inference" and res["cell"]["precision"] == "bfloat16"
    assert res["measurements"][0]["pass"] == "inference"


def test_data_parallel_cell_on_two_cpu_processes(tmp_path):
    """DistributedDataParallel under torchrun with gloo: the path multi-GPU cells take. A
    ParaDnn FC cell, whose bytes (as its FLOPs) count each process's weights and batch."""
    from dlbench.models import paradnn

    shape = {"layers": 2, "nodes": 32, "input_size": 16, "output_size": 8}
    proc, res = run_runner(tmp_path, "--model=paradnn_fc", f"--model_opts={json.dumps(shape)}",
                           "--batch_size=4", "--num_batches=3", "--num_warmup_batches=1",
                           "--device=cpu", "--num_gpus=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert res["status"] == "ok"
    (m,) = res["measurements"]
    assert m["items_per_iteration"] == 8  # effective batch = batch x processes
    assert res["cell"]["num_gpus"] == 2
    one = paradnn.fc_bytes(*shape.values(), batch=4, element_size=4, training=True)
    assert m["bytes_per_iteration"] == 2 * one  # was the weights once and the batch of 8
    # The host's memory and CPU of both processes, torchrun's agent with them (rank 0's
    # alone was half the cell's), wherever the window saw the tree.
    host = res["extra"]["monitor"]["host"]
    if host:
        assert host["processes_max"] >= 3


def test_a_data_parallel_ranks_monitor_sums_every_rank_on_its_node(monkeypatch):
    from dlbench.pytorch import runner

    assert runner.monitored_process({"LOCAL_WORLD_SIZE": "4"}) == os.getppid()
    assert runner.monitored_process({"LOCAL_WORLD_SIZE": "1"}) is None
    assert runner.monitored_process({}) is None


def test_gpu_cell_without_cuda_fails_in_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc, res = run_runner(tmp_path, "--model=deep_mnist", "--device=gpu", "--num_batches=1")
    assert proc.returncode == 1
    assert res["status"] == "failed"
    assert res["error"].startswith("--device gpu requested but CUDA is not available")
    assert '__results.status__="failed"' in proc.stdout


def test_a_multi_gpu_cell_without_the_gpus_fails_in_one_line_before_torchrun(tmp_path):
    """Said by the launcher: no worker starts, so no worker's nor torchrun's traceback."""
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs")
    proc, res = run_runner(tmp_path, "--model=deep_mnist", "--device=gpu", "--num_gpus=2",
                           "--num_batches=1")
    assert proc.returncode == 1 and res["status"] == "failed"
    assert res["error"].startswith("device gpu: 2 processes need 2 GPUs on this node; torch ")
    assert "Traceback" not in proc.stderr and "dlbench-cell-error" not in proc.stderr


def test_out_of_memory_is_a_recorded_result(tmp_path):
    """A model far larger than host memory: the allocation fails, the cell is 'oom'."""
    opts = json.dumps({"layers": 2, "nodes": 2_000_000, "input_size": 2_000_000})
    proc, res = run_runner(tmp_path, "--model=paradnn_fc", f"--model_opts={opts}",
                           "--device=cpu", "--num_batches=1", "--num_warmup_batches=0")
    assert res is not None and res["status"] == "oom", proc.stderr[-2000:]
    assert res["measurements"] == []


def test_bad_flags_are_rejected_by_the_parser(tmp_path):
    proc, res = run_runner(tmp_path, "--model=nosuchnet", "--device=cpu")
    assert proc.returncode == 2 and res is None
    assert "--model: unknown model 'nosuchnet'" in proc.stderr
    proc, _ = run_runner(tmp_path, "--model=deep_mnist", "--forward_only=maybe")
    assert "expected true or false, got 'maybe'" in proc.stderr
    proc, _ = run_runner(tmp_path, "--model=deep_mnist", "--batch_size=0")
    assert "--batch_size must be >= 1, got 0" in proc.stderr


@pytest.mark.parametrize(("flags", "line"), [
    (["--model=paradnn_fc", '--model_opts={"layers": 0}'],
     "--model_opts: paradnn_fc: model_opts.layers must be >= 1, got 0"),
    (["--model=deep_mnist", '--model_opts={"foo": 1}', "--num_gpus=2"],
     "--model_opts: model deep_mnist: unknown model_opts foo (valid: none)"),
])
def test_the_studys_checks_are_flag_errors_before_any_process_starts(tmp_path, flags, line):
    """What a study refuses, the runner on its own refuses in one line (not a traceback
    from the model's constructor, once per torchrun worker)."""
    proc, res = run_runner(tmp_path, *flags, "--device=cpu", "--num_batches=1")
    assert proc.returncode == 2 and res is None
    assert proc.stderr.strip().splitlines()[-1] == f"python -m dlbench.pytorch: error: {line}"
    assert "Traceback" not in proc.stderr


class _Probe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.seen = []

    def forward(self, x):
        y = self.linear(x)
        self.seen.append((y.dtype, torch.is_inference_mode_enabled()))
        return y


def _built(module):
    return BuiltModel(module=module, input_shape=(4,), num_classes=3, input_kind="features")


@pytest.mark.parametrize(("name", "dtype"), [("float32", torch.float32),
                                             ("bfloat16", torch.bfloat16),
                                             ("float16", torch.float16)])
def test_inference_runs_under_inference_mode_and_autocast(name, dtype):
    probe = _Probe()
    step = steps.inference_step(probe, precision.setup(name, "cpu"), "cpu")
    step(torch.rand(2, 4), None)
    assert probe.seen == [(dtype, True)]


def test_float16_training_uses_a_grad_scaler_and_updates_weights():
    mode = precision.setup("float16", "cpu")
    assert mode.use_grad_scaler and mode.autocast_dtype is torch.float16
    probe = _Probe()
    before = probe.linear.weight.detach().clone()
    step = steps.training_step(probe, _built(probe), mode, "cpu")
    step(torch.rand(2, 4), torch.tensor([0, 2]))
    assert probe.seen[0] == (torch.float16, False)
    assert not torch.equal(before, probe.linear.weight)


def test_synthetic_batches_are_made_once():
    from dlbench.pytorch import data

    built = _built(torch.nn.Linear(4, 3))
    source = data.synthetic(built, 5, torch.device("cpu"), torch.float32)
    first, second = itertools.islice(source, 2)
    assert first[0] is second[0] and first[0].shape == (5, 4) and first[1].dtype == torch.int64


def test_paradnn_cells_run_wholly_in_the_low_precision(tmp_path):
    """ParaDnn casts model and inputs to the dtype (seed 004); other models use autocast."""
    mode = precision.pure(precision.setup("bfloat16", "cpu"))
    assert (mode.param_dtype, mode.autocast_dtype, mode.use_grad_scaler) == (
        torch.bfloat16, None, False)
    assert precision.pure(precision.setup("float32", "cpu")).param_dtype is torch.float32
    opts = {"layers": 2, "nodes": 16, "input_size": 8, "output_size": 4}
    args = runner.parser().parse_args(["--model=paradnn_fc", "--device=cpu", "--dtype=bfloat16",
                                       "--batch_size=4", "--num_batches=2",
                                       "--num_warmup_batches=1", f"--model_opts={json.dumps(opts)}",
                                       "--monitor_interval_ms=0"])
    seen = []
    original = torch.nn.Linear.forward

    def spy(self, x):
        seen.append((self.weight.dtype, x.dtype))
        return original(self, x)

    res = R.new_result(kind="model", cell=runner.cell_of(args))
    try:
        torch.nn.Linear.forward = spy
        runner.run(args, res)
    finally:
        torch.nn.Linear.forward = original
    # After the measured steps, the accuracy check (dlbench.pytorch.accuracy) runs one
    # forward through an eager float32 copy, then one through the cell's bfloat16 model.
    reference = [i for i, s in enumerate(seen) if s == (torch.float32, torch.float32)]
    assert reference == list(range(reference[0], reference[0] + len(reference)))
    measured, check = seen[:reference[0]], seen[reference[-1] + 1:]
    assert measured and set(measured) == {(torch.bfloat16, torch.bfloat16)}
    assert check == [(torch.bfloat16, torch.bfloat16)] * len(reference)
    assert res["measurements"][0]["extra"]["accuracy"]["ok"] is True
    (m,) = res["measurements"]
    phi = 16 * 16 * 1 + 16 * (8 + 4)
    assert m["extra"]["phi"] == phi
    assert m["extra"]["phi_tflops"] == pytest.approx(6 * phi * 4 / m["time_s"]["mean"] / 1e12)


def test_a_cell_warming_up_until_steady_records_what_its_warm_up_ran(tmp_path):
    """warmup_until_steady: the study's cell passes it (its id says so: another
    measurement than a fixed warm-up; the default leaves ids as they were), the runner
    warms up at least its window past num_warmup_batches and records the warm-up in the
    measurement; a fixed warm-up records none."""
    from dlbench import harness, kinds, study

    grid = {"model": "deep_mnist", "device": "cpu", "batch_size": 2, "num_batches": 3,
            "num_warmup_batches": 2}
    (fixed,) = study.expand_config({"studies": {"s": {"grid": grid}}})
    (steady,) = study.expand_config({"studies": {"s": {"grid": {
        **grid, "warmup_until_steady": True}}}})
    assert steady.id != fixed.id
    (before,) = study.expand_config({"studies": {"s": {"grid": {
        **grid, "warmup_until_steady": False}}}})
    assert before.id == fixed.id
    argv = kinds.get("model").command(steady.params, tmp_path / "x.json", "python", None)
    assert "--warmup_until_steady=true" in argv
    proc, res = run_runner(tmp_path, *argv[3:], "--monitor_interval_ms=0",
                           "--count_flops=false")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert res["cell"]["warmup_until_steady"] is True
    warmup = res["measurements"][0]["extra"]["warmup"]
    assert warmup["iterations"] >= harness.STEADY_WINDOW and warmup["seconds"] > 0
    assert isinstance(warmup["settled"], bool)
    proc, res = run_runner(tmp_path, "--model=deep_mnist", "--device=cpu", "--batch_size=2",
                           "--num_batches=2", "--num_warmup_batches=1",
                           "--monitor_interval_ms=0", "--count_flops=false", name="f.json")
    assert proc.returncode == 0 and "warmup" not in res["measurements"][0]["extra"]
    assert res["cell"]["warmup_until_steady"] is False


def test_a_loader_cell_that_fails_before_its_loop_is_still_a_loader_cell(tmp_path):
    """--data_loader_only on a dataset that cannot be read: the failed result is the
    loader's (once recorded as a model cell, counted apart from its loader twins)."""
    (tmp_path / "empty").mkdir()
    proc, res = run_runner(tmp_path, "--model", "resnet18", "--batch_size", "2",
                           "--num_batches", "2", "--num_warmup_batches", "0", "--device", "cpu",
                           "--data_loader_only", "true", "--data_dir", str(tmp_path / "empty"),
                           "--data_name", "image_folder")
    assert proc.returncode == 1 and res["status"] == "failed"
    assert res["kind"] == "loader"


def test_a_cell_over_several_nodes_counts_this_nodes_share_of_the_samples_per_joule(tmp_path):
    """Rank 0 samples its own node's GPUs: 2 nodes x 4 GPUs count half the samples against
    that energy and say so (the monitor here samples no GPU: the count and the note are
    what is checked, not NVML's energy)."""
    import time
    from argparse import Namespace

    from dlbench import monitor

    def attached(world_size, num_nodes):
        res = {"measurements": [{"items_per_iteration": 64, "iterations": 10}]}
        mon = monitor.ResourceMonitor(50, gpus=[])
        with mon:
            time.sleep(0.12)
        args = Namespace(output=str(tmp_path / "r.json"), num_gpus=4, num_nodes=num_nodes)
        runner.attach_monitor(res, args, mon, world_size)
        return res["extra"]["monitor"]

    assert attached(8, 2)["items"] == 320.0  # was 640: every node's samples
    assert attached(8, 2)["energy_note"].startswith(
        "node 0 of 2: its 4 GPUs' energy and their share of the samples")
    one = attached(4, 1)
    assert one["items"] == 640.0 and not (one["energy_note"] or "").startswith("node 0")


def test_a_data_parallel_loader_cell_records_the_wait_of_the_rank_that_waited_longest(
        tmp_path):
    """Two CPU processes (gloo) reading a real ImageFolder: the cell's wait is the longest
    of the two ranks' own, both recorded (rank 0's alone hid a rank starved of input)."""
    from dlbench.datasets import synthetic

    folder = tmp_path / "images"
    synthetic.generate(folder, synthetic.Spec(classes=2, images_per_class=8, image_size=64,
                                              seed=3))
    proc, res = run_runner(tmp_path, "--model=resnet18", "--batch_size=2", "--device=cpu",
                           "--num_gpus=2", "--num_batches=3", "--num_warmup_batches=1",
                           "--data_loader_only=true", f"--data_dir={folder}",
                           "--data_backend=image_folder", "--monitor_interval_ms=0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert res["status"] == "ok", res["error"]
    (m,) = res["measurements"]
    waits = m["extra"]["ranks_data_wait_s"]
    assert len(waits) == 2 and all(w > 0 for w in waits)
    assert m["data_wait_s"] == max(waits) == waits[m["extra"]["data_wait_rank"]]
