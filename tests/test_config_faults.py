"""Careless and hostile configs: each is refused (or warned about) in one line naming the
study and field before any job runs."""

import json
from pathlib import Path

import pytest
import yaml

from dlbench import atomic, config_schema, study, workflow_support
from dlbench import result as R

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"


def grid(**axes):
    return {"studies": {"s": {"grid": {"model": "deep_mnist", "device": "cpu", **axes}}}}


def error_of(config) -> str:
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(config)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_an_integer_beyond_what_its_column_holds_is_refused():
    assert error_of(grid(batch_size=10**23)) == (
        "study 's': batch_size: must be <= 9223372036854775807 (a 64-bit integer column), "
        "got 100000000000000000000000")


def test_a_grid_larger_than_max_cells_is_refused_before_any_cell_is_made(monkeypatch):
    made = []
    monkeypatch.setattr(study, "_check_cell", lambda *a: made.append(a))
    huge = grid(batch_size=list(range(1, 1001)), num_batches=list(range(1, 1001)),
                num_warmup_batches=list(range(0, 10)))
    message = error_of(huge)
    assert message.startswith("study 's': grid: 10,000,000 cells")
    assert "max_cells" in message and not made
    assert "100,000" in message
    # Raised by the config key, and counted over all studies together.
    small = {**grid(batch_size=[1, 2, 3]), "max_cells": 3}
    assert len(study.expand_config(small)) == 3
    two = {"max_cells": 4, "studies": {
        "a": {"grid": {"model": "deep_mnist", "device": "cpu", "batch_size": [1, 2, 3]}},
        "b": {"grid": {"model": "deep_mnist", "device": "cpu", "batch_size": [1, 2]}}}}
    assert error_of(two).startswith("study 'b': grid: 2 cells")
    # each repeat is a run of its own: 3 cells x 2 repeats are 6 runs
    repeated = {**grid(batch_size=[1, 2, 3]), "max_cells": 5, "repeats": 2}
    assert error_of(repeated).startswith(
        "study 's': grid: 3 cells (the product of its axes' value counts) x 2 repeats = 6 "
        "runs is more than max_cells allows (5 left of 5)")
    two["studies"]["a"]["repeats"], two["max_cells"] = 2, 7
    assert error_of(two).startswith("study 'b': grid: 2 cells (the product of its axes' "
                                    "value counts) is more than max_cells allows (1 left")


def test_an_exclude_removing_every_cell_is_refused():
    config = grid(batch_size=[1, 2])
    config["studies"]["s"]["exclude"] = [{"model": "deep_mnist"}]
    assert error_of(config) == "study 's': exclude: removes every cell of the grid"


