"""The MXNet runner, run as a real subprocess with the MXNet environment's interpreter.

The interpreter is ``$DLBENCH_MXNET_PYTHON`` or ``<repo>/.venvs/mxnet/bin/python``; when the
default one does not exist the session fixture creates that venv from envs/mxnet.txt.
Everything runs on the CPU: GPU contexts, float16 training and NCCL are not exercised here
(their argument checks are). The dist kvstores run on one node, their parameter servers on
loopback (several nodes: tests/test_slurm_two_nodes.py).
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
from published_counts import TORCHVISION_PUBLISHED

from dlbench import result as R
from dlbench.cellrun import CellError, is_oom
from dlbench.mxnet import reader_choice, runner

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"

# torchvision's counts, which the PyTorch runner's models have (inception3 without its
# auxiliary classifier: 23,834,568).
TORCHVISION_COUNTS = {**TORCHVISION_PUBLISHED, "inception3": 23_834_568}
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


# A helper that has not finished after this prints every thread's stack and exits (so that
# a hang, say in a worker pool, fails its test with where it hung instead of a timeout).
HELPER_STACKS_AFTER_S = 150


def run_helper(python: Path, code: str) -> str:
    watchdog = ("import faulthandler\n"
                f"faulthandler.dump_traceback_later({HELPER_STACKS_AFTER_S}, exit=True)\n")
    done = subprocess.run([str(python), "-c", watchdog + textwrap.dedent(code)],
                          capture_output=True, text=True, cwd=REPO, env=_env(),
                          timeout=HELPER_STACKS_AFTER_S + 60)
    assert done.returncode == 0, done.stderr[-6000:]
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
    assert args.data_reader == "auto"
    assert runner.build_parser().parse_args(
        ["--model", "resnet50", "--data_reader", "gluon"]).data_reader == "gluon"
    with pytest.raises(SystemExit):
        runner.build_parser().parse_args(["--model", "resnet50", "--kv_store", "horovod"])
    with pytest.raises(SystemExit):
        runner.build_parser().parse_args(["--model", "resnet50", "--data_reader", "dali"])


@pytest.mark.parametrize("cpus,threads,expected", [
    (2, 1, "native"),   # cap max(2 // 2 - 1, 1) = 1
    (2, 2, "gluon"),
    (4, 4, "gluon"),    # cap 1: ImageRecordIter would decode with one thread
    (8, 3, "native"),   # cap 3
    (8, 4, "gluon"),
    (10, 4, "native"),  # cap 4
    (64, 4, "native"),
])
def test_auto_reader_takes_native_only_while_its_thread_cap_covers(cpus, threads, expected):
    assert reader_choice.choose_reader("auto", threads, cpus=cpus) == expected
    # An explicit reader is kept whatever the host.
    assert reader_choice.choose_reader("native", 16, cpus=2) == "native"
    assert reader_choice.choose_reader("gluon", 1, cpus=64) == "gluon"


def test_reader_thread_cap_and_bad_reader_name():
    assert [reader_choice.native_thread_cap(c) for c in (1, 2, 3, 4, 5, 6, 16)] == \
        [1, 1, 1, 1, 1, 2, 7]
    with pytest.raises(CellError, match="--data_reader 'dali' is not one of auto, native"):
        reader_choice.choose_reader("dali", 1, cpus=4)


def test_mxnet_error_line_drops_the_time_and_source_of_a_logged_check():
    """Each run's same failure read differently: "[04:25:38] ../src/io/x.cc:330: ..."."""
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1\nMXNetError: "
            "[04:25:38] ../src/io/iter_image_recordio_2.cc:330: Check failed: !overflow: "
            "number of input images must be bigger than the batch size")
    assert runner.mxnet_error_line(text) == (
        "Check failed: !overflow: number of input images must be bigger than the batch size")


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
    assert '__results.status__="ok"' in done.stdout and "__results.throughput__=" in done.stdout
    res = read_valid(output)
    phase = "inference" if forward_only == "true" else "training"
    assert res["status"] == "ok" and res["kind"] == "model"
    assert (res["study"], res["cell_id"]) == ("s", "c1")
    assert res["cell"] == {
        "framework": "mxnet", "model": model, "phase": phase, "precision": "float32",
        "batch_size": batch, "num_gpus": 1, "device": "cpu", "data": "synthetic",
        "num_batches": 2, "num_warmup_batches": 1, "kv_store": "device",
        "data_loader_only": False, "model_opts": {},
        # Every model axis of the table: --preprocess_threads is num_loader_threads,
        # cudnn_benchmark MXNet's autotune, the PyTorch-only axes and a synthetic cell's
        # data_reader are None.
        "num_loader_threads": 4, "data_backend": None, "cudnn_benchmark": True,
        "cudnn_fastest": None, "data_shuffle": None, "compile": None,
        "memory_format": None, "num_nodes": 1, "nccl_env": None,
        "warmup_until_steady": False, "data_reader": None}
    env = res["environment"]
    assert env["framework"] == "mxnet" and env["framework_version"].startswith("1.")
    assert "MXNET_CUDNN_AUTOTUNE_DEFAULT" in env["library_flags"]
    (m,) = res["measurements"]
    assert m["pass"] == phase and m["iterations"] == 2 and len(m["times_s"]) == 2
    assert m["items_per_iteration"] == batch
    assert m["parameters"] == {**TORCHVISION_COUNTS, **DLBS_COUNTS}[model]
    assert all(t > 0 for t in m["times_s"]) and m["throughput"] > 0
    assert m["extra"]["contexts"] == ["cpu(0)"]
    # No FLOPs, and why (the report names such cells under its TFLOP/s chart).
    assert m["flops_per_iteration"] is None
    assert m["extra"]["flops_note"] == "not available: MXNet has no FLOP counter"
    # Where its time went, from the MXNet environment too (dlbench.stages is stdlib only).
    stages = res["stages_s"]
    assert {"startup", "environment", "build", "warmup", "measure", "other"} <= set(stages)
    assert stages["measure"] >= sum(m["times_s"])


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
def test_a_cell_may_warm_up_until_its_times_settle(mxnet_python, tmp_path):
    """--warmup_until_steady: at least the harness's window of warm-up iterations, what
    ran recorded in the measurement, as the PyTorch runner does."""
    from dlbench import harness

    done, output = run_cell(mxnet_python, tmp_path, "--model", "deep_mnist", "--batch_size", "2",
                            "--num_batches", "2", "--num_warmup_batches", "1",
                            "--warmup_until_steady=true")
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    warmup = res["measurements"][0]["extra"]["warmup"]
    assert warmup["iterations"] >= harness.STEADY_WINDOW and res["cell"]["warmup_until_steady"]


