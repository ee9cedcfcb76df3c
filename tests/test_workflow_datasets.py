"""A study over one small synthetic dataset in all three storage formats, end to end:
the dataset rules prepare an ImageFolder, a Caffe LMDB and MXNet RecordIO, and PyTorch
(image_folder, caffe_lmdb) and MXNet (RecordIO) cells train on them. Then what goes wrong
around them: a prepared LMDB cut short, a source tree edited in place, no MXNet env."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dlbench import result as R
from dlbench import workflow_support
from dlbench.datasets import check, failure, synthetic

REPO = Path(__file__).resolve().parents[1]
MXNET_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]

pytestmark = pytest.mark.slow


def test_cells_on_every_storage_format(tmp_path):
    if not MXNET_PYTHON.exists():
        pytest.skip("the MXNet environment .venvs/mxnet is missing (make mxnet-env)")
    broken = tmp_path / "broken_images" / "cats"
    broken.mkdir(parents=True)
    (broken / "cat1.jpg").write_bytes(b"\xff\xd8 this is not really a JPEG")
    config = {
        "frameworks": {"mxnet": {"python": str(MXNET_PYTHON)}},
        "datasets": {"broken": {"path": str(broken.parent)}, "tiny": {
            "synthetic": {"classes": 3, "images_per_class": 8, "image_size": 80, "seed": 7},
            "convert": {"resize": 72, "quality": 90, "shuffle": True},
            "lmdb": {"encoded": True},
        }},
        "studies": {
            "real": {"grid": {
                "framework": "pytorch", "model": "resnet18", "data": "tiny",
                "data_backend": ["image_folder", "caffe_lmdb"], "device": "cpu",
                "batch_size": 4, "num_batches": 2, "num_warmup_batches": 1,
                "num_loader_threads": 1}},
            "real_mx": {"grid": {
                "framework": "mxnet", "model": "resnet18", "data": "tiny", "device": "cpu",
                "batch_size": 4, "num_batches": 2, "num_warmup_batches": 1,
                "num_loader_threads": 1}},
            "bad_data": {"grid": {
                "framework": "pytorch", "model": "resnet18", "data": "broken",
                "data_backend": "caffe_lmdb", "device": "cpu", "batch_size": 1,
                "num_batches": 1, "num_warmup_batches": 0, "num_loader_threads": 0}},
            "loader": {"grid": {
                "framework": "pytorch", "model": "resnet18", "data": "tiny",
                "data_backend": "caffe_lmdb", "data_loader_only": True, "device": "cpu",
                "batch_size": 4, "num_batches": 3, "num_warmup_batches": 1,
                "num_loader_threads": 1}},
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"),
         "--cores", "2", "results/benchmarks.parquet"],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    datasets = tmp_path / "results" / "datasets" / "tiny"
    for fmt in ("image_folder", "caffe_lmdb", "recordio"):
        assert (datasets / fmt / "manifest.json").exists(), fmt
    rows = pq.read_table(tmp_path / "results" / "benchmarks.parquet").to_pylist()
    (bad,) = [r for r in rows if r["study"] == "bad_data"]
    assert bad["status"] == "failed" and "\n" not in bad["error"]
    assert "dataset was not prepared" in bad["error"] and "cat1.jpg" in bad["error"]
    rows = [r for r in rows if r["study"] != "bad_data"]
    by = {(r["framework"], r["data_backend"], r["kind"]): r for r in rows}
    assert set(by) == {("pytorch", "image_folder", "model"), ("pytorch", "caffe_lmdb", "model"),
                       ("mxnet", None, "model"), ("pytorch", "caffe_lmdb", "loader")}
    for row in rows:
        assert row["status"] == "ok", (row["cell_id"], row["error"])
        assert row["data"] == "tiny" and row["throughput"] > 0
        manifest = json.loads(row["extra"])["data_manifest"]
        assert manifest["count"] == 24 and len(manifest["classes"]) == 3
    loader = by[("pytorch", "caffe_lmdb", "loader")]
    assert loader["pass"] == "loader" and loader["data_wait_s"] > 0
    assert by[("pytorch", "image_folder", "model")]["data_wait_s"] is not None


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, "--directory", str(workdir), "--configfile",
                           str(workdir / "config.yaml"), "--cores", "2", *args],
                          capture_output=True, text=True, timeout=600)


def _tiny_study(framework: str, data: str, **grid) -> dict:
    return {"grid": {"framework": framework, "model": "resnet18", "data": data,
                     "device": "cpu", "batch_size": 1, "num_batches": 1,
                     "num_warmup_batches": 0, "num_loader_threads": 0, **grid}}


LMDB_TARGET = "results/datasets/mine/caffe_lmdb"


def _prepared_from_a_user_tree(workdir: Path, broken: Path | None = None) -> Path:
    """A user's ImageFolder tree (with ``broken``, relative to it, not a JPEG), and its
    Caffe LMDB prepared by the workflow (whose metadata Snakemake keeps): the tree's root."""
    source = workdir / "images"
    synthetic.generate(source, synthetic.Spec(2, 3, 40, 5))
    if broken:
        (source / broken).write_bytes(b"\xff\xd8 not really a JPEG")
    config = {"datasets": {"mine": {"path": str(source)}},
              "studies": {"pt": _tiny_study("pytorch", "mine", data_backend="caffe_lmdb")}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    first = _snakemake(workdir, LMDB_TARGET)
    assert first.returncode == 0, first.stderr[-4000:]
    return source


def test_a_truncated_lmdb_is_removed_and_prepared_again(tmp_path):
    _prepared_from_a_user_tree(tmp_path)
    data = tmp_path / LMDB_TARGET / "data.mdb"
    full = data.stat().st_size
    with open(data, "r+b") as fh:
        fh.truncate(full // 2)
    again = _snakemake(tmp_path, LMDB_TARGET)
    assert again.returncode == 0, again.stderr[-4000:]
    # Before: "Nothing to be done", and a runner reading it died of SIGBUS.
    assert (f"dlbench: removed {LMDB_TARGET} to prepare it again: {LMDB_TARGET}/data.mdb: "
            f"truncated LMDB: its meta page declares {full} bytes") in again.stderr
    assert "rule dataset_lmdb" in again.stdout + again.stderr
    assert check.check("caffe_lmdb", tmp_path / LMDB_TARGET, sample=0)["count"] == 6


SINFO_ONE_NODE = "#!/bin/sh\necho 'n1|(null)|0|0||'\n"  # a node that holds any job
SUBMIT_AT_ONCE = "#!/bin/sh\nnohup sh \"$1\" >/dev/null 2>&1 &\necho 1\n"  # a stand-in queue


def test_cells_rerun_for_a_dataset_prepared_again_count_in_the_progress_on_a_cluster(tmp_path):
    """On a cluster (the cluster-generic executor, an sinfo that answers), the cells whose
    result was set aside because their dataset was cut short are cells to run like any
    without a result: results/status.txt counts them (before: "0/0 cells done", their
    results set aside after the Slurm check had looked the cells without one up)."""
    _prepared_from_a_user_tree(tmp_path)
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["system"] = "here"
    config["studies"] = {"pt": _tiny_study("pytorch", "mine", data_backend="caffe_lmdb",
                                           data_loader_only=True)}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    (cell,) = workflow_support.expand_cells(config)
    result = tmp_path / workflow_support.result_path(cell, "here")
    res = R.new_result(kind=cell.kind, cell=dict(cell.params), study=cell.study,
                       cell_id=cell.id)
    R.write(R.finish(res, "ok", None), result)
    data = tmp_path / LMDB_TARGET / "data.mdb"
    with open(data, "r+b") as fh:
        fh.truncate(data.stat().st_size // 2)
    bin_dir, submit = tmp_path / "bin", tmp_path / "submit.sh"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO_ONE_NODE)
    submit.write_text(SUBMIT_AT_ONCE)
    for script in (bin_dir / "sinfo", submit):
        script.chmod(0o755)
    proc = subprocess.run(
        [*SNAKEMAKE, "--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"),
         "--executor", "cluster-generic", "--cluster-generic-submit-cmd", str(submit),
         "--jobs", "2", "--latency-wait", "5", str(result.relative_to(tmp_path))],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "running 1 cell(s) reading the removed dataset(s) again" in proc.stderr
    assert len(list((result.parent / "retried").iterdir())) == 1 and result.exists()
    status = (tmp_path / "results" / "status.txt").read_text()
    assert status.startswith("dlbench: 1/1 cells done"), status


def test_a_bad_image_fixed_in_place_prepares_the_dataset_again(tmp_path):
    bad = Path("class_0001/bad.jpg")
    source = _prepared_from_a_user_tree(tmp_path, broken=bad)
    marker = tmp_path / LMDB_TARGET / failure.FILENAME
    assert "bad.jpg: unreadable image" in marker.read_text()
    root_mtime = source.stat().st_mtime_ns
    (source / bad).write_bytes(next((source / "class_0000").glob("*.jpg")).read_bytes())
    assert source.stat().st_mtime_ns == root_mtime  # all that Snakemake sees of its input
    dry = _snakemake(tmp_path, "--dry-run", LMDB_TARGET)
    # Before: "Nothing to be done", the recorded failure kept forever.
    assert "Params have changed" in dry.stdout + dry.stderr, dry.stderr[-3000:]
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["datasets"]["mine"]["convert"] = {"workers": 2}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    fixed = _snakemake(tmp_path, "--printshellcmds", LMDB_TARGET)
    assert fixed.returncode == 0, fixed.stderr[-4000:]
    assert "--workers 2" in fixed.stdout + fixed.stderr
    assert not marker.exists()
    assert check.check("caffe_lmdb", tmp_path / LMDB_TARGET, sample=0)["count"] == 7
    # Another process count writes the same records: nothing to prepare (before: "Params
    # have changed", the dataset prepared again and every cell reading it run again).
    config["datasets"]["mine"]["convert"] = {"workers": 3}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    workers = _snakemake(tmp_path, "--dry-run", LMDB_TARGET)
    assert "Nothing to be done" in workers.stdout + workers.stderr, workers.stderr[-3000:]
    (source / "class_0000" / "added.jpg").write_bytes((source / bad).read_bytes())
    added = _snakemake(tmp_path, "--dry-run", LMDB_TARGET)  # an image added in a class
    assert "Params have changed" in added.stdout + added.stderr, added.stderr[-3000:]


def test_missing_mxnet_env_is_a_recorded_preparation_failure_and_cells_skip(tmp_path):
    venv = tmp_path / "mxnet"  # as envs/mxnet_env.py leaves it without a usable Python
    venv.mkdir()
    (venv / "unavailable.txt").write_text("MXNet 1.9.1 needs Python 3.8 to 3.11; none here\n")
    config = {
        "frameworks": {"mxnet": {"python": str(venv / "bin" / "python")}},
        "datasets": {"tiny": {"synthetic": {"classes": 2, "images_per_class": 2,
                                            "image_size": 16, "seed": 1}}},
        "studies": {"mx": _tiny_study("mxnet", "tiny")},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = _snakemake(tmp_path, "results/benchmarks.parquet")
    assert proc.returncode == 0, proc.stderr[-4000:]  # exit 127 of the shell before
    marker = (tmp_path / "results/datasets/tiny/recordio" / failure.FILENAME).read_text()
    assert str(venv / "bin" / "python") in marker and "none here" in marker
    (row,) = pq.read_table(tmp_path / "results" / "benchmarks.parquet").to_pylist()
    assert row["status"] == "skipped" and "none here" in row["error"], row["error"]
