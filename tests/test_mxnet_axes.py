"""MXNet cells as a study makes them: the data_reader axis, cudnn_benchmark as MXNet's
cuDNN autotune, the pairs its runner always refuses, the sweeps it measures once, and the
DLBS lines a cell prints (seed 002)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
import test_mxnet_runner as mxnet_tests
from test_mxnet_runner import REPO, _env, read_valid
from test_result import parse_like_dlbs  # DLBS's log parser's rule

from dlbench import axes, cli, launch, study
from dlbench import result as R
from dlbench.mxnet import dist, runner

mxnet_python = mxnet_tests.mxnet_python  # the MXNet environment's interpreter (a fixture)

DATASETS = {"imgs": {"synthetic": {}}}
AUTOTUNE = "MXNET_CUDNN_AUTOTUNE_DEFAULT"  # DLBS's mxnet.cudnn_autotune


def cells(grid, **extra):
    return study.expand_config({"studies": {"s": {"grid": grid, **extra}},
                                "datasets": DATASETS})


def runner_args(cell):
    """The MXNet runner's parse of the command the launcher gives the cell."""
    cmd = launch.runner_command(json.loads(cell.to_json()), Path("r.json"), "py",
                                data_dir="results/datasets/imgs/recordio")
    return cmd, runner.build_parser().parse_args(cmd[3:])


# --- data_reader ------------------------------------------------------------------------


def test_a_study_chooses_the_mxnet_reader_and_the_runner_gets_it():
    """A thread sweep with the reader held: each cell passes --data_reader, which the
    runner reads back into the cell it records."""
    grid = {"framework": "mxnet", "model": "resnet18", "data": "imgs",
            "data_reader": ["native", "gluon"], "num_loader_threads": [1, 2]}
    made = cells(grid)
    assert len({c.id for c in made}) == 4
    for cell in made:
        cmd, args = runner_args(cell)
        assert f"--data_reader={cell.params['data_reader']}" in cmd
        assert args.data_reader == cell.params["data_reader"]
        assert runner.cell_of(args) == axes.recorded("model", cell.params)


def test_the_default_reader_keeps_ids_and_other_cells_leave_it_empty():
    (auto,) = cells({"framework": "mxnet", "model": "resnet18", "data": "imgs"})
    (named,) = cells({"framework": "mxnet", "model": "resnet18", "data": "imgs",
                      "data_reader": "auto"})
    assert auto.params["data_reader"] == "auto" and named.id == auto.id
    assert "data_reader" not in axes.id_params(auto.params)
    assert "data_reader" not in json.loads(auto.to_json())["params"]
    assert runner_args(auto)[1].data_reader == "auto"  # the runner's default
    # PyTorch cells and synthetic ones have no RecordIO reader: one cell each.
    pt = cells({"framework": "pytorch", "model": "resnet18", "data": "imgs",
                "data_reader": ["native", "gluon"]})
    synthetic = cells({"framework": "mxnet", "model": "resnet18",
                       "data_reader": ["native", "gluon"]})
    assert [c.params["data_reader"] for c in [*pt, *synthetic]] == [None, None]


def test_an_unknown_reader_is_one_line_naming_study_and_field():
    with pytest.raises(study.ConfigError,
                       match=r"^study 's': data_reader: unknown value 'dali' \(valid: auto, "
                             r"native, gluon\)$"):
        cells({"framework": "mxnet", "model": "resnet18", "data": "imgs",
               "data_reader": "dali"})


# --- cudnn_benchmark: MXNet's autotune ---------------------------------------------------


def test_cudnn_benchmark_reaches_the_mxnet_runner_as_its_autotune(monkeypatch, capsys):
    on, off = cells({"framework": "mxnet", "model": "resnet18",
                     "cudnn_benchmark": [True, False]})
    assert capsys.readouterr().err == ""  # GPU cells: two measurements, no warning
    for cell, value in ((on, "1"), (off, "0")):
        cmd, args = runner_args(cell)
        assert f"--cudnn_benchmark={'true' if value == '1' else 'false'}" in cmd
        assert runner.cell_of(args)["cudnn_benchmark"] is cell.params["cudnn_benchmark"]
        environ = {runner.CUDNN_AUTOTUNE: "0"}  # the cell says, not the environment
        assert runner.set_cudnn_autotune(args, environ) == value
        assert environ == {runner.CUDNN_AUTOTUNE: value}
        # An autotune the environment turns on its own way (2: the fastest algorithms) is
        # kept where the cell asks for autotune, and turned off where it does not.
        environ = {runner.CUDNN_AUTOTUNE: "2"}
        assert runner.set_cudnn_autotune(args, environ) == ("2" if value == "1" else "0")
    # On a CPU there is no cuDNN: the variable is left alone, and a sweep is warned of.
    cpu = cells({"framework": "mxnet", "model": "resnet18", "device": "cpu",
                 "cudnn_benchmark": [True, False]})
    environ: dict[str, str] = {}
    assert runner.set_cudnn_autotune(runner_args(cpu[1])[1], environ) is None
    assert environ == {}
    assert "only in cudnn_benchmark, which their runner ignores" in capsys.readouterr().err