@pytest.mark.mxnet
@pytest.mark.parametrize("flags,expected", [
    (["--model", "no_such_net"], "unknown model 'no_such_net'"),
    (["--model", "overfeat"], "--model overfeat: not available for mxnet"),
    (["--model", "resnet18", "--dtype", "float16"], "--dtype float16 needs --device gpu"),
    (["--model", "resnet18", "--kv_store", "dist_sync", "--num_nodes", "2"],
     "num_nodes 2 needs a Slurm job of 2 nodes"),
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
    assert '__results.status__="failed"' in done.stdout


@pytest.mark.mxnet
def test_a_data_dir_folder_without_a_record_file_names_both_layouts(mxnet_python, tmp_path):
    """DLBS's train.rec is taken as well as the prepared data.rec: the message says both."""
    out = run_helper(mxnet_python, f"""
        from dlbench.cellrun import CellError
        from dlbench.mxnet import data
        try:
            data.resolve_record({str(tmp_path)!r})
        except CellError as exc:
            print(exc)
    """)
    assert out.strip() == (
        f"--data_dir {tmp_path}: a folder with neither data.rec (python -m dlbench.datasets "
        "recordio's layout: data.rec, data.idx) nor train.rec (DLBS's: train.rec, train.idx)")


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
    (more than the 10 records hold over the run, so epochs restart). Read through a link
    to its folder, the result names the record file itself."""
    linked = tmp_path / "linked"
    linked.symlink_to(record_file.parent, target_is_directory=True)
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "4",
                            "--num_gpus", "2", "--data_dir", str(linked / record_file.name),
                            "--data_loader_only=true", "--preprocess_threads", "2",
                            "--num_batches", "3", "--num_warmup_batches", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    assert res["kind"] == "loader" and res["cell"]["data"] == "tiny"
    (m,) = res["measurements"]
    assert m["pass"] == "loader" and m["items_per_iteration"] == 8 and m["iterations"] == 3
    assert m["extra"]["data_source"] == str(record_file.resolve())
    assert m["extra"]["preprocess_threads"] == 2
    # auto on this host: gluon below 6 usable CPUs (ImageRecordIter's cap is then 1 < 2)
    assert m["extra"]["data_reader_requested"] == "auto"
    assert m["extra"]["data_reader"] == reader_choice.choose_reader("auto", 2)


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


# --- the two RecordIO readers -------------------------------------------------------------

# Flat colours, one per image: any crop of an image keeps its colour, so a batch's pixels
# tell which record they came from. Sizes differ so that crops are drawn per image; 96x72
# lets the gluon reader decode some crops at half size (JPEG draft) for 32x32 outputs.
_SIZES = [(96, 72), (64, 80), (72, 72)]


def _colour(i: int) -> tuple[int, int, int]:
    return (20 + 37 * i % 200, 20 + 91 * i % 200, 20 + 53 * i % 200)


@pytest.fixture(scope="module")
def flat_dataset(mxnet_python, tmp_path_factory) -> Path:
    """Three classes of five flat-colour JPEGs, prepared by ``python -m dlbench.datasets
    recordio`` (data.lst, data.rec, data.idx)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("flat")
    source = root / "images"
    for i in range(15):
        folder = source / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", _SIZES[i % 3], _colour(i)).save(folder / f"img_{i:02d}.jpg",
                                                         quality=95)
    done = subprocess.run([str(mxnet_python), "-m", "dlbench.datasets", "recordio", "--source",
                           str(source), "--out", str(root / "rec"), "--workers", "1"],
                          capture_output=True, text=True, cwd=REPO, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "rec"


def _lst(folder: Path) -> list[tuple[float, tuple[int, int, int]]]:
    """(label, colour) per .lst line, in record order."""
    rows = []
    for line in (folder / "data.lst").read_text().splitlines():
        _, label, relpath = line.split("\t")
        rows.append((float(label), _colour(int(Path(relpath).stem.split("_")[1]))))
    return rows


_READ_BOTH = """
    import json
    import numpy as np
    import mxnet as mx
    from dlbench.mxnet import data
    from dlbench.mxnet.record_loader import GluonRecordReader

    mean = np.array(data.MEAN_RGB).reshape(1, 3, 1, 1)
    std = np.array(data.STD_RGB).reshape(1, 3, 1, 1)
    rec, idx = data.resolve_record({folder!r})
    out = {{}}

    # native, file order, one epoch; the last batch is padded (round_batch)
    it = data.record_iter(rec, idx, batch_size=4, input_shape=(3, 32, 24), threads=1,
                          shuffle=False)
    rows = []
    for batch in it:
        n = 4 - batch.pad
        x = batch.data[0].asnumpy()[:n] * std + mean
        assert x.shape[1:] == (3, 32, 24)
        rows += zip(batch.label[0].asnumpy()[:n].tolist(), x.mean(axis=(2, 3)).tolist())
    out["native"] = rows
    # Its prefetch threads end with it: the Gluon readers below fork their workers, and a
    # fork beside live native threads is what a cell never does (one reader per process).
    del it, batch
    import gc
    gc.collect()

    def gluon_rows(reader, batches=None, devices=False):
        rows, shapes = [], set()
        while batches is None or batches > 0:
            try:
                images, labels = reader.next()
            except StopIteration:
                break
            shapes.add((str(images.dtype), str(labels.dtype), *images.shape[1:]))
            if devices:  # through to_devices: float32 NCHW, normalised, split over 2
                parts = reader.to_devices((images, labels), [mx.cpu(0), mx.cpu(1)],
                                          "float32")
                x = np.concatenate([p[0].asnumpy() for p in parts]) * std + mean
                y = np.concatenate([p[1].asnumpy() for p in parts])
                shapes.add((np.dtype(parts[0][0].dtype).name, np.dtype(parts[0][1].dtype).name,
                            *x.shape[1:]))
                rows += zip(y.tolist(), x.mean(axis=(2, 3)).tolist())
            else:
                rows += zip(labels.tolist(), images.mean(axis=(1, 2)).tolist())
            batches = None if batches is None else batches - 1
        reader.close()
        return rows, sorted(map(list, shapes))

    common = dict(batch_size=4, input_shape=(3, 32, 24))
    out["gluon"], out["gluon_shapes"] = gluon_rows(GluonRecordReader(
        rec, idx, workers=2, shuffle=False, epochs=1, **common))
    out["gluon_devices"], out["device_shapes"] = gluon_rows(GluonRecordReader(
        rec, idx, workers=1, shuffle=False, epochs=1, **common), devices=True)
    # endless and shuffled: 4 batches of 4 = one whole epoch and a first draw of the next
    out["shuffled"], _ = gluon_rows(GluonRecordReader(rec, idx, workers=2, **common),
                                    batches=4)
    out["parts"] = [gluon_rows(GluonRecordReader(rec, idx, workers=1, shuffle=False,
                                                 epochs=1, part_index=p, num_parts=2,
                                                 **common))[0] for p in (0, 1)]
    print(json.dumps(out))
"""


def _distance(colour, other) -> float:
    return max(abs(a - b) for a, b in zip(colour, other, strict=True))


def _assert_rows(rows, expected, tolerance=4.0):
    """Same count, labels and, within JPEG error, colours as ``expected`` in order."""
    assert len(rows) == len(expected)
    for (label, colour), (want_label, want_colour) in zip(rows, expected, strict=True):
        assert label == want_label
        assert _distance(colour, want_colour) <= tolerance


@pytest.mark.mxnet
def test_both_readers_read_every_record_with_its_label(mxnet_python, flat_dataset):
    """Native and gluon readers, file order: every record of the .rec once, the .lst's label
    with the record's own pixels (RGB order, crop and normalisation undone), through the
    host batch and through to_devices; shuffled, one epoch visits each record once; two
    parts are the two halves of the file."""
    expected = _lst(flat_dataset)
    assert len(expected) == 15
    out = json.loads(run_helper(mxnet_python, _READ_BOTH.format(folder=str(flat_dataset)))
                     .strip().splitlines()[-1])
    _assert_rows(out["native"], expected)
    _assert_rows(out["gluon"], expected)
    _assert_rows(out["gluon_devices"], expected)
    assert out["gluon_shapes"] == [["uint8", "float32", 32, 24, 3]]
    assert ["float32", "float32", 3, 32, 24] in out["device_shapes"]
    epoch, after = out["shuffled"][:15], out["shuffled"][15:]
    assert len(after) == 1
    assert [label for label, _ in epoch] != [label for label, _ in expected]  # shuffled
    by_colour = {tuple(c): lab for lab, c in expected}
    seen = []
    for label, colour in epoch:
        nearest = min(by_colour, key=lambda c: _distance(c, colour))  # noqa: B023 (used now)
        assert _distance(nearest, colour) <= 4.0 and by_colour[nearest] == label
        seen.append(nearest)
    assert sorted(seen) == sorted(by_colour)  # each record exactly once
    _assert_rows(out["parts"][0], expected[:7])
    _assert_rows(out["parts"][1], expected[7:])


_CLOSE_MIDWAY = """
    import json
    import multiprocessing.pool
    import time
    from dlbench.mxnet import data, record_loader
    from dlbench.mxnet.record_loader import GluonRecordReader

    rec, idx = data.resolve_record({folder!r})
    seen = []
    real = multiprocessing.pool.Pool.terminate
    decode = record_loader.RingImages.__getitem__

    def slow(self, key):  # the forked workers inherit it: batches still decoding at close
        time.sleep(0.05)
        return decode(self, key)

    record_loader.RingImages.__getitem__ = slow

    def terminate(pool):
        seen.append([r.ready() for r in pending])
        real(pool)

    multiprocessing.pool.Pool.terminate = terminate
    reader = GluonRecordReader(rec, idx, batch_size=4, input_shape=(3, 32, 24), workers=2)
    reader.next()
    pending = list(reader.loader._worker_pool._cache.values())  # the tasks in flight
    reader.close()
    # A pool Gluon already stopped (a batch failed) never finishes its tasks: close() must
    # not wait for them (it would, for its whole deadline).
    stopped = GluonRecordReader(rec, idx, batch_size=4, input_shape=(3, 32, 24), workers=2)
    stopped.next()
    real(stopped.loader._worker_pool)
    waits = []
    multiprocessing.pool.ApplyResult.wait = lambda self, timeout=None: waits.append(timeout)
    stopped.close()
    print(json.dumps({{"pending": len(pending), "ready_at_terminate": seen,
                      "waits_after_stop": len(waits)}}))
"""


@pytest.mark.mxnet
def test_closing_a_gluon_reader_midway_waits_for_its_prefetched_batches_first(
        mxnet_python, flat_dataset):
    """An endless reader closed after one batch still has prefetched batches being
    decoded: close() waits for them before terminating the pool, since a worker stopped
    while sending one back leaves the pool's result queue locked and terminate hangs on
    it (seen once: a test stuck in Pool.terminate for its whole timeout). A pool already
    stopped is not waited for."""
    out = json.loads(run_helper(mxnet_python, _CLOSE_MIDWAY.format(folder=str(flat_dataset)))
                     .strip().splitlines()[-1])
    assert out["pending"] >= 1
    assert out["ready_at_terminate"][0] == [True] * out["pending"]
    assert out["waits_after_stop"] == 0


@pytest.mark.mxnet
@pytest.mark.parametrize("reader,threads", [("native", "1"), ("gluon", "2")])
def test_loader_only_cell_records_its_reader(mxnet_python, tmp_path, flat_dataset, reader,
                                             threads):
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "4",
                            "--data_dir", str(flat_dataset), "--data_loader_only=true",
                            "--data_reader", reader, "--preprocess_threads", threads,
                            "--num_batches", "5", "--num_warmup_batches", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    assert res["cell"]["data_reader"] == reader  # the data_reader axis of the cell
    (m,) = res["measurements"]
    assert m["iterations"] == 5 and m["items_per_iteration"] == 4 and m["throughput"] > 0
    assert m["extra"]["data_reader"] == reader
    assert m["extra"]["data_reader_requested"] == reader
    # each reader's own prefetch unless DLBS's --prefetch_buffer says (below)
    assert m["extra"]["prefetch_buffer"] == (4 if reader == "gluon" else None)
    if reader == "gluon":
        assert m["extra"]["loader_workers"] == 2 and m["extra"]["decoder"] == "opencv"
    else:
        assert m["extra"]["decode_threads_requested"] == 1


@pytest.mark.mxnet
@pytest.mark.parametrize("reader", ["native", "gluon"])
def test_dlbs_prefetch_buffer_is_taken_by_either_reader(mxnet_python, tmp_path, flat_dataset,
                                                        reader):
    """DLBS's benchmarks.py takes --prefetch_buffer (batches decoded ahead); here it was an
    argparse error."""
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "2",
                            "--data_dir", str(flat_dataset), "--data_loader_only=true",
                            "--data_reader", reader, "--preprocess_threads", "1",
                            "--prefetch_buffer", "3", "--num_batches", "2",
                            "--num_warmup_batches", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    (m,) = read_valid(output)["measurements"]
    assert m["extra"]["prefetch_buffer"] == 3


@pytest.mark.mxnet
def test_training_cell_on_the_gluon_reader(mxnet_python, tmp_path, flat_dataset):
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "2",
                            "--data_dir", str(flat_dataset), "--data_reader", "gluon",
                            "--preprocess_threads", "2", "--num_batches", "2",
                            "--num_warmup_batches", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    (m,) = res["measurements"]
    assert res["status"] == "ok" and m["pass"] == "training" and m["iterations"] == 2
    assert m["extra"]["data_reader"] == "gluon" and m["extra"]["loader_workers"] == 2
    assert 0 <= m["data_wait_s"] <= sum(m["times_s"])
    assert res["extra"]["data_manifest"]["count"] == 15


def write_records_with_one_bad(python: Path, folder: Path, count: int, bad: int) -> None:
    """bad.rec/bad.idx in ``folder``: ``count`` small JPEG records, record ``bad`` no image."""
    run_helper(python, f"""
        import io
        from PIL import Image
        from mxnet import recordio
        out = recordio.MXIndexedRecordIO({str(folder / "bad.idx")!r},
                                         {str(folder / "bad.rec")!r}, "w")
        for i in range({count}):
            buf = io.BytesIO()
            Image.new("RGB", (40, 40), (i * 10, 0, 0)).save(buf, format="JPEG")
            payload = b"not an image" if i == {bad} else buf.getvalue()
            out.write_idx(i, recordio.pack(recordio.IRHeader(0, float(i), i, 0), payload))
        out.close()
    """)


@pytest.mark.mxnet
@pytest.mark.parametrize("reader", ["gluon", "native"])
def test_either_reader_names_the_file_of_an_undecodable_record_in_one_line(
        mxnet_python, tmp_path, reader):
    """A record whose payload is no image: the gluon reader's worker names the file and
    record; ImageRecordIter's OpenCV assertion ("!ssize.empty() in function 'resize'")
    named neither, and now names the file and how to find the record."""
    write_records_with_one_bad(mxnet_python, tmp_path, count=4, bad=2)
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--batch_size", "2",
                            "--data_dir", str(tmp_path / "bad.rec"), "--data_loader_only=true",
                            "--data_reader", reader, "--preprocess_threads", "1",
                            "--num_batches", "3", "--num_warmup_batches", "0")
    assert done.returncode == 1
    res = read_valid(output)
    assert res["status"] == "failed" and "\n" not in res["error"]
    assert res["error"] == {
        "gluon": f"{tmp_path / 'bad.rec'} record 2: unreadable image (OpenCV cannot decode it)",
        "native": f"{tmp_path / 'bad.rec'}: MXNet's native reader met a record OpenCV cannot "
                  f"decode; python -m dlbench.datasets check --format recordio {tmp_path} "
                  "names it (or --data_reader gluon)"}[reader]


@pytest.mark.mxnet
def test_a_set_too_small_for_the_native_readers_batch_takes_gluon_or_fails_in_one_line(
        mxnet_python, tmp_path):
    """ImageRecordIter fills a batch from two epochs at most: 4 records serve batch 8, not
    9, which failed with "[time] ../src/io/iter_image_recordio_2.cc:330: Check failed:
    !overflow: ..." and a traceback, on the native reader only (auto picks it on a large
    host). auto now takes gluon; native asked for is one line."""
    write_records_with_one_bad(mxnet_python, tmp_path, count=4, bad=-1)
    common = ["--model", "resnet18", "--data_dir", str(tmp_path / "bad.rec"),
              "--data_loader_only=true", "--preprocess_threads", "1", "--num_batches", "1",
              "--num_warmup_batches", "0"]
    done, output = run_cell(mxnet_python, tmp_path, *common, "--batch_size", "8",
                            "--data_reader", "native")
    assert done.returncode == 0, done.stderr[-3000:]
    done, output = run_cell(mxnet_python, tmp_path, *common, "--batch_size", "9",
                            "--data_reader", "native")
    assert done.returncode == 1
    assert read_valid(output)["error"] == (
        "--data_reader native: MXNet's native RecordIO reader needs half a batch of records "
        f"(5 for --batch_size 9); {tmp_path / 'bad.idx'} lists 4 (--data_reader gluon reads "
        "it, or a smaller batch)")
    done, output = run_cell(mxnet_python, tmp_path, *common, "--batch_size", "9",
                            "--data_reader", "auto")
    assert done.returncode == 0, done.stderr[-3000:]
    (m,) = read_valid(output)["measurements"]
    assert (m["extra"]["data_reader"], m["extra"]["data_reader_requested"]) == ("gluon", "auto")
    assert reader_choice.native_shortfall(tmp_path / "bad.idx", 8, parts=2) == (
        "MXNet's native RecordIO reader needs half a batch of records (4 for --batch_size 8) "
        f"for each of 2 workers; {tmp_path / 'bad.idx'} lists 4")


@pytest.mark.mxnet
def test_an_undecodable_record_stops_the_gluon_workers_before_it_is_raised(
        mxnet_python, tmp_path):
    """A record no worker can decode reaches the reader as a value, not as the worker's
    exception: Gluon would terminate its pool at once on it, while other workers may be
    sending prefetched batches back, and such a terminate can wait for ever on the pool's
    locked result queue (a cell that hangs until its timeout). The reader stops its
    workers itself, the batches in flight waited for, then raises the record's error."""
    write_records_with_one_bad(mxnet_python, tmp_path, count=16, bad=5)
    out = run_helper(mxnet_python, f"""
        from dlbench.datasets.errors import DatasetError
        from dlbench.mxnet.record_loader import GluonRecordReader
        rec, idx = {str(tmp_path / "bad.rec")!r}, {str(tmp_path / "bad.idx")!r}
        reader = GluonRecordReader(rec, idx, batch_size=2, input_shape=(3, 32, 32), workers=2,
                                   shuffle=False)
        try:
            for _ in range(8):
                reader.next()
        except DatasetError as exc:
            print(exc)
        print(reader.loader._worker_pool)
    """)
    assert out.splitlines() == [f"{tmp_path / 'bad.rec'} record 5: unreadable image "
                                "(OpenCV cannot decode it)", "None"]


@pytest.mark.mxnet
def test_failed_preparation_marker_is_the_error_for_either_reader(mxnet_python, tmp_path):
    folder = tmp_path / "prepared"
    folder.mkdir()
    (folder / "preparation-error.txt").write_text("source/x.jpg: unreadable image\n")
    done, output = run_cell(mxnet_python, tmp_path, "--model", "resnet18", "--data_dir",
                            str(folder), "--data_reader", "gluon")
    res = read_valid(output)
    assert done.returncode == 1 and "\n" not in res["error"]
    assert res["error"] == (f"{folder}: dataset was not prepared: "
                            "source/x.jpg: unreadable image")


def _parameter_server_processes() -> list[str]:
    """Scheduler and server processes of ps-lite (``python -c "import mxnet"``) running."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"import mxnet" in args and b"-c" in args:
            found.append(cmdline.parent.name)
    return found


@pytest.mark.mxnet
@pytest.mark.parametrize("kv_store", ["dist_sync", "dist_async"])
def test_a_dist_kvstore_cell_starts_its_parameter_servers_and_leaves_none(
        mxnet_python, tmp_path, kv_store):
    """Seed 002's dist kvstores on a workstation: dlbench starts ps-lite's scheduler and a
    server on loopback, the worker trains through them, and all of them are gone after."""
    before = set(_parameter_server_processes())
    done, output = run_cell(mxnet_python, tmp_path, "--model", "deep_mnist", "--batch_size",
                            "4", "--num_batches", "3", "--num_warmup_batches", "1",
                            "--kv_store", kv_store)
    assert done.returncode == 0, done.stderr[-3000:]
    res = read_valid(output)
    assert res["status"] == "ok" and res["cell"]["kv_store"] == kv_store
    (m,) = res["measurements"]
    assert m["extra"]["num_workers"] == 1 and m["extra"]["rank"] == 0
    assert m["iterations"] == 3 and m["throughput"] > 0
    assert set(_parameter_server_processes()) <= before
    # No workers' parts left; the worker's monitor series is the cell's.
    assert sorted(p.name for p in tmp_path.iterdir()) == [output.name, "result.monitor.csv"]
    assert res["extra"]["monitor"]["series_file"] == "result.monitor.csv"


@pytest.mark.mxnet
def test_a_dist_cell_that_fails_on_its_input_keeps_the_workers_mxnet_environment(
        mxnet_python, tmp_path):
    """The failed result was built in the launching process, which never imports MXNet: the
    row had no MXNet version, though the worker had recorded it. The worker's environment
    is kept, and no parameter server outlives the cell."""
    before = set(_parameter_server_processes())
    done, output = run_cell(mxnet_python, tmp_path, "--model", "deep_mnist", "--device", "cpu",
                            "--dtype", "float16", "--kv_store", "dist_sync")
    assert done.returncode == 1
    res = read_valid(output)
    assert res["status"] == "failed" and "float16" in res["error"]
    assert res["environment"]["framework_version"].startswith("1.")
    assert "__mxnet.version__=" in done.stdout
    assert set(_parameter_server_processes()) <= before
