"""CPU capabilities (saved /proc/cpuinfo samples and this machine), the study option that
keeps only native precisions, the time-left arithmetic, and the MXNet environment's
interpreter search on a machine whose only Python is 3.12."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench import cpu, progress, study
from dlbench.progress import Planned

SAMPLES = Path(__file__).resolve().parent / "data" / "cpuinfo"
REPO = Path(__file__).resolve().parents[1]


def sample(name: str) -> cpu.CpuInfo:
    return cpu.parse((SAMPLES / name).read_text())


def test_avx2_only_amd_epyc_emulates_bfloat16_and_float16():
    info = sample("amd-epyc-zen3-avx2.txt")
    assert (info.arch, info.model, info.capability) == ("x86_64", "AMD EPYC", "AVX2")
    assert info.features == ("avx2", "fma")
    assert (info.logical_cpus, info.cores, info.sockets) == (2, 2, 1)
    assert not info.native("bfloat16") and not info.native("float16")
    assert info.native("float32") and info.native("float64")
    assert info.emulated(["float32", "bfloat16", "float16"]) == ["bfloat16", "float16"]


def test_sapphire_rapids_has_native_bfloat16_and_float16_through_avx512_and_amx():
    info = sample("intel-xeon-sapphire-rapids-amx.txt")
    assert info.capability == "AVX512"
    assert {"avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"} <= set(info.features)
    assert "amx_fp16" not in info.features  # Granite Rapids has it, Sapphire Rapids not
    assert (info.logical_cpus, info.cores, info.sockets) == (8, 4, 2)
    assert info.native("bfloat16") and info.native("float16")
    assert info.as_dict()["native_precisions"] == ["float32", "float64", "bfloat16", "float16"]


def test_arm64_neoverse_reads_the_features_line():
    info = cpu.parse((SAMPLES / "arm64-neoverse-v1-bf16.txt").read_text(), default_arch="x86_64")
    assert info.arch == "aarch64" and info.capability == "SVE"
    assert info.features == ("asimd", "asimdhp", "fphp", "bf16", "sve", "i8mm")
    assert info.model == "implementer 0x41 part 0xd40"
    assert (info.logical_cpus, info.cores, info.sockets) == (4, None, None)
    assert info.native("bfloat16") and info.native("float16")


def test_a_text_without_processors_is_refused_in_one_line():
    with pytest.raises(ValueError, match="not a /proc/cpuinfo text"):
        cpu.parse("hello: world\n")


def test_a_bad_cpuinfo_override_is_one_line_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(cpu.CPUINFO_ENV, str(tmp_path / "missing.txt"))
    assert cpu.override_problem() == f"{cpu.CPUINFO_ENV}={tmp_path / 'missing.txt'}: " \
        "No such file or directory"
    (tmp_path / "notes.txt").write_text("hello: world\n")
    monkeypatch.setenv(cpu.CPUINFO_ENV, str(tmp_path / "notes.txt"))
    assert cpu.override_problem() == (f"{cpu.CPUINFO_ENV}={tmp_path / 'notes.txt'}: no "
                                      "'processor' entries: not a /proc/cpuinfo text")
    monkeypatch.setenv(cpu.CPUINFO_ENV, str(SAMPLES / "amd-epyc-zen3-avx2.txt"))
    assert cpu.override_problem() is None


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo (not Linux)")
def test_this_machine_agrees_with_torch_on_its_capability(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv(cpu.CPUINFO_ENV, raising=False)
    cpu.this_cpu.cache_clear()
    info = cpu.this_cpu()
    assert info is not None and info.logical_cpus >= 1
    # torch says SVE256 and the like on arm64; x86 uses the same words as ours.
    if info.arch == "x86_64":
        assert info.capability == torch.backends.cpu.get_cpu_capability()


def test_gpu_precisions_are_native_by_compute_capability():
    assert cpu.precision_native("bfloat16", "gpu", (8, 0)) is True
    assert cpu.precision_native("bfloat16", "gpu", (7, 0)) is False
    assert cpu.precision_native("float16", "gpu", (7, 0)) is True
    assert cpu.precision_native("tf32", "gpu", (9, 0)) is True
    assert cpu.precision_native("float16", "gpu", None) is None
    assert cpu.precision_native("float32", "gpu", None) is True


# -- the study option -----------------------------------------------------------------------


@pytest.fixture
def cpu_from(monkeypatch):
    def use(name: str) -> None:
        monkeypatch.setenv(cpu.CPUINFO_ENV, str(SAMPLES / name))
        cpu.this_cpu.cache_clear()
    yield use
    cpu.this_cpu.cache_clear()


def demo(**extra) -> dict:
    return {"studies": {"s": {**extra, "grid": {
        "model": "deep_mnist", "precision": ["float32", "bfloat16", "float16"],
        "device": ["cpu", "gpu"]}}}}


def precisions_of(cells, device):
    return sorted(c.params["precision"] for c in cells if c.params["device"] == device)


def test_native_keeps_only_float32_on_an_avx2_cpu_and_every_gpu_cell(cpu_from):
    cpu_from("amd-epyc-zen3-avx2.txt")
    cells = study.expand_config(demo(precisions="native"))
    assert precisions_of(cells, "cpu") == ["float32"]
    assert precisions_of(cells, "gpu") == ["bfloat16", "float16", "float32"]


def test_native_keeps_everything_on_a_cpu_with_amx(cpu_from):
    cpu_from("intel-xeon-sapphire-rapids-amx.txt")
    cells = study.expand_config(demo(precisions="native"))
    assert precisions_of(cells, "cpu") == ["bfloat16", "float16", "float32"]


def test_an_explicit_precision_list_is_honoured_without_the_option(cpu_from):
    cpu_from("amd-epyc-zen3-avx2.txt")
    cells = study.expand_config(demo())
    assert precisions_of(cells, "cpu") == ["bfloat16", "float16", "float32"]
    assert [c.params["precision"] for c in study.emulated_cells(cells)] == ["bfloat16",
                                                                            "float16"]


def test_a_bad_precisions_value_is_one_line_naming_study_and_field():
    with pytest.raises(study.ConfigError, match=r"^study 's': precisions: unknown value "
                                                r"'fast' \(valid: all, native\)$"):
        study.expand_config(demo(precisions="fast"))


def test_native_does_not_hide_an_unknown_precision(cpu_from):
    """A precision no device has is a config error, not a cell dropped as emulated."""
    cpu_from("amd-epyc-zen3-avx2.txt")
    config = demo(precisions="native")
    config["studies"]["s"]["grid"].update(precision=["float32", "int4"], device="cpu")
    with pytest.raises(study.ConfigError, match=r"^study 's': precision: unknown value 'int4'"):
        study.expand_config(config)


def test_the_option_does_not_change_the_ids_of_the_cells_it_keeps(cpu_from):
    cpu_from("amd-epyc-zen3-avx2.txt")
    kept = {c.id for c in study.expand_config(demo(precisions="native"))}
    assert kept < {c.id for c in study.expand_config(demo())}


def test_the_default_study_keeps_one_small_emulated_pair_on_an_avx2_cpu(cpu_from):
    import yaml

    cpu_from("amd-epyc-zen3-avx2.txt")
    cells = study.expand_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    emulated = study.emulated_cells(cells)
    assert emulated and {c.study for c in emulated} == {"cpu_emulation"}
    assert {c.params["model"] for c in emulated} == {"deep_mnist"}
    twins = {(c.params["phase"], c.params["precision"]) for c in cells
             if c.study == "cpu_emulation"}
    assert twins == {("training", "float32"), ("training", "bfloat16")}
    cpu_from("intel-xeon-sapphire-rapids-amx.txt")
    native = study.expand_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert sum(c.params.get("precision") == "bfloat16" for c in native if c.study == "cpu_demo") > 0


def test_emulation_notice_names_study_count_and_measured_factor():
    cells = [study.Cell("s1", "model", {"precision": "bfloat16", "device": "cpu"})] * 3
    (line,) = progress.emulation_notices(cells, {"bfloat16": 76.2}, "AMD EPYC, AVX2")
    assert line.startswith("dlbench: study 's1': 3 cell(s) in bfloat16, which this CPU "
                           "(AMD EPYC, AVX2) emulates")
    assert "bfloat16 ~76x slower" in line
    (line,) = progress.emulation_notices(cells, {"bfloat16": 3.4}, "AMD EPYC, AVX2")
    assert "bfloat16 ~3.4x slower" in line
    # A flag list given (DLBENCH_CPUINFO) on a CPU whose probe finds bfloat16 fast.
    (line,) = progress.emulation_notices(cells, {"bfloat16": 0.45}, "given flags")
    assert "far slower" not in line and "~0x" not in line
    assert "matmul measured here takes bfloat16 ~0.45x float32's time" in line


# -- time left --------------------------------------------------------------------------------


def model(mdl, precision="float32", batch=8, steps=10, warmup=0, phase="training"):
    return Planned("model", {"framework": "pytorch", "model": mdl, "phase": phase,
                             "precision": precision, "device": "cpu", "batch_size": batch,
                             "num_batches": steps, "num_warmup_batches": warmup, "num_gpus": 1})


def test_time_left_scales_the_most_alike_finished_cells_by_steps_and_batch():
    finished = [(model("resnet18", batch=8), 10.0), (model("resnet18", batch=8), 12.0),
                (model("resnet18", "bfloat16", batch=8), 100.0), (model("alexnet"), 4.0)]
    # Same model and precision: median 11 s at 80 samples; 160 samples -> 22 s.
    assert progress.estimate(model("resnet18", batch=16), finished) == pytest.approx(22.0)
    # Warmup steps count as work too: 5+5 steps of 8 = 80 samples.
    assert progress.estimate(model("resnet18", steps=5, warmup=5), finished) == pytest.approx(11)
    assert progress.estimate(model("resnet18", "bfloat16", batch=4), finished) == pytest.approx(50)
    # An unseen precision falls back to the same model: median of 10, 12, 100 s.
    assert progress.estimate(model("resnet18", "float16"), finished) == pytest.approx(12.0)
    # An unseen model: any finished model cell, scaled.
    assert progress.estimate(model("vgg16", batch=4), finished) == pytest.approx(5.5)
    remaining = [model("resnet18", batch=16), model("alexnet", steps=20)]
    assert progress.time_left(remaining, finished) == pytest.approx(22.0 + 8.0)
    assert progress.time_left(remaining, []) is None


def test_status_line_and_durations():
    assert progress.status_line(3, 10, 130.4, failed=1) == \
        "dlbench: 3/10 cells done (1 not ok), about 2 min 10 s left"
    assert progress.status_line(0, 10, None) == "dlbench: 0/10 cells done, time left unknown yet"
    assert progress.status_line(10, 10, 0.0) == "dlbench: 10/10 cells done"
    assert progress.duration(3 * 3600 + 65) == "3 h 01 min"


def test_watcher_reads_finished_results_and_writes_the_status_file(tmp_path):
    cells = {tmp_path / f"c{i}.json": model("resnet18", batch=8) for i in range(3)}
    status = tmp_path / "results" / "status.txt"
    watcher = progress.Watcher(cells, status, stream=open(os.devnull, "w"))  # noqa: SIM115
    (tmp_path / "c0.json").write_text(json.dumps({"wall_time_s": 30.0, "status": "ok"}))
    (tmp_path / "c1.json").write_text("{\"wall_ti")  # being written: not counted yet
    assert watcher.poll()
    assert watcher.report() == "dlbench: 1/3 cells done, about 1 min 00 s left"
    assert status.read_text().startswith("dlbench: 1/3 cells done, about 1 min 00 s left")
    (tmp_path / "c1.json").write_text(json.dumps({"wall_time_s": 10.0, "status": "failed"}))
    assert watcher.poll() and not watcher.poll()
    assert watcher.report() == "dlbench: 2/3 cells done (1 not ok), about 20 s left"


def test_the_status_says_which_cells_run_and_stays_fresh_while_cells_wait(tmp_path):
    """A cell whose job log this run wrote and which has no result is running (on a
    cluster: out of the queue); a log an earlier run left is not. Logs are stamped by the
    clock of the file server or node that wrote them, here an hour behind this host's: a
    log counts as written when its stamp changed since the start, whatever its time says.
    While nothing changes, the status file is still rewritten every refresh_s, so its time
    says the run lives."""
    now = [1000.0]
    cells = {tmp_path / f"c{i}.json": model("resnet18", batch=8) for i in range(3)}
    for i, size in ((1, "x"), (2, "earlier run")):  # logs earlier runs left
        (tmp_path / f"c{i}.log").write_text(size)
        os.utime(tmp_path / f"c{i}.log", (900.0 - 3600, 900.0 - 3600))
    status = tmp_path / "status.txt"
    stream = io.StringIO()
    watcher = progress.Watcher(cells, status, stream=stream, clock=lambda: now[0],
                               log_of=lambda p: p.with_suffix(".log"), refresh_s=60)
    watcher.report()
    written = status.read_text()
    watcher.tick()
    assert status.read_text() == written  # nothing new, not yet refresh_s later
    (tmp_path / "c0.log").write_text("started")
    os.utime(tmp_path / "c0.log", (1001.0 - 3600, 1001.0 - 3600))
    now[0] = 1002.0
    watcher.tick()
    assert status.read_text().startswith("dlbench: 0/3 cells done, 1 running, time left ")
    (tmp_path / "c1.log").write_text("started again")  # an earlier run's log, rewritten
    os.utime(tmp_path / "c1.log", (1002.0 - 3600, 1002.0 - 3600))
    watcher.tick()
    assert status.read_text().startswith("dlbench: 0/3 cells done, 2 running, time left ")
    assert watcher.written_during_run(tmp_path / "c1.log")
    assert not watcher.written_during_run(tmp_path / "c2.log")
    assert stream.getvalue() == ""  # a start is no line in the terminal
    now[0] = 1070.0
    watcher.tick()  # no change, but a minute on: rewritten
    assert "(elapsed 1 min 10 s;" in status.read_text()
    (tmp_path / "c0.json").write_text(json.dumps({"wall_time_s": 30.0, "status": "ok"}))
    watcher.tick()
    assert stream.getvalue() == "dlbench: 1/3 cells done, 1 running, about 1 min 00 s left\n"
    assert watcher.stop(succeeded=True).endswith("run finished: 2 cells without a result")
    ended = status.read_text()
    (tmp_path / "c1.json").write_text(json.dumps({"wall_time_s": 30.0, "status": "ok"}))
    now[0] = 2000.0
    watcher.tick()  # a poll still running as the run ended writes nothing after it
    assert status.read_text() == ended and stream.getvalue().count("\n") == 1


def test_the_time_left_counts_each_cells_process_start_up_too(tmp_path):
    """A result's stages (its process's start-up before the record included) are its
    time, not its wall time alone: each cell's process starts anew."""
    cells = {tmp_path / f"c{i}.json": model("resnet18", batch=8) for i in range(2)}
    watcher = progress.Watcher(cells, tmp_path / "status.txt",
                               stream=open(os.devnull, "w"))  # noqa: SIM115
    (tmp_path / "c0.json").write_text(json.dumps({
        "wall_time_s": 30.0, "status": "ok",
        "stages_s": {"startup": 12.0, "build": 5.0, "measure": 20.0, "other": 5.0}}))
    assert watcher.poll()
    assert watcher.report() == "dlbench: 1/2 cells done, about 42 s left"


