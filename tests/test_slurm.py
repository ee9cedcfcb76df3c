"""The cluster profiles against a real Slurm: munged, slurmctld and slurmd on this machine.

A one-node Slurm (tests/slurm/cluster.py) declares 8 CPUs and two GPUs whose device files
are fakes, so GPU requests are scheduled and Slurm sets CUDA_VISIBLE_DEVICES; no CUDA
device exists behind them. The same small study (two DeepMNIST CPU cells, a cell whose
interpreter is missing, a GPU cell) runs locally, through profiles/slurm and through
profiles/cluster-generic, and must give the same cells with the same statuses. Skipped
without root or the Debian packages slurmctld, slurmd, slurm-client and munge.
"""

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dlbench import slurm_nodes, systems

sys.path.insert(0, str(Path(__file__).resolve().parent / "slurm"))
from cluster import SingleNodeSlurm, missing_requirements  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SLURM_PROFILE = REPO / "profiles" / "slurm"
GENERIC_PROFILE = REPO / "profiles" / "cluster-generic"
STATUS_SCRIPT = GENERIC_PROFILE / "status-slurm.sh"
# Where a refusal says to lower a setting: in the profile (slurm_nodes.change_hint).
LOWER_CPUS = f"({slurm_nodes.change_hint('lower it', 'set-threads', 'set-resources')})"
LOWER_MEMORY = f"({slurm_nodes.change_hint('lower it', 'set-resources', 'default-resources')})"
FAST = ["--resources", "benchmark_slot=4"]  # cells run side by side: each has its own job

STUDY = {
    "frameworks": {"mxnet": {"python": "/nonexistent/dlbench-test/python"}},
    "studies": {
        "tiny": {"grid": {"model": "deep_mnist", "device": "cpu", "batch_size": [2, 4],
                          "num_batches": 2, "num_warmup_batches": 1}},
        "broken": {"description": "the interpreter is missing: a failed row everywhere",
                   "grid": {"framework": "mxnet", "model": "deep_mnist", "device": "cpu",
                            "num_batches": 2, "num_warmup_batches": 1}},
        "gpu": {"grid": {"model": "deep_mnist", "device": "gpu", "batch_size": 2,
                         "num_batches": 2, "num_warmup_batches": 1}},
    },
}


def snakemake_cmd(workdir, *args):
    # The target comes first: --configfile and --resources take several values.
    return [sys.executable, "-m", "snakemake", "results/benchmarks.parquet", "--snakefile",
            str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile",
            str(workdir / "config.yaml"), *args]


def new_workdir(tmp_path_factory, name, study=STUDY):
    workdir = tmp_path_factory.mktemp(name)
    (workdir / "config.yaml").write_text(yaml.safe_dump(study))
    return workdir


def cells_and_statuses(workdir):
    rows = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()
    return sorted((r["study"], r["cell_id"], r["status"]) for r in rows)


# Static checks of the profiles (no Slurm needed) -----------------------------------------


def plugin_options(module):
    settings = __import__(module, fromlist=["ExecutorSettings"]).ExecutorSettings
    return {f.name for f in dataclasses.fields(settings)}


@pytest.mark.parametrize("profile, plugin, prefix", [
    (SLURM_PROFILE, "snakemake_executor_plugin_slurm", "slurm-"),
    (GENERIC_PROFILE, "snakemake_executor_plugin_cluster_generic", "cluster-generic-"),
])
def test_profile_options_exist_in_the_installed_executor_plugin(profile, plugin, prefix):
    pytest.importorskip(plugin)
    config = yaml.safe_load((profile / "config.yaml").read_text())
    options = {k[len(prefix):].replace("-", "_") for k in config if k.startswith(prefix)}
    assert options and options <= plugin_options(plugin)


def test_slurm_profile_polls_squeue_without_account_and_keeps_gpus_on_one_node():
    config = yaml.safe_load((SLURM_PROFILE / "config.yaml").read_text())
    assert config["executor"] == "slurm" and config["keep-going"] is True
    assert config["slurm-status-command"] == "squeue" and config["slurm-no-account"] is True
    assert config["default-resources"]["nodes"] == 1
    for rule in ("benchmark_pytorch", "benchmark_mxnet"):
        assert config["set-resources"][rule]["cpus_per_gpu"] >= 1


