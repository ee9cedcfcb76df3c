"""System labels: results/<system>/ folders, the machine a label stands for, software
fingerprints checked across results, and the adoption of a tree made before labels."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dlbench import aggregate, launch, study, systems, workflow_support
from dlbench import result as R

AMD = {"cpu_model": "AMD EPYC 7B13", "gpu_models": [], "gpu_count": 0, "gpu_driver": None}
H100 = {"cpu_model": "Intel Xeon 8480", "gpu_models": ["NVIDIA H100 80GB HBM3"] * 2,
        "gpu_count": 2, "gpu_driver": "580.65"}


def env(cpu="AMD EPYC 7B13", version="2.9.0", gpus=(), cuda=None):
    return {"cpu_model": cpu, "gpu_models": list(gpus), "gpu_driver": "580.65" if gpus else None,
            "framework": "pytorch", "framework_version": version,
            "library_flags": {"cuda": cuda, "cudnn": None}, "container_digest": None}


def result_file(root: Path, system: str, study_name: str, cell_id: str, environment: dict,
                status: str = "ok") -> Path:
    res = R.new_result(kind="model", cell={"framework": "pytorch", "model": "resnet18"},
                       study=study_name, cell_id=cell_id)
    res["environment"] = environment
    if status == "ok":
        res["measurements"] = [R.measurement(name="resnet18", pass_="training",
                                             times_s=[0.1, 0.11, 0.1], items_per_iteration=8,
                                             throughput_unit="samples/s")]
    R.finish(res, status, None if status == "ok" else "broke")
    path = systems.result_path(system, study_name, cell_id, root)
    R.write(res, path)
    return path


# --- labels ----------------------------------------------------------------------------

def test_the_default_label_is_this_hosts_short_name_made_safe():
    assert systems.default_label("node-17.cluster.example.org") == "node-17"
    assert systems.default_label("my host!") == "my-host-"
    assert systems.default_label("_x") == "x"
    assert systems.default_label("report") == "local"  # a folder results/ keeps
    assert systems.default_label("Report") == "local"


@pytest.mark.parametrize(("label", "words"), [
    ("a/b", "is not a system label"), ("", "is not a system label"), (3, "is not a system label"),
    ("datasets", "a folder results/ keeps for itself"),
    # a file of results/ (once a traceback from the workflow: results/status.txt/<study>/...)
    ("status.txt", "a file results/ keeps for itself"),
    ("benchmarks.parquet", "a file results/ keeps for itself"),
    # case-blind: on a case-insensitive disk (macOS) these are results/profiles/ and the table
    ("Profiles", "a folder results/ keeps for itself"),
    ("Benchmarks.Parquet", "a file results/ keeps for itself")])
def test_a_bad_label_is_one_config_error_naming_the_field(label, words):
    with pytest.raises(workflow_support.WorkflowConfigError) as info:
        workflow_support.system_label({"system": label})
    assert str(info.value).startswith("system: ") and words in str(info.value)
    assert "\n" not in str(info.value)


def test_the_config_label_wins_over_the_host():
    assert workflow_support.system_label({"system": "h100-torch2.9"}) == "h100-torch2.9"
    assert workflow_support.system_label({}) == systems.default_label()


def test_result_paths_and_their_system(tmp_path):
    cell = study.expand_config({"studies": {"s": {"grid": {"model": "resnet18"}}}})[0]
    path = workflow_support.result_path(cell, "a100")
    assert path == Path("results/a100/s/cells") / f"{cell.id}.json"
    assert systems.system_of(path) == "a100"
    assert systems.system_of(Path("results/s/cells/x.json")) is None  # before labels
    assert systems.system_of(Path("x.json")) is None


# --- the machine a label stands for -----------------------------------------------------

def test_the_first_cell_records_the_machine_and_another_machine_is_refused(tmp_path):
    folder = tmp_path / "results" / "box"
    assert systems.check_machine(folder, AMD) is None
    assert json.loads((folder / systems.MACHINE_FILE).read_text()) == AMD
    assert systems.check_machine(folder, AMD) is None
    problem = systems.check_machine(folder, H100)
    assert problem.startswith("system 'box' is AMD EPYC 7B13, no GPU")
    assert "2x NVIDIA H100 80GB HBM3" in problem and "its own `system:` label" in problem
    assert "\n" not in problem


def test_an_environment_that_cannot_see_gpus_is_not_another_machine():
    blind = {**H100, "gpu_models": [], "gpu_count": 0, "gpu_driver": None}
    assert systems.same_machine(H100, blind)
    assert not systems.same_machine(H100, {**H100, "gpu_driver": "590.1"})


def test_cells_seeing_one_or_all_of_a_nodes_gpus_are_one_machine(tmp_path):
    """A 1-GPU cell (Slurm's device cgroup, or CUDA's CUDA_VISIBLE_DEVICES) and an 8-GPU
    cell of one node: one machine, in the launcher's check and across the table's rows."""
    one = {**H100, "gpu_models": H100["gpu_models"][:1], "gpu_count": 1}
    eight = {**H100, "gpu_models": H100["gpu_models"][:1] * 8, "gpu_count": 8}
    folder = tmp_path / "results" / "box"
    assert systems.check_machine(folder, one) is None
    assert systems.check_machine(folder, eight) is None
    rows = [{"system": "box", "source": f"{n}.json",
             "fingerprint": {"hardware": hw, "software": {}}} for n, hw in enumerate([one, eight])]
    assert systems.conflict(rows) is None
    # other GPU models are another machine still
    a100 = {**one, "gpu_models": ["NVIDIA A100-SXM4-80GB"]}
    assert "two machines" in systems.conflict([*rows, {**rows[0], "source": "a.json",
                                                      "fingerprint": {"hardware": a100,
                                                                      "software": {}}}])


def test_a_cell_launched_beside_the_first_never_reads_a_half_written_machine(tmp_path,
                                                                             monkeypatch):
    """The machine file appears whole: while the first cell writes it, no file is there."""
    folder = tmp_path / "results" / "box"
    seen = []
    real_write = Path.write_text

    def write_and_look(self, text, *args, **kwargs):
        n = real_write(self, text, *args, **kwargs)
        seen.append((folder / systems.MACHINE_FILE).exists())
        return n

    monkeypatch.setattr(Path, "write_text", write_and_look)
    assert systems.check_machine(folder, AMD) is None
    assert seen == [False]
    monkeypatch.undo()
    assert json.loads((folder / systems.MACHINE_FILE).read_text()) == AMD
    assert [p.name for p in folder.iterdir()] == [systems.MACHINE_FILE]  # no draft left
    # the loser of the race reads the winner's file
    assert "Intel Xeon" in systems.check_machine(folder, H100)


def test_the_launcher_fails_a_cell_run_on_another_machine_under_the_label(tmp_path):
    folder = tmp_path / "results" / "box"
    folder.mkdir(parents=True)
    (folder / systems.MACHINE_FILE).write_text(json.dumps(H100))
    cell = study.expand_config({"studies": {"s": {"grid": {"model": "resnet18",
                                                           "device": "cpu"}}}})[0]
    out = systems.result_path("box", "s", cell.id, tmp_path / "results")
    rc = launch.launch(json.loads(cell.to_json()), out, sys.executable)
    res = R.read(out)
    assert rc == 1 and res["status"] == "failed"
    assert res["error"].startswith("system 'box' is Intel Xeon 8480, 2x NVIDIA H100")
    assert res["system"] == "box" and res["fingerprint"]["hardware"]["cpu_model"]


def test_a_result_records_its_system_and_fingerprint():
    res = launch.stamped({"environment": env(gpus=["NVIDIA H100"], cuda="13.0")},
                         Path("results/h100/s/cells/c.json"))
    assert res["system"] == "h100"
    assert res["fingerprint"]["hardware"]["gpu_count"] == 1
    assert res["fingerprint"]["software"] == {"framework": "pytorch", "framework_version": "2.9.0",
                                              "cuda": "13.0", "cudnn": None, "nccl": None,
                                              "container_digest": None}
    # Another NCCL is another software stack; a result that does not say is not.
    nccl = {**env(), "nccl_version": "2.21.5"}
    assert not systems.same_software(systems.software(nccl),
                                     systems.software({**nccl, "nccl_version": "2.27.3"}))
    assert systems.same_software(systems.software(nccl), systems.software(env()))
    R.validate({**R.new_result(kind="model", cell={}), **res, "environment": {}})


# --- the aggregate ----------------------------------------------------------------------

def test_two_systems_are_both_in_the_table_with_their_label(tmp_path):
    cell = "pytorch_resnet18_training_0a1b2c3d"
    a = result_file(tmp_path / "results", "amd", "s", cell, env())
    b = result_file(tmp_path / "results", "h100", "s", cell, env(cpu="Intel", gpus=["H100"]))
    rows = aggregate.build_table([a, b]).to_pylist()
    assert sorted((r["system"], r["cell_id"]) for r in rows) == [("amd", cell), ("h100", cell)]
    # An operator cell's PARAM log beside a result is no result of another system.
    a.with_name(f"{cell}.param.json").write_text('{"a": 1}\n{"b": 2}\n')
    assert systems.result_files(tmp_path / "results") == [a, b]


def test_software_of_the_model_and_the_operator_runner_is_one_stack():
    """Model cells record CUDA and cuDNN as ``cuda_version``/``cudnn_version``; operator
    cells written before the shared collector kept CUDA among their library flags and no
    cuDNN on CPU. Known values must agree, an unknown one is no other stack."""
    model = {**env(), "library_flags": {"num_threads": 2}, "cuda_version": "13.0",
             "cudnn_version": "91900"}
    old_op = env(cuda="13.0")
    assert systems.software(model)["cuda"] == systems.software(old_op)["cuda"] == "13.0"
    assert systems.same_software(systems.software(model), systems.software(old_op))
    other_cuda = {**model, "cuda_version": "12.8"}
    assert not systems.same_software(systems.software(model), systems.software(other_cuda))


def test_two_software_stacks_under_one_label_stop_the_aggregate_in_one_line(tmp_path):
    a = result_file(tmp_path / "results", "box", "s", "c1", env(version="2.9.0"))
    b = result_file(tmp_path / "results", "box", "s", "c2", env(version="2.10.0"))
    parquet = tmp_path / "results" / "benchmarks.parquet"
    aggregate.write([a], parquet)
    with pytest.raises(aggregate.SystemConflict) as info:
        aggregate.write([a, b], parquet)
    text = str(info.value)
    assert text.startswith("system 'box': two pytorch software stacks")
    assert "2.9.0" in text and "2.10.0" in text and str(b) in text and "\n" not in text
    assert pq.read_table(parquet).num_rows == 1  # the previous table is kept
    assert aggregate.main([str(a), str(b), "--parquet", str(parquet)]) == 1


def test_two_machines_under_one_label_are_a_conflict_and_other_labels_are_not(tmp_path):
    a = result_file(tmp_path / "results", "box", "s", "c1", env(cpu="AMD"))
    b = result_file(tmp_path / "results", "box", "s", "c2", env(cpu="Intel"))
    c = result_file(tmp_path / "results", "other", "s", "c3", env(cpu="Intel",
                                                                     version="2.10.0"))
    with pytest.raises(aggregate.SystemConflict, match="two machines, AMD, no GPU"):
        aggregate.build_table([a, b])
    assert aggregate.build_table([a, c]).num_rows == 2


def test_a_cell_whose_runner_never_started_is_no_software_conflict(tmp_path):
    a = result_file(tmp_path / "results", "box", "s", "c1", env(version="2.9.0"))
    b = result_file(tmp_path / "results", "box", "s", "c2",
                    {**env(), "framework_version": None}, status="failed")
    assert aggregate.build_table([a, b]).num_rows == 2


# --- adopting a tree made before labels -----------------------------------------------------

def test_a_pre_label_tree_moves_under_the_system_and_never_overwrites(tmp_path):
    results = tmp_path / "results"
    old = result_file(results, "x", "s", "c1", env())
    legacy = results / "s"
    shutil.move(old.parents[1], legacy)  # results/s/cells/c1.json, as earlier releases
    (results / "datasets" / "d" / "cells").mkdir(parents=True)  # not a study: left alone
    moves = systems.adopt("box", results)
    assert moves == [(legacy, results / "box" / "s")]
    assert (results / "box" / "s" / "cells" / "c1.json").is_file() and not legacy.exists()
    assert (results / "datasets" / "d").is_dir()
    # A second pre-label folder meeting one already adopted: only the files it lacks move.
    (legacy / "cells").mkdir(parents=True)
    (legacy / "cells" / "c1.json").write_text("{}")
    (legacy / "cells" / "c2.json").write_text("{}")
    moves = systems.adopt("box", results)
    assert [m[1].name for m in moves] == ["c2.json"]
    assert (legacy / "cells" / "c1.json").is_file()  # kept where it was, not overwritten
    assert json.loads((results / "box" / "s" / "cells" / "c1.json").read_text())["cell_id"] == "c1"
    assert systems.adopt("box", tmp_path / "none") == []


def test_a_systems_folder_with_a_cells_folder_inside_is_never_adopted(tmp_path):
    """results/<system>/cells/ (a study once allowed the name 'cells') looks like the old
    layout's study folder; the machine the system recorded says it is a system's."""
    results = tmp_path / "results"
    result_file(results, "walk-z", "cells", "c1", env())
    (results / "walk-z" / systems.MACHINE_FILE).write_text("{}")
    assert systems.legacy_study_dirs(results) == []
    assert systems.systems_folder(results / "walk-z")
    assert systems.adopt("vm", results) == []
    assert (results / "walk-z" / "cells" / "cells" / "c1.json").is_file()


def test_gpus_nvml_will_not_open_are_left_out_not_a_crash(monkeypatch):
    """Inside a Slurm job whose device cgroup holds one GPU of four, NVML counts four and
    refuses a handle to the other three: the launcher records the one (a stand-in NVML;
    no real driver here)."""
    import types

    from dlbench import environment

    class NVMLError(Exception):
        pass

    def handle(i):
        if i != 2:
            raise NVMLError("Insufficient Permissions")
        return i

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 4, nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlSystemGetDriverVersion=lambda: "580.65")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert environment.gpus_from_nvml() == {"gpu_models": ["NVIDIA H100 80GB HBM3"],
                                            "gpu_driver": "580.65"}

    def no_count():
        raise NVMLError("Unknown Error")

    monkeypatch.setattr(fake, "nvmlDeviceGetCount", no_count)
    assert environment.gpus_from_nvml() == {}


def test_a_pytorch_gpu_cell_records_the_machines_gpus_not_only_those_it_sees(monkeypatch):
    """torch counts the cell's CUDA_VISIBLE_DEVICES (one GPU); the result records NVML's
    list of the machine (four), as CPU cells and the launcher's rows do, and torch's list
    only where NVML cannot answer (CUDA stood in for: no GPU here)."""
    import torch

    from dlbench import environment
    from dlbench.pytorch import torch_environment

    four = {"gpu_models": ["NVIDIA H100 80GB HBM3"] * 4, "gpu_driver": "580.65"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    monkeypatch.setattr(environment, "gpus_from_nvml", lambda: dict(four))
    env = torch_environment.collect(torch.device("cuda", 0))
    assert env["gpu_models"] == four["gpu_models"]
    assert env["device_name"] == "NVIDIA H100 80GB HBM3"
    monkeypatch.setattr(environment, "gpus_from_nvml", lambda: {})
    assert torch_environment.collect(torch.device("cuda", 0))["gpu_models"] == \
        ["NVIDIA H100 80GB HBM3"]


def test_the_table_keeps_other_systems_results_and_this_systems_of_studies_not_named(
        tmp_path, monkeypatch):
    """What the aggregate reads beside this run's cells: every result of another system,
    and this system's of a study its config no longer names (another config's run made
    them); this system's of a named study are the run's own cells only."""
    from dlbench import workflow_support

    monkeypatch.chdir(tmp_path)
    root = Path("results")
    ours = result_file(root, "box", "s", "pytorch_a_00000001", env())
    stale = result_file(root, "box", "s", "pytorch_b_00000002", env())  # dropped from s
    earlier = result_file(root, "box", "t", "pytorch_c_00000003", env())
    theirs = result_file(root, "other", "s", "pytorch_a_00000001", env(cpu="Intel"))
    assert systems.study_of(earlier) == "t" and systems.study_of(Path("x.json")) is None
    assert workflow_support.results_beside("box", {"s": {}}) == [earlier, theirs]
    assert ours not in workflow_support.results_beside("box", ["s", "t"])
    assert stale in workflow_support.results_beside("other", ["s"])


def test_another_systems_stale_results_and_profiles_leave_the_table_as_its_plan_says(
        tmp_path, monkeypatch):
    """Another system's results and profiles are those its last run of each study planned
    (results/<system>/<study>/plan.json): a cell dropped from its grid, or a repeat beyond
    its repeats, stayed in every other system's table (an old file of another torch
    version even stopped their aggregate: two software stacks under one label). A study
    without a plan (an older tree) keeps every file; an unreadable plan too, in one line."""
    from dlbench import workflow_support

    monkeypatch.chdir(tmp_path)
    root = Path("results")
    kept = result_file(root, "other", "s", "pytorch_a_00000001", env())
    dropped = result_file(root, "other", "s", "pytorch_b_00000002", env(version="2.1.0"))
    unplanned = result_file(root, "other", "t", "pytorch_c_00000003", env())
    profiles = [f"results/profiles/other/{tool}/s/{cell}/profile.json"
                for tool, cell in (("torch", "pytorch_a_00000001"),
                                   ("nsys", "pytorch_b_00000002"))]
    assert workflow_support.record_plans("other", ["s"], [str(kept)], profiles[:1]) == [
        root / "other" / "s" / systems.PLAN_FILE]
    assert workflow_support.record_plans("other", ["s"], [str(kept)], profiles[:1]) == []
    assert workflow_support.results_beside("box", ["s"]) == [kept, unplanned]
    shown = workflow_support.profiles_kept("box", ["s"], [])
    assert [shown(Path(p).parent) for p in profiles] == [True, False]
    assert shown(Path("results/profiles/other/torch/t/pytorch_c_00000003"))  # no plan
    # this system's own named study still follows this run's cells, not a recorded plan
    assert workflow_support.results_beside("other", ["s"], [str(dropped)]) == [unplanned]
    (root / "other" / "s" / systems.PLAN_FILE).write_text('{"results": "all"}')
    said = []
    assert workflow_support.results_beside("box", ["s"], say=said.append) == [
        kept, dropped, unplanned]
    assert said == [f"dlbench: {root / 'other' / 's' / systems.PLAN_FILE}: not a plan "
                    "(expected lists of names under results and profiles): every result of "
                    "that study is kept"]
    # this system's study another config names is read as that config's last run planned
    workflow_support.record_plans("other", ["t"], [], [])
    assert workflow_support.results_beside("other", ["s"], [str(dropped)]) == []


def test_the_table_keeps_calibration_cells_another_config_planned(tmp_path, monkeypatch):
    """The calibration study is implied by a run's cells, never named by its config: the
    cells of it that this run does not plan (another config's device) stay in the table,
    and those it plans are its own (not read twice)."""
    from dlbench import study, workflow_support

    monkeypatch.chdir(tmp_path)
    root = Path("results")
    cal = study.CALIBRATION_STUDY
    gpu = result_file(root, "box", cal, "pytorch_cal_0000000a", env())  # config A's
    cpu = result_file(root, "box", cal, "pytorch_cal_0000000b", env())  # this run's
    beside = workflow_support.results_beside("box", {"s": {}}, [str(cpu)])
    assert gpu in beside and cpu not in beside
    # a named study keeps only what the run plans, even when the file is not planned
    assert gpu not in workflow_support.results_beside("box", [cal], [str(cpu)])


def test_a_label_longer_than_a_folder_name_may_be_is_refused_in_one_line():
    """A label is a folder under results/: 300 characters passed, and then no job could
    write its results."""
    assert systems.check_label("a" * 128) == "a" * 128
    with pytest.raises(systems.SystemLabelError, match="at most 128 characters"):
        systems.check_label("a" * 129)