def test_rules_that_match_nothing_are_warned_about(capsys):
    config = grid(batch_size=[1, 2])
    config["studies"]["s"]["exclude"] = [{"batch_size": 3}, {"batch_size": 2}]
    config["studies"]["s"]["overrides"] = [{"match": {"batch_size": 7}, "set": {"num_batches": 3}}]
    assert len(study.expand_config(config)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["dlbench config warning: study 's': overrides[0]: matches no cell of the grid",
                   "dlbench config warning: study 's': exclude[0]: matches no cell of the grid"]


@pytest.mark.parametrize("name", ["my data", "../x", ".hidden", "a/b"])
def test_a_dataset_name_that_is_not_a_folder_name_is_refused(name):
    config = {"datasets": {name: {"synthetic": {}}}, **grid(data=name)}
    assert error_of(config).startswith(f"dataset '{name}': name: use letters, digits")


def test_a_missing_op_config_is_refused():
    config = {"studies": {"o": {"kind": "ops", "grid": {"op_config": "nowhere/ops.json"}}}}
    assert error_of(config) == "study 'o': op_config: nowhere/ops.json: no such file"


def test_a_file_with_a_brace_a_job_would_read_is_refused_in_one_line(tmp_path):
    """Snakemake reads {x} in an input's path as a wildcard, with no escape: the run would
    stop in a WildcardError naming neither study nor field."""
    ops = tmp_path / "ops{x}.json"
    ops.write_text('{"torch.add": {"input_data_iterator": "ListInputIterator"}}')
    config = {"studies": {"o": {"kind": "ops", "grid": {"op_config": str(ops)}}}}
    assert error_of(config) == (f"study 'o': op_config: {ops}: a brace in the path of a file "
                                "a job reads is a wildcard to Snakemake: rename the file or "
                                "folder")
    tree = tmp_path / "images{split}"
    tree.mkdir()
    config = {"datasets": {"imagenet": {"path": str(tree)}}, **grid(data="imagenet")}
    assert error_of(config) == (f"dataset 'imagenet': path: {tree}: a brace in the path of a "
                                "file a job reads is a wildcard to Snakemake: rename the file "
                                "or folder")


def test_timeout_s_per_study_and_for_the_config():
    config = {**grid(), "timeout_s": 120}
    config["studies"]["t"] = {"timeout_s": 5, "grid": {"model": "deep_mnist", "device": "cpu"}}
    assert workflow_support.timeouts(config) == {"s": 120, "t": 5}
    assert workflow_support.timeouts(grid()) == {"s": study.DEFAULT_TIMEOUT_S}
    config["studies"]["t"]["timeout_s"] = 0
    assert error_of(config) == "study 't': timeout_s: must be a number >= 1, got 0"


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_timeout_that_is_not_finite_is_refused(value):
    # YAML's .inf and .nan: nan passed the minimum (nan < 1 is false), and both then failed
    # the workflow with a traceback when its jobs' time limits were rounded up
    config = {**grid(), "timeout_s": value}
    assert error_of(config) == f"study 's': timeout_s: must be a number >= 1, got {value!r}"


@pytest.mark.parametrize("where", ["config", "study"])
def test_a_timeout_below_one_second_is_refused_by_the_schema_as_by_the_study(where):
    # the schema took anything above 0 while the study asks >= 1: 0.5 passed one, not both
    config = grid()
    (config if where == "config" else config["studies"]["s"])["timeout_s"] = 0.5
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    assert "timeout_s" in str(info.value) and "minimum of 1" in str(info.value)
    assert error_of(config) == "study 's': timeout_s: must be a number >= 1, got 0.5"


HINT = " (YAML reads it as text: write 1000000000 or 1.0e+9, unquoted)"


def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path):
    # PyYAML (YAML 1.1) reads 1e9 as a string: its floats need a dot and a signed exponent
    path = tmp_path / "c.yaml"
    path.write_text("timeout_s: 1e9\nstudies:\n  s:\n    grid: {model: deep_mnist}\n")
    config = yaml.safe_load(path.read_text())
    assert config["timeout_s"] == "1e9"
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    assert str(info.value) == f"timeout_s: must be a number, got '1e9'{HINT}"
    assert error_of(config) == f"study 's': timeout_s: must be a number >= 1, got '1e9'{HINT}"


def test_a_quoted_count_says_how_to_write_it():
    config = {**grid(), "repeats": "3"}
    hint = " (YAML reads it as text: write 3, unquoted)"
    assert error_of(config) == f"study 's': repeats: must be a positive integer, got '3'{hint}"
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    assert str(info.value) == f"repeats: must be an integer, got '3'{hint}"


def test_a_monitor_interval_that_is_not_finite_is_refused_before_any_cell_runs():
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        workflow_support.monitor_option({**grid(), "monitor": {"interval_ms": float("nan")}})
    assert str(info.value) == "monitor.interval_ms: must be a finite number >= 0, got nan"
    assert workflow_support.monitor_option({"monitor": {"interval_ms": 100}}) == [
        "--monitor_interval_ms=100"]


@pytest.mark.parametrize("name", [2024, 1.5, True])
def test_a_study_or_dataset_name_yaml_reads_as_a_number_is_refused(name):
    # 2024: is the integer 2024 to YAML: the cells were named '2024' while repeats,
    # timeouts and calibrate kept the integer, and a study's repeats were silently lost
    config = {"studies": {name: grid()["studies"]["s"]}}
    assert error_of(config) == (
        f"study {name!r}: name: a name is text; quote it in the YAML ('{name}')")
    config = {"datasets": {name: {"synthetic": {}}}, **grid()}
    assert error_of(config) == (
        f"dataset {name!r}: name: a name is text; quote it in the YAML ('{name}')")


@pytest.mark.parametrize("image", ["img.sif;touch${IFS}/tmp/pwned;#", "a b.sif", "$(id).sif",
                                   "x.sif\n", "--writable-tmpfs"])
