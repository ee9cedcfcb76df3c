"""The framework plug-in point: a framework defined only under tests/plugins (NumPy, one
model), registered through its entry point and nothing else, runs cells through the real
workflow and lands in the Parquet and the report."""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"

pytestmark = pytest.mark.slow


def test_a_framework_from_one_folder_runs_through_the_workflow(tmp_path):
    config = {"studies": {"np": {"grid": {
        "framework": "numpy", "model": "numpy_mlp", "device": "cpu",
        "phase": ["training", "inference"], "precision": ["float32", "float64"],
        "batch_size": 16, "num_batches": 5, "num_warmup_batches": 1}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PLUGINS), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"),
         "--cores", "2"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "benchmark_numpy" in proc.stderr  # the rule the registry made for it
    rows = pq.read_table(tmp_path / "results" / "benchmarks.parquet").to_pylist()
    assert len(rows) == 4
    assert {r["framework"] for r in rows} == {"numpy"} and {r["status"] for r in rows} == {"ok"}
    assert {(r["phase"], r["precision"]) for r in rows} == {
        ("training", "float32"), ("training", "float64"),
        ("inference", "float32"), ("inference", "float64")}
    assert all(r["throughput"] > 0 and r["tflops"] > 0 and r["framework_version"] for r in rows)
    html = (tmp_path / "results" / "report" / "index.html").read_text()
    assert "numpy_mlp" in html


def test_without_the_plugin_the_framework_is_one_config_error(tmp_path):
    from dlbench import study

    with pytest.raises(study.ConfigError,
                       match=r"^study 'np': framework: unknown value 'numpy' \(valid: pytorch, mxnet\)$"):
        study.expand_config({"studies": {"np": {"grid": {"framework": "numpy",
                                                          "model": "numpy_mlp"}}}})


def test_dlbench_list_models_shows_the_models_a_plugin_adds():
    """`dlbench list models` reads the registry with its plug-ins (it read the built-in
    catalogue only)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PLUGINS), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "dlbench.command", "list", "models"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if "numpy_mlp" in line]
    assert "numpy" in line.replace("numpy_mlp", "")
