"""The workflow's helpers (dlbench.workflow_support), without Snakemake."""

import json
import os
import sys
from pathlib import Path

import pytest

from dlbench import study
from dlbench import workflow_support as support

# The smallest op config there is: one operator, one input.
OPS = '{"torch.relu": {"config": [{"input": [{"args": [{"type": "tensor", "dtype": "float", "shape": [2]}]}]}]}}'


def cells(config):
    return study.expand_config(config)


def test_a_config_problem_is_one_line():
    with pytest.raises(support.WorkflowConfigError, match=r"^study 's': batch_size: must be"):
        support.expand_cells({"studies": {"s": {"grid": {"model": "deep_mnist",
                                                          "batch_size": 0}}}})


def test_framework_settings_fall_back_to_the_frameworks_own_then_the_running_interpreter(
        monkeypatch, tmp_path):
    """A config given with --configfile replaces the default whole: without `frameworks:`
    its MXNet cells ran under Snakemake's interpreter (failed rows telling the user to
    build the environment they had), and --use-apptainer ran every cell on the host. The
    framework's own environment and image now stand in, the repository's, named in full
    from another folder (--directory); a value given empty is kept."""
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    config = {"frameworks": {"mxnet": {"python": "/env/bin/python", "container": ""}}}
    assert support.framework_python(config, "mxnet") == "/env/bin/python"
    assert support.framework_python(config, "pytorch") == support.this_python()
    assert os.path.samefile(support.this_python(), sys.executable)
    assert support.framework_container(config, "mxnet") is None
    assert support.framework_python({}, "mxnet") == ".venvs/mxnet/bin/python"
    assert support.framework_container({}, "mxnet") == "containers/mxnet.sif"
    assert support.framework_container({}, "pytorch") == "containers/pytorch.sif"
    assert support.framework_python({"frameworks": {"mxnet": {"python": ""}}}, "mxnet") == \
        support.this_python()
    assert support.framework_python({}, "mxnet", repo) == ".venvs/mxnet/bin/python"
    monkeypatch.chdir(tmp_path)  # a run with --directory
    assert support.framework_python({}, "mxnet", repo) == str(
        repo / ".venvs" / "mxnet" / "bin" / "python")
    assert support.framework_container({}, "pytorch", repo) == str(
        repo / "containers" / "pytorch.sif")
    given = {"frameworks": {"mxnet": {"python": "env/bin/python", "container": "m.sif"}}}
    assert support.framework_python(given, "mxnet", repo) == "env/bin/python"  # as written
    assert support.framework_container(given, "mxnet", repo) == "m.sif"
    assert support.monitor_option({"monitor": {"interval_ms": 0}}) == ["--monitor_interval_ms=0"]
    assert support.monitor_option({}) == []
    # The default written out: the same job parameters, so no cell is measured again.
    assert support.monitor_option({"monitor": {"interval_ms": 500}}) == []
    assert support.monitor_option({"monitor": {"interval_ms": 200}}) == [
        "--monitor_interval_ms=200"]


def test_each_framework_reads_its_own_copy_of_a_dataset(tmp_path):
    config = {"datasets": {"mine": {"path": str(tmp_path)}, "tiny": {"synthetic": {}}},
              "studies": {"s": {"grid": {"model": "resnet18", "framework": ["pytorch", "mxnet"],
                                         "data": ["mine", "tiny"],
                                         "data_backend": ["caffe_lmdb", "image_folder"]}}}}
    dirs = {(c.params["framework"], c.params["data"], c.params["data_backend"]):
            support.data_dir(config, c) for c in cells(config)}
    assert dirs == {
        ("pytorch", "mine", "caffe_lmdb"): "results/datasets/mine/caffe_lmdb",
        ("pytorch", "mine", "image_folder"): str(tmp_path),
        ("pytorch", "tiny", "caffe_lmdb"): "results/datasets/tiny/caffe_lmdb",
        ("pytorch", "tiny", "image_folder"): "results/datasets/tiny/image_folder",
        ("mxnet", "mine", None): "results/datasets/mine/recordio",
        ("mxnet", "tiny", None): "results/datasets/tiny/recordio",
    }
    assert support.dataset_source(config, "tiny") == "results/datasets/tiny/image_folder"


