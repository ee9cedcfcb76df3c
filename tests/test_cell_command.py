"""The shell command of a cell's job and of a profile's, and a cell run with it.

An interpreter's path is a constant param of the framework's rules; Snakemake fills
``{name}`` in a param's strings from the wildcards, so a path with braces must reach the
launcher unchanged (``literal`` in common.smk). A dry run checks the argument lists; a
real run of one tiny cell checks that it runs and stays done.
"""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlbench import workflow_support

REPO = Path(__file__).resolve().parents[1]
# Braces would be Snakemake format fields, spaces and a quote shell syntax: all must reach
# the launcher as one argument.
AWKWARD_PYTHON = "/opt/envs/py {torch}/it's bin/python3"


def test_an_interpreter_path_with_braces_reaches_the_launcher_unchanged(tmp_path):
    """Not run: the commands themselves (a dry run prints them; the workflow tests run
    cells with the usual interpreter)."""
    cell = {"model": "deep_mnist", "device": "cpu", "batch_size": 2}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "frameworks": {"pytorch": {"python": AWKWARD_PYTHON}},
        "studies": {"quick": {"timeout_s": 7, "grid": cell},
                    "slow": {"grid": {**cell, "batch_size": 4}}},
        # A profile's job takes the same interpreter as a param (Snakemake would read its
        # braces as a wildcard).
        "profiling": {"select": [{"match": {"study": "quick"}, "tools": ["torch"]}]},
    }))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--snakefile",
         str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
         str(tmp_path / "config.yaml")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = [line.split("Shell command:", 1)[1].strip()
                for line in (proc.stdout + proc.stderr).splitlines()
                if "Shell command:" in line and "-m dlbench.launch" in line]
    assert len(commands) == 2
    by_study = {}
    for command in commands:
        argv = shlex.split(command)
        # the interpreter running Snakemake by its one name (python3 for python)
        assert argv[:4] == ["exec", workflow_support.this_python(), "-m", "dlbench.launch"]
        assert argv[argv.index("--python") + 1] == AWKWARD_PYTHON
        # The redirection is the shell's: the log next to the result.
        output = argv[argv.index("--output") + 1]
        assert argv[-3:-1] == [">", output.replace("/cells/", "/logs/").replace(".json", ".log")]
        study = output.split("/")[2]
        by_study[study] = argv[argv.index("--timeout_s") + 1]
    assert by_study == {"quick": "7", "slow": "3600"}
    (profile,) = [line.split("Shell command:", 1)[1].strip()
                  for line in (proc.stdout + proc.stderr).splitlines()
                  if "Shell command:" in line and "dlbench.profiling capture" in line]
    argv = shlex.split(profile)
    assert argv[argv.index("--python") + 1] == AWKWARD_PYTHON


@pytest.mark.slow
def test_a_cell_runs_with_an_interpreter_under_a_braced_folder_and_stays_done(tmp_path):
    """A real run of one tiny cell whose runner interpreter lives under "py {env}/": the
    cell is ok, and a second run has nothing to do (the param given as a function records
    the same value it compares next time)."""
    folder = tmp_path / "py {env}"
    folder.mkdir()
    python = folder / "python"  # this environment's interpreter, by another path
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "frameworks": {"pytorch": {"python": str(python)}},
        "studies": {"tiny": {"grid": {"model": "deep_mnist", "device": "cpu", "batch_size": 2,
                                      "num_batches": 1, "num_warmup_batches": 0}}},
    }))
    # The target first: --configfile takes several values.
    snakemake = [sys.executable, "-m", "snakemake", "results/benchmarks.parquet", "--cores",
                 "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                 "--configfile", str(tmp_path / "config.yaml")]
    proc = subprocess.run(snakemake, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = (tmp_path / "results").glob("*/tiny/cells/*.json")
    document = json.loads(result.read_text())
    assert document["status"] == "ok", document.get("error")
    again = subprocess.run([*snakemake, "-n"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, (
        again.stdout[-3000:] + again.stderr[-3000:])


def test_repeats_and_profiles_of_a_cell_ask_what_its_first_run_asks(tmp_path):
    """set-threads and set-resources name the first run's rule (benchmark_pytorch, as in the
    cluster profiles); a repeat round (benchmark_pytorch_r1) and a profiled run
    (profile_pytorch) are rules of their own, and must ask the same threads and resources,
    or their runs would differ in allocation from the one they repeat or explain. Not run:
    what each job asks, from a dry run."""
    cell = {"model": "deep_mnist", "device": "cpu", "batch_size": 2}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "studies": {"twice": {"repeats": 2, "grid": cell}},
        "profiling": {"select": [{"match": {"study": "twice"}, "tools": ["torch"]}]},
    }))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "8", "--snakefile",
         str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
         str(tmp_path / "config.yaml"), "--set-threads", "benchmark_pytorch=3",
         "--set-resources", "benchmark_pytorch:runtime=77", "benchmark_pytorch:mem_mb=1234"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {}
    for block in (proc.stdout + proc.stderr).split("\nrule ")[1:]:
        name, _, body = block.partition(":")
        jobs[name] = dict(line.strip().split(": ", 1) for line in body.splitlines()
                          if line.strip().startswith(("threads: ", "resources: ")))
    for name in ("benchmark_pytorch", "benchmark_pytorch_r1", "profile_pytorch"):
        assert jobs[name]["threads"] == "3", (name, jobs[name])
        assert "runtime=77" in jobs[name]["resources"], (name, jobs[name])
        assert "mem_mb=1234" in jobs[name]["resources"], (name, jobs[name])