def test_mxnet_cell_ids_keep_cudnn_benchmark_as_before():
    """MXNet cells always held the value in their ids: the same ids now that it is used."""
    a, b = cells({"framework": "mxnet", "model": "resnet18",
                  "cudnn_benchmark": [True, False]})
    assert a.id != b.id
    assert axes.id_params(a.params)["cudnn_benchmark"] is True
    assert json.loads(b.to_json())["params"]["cudnn_benchmark"] is False


# --- pairs the runner always refuses ----------------------------------------------------


@pytest.mark.parametrize("grid,message", [
    ({"precision": "float16"},
     "study 's': precision: float16 needs device gpu on mxnet (pair mxnet/cpu/float16"),
    ({"kv_store": "nccl"}, "study 's': kv_store: nccl needs device gpu (pair mxnet/cpu/nccl"),
    ({"kv_store": "nccl", "phase": "inference"}, "study 's': kv_store: nccl needs device gpu"),
])
def test_mxnet_cpu_pairs_its_runner_refuses_are_config_errors(grid, message):
    with pytest.raises(study.ConfigError) as info:
        cells({"framework": "mxnet", "model": "resnet18", "device": "cpu", **grid})
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_the_same_values_where_the_runner_takes_them_are_cells():
    assert len(cells({"framework": "mxnet", "model": "resnet18", "device": "gpu",
                      "precision": "float16", "kv_store": "nccl"})) == 1
    # A loader cell converts its batches to float16 on the CPU too.
    assert len(cells({"framework": "mxnet", "model": "resnet18", "device": "cpu",
                      "precision": "float16", "data": "imgs", "data_loader_only": True})) == 1
    assert len(cells({"framework": "pytorch", "model": "resnet18", "device": "cpu",
                      "precision": "float16"})) == 1


# --- sweeps measured once ---------------------------------------------------------------


@pytest.mark.parametrize("grid,axis", [
    ({"kv_store": ["local", "device"]}, "kv_store"),
    ({"kv_store": ["local", "device"], "num_gpus": 2, "phase": "inference"}, "kv_store"),
    ({"phase": ["training", "inference"], "data": "imgs", "data_loader_only": True}, "phase"),
])
def test_cells_differing_in_what_their_runner_ignores_are_warned_of(grid, axis, capsys):
    made = cells({"framework": "mxnet", "model": "resnet18", **grid})
    assert len({c.id for c in made}) == 2  # ids as before
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "study 's': 1 of its 2 cells repeat another's measurement" in line
    assert f"only in {axis}, which their runner ignores" in line


@pytest.mark.parametrize("grid", [
    {"kv_store": ["local", "device"], "num_gpus": 2},
    {"kv_store": ["device", "dist_sync"]},
    {"phase": ["training", "inference"], "data": "imgs"},
])
def test_cells_their_runner_tells_apart_are_not_warned_of(grid, capsys):
    assert len(cells({"framework": "mxnet", "model": "resnet18", **grid})) == 2
    assert capsys.readouterr().err == ""


def test_pytorch_loader_cells_ignore_the_phase_too(capsys):
    cells({"model": "resnet18", "data": "imgs", "data_loader_only": True,
           "phase": ["training", "inference"]})
    assert "only in phase" in capsys.readouterr().err


# --- dist_* cells: one worker's part, the cell's lines --------------------------------


def test_only_the_workers_a_dist_cell_starts_write_parts():
    base = {"PATH": "/bin"}
    worker = dist.role_env("worker", "127.0.0.1", 9000, 1, base)
    assert dist.writes_part(worker)
    assert not dist.writes_part(dist.role_env("server", "127.0.0.1", 9000, 1, base))
    # A worker MXNet's own tools started prints its lines itself.
    assert not dist.writes_part({"DMLC_ROLE": "worker"})