def test_conversion_options_are_an_argument_list():
    config = {"datasets": {"d": {"synthetic": {"classes": 2, "images_per_class": 3,
                                               "image_size": 32, "seed": 7},
                                 "convert": {"resize": 64, "shuffle": True},
                                 "lmdb": {"encoded": True, "quality": 80}}}}
    assert support.conversion_args(config, "d", "lmdb") == [
        "--resize", "64", "--quality", "80", "--shuffle", "--encoded"]
    assert support.conversion_args(config, "d", "recordio") == ["--resize", "64", "--shuffle"]
    assert support.synthetic_args(config, "d") == [
        "--classes", "2", "--images-per-class", "3", "--image-size", "32", "--seed", "7"]


def test_the_worker_count_is_no_option_that_shapes_the_records():
    """conversion_args are the conversion rules' recorded params (a change prepares the
    dataset again and reruns its cells); the process count writes the same records, so it
    is given apart, to the command line only."""
    config = {"datasets": {"d": {"path": "/data/d",
                                 "convert": {"resize": 64, "workers": 16},
                                 "recordio": {"workers": 4}}}}
    assert support.conversion_args(config, "d", "lmdb") == ["--resize", "64"]
    assert support.conversion_args(config, "d", "recordio") == ["--resize", "64"]
    assert support.conversion_workers(config, "d", "lmdb") == ["--workers", "16"]
    assert support.conversion_workers(config, "d", "recordio") == ["--workers", "4"]
    del config["datasets"]["d"]["convert"]["workers"]
    assert support.conversion_workers(config, "d", "lmdb") == []


