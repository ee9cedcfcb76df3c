"""The benchmark scripts (benchmarks/*.py) on bad input and at their edges, without running
a full benchmark: each bad flag is refused by the parser in one line naming it, warm-up runs
stay out of the timed rounds, and failures say what failed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
_LOADED: dict[str, object] = {}


def script(name: str):
    """benchmarks/<name>.py as a module (loaded once: some import torch)."""
    if name not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _LOADED[name] = module
    return _LOADED[name]


BAD_FLAGS = [
    ("op_timing", ["--rounds", "0"], "--rounds"),
    ("op_timing", ["--iterations", "0"], "--iterations"),
    ("op_timing", ["--threads", "0"], "--threads"),
    ("harness_overhead", ["--rounds", "0"], "--rounds"),
    ("harness_overhead", ["--warmup", "-1"], "--warmup"),
    ("monitor_overhead", ["--warmup", "-1"], "--warmup"),
    ("monitor_pss", ["--out", "x.json", "--children", "-1"], "--children"),
    ("monitor_overhead", ["--rounds", "0"], "--rounds"),
    ("monitor_overhead", ["--interval_ms", "0"], "--interval_ms"),
    ("monitor_pss", ["--out", "x.json", "--rounds", "0"], "--rounds"),
    ("report_scale", ["--out", "x.json", "--rounds", "0"], "--rounds"),
    ("report_scale", ["--out", "x.json", "--cells-scale", "0"], "--cells-scale"),
    ("data_loaders", ["--workers", "0"], "--workers"),
    ("data_loaders", ["--workers", "1,0"], "--workers"),
    ("data_loaders", ["--rounds", "0"], "--rounds"),
    ("data_loaders", ["--mxnet-python", "/nonexistent/bin/python"], "--mxnet-python"),
    ("dry_run_scaling", ["--out", "x.json", "--rounds", "0"], "--rounds"),
    ("compare_honesty", ["--slow-runs", "0"], "--slow-runs"),
    ("compare_honesty", ["--runs", "2"], "--runs"),
    ("fresh_clone", ["--out", "x.json", "--python", "/nonexistent/bin/python3"], "--python"),
]


@pytest.mark.parametrize(("name", "argv", "flag"), BAD_FLAGS,
                         ids=[f"{n}{' '.join(a)}" for n, a, _ in BAD_FLAGS])
def test_a_bad_flag_is_refused_in_one_line_naming_it(name, argv, flag, capsys, tmp_path,
                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing a refused run might write lands in the tree
    with pytest.raises(SystemExit) as exc:
        script(name).main(argv)
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"argument {flag}" in errors[0], errors


def test_report_scale_refuses_to_keep_into_a_folder_that_holds_something(tmp_path, capsys):
    kept = tmp_path / "results"
    kept.mkdir()
    (kept / "precious.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        script("report_scale").main(["--out", str(tmp_path / "r.json"), "--rounds", "1",
                                     "--cells-scale", "50", "--keep", str(kept)])
    assert exc.value.code == 2
    assert "argument --keep" in capsys.readouterr().err
    assert (kept / "precious.json").exists()


def test_monitor_overhead_runs_an_untimed_pair_first_and_makes_the_out_folder(
        tmp_path, monkeypatch, capsys):
    bench = script("monitor_overhead")
    calls = []

    def fake_cell(args, interval_ms, out):
        calls.append("on" if interval_ms > 0 else "off")
        return {"monitor": interval_ms > 0, "throughput": 100.0, "throughput_p10": 110.0,
                "sampler_cpu_fraction": 0.001, "sample_count": 3}

    monkeypatch.setattr(bench, "run_cell", fake_cell)
    out = tmp_path / "new" / "folder" / "mo.json"
    assert bench.main(["--rounds", "2", "--out", str(out)]) == 0
    assert calls == ["on", "off", "on", "off", "off", "on"]  # warm-up pair, then 2 rounds
    report = json.loads(out.read_text())
    assert len(report["rounds"]) == 2 and "untimed_warmup_pair" in report
    assert {"created_utc", "host", "cpu_model", "python", "torch"} <= set(report)
    assert report["interval_ms"] == bench.monitor.DEFAULT_INTERVAL_MS
    assert f"--interval_ms {bench.monitor.DEFAULT_INTERVAL_MS:g}" in bench.__doc__
    # --output, the old name, still works
    assert bench.parser().parse_args(["--output", "x.json"]).out == Path("x.json")


def test_harness_overhead_warms_both_sides_before_its_rounds(monkeypatch):
    bench = script("harness_overhead")
    calls = []
    monkeypatch.setattr(bench, "our_runner", lambda *a: calls.append("runner") or 10.0)
    monkeypatch.setattr(bench, "bare_loop", lambda *a: calls.append("bare") or 10.0)
    args = bench.parser().parse_args(["--rounds", "2"])
    case = bench.case_of("resnet18", "eager", False, args)
    assert calls == ["runner", "bare", "runner", "bare", "bare", "runner"]
    assert case["runner_samples_per_s"] == [10.0, 10.0]


def test_harness_overhead_says_how_it_ran_and_removes_its_inductor_cache(
        tmp_path, monkeypatch):
    bench = script("harness_overhead")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "placeholder")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")  # restored (unset) after the test
    seen = []
    monkeypatch.setattr(bench, "all_cases",
                        lambda args: seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"]) or [])
    out = tmp_path / "ho.json"
    assert bench.main(["--out", str(out), "--rounds", "3",
                       "--runner_option=--monitor_interval_ms=0"]) == 0
    assert not Path(seen[0]).exists()
    report = json.loads(out.read_text())
    assert (report["rounds"], report["warmup_iterations"], report["measured_iterations"]) == (
        3, 2, 8)
    assert report["runner_options"] == ["--monitor_interval_ms=0"]
    assert "untimed_warmup_pair" in report and "cpu_model" in report


def test_compare_honesty_names_the_failing_cell_and_its_last_words(tmp_path, monkeypatch):
    bench = script("compare_honesty")
    failed = subprocess.CompletedProcess([], 1, "", "Traceback...\nRuntimeError: boom\n")
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **kw: failed)
    with pytest.raises(SystemExit) as exc:
        bench.run_study(tmp_path, "run0", None)
    message = str(exc.value.code)
    assert message.startswith("compare_honesty: cell pytorch_") and "of run run0" in message
    assert message.endswith("failed (exit 1): RuntimeError: boom") and "\n" not in message


def test_fresh_clone_records_a_failed_cell_times_step_instead_of_raising(tmp_path):
    got = script("fresh_clone").cell_times(tmp_path / "missing.parquet", Path(sys.executable))
    assert got["error"].startswith("reading missing.parquet failed (exit 1): ")


def test_fresh_clone_removes_the_clone_when_a_step_breaks(tmp_path, monkeypatch):
    bench = script("fresh_clone")
    folder = tmp_path / "fresh"
    clone = folder / "dlbench"

    def breaks(*args):
        clone.mkdir(parents=True)
        raise RuntimeError("make broke")

    monkeypatch.setattr(bench.tempfile, "mkdtemp", lambda prefix: str(folder.mkdir() or folder))
    monkeypatch.setattr(bench, "measure", breaks)
    with pytest.raises(RuntimeError):
        bench.main(["--out", str(tmp_path / "fc.json"), "--python", sys.executable])
    assert folder.exists() and not clone.exists()


def test_data_loaders_does_not_judge_raw_pixels_against_the_decode_bound():
    bench = script("data_loaders")
    table = {name: {"2": {"ratio_to_bound": 1.67}} for name in (
        "bound", "synthetic", "image_folder", "caffe_lmdb_raw", "caffe_lmdb_raw_processes",
        "caffe_lmdb_encoded")}
    table["image_folder"]["2"]["ratio_to_bound"] = 0.5
    meets, not_judged = bench.verdicts(table, "2")
    assert meets == {"image_folder": False, "caffe_lmdb_encoded": True}
    assert set(not_judged) == {"caffe_lmdb_raw", "caffe_lmdb_raw_processes"}


@pytest.mark.parametrize("name", ["op_timing", "monitor_pss", "report_scale",
                                  "dry_run_scaling", "compare_honesty", "data_loaders"])
def test_every_script_records_the_cpu_model_not_just_the_architecture(name):
    """The shared provenance (benchmarks/_common.py), not platform.processor()."""
    source = (BENCHMARKS / f"{name}.py").read_text()
    assert "provenance()" in source and "platform.processor()" not in source


def test_provenance_names_the_cpu_model_and_the_versions():
    sys.path.insert(0, str(BENCHMARKS))
    from _common import provenance

    from dlbench import cpu

    facts = provenance()
    info = cpu.this_cpu()
    assert facts["cpu_model"] == (info.model if info and info.model else facts["cpu_model"])
    assert facts["created_utc"].endswith("+00:00") and facts["dlbench_version"]
    assert facts["torch"] and facts["python"].count(".") == 2