def test_a_one_node_dist_cell_lists_its_worker_host_and_rank(tmp_path):
    cell = runner.cell_of(runner.build_parser().parse_args(
        ["--model=deep_mnist", "--device=cpu", "--kv_store=dist_sync"]))
    part = R.new_result(kind="model", cell=cell)
    part["environment"] = {"hostname": "h1", "framework": "mxnet"}
    part["measurements"] = [R.measurement(
        name="deep_mnist", pass_="training", times_s=[0.1, 0.3], items_per_iteration=4,
        extra={"rank": 0, "num_workers": 1})]
    R.finish(part, "ok", None)
    R.write(part, dist.part_path(tmp_path, 0))
    args = runner.build_parser().parse_args(["--model=deep_mnist"])
    res = dist.merge(cell, args, tmp_path, 1, 0, [])
    (m,) = res["measurements"]
    assert (m["extra"]["hosts"], m["extra"]["num_hosts"], m["extra"]["worker_ranks"]) == \
        (["h1"], 1, [0])
    assert m["times_s"] == [0.1, 0.3] and m["items_per_iteration"] == 4
    R.validate(res)


def _stdout_of(python: Path, tmp_path: Path, *flags: str) -> tuple[str, dict]:
    output = tmp_path / "r.json"
    done = subprocess.run([str(python), "-m", "dlbench.mxnet", "--device", "cpu",
                           "--output", str(output), *flags],
                          capture_output=True, text=True, cwd=REPO, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, read_valid(output)


@pytest.mark.mxnet
@pytest.mark.parametrize("kv_store", ["device", "dist_sync"])
def test_a_cell_prints_dlbs_lines_once_as_dlbs_mxnet_backend(mxnet_python, tmp_path,
                                                             kv_store):
    """One block of lines per cell, a dist_sync cell's too (its worker prints none), with
    DLBS's version keys first and DLBS's time_std (np.std: ddof 0)."""
    out, res = _stdout_of(mxnet_python, tmp_path, "--model", "deep_mnist", "--batch_size",
                          "4", "--num_batches", "4", "--num_warmup_batches", "1",
                          "--kv_store", kv_store)
    assert out.count("__results.status__") == 1 and out.count("__mxnet.version__") == 1
    lines = out.strip().splitlines()
    assert lines[0].startswith("__mxnet.version__=")
    assert lines[1].startswith("__exp.framework_ver__=")
    parsed = parse_like_dlbs(out)
    version = res["environment"]["framework_version"]
    assert parsed["mxnet.version"] == parsed["exp.framework_ver"] == version
    (m,) = res["measurements"]
    times_ms = np.array(m["times_s"]) * 1000.0
    assert parsed["results.time_std"] == pytest.approx(float(np.std(times_ms)), abs=1e-5)
    assert parsed["results.time_std"] < m["time_s"]["std"] * 1000.0
    if kv_store == "dist_sync":  # docs/mxnet.md lists these for every dist_* cell
        assert m["extra"]["hosts"] == [socket.gethostname()]
        assert m["extra"]["worker_ranks"] == [0] and m["extra"]["num_hosts"] == 1


def test_a_runner_without_mxnet_prints_its_failure_line(tmp_path, capsys):
    """Every failure prints its status lines, this one too (its result says failed)."""
    if importlib.util.find_spec("mxnet") is not None:
        pytest.skip("this interpreter has mxnet; the missing-mxnet path needs one without")
    assert runner.main(["--model=deep_mnist", "--device=cpu",
                        f"--output={tmp_path / 'r.json'}"]) == 1
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.status"] == "failed"
    assert parsed["results.status_msg"].startswith("dlbench.mxnet: mxnet is not importable")
    assert "results.time" not in parsed and "mxnet.version" not in parsed


@pytest.mark.mxnet
@pytest.mark.parametrize("flag,value", [("--cudnn_benchmark=false", "0"), (None, "1")])
def test_a_gpu_cell_records_the_autotune_it_set(mxnet_python, tmp_path, flag, value):
    """A GPU cell on the CPU wheel fails for want of a GPU, after recording its
    environment: MXNET_CUDNN_AUTOTUNE_DEFAULT as cudnn_benchmark set it."""
    output = tmp_path / "r.json"
    env = {**_env(), AUTOTUNE: "0"}
    done = subprocess.run([str(mxnet_python), "-m", "dlbench.mxnet", "--device=gpu",
                           "--model=deep_mnist", f"--output={output}",
                           *([flag] if flag else [])],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    res = read_valid(output)
    assert done.returncode == 1 and res["status"] == "failed"
    assert res["cell"]["cudnn_benchmark"] is (value == "1")
    flags = res["environment"]["library_flags"]
    assert flags[AUTOTUNE] == value
    assert AUTOTUNE not in res["environment"]["library_flags_unset"]


def test_the_runner_parser_takes_the_dlbs_flags_of_these_axes():
    args = cli.model_runner_parser("python -m dlbench.mxnet", "mxnet").parse_args(
        ["--model=resnet18", "--cudnn_benchmark=false", "--data_reader=gluon"])
    assert (args.cudnn_benchmark, args.data_reader) == (False, "gluon")
