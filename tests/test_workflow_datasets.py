"""A study over one small synthetic dataset in all three storage formats, end to end:
the dataset rules prepare an ImageFolder, a Caffe LMDB and MXNet RecordIO, and PyTorch
(image_folder, caffe_lmdb) and MXNet (RecordIO) cells train on them."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MXNET_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"

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