def test_a_row_without_a_time_counts_as_done_but_is_no_reference(tmp_path):
    """A failure row that records no time (a launcher's row from before they recorded
    one) is no 0 s cell: the time left waits for a cell with a time."""
    cells = {tmp_path / f"c{i}.json": model("resnet18", batch=8) for i in range(3)}
    watcher = progress.Watcher(cells, tmp_path / "status.txt",
                               stream=open(os.devnull, "w"))  # noqa: SIM115
    (tmp_path / "c0.json").write_text(json.dumps({"wall_time_s": None, "status": "failed"}))
    assert progress.read_wall_time(tmp_path / "c0.json") == (None, "failed")
    assert watcher.poll()
    assert watcher.report() == "dlbench: 1/3 cells done (1 not ok), time left unknown yet"
    (tmp_path / "c1.json").write_text(json.dumps({"wall_time_s": 30.0, "status": "ok"}))
    assert watcher.poll()
    assert watcher.report() == "dlbench: 2/3 cells done (1 not ok), about 30 s left"


def test_the_status_file_says_how_the_run_ended(tmp_path):
    """After an interrupt or a failed job the status file must not read as a run going on;
    after a successful run it says the run finished."""
    cells = {tmp_path / f"c{i}.json": model("resnet18", batch=8) for i in range(3)}
    status = tmp_path / "status.txt"
    watcher = progress.Watcher(cells, status, stream=open(os.devnull, "w"))  # noqa: SIM115
    (tmp_path / "c0.json").write_text(json.dumps({"wall_time_s": 30.0, "status": "ok"}))
    assert watcher.stop(succeeded=False) == \
        "dlbench: 1/3 cells done; run stopped: 2 cells without a result"
    assert status.read_text().startswith(
        "dlbench: 1/3 cells done; run stopped: 2 cells without a result (elapsed ")
    for i in (1, 2):
        (tmp_path / f"c{i}.json").write_text(json.dumps({"wall_time_s": 9.0, "status": "ok"}))
    watcher = progress.Watcher(cells, status, stream=open(os.devnull, "w"))  # noqa: SIM115
    assert watcher.stop(succeeded=True) == "dlbench: 3/3 cells done; run finished"
    assert status.read_text().startswith("dlbench: 3/3 cells done; run finished (elapsed ")
    assert progress.ending(False, 1) == "run stopped: 1 cell without a result"
    assert progress.ending(False, 0) == "run stopped"  # after its cells (a SIGTERM)


