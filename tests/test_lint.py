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


def shell_commands(text):
    """Each `shell:` directive's lines (the directive's value, comments left out)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "shell:":
            continue
        indent = len(line) - len(line.lstrip())
        value = []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            if following.strip() and not following.strip().startswith("#"):
                value.append(following.strip())
        yield value


def test_shell_commands_are_plain_string_literals():
    """Snakemake evaluates a rule's `shell:` expression again when its job runs: in a rule
    made in a loop, a call or an f-string there would see the loop's last value (every
    framework's jobs would run the last framework's command). Values per rule go through
    params; the command is a plain literal."""
    checked = 0
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        for value in shell_commands(path.read_text()):
            checked += 1
            assert value and all(line.startswith('"') for line in value), (path.name, value)
    assert checked >= 5
