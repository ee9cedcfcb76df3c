"""The MXNet runner, run as a real subprocess with the MXNet environment's interpreter.

The interpreter is ``$DLBENCH_MXNET_PYTHON`` or ``<repo>/.venvs/mxnet/bin/python``; when the
default one does not exist the session fixture creates that venv from envs/mxnet.txt.
Everything runs on the CPU: GPU contexts, float16 training, NCCL and dist kvstores are not
exercised here (their argument checks are).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlbench import result as R
from dlbench.cellrun import is_oom
from dlbench.mxnet import runner

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"

# torchvision's parameter counts (PyTorch's ``parameters()``; googlenet and inception3 without
# their auxiliary classifiers), which the PyTorch runner's models have.
TORCHVISION_COUNTS = {
    "alexnet_owt": 61_100_840,
    "googlenet": 6_624_904,
    "inception3": 23_834_568,
    "vgg11": 132_863_336,
    "vgg13": 133_047_848,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
}
# DLBS's own models: AlexNet without groups (conv 96-256-384-384-256, fc 4096-4096-1000, 227
# input) and DeepMNIST (784 -> 2500-2000-1500-1000-500 -> 10), counted by hand.
DLBS_COUNTS = {"alexnet": 62_378_344, "deep_mnist": 11_972_510}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # This checkout's dlbench, whatever the venv's editable install points at.
    env["PYTHONPATH"] = str(REPO / "src")
    env.setdefault("OMP_NUM_THREADS", "2")
    return env


def _create_venv(python: Path) -> None:
    venv = python.parents[1]
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "-r", str(REPO / "envs" / "mxnet.txt")],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(REPO)],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"creating {venv} failed at {' '.join(step)}: {done.stderr[-2000:]}")


@pytest.fixture(scope="session")
def mxnet_python() -> Path:
    configured = os.environ.get("DLBENCH_MXNET_PYTHON")
    python = Path(configured) if configured else DEFAULT_PYTHON
    if not python.exists():
        if configured:
            pytest.fail(f"DLBENCH_MXNET_PYTHON={configured} does not exist")
        _create_venv(python)
    return python


def run_cell(python: Path, tmp_path: Path, *flags: str, name: str = "result.json"):
    output = tmp_path / name
    done = subprocess.run([str(python), "-m", "dlbench.mxnet", "--device", "cpu",
                           "--output", str(output), *flags],
                          capture_output=True, text=True, cwd=REPO, env=_env(), timeout=300)
    return done, output


def read_valid(output: Path) -> dict:
    res = R.read(output)
    R.validate(res)
    return res


def run_helper(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=REPO, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# --- without mxnet ----------------------------------------------------------------------


def test_flags_parse_as_dlbs_passes_them():
    args = runner.build_parser().parse_args(
        ["--model", "resnet50", "--forward_only=true", "--kv_store", "nccl", "--dtype", "float",
         "--data_loader_only", "false", "--preprocess_threads", "8", "--num_gpus", "4"])
    cell = runner.cell_of(args)
    assert args.forward_only is True and args.data_loader_only is False
    assert (args.kv_store, args.preprocess_threads) == ("nccl", 8)
    assert cell["phase"] == "inference" and cell["precision"] == "float32"
    assert cell["data"] == "synthetic" and cell["kv_store"] == "nccl" and cell["num_gpus"] == 4
    with pytest.raises(SystemExit):
        runner.build_parser().parse_args(["--model", "resnet50", "--kv_store", "horovod"])


def test_mxnet_error_line_keeps_the_message_and_the_oom_marker():
    text = ('Traceback (most recent call last):\n  File "../src/storage/pooled.h", line 161\n'
            "MXNetError: cudaMalloc retry failed: out of memory")
    line = runner.mxnet_error_line(text)
    assert line == "cudaMalloc retry failed: out of memory"
    assert is_oom(RuntimeError(line))
    framed = 'Traceback (most recent call last):\n  File "x.h", line 1\nMXNetError: Check failed: a'
    assert runner.mxnet_error_line(framed) == "Check failed: a"


def test_missing_mxnet_is_one_line_and_a_failed_result(tmp_path):
    if importlib.util.find_spec("mxnet") is not None:
        pytest.skip("this interpreter has mxnet; the missing-mxnet path needs one without")
    done, output = run_cell(Path(sys.executable), tmp_path, "--model", "resnet18")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"dlbench.mxnet: mxnet is not importable by {sys.executable}")
    assert "make mxnet-env" in lines[0] and "envs/mxnet.txt" in lines[0]
    res = read_valid(output)
    assert res["status"] == "failed" and res["error"] == lines[0]
    assert res["cell"]["framework"] == "mxnet" and res["measurements"] == []


# --- with mxnet -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mxnet_counts(mxnet_python) -> dict[str, int]:
    """Parameter counts of every catalog model with an MXNet builder, and of Gluon's own
    ResNet-50 v1 (prefixed ``gluon:``), computed in the MXNet interpreter."""
    out = run_helper(mxnet_python, """
        import json
        from mxnet.gluon.model_zoo import vision
        from dlbench import models
        from dlbench.mxnet import zoo
        counts = {}
        for name in models.for_framework("mxnet"):
            built = zoo.build_by_name(name)
            counts[name] = zoo.parameter_count(built.block, built.input_shape)
        counts["gluon:resnet50_v1"] = zoo.parameter_count(vision.resnet50_v1(), (3, 224, 224))
        print(json.dumps(counts))
    """)
    return json.loads(out)


@pytest.mark.mxnet
def test_parameter_counts_match_published_counts(mxnet_counts):
    expected = {**TORCHVISION_COUNTS, **DLBS_COUNTS}
    assert {k: v for k, v in mxnet_counts.items() if ":" not in k} == expected
    # Gluon's own ResNet-50 v1 (stride and biases in the 1x1 convolutions) is 18,880
    # parameters off torchvision's; the zoo's BottleneckV1b is what makes them agree.
    assert mxnet_counts["gluon:resnet50_v1"] == 25_575_912


@pytest.mark.mxnet
def test_parameter_counts_match_the_pytorch_builders(mxnet_counts):
    """Every model both runners build has the same trainable parameter count in each
    (PyTorch models are built on the meta device: no memory, no initialization)."""
    torch = pytest.importorskip("torch")
    from dlbench import models
    from dlbench.pytorch import zoo as torch_zoo

    shared = [n for n in models.for_framework("mxnet") if n in models.for_framework("pytorch")]
    assert shared
    with torch.device("meta"):
        pytorch_counts = {n: torch_zoo.parameter_count(torch_zoo.build(n).module) for n in shared}
    assert {n: mxnet_counts[n] for n in shared} == pytorch_counts


@pytest.mark.mxnet
@pytest.mark.parametrize("model,batch", [("deep_mnist", 4), ("resnet18", 2)])
@pytest.mark.parametrize("forward_only", ["false", "true"])
def test_cell_writes_a_valid_result(mxnet_python, tmp_path, model, batch, forward_only):
    done, output = run_cell(mxnet_python, tmp_path, "--model", model, "--batch_size", str(batch),
                            "--num_batches", "2", "--num_warmup_batches", "1",
                            f"--forward_only={forward_only}", "--study", "s", "--cell_id", "c1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "__results.status__=ok" in done.stdout and "__results.throughput__=" in done.stdout
    res = read_valid(output)
    phase = "inference" if forward_only == "true" else "training"
    assert res["status"] == "ok" and res["kind"] == "model"
    assert (res["study"], res["cell_id"]) == ("s", "c1")
    assert res["cell"] == {
        "framework": "mxnet", "model": model, "phase": phase, "precision": "float32",
        "batch_size": batch, "num_gpus": 1, "device": "cpu", "data": "synthetic",
        "num_batches": 2, "num_warmup_batches": 1, "kv_store": "device",
        "data_loader_only": False, "model_opts": {}}
    env = res["environment"]
    assert env["framework"] == "mxnet" and env["framework_version"].startswith("1.")
    assert "MXNET_CUDNN_AUTOTUNE_DEFAULT" in env["library_flags"]
    (m,) = res["measurements"]
    assert m["pass"] == phase and m["iterations"] == 2 and len(m["times_s"]) == 2
    assert m["items_per_iteration"] == batch
    assert m["parameters"] == {**TORCHVISION_COUNTS, **DLBS_COUNTS}[model]
    assert all(t > 0 for t in m["times_s"]) and m["throughput"] > 0
    assert m["extra"]["contexts"] == ["cpu(0)"]


@pytest.mark.mxnet
def test_two_cpu_contexts_split_the_batch(mxnet_python, tmp_path):
    """Two MXNet CPU contexts stand in for two GPUs: each gets --batch_size samples and the
    'device' kvstore sums their gradients. Real GPU contexts are not exercised here."""
    done, output = run_cell(mxnet_python, tmp_path, "--model", "deep_mnist", "--batch_size", "3",
                            "--num_gpus", "2", "--num_batches", "2", "--num_warmup_batches", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    (m,) = read_valid(output)["measurements"]
    assert m["items_per_iteration"] == 6
    assert m["extra"]["contexts"] == ["cpu(0)", "cpu(1)"]


@pytest.mark.mxnet
@pytest.mark.parametrize("flags,expected", [
    (["--model", "no_such_net"], "unknown model 'no_such_net'"),
    (["--model", "overfeat"], "--model overfeat: not available for mxnet"),
    (["--model", "resnet18", "--dtype", "float16"], "--dtype float16 needs --device gpu"),
    (["--model", "resnet18", "--kv_store", "dist_sync"], "--kv_store dist_sync needs a"),
    (["--model", "resnet18", "--kv_store", "nccl"], "--kv_store nccl needs --device gpu"),
    (["--model", "resnet18", "--data_loader_only=true"], "--data_loader_only needs --data_dir"),
    (["--model", "resnet18", "--data_dir", "/nonexistent/train.rec"],
     "--data_dir: RecordIO file /nonexistent/train.rec does not exist"),
    (["--model", "deep_mnist", "--data_dir", "x.rec"], "RecordIO input needs an image model"),
])
def test_bad_input_is_a_one_line_failed_result(mxnet_python, tmp_path, flags, expected):
    done, output = run_cell(mxnet_python, tmp_path, *flags)
    assert done.returncode == 1
    res = read_valid(output)
    assert res["status"] == "failed" and res["measurements"] == []
    assert expected in res["error"] and "\n" not in res["error"]
    assert "__results.status__=failed" in done.stdout


@pytest.mark.mxnet
def test_gpu_device_without_a_cuda_build_fails_clearly(mxnet_python, tmp_path):
    """The CPU wheel sees no GPU: --device gpu must fail naming --num_gpus (on a CUDA host
    with GPUs this cell would run; not exercised here)."""
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--device", "gpu")
    res = read_valid(output)
    if res["environment"].get("mxnet_num_gpus"):
        pytest.skip("this mxnet build sees a GPU")
    assert done.returncode == 1 and res["error"].startswith("--num_gpus 1: mxnet")


@pytest.mark.mxnet
def test_runner_modules_do_not_import_mxnet(mxnet_python):
    """The workflow driver imports dlbench.mxnet's runner flags without paying for (or
    having) mxnet; only running a cell imports it."""
    out = run_helper(mxnet_python, """
        import sys
        import dlbench.mxnet
        import dlbench.mxnet.runner
        print("mxnet" in sys.modules)
    """)
    assert out.strip() == "False"


@pytest.fixture(scope="module")
def record_file(mxnet_python, tmp_path_factory) -> Path:
    """Ten 240x240 RGB JPEGs (Pillow) in a .rec with its .idx, written with mxnet.recordio."""
    folder = tmp_path_factory.mktemp("rec")
    run_helper(mxnet_python, f"""
        import io
        import numpy as np
        from PIL import Image
        from mxnet import recordio
        out = recordio.MXIndexedRecordIO({str(folder / "tiny.idx")!r},
                                         {str(folder / "tiny.rec")!r}, "w")
        rng = np.random.default_rng(0)
        for i in range(10):
            pixels = rng.integers(0, 256, (240, 240, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels, "RGB").save(buf, format="JPEG", quality=90)
            out.write_idx(i, recordio.pack(recordio.IRHeader(0, float(i % 5), i, 0),
                                           buf.getvalue()))
        out.close()
    """)
    return folder / "tiny.rec"


@pytest.mark.mxnet
def test_recordio_loader_only(mxnet_python, tmp_path, record_file):
    """The input pipeline alone: batches of 2 x 4 decoded, cropped images per iteration
    (more than the 10 records hold over the run, so epochs restart)."""
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "4",
                            "--num_gpus", "2", "--data_dir", str(record_file),
                            "--data_loader_only=true", "--preprocess_threads", "2",
                            "--num_batches", "3", "--num_warmup_batches", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    assert res["kind"] == "loader" and res["cell"]["data"] == "tiny"
    (m,) = res["measurements"]
    assert m["pass"] == "loader" and m["items_per_iteration"] == 8 and m["iterations"] == 3
    assert m["extra"]["data_source"] == str(record_file)
    assert m["extra"]["preprocess_threads"] == 2


@pytest.mark.mxnet
def test_recordio_training_records_data_wait(mxnet_python, tmp_path, record_file):
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "1",
                            "--data_dir", str(record_file), "--data_name", "tiny_imagenet",
                            "--num_batches", "2", "--num_warmup_batches", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    assert res["cell"]["data"] == "tiny_imagenet"
    (m,) = res["measurements"]
    assert m["pass"] == "training" and m["data_wait_s"] is not None
    assert 0 <= m["data_wait_s"] <= sum(m["times_s"])
    assert m["compute_s"] == pytest.approx(sum(m["times_s"]) - m["data_wait_s"])


@pytest.mark.mxnet
def test_missing_index_beside_the_record_file(mxnet_python, tmp_path):
    rec = tmp_path / "lonely.rec"
    rec.write_bytes(b"\0")
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--data_dir",
                            str(rec))
    res = read_valid(output)
    assert done.returncode == 1
    assert res["error"].startswith(f"--data_dir: index {tmp_path / 'lonely.idx'} of lonely.rec")