def test_an_image_holding_what_a_shell_or_apptainer_reads_is_refused(image):
    # Snakemake pastes the image into each containerised job's shell command unquoted,
    # after Apptainer's own options
    config = {**grid(), "frameworks": {"pytorch": {"container": image}}}
    assert error_of(config) == (
        f"config: frameworks.pytorch.container: {image!r}: an image is a path or URI of "
        "letters, digits and ._-/:@+ only, not starting with '-'")


def test_images_by_path_or_uri_are_taken():
    for image in ["docker://nvcr.io/nvidia/pytorch:24.05-py3", "images/pytorch.sif",
                  "oras://ghcr.io/o/img@sha256:0123abcd", "/opt/img/torch+cu12.sif"]:
        config = {**grid(), "frameworks": {"pytorch": {"container": image}}}
        assert len(study.expand_config(config)) == 1


def test_a_local_image_that_is_no_regular_file_is_not_read():
    from dlbench import launch

    assert launch.image_digest("/dev/zero") is None  # was read for ever


def test_an_unknown_top_level_key_is_one_line():
    config = {**grid(), "studeis": {}}
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    message = str(info.value)
    assert message.startswith("config: unknown key 'studeis' (valid: ")
    assert "\n" not in message and len(message) < 300


def test_a_schema_problem_deep_in_the_config_names_its_field():
    config = grid()
    config["monitor"] = {"interval_ms": "often"}
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    assert str(info.value) == "monitor.interval_ms: must be a number, got 'often'"


