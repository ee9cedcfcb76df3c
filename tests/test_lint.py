"""The code style the project holds itself to: ruff, snakefmt and Snakemake's own linter."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(*cmd):
    return subprocess.run([sys.executable, "-m", *cmd], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_ruff_is_clean():
    proc = run("ruff", "check", "src", "tests", "benchmarks", "workflow/scripts", "envs")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_snakefmt_is_clean():
    proc = run("snakefmt", "--check", "Snakefile", "workflow/rules")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_snakemake_lint_is_clean():
    proc = run("snakemake", "--lint")
    assert proc.returncode == 0 and "Congratulations" in proc.stdout + proc.stderr, (
        proc.stdout[-3000:] + proc.stderr[-3000:])
