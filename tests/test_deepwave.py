"""GVProf's deepwave as a model cell: options and shapes, the FWI step it times, one cell
through the real runner, and GVProf's study config (seed 001)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from dlbench import models, study
from dlbench.models import deepwave as D

pytest.importorskip("deepwave", reason="needs the deepwave package (pip install deepwave)")

from pytorch_cell import run_runner  # noqa: E402

from dlbench.pytorch import data, steps, zoo  # noqa: E402
from dlbench.pytorch.precision import setup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"ny": 40, "nx": 50, "nt": 120, "receivers_per_shot": 10, "pml_width": 10}


def test_the_velocity_model_is_the_only_parameter_and_the_output_has_the_receivers_shape():
    built = zoo.build("deepwave", SMALL)
    assert zoo.parameter_count(built.module) == D.parameter_count({**D.DEFAULT_OPTS, **SMALL})
    assert zoo.parameter_count(built.module) == 40 * 50
    inputs, observed = next(data.synthetic(built, 3, torch.device("cpu"), torch.float32))
    assert inputs.shape == (3, 1, 120) and observed.shape == (3, 10, 120)
    out = built.module(inputs)
    assert out.shape == observed.shape and torch.isfinite(out).all()
    # The true model's anomaly is seen: the background model does not reproduce the data.
    assert (out - observed).abs().max() > 1e-3 * observed.abs().max()
    assert built.throughput_unit == "shots/s" and built.loss == "mse"


def test_a_training_step_is_a_fwi_update_of_the_velocity_within_the_learning_rate():
    built = zoo.build("deepwave", SMALL)
    mode = setup("float32", "cpu")
    before = built.module.velocity.detach().clone()
    step = steps.training_step(built.module, built, mode, "cpu")
    batch = next(data.synthetic(built, 2, torch.device("cpu"), torch.float32))
    step(*batch)
    first = float(step.last_loss.detach())
    changed = (built.module.velocity.detach() - before).abs()
    assert first > 0 and changed.max() > 0
    # Adam moves each cell by at most its learning rate: the propagator's time step holds.
    assert changed.max() <= 1.0 + 1e-4
    for _ in range(3):
        step(*batch)
    assert float(step.last_loss.detach()) < first


def test_shots_sit_on_the_surface_and_receivers_span_it():
    assert D.source_columns(4, 100, 1) == [[12], [37], [62], [87]]
    assert D.source_columns(2, 10, 3) == [[2, 3, 4], [7, 8, 9]]
    assert D.receiver_columns(100, 3) == [0, 50, 99]
    assert D.receiver_columns(100, 1) == [50]


@pytest.mark.parametrize(("opts", "message"), [
    ({"nx": 5}, "nx must be an integer >= 10"),
    ({"dt": 0}, "dt must be a positive number"),
    ({"accuracy": 3}, "accuracy must be one of (2, 4, 6, 8)"),
    ({"receivers_per_shot": 200}, "receivers_per_shot (200) cannot exceed nx (100)"),
    ({"nt": True}, "nt must be an integer >= 1"),
])
def test_bad_options_are_refused_in_one_line(opts, message):
    with pytest.raises(ValueError) as info:
        D.check_opts(models.get("deepwave").opts(opts))
    assert message in str(info.value) and "\n" not in str(info.value)


def config(precision: str) -> dict:
    return {"studies": {"waves": {"grid": {
        "model": "deepwave", "phase": "training", "precision": precision, "batch_size": 2,
        "device": "cpu"}}}}


def test_a_precision_deepwave_lacks_is_refused_at_validation_in_one_line():
    cells = study.expand_config(config("float64"))
    assert [c.params["precision"] for c in cells] == ["float64"]
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(config("bfloat16"))
    text = str(info.value)
    assert "waves" in text and "precision" in text and "float32 or float64 only" in text
    assert "\n" not in text


def test_the_options_check_imports_neither_torch_nor_deepwave():
    code = ("import sys, dlbench.models.deepwave as d; d.check_opts(dict(d.DEFAULT_OPTS)); "
            "sys.exit(1 if {'torch', 'deepwave'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_cell_through_the_runner_records_shots_per_second_and_says_flops_are_not_counted(
        tmp_path):
    done, res = run_runner(tmp_path, "--model=deepwave", "--dtype=float32", "--batch_size=2",
                           "--device=cpu", "--num_batches=3", "--num_warmup_batches=1",
                           f"--model_opts={json.dumps(SMALL)}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert res["status"] == "ok", res["error"]
    (m,) = res["measurements"]
    assert m["throughput_unit"] == "shots/s" and m["items_per_iteration"] == 2
    assert m["parameters"] == 40 * 50 and m["flops_per_iteration"] is None
    assert m["extra"]["flops_note"].startswith("not available")
    assert m["extra"]["loss_finite"] and m["extra"]["grid"] == [40, 50]
    assert '__results.status__="ok"' in done.stdout


def test_gvprofs_study_is_its_three_models_and_unit_kernels_under_hpcrun():
    raw = yaml.safe_load((ROOT / "config" / "examples" / "gvprof.yaml").read_text())
    cells = study.expand_config(raw)
    models_run = sorted(c.params["model"] for c in cells if c.kind == "model")
    assert models_run == ["bert_base", "deepwave", "resnet50"]
    (wave,) = [c.params for c in cells if c.params.get("model") == "deepwave"]
    assert wave["model_opts"]["nx"] == 1000 and wave["batch_size"] == 8
    assert [c.params["op_config"] for c in cells if c.kind == "ops"] == [
        "config/ops/gvprof_units.json"]
    hpcrun = raw["profiling"]["tools"]["hpcrun"]
    assert hpcrun["events"] == ["gpu=nvidia,data_flow"]
    assert set(hpcrun["knobs"]) == {
        "HPCRUN_SANITIZER_READ_TRACE_IGNORE", "HPCRUN_SANITIZER_DATA_FLOW_HASH",
        "HPCRUN_SANITIZER_GPU_ANALYSIS_BLOCKS", "HPCRUN_SANITIZER_GPU_PATCH_RECORD_NUM"}