def test_a_study_given_twice_in_one_file_is_found(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("studies:\n  a:\n    grid: {model: alexnet}\n  b:\n    grid: {}\n"
                    "  a:\n    grid: {model: resnet50}\n")
    assert config_schema.duplicate_keys(path) == [
        f"{path}: line 6: key 'a' is given twice (the last one wins)"]
    path.write_text("studies:\n  a: {grid: {}}\n")
    assert config_schema.duplicate_keys(path) == []


@pytest.mark.parametrize(("value", "statuses"), [
    (True, ("failed",)), ("true", ("failed",)), (False, ()), ("false", ()), (None, ()),
    ("failed,oom", ("failed", "oom")), (["oom"], ("oom",)), (1, ("failed",)), (0, ())])
def test_retry_failed_values(value, statuses):
    """--config retry_failed=1 reaches the config as YAML's integer: it was refused as no
    boolean, though the same word in a string was taken for true."""
    config = {"retry_failed": value, "studies": {"s": {"grid": {}}}}
    if value is not None:  # set by the workflow's code only
        config_schema.validate_config(config, SCHEMA)
    assert workflow_support.retry_statuses(config) == statuses


def test_retry_failed_refuses_an_unknown_status():
    with pytest.raises(workflow_support.WorkflowConfigError, match="unknown status 'ok'"):
        workflow_support.retry_statuses({"retry_failed": "ok"})


def test_results_to_retry_are_the_recorded_failures_and_are_set_aside_kept(tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = study.expand_config(grid(batch_size=[1, 2, 3]))
    for cell, status in zip(cells, ["ok", "failed", "oom"], strict=True):
        res = R.new_result(kind="model", cell=dict(cell.params), study=cell.study,
                           cell_id=cell.id)
        R.write(R.finish(res, status, None if status == "ok" else "broke"),
                workflow_support.result_path(cell, "sys1"))
    (path,) = workflow_support.results_to_retry(cells, ("failed",), "sys1")
    assert path == workflow_support.result_path(cells[1], "sys1")
    assert path.parts[:2] == ("results", "sys1")
    assert len(workflow_support.results_to_retry(cells, ("failed", "oom"), "sys1")) == 2
    assert workflow_support.results_to_retry(cells, ("failed",), "other") == []
    kept = atomic.set_aside(path, "retried")
    assert not path.exists() and kept.parent == path.parent / "retried"
    assert json.loads(kept.read_text())["status"] == "failed"


def test_a_failed_image_folder_cell_runs_again_once_its_tree_changed_after_it(
        tmp_path, monkeypatch):
    """A failed cell reading a user's tree is found when something in the tree changed
    after its result was written; an ok cell, one of another system, and a failed one
    whose result is newer than the tree are left. (Times are set, not waited for: file
    times tick coarsely.)"""
    import os
    import time

    monkeypatch.chdir(tmp_path)
    tree = tmp_path / "tree"
    (tree / "cat").mkdir(parents=True)
    (tree / "cat" / "1.jpg").write_bytes(b"bad")
    config = grid(model="resnet18", data="mine", data_backend="image_folder", batch_size=[1, 2])
    config["datasets"] = {"mine": {"path": str(tree)}}
    cells = study.expand_config(config)
    for cell, status in zip(cells, ["ok", "failed"], strict=True):
        res = R.new_result(kind="model", cell=dict(cell.params), study=cell.study,
                           cell_id=cell.id)
        R.write(R.finish(res, status, None if status == "ok" else "broke"),
                workflow_support.result_path(cell, "sys1"))
    ok, failed = (workflow_support.result_path(cell, "sys1") for cell in cells)
    hour = 3600 * 10**9
    for path in (ok, failed):
        os.utime(path, ns=(time.time_ns() + hour,) * 2)  # written after the tree's change
    assert workflow_support.failed_on_changed_inputs(config, cells, "sys1") == []
    for path in (ok, failed):
        os.utime(path, ns=(time.time_ns() - hour,) * 2)  # written before it
    assert workflow_support.failed_on_changed_inputs(config, cells, "sys1") == [failed]
    assert workflow_support.failed_on_changed_inputs(config, cells, "other") == []


@pytest.mark.parametrize("model", ["deep_mnist", "bert_base"])
def test_a_dataset_for_a_model_that_takes_no_images_is_refused_in_one_line(model, tmp_path):
    config = grid(model=model, data="mine")
    config["datasets"] = {"mine": {"path": str(tmp_path)}}
    assert error_of(config).startswith(f"study 's': data: {model} takes ")
    assert "synthetic data only, not on a dataset (mine)" in error_of(config)


def test_a_trees_last_change_is_its_newest_entry_deep_inside_or_none(tmp_path):
    """An image changed in a class folder leaves the root's own times (all Snakemake
    compares) as they were; its last change is the tree's."""
    import os

    from dlbench.datasets import fingerprint

    image = tmp_path / "tree" / "cat" / "1.jpg"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"x")
    root = image.parents[1]
    late = max(os.stat(p).st_ctime_ns for p in (root, image.parent, image)) + 3600 * 10**9
    os.utime(image, ns=(late, late))
    assert fingerprint.last_change_ns(root) == late > root.stat().st_mtime_ns
    (root / ".swp").write_bytes(b"")  # hidden: not read, but the root's own time moves
    assert fingerprint.last_change_ns(root) == late
    assert fingerprint.last_change_ns(tmp_path / "none") is None


def test_an_op_config_that_is_not_one_is_refused_before_any_job(tmp_path):
    bad = tmp_path / "ops.json"
    bad.write_text("{}")
    config = {"studies": {"o": {"kind": "ops", "grid": {"op_config": str(bad)}}}}
    assert error_of(config) == (f"study 'o': op_config: {bad}: holds no operators (an empty "
                                "JSON object)")


@pytest.mark.parametrize(("name", "why"), [
    ("cells", "a cells/ folder right inside results/<system>/"),
    ("Cells", "a cells/ folder right inside results/<system>/"),  # one folder on macOS
    ("cache", "inductor caches"),
    ("system.json", "records the system's machine")])
def test_a_study_named_as_what_a_systems_folder_holds_is_refused(name, why):
    message = error_of({"studies": {name: {"grid": {"model": "deep_mnist", "device": "cpu"}}}})
    assert message.startswith(f"study '{name}': name: '{name}' is reserved (")
    assert why in message and message.endswith("choose another name")


def test_a_study_named_as_what_results_holds_beside_systems_is_kept():
    """Studies live under results/<system>/: results/'s own folders are no collision."""
    for name in ("logs", "profiles", "datasets", "report", "invalid", "retried"):
        config = {"studies": {name: {"grid": {"model": "deep_mnist", "device": "cpu"}}}}
        assert [c.study for c in study.expand_config(config)] == [name]


def test_a_dataset_named_as_the_datasets_log_folder_is_refused():
    config = {"datasets": {"logs": {"synthetic": {}}}, **grid(data="logs")}
    assert error_of(config).startswith("dataset 'logs': name: 'logs' is reserved (results/"
                                       "datasets/logs/ holds")


def test_a_dataset_named_synthetic_is_refused_its_cells_would_read_no_data():
    """data: synthetic is random tensors: a dataset of that name was accepted and its
    folder never read."""
    config = {"datasets": {"synthetic": {"synthetic": {}}}, **grid(data="synthetic")}
    assert error_of(config).startswith("dataset 'synthetic': name: 'synthetic' is reserved "
                                       "(data: synthetic means random tensors")


def test_a_name_with_a_trailing_newline_is_refused_in_one_line():
    """'$' matches before a final newline: the name would pass, and no job make its files."""
    config = {"studies": {"s1\n": {"grid": {"model": "deep_mnist", "device": "cpu"}}}}
    assert error_of(config) == ("study 's1\\n': name: use letters, digits, '_', '-' and '.' "
                                "only, starting with a letter or digit, at most 128 characters")
    config = {"datasets": {"d\n": {"synthetic": {}}}, **grid(data="d\n")}
    assert error_of(config).startswith("dataset 'd\\n': name: use letters, digits")


def test_a_name_longer_than_a_folder_name_may_be_is_refused_in_one_line():
    """A study's or dataset's name is a folder under results/: 300 characters passed the
    check, and then no job could write its results."""
    long = "s" * 300
    config = {"studies": {long: {"grid": {"model": "deep_mnist", "device": "cpu"}}}}
    assert error_of(config).endswith("at most 128 characters")
    assert study.expand_config({"studies": {"s" * 128: config["studies"][long]}})
    config = {"datasets": {"d" * 129: {"synthetic": {}}}, **grid(data="d" * 129)}
    assert error_of(config).endswith("at most 128 characters")


def schema_error_of(config) -> str:
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("axes", "message"), [
    ({"batch_size": "8"}, "study 's': grid.batch_size: must be an integer or a list of "
                          "integers, got '8' (YAML reads it as text: write 8, unquoted)"),
    ({"batch_size": 8.5}, "study 's': grid.batch_size: must be an integer or a list of "
                          "integers, got 8.5"),
    ({"batch_size": True}, "study 's': grid.batch_size: must be an integer or a list of "
                           "integers, got True"),
    ({"precision": 16}, "study 's': grid.precision: must be a string or a list of strings, "
                        "got 16"),
    ({"batch_size": [1, "2"]}, "study 's': grid.batch_size[1]: must be an integer, got '2' "
                               "(YAML reads it as text: write 2, unquoted)"),
    ({"model_opts": 3}, "study 's': grid.model_opts: must be a mapping or a list of "
                        "mappings, got 3")])
