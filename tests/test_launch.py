"""The launcher: the runner command line it builds, and the result it guarantees."""

import json
import sys

from dlbench import launch, study
from dlbench import result as R


def one_cell(**grid):
    (cell,) = study.expand_config({"studies": {"s": {"grid": {"model": "deep_mnist", **grid}}}})
    return json.loads(cell.to_json())


def test_pytorch_command_uses_the_seed_flags(tmp_path):
    cell = one_cell(phase="inference", precision="bfloat16", batch_size=16, device="cpu",
                    num_batches=7, num_warmup_batches=2, cudnn_fastest=True)
    cmd = launch.runner_command(cell, tmp_path / "r.json", "/env/bin/python")
    assert cmd[:3] == ["/env/bin/python", "-m", "dlbench.pytorch"]
    # In the axis table's order (dlbench.axes), then where to write and what to record.
    assert cmd[3:] == [
        "--model=deep_mnist", "--forward_only=true", "--dtype=bfloat16", "--batch_size=16",
        "--num_gpus=1", "--device=cpu", "--num_batches=7", "--num_warmup_batches=2",
        "--cudnn_benchmark=true", "--cudnn_fastest=true", "--data_shuffle=false",
        "--num_loader_threads=4", "--data_loader_only=false", "--compile=eager",
        "--memory_format=contiguous",
        f"--output={tmp_path / 'r.json'}", "--study=s", f"--cell_id={cell['cell_id']}"]


def test_mxnet_command_has_kv_store_and_data(tmp_path):
    config = {"datasets": {"tiny": {"synthetic": {}}},
              "studies": {"s": {"grid": {"model": "resnet50", "framework": "mxnet",
                                          "kv_store": "nccl", "data": "tiny"}}}}
    (cell,) = study.expand_config(config)
    cmd = launch.runner_command(json.loads(cell.to_json()), tmp_path / "r.json", "py",
                                data_dir="results/datasets/tiny/recordio")
    assert cmd[2] == "dlbench.mxnet"
    assert "--kv_store=nccl" in cmd and "--data_dir=results/datasets/tiny/recordio" in cmd
    # cudnn_benchmark is MXNet's cuDNN autotune; cudnn_fastest is PyTorch's alone.
    assert "--data_name=tiny" in cmd and "--cudnn_benchmark=true" in cmd
    assert not any(a.startswith("--cudnn_fastest") for a in cmd)


def test_model_opts_travel_as_one_json_argument(tmp_path):
    cell = one_cell(model="bert_base", model_opts={"sequence_length": 64})
    cmd = launch.runner_command(cell, tmp_path / "r.json", "py")
    assert '--model_opts={"sequence_length": 64}' in cmd


def test_missing_interpreter_still_leaves_a_failed_result(tmp_path):
    cell = one_cell(device="cpu")
    out = tmp_path / "r.json"
    launch.launch(cell, out, str(tmp_path / "no" / "python"))
    res = R.read(out)
    assert res["status"] == "failed" and res["cell_id"] == cell["cell_id"]
    assert "cannot start" in res["error"] and "No such file" in res["error"]


def test_runner_crash_without_result_is_recorded_with_its_last_error_line(tmp_path):
    """An interpreter without dlbench: the runner module cannot even be found."""
    cell = one_cell(device="cpu")
    out = tmp_path / "r.json"
    out.write_text("stale")
    # -I -S: a Python that sees no site-packages, so dlbench is not importable.
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    fake.chmod(0o755)
    rc = launch.launch(cell, out, str(fake))
    assert rc != 0
    res = R.read(out)
    assert res["status"] == "failed"
    assert "No module named dlbench" in res["error"] or "No module named 'dlbench'" in res["error"]


def test_ops_command_uses_params_options_and_keeps_its_log_apart(tmp_path):
    (cell,) = study.expand_config({"studies": {"o": {"kind": "ops", "grid": {
        "op_config": "config/ops/cpu_demo.json", "device": "gpu", "backward": True,
        "exec_mode": "continuous_events", "warmup": 3, "iterations": 9}}}})
    out = tmp_path / "c.json"
    cmd = launch.runner_command(json.loads(cell.to_json()), out, "py")
    assert cmd[:3] == ["py", "-m", "dlbench.ops"]
    assert cmd[3:17] == ["-d", "cuda", "--config=config/ops/cpu_demo.json", "-b",
                         "--exec-mode", "continuous_events", "-w", "3", "-i", "9",
                         "--cuda-l2-cache", "on", "-o", str(tmp_path / "c.param")]
    assert f"--output={out}" in cmd


def test_a_gpu_cells_runner_numbers_its_gpus_by_pci_bus_as_nvml_does(tmp_path, monkeypatch):
    """CUDA's default order puts the fastest GPU first; NVML (the monitor) and schedulers
    number by PCI bus: on a host of mixed GPUs the locked id would be another GPU to CUDA.
    (The environment handed to the runner; CUDA reading it is not exercised here.)"""
    from dlbench import gpus

    cell = {"cell_id": "c", "params": {"device": "gpu", "num_gpus": 1}}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv(gpus.ALLOCATION_ENV, raising=False)
    with launch.assigned_gpus(cell, tmp_path / "locks") as env:
        assert env == {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    monkeypatch.setenv(gpus.ALLOCATION_ENV, "scheduler")
    with launch.assigned_gpus(cell, tmp_path / "locks") as env:
        assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with launch.assigned_gpus({"cell_id": "c", "params": {"device": "cpu"}}, None) as env:
        assert env == {}


def test_a_runner_refusing_its_flags_is_named_once_with_its_error():
    """argparse names the program itself: the row said "python3 -m dlbench.pytorch: python
    -m dlbench.pytorch: error: ...". A traceback's exception line is the row's error."""
    from dlbench import launch, subproc

    refused = subproc.Ran(2, ["usage: ...", "python -m dlbench.pytorch: error: --num_batches "
                                            "must be >= 1, got 0"])
    assert launch.runner_failure(refused, None, "python3 -m dlbench.pytorch") == (
        "python3 -m dlbench.pytorch: error: --num_batches must be >= 1, got 0")
    crashed = subproc.Ran(1, ["Traceback (most recent call last):", '  File "r.py", line 9',
                              "RuntimeError: boom", "second line"])
    assert launch.runner_failure(crashed, None, "python3 -m dlbench.pytorch") == (
        "python3 -m dlbench.pytorch: RuntimeError: boom")