FORGOTTEN = "slurm_load_jobs error: Invalid job id specified"
TIMED_OUT = "slurm_load_jobs error: Socket timed out on send/recv operation"


def fake_slurm_commands(tmp_path, scontrol_says, sacct_says=""):
    """Test doubles on a PATH of their own: `scontrol` printing a job in state
    ``scontrol_says``, or, for a line starting "slurm_load_jobs error:", failing with it;
    `sacct` printing ``sacct_says`` (None: no sacct at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if scontrol_says.startswith("slurm_load_jobs error:"):
        scontrol = f"echo '{scontrol_says}' >&2\nexit 1"
    else:
        scontrol = f"echo 'JobId=7 JobName=x UserId=a(1) JobState={scontrol_says} Reason=None'"
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\n{scontrol}\n")
    (bin_dir / "scontrol").chmod(0o755)
    if sacct_says is not None:
        (bin_dir / "sacct").write_text(f"#!/bin/sh\necho '{sacct_says}'\n")
        (bin_dir / "sacct").chmod(0o755)
    for tool in ("grep", "head", "cut"):  # what the script runs besides them
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return {**os.environ, "PATH": str(bin_dir)}


@pytest.mark.parametrize("scontrol_says, sacct_says, expected", [
    ("PENDING", "", "running"), ("RUNNING", "", "running"),
    ("COMPLETING", "", "running"), ("COMPLETED", "", "success"),
    ("FAILED", "", "failed"), ("CANCELLED", "", "failed"),
    ("OUT_OF_MEMORY", "", "failed"), ("TIMEOUT", "", "failed"),
    (FORGOTTEN, "COMPLETED", "success"),  # forgotten by the controller: accounting knows
    (FORGOTTEN, "CANCELLED by 0", "failed"),
    (FORGOTTEN, "", "failed"),  # nobody knows the job any more
    (FORGOTTEN, None, "failed"),  # no accounting either
    # The controller did not answer: that says nothing of the job, which may still run.
    (TIMED_OUT, None, "running"), (TIMED_OUT, "", "running"),
    (TIMED_OUT, "COMPLETED", "success"),
])
def test_cluster_generic_status_script_maps_slurm_states(tmp_path, scontrol_says,
                                                         sacct_says, expected):
    env = fake_slurm_commands(tmp_path, scontrol_says, sacct_says)
    out = subprocess.run([str(STATUS_SCRIPT), "7;cluster1"], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0 and out.stdout == f"{expected}\n"


# Against a real Slurm --------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm():
    why = missing_requirements()
    if why:
        pytest.skip(why)
    # 16 CPUs: the profiles ask 16 threads for a CPU cell and 8 per GPU for a GPU cell.
    cluster = SingleNodeSlurm(cpus=16, gpus=2)
    try:
        yield cluster.start()
    finally:
        cluster.stop()  # every daemon it started, also when a test failed


@pytest.fixture(scope="module")
def local_cells(tmp_path_factory):
    workdir = new_workdir(tmp_path_factory, "local")
    env = {k: v for k, v in os.environ.items() if k != "DLBENCH_GPU_ALLOCATION"}
    proc = subprocess.run(snakemake_cmd(workdir, "--cores", "2", *FAST), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return cells_and_statuses(workdir)


def test_local_run_has_ok_and_failed_cells(local_cells):
    statuses = {study: status for study, _, status in local_cells}
    assert len(local_cells) == 4 and statuses["tiny"] == "ok" and statuses["broken"] == "failed"


def job_records(cluster):
    """`scontrol -o show job` lines of every job the controller still knows."""
    out = subprocess.run(["scontrol", "-o", "show", "job"], env=cluster.env,
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.splitlines()


@pytest.mark.slow
def test_slurm_profile_gives_the_same_cells_as_a_local_run(slurm, local_cells, tmp_path_factory):
    workdir = new_workdir(tmp_path_factory, "slurm")
    proc = subprocess.run(
        snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE), *FAST,
                      "--slurm-init-seconds-before-status-checks", "2"),
        env=slurm.env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:] + slurm.logs()
    assert cells_and_statuses(workdir) == local_cells
    # Every cell was a Slurm job; the GPU cell asked for one GPU on one node and kept the
    # GPU Slurm gave it.
    records = job_records(slurm)
    assert sum("rule_benchmark_" in r for r in records) == len(local_cells)
    (gpu_job,) = [r for r in records if "gpu1_synthetic" in r]
    assert re.search(r"gres[:/]gpu[:=]1", gpu_job) and "NumNodes=1 " in gpu_job
    # A CPU cell's job asks the profile's set-threads, not the cores of the machine that
    # submits it (2 here).
    cpu_jobs = [r for r in records if "wildcards_tiny_" in r]
    assert cpu_jobs and all("CPUs/Task=16 " in r for r in cpu_jobs), cpu_jobs
    (log,) = (workdir / "results" / systems.default_label() / "gpu" / "logs").glob("*.log")
    assert "GPUs from the scheduler: CUDA_VISIBLE_DEVICES=0" in log.read_text()


@pytest.mark.slow
def test_cluster_generic_profile_gives_the_same_cells_as_a_local_run(slurm, local_cells,
                                                                      tmp_path_factory):
    workdir = new_workdir(tmp_path_factory, "generic")
    proc = subprocess.run(
        snakemake_cmd(workdir, "--profile", str(GENERIC_PROFILE), *FAST,
                      "--seconds-between-status-checks", "2"),
        env=slurm.env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:] + slurm.logs()
    assert cells_and_statuses(workdir) == local_cells
    logs = list((workdir / "results" / "cluster-logs").glob("benchmark_*.log"))
    assert len(logs) == len(local_cells)


@pytest.mark.slow
def test_a_cell_no_node_can_hold_is_refused_before_any_submission(slurm, tmp_path_factory):
    """The cluster's node has 2 GPUs: a 4-GPU cell, which sbatch would refuse (and Snakemake
    would then end the run without its table), is one line naming the study, from sinfo,
    and nothing is submitted."""
    workdir = new_workdir(tmp_path_factory, "too-wide", {"studies": {
        "fits": {"grid": {"model": "deep_mnist", "device": "gpu", "num_gpus": 2}},
        "wide": {"grid": {"model": "deep_mnist", "device": "gpu", "num_gpus": [1, 4]}}}})
    proc = subprocess.run(snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE)),
                          env=slurm.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert ("dlbench config error: study 'wide': num_gpus: 4 GPUs on a node, but no node of "
            "this Slurm cluster has more than 2 (sinfo); Slurm would refuse the job"
            ) in proc.stderr.splitlines()
    assert slurm.queue() == [] and not (workdir / "results").exists()


@pytest.mark.slow
def test_repeat_rounds_ask_slurm_what_the_first_round_asks_and_too_many_cpus_are_refused(
        slurm, tmp_path_factory):
    """A study with repeats: 2 has a rule per round (benchmark_pytorch, benchmark_pytorch_r1);
    the profile's set-threads and set-resources name the first. Both rounds' jobs must ask
    the same cores and time limit, or run-to-run spread would measure the allocation. Then
    set-threads above the node's 16 CPUs: one line before any submission (the job would
    otherwise wait in the queue for ever)."""
    workdir = new_workdir(tmp_path_factory, "repeats", {"studies": {"twice": {
        "repeats": 2, "grid": {"model": "deep_mnist", "device": "cpu", "batch_size": 2,
                               "num_batches": 2, "num_warmup_batches": 1}}}})
    proc = subprocess.run(
        snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE), *FAST,
                      "--slurm-init-seconds-before-status-checks", "2"),
        env=slurm.env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:] + slurm.logs()
    jobs = [r for r in job_records(slurm) if "wildcards_twice_" in r]
    assert len(jobs) == 2, jobs
    for job in jobs:
        assert "CPUs/Task=16 " in job and "TimeLimit=02:00:00 " in job, job

    workdir = new_workdir(tmp_path_factory, "too-many-cpus", {"studies": {"fat": {
        "grid": {"model": "deep_mnist", "device": "cpu", "batch_size": 3}}}})
    proc = subprocess.run(
        snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE),
                      "--set-threads", "benchmark_pytorch=32"),
        env=slurm.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert ("dlbench config error: study 'fat': benchmark_pytorch threads: 32 asks 32 CPUs "
            "on a node, but no node of this Slurm cluster has more than 16 (sinfo); the job "
            f"would wait in the queue for ever {LOWER_CPUS}") in proc.stderr.splitlines()
    assert slurm.queue() == [] and not (workdir / "results").exists()


@pytest.mark.slow
def test_memory_a_partition_or_a_time_slurm_would_refuse_is_refused_before_any_submission(
        slurm, tmp_path_factory):
    """The node has 64000 MB and one partition, 'debug'. sbatch refuses --mem=70000
    ("Memory specification can not be satisfied") and -p gpu ("invalid partition
    specified"), and Snakemake would end the run there; with the partition limited to an
    hour, the profile's 120-minute job would be queued for ever (PartitionTimeLimit). Each
    is one line naming the setting, and nothing is submitted."""
    workdir = new_workdir(tmp_path_factory, "too-much-memory", {"studies": {"big": {
        "grid": {"model": "deep_mnist", "device": "cpu", "batch_size": 5}}}})
    refusals = {
        ("--default-resources", "mem_mb=70000", "runtime=60"):
            "dlbench config error: study 'big': default-resources mem_mb: 70000 asks 70000 MB "
            "of memory on a node, but no node of this Slurm cluster has more than 64000 MB "
            f"(sinfo); Slurm would refuse the job {LOWER_MEMORY}",
        ("--set-resources", "benchmark_pytorch:slurm_partition=gpu"):
            "dlbench config error: study 'big': benchmark_pytorch slurm_partition asks for "
            "partition 'gpu', but this Slurm cluster has no such partition (sinfo lists "
            "debug); Slurm would refuse the job",
    }
    limit = ("scontrol", "update", "PartitionName=debug")
    subprocess.run([*limit, "MaxTime=60"], env=slurm.env, check=True, timeout=30)
    try:
        refusals[()] = (
            "dlbench config error: study 'big': benchmark_pytorch runtime asks 120 minutes, "
            "but no partition of this Slurm cluster allows more than 60 (sinfo); the job "
            f"would wait in the queue for ever {LOWER_MEMORY}")
        for args, line in refusals.items():
            proc = subprocess.run(
                snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE), *args),
                env=slurm.env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 1, proc.stderr[-3000:]
            assert line in proc.stderr.splitlines(), proc.stderr[-3000:]
            assert slurm.queue() == [] and not (workdir / "results").exists()
    finally:
        subprocess.run([*limit, "MaxTime=INFINITE"], env=slurm.env, check=True, timeout=30)


@pytest.mark.slow
def test_cpus_or_memory_beyond_the_partitions_limits_are_refused_before_any_submission(
        slurm, tmp_path_factory):
    """With the partition's MaxCPUsPerNode at 8 and MaxMemPerNode at 8000, sbatch accepts
    the profile's job (16 CPUs, 16000 MB) and Slurm holds it for ever (measured: reasons
    PartitionConfig and MaxMemPerLimit), which sinfo does not tell: read from scontrol
    show partition, each limit is one line, and nothing is submitted."""
    workdir = new_workdir(tmp_path_factory, "partition-limits", {"studies": {"held": {
        "grid": {"model": "deep_mnist", "device": "cpu", "batch_size": 6}}}})
    limit = ("scontrol", "update", "PartitionName=debug")
    refusals = {
        "MaxCPUsPerNode=8": (
            "dlbench config error: study 'held': benchmark_pytorch threads: 16 asks 16 CPUs "
            "on a node, but partition 'debug' allows at most 8 (MaxCPUsPerNode, scontrol show "
            f"partition); the job would wait in the queue for ever {LOWER_CPUS}"),
        "MaxMemPerNode=8000": (
            "dlbench config error: study 'held': default-resources mem_mb: 16000 asks 16000 "
            "MB of memory on a node, but partition 'debug' allows at most 8000 "
            "(MaxMemPerNode, scontrol show partition); the job would wait in the queue for "
            f"ever {LOWER_MEMORY}"),
    }
    try:
        for setting, line in refusals.items():
            subprocess.run([*limit, setting], env=slurm.env, check=True, timeout=30)
            proc = subprocess.run(snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE)),
                                  env=slurm.env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 1, proc.stderr[-3000:]
            assert line in proc.stderr.splitlines(), proc.stderr[-3000:]
            assert slurm.queue() == [] and not (workdir / "results").exists()
            subprocess.run([*limit, "MaxCPUsPerNode=UNLIMITED"], env=slurm.env, check=True,
                           timeout=30)
    finally:
        # MaxMemPerNode takes no UNLIMITED (scontrol refuses it): the node's memory.
        for setting in ("MaxCPUsPerNode=UNLIMITED", "MaxMemPerNode=64000"):
            subprocess.run([*limit, setting], env=slurm.env, check=True, timeout=30)


@pytest.mark.slow
def test_a_cell_outliving_its_jobs_runtime_is_a_failed_row_not_a_lost_job(slurm,
                                                                          tmp_path_factory):
    """Jobs of three minutes (runtime: 3): Slurm would end the job at its time limit, and
    the cell with it, without a result, on every run. The launcher stops the cell a minute
    earlier (after 120 s): a failed row naming its limit, and a line before the run. A
    runtime of one minute would leave the cell nothing: refused before any submission."""
    workdir = new_workdir(tmp_path_factory, "short-jobs", {"studies": {"endless": {
        "grid": {"model": "deep_mnist", "device": "cpu", "batch_size": 6,
                 "num_batches": 10**6, "num_warmup_batches": 1}}}})
    proc = subprocess.run(
        snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE), "--set-resources",
                      "benchmark_pytorch:runtime=1"),
        env=slurm.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert any(line.startswith(
        "dlbench config error: study 'endless': benchmark_pytorch runtime: 1 minutes leaves "
        "its cells 0 s") for line in proc.stderr.splitlines()), proc.stderr[-3000:]
    assert slurm.queue() == [] and not (workdir / "results").exists()
    proc = subprocess.run(
        snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE), "--set-resources",
                      "benchmark_pytorch:runtime=3",
                      "--slurm-init-seconds-before-status-checks", "2"),
        env=slurm.env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:] + slurm.logs()
    raise_it = slurm_nodes.change_hint(
        "to give them longer, raise benchmark_pytorch's runtime", "set-resources")
    assert ("dlbench config warning: study 'endless': timeout_s 3600 s is longer than its "
            "cluster jobs may run (benchmark_pytorch runtime: 3 minutes): its cells are "
            f"stopped after 120 s ({raise_it})") in proc.stderr.splitlines()
    ((study_name, _, status),) = cells_and_statuses(workdir)
    assert (study_name, status) == ("endless", "failed")
    row = pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()[0]
    assert row["error"].startswith("timed out after 120 s (timeout_s, or its cluster job's "
                                   "runtime less a margin where shorter)"), row["error"]


def processes_mentioning(text):
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_interrupting_a_slurm_run_cancels_its_jobs(slurm, tmp_path_factory):
    """A cell that would run for minutes (its interpreter sleeps); SIGINT to Snakemake
    must leave no job in the queue and no process of the cell behind."""
    workdir = tmp_path_factory.mktemp("cancel")
    sleeper = workdir / "sleepy-python"
    sleeper.write_text("#!/bin/sh\nexec sleep 300\n")
    sleeper.chmod(0o755)
    study = {"frameworks": {"mxnet": {"python": str(sleeper)}},
             "studies": {"slow": {"grid": {"framework": "mxnet", "model": "deep_mnist",
                                           "device": "cpu", "num_batches": 2}}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(study))
    proc = subprocess.Popen(
        snakemake_cmd(workdir, "--profile", str(SLURM_PROFILE),
                      "--slurm-init-seconds-before-status-checks", "2"),
        env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # As from a terminal: a test run started in the background (a shell's "&") hands
        # its children SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not processes_mentioning(str(sleeper)):  # the cell's runner is up
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the cell never started"
            time.sleep(0.5)
        assert slurm.queue()
        proc.send_signal(signal.SIGINT)
        # The jobs are cancelled at once (scancel); Snakemake itself exits once the Slurm
        # executor's status thread wakes, which sleeps up to its interval (it grows by 10 s
        # per check while no job ends, to at most 180 s): its exit may lag the cancelling.
        deadline = time.monotonic() + 60
        while ((slurm.queue() or processes_mentioning(str(sleeper)))
               and time.monotonic() < deadline):
            time.sleep(0.5)
        if slurm.queue():  # what Slurm and Snakemake said, for the failure's message
            states = subprocess.run(["squeue", "-h", "-o", "%i %T %r"], env=slurm.env,
                                    capture_output=True, text=True, timeout=20).stdout
            proc.kill()
            pytest.fail(f"still queued 60 s after SIGINT: {states}\n"
                        f"{proc.communicate(timeout=60)[0][-3000:]}")
        assert processes_mentioning(str(sleeper)) == []
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, output[-3000:]