def test_a_value_of_the_wrong_type_names_the_study_field_and_what_is_valid(axes, message):
    assert schema_error_of(grid(**axes)) == message


def test_schema_problems_outside_a_grid_name_their_study_or_field():
    ops = {"studies": {"o": {"kind": "ops", "grid": {"op_config": "x", "backward": "yes"}}}}
    assert schema_error_of(ops) == ("study 'o': grid.backward: must be a boolean (true or "
                                    "false) or a list of booleans, got 'yes'")
    config = grid()
    config["studies"]["s"]["overrides"] = [{"match": 1, "set": {}}]
    assert schema_error_of(config) == "study 's': overrides[0].match: must be a mapping, got 1"
    assert schema_error_of({**grid(), "retry_failed": 3}) == (
        "retry_failed: must be a boolean (true or false), one of (0, 1), a string or a list "
        "of values among (failed, oom, skipped), got 3")
    assert schema_error_of({**grid(), "datasets": {"d": {}}}) == (
        "datasets.d: must be a mapping with path or a mapping with synthetic, got {}")


@pytest.mark.parametrize("key", ["system", "baseline_system"])
def test_a_system_label_of_digits_from_the_command_line_is_its_text(key):
    """Snakemake reads --config system=2024 as the integer 2024; the label is '2024'."""
    config = {**grid(), key: 2024}
    config_schema.validate_config(config, SCHEMA)
    assert config[key] == "2024"
    if key == "system":
        assert workflow_support.system_label(config) == "2024"
    # What does not give back the text typed is still refused.
    for value in (True, 20.5):
        assert schema_error_of({**grid(), key: value}).startswith(f"{key}: must be a string")


def test_a_typo_in_defaults_is_named_where_it_is_not_in_a_studys_grid():
    config = {"defaults": {"model": {"num_batchs": 3}}, **grid()}
    message = error_of(config)
    assert message.startswith("config: defaults.model.num_batchs: unknown axis of model cells "
                              "(valid: framework, model,")
    # Also when no study is of that kind: never silently ignored.
    config = {"defaults": {"ops": {"iteratons": 3}}, **grid()}
    assert error_of(config).startswith("config: defaults.ops.iteratons: unknown axis of ops")
    # A study's own grid is still blamed for its own typo.
    config = {"defaults": {"model": {"num_batches": 3}}, **grid(num_batchs=3)}
    assert error_of(config).startswith("study 's': grid.num_batchs: unknown axis (valid: ")


