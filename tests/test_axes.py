"""The one axis table (dlbench.axes): schema, launcher, runners and Parquet follow it."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from dlbench import aggregate, axes, cli, kinds, launch, study
from dlbench import result as R
from dlbench.pytorch import runner as pytorch_runner

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


@pytest.mark.parametrize("kind", kinds.names())
def test_config_schema_states_the_axes_of_the_table(kind):
    assert SCHEMA["$defs"][f"grid_{kind}"]["properties"] == \
        axes.schema_fragment(kind)["properties"]


def test_config_schema_knows_every_cell_kind_for_defaults_and_grids():
    """A kind missing from the schema's defaults is refused there; one missing from the
    if/then chain has its grid checked as a model cell's."""
    assert sorted(SCHEMA["properties"]["defaults"]["properties"]) == sorted(kinds.names())
    branch, chained = SCHEMA["properties"]["studies"]["additionalProperties"], []
    while "if" in branch:
        chained.append(branch["if"]["properties"]["kind"]["const"])
        branch = branch["else"]
    assert sorted([*chained, "model"]) == sorted(kinds.names())
    jsonschema.validate({"defaults": {"comms": {"iterations": 5}},
                         "studies": {"c": {"kind": "comms", "grid": {}}}}, SCHEMA)


def test_the_schema_checks_an_axis_type_by_the_study_kind():
    ok = {"studies": {"o": {"kind": "ops", "grid": {"op_config": "x.json", "warmup": 3}}}}
    jsonschema.validate(ok, SCHEMA)
    with pytest.raises(jsonschema.ValidationError, match="warmup|3.5"):
        bad = {"studies": {"o": {"kind": "ops", "grid": {"op_config": "x.json", "warmup": 3.5}}}}
        jsonschema.validate(bad, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"studies": {"m": {"grid": {"model": "x", "batch_size": "8"}}}},
                            SCHEMA)


def test_parquet_columns_are_the_table_axes_in_table_order():
    names = [name for name, _ in aggregate.CELL_COLUMNS]
    assert names == [a.name for a in axes.TABLE if a.column and a.type is not dict]
    assert "cuda_l2_cache" in names and "iterations" not in names  # a measurement column


@pytest.mark.parametrize("framework,model", [("pytorch", "resnet50"), ("mxnet", "resnet50")])
def test_a_runner_reads_back_the_cell_the_launcher_described(framework, model, tmp_path):
    """Cell -> launcher argv -> the runner's own parser -> the cell again, for every axis."""
    grid = {"framework": framework, "model": model, "phase": "inference",
            "precision": "float16", "batch_size": 8, "num_gpus": 2, "device": "gpu",
            "data": "imgs", "num_batches": 7, "num_warmup_batches": 3,
            "num_loader_threads": 2, "data_loader_only": False,
            "model_opts": {}}
    if framework == "pytorch":
        grid.update(data_backend="image_folder", cudnn_benchmark=False, data_shuffle=True)
    else:
        grid.update(kv_store="nccl")
    (cell,) = study.expand_config({"studies": {"s": {"grid": grid}},
                                   "datasets": {"imgs": {"synthetic": {}}}})
    cmd = launch.runner_command(json.loads(cell.to_json()), tmp_path / "r.json", "py",
                                data_dir="results/datasets/imgs/x")
    parser = cli.model_runner_parser("runner", framework)
    args, _ = parser.parse_known_args(cmd[3:])
    assert axes.cell_from_args("model", framework, framework, args) == \
        axes.recorded("model", cell.params)


def test_unused_axes_are_blank_in_ids_and_records_as_before():
    (pt,) = study.expand_config({"studies": {"s": {"grid": {"model": "deep_mnist"}}}})
    (mx,) = study.expand_config({"studies": {"s": {"grid": {"model": "deep_mnist",
                                                             "framework": "mxnet"}}}})
    assert pt.params["kv_store"] is None and pt.params["data_backend"] is None
    # The first release kept PyTorch-only flags in MXNet cells' ids: they stay there...
    assert mx.params["cudnn_fastest"] is False and mx.params["kv_store"] == "device"
    # ...but a result records what the runner used (cudnn_benchmark: MXNet's autotune).
    assert axes.recorded("model", mx.params)["cudnn_fastest"] is None
    assert axes.recorded("model", mx.params)["cudnn_benchmark"] is True


