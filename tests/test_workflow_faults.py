"""Faults through the whole workflow (real Snakemake, real launcher, real runners): the
launcher killed mid-cell, a failed cell retried, a config typo.

The framework's interpreter is a wrapper around this Python that can hold a cell (sleep
before it starts measuring) or fail it, driven by marker files, so the timing of the fault
is certain and the cells stay tiny. Snakemake starts cost seconds: three runs in all.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dlbench import result as R
from dlbench import study, systems

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]

pytestmark = pytest.mark.slow

WRAPPER = """\
import os, sys, time
from pathlib import Path
here = Path(__file__).parent
args = " ".join(sys.argv)
if "--batch_size=2" in args and (here / "hold").exists():
    (here / "held").write_text(str(os.getpid()))
    time.sleep(120)
if "--batch_size=3" in args and (here / "fail").exists():
    sys.exit("wrapper: failing on purpose")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def runner_pids(workdir: Path) -> list[int]:
    """Runner processes of this workflow folder (their --output lies in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dlbench.pytorch" in argv and any(str(workdir).encode() in a for a in argv):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults")
    wrapper = path / "python.py"
    wrapper.write_text(WRAPPER)
    python = path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {wrapper} \"$@\"\n")
    python.chmod(0o755)
    config = {
        "frameworks": {"pytorch": {"python": str(python)}},
        "studies": {"faults": {"grid": {
            "framework": "pytorch", "model": "deep_mnist", "phase": "inference",
            "precision": "float32", "batch_size": [2, 3], "device": "cpu",
            "num_batches": 2, "num_warmup_batches": 1}}},
    }
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    return path


def snakemake(workdir: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [*SNAKEMAKE, "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"),
         "--cores", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def result_of(workdir: Path, batch: int) -> dict | None:
    for path in (workdir / "results" / systems.default_label() / "faults" / "cells").glob("*.json"):
        res = R.read(path)
        if res["cell"]["batch_size"] == batch:
            return res
    return None


def test_killed_launcher_leaves_no_runner_and_no_result_and_the_rerun_remeasures(workdir):
    """kill -9 of the launcher of a running cell (as a scheduler's time limit or a failed
    node ends a job): its runner dies at once, no two runners ever run at the same time,
    the killed cell has no result (no stale 'ok'), the table and report of the results
    there are are written all the same, the report saying which cell is missing, and the
    next run measures it and writes both as usual."""
    (workdir / "hold").touch()
    (workdir / "fail").touch()
    proc = snakemake(workdir)
    most_at_once = 0
    stop = threading.Event()

    def watch():
        nonlocal most_at_once
        while not stop.is_set():
            most_at_once = max(most_at_once, len(runner_pids(workdir)))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        held = workdir / "held"
        deadline = time.monotonic() + 300
        while not held.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert held.exists(), proc.communicate()[0][-3000:]
        runner = int(held.read_text())
        launcher = parent_of(runner)
        assert b"dlbench.launch" in Path(f"/proc/{launcher}/cmdline").read_bytes()
        killed_at = R.now_iso()
        os.kill(launcher, signal.SIGKILL)
        gone = time.monotonic() + 5
        while alive(runner) and time.monotonic() < gone:
            time.sleep(0.02)
        assert not alive(runner), "the runner outlived its killed launcher"
        output, _ = proc.communicate(timeout=600)
    finally:
        stop.set()
        watcher.join()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0  # the killed cell's job failed
    assert most_at_once == 1
    assert result_of(workdir, 2) is None
    assert not list((workdir / "results" / systems.default_label() / "faults" / "cells").glob(".*.running"))
    assert result_of(workdir, 3)["status"] == "failed"
    # Snakemake would not aggregate (the table waits for every cell): the workflow did.
    rows = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    assert [(r["batch_size"], r["status"]) for r in rows] == [(3, "failed")]
    assert ("dlbench: 1 of 2 cell results are missing (their jobs failed or were stopped: "
            "see above); ") in output
    assert "dlbench: results/benchmarks.parquet (1 rows) and results/report hold " in output
    page = (workdir / "results" / "report" / "index.html").read_text()
    (missing_cell,) = [c.id for c in study.expand_config(yaml.safe_load(
        (workdir / "config.yaml").read_text())) if c.params["batch_size"] == 2]
    assert "Incomplete run" in page and f"Missing: faults/{missing_cell}." in page

    (workdir / "hold").unlink()
    proc = snakemake(workdir)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    res = result_of(workdir, 2)
    assert res["status"] == "ok" and res["started_at"] > killed_at
    rows = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    assert sorted(r["batch_size"] for r in rows) == [2, 3]
    assert "Incomplete run" not in (workdir / "results" / "report" / "index.html").read_text()
    # A recorded failure stays recorded until asked for again.
    assert result_of(workdir, 3)["status"] == "failed"


def test_retry_failed_runs_failed_cells_again(workdir):
    (workdir / "fail").unlink()
    before = result_of(workdir, 2)
    # A dry run says what the run would do, and that Snakemake's summary leaves it out
    # (it said "Nothing to be done" under the line, with no word why).
    proc = snakemake(workdir, "--config", "retry_failed=1", "-n")
    output, _ = proc.communicate(timeout=600)
    assert "retry_failed: would run 1 cell(s) recorded as failed again (their results are " \
           "still there: Snakemake's dry run below does not count them)" in output, output
    proc = snakemake(workdir, "--config", "retry_failed=true")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    assert "retry_failed: running 1 cell(s) recorded as failed again" in output
    assert (result_of(workdir, 3) or {}).get("status") == "ok", output[-3000:]
    (kept,) = (workdir / "results" / systems.default_label() / "faults" / "cells" / "retried").glob("*.json")
    assert R.read(kept)["status"] == "failed"
    assert result_of(workdir, 2) == before  # an ok cell is not measured again


def test_a_config_typo_stops_the_run_in_one_line_before_any_job(workdir, tmp_path):
    """A missing op config beside a valid study: nothing runs, one line names study, field
    and path (no 'Nothing to be done', no MissingInputException)."""
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["studies"]["ops"] = {"kind": "ops", "grid": {"op_config": "no/such/ops.json"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = subprocess.run([*SNAKEMAKE, "--directory", str(workdir), "--configfile", str(bad),
                           "--cores", "1", "--dry-run"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "dlbench config error" in line]
    assert errors == ["dlbench config error: study 'ops': op_config: no/such/ops.json: "
                      "no such file"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "MissingInput" not in proc.stderr