def test_a_bad_value_from_defaults_is_named_as_coming_from_there():
    config = {"defaults": {"model": {"batch_size": 0}}, **grid()}
    assert error_of(config) == "config: defaults.model.batch_size: must be >= 1, got 0"
    # valid or not depending on the cell (the framework's precisions): said by the cell
    config = {"defaults": {"model": {"precision": "fp99"}}, **grid()}
    assert error_of(config).startswith("study 's': precision (from defaults.model): "
                                       "unknown value 'fp99'")
    # The study's own value is the study's.
    assert error_of(grid(batch_size=0)) == "study 's': batch_size: must be >= 1, got 0"


def test_an_empty_list_from_defaults_is_named_there():
    config = {"defaults": {"model": {"batch_size": []}}, **grid()}
    assert error_of(config) == "study 's': defaults.model.batch_size: is an empty list"


def test_unquoted_on_off_read_as_booleans_get_a_hint_to_quote_them(tmp_path):
    """YAML 1.1: cuda_l2_cache: [on, off] is [true, false]; both checks say to quote."""
    import yaml

    config = yaml.safe_load("studies:\n  o: {kind: ops, grid: {op_config: OPS, device: gpu, "
                            "cuda_l2_cache: [on, off]}}\n".replace("OPS", str(tmp_path)))
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        config_schema.validate_config(config, SCHEMA)
    assert str(info.value).endswith(
        "cuda_l2_cache[0]: must be a string, got True (YAML reads unquoted on/off, yes/no as "
        "true/false: quote it, 'on')")
    assert error_of(config).endswith("got True (YAML reads unquoted on/off, yes/no as "
                                     "true/false: quote it, 'on')")


@pytest.mark.parametrize("kv_store", ["dist_sync", "dist_device_sync", "dist_async"])
def test_mxnet_workers_of_a_distributed_kvstore_cannot_warm_up_until_steady(kv_store):
    """Each worker would end its warm-up on its own (dist_sync: one waits for pushes that
    never come; dist_async: measured steps meet another worker's warm-up)."""
    config = {"studies": {"m": {"grid": {
        "framework": "mxnet", "model": "resnet18", "device": "cpu", "kv_store": kv_store,
        "warmup_until_steady": True}}}}
    assert error_of(config) == (
        f"study 'm': warmup_until_steady: the workers of kv_store {kv_store} do not agree "
        "when to stop warming up: false (num_warmup_batches)")
    config["studies"]["m"]["grid"]["kv_store"] = "device"
    assert len(study.expand_config(config)) == 1


def test_a_typo_on_an_axis_the_cell_does_not_use_is_refused():
    """A synthetic cell has no data backend: 'lmbd' was passed over there, and only the
    study's real-data cells, if any, would have said it was wrong."""
    assert error_of(grid(data_backend="lmbd")) == (
        "study 's': data_backend: unknown value 'lmbd' (valid: caffe_lmdb, image_folder)")
    # a valid value on an unused axis stays as it was: no error
    assert study.expand_config(grid(data_backend="image_folder"))


def test_a_bad_value_in_the_defaults_is_refused_though_every_study_sets_the_axis():
    """No cell would ever check it: the next study relying on the default would fail,
    blamed on that study."""
    config = grid(batch_size=4)
    config["defaults"] = {"model": {"batch_size": "eight"}}
    assert error_of(config) == ("config: defaults.model.batch_size: must be an integer, "
                                "got 'eight'")
    config["defaults"] = {"model": {"phase": ["training", "infer"]}}
    assert error_of(config) == ("config: defaults.model.phase: unknown value 'infer' "
                                "(valid: training, inference)")


def test_a_value_an_override_sets_is_blamed_on_that_override():
    """The grid does not hold the value: the error names the override that set it."""
    config = grid(batch_size=[4, 8])
    config["studies"]["s"]["overrides"] = [
        {"match": {"batch_size": 4}, "set": {"num_warmup_batches": 1}},
        {"match": {"batch_size": 8}, "set": {"phase": "infer"}}]
    assert error_of(config) == ("study 's': phase (from overrides[1].set): unknown value "
                                "'infer' (valid: training, inference)")
