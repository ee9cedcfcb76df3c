"""End-to-end runs of the Snakemake workflow on a tiny CPU study, in a temporary folder.

Each snakemake start costs seconds, so the checks share one workflow folder and run in
order: a full run (with a failing cell), an added batch size, a changed parameter, and the
Snakemake report.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dlbench import study as dlbench_study
from dlbench import systems

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]

pytestmark = pytest.mark.slow


def study(batch_sizes, deep_mnist_batches=2):
    return {
        "studies": {
            "tiny": {
                "grid": {"framework": "pytorch", "model": "deep_mnist", "phase": "training",
                         "precision": "float32", "batch_size": batch_sizes, "device": "cpu",
                         "num_batches": deep_mnist_batches, "num_warmup_batches": 1},
            },
            "broken": {
                "description": "a cell that cannot fit in memory: it must become an oom row",
                "grid": {"model": "paradnn_fc", "device": "cpu", "num_batches": 1,
                         "num_warmup_batches": 0,
                         "model_opts": {"layers": 2, "nodes": 2000000, "input_size": 2000000}},
            },
        }
    }


def snakemake(workdir, *args):
    proc = subprocess.run([*SNAKEMAKE, "--directory", str(workdir), "--configfile",
                           str(workdir / "config.yaml"), *args],
                          capture_output=True, text=True, timeout=900)
    return proc


def planned_jobs(dry_run_output):
    """rule -> count from the job table of a dry run."""
    counts = {}
    for line in dry_run_output.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match and match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("study")
    (path / "config.yaml").write_text(yaml.safe_dump(study([2, 4])))
    proc = snakemake(path, "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return path


def test_full_run_gives_one_row_per_cell_and_keeps_failures(workdir):
    table = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    assert len(table) == 3
    ok = [r for r in table if r["study"] == "tiny"]
    assert {r["batch_size"] for r in ok} == {2, 4} and {r["status"] for r in ok} == {"ok"}
    assert all(r["throughput"] > 0 and len(r["times_s"]) == 2 for r in ok)
    (oom,) = [r for r in table if r["study"] == "broken"]
    assert oom["status"] == "oom" and oom["throughput"] is None and oom["error"]
    assert (workdir / "results" / "benchmarks.csv").exists()
    html = (workdir / "results" / "report" / "index.html").read_text()
    assert "deep_mnist" in html
    logs = list((workdir / "results" / systems.default_label() / "tiny" / "logs").glob("*.log"))
    assert len(logs) == 2 and "__results.throughput__=" in logs[0].read_text()


def test_adding_a_batch_size_schedules_only_the_new_cell(workdir):
    (workdir / "config.yaml").write_text(yaml.safe_dump(study([2, 4, 8])))
    proc = snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs == {"benchmark_pytorch": 1, "aggregate": 1, "report": 1, "all": 1}
    assert "bs8" in proc.stdout + proc.stderr


def test_changing_a_parameter_reruns_exactly_the_affected_cells(workdir):
    (workdir / "config.yaml").write_text(yaml.safe_dump(study([2, 4], deep_mnist_batches=3)))
    proc = snakemake(workdir, "-n")
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs["benchmark_pytorch"] == 2
    outputs = re.findall(r"output: (results/\S+/cells/\S+\.json)$", proc.stdout + proc.stderr,
                         flags=re.MULTILINE)
    # Both deep_mnist cells (their num_batches changed); the oom cell is untouched.
    assert len(outputs) == 2 and all("/tiny/" in o and "deep-mnist" in o for o in outputs)


def test_snakemake_report_embeds_the_report_outputs(workdir):
    (workdir / "config.yaml").write_text(yaml.safe_dump(study([2, 4])))
    out = workdir / "snakemake-report.zip"
    proc = snakemake(workdir, "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    listing = subprocess.run(["unzip", "-l", str(out)], capture_output=True, text=True).stdout \
        if shutil.which("unzip") else _zip_names(out)
    assert "index.html" in listing and ".svg" in listing


def _zip_names(path):
    import zipfile

    with zipfile.ZipFile(path) as archive:
        return "\n".join(archive.namelist())


def test_two_systems_in_one_results_tree_are_both_kept_and_a_third_runs_every_cell(workdir):
    """A results/<system>/ tree copied in from another machine joins the table without any
    cell running, less the results its last run of a study no longer planned (its plan);
    so do this system's results of a study the config no longer names (a run of another
    config measured them); a run under a new label plans every cell there, under its own
    folder. A run records its plan of each study it names; a dry run does not."""
    only_tiny = {"studies": {"tiny": study([2, 4])["studies"]["tiny"]}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(only_tiny))
    here = workdir / "results" / systems.default_label()
    plan = systems.read_plan(here / "tiny" / systems.PLAN_FILE)
    assert plan.results == {p.name for p in (here / "tiny" / "cells").glob("*.json")}
    assert len(plan.results) == 2 and plan.profiles == frozenset()
    shutil.copytree(here, workdir / "results" / "other-machine")
    # the other machine's last run of tiny measured one batch size: the other is stale
    stale = sorted((workdir / "results" / "other-machine" / "tiny" / "cells").glob("*.json"))[1]
    systems.write_plan(workdir / "results" / "other-machine" / "tiny" / systems.PLAN_FILE,
                       systems.Plan(plan.results - {stale.name}, frozenset()))
    (here / "tiny" / systems.PLAN_FILE).unlink()
    # This system's calibration result of another config (a GPU's): a config calibrating
    # the CPU plans its own cell and reads that one as it is; Snakemake asked the benchmark
    # rule (whose pattern covers the calibration study) to make it, and the rule failed.
    gpu = dlbench_study.Cell(dlbench_study.CALIBRATION_STUDY, "calibrate",
                             {"framework": "pytorch", "device": "gpu"})
    theirs = systems.result_path(systems.default_label(), gpu.study, gpu.id,
                                 workdir / "results")
    theirs.parent.mkdir(parents=True)
    theirs.write_text("{}")
    calibrating = {"studies": {"tiny": {**only_tiny["studies"]["tiny"], "calibrate": True}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(calibrating))
    proc = snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert planned_jobs(proc.stdout + proc.stderr)["benchmark_pytorch"] == 1  # the CPU's
    shutil.rmtree(theirs.parent.parent)
    (workdir / "config.yaml").write_text(yaml.safe_dump(only_tiny))
    proc = snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "benchmark_pytorch" not in planned_jobs(proc.stdout + proc.stderr)
    assert not (here / "tiny" / systems.PLAN_FILE).exists()  # dry runs record nothing
    proc = snakemake(workdir, "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert systems.read_plan(here / "tiny" / systems.PLAN_FILE) == plan
    table = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    assert {r["system"] for r in table} == {systems.default_label(), "other-machine"}
    # the broken study's cell of both systems, tiny's two here and one there (its plan's)
    assert sorted(r["system"] for r in table if r["study"] == "broken") == sorted(
        [systems.default_label(), "other-machine"])
    assert len(table) == 5
    assert str(stale.relative_to(workdir)) not in {r["source"] for r in table}
    proc = snakemake(workdir, "-n", "--config", "system=third")
    assert planned_jobs(proc.stdout + proc.stderr)["benchmark_pytorch"] == 2
    outputs = re.findall(r"output: (results/\S+/cells/\S+\.json)$", proc.stdout + proc.stderr,
                         flags=re.MULTILINE)
    assert len(outputs) == 2 and all(o.startswith("results/third/") for o in outputs)
    shutil.rmtree(workdir / "results" / "other-machine")
    (workdir / "config.yaml").write_text(yaml.safe_dump(study([2, 4])))


def test_a_results_tree_made_before_system_labels_is_adopted_and_reruns_nothing(workdir):
    """The layout of earlier releases (results/<study>/cells/, Snakemake's metadata made
    for those paths) moves under the current system on the first run: nothing reruns."""
    here = workdir / "results" / systems.default_label()
    for name in ("tiny", "broken"):
        (here / name).rename(workdir / "results" / name)
    shutil.rmtree(workdir / ".snakemake" / "metadata")  # made for the old paths
    proc = snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"as system {systems.default_label()!r}" in proc.stderr
    assert "benchmark_pytorch" not in planned_jobs(proc.stdout + proc.stderr)
    assert len(list((here / "tiny" / "cells").glob("*.json"))) == 2
    assert not (workdir / "results" / "tiny").exists()


def test_raising_repeats_runs_only_the_new_repeats_round_by_round(workdir):
    """repeats: 3 on a finished study runs each cell twice more (its first run stays), every
    cell's second run before any third; the table has one row per run and the run-to-run
    statistics, and a second dry run has nothing to do."""
    (workdir / "config.yaml").write_text(yaml.safe_dump({**study([2, 4]), "repeats": 3}))
    proc = snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs.get("benchmark_pytorch_r1") == 3 and jobs.get("benchmark_pytorch_r2") == 3
    assert "benchmark_pytorch" not in jobs
    # Round k has priority -k: what makes the scheduler run the rounds in order.
    blocks = re.findall(r"rule benchmark_pytorch_r(\d+):(.*?)(?=\nrule |\Z)",
                        proc.stdout + proc.stderr, flags=re.DOTALL)
    assert len(blocks) == 6
    assert all(f"priority: -{k}\n" in body for k, body in blocks)
    proc = snakemake(workdir, "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    tiny = [r for r in table if r["study"] == "tiny" and r["system"] == systems.default_label()]
    assert sorted((r["batch_size"], r["repeat"]) for r in tiny) == [
        (b, k) for b in (2, 4) for k in range(3)]
    assert {r["repeats"] for r in tiny} == {3} and {r["ci_method"] for r in tiny} == {"repeats"}
    assert all(r["run_to_run_cv"] is not None and r["unstable"] is not None for r in tiny)
    runs = {k: [r for r in table if r["repeat"] == k and r["system"] == systems.default_label()]
            for k in (1, 2)}
    assert max(r["finished_at"] for r in runs[1]) <= min(r["started_at"] for r in runs[2])
    proc = snakemake(workdir, "-n")
    assert not any(rule.startswith("benchmark_") for rule in planned_jobs(proc.stdout + proc.stderr))


def test_an_invalid_result_is_a_failed_row_and_the_next_run_measures_its_cell(workdir):
    """A result file cut short: the run gives its failed row and ends well (moved aside by
    the aggregate, it was missing from the run's own target: 'Missing files after 10
    seconds', exit 1); the next run moves it into invalid/ and measures the cell again."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(study([2, 4])))
    cells = workdir / "results" / systems.default_label() / "tiny" / "cells"
    victim = sorted(cells.glob("*.json"))[0]
    victim.write_text(victim.read_text()[:200])
    proc = snakemake(workdir, "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    (row,) = [r for r in table if r["source"] == str(victim.relative_to(workdir))]
    assert row["status"] == "failed" and "invalid result file" in row["error"]
    assert victim.exists()
    proc = snakemake(workdir, "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 invalid result file(s) moved aside" in proc.stderr
    assert len(list((cells / "invalid").iterdir())) == 1
    table = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    (row,) = [r for r in table if r["source"] == str(victim.relative_to(workdir))]
    assert row["status"] == "ok"


def test_config_values_on_the_command_line_alone_keep_the_default_study(tmp_path):
    """README's `snakemake --config retry_failed=true` (no --configfile): the values join
    config/config.yaml's studies (a bare `if not config` took them for a whole config)."""
    shutil.copytree(REPO / "config", tmp_path / "config")  # the study and its op configs
    proc = subprocess.run([*SNAKEMAKE, "--directory", str(tmp_path), "-n", "--config",
                           "system=ab-node", "retry_failed=true"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = re.findall(r"output: (results/\S+/cells/\S+\.json)$", proc.stdout + proc.stderr,
                         flags=re.MULTILINE)
    assert outputs and all(o.startswith("results/ab-node/") for o in outputs)


def test_a_config_file_without_studies_is_refused_not_run_as_the_default_study(tmp_path):
    """--configfile with its studies left out (commented away): one line naming the field,
    not the default CPU demo run in their place."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / "mine.yaml").write_text("repeats: 2\n")
    proc = subprocess.run([*SNAKEMAKE, "--directory", str(tmp_path), "-n", "--configfile",
                           str(tmp_path / "mine.yaml")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    assert "dlbench config error: config: 'studies' is a required property" in proc.stderr
    assert "benchmark_pytorch" not in proc.stdout + proc.stderr


SUBMIT = """\
#!/bin/sh
# A scheduler that runs each job script at once, noting its rule.
grep -o '"rule": *"[a-z_0-9]*"' "$1" | head -1 >> "{log}"
nohup sh "$1" >/dev/null 2>&1 &
echo 1
"""


def test_on_a_cluster_only_cells_are_submitted_the_table_and_report_run_here(tmp_path):
    """Through the cluster-generic executor (a stand-in scheduler that runs each job
    script at once; no Slurm here): the cell is submitted, the aggregate and the report
    run on the driving host (localrules), not queued for a cell's allocation. Also: the
    report's warning on a misspelt baseline_system reaches the console."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"studies": {"t": {"grid": {
        "model": "deep_mnist", "device": "cpu", "batch_size": 2, "num_batches": 2,
        "num_warmup_batches": 1}}}, "baseline_system": "nosuch"}))
    submitted = tmp_path / "submitted.txt"
    submit = tmp_path / "submit.sh"
    submit.write_text(SUBMIT.format(log=submitted))
    submit.chmod(0o755)
    proc = snakemake(tmp_path, "--executor", "cluster-generic", "--cluster-generic-submit-cmd",
                     str(submit), "--jobs", "2", "--latency-wait", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert submitted.read_text().split() == ['"rule":', '"benchmark_pytorch"']
    assert "localrule aggregate:" in proc.stderr and "localrule report:" in proc.stderr
    assert (tmp_path / "results" / "report" / "index.html").is_file()
    # The report's warnings reach the console, not only its log.
    assert "dlbench: report: baseline_system 'nosuch' is no system of " in proc.stderr
