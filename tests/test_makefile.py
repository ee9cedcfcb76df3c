"""The Makefile's entry points as make would run them (make -n: printed, not run)."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def run_commands(*variables):
    proc = subprocess.run(["make", "-n", "--no-print-directory", "run", *variables], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if "snakemake" in line]


def test_make_run_runs_the_default_study_or_the_config_given():
    assert run_commands() == [".venv/bin/snakemake --cores all "]
    assert run_commands("CONFIG=my studies.yaml") == [
        ".venv/bin/snakemake --cores all --configfile 'my studies.yaml'"]