def test_a_test_only_axis_added_in_one_row_reaches_id_runner_and_parquet(monkeypatch, tmp_path):
    """One row in the table: the study takes it, the cell id changes with it, the launcher
    passes it to the PyTorch runner, whose parser and parse-back know it, and the
    aggregate has its column. Runs one real deep_mnist cell on the CPU in this process."""
    row = axes.Axis("test_only_knob", int, 0, minimum=0, since=3,
                    flags={"pytorch": axes.Flag("--test_only_knob")})
    monkeypatch.setattr(axes, "TABLE", (*axes.TABLE, row))
    monkeypatch.setitem(axes._BY_NAME, row.name, row)
    monkeypatch.setattr(aggregate, "CELL_COLUMNS", [
        (name, aggregate._ARROW[kind]) for name, kind in axes.columns()])
    monkeypatch.setattr(aggregate, "SCHEMA", aggregate.build_schema())
    grid = {"model": "deep_mnist", "device": "cpu", "batch_size": 2, "num_batches": 2,
            "num_warmup_batches": 0, "test_only_knob": [0, 3]}
    default, set_ = study.expand_config({"studies": {"s": {"grid": grid}}})
    assert default.id.endswith(study.expand_config({"studies": {"s": {"grid": {
        k: v for k, v in grid.items() if k != "test_only_knob"}}}})[0].id.rsplit("_", 1)[1])
    assert set_.id != default.id
    with pytest.raises(study.ConfigError, match="study 's': test_only_knob: must be >= 0"):
        study.expand_config({"studies": {"s": {"grid": {**grid, "test_only_knob": -1}}}})

    out = tmp_path / "s" / "cells" / f"{set_.id}.json"
    cmd = launch.runner_command(json.loads(set_.to_json()), out, "py")
    assert "--test_only_knob=3" in cmd
    assert pytorch_runner.main([*cmd[3:], "--count_flops=false",
                                "--monitor_interval_ms=0"]) == 0
    res = R.read(out)
    assert res["status"] == "ok" and res["cell"]["test_only_knob"] == 3
    table = aggregate.build_table([out])
    assert table.column("test_only_knob").to_pylist() == [3]


def test_an_unused_bool_axis_value_is_refused_as_the_yaml_spells_it(monkeypatch):
    """A framework without an axis refuses a value other than its default, quoting it as
    the study wrote it: true, not Python's True."""
    row = axes.Axis("test_only_switch", bool, False, frameworks=("pytorch",),
                    refuse_unused=True, since=3)
    monkeypatch.setattr(axes, "TABLE", (*axes.TABLE, row))
    monkeypatch.setitem(axes._BY_NAME, row.name, row)
    grid = {"framework": "mxnet", "model": "resnet18", "test_only_switch": True}
    with pytest.raises(study.ConfigError) as info:
        study.expand_config({"studies": {"s": {"grid": grid}}})
    assert str(info.value) == ("study 's': test_only_switch: mxnet has no test_only_switch "
                               "true (pair mxnet/true; only pytorch cells take it)")


def test_flags_decode_what_they_encode():
    flag = axes.Flag("--forward_only", "bool", values={"training": False, "inference": True})
    assert flag.encode("inference") == ["--forward_only=true"]
    parsed = argparse.ArgumentParser()
    cli.add_bool(parsed, "--forward_only", False, "x")
    assert flag.decode(parsed.parse_args(["--forward_only=true"]).forward_only) == "inference"
    assert axes.Flag("-b", "switch").encode(False) == []
    assert axes.Flag("--model_opts", "json").encode({}) == []


@pytest.mark.parametrize("main", sorted(
    p.parent.name for p in (REPO / "src/dlbench").glob("*/__main__.py")))
def test_every_command_prints_its_help(main):
    """``python -m dlbench.<command> --help`` prints the help and exits 0: argparse
    %-formats help texts, so an axis's "5%" must reach it doubled."""
    done = subprocess.run([sys.executable, "-m", f"dlbench.{main}", "--help"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr[-500:]
    assert "usage:" in done.stdout


def test_a_size_written_as_the_command_line_takes_it_says_the_number_to_write():
    """PARAM's sizes with units (--e 256M) are the command line's form; a study takes
    numbers, and its error said only "must be an integer". A number given to a list-valued
    string axis (a grid's list of message sizes, one cell each) says how to write a list."""
    def problem(grid):
        with pytest.raises(study.ConfigError) as info:
            study.expand_config({"studies": {"s": {"kind": "comms", "grid": {
                "device": "cpu", **grid}}}})
        return str(info.value)

    assert problem({"end_size": "256M"}) == (
        "study 's': end_size: must be an integer, got '256M' (write 268435456: 256M is the "
        "command line's --e form)")
    assert problem({"end_size": "lots"}) == "study 's': end_size: must be an integer, got 'lots'"
    assert problem({"message_sizes": [1024, 2048]}) == (
        "study 's': message_sizes: must be a string, got 1024 (several values are one string "
        "here, comma-separated: '1024,2048'; a list in a grid makes one cell per value)")
    assert problem({"nccl_env": 1}) == "study 's': nccl_env: must be a string, got 1"
    assert problem({"collective": "pt2pt", "src_ranks": [0, 2]}).endswith(
        "a list in a grid makes one cell per value)")
