"""Cell ids never change: a results/ folder made by an earlier release must still give
"Nothing to be done". tests/data/cell_ids/v1.json.gz holds the ids the first release gave
every cell of the shipped configs and of a grid that touches every axis value."""

import gzip
import json
from pathlib import Path

import pytest
import yaml

from dlbench import axes, study

ROOT = Path(__file__).resolve().parents[1]
SAVED = json.loads(gzip.decompress((ROOT / "tests/data/cell_ids/v1.json.gz").read_bytes()))

EVERY_AXIS = {
    "studies": {
        "allaxes": {
            "grid": {
                "framework": ["pytorch", "mxnet"], "model": ["resnet50", "deep_mnist"],
                "phase": ["training", "inference"], "precision": ["float32", "float16"],
                "batch_size": [1, 64], "num_gpus": [1, 4], "device": ["gpu"],
                "data": ["synthetic", "imgs"], "data_backend": ["caffe_lmdb", "image_folder"],
                "kv_store": ["device", "nccl"], "cudnn_benchmark": [True, False],
                "data_loader_only": [False, True], "num_loader_threads": [0, 4]},
            # deep_mnist on a dataset (never able to run) became a config error later.
            "exclude": [{"data": "synthetic", "data_loader_only": True},
                        {"model": "deep_mnist", "data": "imgs"}]},
        "ops": {
            "kind": "ops",
            "grid": {"op_config": ["config/ops/gvprof_units.json"], "device": ["cpu", "gpu"],
                     "backward": [False, True],
                     "exec_mode": ["discrete", "continuous", "continuous_events"],
                     "cuda_l2_cache": ["on", "off"]},
            # a GPU's L2 flushed on the CPU (never done, but recorded) became a config error
            "exclude": [{"device": "cpu", "cuda_l2_cache": "off"}]}},
    "datasets": {"imgs": {"synthetic": {"classes": 2, "images_per_class": 2, "image_size": 32,
                                        "seed": 1}}},
}


# The default study as the first release shipped it: config/config.yaml itself has since
# lost cells (to keep `make run` short), and a smaller grid proves less.
FROZEN = {"config/config.yaml": "tests/data/cell_ids/config.v1.yaml"}


def shipped(path):
    cfg = yaml.safe_load((ROOT / FROZEN.get(path, path)).read_text())
    for spec in cfg["studies"].values():
        spec.pop("precisions", None)  # every cell, whatever this CPU computes natively
    for spec in (cfg.get("datasets") or {}).values():
        if spec and spec.get("path"):
            spec["path"] = str(ROOT)  # a user's folder need not exist here
    return cfg


@pytest.mark.parametrize("name", sorted(SAVED))
def test_cell_ids_are_those_of_the_first_release(name):
    cfg = EVERY_AXIS if name == "grid" else shipped(name)
    # Calibration cells (calibrate: true) came later: new cells, beside the unchanged ones.
    ids = [f"{c.study}/{c.id}" for c in study.expand_config(cfg)
           if c.study != study.CALIBRATION_STUDY]
    assert ids == [i for i in SAVED[name] if not ("_deep-mnist_" in i and "_imgs_" in i)
                   and i not in REFUSED_IDS]
    assert name != "grid" or any("_resnet50_" in i and "_imgs_" in i for i in ids)


def test_an_axis_added_later_keeps_old_ids_at_its_default(monkeypatch):
    """A row with since=2 leaves every id unchanged while it holds its default; another
    value gives another id."""
    row = axes.Axis("test_only_mode", str, "plain", choices=("plain", "fancy"), since=2)
    monkeypatch.setattr(axes, "TABLE", (*axes.TABLE, row))
    monkeypatch.setitem(axes._BY_NAME, row.name, row)
    base = {"model": "deep_mnist", "device": "cpu"}
    (old,) = study.expand_config({"studies": {"s": {"grid": base}}})
    (new,) = study.expand_config({"studies": {"s": {"grid": {**base,
                                                            "test_only_mode": "fancy"}}}})
    assert old.params["test_only_mode"] == "plain"
    assert old.id == SAVED_DEEP_MNIST and new.id != old.id


# deep_mnist on the CPU with every other axis at its default, as the first release named it.
SAVED_DEEP_MNIST = "pytorch_deep-mnist_training_float32_bs32_cpu1_synthetic_66883ddd"


# What Snakemake records per finished cell and compares (rerun-triggers: params): the cell
# as JSON. tests/data/cell_ids/params.v2.json.gz holds it for every cell of the shipped
# configs as release 2 gave it; an axis added since must leave it as it was at its default.
SAVED_PARAMS = json.loads(gzip.decompress(
    (ROOT / "tests/data/cell_ids/params.v2.json.gz").read_bytes()))


def _current(path):
    cfg = yaml.safe_load((ROOT / path).read_text())
    for spec in cfg["studies"].values():
        spec.pop("precisions", None)
    for spec in (cfg.get("datasets") or {}).values():
        if spec and spec.get("path"):
            spec["path"] = "."
    return cfg


@pytest.mark.parametrize("name", sorted(SAVED_PARAMS))
def test_job_parameters_are_those_of_release_2(name):
    if name.startswith("now:"):
        # The shipped config as it is now: its studies of release 2 give the same jobs; a
        # study added to it since has no saved jobs to keep.
        saved = {json.loads(cell)["study"] for cell in SAVED_PARAMS[name]}
        cells = [c for c in study.expand_config(_current(name.removeprefix("now:")))
                 if c.study in saved]
    else:
        cfg = EVERY_AXIS if name == "grid" else shipped(name)
        cells = [c for c in study.expand_config(cfg) if c.study != study.CALIBRATION_STUDY]
    assert [c.to_json() for c in cells] == [
        job for job in SAVED_PARAMS[name] if not _refused_later(json.loads(job))]


def _refused_later(job):
    """Saved jobs a later release refuses: deep_mnist on images (it takes none), an
    operator cell flushing a GPU's L2 on the CPU (nothing flushed there)."""
    p = job["params"]
    return (p.get("model") == "deep_mnist" and p.get("data") == "imgs") or (
        p.get("device") == "cpu" and p.get("cuda_l2_cache") == "off")


# Their ids, which the first release gave too.
REFUSED_IDS = {f"{job['study']}/{job['cell_id']}"
               for job in map(json.loads, SAVED_PARAMS["grid"]) if _refused_later(job)}


def test_a_newer_axis_at_a_value_other_than_its_default_is_in_the_job_parameters():
    """The negative control of the test above: num_nodes (release 3) at 2 reaches the job."""
    cfg = {"studies": {"s": {"grid": {"model": "deep_mnist", "num_nodes": [1, 2]}}}}
    one, two = study.expand_config(cfg)
    assert "num_nodes" not in json.loads(one.to_json())["params"]
    assert json.loads(two.to_json())["params"]["num_nodes"] == 2
    assert one.id != two.id and "_2nodes_" in two.id