def test_container_binds_cover_inputs_outside_the_working_directory(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "ops"
    work.mkdir()
    outside.mkdir()
    (outside / "a.json").write_text(OPS)
    (work / "b.json").write_text(OPS)
    config = {"studies": {"o": {"kind": "ops", "grid": {
        "op_config": [str(outside / "a.json"), str(work / "b.json")], "device": "cpu"}}}}
    lock = tmp_path / "locks"
    lock.mkdir()
    binds = support.container_binds(config, cells(config), work, lock)
    assert binds == sorted([outside, lock])
    bad = tmp_path / "a:b"
    bad.mkdir()
    (bad / "c.json").write_text(OPS)
    config["studies"]["o"]["grid"]["op_config"] = str(bad / "c.json")
    with pytest.raises(support.WorkflowConfigError) as refused:
        support.container_binds(config, cells(config), work, None)
    assert str(refused.value) == (
        f"study 'o' reads {bad / 'c.json'}: {bad}: a path with ':' or ',' cannot be bound "
        "into a container (Apptainer's --bind splits there); move it, or bind a folder above "
        "it in --apptainer-args")
    # A folder above it bound by the user's arguments: nothing to bind, nothing refused.
    args = f"--nv --bind {tmp_path}"
    assert support.container_binds(config, cells(config), work, None,
                                   bound=lambda p: support.bound_in_container(args, p)) == []


def test_a_cluster_jobs_runtime_bounds_its_cells_time_limit():
    """A cell the scheduler stops at its job's time limit leaves no result; the launcher
    stops it a minute before (a failed row). Only studies whose timeout_s is longer are
    lowered, each named in a line; without a runtime nothing changes."""
    timeouts = {"short": 600.0, "long": 14400.0}
    assert support.job_timeouts(timeouts, None, "benchmark_pytorch") == (timeouts, {})
    limits, lowered = support.job_timeouts(timeouts, 120, "benchmark_pytorch")
    assert limits == {"short": 600.0, "long": 7140}
    assert lowered == {"long": (
        "study 'long': timeout_s 14400 s is longer than its cluster jobs may run "
        "(benchmark_pytorch runtime: 120 minutes): its cells are stopped after 7140 s (to "
        "give them longer, raise benchmark_pytorch's runtime in the profile's set-resources, "
        "in a copy of the profile: on the command line, --set-resources would replace the "
        "profile's whole entry, every rule's other settings in it)")}
    assert support.job_timeouts(timeouts, 3, "r")[0] == {"short": 120, "long": 120}


def test_a_runtime_leaving_cells_too_little_time_is_refused_before_any_job():
    """runtime: 1 left every cell 1 s, runtime: 2 a minute: each a failed row, not run
    again. Less than MIN_CELL_S for a study whose timeout_s it lowers is one line naming
    the rule, the runtime and what it leaves; a study whose own timeout_s is as short, or
    a runtime leaving the minimum, is not refused."""
    for minutes, left in ((1, 0), (2, 60)):
        with pytest.raises(support.WorkflowConfigError) as caught:
            support.job_timeouts({"b": 3600.0}, minutes, "benchmark_pytorch")
        assert str(caught.value) == (
            f"study 'b': benchmark_pytorch runtime: {minutes} minutes leaves its cells "
            f"{left} s (the job's time less 60 s to record a failed row), less than the "
            "120 s a cell needs (raise it to 3 minutes or more in the profile's "
            "set-resources, in a copy of the profile: on the command line, --set-resources "
            "would replace the profile's whole entry, every rule's other settings in it)")
    assert support.job_timeouts({"quick": 60.0}, 2, "r") == ({"quick": 60.0}, {})
    assert support.job_timeouts({"a": 3600.0}, 3, "r")[0] == {"a": 120}


def test_the_interpreter_running_snakemake_has_one_name_whatever_started_it(tmp_path):
    """It is in every job's params: `.venv/bin/python -m snakemake` after
    `.venv/bin/snakemake` (python3) planned every cell and profile again."""
    real = tmp_path / "bin" / "python3"
    real.parent.mkdir()
    real.write_text("")
    (tmp_path / "bin" / "python").symlink_to("python3")
    assert support.this_python(str(tmp_path / "bin" / "python")) == str(real)
    assert support.this_python(str(real)) == str(real)
    other = tmp_path / "other" / "python"
    other.parent.mkdir()
    other.write_text("")
    (tmp_path / "other" / "python3").write_text("")  # another file: not the same interpreter
    assert support.this_python(str(other)) == str(other)


def test_the_runs_failed_profiles_are_counted_in_one_line_naming_the_first(tmp_path):
    """A failed profile is a manifest (status failed), so the run ends successfully: this
    line is what says so at the end of it. Profiles not made, or unreadable, are not
    counted as failed."""
    def manifest(name: str, status: str | None, error: str | None = None) -> str:
        path = tmp_path / name / "profile.json"
        path.parent.mkdir()
        if status is not None:
            path.write_text(json.dumps({"status": status, "error": error}))
        return str(path)

    paths = [manifest("a", "ok"), manifest("b", "failed", "nsys: binary not found\nmore"),
             manifest("c", None), manifest("d", "failed", "hpcrun: binary not found")]
    assert support.failed_profiles(paths) == (
        f"dlbench: 2 of 4 profiles failed (first: {tmp_path / 'b'}: nsys: binary not "
        "found); the report shows each")
    assert support.failed_profiles(paths[:1] + paths[2:3]) is None


def test_the_report_shows_the_runs_profiles_of_its_studies_and_the_others_whole(
        tmp_path, monkeypatch):
    """A tool (or cell) the config no longer profiles leaves the report, as a changed
    grid's cells leave the table: its failed nsys profile kept showing 'failed' beside the
    run's own. Another study's and another system's profiles are shown as they are."""
    from dlbench.profiling import summary

    monkeypatch.chdir(tmp_path)
    root = Path("results/profiles")
    for folder in ("box/torch/s/pytorch_a_00000001", "box/nsys/s/pytorch_a_00000001",
                   "box/nsys/t/pytorch_b_00000002", "other/nsys/s/pytorch_a_00000001"):
        (root / folder).mkdir(parents=True)
    planned = ["results/profiles/box/torch/s/pytorch_a_00000001/profile.json"]
    kept = support.profiles_kept("box", ["s"], planned)
    shown = {(p.system, p.tool, p.study) for p in summary.collect(root, keep=kept)}
    assert shown == {("box", "torch", "s"), ("box", "nsys", "t"), ("other", "nsys", "s")}
    assert len(summary.collect(root)) == 4  # by hand (no keep): every folder


def test_the_results_of_cells_on_a_dataset_removed_to_prepare_again_are_found(tmp_path,
                                                                             monkeypatch):
    """A cut-short prepared dataset is removed; Snakemake prepares a missing input only for
    a job that runs, so its cells' results (every repeat) must be set aside too: before,
    the dataset was gone, and 'Nothing to be done'. Cells reading another dataset, or none,
    are not among them; a result not made yet is not either."""
    monkeypatch.chdir(tmp_path)
    config = {"datasets": {"tiny": {"synthetic": {}}, "other": {"synthetic": {}}},
              "studies": {"s": {"repeats": 2, "grid": {
                  "model": "resnet18", "device": "cpu", "data": ["tiny", "other", "synthetic"],
                  "data_backend": "caffe_lmdb"}}}}
    made = cells(config)
    paths = support.result_paths(made, "box", {"s": 2})
    for path in list(paths)[:-1]:  # the last repeat of the last cell not made yet
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    found = support.results_reading(config, made, "box", {"s": 2},
                                    ["results/datasets/tiny/caffe_lmdb/"])
    assert sorted(found) == sorted(p for p, c in paths.items() if c.params["data"] == "tiny")
    assert len(found) == 2
    assert support.results_reading(config, made, "box", {"s": 2}, []) == []


def test_a_result_set_aside_to_run_again_takes_its_log_along(tmp_path):
    """retry_failed keeps the earlier run whole: the result and the job log its next job
    would write over move aside under one stamp, and a second retry overwrites neither."""
    study_dir = tmp_path / "results" / "box" / "s"
    result = study_dir / "cells" / "pytorch_m_0123abcd_r1.json"
    log = study_dir / "logs" / "pytorch_m_0123abcd_r1.log"
    result.parent.mkdir(parents=True)
    log.parent.mkdir()
    assert support.cell_log(result) == log
    moved = []
    for run in ("first", "second"):
        result.write_text(f'{{"status": "failed", "run": "{run}"}}')
        log.write_text(f"{run} run's log\n")
        moved.append(support.set_aside_run(result))
        assert not result.exists() and not log.exists()
    for run, where in zip(("first", "second"), moved, strict=True):
        assert where.parent == study_dir / "cells" / "retried"
        assert json.loads(where.read_text())["run"] == run
        stamp = where.name.removeprefix("pytorch_m_0123abcd_r1.").removesuffix(".json")
        kept = study_dir / "logs" / "retried" / f"pytorch_m_0123abcd_r1.{stamp}.log"
        assert kept.read_text() == f"{run} run's log\n"


def test_a_result_without_a_log_is_set_aside_alone(tmp_path):
    result = tmp_path / "results" / "box" / "s" / "cells" / "pytorch_m_0123abcd.json"
    result.parent.mkdir(parents=True)
    result.write_text("{}")
    where = support.set_aside_run(result)
    assert where.read_text() == "{}" and not result.exists()
    assert not (tmp_path / "results" / "box" / "s" / "logs").exists()


def test_a_snakemake_call_that_plans_no_jobs_is_told_from_runs_and_dry_runs():
    """--unlock, --list-rules or --cleanup-metadata (the README's command) parse the
    workflow too: its start-up removed a cut-short dataset and set results aside there,
    saying "running 1 cell(s) again" while nothing ran. Read from Snakemake's own parser."""
    import contextlib
    import io

    from snakemake.cli import parse_args

    def args(*words):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return parse_args(list(words))[1]

    for words in (["--unlock"], ["--list-rules"], ["--cleanup-metadata", "results/x"],
                  ["--summary"], ["--dag"], ["--lint"], ["--report", "r.html"],
                  ["--delete-all-output"], ["--containerize"]):
        assert support.plans_no_jobs(args(*words)), words
    for words in ([], ["-n"], ["--cores", "2"], ["--report", "r.html", "--report-after-run"],
                  ["--forcerun", "dataset_lmdb"]):
        assert not support.plans_no_jobs(args(*words)), words
    assert not support.plans_no_jobs(None)  # the Python API: as a run


def test_a_folder_another_run_has_locked_is_told_from_a_free_one(tmp_path):
    """A second run of one folder, refused by Snakemake's lock only after this file was
    read, had already moved results aside under the running one (its table then named a
    file that was gone); its start-up now leaves them while a lock is held."""
    locks = tmp_path / ".snakemake" / "locks"
    assert not support.snakemake_locked(locks)  # no folder: no run yet
    locks.mkdir(parents=True)
    assert not support.snakemake_locked(locks)
    (locks / "0.output.lock").write_text("results/x.json\n")
    assert support.snakemake_locked(locks)