# -- the MXNet environment on any host Python ----------------------------------------------


def interpreter(version: str) -> str | None:
    """A real interpreter of ``version`` on this machine, pyenv's or the system's (not a
    pyenv shim, which needs pyenv on PATH)."""
    found = shutil.which(f"python{version}")
    for candidate in (*sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python{version}")),
                      f"/usr/bin/python{version}",
                      *([found] if found and "shims" not in found else [])):
        if Path(candidate).exists() and subprocess.run([str(candidate), "-c", "import venv"],
                                        capture_output=True).returncode == 0:
            return str(candidate)
    return None


def run_mxnet_env(tmp_path: Path, path_dirs: list[Path], python: str, *args: str):
    env = {"PATH": os.pathsep.join(map(str, path_dirs)), "HOME": str(tmp_path)}
    return subprocess.run([python, str(REPO / "envs" / "mxnet_env.py"), *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_mxnet_setup_with_only_python_3_12_succeeds_and_says_why(tmp_path):
    """Runs the real set-up script under a real Python 3.12 with a PATH that holds only
    that interpreter: no venv is built, set-up exits 0 and leaves the reason."""
    py312 = interpreter("3.12")
    if py312 is None:
        pytest.skip("no Python 3.12 on this machine to run the set-up under")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "python3.12"):
        (bin_dir / name).symlink_to(py312)
    venv = tmp_path / "venvs" / "mxnet"
    done = run_mxnet_env(tmp_path, [bin_dir], str(bin_dir / "python3"), "--venv", str(venv))
    assert done.returncode == 0, done.stderr
    reason = (venv / "unavailable.txt").read_text().strip()
    assert reason.startswith("MXNet is unavailable: MXNet 1.9.1 needs Python 3.8-3.11")
    assert "(3.12)" in reason and "python3.11" in reason
    assert done.stderr.strip().splitlines() == [f"mxnet_env: {reason}"]
    assert not (venv / "bin").exists()


def test_mxnet_setup_prefers_an_installed_python_3_11_over_the_one_running_it(tmp_path):
    py311, py312 = interpreter("3.11"), interpreter("3.12")
    if not (py311 and py312):
        pytest.skip("needs Python 3.11 and 3.12 on this machine")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.11").symlink_to(py311)
    done = run_mxnet_env(tmp_path, [bin_dir], py312, "--find-only")
    assert done.returncode == 0 and done.stdout.strip() == str(bin_dir / "python3.11")


def test_mxnet_cells_are_skipped_with_the_reason_when_the_environment_is_unavailable(tmp_path):
    from dlbench import launch
    from dlbench import result as R

    venv = tmp_path / "mxnet"
    venv.mkdir()
    (venv / "unavailable.txt").write_text("MXNet is unavailable: no Python 3.11\n")
    (planned,) = study.expand_config({"studies": {"s": {"grid": {
        "framework": "mxnet", "model": "deep_mnist", "device": "cpu"}}}})
    cell = json.loads(planned.to_json())
    output = tmp_path / "cell.json"
    assert launch.launch(cell, output, str(venv / "bin" / "python")) == 0
    res = R.read(output)
    assert res["status"] == "skipped"
    assert res["error"] == "MXNet is unavailable: no Python 3.11"
    # Without the marker a missing interpreter is a failure, as before.
    (venv / "unavailable.txt").unlink()
    launch.launch(cell, output, str(venv / "bin" / "python"))
    assert R.read(output)["status"] == "failed"


def test_probe_reports_rates_for_each_precision():
    pytest.importorskip("torch")
    rates = cpu.matmul_gflops(size=64, budget_s=0.01)
    assert set(rates) == {"float32", "bfloat16", "float16"}
    assert all(r > 0 for r in rates.values())


# -- recorded with every result, and said in words by the report ---------------------------


def cpu_result(tmp_path: Path, precision: str, step_s: float, native: bool | None) -> Path:
    from dlbench import environment
    from dlbench import result as R

    cell = {"framework": "pytorch", "model": "deep_mnist", "phase": "inference",
            "precision": precision, "batch_size": 16, "num_gpus": 1, "device": "cpu",
            "data": "synthetic"}
    res = R.new_result(kind="model", cell=cell, study="s", cell_id=f"c-{precision}")
    res["environment"] = environment.collect()
    res["extra"]["precision_native"] = native
    res["measurements"] = [R.measurement(name="deep_mnist", pass_="inference",
                                         times_s=[step_s, step_s * 1.1, step_s * 0.9],
                                         items_per_iteration=16)]
    path = tmp_path / f"{precision}.json"
    R.write(R.finish(res, "ok"), path)
    return path


def test_results_and_parquet_carry_the_cpu_capabilities_and_the_report_says_emulated(
        tmp_path, cpu_from):
    from dlbench import aggregate
    from dlbench.report import cpu_precision, data, model_charts

    cpu_from("amd-epyc-zen3-avx2.txt")
    paths = [cpu_result(tmp_path, "float32", 0.01, True),
             cpu_result(tmp_path, "bfloat16", 0.5, False)]
    table = aggregate.write(paths, tmp_path / "t.parquet")
    row = table.to_pylist()[1]
    assert (row["cpu_capability"], row["cpu_features"]) == ("AVX2", "avx2,fma")
    assert (row["cpu_count"] >= 1, row["cpu_cores"], row["cpu_sockets"]) == (True, 2, 1)
    assert row["precision_native"] is False and table.to_pylist()[0]["precision_native"] is True
    models = model_charts.model_frame(data.load(tmp_path / "t.parquet"))
    (fact,) = cpu_precision.emulation_facts(models)
    assert fact["native"] == "emulated" and fact["slowdown_median"] == pytest.approx(50)
    note = cpu_precision.emulation_note(models)
    assert ("On AMD EPYC (AVX2), bfloat16 is emulated on this CPU (it lacks AVX-512 BF16 or "
            "AMX-BF16 (x86), BF16 (arm64)): its bfloat16 steps took 50× as long as float32 "
            "(one cell pair).") in note


def test_results_and_parquet_carry_the_usable_cpus_and_the_slurm_job(tmp_path, monkeypatch):
    """A job given a node's cpuset and run under Slurm: its CPUs, job id and partition
    are recorded and become columns; outside a job they are null."""
    from dlbench import aggregate, cpu

    monkeypatch.setattr(cpu, "usable_cpus", lambda: 3)
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "gpu-h100")
    inside = cpu_result(tmp_path, "float32", 0.01, True)
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_PARTITION"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "o").mkdir()
    outside = cpu_result(tmp_path / "o", "float32", 0.01, True)
    rows = aggregate.write([inside, outside], tmp_path / "t.parquet").to_pylist()
    assert [(r["cpus_usable"], r["slurm_job_id"], r["slurm_partition"]) for r in rows] \
        == [(3, "4711", "gpu-h100"), (3, None, None)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 or more CPUs")
def test_usable_cpus_is_the_process_cpu_set_after_openmp_binds_the_main_thread():
    """OMP_PROC_BIND makes the OpenMP runtime pin the main thread to one CPU as torch loads
    it; a runner (which imports dlbench before its framework) still records every CPU its
    process was given, not the one its main thread was pinned to."""
    script = ("import os, dlbench, torch\n"
              "torch.ones(64, 64) @ torch.ones(64, 64)\n"
              "from dlbench import cpu, environment\n"
              "print(len(os.sched_getaffinity(0)), cpu.usable_cpus(),"
              " environment.collect()['cpus_usable'])\n")
    env = {**os.environ, "OMP_PROC_BIND": "close", "OMP_PLACES": "threads",
           "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    pinned, usable, recorded = map(int, out)
    assert pinned == 1  # the runtime did pin the main thread: else this tests nothing
    assert usable == recorded == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("environ", "usable", "processes", "each"), [
    ({"OMP_NUM_THREADS": "16"}, 16, 8, {"OMP_NUM_THREADS": "2"}),  # the job's, shared
    ({"OMP_NUM_THREADS": "16"}, 8, 2, {"OMP_NUM_THREADS": "4"}),   # capped at the cpuset
    ({}, 12, 4, {"OMP_NUM_THREADS": "3"}),  # nothing set: the CPUs it may run on
    ({"OMP_NUM_THREADS": "3"}, 16, 8, {"OMP_NUM_THREADS": "1"}),   # never zero
    ({"OMP_NUM_THREADS": "x"}, 6, 2, {"OMP_NUM_THREADS": "3"}),    # not a count
    # Every count Snakemake sets gets its share (MKL's wins in PyTorch built with MKL);
    # one that is not a count is not given.
    ({"OMP_NUM_THREADS": "16", "MKL_NUM_THREADS": "16", "OPENBLAS_NUM_THREADS": "4",
      "GOTO_NUM_THREADS": "0", "NUMEXPR_NUM_THREADS": "auto"}, 8, 2,
     {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "2"}),
])
def test_processes_sharing_a_job_get_a_share_of_each_of_its_thread_counts(
        monkeypatch, environ, usable, processes, each):
    monkeypatch.setattr(cpu, "usable_cpus", lambda: usable)
    assert cpu.shared_threads(environ, processes) == each

